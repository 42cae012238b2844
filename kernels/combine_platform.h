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
#else  // Ascend NPU (bisheng -xcce)
using combine_half = half;
// On the NPU a UB pointer is a byte offset into the core's unified buffer.
template <typename T>
__aicore__ inline __ubuf__ T* ub_at(uint32_t byte_offset) { return (__ubuf__ T*)(uintptr_t)byte_offset; }
// Scalar GM access goes through the data cache: invalidate before reading what a remote
// MTE/SDMA wrote, clean after writing what the host will read.
__aicore__ inline void gm_invalidate(__gm__ void* p, uint32_t) {
    AscendC::GlobalTensor<uint8_t> t;
    t.SetGlobalBuffer((__gm__ uint8_t*)p);
    AscendC::DataCacheCleanAndInvalid<uint8_t, AscendC::CacheLine::ENTIRE_DATA_CACHE>(t);
}
__aicore__ inline void gm_flush(__gm__ void* p, uint32_t n) { gm_invalidate(p, n); }
#define COMBINE_KERNEL_LAUNCH(kernel, block_dim, stream, ...) \
    kernel<<<(block_dim), nullptr, (stream)>>>(__VA_ARGS__)
#endif
