// The one place where the NPU build (bisheng + CANN + SHMEM) and the CPU twin build
// (clang + host/twin) differ for the kernel. Both include the same headers by the same names
// (kernel_operator.h from Ascend C, shmem.h from SHMEM; the twin's stand in for them on the
// CPU). What differs is spelling, never logic: the kernel source is identical for both.
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
