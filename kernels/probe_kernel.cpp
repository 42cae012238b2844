// The probe kernel: microbenchmarks of the timing model's unknowns (docs/probe.md). One source
// for the NPU (bisheng) and the CPU twin (clang), with the combine kernel's platform header and
// its rules: UB regions that never overlap, a pipe flag before a staging buffer is refilled, the
// status block written by the scalar unit only after a quiet drained the puts that read it, a
// flag only after its payload's quiet. Every core of a launch runs one body and records the
// system cycle around it (ProbeRecord); the host turns the cycles into times.
// Every wait here is bounded by wait_budget cycles: a core that gives up says which slot, word
// and value in its record, and the host names the PE and core (host/probe_host.cpp).
#include "combine_platform.h"
#include "probe_kernel.h"

namespace probe {

class ProbeKernel {
public:
    __aicore__ inline ProbeKernel(GM_ADDR src, GM_ADDR window, GM_ADDR records, uint32_t kind, uint32_t role,
                                  uint32_t puts, uint64_t bytes, uint64_t max_bytes, uint32_t first, uint32_t peers,
                                  uint32_t buffers, uint32_t seq, uint64_t wait_budget)
        : kind_(kind), role_(role), puts_(puts), first_(first), peers_(peers), buffers_(buffers),
          seq_(seq), wait_budget_(wait_budget) {
        my_pe_ = aclshmem_my_pe();
        pes_ = aclshmem_n_pes();
        core_ = uint32_t(AscendC::GetBlockIdx());
        stride_ = row_stride(max_bytes);
        flags_ = window + flags_offset(max_bytes);
        src_row_ = (__gm__ int32_t*)(src + uint64_t(core_) * stride_);
        dst_row_ = (__gm__ int32_t*)(window + uint64_t(core_) * stride_);
        rec_ = (__gm__ ProbeRecord*)(records + uint64_t(core_) * kRecordBytes);
        elems_ = uint32_t(bytes / sizeof(int32_t));
    }

    __aicore__ inline void Process() {
        if (kind_ == uint32_t(Kind::Wait)) ReadySlot();
        FillStatusBlock(1);
        const int64_t start = AscendC::GetSystemCycle();
        switch (Kind(kind_)) {
            case Kind::Sdma: SdmaPuts(true); break;
            case Kind::SdmaIssue: SdmaPuts(false); break;
            case Kind::MtePut: MtePuts(); break;
            case Kind::Flag: FlagPuts(); break;
            case Kind::FlagRtt: RoundTrips(); break;
            case Kind::Quiet:
                for (uint32_t j = 0; j < puts_; ++j) aclshmem_quiet();
                break;
            case Kind::SdmaQuiet:
                for (uint32_t j = 0; j < puts_; ++j) aclshmemx_sdma_quiet<int32_t>(SdmaUb(), kUbSdmaBytes, kSdmaSyncId);
                break;
            case Kind::Wait: PollReady(); break;
        }
        const int64_t end = AscendC::GetSystemCycle();
        if (kind_ == uint32_t(Kind::SdmaIssue))  // the issue alone was timed: finish the puts
            aclshmemx_sdma_quiet<int32_t>(SdmaUb(), kUbSdmaBytes, kSdmaSyncId);
        rec_->start = start;
        rec_->end = end;
        rec_->core = int32_t(core_);
        gm_flush(rec_, sizeof(ProbeRecord));
    }

private:
    __aicore__ static inline __ubuf__ int32_t* SdmaUb() { return ub_at<int32_t>(kUbSdmaOff); }
    __aicore__ static inline __ubuf__ int32_t* StatusUb() { return ub_at<int32_t>(kUbStatusOff); }
    __aicore__ static inline __ubuf__ int32_t* StageUb(uint32_t b) { return ub_at<int32_t>(kUbStageOff + b * kUbStageBytes); }

    // Put j of this core goes to the j-th of its peers (`first` PEs after this one and on, wrapping).
    __aicore__ inline int PeerOf(uint32_t j) const {
        return int((uint32_t(my_pe_) + first_ + (core_ + j) % peers_) % uint32_t(pes_));
    }
    __aicore__ inline __gm__ int32_t* Slot(uint32_t core, uint32_t slot) const {
        return (__gm__ int32_t*)(flags_ + (uint64_t(core) * kSlotsPerCore + slot) * kFlagSlotBytes);
    }

