// CPU twin of the part of Ascend C (asc-devkit kernel_operator.h) that the combine kernel
// calls. An AIV core is a thread; GetBlockIdx/GetBlockNum read that thread's block.
// Names, parameter order and types follow asc-devkit (docs/hardware-rules.md#11-public-headers-and-the-build); the
// twin enforces what the pipes and flags mean (host/twin/twin_pipes.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

// Targets mean nothing on the CPU: an AI-core function is a host function run by a core thread
// (the declaration-only headers of the NPU-branch compile check, tests/npu_decls, give them their
// meaning). GM is host memory, so a __gm__ pointer is a plain one.
#define __aicore__
#define __host_aicore__
#define __global__
#define __gm__

// A UB pointer is what it is on the NPU: a byte offset into the calling core's unified buffer,
// so a kernel may write `(__ubuf__ int32_t*)32`. The twin compiles kernels with clang, where
// __ubuf__ is x86-64's address space 256: every load and store through such a pointer is
// %gs-relative, and each core thread's GS base is its own UB (set at launch, twin_core.cpp), so
// offset 32 is byte 32 of that core's UB. The twin's own functions take the flat address
// (twin::ub_flat). Under another compiler a UB pointer is still an offset the twin's calls
// understand, but dereferencing one faults (docs/twin.md#9-kernels-as-the-npu-compiles-them).
#if defined(__clang__) && defined(__x86_64__)
#define __ubuf__ __attribute__((address_space(256)))
#else
#define __ubuf__
#endif

using GM_ADDR = uint8_t*;  // asc-devkit: __gm__ uint8_t*

#include "twin_half.h"

// bisheng's 2-byte `half` (and its other name, float16_t): storage of IEEE binary16 that converts
// to and from any arithmetic type (one rounding, to nearest even); arithmetic happens in float,
// which rounds a single +, -, * or / exactly as binary16 arithmetic does.
struct half {
    uint16_t bits;
    half() = default;
    template <typename U, typename = typename std::enable_if<std::is_arithmetic<U>::value>::type>
    half(U v) : bits(twin::f64_to_f16_bits(double(v))) {}
    operator float() const { return twin::f16_bits_to_f32(bits); }
};
static_assert(sizeof(half) == 2, "half is 2 bytes, as bisheng's");
using float16_t = half;

// bisheng's `bfloat16_t`: the top 16 bits of a float; from a float, half to even (from another
// arithmetic type through float first); arithmetic happens in float.
struct bfloat16_t {
    uint16_t bits;
    bfloat16_t() = default;
    template <typename U, typename = typename std::enable_if<std::is_arithmetic<U>::value>::type>
    bfloat16_t(U v) : bits(twin::f32_to_bf16_bits(float(v))) {}
    operator float() const { return twin::bf16_bits_to_f32(bits); }
};
static_assert(sizeof(bfloat16_t) == 2, "bfloat16_t is 2 bytes, as bisheng's");

// bisheng built-ins (pipes and event ids), named as the compiler names them.
enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

namespace AscendC {

using TEventID = int8_t;

// src_dst pairs, in asc-devkit's order (impl/basic_api/kernel_event.h).
enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX,
};

enum class CacheLine : uint64_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint64_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

int64_t GetBlockIdx();
int64_t GetBlockNum();
int64_t GetSystemCycle();

}  // namespace AscendC

namespace twin {
// Where a flag call was made, for the twin's messages: the kernel's file and line (the
// templates below take the caller's through defaulted builtins), and for a SHMEM call's own
// flags the SHMEM function (`inside`) that the kernel called there.
struct Site {
    const char* file = nullptr;
    int line = 0;
    const char* inside = nullptr;
};
// Base of the calling core's UB (twin_core.cpp), and the flat address of a UB pointer (a byte
// offset into it) for the twin's own functions.
uint8_t* ub_base();
template <typename T>
inline void* ub_flat(__ubuf__ T* p) {
    return ub_base() + reinterpret_cast<uintptr_t>(p);
}
// Pipe events of the calling core (twin_pipes.cpp): pairing, and the order they put between
// pipes, as the pipes execute them.
void flag_set(AscendC::HardEvent event, int32_t id, const Site& site);
void flag_wait(AscendC::HardEvent event, int32_t id, const Site& site);
void pipe_barrier(pipe_t pipe);
void sync_all_cores();
// The scalar unit cleans (writes back if dirty) and invalidates the 64 B line holding `addr`.
void dcache_clean_line(const void* addr, const Site& site);
}  // namespace twin

