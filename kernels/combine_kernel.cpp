// The combine kernel: one source for the NPU (bisheng) and the CPU twin (g++).
// Protocol: shared/docs/combine-facts.md section 5; plane rule: section 4.
//
// Stage 1 (communication), core c serves every segment whose src_rank is c:
//   1. SDMA puts of the rows of its SDMA segments (SDMA-quiet every 256 issues);
//   2. per MTE segment: payload puts, quiet, then the status-ready flags;
//   3. SDMA-quiet, then the status flags of the SDMA rows by MTE, quiet.
//   A flag is only ever written by MTE and only after its payload is complete.
// Stage 2 (reduction), each PE: per local token wait for every valid slot's flag,
//   reduce in float32 in topk order, write x_out, reset the flags; barrier.
#include "combine_platform.h"
#include "combine_kernel.h"

namespace combine {

// UB map of one core (bytes). SDMA needs >= 64 B of UB for its bookkeeping.
constexpr uint32_t kUbSdmaOff = 0;
constexpr uint32_t kUbSdmaBytes = 256;
constexpr uint32_t kUbMteOff = 1024;
constexpr uint32_t kUbFlagOff = kUbMteOff + kUbMteStageBytes;
constexpr uint32_t kUbFlagBytes = 256;
constexpr uint32_t kUbAccOff = kUbFlagOff + kUbFlagBytes;
constexpr uint32_t kAccTile = 4096;  // float32 accumulator elements per tile (16 KiB)

template <typename T>
class CombineKernel {
public:
    __aicore__ inline CombineKernel(GM_ADDR expand_x, GM_ADDR assist_info, GM_ADDR ep_recv_count,
                                    GM_ADDR expert_ids, GM_ADDR expert_scales, GM_ADDR x_out, GM_ADDR window,
                                    uint32_t bs, uint32_t h, uint32_t topk, uint32_t expert_per_pe,
                                    uint32_t policy, uint64_t min_sdma_bytes)
        : expand_x_((__gm__ T*)expand_x), assist_((__gm__ int32_t*)assist_info),
          counts_((__gm__ int32_t*)ep_recv_count), expert_ids_((__gm__ int32_t*)expert_ids),
          scales_((__gm__ float*)expert_scales), x_out_((__gm__ T*)x_out), window_(window), bs_(bs), h_(h),
          topk_(topk), epp_(expert_per_pe), policy_(policy), min_sdma_bytes_(min_sdma_bytes) {
        my_pe_ = aclshmem_my_pe();
        pes_ = aclshmem_n_pes();
        core_ = AscendC::GetBlockIdx();
        cores_ = AscendC::GetBlockNum();
        const WindowLayout w = window_layout(bs, topk, h, sizeof(T));
        stride_ = w.stride;
        payload_ = window + w.payload_off;
        status_ = window + w.status_off;
        ready_src_ = (__gm__ int32_t*)(window + w.ready_src_off);
        row_bytes_ = uint64_t(h) * sizeof(T);
    }

    __aicore__ inline void Process() {
        SHMEMI_PROF_START(kProfFrameFullOp);
        SHMEMI_PROF_START(kProfFrameCommOnly);
        if (core_ < uint32_t(pes_)) SendSegmentsOf(core_);
        SHMEMI_PROF_END(kProfFrameCommOnly);
        ReduceTokens();
        aclshmem_barrier_all();  // nobody refills a window slot the owner is still reading
        SHMEMI_PROF_END(kProfFrameFullOp);
    }

private:
    __aicore__ inline uint32_t SegBegin(uint32_t seg) const { return seg == 0 ? 0u : uint32_t(counts_[seg - 1]); }
    __aicore__ inline uint32_t SegEnd(uint32_t seg) const { return uint32_t(counts_[seg]); }

    // Decision rule, combine-facts section 4, in integers (no division).
    __aicore__ inline bool UseSdma(uint32_t seg, uint64_t threshold_num, uint64_t threshold_den) const {
        if (policy_ != uint32_t(Policy::DualPlane)) return false;
        const uint32_t src_rank = seg % uint32_t(pes_);
        const uint64_t token_count = SegEnd(seg) - SegBegin(seg);
        const uint64_t segment_bytes = token_count * row_bytes_;
        return int(src_rank) != my_pe_ && token_count > 0 && segment_bytes >= min_sdma_bytes_ &&
               segment_bytes * threshold_den > threshold_num;
    }

