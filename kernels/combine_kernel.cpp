// The combine kernel: one source for the NPU (bisheng) and the CPU twin (clang).
// Protocol: docs/protocol.md#5-kernel-protocol; plane rule: docs/decision-rule.md#1-the-rule; the hardware
// rules it keeps (UB staging, pipe flags, SDMA streams, core counts): docs/hardware-rules.md.
//
// Stage 1 (communication): the cores form groups of cores_per_rank (launch_block_dim); group g
// serves every segment whose src_rank is g, g + G, ... (G groups), core j of the group the j-th
// chunk of each segment's rows (ChunkBegin/ChunkEnd; with cores_per_rank 1 a core serves whole
// segments, the reference's structure):
//   1. SDMA puts of the rows of its SDMA segments (an SDMA quiet before 256 SQEs are outstanding);
//   2. per MTE segment: payload puts through two UB staging buffers in turn (an MTE3->MTE2
//      flag before a buffer is filled again), quiet, then the status-ready flags;
//   3. SDMA-quiet, then the status flags of the SDMA rows by MTE, quiet.
//   A flag is only ever written by MTE, only after its payload is complete, and only by the core
//   that put that payload.
// The segment variant (Policy::DualPlaneSegment, docs/variants.md#1-one-sdma-call-per-segment)
//   first lays out the receiving side by expert: core 0 of every PE places its own valid slots
//   (PlaceRows: positions, bases) and publishes each destination PE's bases to it by MTE, then a
//   ready flag; all cores meet in the core barrier. A sender waits for a receiver's bases
//   (HaveLayout, bounded) before it puts anything into that receiver's layout, where the rows of
//   a segment are contiguous: one SDMA call per chunk of an SDMA segment.
// Stage 2 (reduction), each PE, as Ascend C vector code (ReduceTokens): per local token wait
//   for all 8 words of every valid slot's flag (each wait bounded: a core that gives up tells
//   the host which slot in its diagnostics line), reduce in float32 in topk order (DataCopy,
//   Cast, Muls, Add on UB tiles, double-buffered), write x_out, reset the flags; then SHMEM's
//   soft core barrier. The host barriers all PEs after the stream sync, before the next launch.
//
// This file is the real kernel only. The self-test's broken kernels (docs/hardware-rules.md#12-broken-kernels)
// are patches of it, kernels/broken/<name>.patch, applied to a copy in the self-test's build folder.
#include <type_traits>

#include "combine_platform.h"
#include "combine_kernel.h"

namespace combine {

// Stage 2's conversions (asc-devkit Cast, A2/A3 combinations), chosen to round as the golden
// does (numpy, docs/protocol.md#3-reference-data-and-the-check): T -> float32 exactly (int32 beyond 2^24 half to even),
// float32 -> int32 toward zero (astype), float32 -> float16 and -> bfloat16 half to even (CAST_RINT).
// bfloat16 goes through this vector path only: Cast converts it on the vector unit, where the
// CANN 9.0 beta backend has no scalar bf16 cast.
template <typename T>
struct ReduceCast;
template <>
struct ReduceCast<int32_t> {
    static constexpr AscendC::RoundMode kIn = AscendC::RoundMode::CAST_RINT;
    static constexpr AscendC::RoundMode kOut = AscendC::RoundMode::CAST_TRUNC;
};
template <>
struct ReduceCast<half> {
    static constexpr AscendC::RoundMode kIn = AscendC::RoundMode::CAST_NONE;
    static constexpr AscendC::RoundMode kOut = AscendC::RoundMode::CAST_RINT;
};

template <>
struct ReduceCast<bfloat16_t> {
    static constexpr AscendC::RoundMode kIn = AscendC::RoundMode::CAST_NONE;
    static constexpr AscendC::RoundMode kOut = AscendC::RoundMode::CAST_RINT;
};

template <typename T>
class CombineKernel {
public:
    __aicore__ inline CombineKernel(GM_ADDR expand_x, GM_ADDR assist_info, GM_ADDR ep_recv_count,
                                    GM_ADDR expert_ids, GM_ADDR expert_scales, GM_ADDR x_out, GM_ADDR window,
                                    GM_ADDR diag, uint32_t bs, uint32_t h, uint32_t topk, uint32_t expert_per_pe,
                                    uint32_t policy, uint64_t min_sdma_bytes, uint64_t wait_budget,
                                    uint32_t cores_per_rank)
        : expand_x_((__gm__ T*)expand_x), assist_((__gm__ int32_t*)assist_info),
          counts_((__gm__ int32_t*)ep_recv_count), expert_ids_((__gm__ int32_t*)expert_ids),
          scales_((__gm__ float*)expert_scales), x_out_((__gm__ T*)x_out), diag_(diag), bs_(bs), h_(h), topk_(topk),
          epp_(expert_per_pe), policy_(policy), min_sdma_bytes_(min_sdma_bytes), wait_budget_(wait_budget) {
        my_pe_ = aclshmem_my_pe();
        pes_ = aclshmem_n_pes();
        core_ = uint32_t(AscendC::GetBlockIdx());
        cores_ = uint32_t(AscendC::GetBlockNum());
        cpr_ = cores_per_rank < 1 ? 1u : cores_per_rank;
        groups_ = cores_ / cpr_ > 0 ? cores_ / cpr_ : 1u;
        group_ = core_ / cpr_;
        chunk_ = core_ % cpr_;
        layout_ = policy == uint32_t(Policy::DualPlaneSegment);
        const WindowLayout w = layout_ ? window_layout(bs, topk, h, sizeof(T), uint32_t(pes_), expert_per_pe)
                                       : window_layout(bs, topk, h, sizeof(T));
        stride_ = w.stride;
        payload_ = window + w.payload_off;
        status_ = window + w.status_off;
        positions_ = (__gm__ int32_t*)(window + w.positions_off);
        bases_ = (__gm__ int32_t*)(window + w.bases_off);
        cursor_ = (__gm__ int32_t*)(window + w.cursor_off);
        inbox_ = window + w.inbox_off;
        inbox_stride_ = w.inbox_stride;
        row_bytes_ = uint64_t(h) * sizeof(T);
        receipt_ = (__gm__ int32_t*)(window + align_line(w.total_bytes) + uint64_t(core_ % kMaxSdmaBlocks) * 2 * 64);
    }