namespace AscendC {

template <HardEvent event>
inline void SetFlag(int32_t eventID, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    twin::flag_set(event, eventID, twin::Site{file, line, nullptr});
}
template <HardEvent event>
inline void WaitFlag(int32_t eventID, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    twin::flag_wait(event, eventID, twin::Site{file, line, nullptr});
}
template <pipe_t pipe>
inline void PipeBarrier() { twin::pipe_barrier(pipe); }

// All-AIV hardware barrier (FFTS): every block of the launch must be resident at once.
template <bool isAIVOnly = true>
inline void SyncAll() {
    static_assert(isAIVOnly, "the combine kernel is AIV-only");
    twin::sync_all_cores();
}

// Logical positions of a tensor (asc-devkit impl/basic_api/common_types.h); VECIN, VECOUT
// and VECCALC are all UB.
enum class TPosition : uint8_t {
    GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM, SHM = SPM, TSCM, C2PIPE2GM,
    C2PIPE2LOCAL, MAX,
};

// Cast rounding (asc-devkit kernel_utils_mode.h): CAST_NONE rounds like CAST_RINT where the
// conversion loses precision, CAST_RINT is round-half-to-even, CAST_TRUNC rounds toward 0.
enum class RoundMode : uint8_t {
    CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, UNKNOWN = 0xFF,
};

// DataCopyPad parameters (asc-devkit kernel_struct_data_copy.h, A2/A3 layout). blockLen is in
// bytes; the GM-side stride is in bytes, the UB-side stride in 32-byte blocks.
struct DataCopyExtParams {
    DataCopyExtParams() {}
    DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                      const uint32_t dstStrideIn, const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams() {}
    DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = 0;
};

}  // namespace AscendC

// The twin's side of the Ascend C vector path (twin_vector.cpp): each call checks its
// operands, then issues one op on its pipe (twin_pipes.cpp).
namespace twin {

enum class Elem : uint8_t { I8, U8, I16, U16, F16, I32, U32, F32, I64, U64, BF16 };
template <typename T> struct ElemOf;
template <> struct ElemOf<int8_t> { static constexpr Elem value = Elem::I8; };
template <> struct ElemOf<uint8_t> { static constexpr Elem value = Elem::U8; };
template <> struct ElemOf<int16_t> { static constexpr Elem value = Elem::I16; };
template <> struct ElemOf<uint16_t> { static constexpr Elem value = Elem::U16; };
template <> struct ElemOf<half> { static constexpr Elem value = Elem::F16; };
template <> struct ElemOf<int32_t> { static constexpr Elem value = Elem::I32; };
template <> struct ElemOf<uint32_t> { static constexpr Elem value = Elem::U32; };
template <> struct ElemOf<float> { static constexpr Elem value = Elem::F32; };
template <> struct ElemOf<int64_t> { static constexpr Elem value = Elem::I64; };
template <> struct ElemOf<uint64_t> { static constexpr Elem value = Elem::U64; };
template <> struct ElemOf<bfloat16_t> { static constexpr Elem value = Elem::BF16; };

// A LocalTensor as the twin sees it: UB byte offset, capacity in elements, element type.
struct UbOperand {
    uint32_t off;
    uint32_t elems;
    Elem elem;
};
// A GlobalTensor: GM address and the elements it holds from there (0: unknown).
struct GmOperand {
    uint8_t* addr;
    uint64_t elems;
    Elem elem;
};

void local_tensor_at(uint32_t addr, uint64_t bytes);
void init_soc_state();
// DataCopy (pad = false: one block of blockLen bytes) and DataCopyPad, GM -> UB and UB -> GM.
// `site`: the kernel's call (a read of a payload row before its flag names it, twin_receive.cpp).
void copy_in(bool pad, const UbOperand& dst, const GmOperand& src, const AscendC::DataCopyExtParams& p, bool is_pad,
             uint8_t left, uint8_t right, uint64_t pad_bits, const Site& site);
void copy_out(bool pad, const GmOperand& dst, const UbOperand& src, const AscendC::DataCopyExtParams& p);
void vec_cast(const UbOperand& dst, const UbOperand& src, AscendC::RoundMode mode, uint32_t count);
void vec_muls(const UbOperand& dst, const UbOperand& src, double scalar, int32_t count);
void vec_add(const UbOperand& dst, const UbOperand& src0, const UbOperand& src1, int32_t count);
void vec_axpy(const UbOperand& dst, const UbOperand& src, double scalar, int32_t count);
void vec_duplicate(const UbOperand& dst, double scalar, int32_t count);

template <typename T>
inline uint64_t bits_of(const T& v) {
    uint64_t b = 0;
    __builtin_memcpy(&b, &v, sizeof(T));
    return b;
}

}  // namespace twin