    // The status block (the source of every flag put) holds `value` x 8; MTE3 may read it only
    // after the S->MTE3 flag. Called only when no put that reads it is in flight (after a quiet).
    __aicore__ inline void FillStatusBlock(int32_t value) {
        __ubuf__ int32_t* block = StatusUb();
        for (uint32_t i = 0; i < kStatusWords; ++i) block[i] = value;
        AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(kMteSyncId);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(kMteSyncId);
    }

    __aicore__ inline void SdmaPuts(bool quiet) {
        // Bounded by SQEs, as the combine kernel: quiet before a put would overflow the ring
        // (sdma_issue, without quiets, is planned within it: run/probe.py).
        const uint32_t sqes = uint32_t((uint64_t(elems_) * 4 + kSdmaSqeBytes - 1) / kSdmaSqeBytes);
        uint32_t outstanding = 0;
        for (uint32_t j = 0; j < puts_; ++j) {
            if (quiet && outstanding > 0 && outstanding + sqes > kSdmaQuietEvery) {
                aclshmemx_sdma_quiet<int32_t>(SdmaUb(), kUbSdmaBytes, kSdmaSyncId);
                outstanding = 0;
            }
            aclshmemx_sdma_put_nbi<int32_t>(dst_row_, src_row_, SdmaUb(), kUbSdmaBytes, elems_, PeerOf(j), kSdmaSyncId);
            outstanding += sqes;
            if (quiet && outstanding >= kSdmaQuietEvery) {
                aclshmemx_sdma_quiet<int32_t>(SdmaUb(), kUbSdmaBytes, kSdmaSyncId);
                outstanding = 0;
            }
        }
        if (quiet) aclshmemx_sdma_quiet<int32_t>(SdmaUb(), kUbSdmaBytes, kSdmaSyncId);
    }

    // One row per put through staging buffer j % buffers: a buffer is refilled only after the
    // MTE3->MTE2 flag set behind its last UB -> GM leg (single-buffered: every put waits for
    // the one before; double-buffered: the next row comes in while the last goes out).
    __aicore__ inline void MtePuts() {
        bool busy[kUbStages] = {false, false};
        for (uint32_t j = 0; j < puts_; ++j) {
            const uint32_t b = j % buffers_;
            const int32_t ev = int32_t(kStageEvent0 + b);
            if (busy[b]) AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(ev);
            aclshmemx_mte_put_nbi<int32_t>(dst_row_, src_row_, StageUb(b), kUbStageBytes, elems_, PeerOf(j),
                                           kStageEvent0 + b);
            AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(ev);
            busy[b] = true;
        }
        aclshmem_quiet();
        for (uint32_t b = 0; b < kUbStages; ++b) {
            if (busy[b]) AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(int32_t(kStageEvent0 + b));
        }
    }

    __aicore__ inline void FlagPuts() {
        for (uint32_t j = 0; j < puts_; ++j)
            aclshmemx_mte_put_nbi<int32_t>(Slot(core_, 0), StatusUb(), kStatusWords, PeerOf(j), kMteSyncId);
        aclshmem_quiet();
    }

    // One row, its quiet, then its flag (value `value`) to `pe`'s slot `slot` of this core.
    __aicore__ inline void RowThenFlag(int pe, uint32_t slot, int32_t value) {
        aclshmemx_mte_put_nbi<int32_t>(dst_row_, src_row_, StageUb(0), kUbStageBytes, elems_, pe, kStageEvent0);
        aclshmem_quiet();  // the row has landed, and the last flag put no longer reads the block
        FillStatusBlock(value);
        aclshmemx_mte_put_nbi<int32_t>(Slot(core_, slot), StatusUb(), kStatusWords, pe, kMteSyncId);
    }

