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

// bisheng's half: a built-in 16-bit float that converts to and from float and, unlike clang's
// __fp16, may be passed by value (DataCopyPadExtParams<half> takes one): declared here as a
// class with those conversions.
class half {
public:
    __host_aicore__ half();
    __host_aicore__ half(float v);
    __host_aicore__ operator float() const;
};

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

// Logical positions (impl/basic_api/common_types.h) and Cast rounding (utils/kernel_utils_mode.h,
// the A2/A3 branch).
enum class TPosition : uint8_t {
    GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM, SHM = SPM, TSCM, C2PIPE2GM,
    C2PIPE2LOCAL, MAX,
};
enum class RoundMode : uint8_t {
    CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, UNKNOWN = 0xFF,
};

// kernel_struct_data_copy.h, the A2/A3 branch (uint32_t strides).
struct DataCopyExtParams {
    __aicore__ DataCopyExtParams();
    __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                                 const uint32_t dstStrideIn, const uint32_t rsvIn);
    uint16_t blockCount;
    uint32_t blockLen;
    uint32_t srcStride;
    uint32_t dstStride;
    uint32_t rsv;
};

template <typename T>
struct DataCopyPadExtParams {
    __aicore__ DataCopyPadExtParams();
    __aicore__ DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                                    T padValue);
    bool isPad;
    uint8_t leftPadding;
    uint8_t rightPadding;
    T paddingValue;
};

// kernel_tensor.h: the static Tensor programming constructor (a UB byte address, 32-byte
// aligned, and a length in elements).
template <typename T>
class LocalTensor {
public:
    using PrimType = T;
    __aicore__ LocalTensor();
    __aicore__ LocalTensor(TPosition pos, uint32_t addr, uint32_t tileSize);
    __aicore__ uint32_t GetSize() const;
};

template <typename T>
class GlobalTensor {
public:
    using PrimType = T;
    __aicore__ GlobalTensor();
    __aicore__ void SetGlobalBuffer(__gm__ PrimType* buffer, uint64_t bufferSize);
    __aicore__ void SetGlobalBuffer(__gm__ PrimType* buffer);
    __aicore__ const __gm__ PrimType* GetPhyAddr() const;
    __aicore__ __gm__ PrimType* GetPhyAddr(const uint64_t offset) const;
    __aicore__ GlobalTensor operator[](const uint64_t offset) const;
};

// kernel_operator_common_intf.h
__aicore__ void InitSocState();

// kernel_operator_data_copy_intf.h (Level 2 DataCopy; DataCopyPad without the 3510 mode).
template <typename T>
__aicore__ void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count);
template <typename T>
__aicore__ void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count);
template <typename T>
__aicore__ void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& dataCopyParams,
                            const DataCopyPadExtParams<T>& padParams);
template <typename T>
__aicore__ void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& dataCopyParams);

// kernel_operator_vec_vconv_intf.h, _vec_binary_scalar_intf.h, _vec_binary_intf.h,
// _vec_ternary_scalar_intf.h, _vec_duplicate_intf.h (the count forms).
template <typename T, typename U>
__aicore__ void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint32_t count);
template <typename T, bool isSetMask = true>
__aicore__ void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count);
template <typename T>
__aicore__ void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count);
template <typename T, typename U>
__aicore__ void Axpy(const LocalTensor<T>& dst, const LocalTensor<U>& src, const U& scalarValue, const int32_t& count);
template <typename T>
__aicore__ void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count);

template <bool isAIVOnly = true>
__aicore__ void SyncAll(const GlobalTensor<int32_t>& gmWorkspace, const LocalTensor<int32_t>& ubWorkspace,
                        const int32_t usedCores = 0);
template <bool isAIVOnly = true>
__aicore__ void SyncAll();

template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst);

}  // namespace AscendC
