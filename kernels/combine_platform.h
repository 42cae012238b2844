// The one place where the NPU build (bisheng + CANN + SHMEM) and the CPU twin build
// (g++ + host/twin) differ for the kernel. Everything here is spelling, not logic:
// the kernel source is identical for both targets.
#pragma once

#include <cstdint>

#include "kernel_operator.h"  // Ascend C (real) or host/twin/include/kernel_operator.h
#include "aclshmem.h"         // SHMEM device API (real) or the twin's

#if defined(COMBINE_TARGET_TWIN)
#include "twin_platform.h"
using combine_half = _Float16;
// UB is a per-core 192 KiB scratch; the twin gives each core thread its own block.
template <typename T>
inline __ubuf__ T* ub_at(uint32_t byte_offset) { return reinterpret_cast<T*>(twin::ub_base() + byte_offset); }
// The twin's memory is coherent: nothing to clean or invalidate.
inline void gm_invalidate(__gm__ void*, uint32_t) {}
inline void gm_flush(__gm__ void*, uint32_t) {}
#define COMBINE_KERNEL_LAUNCH(kernel, block_dim, stream, ...) \
    twin::launch_kernel((block_dim), (stream), [&]() { kernel(__VA_ARGS__); })
// Kernel entry decorations that only the NPU needs (see below): nothing on the twin.
#define COMBINE_KERNEL_ATTRS
#define COMBINE_KERNEL_PLATFORM_PARAMS
#define COMBINE_KERNEL_PROLOGUE() ((void)0)
#else  // Ascend NPU (bisheng -xcce), cmake/npu.cmake
// Unverified on hardware: written from the public Ascend C and SHMEM documentation and
// examples (hicann/shmem); `combine-lab doctor` and tests/test_npu_hardware.py check it.
using combine_half = half;
// On the NPU a UB pointer is a byte offset into the core's unified buffer.
template <typename T>
__aicore__ inline __ubuf__ T* ub_at(uint32_t byte_offset) { return (__ubuf__ T*)(uintptr_t)byte_offset; }
// Scalar GM access goes through the core's data cache: invalidate the lines of what a remote
// MTE/SDMA wrote before reading it, and clean what the scalar unit wrote so that other PEs
// and the host see it. One 64-byte cache line at a time (SINGLE_CACHE_LINE, CACHELINE_OUT).
constexpr uint32_t kCacheLineBytes = 64;
__aicore__ inline void gm_invalidate(__gm__ void* p, uint32_t n) {
    const uintptr_t begin = (uintptr_t)p & ~uintptr_t(kCacheLineBytes - 1);
    const uintptr_t end = (uintptr_t)p + (n ? n : 1);
    AscendC::GlobalTensor<uint8_t> line;
    for (uintptr_t a = begin; a < end; a += kCacheLineBytes) {
        line.SetGlobalBuffer((__gm__ uint8_t*)a);
        AscendC::DataCacheCleanAndInvalid<uint8_t, AscendC::CacheLine::SINGLE_CACHE_LINE,
                                          AscendC::DcciDst::CACHELINE_OUT>(line);
    }
}
__aicore__ inline void gm_flush(__gm__ void* p, uint32_t n) { gm_invalidate(p, n); }

// SHMEM's cycle-profiling frames come from its source tree (src/device); without them the
// frames are empty and the perf rows report 0 us (cmake/npu.cmake adds the folder when present).
#if !defined(SHMEMI_PROF_START)
#if __has_include("utils/prof/shmemi_prof.h")
#include "utils/prof/shmemi_prof.h"
#else
#define SHMEMI_PROF_START(frame) ((void)(frame))
#define SHMEMI_PROF_END(frame) ((void)(frame))
#endif
#endif

// Without SDMA (CANN < 9.0.0, COMBINE_NPU_SDMA=0) the kernel is built MTE-only: the SDMA calls
// become no-ops that the mte_only policy never reaches, and the driver refuses dual_plane.
#if !COMBINE_NPU_SDMA
template <typename T>
__aicore__ inline void combine_no_sdma_put_nbi(__gm__ T*, __gm__ T*, __ubuf__ T*, uint32_t, uint32_t, int, uint32_t) {}
template <typename T>
__aicore__ inline void combine_no_sdma_quiet(__ubuf__ T*, uint32_t, uint32_t) {}
#define aclshmemx_sdma_put_nbi combine_no_sdma_put_nbi
#define aclshmemx_sdma_quiet combine_no_sdma_quiet
#endif

// A vector-only kernel (one AIV core per source rank): core ratio 0 cube : 1 vector.
#define COMBINE_KERNEL_ATTRS [[bisheng::core_ratio(0, 1)]]
// A2/A3 (dav-c220): SHMEM's device barrier syncs cores through FFTS, whose base address the
// host reads (rtGetC2cCtrlAddr, libruntime) and each kernel sets at entry. Ascend950: unused.
#define COMBINE_KERNEL_PLATFORM_PARAMS uint64_t combine_ffts_addr,
#if defined(COMBINE_NPU_FFTS) && COMBINE_NPU_FFTS
#define COMBINE_KERNEL_PROLOGUE() util_set_ffts_config(combine_ffts_addr)
#else
#define COMBINE_KERNEL_PROLOGUE() ((void)combine_ffts_addr)
#endif
extern "C" int rtGetC2cCtrlAddr(uint64_t* addr, uint32_t* len);
inline uint64_t combine_host_ffts_addr() {
#if defined(COMBINE_NPU_FFTS) && COMBINE_NPU_FFTS
    uint64_t addr = 0;
    uint32_t len = 0;
    return rtGetC2cCtrlAddr(&addr, &len) == 0 ? addr : 0;
#else
    return 0;
#endif
}
#define COMBINE_KERNEL_LAUNCH(kernel, block_dim, stream, ...) \
    kernel<<<(block_dim), nullptr, (stream)>>>(combine_host_ffts_addr(), __VA_ARGS__)
#endif