    __aicore__ inline void Process() {
        // static Tensor programming: set the core's state before any vector instruction
        AscendC::InitSocState();
        FillStatusBlock();
        SHMEMI_PROF_START(kProfFrameFullOp);
        SHMEMI_PROF_START(kProfFrameCommOnly);
        if (layout_) LayOut();
        SendSegments();
        SHMEMI_PROF_END(kProfFrameCommOnly);
        ReduceTokens();
        // full_op ends when every core of this PE is done. An AIV-only kernel has no hardware
        // SyncAll (that needs a MIX kernel): SHMEM's own core barrier on GM flags, as its AIV
        // examples end (docs/hardware-rules.md#9-cores-waves-and-barriers).
        aclshmemi_barrier_core_soft();
        if (layout_ && core_ == 0) ResetInbox();  // every core of this PE is done with the bases
        SHMEMI_PROF_END(kProfFrameFullOp);
    }

private:
    __aicore__ inline uint32_t SegBegin(uint32_t seg) const { return seg == 0 ? 0u : uint32_t(counts_[seg - 1]); }
    __aicore__ inline uint32_t SegEnd(uint32_t seg) const { return uint32_t(counts_[seg]); }
    // This core's chunk of the segment's rows: the rows split evenly over the group's cores.
    __aicore__ inline uint32_t ChunkAt(uint32_t seg, uint32_t j) const {
        const uint32_t b = SegBegin(seg);
        return b + uint32_t(uint64_t(SegEnd(seg) - b) * j / cpr_);
    }
    __aicore__ inline uint32_t ChunkBegin(uint32_t seg) const { return ChunkAt(seg, chunk_); }
    __aicore__ inline uint32_t ChunkEnd(uint32_t seg) const { return ChunkAt(seg, chunk_ + 1); }

    // Decision rule, docs/decision-rule.md#1-the-rule, in integers (no division).
    __aicore__ inline bool UseSdma(uint32_t seg) const {
        if (policy_ != uint32_t(Policy::DualPlane) && policy_ != uint32_t(Policy::DualPlaneSegment)) return false;
        const uint32_t src_rank = seg % uint32_t(pes_);
        const uint64_t token_count = SegEnd(seg) - SegBegin(seg);
        const uint64_t segment_bytes = token_count * row_bytes_;
        return int(src_rank) != my_pe_ && token_count > 0 && segment_bytes >= min_sdma_bytes_ &&
               segment_bytes * threshold_den_ > threshold_num_;
    }

    // Where the payload of status slot `slot` lies in this PE's window: slot `slot`, or in the
    // segment variant the slot's row of the layout by expert.
    __aicore__ inline __gm__ T* SlotPayload(uint32_t slot) const {
        const uint64_t row = layout_ ? uint64_t(positions_[slot]) : uint64_t(slot);
        return (__gm__ T*)(payload_ + row * stride_);
    }
    // Where row `row` of segment `seg` goes in the receiver's window: its slot, or in the segment
    // variant the receiver's layout row (the bases it published, HaveLayout first).
    __aicore__ inline __gm__ T* DstPayload(uint32_t seg, uint32_t row) const {
        const uint64_t at = layout_ ? uint64_t(InboxBase(seg % uint32_t(pes_), seg / uint32_t(pes_))) + (row - SegBegin(seg))
                                    : uint64_t(RowSlot(row));
        return (__gm__ T*)(payload_ + at * stride_);
    }
    __aicore__ inline __gm__ int32_t* SlotStatus(uint32_t slot) const {
        return (__gm__ int32_t*)(status_ + uint64_t(slot) * kStatusStride);
    }
    __aicore__ inline uint32_t RowSlot(uint32_t row) const {
        return uint32_t(assist_[row * 3 + 1]) * topk_ + uint32_t(assist_[row * 3 + 2]);
    }

