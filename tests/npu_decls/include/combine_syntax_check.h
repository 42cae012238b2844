// For the NPU-branch compile check only (force-included into every compile of it): what
// bisheng itself provides, and what the check holds the declarations to.
#pragma once

#include <cstdint>

#include "kernel_operator.h"

// bisheng's half is a 16-bit float: sizes and layouts computed from sizeof(half) (window rows,
// UB tiles) must come out as on the device.
static_assert(sizeof(half) == 2, "bisheng's half is 2 bytes");
static_assert(alignof(half) == 2, "bisheng's half is 2-byte aligned");
// bisheng's other name for it, which SHMEM's examples instantiate their kernels with.
using float16_t = half;
static_assert(sizeof(bfloat16_t) == 2, "bisheng's bfloat16_t is 2 bytes");
static_assert(alignof(bfloat16_t) == 2, "bisheng's bfloat16_t is 2-byte aligned");

#if defined(__CUDA__)
// The <<<block_dim, l2ctrl, stream>>> launch. Clang lowers `kernel<<<a, b, c>>>(args)` to a
// call of its configuration function with (a, b, c), then checks `kernel(args)` against the
// entry's parameters: in the host pass that function is __cudaPushCallConfiguration, in the
// device pass cudaConfigureCall (clang 14, no CUDA installation). Both take bisheng's
// configuration: the number of blocks, the reserved l2ctrl pointer (nullptr; newer asc-devkit
// documents this slot as dynUBufSize, bytes, 0 by default) and the aclrtStream.
extern "C" int __cudaPushCallConfiguration(uint32_t block_dim, void* l2ctrl, void* stream);
extern "C" int cudaConfigureCall(uint32_t block_dim, void* l2ctrl, void* stream);
#endif