    __aicore__ inline __gm__ T* SlotPayload(uint32_t slot) const { return (__gm__ T*)(payload_ + uint64_t(slot) * stride_); }
    __aicore__ inline __gm__ int32_t* SlotStatus(uint32_t slot) const {
        return (__gm__ int32_t*)(status_ + uint64_t(slot) * kStatusSlotBytes);
    }
    __aicore__ inline uint32_t RowSlot(uint32_t row) const {
        return uint32_t(assist_[row * 3 + 1]) * topk_ + uint32_t(assist_[row * 3 + 2]);
    }

    __aicore__ inline void PutFlags(uint32_t begin, uint32_t end, int dst_pe) {
        for (uint32_t row = begin; row < end; ++row) {
            aclshmemx_mte_put_nbi<int32_t>(SlotStatus(RowSlot(row)), ready_src_, ub_at<int32_t>(kUbFlagOff),
                                           kUbFlagBytes, kStatusSlotBytes / sizeof(int32_t), dst_pe, 0);
        }
    }

    __aicore__ inline void SendSegmentsOf(uint32_t src_rank) {
        uint64_t remote_rows = 0;
        for (uint32_t seg = 0; seg < epp_ * uint32_t(pes_); ++seg) {
            if (int(seg % uint32_t(pes_)) != my_pe_) remote_rows += SegEnd(seg) - SegBegin(seg);
        }
        const uint64_t threshold_num = remote_rows * row_bytes_;
        const uint64_t threshold_den = uint64_t(pes_ > 1 ? pes_ - 1 : 1) * epp_;
        const int dst_pe = int(src_rank);
        __ubuf__ T* sdma_ub = ub_at<T>(kUbSdmaOff);
        __ubuf__ T* mte_ub = ub_at<T>(kUbMteOff);

        // 1. SDMA payload first, so the copy engine runs while the core drives MTE.
        uint32_t sdma_rows = 0, outstanding = 0;
        for (uint32_t e = 0; e < epp_; ++e) {
            const uint32_t seg = e * uint32_t(pes_) + src_rank;
            if (!UseSdma(seg, threshold_num, threshold_den)) continue;
            for (uint32_t row = SegBegin(seg); row < SegEnd(seg); ++row) {
                aclshmemx_sdma_put_nbi<T>(SlotPayload(RowSlot(row)), expand_x_ + uint64_t(row) * h_, sdma_ub,
                                          kUbSdmaBytes, h_, dst_pe, 0);
                ++sdma_rows;
                if (++outstanding == kSdmaQuietEvery) {
                    aclshmemx_sdma_quiet<T>(sdma_ub, kUbSdmaBytes, 0);
                    outstanding = 0;
                }
            }
        }
        // 2. MTE segments: payload, quiet, then their flags.
        bool any_mte = false;
        for (uint32_t e = 0; e < epp_; ++e) {
            const uint32_t seg = e * uint32_t(pes_) + src_rank;
            const uint32_t begin = SegBegin(seg), end = SegEnd(seg);
            if (begin == end || UseSdma(seg, threshold_num, threshold_den)) continue;
            for (uint32_t row = begin; row < end; ++row) {
                aclshmemx_mte_put_nbi<T>(SlotPayload(RowSlot(row)), expand_x_ + uint64_t(row) * h_, mte_ub,
                                         kUbMteStageBytes, h_, dst_pe, 0);
            }
            aclshmem_quiet();
            PutFlags(begin, end, dst_pe);
            any_mte = true;
        }
        if (any_mte) aclshmem_quiet();
        // 3. SDMA flags, only once the copy engine has finished their payload.
        if (sdma_rows > 0) {
            aclshmemx_sdma_quiet<T>(sdma_ub, kUbSdmaBytes, 0);
            for (uint32_t e = 0; e < epp_; ++e) {
                const uint32_t seg = e * uint32_t(pes_) + src_rank;
                if (UseSdma(seg, threshold_num, threshold_den)) PutFlags(SegBegin(seg), SegEnd(seg), dst_pe);
            }
            aclshmem_quiet();
        }
    }

    __aicore__ inline bool SlotValid(uint32_t token, uint32_t k) const {
        const int32_t expert = expert_ids_[token * topk_ + k];
        return expert >= 0 && uint32_t(expert) < epp_ * uint32_t(pes_);  // else masked: nobody sends it
    }