    // The 32 B of ready values that status puts send (UB -> GM), written once by the scalar
    // unit; MTE3 may read them only after the S->MTE3 flag.
    __aicore__ inline void FillStatusBlock() {
        __ubuf__ int32_t* block = ub_at<int32_t>(kUbStatusOff);
        for (uint32_t i = 0; i < kStatusWords; ++i) block[i] = kStatusReady;
        AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(kMteSyncId);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(kMteSyncId);
    }

    __aicore__ inline void PutFlags(uint32_t begin, uint32_t end, int dst_pe) {
        __ubuf__ int32_t* block = ub_at<int32_t>(kUbStatusOff);
        for (uint32_t row = begin; row < end; ++row)
            aclshmemx_mte_put_nbi<int32_t>(SlotStatus(RowSlot(row)), block, kStatusWords, dst_pe, kMteSyncId);
    }

    // One payload row by MTE through the next staging buffer. Its UB -> GM leg stays in
    // flight after the call, so the buffer is filled again only after the MTE3->MTE2 flag
    // set behind that leg.
    __aicore__ inline void PutRowMte(uint32_t seg, uint32_t row, int dst_pe) {
        PutMte(DstPayload(seg, row), expand_x_ + uint64_t(row) * h_, h_, dst_pe);
    }

    // GM -> GM by MTE through the next staging buffer (`n` elements of T).
    template <typename U>
    __aicore__ inline void PutMte(__gm__ U* dst, __gm__ U* src, uint32_t n, int dst_pe) {
        const uint32_t buf = next_stage_;
        next_stage_ = (next_stage_ + 1) % kUbMteBuffers;
        if (stage_busy_[buf]) AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(int32_t(kStageEvent0 + buf));
        aclshmemx_mte_put_nbi<U>(dst, src, ub_at<U>(StageOff(buf)), kUbMteStageBytes, n, dst_pe, StageSyncId(buf));
        StageInFlight(buf);
    }

    // The MTE3->MTE2 flag behind the UB -> GM leg just issued from staging buffer `buf`.
    __aicore__ inline void StageInFlight(uint32_t buf) {
        AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(int32_t(kStageEvent0 + buf));
        stage_busy_[buf] = true;
    }

    // After a quiet every staging buffer is free: consume the flags still set.
    __aicore__ inline void ReleaseStaging() {
        for (uint32_t b = 0; b < kUbMteBuffers; ++b) {
            if (stage_busy_[b]) AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(int32_t(kStageEvent0 + b));
            stage_busy_[b] = false;
        }
    }

    // Where staging buffer `buf` and the SDMA scratch lie in UB (kernels/combine_kernel.h).
    __aicore__ static inline uint32_t StageOff(uint32_t buf) { return kUbMteOff + buf * kUbMteStageBytes; }
    __aicore__ static inline uint32_t SdmaOff() { return kUbSdmaOff; }

    // The sync_id the puts through staging buffer `buf` pair their own flags on.
    __aicore__ static inline uint32_t StageSyncId(uint32_t buf) { return kStageEvent0 + buf; }
    __aicore__ static inline uint32_t SdmaSyncId() { return kSdmaSyncId; }

    // The segments this core serves, in the order every phase of SendSegments walks them: source
    // ranks core_, core_ + cores_, ... (launch_block_dim), each with its epp_ experts, segment
    // e * pes + src_rank. `for (const Segment s : MySegments())`.
    struct Segment {
        uint32_t seg;
        int src_rank;
    };
    struct SegmentsEnd {};
    struct SegmentWalk {
        uint32_t rank, e, step, pes, epp;
        __aicore__ inline Segment operator*() const { return Segment{e * pes + rank, int(rank)}; }
        __aicore__ inline void operator++() {
            if (++e == epp) {
                e = 0;
                rank += step;
            }
        }
        __aicore__ inline bool operator!=(SegmentsEnd) const { return rank < pes && epp > 0; }
    };
    struct SegmentRange {
        SegmentWalk first;
        __aicore__ inline SegmentWalk begin() const { return first; }
        __aicore__ inline SegmentsEnd end() const { return SegmentsEnd{}; }
    };
    __aicore__ inline SegmentRange MySegments() const {
        return SegmentRange{SegmentWalk{group_, 0, groups_, uint32_t(pes_), epp_}};
    }

    // ---- the segment variant's layout (docs/variants.md#1-one-sdma-call-per-segment) ----