    // The sender pings PE my_pe + first (its slot 0) and waits for the answer in its own slot 1;
    // the answerer waits for each ping and answers PE my_pe - first the same way. Values continue
    // from launch to launch (seq), so no slot is reset between them.
    __aicore__ inline void RoundTrips() {
        const bool send = role_ == kRoleSend;
        const int peer = int((uint32_t(my_pe_) + (send ? first_ : uint32_t(pes_) - first_)) % uint32_t(pes_));
        for (uint32_t i = 0; i < puts_ && !gave_up_; ++i) {
            const int32_t value = int32_t(seq_ * puts_ + i + 1);
            if (send) {
                RowThenFlag(peer, 0, value);
                WaitSlot(1, value);
            } else {
                if (!WaitSlot(0, value)) break;
                RowThenFlag(peer, 1, value);
            }
        }
        aclshmem_quiet();
    }

    // Slot 2 of this core, in this PE's window, ready: written by the scalar unit, cleaned out
    // of the data cache so that the polls read it from GM as they would a remote write.
    __aicore__ inline void ReadySlot() {
        __gm__ int32_t* flag = Slot(core_, 2);
        for (uint32_t w = 0; w < kStatusWords; ++w) flag[w] = 1;
        gm_flush(flag, kStatusWords * sizeof(int32_t));
    }

    __aicore__ inline void PollReady() {
        for (uint32_t j = 0; j < puts_ && !gave_up_; ++j) WaitSlot(2, 1);
    }

    // Waits for all 8 words of this core's slot `slot` to equal `want`, each for at most
    // wait_budget_ cycles (SHMEM's waits are unbounded); false after recording what it saw.
    __aicore__ inline bool WaitSlot(uint32_t slot, int32_t want) {
        if (gave_up_) return false;
        __gm__ int32_t* flag = Slot(core_, slot);
        for (uint32_t w = 0; w < kStatusWords; ++w) {
            const int64_t start = AscendC::GetSystemCycle();
            while (!aclshmem_int32_test(flag + w, ACLSHMEM_CMP_EQ, want)) {
                const int64_t waited = AscendC::GetSystemCycle() - start;
                if (waited > int64_t(wait_budget_)) {
                    gave_up_ = true;
                    rec_->timed_out = 1;
                    rec_->slot = int32_t(core_ * kSlotsPerCore + slot);
                    rec_->want = want;
                    rec_->seen = flag[w];
                    rec_->waited = waited;
                    rec_->word = int32_t(w);
                    return false;
                }
            }
        }
        return true;
    }

    GM_ADDR flags_ = nullptr;
    __gm__ int32_t* src_row_ = nullptr;
    __gm__ int32_t* dst_row_ = nullptr;
    __gm__ ProbeRecord* rec_ = nullptr;
    uint32_t kind_, role_, puts_;
    uint32_t first_, peers_, buffers_, seq_;
    uint64_t wait_budget_;
    uint64_t stride_ = 0;
    uint32_t elems_ = 0, core_ = 0;
    int my_pe_ = 0, pes_ = 1;
    bool gave_up_ = false;
};

}  // namespace probe

extern "C" COMBINE_KERNEL_ATTRS __global__ __aicore__ void combine_probe(
    uint64_t ffts_addr, GM_ADDR src, GM_ADDR window, GM_ADDR records, uint32_t kind, uint32_t role, uint32_t puts,
    uint64_t bytes, uint64_t max_bytes, uint32_t first, uint32_t peers, uint32_t buffers, uint32_t seq,
    uint64_t wait_budget) {
    util_set_ffts_config(ffts_addr);  // first thing, as SHMEM's kernels do
    probe::ProbeKernel op(src, window, records, kind, role, puts, bytes, max_bytes, first, peers, buffers, seq,
                          wait_budget);
    op.Process();
}

namespace probe {

void launch_probe(uint32_t cores, void* stream, uint8_t* src, uint8_t* window, uint8_t* records, Kind kind,
                  uint32_t role, uint32_t puts, uint64_t bytes, uint64_t max_bytes, uint32_t first, uint32_t peers,
                  uint32_t buffers, uint32_t seq, uint64_t wait_budget) {
    const uint64_t ffts = util_get_ffts_config();
    combine_probe<<<cores, nullptr, stream>>>(ffts, src, window, records, uint32_t(kind), role, puts, bytes, max_bytes,
                                              first, peers, buffers, seq, wait_budget);
}

}  // namespace probe
