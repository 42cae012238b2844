// Declaration-only stand-in for Ascend C's kernel_operator.h (asc-devkit include/basic_api),
// for the NPU-branch compile check (see ../README.md). Declarations only. __NPU_ARCH__ picks
// the A2/A3 (2201) or Ascend950 (3510) declarations where asc-devkit has both.
#pragma once

#include <cstdint>

#if defined(__CUDA__)  // the kernel file: clang in CUDA mode stands in for bisheng
// An AI-core function is clang's `device` function and a kernel entry its `global` one, whose
// body clang checks as device code and which only a <<<>>> launch may call. Clang refuses
// `global` and `device` on one function, so the __aicore__ that follows __global__ on an entry
// must expand to nothing: __global__ pops __aicore__'s definition stack to one that expands to
// nothing and pops once more, back to the device definition. Each entry takes one pair off the
// stack, filled here for 8 entries per file; a ninth fails to compile (pop_macro with nothing
// pushed, then 'device' and 'global' attributes are not compatible).
#include "detail/entry_slot.h"
#include "detail/entry_slot.h"
#include "detail/entry_slot.h"
#include "detail/entry_slot.h"
#include "detail/entry_slot.h"
#include "detail/entry_slot.h"
#include "detail/entry_slot.h"
#include "detail/entry_slot.h"
#undef __aicore__
#define __aicore__ __attribute__((device))
#define __global__ __attribute__((global)) _Pragma("pop_macro(\"__aicore__\")")
#define __host_aicore__ __attribute__((host, device))
#else
#define __aicore__
#define __host_aicore__
#define __global__
#endif
#if defined(__CUDA_ARCH__)  // the AI-core pass: GM and UB are address spaces of their own
// Clang's OpenCL address spaces, for their conversion rules only: a plain pointer converts to
// __gm__ (a launch passes the host's plain device pointers to the entry's GM_ADDR parameters),
// and nothing else converts between plain, __gm__ and __ubuf__ pointers.
#define __gm__ __attribute__((opencl_generic))
#define __ubuf__ __attribute__((opencl_constant))
#else
#define __gm__
#define __ubuf__
#endif
#define GM_ADDR __gm__ uint8_t*

// bisheng's half: a built-in 2-byte float that converts to and from float and, unlike clang's
// __fp16, may be passed by value (DataCopyPadExtParams<half> takes one): declared here as a
// class of 16 bits with those conversions (combine_syntax_check.h asserts the size). A class
// cannot be read or written through a __gm__ (OpenCL address space) pointer here, which bisheng's
// built-in can: a kernel that reads half scalars from GM, as SHMEM's examples' stage 2 does, is
// checked with COMBINE_DECLS_SCALAR_HALF, where the AI-core pass's half is clang's __fp16
// (arithmetic and scalar GM access; no half passed by value).
#if defined(COMBINE_DECLS_SCALAR_HALF) && defined(__CUDA_ARCH__)
typedef __fp16 half;
#else
class half {
public:
    __host_aicore__ half();
    __host_aicore__ half(float v);
    __host_aicore__ operator float() const;

private:
    uint16_t bits_;
};
#endif

// bisheng's bfloat16_t: a built-in 2-byte float (8 exponent bits, 7 mantissa bits) that the
// vector unit's Cast converts to and from float; declared, as half is, as a class of 16 bits
// with those conversions. No scalar arithmetic on it is declared: the kernel converts bf16 on
// the vector unit only (the CANN 9.0 beta backend has no scalar bf16 cast).
class bfloat16_t {
public:
    __host_aicore__ bfloat16_t();
    __host_aicore__ bfloat16_t(float v);

private:
    uint16_t bf16_bits_;
};

// bisheng built-ins.
enum pipe_t { PIPE_S = 1, PIPE_V = 2, PIPE_M = 3, PIPE_MTE1 = 4, PIPE_MTE2 = 5, PIPE_MTE3 = 6, PIPE_ALL = 10 };
enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };
__aicore__ void pipe_barrier(pipe_t pipe);  // SHMEM's profiling frames call it

#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 3510)
#define COMBINE_DECLS_ASCEND950 1
#else
#define COMBINE_DECLS_ASCEND950 0
#endif

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
    CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD,
#if COMBINE_DECLS_ASCEND950
    CAST_HYBRID, CAST_EVEN, CAST_ZERO,
#endif
    UNKNOWN = 0xFF,
};

#if COMBINE_DECLS_ASCEND950
// Ascend950 only: DataCopyPad's padding mode (utils/kernel_utils_struct_confusion_pad.h) and
// SyncAll's pipe configuration (utils/kernel_utils_mode.h).
enum class PaddingMode : uint8_t { Normal = 0, Compact };
struct SyncAllConfig {
    pipe_t triggerPipe;
    pipe_t waitPipe;
};
// constexpr there; inline here, so that SyncAll<true>, declared without its body, has external
// linkage (a template argument of internal linkage would make it an undefined internal function).
inline constexpr SyncAllConfig DEFAULT_SYNC_ALL_CONFIG = {PIPE_ALL, PIPE_ALL};
#endif

// kernel_struct_data_copy.h: uint32_t strides on A2/A3, int64_t on Ascend950.
struct DataCopyExtParams {
    __aicore__ DataCopyExtParams();
#if COMBINE_DECLS_ASCEND950
    __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const int64_t srcStrideIn,
                                 const int64_t dstStrideIn, const uint32_t rsvIn);
#else
    __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                                 const uint32_t dstStrideIn, const uint32_t rsvIn);
#endif
    uint16_t blockCount;
    uint32_t blockLen;
#if COMBINE_DECLS_ASCEND950
    int64_t srcStride;
    int64_t dstStride;
#else
    uint32_t srcStride;
    uint32_t dstStride;
#endif
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

// kernel_operator_data_copy_intf.h (Level 2 DataCopy; DataCopyPad with DataCopyExtParams, whose
// Ascend950 form takes a PaddingMode template parameter).
template <typename T>
__aicore__ void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count);
template <typename T>
__aicore__ void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count);
#if COMBINE_DECLS_ASCEND950
template <typename T, PaddingMode mode = PaddingMode::Normal>
__aicore__ void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& dataCopyParams,
                            const DataCopyPadExtParams<T>& padParams);
template <typename T, PaddingMode mode = PaddingMode::Normal>
__aicore__ void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& dataCopyParams);
#else
template <typename T>
__aicore__ void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& dataCopyParams,
                            const DataCopyPadExtParams<T>& padParams);
template <typename T>
__aicore__ void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& dataCopyParams);
#endif

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
#if COMBINE_DECLS_ASCEND950
template <bool isAIVOnly = true, const SyncAllConfig& config = DEFAULT_SYNC_ALL_CONFIG>
__aicore__ void SyncAll();
#else
template <bool isAIVOnly = true>
__aicore__ void SyncAll();
#endif

template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst);

}  // namespace AscendC