    // Core 0: place this PE's valid slots by expert, in (token, k) order within an expert, which
    // is the order of the rows of the matching segment on the expert's PE (docs/protocol.md#2-dispatch-layout):
    // bases[e] = valid slots of experts before e, positions[slot] = bases[e] + its rank; then
    // each destination PE d gets bases[d*epp, (d+1)*epp) in inbox slot my_pe, by MTE, and after
    // a quiet its ready flag. Scalar GM stores are cleaned before MTE or another core reads them.
    __aicore__ inline void PlaceRows() {
        const uint32_t experts = epp_ * uint32_t(pes_);
        for (uint32_t e = 0; e < experts; ++e) cursor_[e] = 0;
        for (uint32_t s = 0; s < bs_ * topk_; ++s) {
            const int32_t e = expert_ids_[s];
            if (SlotValid(s / topk_, s % topk_)) cursor_[e] = cursor_[e] + 1;
        }
        int32_t next = 0;
        for (uint32_t e = 0; e < experts; ++e) {
            const int32_t n = cursor_[e];
            bases_[e] = next;
            cursor_[e] = next;
            next += n;
        }
        for (uint32_t s = 0; s < bs_ * topk_; ++s) {
            if (!SlotValid(s / topk_, s % topk_)) {
                positions_[s] = -1;  // masked: nobody sends it, stage 2 never reads it
                continue;
            }
            const int32_t e = expert_ids_[s];
            positions_[s] = cursor_[e];
            cursor_[e] = cursor_[e] + 1;
        }
        gm_flush(positions_, bs_ * topk_ * 4);
        gm_flush(bases_, experts * 4);
        gm_flush(cursor_, experts * 4);
        for (int d = 0; d < pes_; ++d)
            PutMte<int32_t>(InboxBases(uint32_t(my_pe_)), bases_ + uint32_t(d) * epp_, epp_, d);
        aclshmem_quiet();  // the bases are complete before their ready flags
        ReleaseStaging();
        __ubuf__ int32_t* block = ub_at<int32_t>(kUbStatusOff);
        for (int d = 0; d < pes_; ++d)
            aclshmemx_mte_put_nbi<int32_t>(InboxReady(uint32_t(my_pe_)), block, kStatusWords, d, kMteSyncId);
        aclshmem_quiet();
    }

    // The segment variant's first step: core 0 places and publishes, then every core waits in the
    // core barrier (stage 2 reads the positions core 0 wrote).
    __aicore__ inline void LayOut() {
        if (core_ == 0) PlaceRows();
        aclshmemi_barrier_core_soft();
    }

    __aicore__ inline __gm__ int32_t* InboxReady(uint32_t receiver) const {
        return (__gm__ int32_t*)(inbox_ + uint64_t(receiver) * inbox_stride_);
    }
    __aicore__ inline __gm__ int32_t* InboxBases(uint32_t receiver) const {
        return (__gm__ int32_t*)(inbox_ + uint64_t(receiver) * inbox_stride_ + kStatusSlotBytes);
    }
    // The first layout row of local expert `e` at receiver `receiver` (after HaveLayout).
    __aicore__ inline int32_t InboxBase(uint32_t receiver, uint32_t e) const { return InboxBases(receiver)[e]; }

    // Waits (bounded) until receiver `receiver` has published its bases to this PE, then makes
    // them visible to this core's scalar loads. False when the wait gave up.
    __aicore__ inline bool HaveLayout(uint32_t receiver) {
        if (!WaitSlot(InboxReady(receiver), WaitKind::Bases, receiver, 0)) return false;
        gm_invalidate(InboxBases(receiver), epp_ * 4);
        return true;
    }

    // After the last core barrier: the inbox's ready flags back to 0 for the next launch. Every
    // receiver publishes to every PE (PlaceRows), also to one this PE sends nothing to and so
    // never waited for: each flag is reset only once its publish has landed (a bounded wait),
    // else a late publish would leave it set into the next launch.
    __aicore__ inline void ResetInbox() {
        for (uint32_t r = 0; r < uint32_t(pes_); ++r) {
            __gm__ int32_t* flag = InboxReady(r);
            if (!WaitSlot(flag, WaitKind::Bases, r, 0)) return;  // reported; the launch has failed
            for (uint32_t w = 0; w < kStatusWords; ++w) flag[w] = 0;
            gm_flush(flag, kStatusFlagBytes);
        }
    }

    __aicore__ inline void SendSegments() {
        uint64_t remote_rows = 0;
        for (uint32_t seg = 0; seg < epp_ * uint32_t(pes_); ++seg) {
            if (int(seg % uint32_t(pes_)) != my_pe_) remote_rows += SegEnd(seg) - SegBegin(seg);
        }
        threshold_num_ = remote_rows * row_bytes_;
        threshold_den_ = uint64_t(pes_ > 1 ? pes_ - 1 : 1) * epp_;
        __ubuf__ T* sdma_ub = ub_at<T>(SdmaOff());

        // 1. SDMA payload first, so the copy engine runs while the core drives MTE.
        uint32_t sdma_rows = 0, outstanding = 0;
        const bool one_call = layout_ && stride_ == row_bytes_;  // the chunk's rows back to back at both ends
        for (const Segment s : MySegments()) {
            if (!UseSdma(s.seg)) continue;
            const uint32_t begin = ChunkBegin(s.seg), end = ChunkEnd(s.seg);
            if (begin == end) continue;
            if (layout_ && !HaveLayout(uint32_t(s.src_rank))) continue;
            for (uint32_t row = begin; row < end; row = one_call ? end : row + 1) {
                const uint32_t n = one_call ? (end - begin) * h_ : h_;
                // Bounded by SQEs, not calls: quiet before this call's would overflow the ring.
                const uint32_t sqes = sdma_sqes(uint64_t(n) * sizeof(T));
                if (outstanding > 0 && outstanding + sqes > kSdmaQuietEvery) {
                    SdmaQuiet(sdma_ub);
                    outstanding = 0;
                }
                aclshmemx_sdma_put_nbi<T>(DstPayload(s.seg, row), expand_x_ + uint64_t(row) * h_, sdma_ub,
                                          kUbSdmaBytes, n, s.src_rank, SdmaSyncId());
                NoteSdmaRows(row, one_call ? end : row + 1, s.src_rank);
                outstanding += sqes;
                if (outstanding >= kSdmaQuietEvery) {
                    SdmaQuiet(sdma_ub);
                    outstanding = 0;
                }
            }
            sdma_rows += end - begin;
        }
        // 2. MTE segments: payload, quiet, then their flags.
        bool any_mte = false;
        for (const Segment s : MySegments()) {
            const uint32_t begin = ChunkBegin(s.seg), end = ChunkEnd(s.seg);
            if (begin == end || UseSdma(s.seg)) continue;
            if (layout_ && !HaveLayout(uint32_t(s.src_rank))) continue;
            for (uint32_t row = begin; row < end; ++row) PutRowMte(s.seg, row, s.src_rank);
            aclshmem_quiet();
            ReleaseStaging();
            PutFlags(begin, end, s.src_rank);  // this core's own chunk: the payload it put
            any_mte = true;
        }
        if (any_mte) aclshmem_quiet();
        // 3. SDMA flags, only once the copy engine has finished their payload.
        if (sdma_rows > 0) {
            SdmaQuiet(sdma_ub);
            for (const Segment s : MySegments()) {  // none over rows a quiet could not vouch for
                if (UseSdma(s.seg) && !sdma_lost_) PutFlags(ChunkBegin(s.seg), ChunkEnd(s.seg), s.src_rank);
            }
            aclshmem_quiet();
        }
    }