    __aicore__ inline void ReduceTokens() {
        const uint32_t per_core = (bs_ + cores_ - 1) / cores_;
        const uint32_t t_begin = core_ * per_core;
        const uint32_t t_end = t_begin + per_core < bs_ ? t_begin + per_core : bs_;
        __ubuf__ float* acc = ub_at<float>(kUbAccOff);
        for (uint32_t t = t_begin; t < t_end; ++t) {
            for (uint32_t k = 0; k < topk_; ++k) {
                if (SlotValid(t, k)) aclshmem_signal_wait_until(SlotStatus(t * topk_ + k), ACLSHMEM_CMP_EQ, kStatusReady);
            }
            for (uint32_t k = 0; k < topk_; ++k) {
                if (SlotValid(t, k)) gm_invalidate(SlotPayload(t * topk_ + k), uint32_t(row_bytes_));
            }
            for (uint32_t h0 = 0; h0 < h_; h0 += kAccTile) {
                const uint32_t n = h_ - h0 < kAccTile ? h_ - h0 : kAccTile;
                for (uint32_t i = 0; i < n; ++i) acc[i] = 0.0f;
                for (uint32_t k = 0; k < topk_; ++k) {  // topk order, as the golden does
                    if (!SlotValid(t, k)) continue;
                    const float scale = scales_[t * topk_ + k];
                    __gm__ T* row = SlotPayload(t * topk_ + k) + h0;
                    for (uint32_t i = 0; i < n; ++i) acc[i] = acc[i] + static_cast<float>(row[i]) * scale;
                }
                __gm__ T* out = x_out_ + uint64_t(t) * h_ + h0;
                for (uint32_t i = 0; i < n; ++i) out[i] = static_cast<T>(acc[i]);
            }
            gm_flush(x_out_ + uint64_t(t) * h_, uint32_t(row_bytes_));
            for (uint32_t k = 0; k < topk_; ++k) {
                if (!SlotValid(t, k)) continue;
                __gm__ int32_t* flag = SlotStatus(t * topk_ + k);
                *flag = 0;
                gm_flush(flag, kStatusSlotBytes);
            }
        }
    }

    __gm__ T* expand_x_;
    __gm__ int32_t* assist_;
    __gm__ int32_t* counts_;
    __gm__ int32_t* expert_ids_;
    __gm__ float* scales_;
    __gm__ T* x_out_;
    GM_ADDR window_;
    GM_ADDR payload_ = nullptr;
    GM_ADDR status_ = nullptr;
    __gm__ int32_t* ready_src_ = nullptr;
    uint32_t bs_, h_, topk_, epp_, policy_;
    uint64_t min_sdma_bytes_;
    uint64_t stride_ = 0, row_bytes_ = 0;
    int my_pe_ = 0, pes_ = 1;
    uint32_t core_ = 0, cores_ = 1;
};

}  // namespace combine

#define COMBINE_KERNEL_ENTRY(NAME, T)                                                                          \
    extern "C" COMBINE_KERNEL_ATTRS __global__ __aicore__ void NAME(                                            \
        COMBINE_KERNEL_PLATFORM_PARAMS GM_ADDR expand_x, GM_ADDR assist_info, GM_ADDR ep_recv_count,           \
        GM_ADDR expert_ids, GM_ADDR expert_scales, GM_ADDR x_out, GM_ADDR window, uint32_t bs, uint32_t h,     \
        uint32_t topk, uint32_t expert_per_pe, uint32_t policy, uint64_t min_sdma) {                           \
        COMBINE_KERNEL_PROLOGUE(); /* combine_platform.h: the NPU's FFTS base address, nothing on the twin */  \
        combine::CombineKernel<T> op(expand_x, assist_info, ep_recv_count, expert_ids, expert_scales, x_out,  \
                                     window, bs, h, topk, expert_per_pe, policy, min_sdma);                    \
        op.Process();                                                                                          \
    }

COMBINE_KERNEL_ENTRY(combine_int32, int32_t)
COMBINE_KERNEL_ENTRY(combine_float16, combine_half)

namespace combine {

void launch_combine(Dtype dtype, uint32_t block_dim, void* stream, uint8_t* expand_x, uint8_t* assist_info,
                    uint8_t* ep_recv_count, uint8_t* expert_ids, uint8_t* expert_scales, uint8_t* x_out,
                    uint8_t* window, uint32_t bs, uint32_t h, uint32_t topk, uint32_t expert_per_pe,
                    Policy policy, uint64_t min_sdma_bytes) {
    const uint32_t pol = uint32_t(policy);
    if (dtype == Dtype::Int32) {
        COMBINE_KERNEL_LAUNCH(combine_int32, block_dim, stream, expand_x, assist_info, ep_recv_count, expert_ids,
                              expert_scales, x_out, window, bs, h, topk, expert_per_pe, pol, min_sdma_bytes);
    } else {
        COMBINE_KERNEL_LAUNCH(combine_float16, block_dim, stream, expand_x, assist_info, ep_recv_count, expert_ids,
                              expert_scales, x_out, window, bs, h, topk, expert_per_pe, pol, min_sdma_bytes);
    }
}

}  // namespace combine
