// The one place where the NPU build (bisheng + CANN + SHMEM) and the CPU twin build
// (clang + host/twin) differ for the kernel. Both include the same headers by the same names
// (kernel_operator.h from Ascend C, shmem.h from SHMEM; the twin's stand in for them on the
// CPU). What differs is spelling, never logic: the kernel source is identical for both (one
// step aside: the SDMA quiet's receipt, which the twin's quiet stands in for; combine_sdma_quiet below).
#pragma once

#include <cstdint>

#include "kernel_operator.h"
#include "shmem.h"

// A UB pointer is a byte offset into the core's unified buffer, on both targets: on the NPU
// that is what the hardware addresses, on the twin the core thread's GS base is its UB and
// __ubuf__ is the GS-relative address space (host/twin/include/kernel_operator.h).
template <typename T>
__aicore__ inline __ubuf__ T* ub_at(uint32_t byte_offset) { return (__ubuf__ T*)(uintptr_t)byte_offset; }

// A vector-only kernel: core ratio 0 cube : 1 vector (an entry is
// `extern "C" COMBINE_KERNEL_ATTRS __global__ __aicore__`, SHMEM's ACLSHMEM_GLOBAL_VECTOR). The
// kernel is launched as bisheng launches it, `kernel<<<block_dim, nullptr, stream>>>(...)`, on
// both targets: a twin build compiles a copy with that line on the twin's launch
// (cmake/twin_launch.py); the NPU syntax check (clang in CUDA mode, tests/npu_decls) compiles it
// as it is written.
#define COMBINE_KERNEL_ATTRS [[bisheng::core_ratio(0, 1)]]

#if !defined(COMBINE_TARGET_TWIN)  // Ascend NPU (bisheng), cmake/npu.cmake; checked by tests/run/test_npu_syntax.py
// SHMEM's cycle-profiling frames come from its source tree (<shmem>/src/device and <shmem>/src,
// which cmake/npu.cmake puts on the include path, as shmem.h itself needs them); the twin has
// the same header.
// Without SDMA (CANN < 9.0.0, COMBINE_NPU_SDMA=0) the kernel is built MTE-only: the SDMA calls
// become no-ops that the classic policy never reaches, and the driver refuses doubleplane.
#if !COMBINE_NPU_SDMA
template <typename T>
__aicore__ inline void combine_no_sdma_put_nbi(__gm__ T*, __gm__ T*, __ubuf__ T*, uint32_t, uint32_t, int, uint32_t) {}
template <typename T>
__aicore__ inline void combine_no_sdma_quiet(__ubuf__ T*, uint32_t, uint32_t) {}
#define aclshmemx_sdma_put_nbi combine_no_sdma_put_nbi
#define aclshmemx_sdma_quiet combine_no_sdma_quiet
#endif
#endif
#include "utils/prof/shmemi_prof.h"

// Scalar GM access goes through the core's data cache: invalidate what a remote MTE/SDMA
// wrote before reading it, and clean what the scalar unit wrote so that others see it
// (one 64-byte line at a time). The empty asm statements keep the compiler from moving the
// clean across the loads and stores around it, as SHMEM wraps its dcci (docs/hardware-rules.md#7-status-slots-and-the-scalar-cache). The twin's memory is coherent; it checks what a clean of a shared line undoes.
constexpr uint32_t kCacheLineBytes = 64;
__aicore__ inline void gm_invalidate(__gm__ void* p, uint32_t n) {
    const uintptr_t begin = (uintptr_t)p & ~uintptr_t(kCacheLineBytes - 1);
    const uintptr_t end = (uintptr_t)p + (n ? n : 1);
    AscendC::GlobalTensor<uint8_t> line;
    for (uintptr_t a = begin; a < end; a += kCacheLineBytes) {
        line.SetGlobalBuffer((__gm__ uint8_t*)a);
        __asm__ __volatile__("" ::: "memory");
        AscendC::DataCacheCleanAndInvalid<uint8_t, AscendC::CacheLine::SINGLE_CACHE_LINE,
                                          AscendC::DcciDst::CACHELINE_OUT>(line);
        __asm__ __volatile__("" ::: "memory");
    }
}
__aicore__ inline void gm_flush(__gm__ void* p, uint32_t n) { gm_invalidate(p, n); }

// The SDMA quiet that says whether it worked. SHMEM's aclshmemx_sdma_quiet polls its completion
// flag 1,000,000 times and then returns as if every descriptor had run
// (src/device/gm2gm/engine/shmem_device_sdma.hpp): flags written after it could announce rows that
// never landed. combine_sdma_quiet is that quiet and returns false when the core's SDMA puts
// before it did not all land (docs/hardware-rules.md#16-sdma-quiet-receipts). On the NPU it proves
// it with a receipt: one more SDMA put, 32 B from `receipt_src` to this PE's own `receipt_dst`
// (two 64 B lines of this core), queued on the core's stream behind the payload (a stream runs its
// SQEs in order, which SHMEM's own quiet relies on), carrying a token the line has never held; the
// token there after the quiet means everything before it ran. On the twin the quiet knows what it
// waited for, and models the give-up where asked (COMBINE_TWIN_SDMA_QUIET_GIVEUP):
// the receipt is the one step the twin leaves out, so its counters stay the plan's.
#if !defined(COMBINE_TARGET_TWIN)
template <typename T>
__aicore__ inline bool combine_sdma_quiet(__ubuf__ T* ub, uint32_t ub_size, uint32_t sync_id,
                                          __gm__ int32_t* receipt_src, __gm__ int32_t* receipt_dst) {
#if COMBINE_NPU_SDMA
    gm_invalidate(receipt_dst, 32);
    const int32_t token = receipt_dst[0] + 1;  // never the line's value: the last receipt that landed, plus 1
    for (uint32_t w = 0; w < 8; ++w) receipt_src[w] = token;
    gm_flush(receipt_src, 32);
    aclshmemx_sdma_put_nbi<int32_t>(receipt_dst, receipt_src, (__ubuf__ int32_t*)ub, ub_size, 8, aclshmem_my_pe(),
                                    sync_id);
    aclshmemx_sdma_quiet<T>(ub, ub_size, sync_id);
    gm_invalidate(receipt_dst, 32);
    return receipt_dst[0] == token && receipt_dst[7] == token;
#else
    (void)ub, (void)ub_size, (void)sync_id, (void)receipt_src, (void)receipt_dst;
    return true;  // no SDMA in this build: no call reaches here (the driver refuses doubleplane)
#endif
}
#else
template <typename T>
inline bool combine_sdma_quiet(__ubuf__ T* ub, uint32_t ub_size, uint32_t sync_id, __gm__ int32_t* /*receipt_src*/,
                               __gm__ int32_t* /*receipt_dst*/, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
    aclshmemx_sdma_quiet<T>(ub, ub_size, sync_id, file, line);
    return twin::sdma_quiet_landed();
}
#endif