    __aicore__ inline bool SlotValid(uint32_t token, uint32_t k) const {
        const int32_t expert = expert_ids_[token * topk_ + k];
        return expert >= 0 && uint32_t(expert) < epp_ * uint32_t(pes_);  // else masked: nobody sends it
    }

    // Waits for all 8 words of a ready block (a 32 B write need not land at once), each for at most
    // wait_budget_ cycles (SHMEM's waits are unbounded); a core that gives up tells the host what it
    // waited for (`kind`: status slot `slot` of `expert`, or receiver `slot`'s inbox); false then.
    __aicore__ inline bool WaitSlot(__gm__ int32_t* flag, WaitKind kind, uint32_t slot, int32_t expert) {
        if (gave_up_) return false;
        for (uint32_t w = 0; w < kStatusWords; ++w) {
            const int64_t start = AscendC::GetSystemCycle();
            while (!aclshmem_int32_test(flag + w, ACLSHMEM_CMP_EQ, kStatusReady)) {
                const int64_t waited = AscendC::GetSystemCycle() - start;
                if (waited > int64_t(wait_budget_)) {
                    ReportWaitTimeout(kind, slot, expert, w, flag[w], waited);
                    return false;
                }
            }
        }
        return true;
    }

    // The rows [begin, end) of one SDMA call to `pe`, until the quiet that vouches for them.
    __aicore__ inline void NoteSdmaRows(uint32_t begin, uint32_t end, int pe) {
        if (quiet_rows_ == 0) {
            quiet_first_ = begin;
            quiet_pe_ = pe;
        }
        quiet_last_ = end - 1;
        quiet_rows_ += end - begin;
    }

    // An SDMA quiet that says whether it worked (combine_sdma_quiet): one that gave up leaves its
    // rows (the first such quiet's) in this core's diagnostics line, and no SDMA flag of this core
    // goes out after it (docs/hardware-rules.md#16-sdma-quiet-receipts).
    __aicore__ inline void SdmaQuiet(__ubuf__ T* sdma_ub) {
        const int64_t start = AscendC::GetSystemCycle();
        const bool landed = combine_sdma_quiet<T>(sdma_ub, kUbSdmaBytes, SdmaSyncId(), receipt_, receipt_ + 16);
        if (!landed && !sdma_lost_) {
            sdma_lost_ = true;
            ReportWaitTimeout(WaitKind::SdmaQuiet, quiet_first_, int32_t(quiet_last_), quiet_rows_, quiet_pe_,
                              AscendC::GetSystemCycle() - start);
        }
        quiet_rows_ = 0;
    }

    // This core's line of the diagnostics buffer: what it gave up waiting for (WaitTimeout).
    __aicore__ inline void ReportWaitTimeout(WaitKind kind, uint32_t slot, int32_t expert, uint32_t word, int32_t seen,
                                             int64_t waited) {
        gave_up_ = true;
        __gm__ WaitTimeout* rec = (__gm__ WaitTimeout*)(diag_ + uint64_t(core_) * kDiagRecordBytes);
        rec->core = int32_t(core_);
        rec->slot = int32_t(slot);
        rec->word = int32_t(word);
        rec->seen = seen;
        rec->expert = expert;
        rec->waited = waited;
        rec->kind = int32_t(kind);
        gm_flush(rec, sizeof(WaitTimeout));
    }

