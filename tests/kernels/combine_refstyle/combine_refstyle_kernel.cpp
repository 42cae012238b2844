// A small MTE-only combine in the style of SHMEM's examples (tests/run/test_kernel_source.py): UB
// pointers as raw integers, ACLSHMEM_DEVICE helpers, the profiling header, an AIV-only entry per
// dtype launched with <<<block_dim, nullptr, stream>>>, scalar loops for the reduction and SHMEM's
// soft core barrier at the end. Core c sends the rows whose source rank is c: per row, the payload
// through a UB staging buffer, a quiet, the 32 B status block from UB, a quiet. Stage 2 waits for
// the valid slots only (a masked slot is never sent), reduces in float32 in topk order and resets
// the slots. Window: bs*k payload slots of align_up(h*sizeof(T), 32) B, then bs*k status slots of
// 32 B. Written for this project's tests; with REFSTYLE_WAIT_ALL defined it waits for every slot,
// masked ones too, and so hangs on a case with masked slots (the test of that report).
#include "combine_kernel.h"
#include "kernel_operator.h"
#include "shmem.h"
#include "utils/prof/shmemi_prof.h"

#include <type_traits>

#include "opdev/fp16_t.h"

using namespace AscendC;

namespace {

constexpr uint32_t kReadyUb = 0;           // 8 x int32 ready block
constexpr uint32_t kStageUb = 1024;        // payload staging
constexpr uint32_t kStageBytes = 96 * 1024;
constexpr int64_t kSlotInts = 8;

ACLSHMEM_DEVICE int64_t RoundUp32(int64_t v) { return (v + 31) / 32 * 32; }

ACLSHMEM_DEVICE int64_t SegFirst(__gm__ int32_t *counts, int64_t s) { return s == 0 ? 0 : counts[s - 1]; }

template <typename T>
ACLSHMEM_DEVICE void RefstyleCombine(uint64_t ffts, __gm__ T *expand_x, __gm__ int32_t *assist,
                                     __gm__ int32_t *counts, __gm__ int32_t *ids, __gm__ float *scales,
                                     __gm__ T *x_out, __gm__ uint8_t *window, int bs, int h, int k, int experts,
                                     int perf_mode, int full_frame, int comm_frame)
{
    util_set_ffts_config(ffts);
    const int64_t core = GetBlockIdx();
    const int64_t pes = aclshmem_n_pes();
    const int64_t local_experts = experts / pes;
    const int64_t stride = RoundUp32(int64_t(h) * int64_t(sizeof(T))) / int64_t(sizeof(T));
    __gm__ T *payload = (__gm__ T *)window;
    __gm__ int32_t *status = (__gm__ int32_t *)(window + int64_t(bs) * k * stride * int64_t(sizeof(T)));
    __ubuf__ T *stage = (__ubuf__ T *)(static_cast<uint64_t>(kStageUb));
    __ubuf__ int32_t *ready = (__ubuf__ int32_t *)(static_cast<uint64_t>(kReadyUb));
    for (int64_t i = 0; i < kSlotInts; ++i) {
        ready[i] = 1;
    }
    SetFlag<HardEvent::S_MTE3>(EVENT_ID1);
    WaitFlag<HardEvent::S_MTE3>(EVENT_ID1);
    if (perf_mode != 0) {
        SHMEMI_PROF_START(full_frame);
        SHMEMI_PROF_START(comm_frame);
    }
    if (core < pes) {
        for (int64_t e = 0; e < local_experts; ++e) {
            const int64_t seg = e * pes + core;
            for (int64_t row = SegFirst(counts, seg); row < counts[seg]; ++row) {
                const int64_t slot = int64_t(assist[row * 3 + 1]) * k + assist[row * 3 + 2];
                aclshmemx_mte_put_nbi(payload + slot * stride, expand_x + row * h, stage, kStageBytes, h, core,
                                      EVENT_ID1);
                aclshmem_quiet();
                aclshmemx_mte_put_nbi(status + slot * kSlotInts, ready, uint32_t(kSlotInts), core, EVENT_ID1);
                aclshmem_quiet();
            }
        }
    }
    aclshmem_quiet();
    if (perf_mode != 0) {
        SHMEMI_PROF_END(comm_frame);
    }
    for (int64_t t = core; t < bs; t += GetBlockNum()) {
        for (int64_t j = 0; j < k; ++j) {
            const int32_t expert = ids[t * k + j];
#ifndef REFSTYLE_WAIT_ALL
            if (expert < 0 || expert >= experts) {
                continue;
            }
#endif
            for (int64_t w = 0; w < kSlotInts; ++w) {
                aclshmem_signal_wait_until(status + (t * k + j) * kSlotInts + w, ACLSHMEM_CMP_EQ, 1);
            }
        }
        for (int64_t c = 0; c < h; ++c) {
            float acc = 0.0F;
            for (int64_t j = 0; j < k; ++j) {
                const int32_t expert = ids[t * k + j];
                if (expert >= 0 && expert < experts) {
                    acc += static_cast<float>(payload[(t * k + j) * stride + c]) * scales[t * k + j];
                }
            }
            x_out[t * h + c] = static_cast<T>(acc);
        }
        for (int64_t j = 0; j < k * kSlotInts; ++j) {
            status[t * k * kSlotInts + j] = 0;
        }
    }
    aclshmemi_barrier_core_soft();
    if (perf_mode != 0) {
        SHMEMI_PROF_END(full_frame);
    }
}

}  // namespace