namespace AscendC {

// Sets the AI core's global state (mask mode, atomic state); static Tensor programming
// (LocalTensors at fixed addresses, no TPipe) must call it first (asc-devkit InitSocState).
inline void InitSocState() { twin::init_soc_state(); }

// A tensor in UB at a fixed byte address (asc-devkit "static Tensor programming": the
// LocalTensor(pos, addr, tileSize) constructor), `tileSize` elements long.
template <typename T>
class LocalTensor {
public:
    using PrimType = T;
    LocalTensor() {}
    LocalTensor(TPosition pos, uint32_t addr, uint32_t tileSize) : pos_(pos), addr_(addr), size_(tileSize) {
        twin::local_tensor_at(addr, uint64_t(tileSize) * sizeof(T));
    }
    uint32_t GetSize() const { return size_; }
    int32_t GetPosition() const { return int32_t(pos_); }
    twin::UbOperand twin_operand() const { return twin::UbOperand{addr_, size_, twin::ElemOf<T>::value}; }

private:
    TPosition pos_ = TPosition::VECCALC;
    uint32_t addr_ = 0;
    uint32_t size_ = 0;
};

template <typename T>
class GlobalTensor {
public:
    using PrimType = T;
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) {
        addr_ = buffer;
        size_ = bufferSize;
    }
    void SetGlobalBuffer(__gm__ T* buffer) {
        addr_ = buffer;
        size_ = 0;
    }
    const __gm__ T* GetPhyAddr() const { return addr_; }
    __gm__ T* GetPhyAddr(const uint64_t offset) const { return addr_ + offset; }
    uint64_t GetSize() const { return size_; }
    GlobalTensor operator[](const uint64_t offset) const {
        GlobalTensor t;
        t.addr_ = addr_ + offset;
        t.size_ = size_ > offset ? size_ - offset : 0;
        return t;
    }
    twin::GmOperand twin_operand() const {
        return twin::GmOperand{reinterpret_cast<uint8_t*>(addr_), size_, twin::ElemOf<T>::value};
    }

private:
    __gm__ T* addr_ = nullptr;
    uint64_t size_ = 0;
};

// MTE2: `count` elements GM -> UB; MTE3: UB -> GM. Whole 32-byte blocks only (asc-devkit:
// count * sizeof(T) is rounded down to 32 B); DataCopyPad moves any length.
// The GM -> UB forms take the caller's file and line after asc-devkit's parameters (as
// DataCacheCleanAndInvalid below): the twin names the call in a report.
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    twin::copy_in(false, dst.twin_operand(), src.twin_operand(), DataCopyExtParams(1, count * uint32_t(sizeof(T)), 0, 0, 0),
                  false, 0, 0, 0, twin::Site{file, line, nullptr});
}
template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
    twin::copy_out(false, dst.twin_operand(), src.twin_operand(), DataCopyExtParams(1, count * uint32_t(sizeof(T)), 0, 0, 0));
}
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& dataCopyParams,
                        const DataCopyPadExtParams<T>& padParams, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    twin::copy_in(true, dst.twin_operand(), src.twin_operand(), dataCopyParams, padParams.isPad, padParams.leftPadding,
                  padParams.rightPadding, twin::bits_of(padParams.paddingValue), twin::Site{file, line, nullptr});
}
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& dataCopyParams) {
    twin::copy_out(true, dst.twin_operand(), src.twin_operand(), dataCopyParams);
}

// V: dst[i] = convert(src[i]) for i < count, with the A2/A3 (src, dst, roundMode) combinations.
template <typename T, typename U>
inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint32_t count) {
    twin::vec_cast(dst.twin_operand(), src.twin_operand(), roundMode, count);
}
// V: dst[i] = src[i] * scalarValue.
template <typename T, bool isSetMask = true>
inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) {
    twin::vec_muls(dst.twin_operand(), src.twin_operand(), double(scalarValue), count);
}
// V: dst[i] = src0[i] + src1[i].
template <typename T>
inline void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
    twin::vec_add(dst.twin_operand(), src0.twin_operand(), src1.twin_operand(), count);
}
// V: dst[i] = src[i] * scalarValue + dst[i]. The twin rounds once (a fused multiply-add):
// the docs do not promise two roundings, so a kernel that needs them must not rely on Axpy.
template <typename T, typename U>
inline void Axpy(const LocalTensor<T>& dst, const LocalTensor<U>& src, const U& scalarValue, const int32_t& count) {
    twin::vec_axpy(dst.twin_operand(), src.twin_operand(), double(scalarValue), count);
}
// V: dst[i] = scalarValue.
template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
    twin::vec_duplicate(dst.twin_operand(), double(scalarValue), count);
}

// The twin's memory is coherent, but its scalar cache lines are modelled where they can lose a
// write: a clean of one 64 B line of a labelled status region (twin_checker.cpp, dcache_clean_line).
template <typename T, CacheLine entireType, DcciDst dcciDst>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T>& t, const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
    if (entireType == CacheLine::SINGLE_CACHE_LINE)
        twin::dcache_clean_line(t.GetPhyAddr(), twin::Site{file, line, nullptr});
}

}  // namespace AscendC