    // Stage 2 of this core: tokens [t_begin, t_end) (an even split over the cores). Each row is
    // cut into tiles of kReduceTile elements; per (token, tile): acc = 0, then for each valid
    // slot in topk order: in = the slot's tile (MTE2), cast = float(in), cast = cast * scale,
    // acc = acc + cast (V: a float32 product then a float32 sum, the golden's two roundings);
    // then out = T(acc) (V) and the x_out tile = out (MTE3). in[] and out[] are double-buffered:
    // the next slot's tile comes in while the vector unit works on this one, and a tile goes
    // out while the next one is reduced. No instruction of stage 2 loops over elements.
    //
    // Flags, as asc-devkit's static Tensor programming guide sets them by hand (no TPipe;
    // docs/zh/guide/.../基于Tensor的CPP编程/静态Tensor编程.md; the twin checks each,
    // host/twin/twin_pipes.cpp): MTE2_V before V reads a tile MTE2 brought in; V_MTE2 before
    // MTE2 refills a tile V still reads; V_MTE3 before MTE3 copies out what V wrote; MTE3_V
    // before V overwrites a tile MTE3 still copies out; PipeBarrier<PIPE_V> between vector
    // instructions that share a tile (docs/zh/api/SIMD-API/基础API/同步控制/核内同步/
    // PipeBarrier(ISASI).md: Mul reads what Add wrote, so a PipeBarrier<PIPE_V> goes between).
    struct Load {
        uint32_t t, h0, k;  // slot k of token t, the tile starting at column h0
    };

    __aicore__ inline uint32_t TileLen(uint32_t h0) const { return h_ - h0 < kReduceTile ? h_ - h0 : kReduceTile; }
    __aicore__ static inline int32_t ReduceEvent(uint32_t side) { return int32_t(kReduceEvent0 + side); }

    // The first load at or after slot `k` of tile `h0` of token `t`, in reduction order
    // (token, tile, slot); false when no valid slot is left before token `t_end`.
    __aicore__ inline bool FindLoad(Load& p, uint32_t t, uint32_t h0, uint32_t k, uint32_t t_end) const {
        while (t < t_end) {
            for (; k < topk_; ++k) {
                if (SlotValid(t, k)) {
                    p = Load{t, h0, k};
                    return true;
                }
            }
            k = 0;
            h0 += kReduceTile;
            bool any = false;
            for (uint32_t j = 0; j < topk_ && !any; ++j) any = SlotValid(t, j);
            if (h0 >= h_ || !any) {
                h0 = 0;
                ++t;
            }
        }
        return false;
    }

    // GM -> UB (MTE2) of load `p` into in[side], once its token's flags are all ready.
    __aicore__ inline void IssueLoad(const Load& p, const AscendC::LocalTensor<T>& in, uint32_t side) {
        if (p.t != waited_token_) {
            for (uint32_t k = 0; k < topk_; ++k) {
                const uint32_t slot = p.t * topk_ + k;
                if (SlotValid(p.t, k))  // masked slots: nobody sends them
                    WaitSlot(SlotStatus(slot), WaitKind::StatusSlot, slot, expert_ids_[slot]);
            }
            waited_token_ = p.t;
        }
        const uint32_t n = TileLen(p.h0);
        AscendC::GlobalTensor<T> row;
        row.SetGlobalBuffer(SlotPayload(p.t * topk_ + p.k) + p.h0, n);
        // in[side]: V has read its last tile
        AscendC::WaitFlag<AscendC::HardEvent::V_MTE2>(ReduceEvent(side));
        CopyTile(in, row, n);
        AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(ReduceEvent(side));
    }

    // One tile of n elements, GM -> UB (MTE2) or UB -> GM (MTE3). DataCopy moves whole 32-byte
    // blocks only; a tile of another length (the last of a row) goes by DataCopyPad as one block
    // of its exact bytes (GM -> UB with no padding values: the pad bytes are never read).
    template <typename Dst, typename Src>
    __aicore__ static inline void CopyTile(const Dst& dst, const Src& src, uint32_t n) {
        const uint32_t bytes = uint32_t(n * sizeof(T));
        const AscendC::DataCopyExtParams params(1, bytes, 0, 0, 0);
        if (bytes % 32 == 0) {
            AscendC::DataCopy(dst, src, n);
        } else if constexpr (std::is_same_v<Dst, AscendC::LocalTensor<T>>) {
            AscendC::DataCopyPad(dst, src, params, AscendC::DataCopyPadExtParams<T>());
        } else {
            AscendC::DataCopyPad(dst, src, params);
        }
    }

    // acc += float(in[side]) * scale, once in[side] has arrived.
    __aicore__ inline void AccumulateTile(const AscendC::LocalTensor<T>& in, uint32_t side,
                                          const AscendC::LocalTensor<float>& cast, const AscendC::LocalTensor<float>& acc,
                                          float scale, uint32_t n) {
        AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(ReduceEvent(side));
        AscendC::PipeBarrier<PIPE_V>();  // cast: the last Add still reads it
        AscendC::Cast(cast, in, ReduceCast<T>::kIn, n);
        // in[side] may be refilled
        AscendC::SetFlag<AscendC::HardEvent::V_MTE2>(ReduceEvent(side));
        AscendC::PipeBarrier<PIPE_V>();
        AscendC::Muls(cast, cast, scale, int32_t(n));
        AscendC::PipeBarrier<PIPE_V>();  // Add reads what Muls wrote
        AscendC::Add(acc, acc, cast, int32_t(n));
    }

