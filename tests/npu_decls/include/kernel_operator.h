// Declaration-only stand-in for Ascend C's kernel_operator.h (asc-devkit include/basic_api),
// for the NPU-branch compile check (see ../README.md). Declarations only.
#pragma once

#include <cstdint>

#if defined(__CUDA__)  // the kernel file: clang in CUDA mode stands in for bisheng -xcce
#define __aicore__ __attribute__((device))
#define __host_aicore__ __attribute__((host, device))
#else
#define __aicore__
#define __host_aicore__
#endif
#define __global__
#if defined(__CUDA_ARCH__)  // the AI-core pass: GM and UB are address spaces of their own
#define __gm__ __attribute__((address_space(1)))
#define __ubuf__ __attribute__((address_space(6)))
#else
#define __gm__
#define __ubuf__
#endif
#define GM_ADDR __gm__ uint8_t*

// bisheng's half: a built-in 16-bit float that converts to and from float (clang's __fp16).
using half = __fp16;

// bisheng built-ins.
enum pipe_t { PIPE_S = 1, PIPE_V = 2, PIPE_M = 3, PIPE_MTE1 = 4, PIPE_MTE2 = 5, PIPE_MTE3 = 6, PIPE_ALL = 10 };
enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

namespace AscendC {

using TEventID = int8_t;

enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX,
};
enum class CacheLine : uint64_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint64_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

__aicore__ int64_t GetBlockNum();
__aicore__ int64_t GetBlockIdx();
__aicore__ int64_t GetSystemCycle();

template <HardEvent event>
__aicore__ void SetFlag(int32_t eventID);
template <HardEvent event>
__aicore__ void WaitFlag(int32_t eventID);
template <pipe_t pipe>
__aicore__ void PipeBarrier();

template <typename T>
class LocalTensor;

template <typename T>
class GlobalTensor {
public:
    using PrimType = T;
    __aicore__ GlobalTensor();
    __aicore__ void SetGlobalBuffer(__gm__ PrimType* buffer, uint64_t bufferSize);
    __aicore__ void SetGlobalBuffer(__gm__ PrimType* buffer);
    __aicore__ __gm__ PrimType* GetPhyAddr() const;
};

template <bool isAIVOnly = true>
__aicore__ void SyncAll(const GlobalTensor<int32_t>& gmWorkspace, const LocalTensor<int32_t>& ubWorkspace,
                        const int32_t usedCores = 0);
template <bool isAIVOnly = true>
__aicore__ void SyncAll();

template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst);

}  // namespace AscendC