#define REFSTYLE_ENTRY(type)                                                                                      \
    extern "C" [[bisheng::core_ratio(0, 1)]] __global__ __aicore__ void RefstyleCombine_##type(                \
        uint64_t ffts, GM_ADDR expand_x, GM_ADDR assist, GM_ADDR counts, GM_ADDR ids, GM_ADDR scales,              \
        GM_ADDR x_out, GM_ADDR window, int bs, int h, int k, int experts, int perf_mode, int full_frame,            \
        int comm_frame)                                                                                            \
    {                                                                                                              \
        RefstyleCombine<type>(ffts, (__gm__ type *)expand_x, (__gm__ int32_t *)assist, (__gm__ int32_t *)counts,  \
                              (__gm__ int32_t *)ids, (__gm__ float *)scales, (__gm__ type *)x_out,                 \
                              (__gm__ uint8_t *)window, bs, h, k, experts, perf_mode, full_frame, comm_frame);     \
    }

REFSTYLE_ENTRY(int32_t)
REFSTYLE_ENTRY(float16_t)

template <class T>
void combine_demo(uint32_t block_dim, void *stream, uint64_t fftsAddr, uint8_t *expand_x, int32_t *assist_info,
                  int32_t *recv_count, int32_t *expert_ids, float *expert_scales, uint8_t *x_out, uint8_t *window,
                  int bs, int h, int k, int moe_expert_num, int magic, int perf_mode, int full_frame_id,
                  int comm_frame_id, int warmup_count, int loop_count)
{
    (void)magic;
    (void)warmup_count;
    (void)loop_count;
    uint8_t *assist = reinterpret_cast<uint8_t *>(assist_info);
    uint8_t *counts = reinterpret_cast<uint8_t *>(recv_count);
    uint8_t *ids = reinterpret_cast<uint8_t *>(expert_ids);
    uint8_t *scales = reinterpret_cast<uint8_t *>(expert_scales);
    if (std::is_same<T, int32_t>::value) {
        RefstyleCombine_int32_t<<<block_dim, nullptr, stream>>>(fftsAddr, expand_x, assist, counts, ids, scales,
                                                                x_out, window, bs, h, k, moe_expert_num,
                                                                perf_mode, full_frame_id, comm_frame_id);
    } else {
        RefstyleCombine_float16_t<<<block_dim, nullptr,
                                    stream>>>(fftsAddr, expand_x, assist, counts, ids, scales, x_out, window, bs,
                                              h, k, moe_expert_num, perf_mode, full_frame_id, comm_frame_id);
    }
}

template void combine_demo<int32_t>(uint32_t, void *, uint64_t, uint8_t *, int32_t *, int32_t *, int32_t *, float *,
                                    uint8_t *, uint8_t *, int, int, int, int, int, int, int, int, int, int);
template void combine_demo<op::fp16_t>(uint32_t, void *, uint64_t, uint8_t *, int32_t *, int32_t *, int32_t *,
                                       float *, uint8_t *, uint8_t *, int, int, int, int, int, int, int, int, int,
                                       int);