    // x_out[t, h0 : h0 + n] = T(acc), through out[side].
    __aicore__ inline void WriteTile(const AscendC::LocalTensor<float>& acc, const AscendC::LocalTensor<T>& out,
                                     uint32_t side, uint32_t t, uint32_t h0, uint32_t n) {
        // out[side]: its last copy out is done
        AscendC::WaitFlag<AscendC::HardEvent::MTE3_V>(ReduceEvent(side));
        AscendC::PipeBarrier<PIPE_V>();  // acc: the last Add wrote it
        AscendC::Cast(out, acc, ReduceCast<T>::kOut, n);
        AscendC::SetFlag<AscendC::HardEvent::V_MTE3>(ReduceEvent(side));
        AscendC::WaitFlag<AscendC::HardEvent::V_MTE3>(ReduceEvent(side));
        AscendC::GlobalTensor<T> dst;
        dst.SetGlobalBuffer(x_out_ + uint64_t(t) * h_ + h0, n);
        CopyTile(dst, out, n);
        AscendC::SetFlag<AscendC::HardEvent::MTE3_V>(ReduceEvent(side));
    }

    __aicore__ inline void ReduceTokens() {
        const uint32_t per_core = (bs_ + cores_ - 1) / cores_;
        const uint32_t t_begin = core_ * per_core;
        const uint32_t t_end = t_begin + per_core < bs_ ? t_begin + per_core : bs_;
        if (t_begin >= t_end) return;
        // The segment variant: core 0's positions of these tokens (written before the core barrier).
        if (layout_) gm_invalidate(positions_ + t_begin * topk_, (t_end - t_begin) * topk_ * 4);
        using AscendC::LocalTensor;
        using AscendC::TPosition;
        const LocalTensor<T> in[kReduceBuffers] = {
            LocalTensor<T>(TPosition::VECIN, kUbReduceInOff, kReduceTile),
            LocalTensor<T>(TPosition::VECIN, kUbReduceInOff + kReduceTileBytes, kReduceTile)};
        const LocalTensor<float> cast(TPosition::VECCALC, kUbReduceCastOff, kReduceTile);
        const LocalTensor<float> acc(TPosition::VECCALC, kUbReduceAccOff, kReduceTile);
        const LocalTensor<T> out[kReduceBuffers] = {
            LocalTensor<T>(TPosition::VECOUT, kUbReduceOutOff, kReduceTile),
            LocalTensor<T>(TPosition::VECOUT, kUbReduceOutOff + kReduceTileBytes, kReduceTile)};
        for (uint32_t b = 0; b < kReduceBuffers; ++b) {  // every side starts free
            AscendC::SetFlag<AscendC::HardEvent::V_MTE2>(ReduceEvent(b));
            AscendC::SetFlag<AscendC::HardEvent::MTE3_V>(ReduceEvent(b));
        }
        waited_token_ = t_end;  // none yet
        Load cur{};
        bool have = FindLoad(cur, t_begin, 0, 0, t_end);
        uint32_t in_side = 0, out_side = 0;
        if (have) IssueLoad(cur, in[0], 0);
        for (uint32_t t = t_begin; t < t_end; ++t) {
            for (uint32_t h0 = 0; h0 < h_; h0 += kReduceTile) {
                const uint32_t n = TileLen(h0);
                AscendC::PipeBarrier<PIPE_V>();  // acc: the last tile's Cast to out still reads it
                AscendC::Duplicate(acc, 0.0f, int32_t(n));  // acc starts at +0, as the golden's
                while (have && cur.t == t && cur.h0 == h0) {  // the valid slots, in topk order
                    Load next{};
                    const bool more = FindLoad(next, cur.t, cur.h0, cur.k + 1, t_end);
                    // The next tile comes in (MTE2) while V works on this one. Within a token its
                    // flags are already waited for; the first tile of a new token is loaded after
                    // V's work is queued, so that waiting for its flags never holds V back.
                    const bool early = more && next.t == cur.t;
                    if (early) IssueLoad(next, in[in_side ^ 1], in_side ^ 1);
                    AccumulateTile(in[in_side], in_side, cast, acc, scales_[t * topk_ + cur.k], n);
                    if (more && !early) IssueLoad(next, in[in_side ^ 1], in_side ^ 1);
                    in_side ^= 1;
                    cur = next;
                    have = more;
                }
                WriteTile(acc, out[out_side], out_side, t, h0, n);
                out_side ^= 1;
            }
            for (uint32_t k = 0; k < topk_; ++k) {  // ready for the next launch
                if (!SlotValid(t, k)) continue;
                __gm__ int32_t* flag = SlotStatus(t * topk_ + k);
                for (uint32_t w = 0; w < kStatusWords; ++w) flag[w] = 0;
                gm_flush(flag, kStatusFlagBytes);
            }
        }
        for (uint32_t b = 0; b < kReduceBuffers; ++b) {  // pair the flags still set
            AscendC::WaitFlag<AscendC::HardEvent::V_MTE2>(ReduceEvent(b));
            AscendC::WaitFlag<AscendC::HardEvent::MTE3_V>(ReduceEvent(b));
        }
        AscendC::PipeBarrier<PIPE_ALL>();  // x_out complete before the kernel ends
    }

    __gm__ T* expand_x_;
    __gm__ int32_t* assist_;
    __gm__ int32_t* counts_;
    __gm__ int32_t* expert_ids_;
    __gm__ float* scales_;
    __gm__ T* x_out_;
    GM_ADDR diag_;
    GM_ADDR payload_ = nullptr;
    GM_ADDR status_ = nullptr;
    uint32_t bs_, h_, topk_, epp_, policy_;
    uint64_t min_sdma_bytes_;
    uint64_t wait_budget_;
    uint64_t stride_ = 0, row_bytes_ = 0;
    uint64_t threshold_num_ = 0, threshold_den_ = 1;
    int my_pe_ = 0, pes_ = 1;
    uint32_t core_ = 0, cores_ = 1;
    uint32_t cpr_ = 1, groups_ = 1, group_ = 0, chunk_ = 0;  // cores per source rank, this core's group and chunk
    bool layout_ = false;                                      // the segment variant's layout by expert
    __gm__ int32_t* positions_ = nullptr;
    __gm__ int32_t* bases_ = nullptr;
    __gm__ int32_t* cursor_ = nullptr;
    GM_ADDR inbox_ = nullptr;
    uint64_t inbox_stride_ = 0;
    uint32_t next_stage_ = 0;
    uint32_t waited_token_ = 0;  // stage 2: the last token whose flags this core waited for
    bool stage_busy_[kUbMteBuffers] = {false, false};
    bool gave_up_ = false;  // a wait of this core timed out: it waits for nothing more in this launch
    __gm__ int32_t* receipt_ = nullptr;  // this core's two receipt lines (combine_sdma_quiet)
    uint32_t quiet_first_ = 0, quiet_last_ = 0, quiet_rows_ = 0;  // SDMA rows since the last quiet
    int quiet_pe_ = 0;                                            // the PE of the first of them
    bool sdma_lost_ = false;  // an SDMA quiet of this core gave up: its SDMA rows are not flagged
};

}  // namespace combine

#define COMBINE_KERNEL_ENTRY(NAME, T)                                                                          \
    extern "C" COMBINE_KERNEL_ATTRS __global__ __aicore__ void NAME(                                            \
        uint64_t ffts_addr, GM_ADDR expand_x, GM_ADDR assist_info, GM_ADDR ep_recv_count, GM_ADDR expert_ids,  \
        GM_ADDR expert_scales, GM_ADDR x_out, GM_ADDR window, GM_ADDR diag, uint32_t bs, uint32_t h,           \
        uint32_t topk, uint32_t expert_per_pe, uint32_t policy, uint64_t min_sdma, uint64_t wait_budget,       \
        uint32_t cores_per_rank) {                                                                             \
        util_set_ffts_config(ffts_addr); /* first thing, as SHMEM's kernels do */                              \
        combine::CombineKernel<T> op(expand_x, assist_info, ep_recv_count, expert_ids, expert_scales, x_out,  \
                                     window, diag, bs, h, topk, expert_per_pe, policy, min_sdma, wait_budget,  \
                                     cores_per_rank);                                                          \
        op.Process();                                                                                          \
    }

COMBINE_KERNEL_ENTRY(combine_int32, int32_t)
COMBINE_KERNEL_ENTRY(combine_float16, half)
COMBINE_KERNEL_ENTRY(combine_bfloat16, bfloat16_t)

namespace combine {

void launch_combine(Dtype dtype, uint32_t block_dim, void* stream, uint8_t* expand_x, uint8_t* assist_info,
                    uint8_t* ep_recv_count, uint8_t* expert_ids, uint8_t* expert_scales, uint8_t* x_out,
                    uint8_t* window, uint8_t* diag, uint32_t bs, uint32_t h, uint32_t topk, uint32_t expert_per_pe,
                    Policy policy, uint64_t min_sdma_bytes, uint64_t wait_budget, uint32_t cores_per_rank) {
    const uint32_t pol = uint32_t(policy);
    const uint64_t ffts = util_get_ffts_config();
    if (dtype == Dtype::Int32) {
        combine_int32<<<block_dim, nullptr, stream>>>(ffts, expand_x, assist_info, ep_recv_count, expert_ids,
                                                      expert_scales, x_out, window, diag, bs, h, topk, expert_per_pe,
                                                      pol, min_sdma_bytes, wait_budget, cores_per_rank);
    } else if (dtype == Dtype::Float16) {
        combine_float16<<<block_dim, nullptr, stream>>>(ffts, expand_x, assist_info, ep_recv_count, expert_ids,
                                                        expert_scales, x_out, window, diag, bs, h, topk,
                                                        expert_per_pe, pol, min_sdma_bytes, wait_budget, cores_per_rank);
    } else {
        combine_bfloat16<<<block_dim, nullptr, stream>>>(ffts, expand_x, assist_info, ep_recv_count, expert_ids,
                                                         expert_scales, x_out, window, diag, bs, h, topk,
                                                         expert_per_pe, pol, min_sdma_bytes, wait_budget, cores_per_rank);
    }
}

}  // namespace combine
