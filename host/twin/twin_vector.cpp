// The twin's Ascend C vector path (asc-devkit basic_api; docs/hardware-rules.md#10-ascend-c-vector-path): DataCopy
// and DataCopyPad between GM and UB, Cast, Muls, Add, Axpy, Duplicate on LocalTensors.
//
// Each call first checks what the hardware requires and refuses or reports the rest:
// - UB operands start 32-byte aligned (the LocalTensor constructor checks, twin_pipes.cpp
//   ub_use) and stay inside their LocalTensor; GM operands of DataCopy are aligned to the
//   element; counts and DataCopyExtParams stay in their documented ranges (fatal otherwise);
// - DataCopy moves whole 32-byte blocks: a length that is not a multiple of 32 B is a
//   violation, and, as on the hardware, only the whole blocks arrive;
// - Cast takes the A2/A3 (source, destination, RoundMode) combinations only;
// - operands overlap completely or not at all, and a widening Cast not at all;
// - the core's state was set (InitSocState) before the first such instruction.
// Then it issues one op on its pipe (MTE2, V or MTE3; twin_pipes.cpp checks the flags
// between pipes); the op executes here, vectorised: float16 conversions with F16C where the
// CPU has it (checked at run time), never fused multiply-adds except in Axpy, so float32
// results round exactly as the golden's numpy does (-ffp-contract=off, CMakeLists.txt).
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernel_operator.h"
#include "twin_platform.h"
#include "twin_state.h"

namespace twin {
namespace {

using AscendC::RoundMode;

constexpr int kElems = int(Elem::BF16) + 1;
const char* const kElemName[kElems] = {"int8", "uint8", "int16", "uint16", "half", "int32", "uint32", "float", "int64",
                                       "uint64", "bfloat16_t"};
const uint32_t kElemBytes[kElems] = {1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 2};
const char* const kRoundName[7] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC",
                                   "CAST_ODD"};

uint32_t esize(Elem e) { return kElemBytes[int(e)]; }
uint32_t align32(uint64_t n) { return uint32_t((n + 31) / 32 * 32); }

// The vectorised kernels need AVX2 and F16C; COMBINE_TWIN_NO_SIMD=1 takes the portable loops
// (the tests check that both give the same bytes).
const bool kAvx2F16c = [] {
    __builtin_cpu_init();
    const char* off = getenv("COMBINE_TWIN_NO_SIMD");
    unsigned a = 0, b = 0, c = 0, d = 0;  // F16C: CPUID leaf 1, ECX bit 29 (clang 14 has no "f16c" feature name)
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    return !(off && *off && *off != '0') && __builtin_cpu_supports("avx2") && f16c;
}();

// Stable names for messages and op records ("Muls (float)", "Cast (half -> float)"), made
// once, before any core thread asks.
struct OpNames {
    std::string typed[4][kElems];
    std::string cast[kElems][kElems];
    OpNames() {
        static const char* const ops[4] = {"Muls", "Add", "Axpy", "Duplicate"};
        for (int e = 0; e < kElems; ++e) {
            for (int i = 0; i < 4; ++i) typed[i][e] = std::string(ops[i]) + " (" + kElemName[e] + ")";
            for (int d = 0; d < kElems; ++d) cast[e][d] = std::string("Cast (") + kElemName[e] + " -> " + kElemName[d] + ")";
        }
    }
};
const OpNames kNames;
enum TypedOp { kMuls = 0, kAdd, kAxpy, kDuplicate };

const char* typed_name(TypedOp op, Elem e) { return kNames.typed[op][int(e)].c_str(); }
const char* cast_name(Elem src, Elem dst) { return kNames.cast[int(src)][int(dst)].c_str(); }

UbSpan span_of(const UbOperand& t, uint64_t bytes) { return UbSpan{t.off, uint32_t(t.off + bytes)}; }

[[noreturn]] __attribute__((noinline, cold)) void past_tensor(const char* op, const char* what, const UbOperand& t,
                                                                uint64_t bytes, uint64_t cap) {
    fatal("%s: %s %s runs past its LocalTensor %s (%u %s)", op, what, range_text(t.off, uint32_t(t.off + bytes)).c_str(),
          range_text(t.off, uint32_t(t.off + cap)).c_str(), t.elems, kElemName[int(t.elem)]);
}

// `bytes` of tensor `t` used by `op`: inside its LocalTensor, else fatal.
inline UbSpan ub_operand(const char* op, const char* what, const UbOperand& t, uint64_t bytes) {
    const uint64_t cap = uint64_t(t.elems) * esize(t.elem);
    if (bytes > cap) past_tensor(op, what, t, bytes, cap);
    return span_of(t, bytes);
}

// asc-devkit's general overlap rule: operands of one instruction overlap 100% or not at all.
void check_overlap(const char* op, const char* a_name, const UbSpan& a, const char* b_name, const UbSpan& b,
                   bool none_allowed_only) {
    if (a.begin >= b.end || b.begin >= a.end) return;
    if (!none_allowed_only && a.begin == b.begin && a.end == b.end) return;
    fatal("%s: %s %s overlaps %s %s: %s (asc-devkit address overlap rule)", op, a_name, range_text(a.begin, a.end).c_str(),
          b_name, range_text(b.begin, b.end).c_str(),
          none_allowed_only ? "this instruction's operands must not overlap" : "operands must overlap completely or not at all");
}

int32_t vec_count(const char* op, int32_t count) {
    if (count < 0) fatal("%s: count %d is negative", op, count);
    return count;
}

// ---- element kernels ----------------------------------------------------------------------

// Four 8-lane vectors per step; the scalar tails round exactly as the vector bodies.
__attribute__((target("avx2,f16c"))) void f16_to_f32_fast(float* d, const half* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (uint32_t j = 0; j < 32; j += 8)
            _mm256_storeu_ps(d + i + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + j))));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    for (; i < n; ++i) d[i] = float(s[i]);
}

__attribute__((target("avx2,f16c"))) void f32_to_f16_rne_fast(half* d, const float* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (uint32_t j = 0; j < 32; j += 8)
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + j),
                             _mm256_cvtps_ph(_mm256_loadu_ps(s + i + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) d[i] = half(s[i]);
}

__attribute__((target("avx2"))) void i32_to_f32_rne_fast(float* d, const int32_t* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (uint32_t j = 0; j < 32; j += 8)
            _mm256_storeu_ps(d + i + j,
                             _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + j))));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
    for (; i < n; ++i) d[i] = float(s[i]);
}

// Toward zero; NaN and values outside int32 give INT32_MIN, as numpy's astype does on x86.
__attribute__((target("avx2"))) void f32_to_i32_trunc_fast(int32_t* d, const float* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (uint32_t j = 0; j < 32; j += 8)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + j), _mm256_cvttps_epi32(_mm256_loadu_ps(s + i + j)));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_cvttps_epi32(_mm256_loadu_ps(s + i)));
    for (; i < n; ++i) d[i] = (s[i] >= -2147483648.0f && s[i] < 2147483648.0f) ? int32_t(s[i]) : INT32_MIN;
}

__attribute__((target("avx2"))) void muls_f32_fast(float* d, const float* s, float k, uint32_t n) {
    const __m256 kk = _mm256_set1_ps(k);
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (uint32_t j = 0; j < 32; j += 8) _mm256_storeu_ps(d + i + j, _mm256_mul_ps(_mm256_loadu_ps(s + i + j), kk));
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), kk));
    for (; i < n; ++i) d[i] = s[i] * k;
}

__attribute__((target("avx2"))) void add_f32_fast(float* d, const float* a, const float* b, uint32_t n) {
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (uint32_t j = 0; j < 32; j += 8)
            _mm256_storeu_ps(d + i + j, _mm256_add_ps(_mm256_loadu_ps(a + i + j), _mm256_loadu_ps(b + i + j)));
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; ++i) d[i] = a[i] + b[i];
}

int32_t saturate_i32(double v) {
    return (v >= -2147483648.0 && v < 2147483648.0) ? int32_t(v) : INT32_MIN;  // NaN too
}

// A value rounded to an integral value by `mode` (CAST_NONE/RINT: half to even).
double round_integral(double v, RoundMode mode) {
    switch (mode) {
    case RoundMode::CAST_FLOOR: return std::floor(v);
    case RoundMode::CAST_CEIL: return std::ceil(v);
    case RoundMode::CAST_ROUND: return std::round(v);
    case RoundMode::CAST_TRUNC: return std::trunc(v);
    default: return std::nearbyint(v);
    }
}

// An exact double (an int32) rounded to float by `mode`.
float round_to_float(double v, RoundMode mode) {
    float f = float(v);  // half to even
    switch (mode) {
    case RoundMode::CAST_FLOOR:
        if (double(f) > v) f = std::nextafter(f, -INFINITY);
        break;
    case RoundMode::CAST_CEIL:
        if (double(f) < v) f = std::nextafter(f, INFINITY);
        break;
    case RoundMode::CAST_TRUNC:
        if (std::fabs(double(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
        break;
    case RoundMode::CAST_ROUND: {  // half away from zero
        const float other = double(f) > v ? std::nextafter(f, -INFINITY) : std::nextafter(f, INFINITY);
        if (std::fabs(double(other) - v) == std::fabs(double(f) - v) && std::fabs(other) > std::fabs(f)) f = other;
        break;
    }
    default:
        break;
    }
    return f;
}

template <typename T>
T* ub_ptr(uint32_t off) {
    return reinterpret_cast<T*>(ub_base() + off);
}

// float -> bfloat16 by `mode` (one of the five A2/A3 take): the top 16 bits, carried by the
// rounding of the 16 bits dropped; a NaN stays a NaN.
uint16_t f32_to_bf16_round(float f, RoundMode mode) {
    if (mode == RoundMode::CAST_RINT || std::isnan(f)) return f32_to_bf16_bits(f);
    const uint32_t x = __builtin_bit_cast(uint32_t, f), low = x & 0xffffu;
    const bool neg = x >> 31;
    uint32_t top = x >> 16;
    const bool up = mode == RoundMode::CAST_ROUND ? low >= 0x8000u  // half away from zero
                    : mode == RoundMode::CAST_FLOOR ? (neg && low)
                    : mode == RoundMode::CAST_CEIL  ? (!neg && low)
                                                    : false;  // CAST_TRUNC
    if (up && (x & 0x7fffffffu) != 0x7f800000u) ++top;  // away from zero in magnitude; inf stays inf
    return uint16_t(top);
}

void exec_cast(const PipeOp& op) {
    const Elem src = Elem(op.src_elem), dst = Elem(op.dst_elem);
    const RoundMode mode = RoundMode(op.round);
    const uint32_t n = op.count;
    if (src == Elem::F16 && dst == Elem::F32) {
        float* d = ub_ptr<float>(op.dst_off);
        const half* s = ub_ptr<half>(op.src0_off);
        if (kAvx2F16c) return f16_to_f32_fast(d, s, n);
        for (uint32_t i = 0; i < n; ++i) d[i] = float(s[i]);
    } else if (src == Elem::F32 && dst == Elem::F16) {
        half* d = ub_ptr<half>(op.dst_off);
        const float* s = ub_ptr<float>(op.src0_off);
        if (kAvx2F16c) return f32_to_f16_rne_fast(d, s, n);
        for (uint32_t i = 0; i < n; ++i) d[i] = half(s[i]);  // half to even
    } else if (src == Elem::I32 && dst == Elem::F32) {
        float* d = ub_ptr<float>(op.dst_off);
        const int32_t* s = ub_ptr<int32_t>(op.src0_off);
        if (mode == RoundMode::CAST_NONE || mode == RoundMode::CAST_RINT) {
            if (kAvx2F16c) return i32_to_f32_rne_fast(d, s, n);
            for (uint32_t i = 0; i < n; ++i) d[i] = float(s[i]);
        } else {
            for (uint32_t i = 0; i < n; ++i) d[i] = round_to_float(double(s[i]), mode);
        }
    } else if (src == Elem::F32 && dst == Elem::I32) {
        int32_t* d = ub_ptr<int32_t>(op.dst_off);
        const float* s = ub_ptr<float>(op.src0_off);
        if (mode == RoundMode::CAST_TRUNC && kAvx2F16c) return f32_to_i32_trunc_fast(d, s, n);
        for (uint32_t i = 0; i < n; ++i) d[i] = saturate_i32(round_integral(double(s[i]), mode));
    } else if (src == Elem::BF16 && dst == Elem::F32) {  // exact: the float with these top bits
        float* d = ub_ptr<float>(op.dst_off);
        const bfloat16_t* s = ub_ptr<bfloat16_t>(op.src0_off);
        for (uint32_t i = 0; i < n; ++i) d[i] = float(s[i]);
    } else if (src == Elem::F32 && dst == Elem::BF16) {
        bfloat16_t* d = ub_ptr<bfloat16_t>(op.dst_off);
        const float* s = ub_ptr<float>(op.src0_off);
        for (uint32_t i = 0; i < n; ++i) d[i].bits = f32_to_bf16_round(s[i], mode);
    } else if (src == Elem::F16 && dst == Elem::I32) {
        int32_t* d = ub_ptr<int32_t>(op.dst_off);
        const half* s = ub_ptr<half>(op.src0_off);
        for (uint32_t i = 0; i < n; ++i) d[i] = saturate_i32(round_integral(double(s[i]), mode));
    } else if (src == Elem::F32 && dst == Elem::F32) {
        float* d = ub_ptr<float>(op.dst_off);
        const float* s = ub_ptr<float>(op.src0_off);
        for (uint32_t i = 0; i < n; ++i) d[i] = float(round_integral(double(s[i]), mode));
    } else {
        fatal("%s: not modeled by the twin", op.name);
    }
}

template <typename T>
void muls_generic(const PipeOp& op) {
    T* d = ub_ptr<T>(op.dst_off);
    const T* s = ub_ptr<T>(op.src0_off);
    const T k = T(op.scalar);
    for (uint32_t i = 0; i < op.count; ++i) {
        if constexpr (std::is_integral<T>::value)
            d[i] = T(typename std::make_unsigned<T>::type(s[i]) * typename std::make_unsigned<T>::type(k));  // wraps
        else
            d[i] = T(float(s[i]) * float(k));  // half: exact in float, then one rounding to half
    }
}

template <typename T>
void add_generic(const PipeOp& op) {
    T* d = ub_ptr<T>(op.dst_off);
    const T* a = ub_ptr<T>(op.src0_off);
    const T* b = ub_ptr<T>(op.src1_off);
    for (uint32_t i = 0; i < op.count; ++i) {
        if constexpr (std::is_integral<T>::value)
            d[i] = T(typename std::make_unsigned<T>::type(a[i]) + typename std::make_unsigned<T>::type(b[i]));
        else
            d[i] = T(float(a[i]) + float(b[i]));  // half: float then half rounds as half arithmetic does
    }
}

void exec_muls(const PipeOp& op) {
    switch (Elem(op.dst_elem)) {
    case Elem::F32:
        if (kAvx2F16c) return muls_f32_fast(ub_ptr<float>(op.dst_off), ub_ptr<float>(op.src0_off), float(op.scalar), op.count);
        return muls_generic<float>(op);
    case Elem::F16: return muls_generic<half>(op);
    case Elem::I32: return muls_generic<int32_t>(op);
    case Elem::I16: return muls_generic<int16_t>(op);
    default: fatal("%s: not modeled by the twin", op.name);
    }
}

void exec_add(const PipeOp& op) {
    switch (Elem(op.dst_elem)) {
    case Elem::F32:
        if (kAvx2F16c)
            return add_f32_fast(ub_ptr<float>(op.dst_off), ub_ptr<float>(op.src0_off), ub_ptr<float>(op.src1_off), op.count);
        return add_generic<float>(op);
    case Elem::F16: return add_generic<half>(op);
    case Elem::I32: return add_generic<int32_t>(op);
    case Elem::I16: return add_generic<int16_t>(op);
    default: fatal("%s: not modeled by the twin", op.name);
    }
}

// One rounding (see kernel_operator.h): computed exactly in double, then rounded once.
void exec_axpy(const PipeOp& op) {
    const Elem d_e = Elem(op.dst_elem), s_e = Elem(op.src_elem);
    float* df = ub_ptr<float>(op.dst_off);
    half* dh = ub_ptr<half>(op.dst_off);
    const float* sf = ub_ptr<float>(op.src0_off);
    const half* sh = ub_ptr<half>(op.src0_off);
    for (uint32_t i = 0; i < op.count; ++i) {
        if (d_e == Elem::F32 && s_e == Elem::F32)
            df[i] = std::fmaf(sf[i], float(op.scalar), df[i]);
        else if (d_e == Elem::F32)
            df[i] = float(double(sh[i]) * op.scalar + double(df[i]));
        else
            dh[i] = half(double(sh[i]) * op.scalar + double(dh[i]));
    }
}

template <typename T>
void fill_n(uint32_t off, T v, uint32_t n) {
    T* d = ub_ptr<T>(off);
    for (uint32_t i = 0; i < n; ++i) d[i] = v;
}

void exec_dup(const PipeOp& op) {
    switch (Elem(op.dst_elem)) {
    case Elem::F32: return fill_n<float>(op.dst_off, float(op.scalar), op.count);
    case Elem::F16: return fill_n<half>(op.dst_off, half(op.scalar), op.count);
    case Elem::I8: case Elem::U8: return fill_n<uint8_t>(op.dst_off, uint8_t(int64_t(op.scalar)), op.count);
    case Elem::I16: case Elem::U16: return fill_n<uint16_t>(op.dst_off, uint16_t(int64_t(op.scalar)), op.count);
    case Elem::I32: case Elem::U32: return fill_n<uint32_t>(op.dst_off, uint32_t(int64_t(op.scalar)), op.count);
    default: return fill_n<uint64_t>(op.dst_off, uint64_t(int64_t(op.scalar)), op.count);
    }
}

// GM -> UB blocks with their padding (asc-devkit DataCopyPad, GM -> UB): left and right
// padding hold paddingValue where isPad, else garbage; the dummy that fills a block up to 32
// bytes is the block's first element when no padding was asked for and isPad is false, and
// paddingValue when padding was asked for and isPad is true. The docs leave the other cases
// open, and "random" where isPad is false: the twin writes garbage there (0xFF bytes, NaN in
// floating point), so that a kernel that relies on them shows it.
void exec_copy_in(const PipeOp& op) {
    const uint32_t es = esize(Elem(op.dst_elem));
    const bool padded = op.left_pad != 0 || op.right_pad != 0;
    for (uint32_t b = 0; b < op.blocks; ++b) {
        uint8_t* ub = ub_base() + op.dst_off + uint64_t(b) * op.ub_block_pitch;
        const uint8_t* gm = op.gm_src + uint64_t(b) * op.gm_block_pitch;
        const uint32_t left = op.left_pad * es, used = left + op.count + op.right_pad * es;
        const uint32_t tail = op.ub_block_pitch ? align32(used) - used : 0;
        auto fill = [&](uint8_t* p, uint32_t bytes, const void* value) {
            for (uint32_t i = 0; i < bytes; i += es) {
                if (value != nullptr) memcpy(p + i, value, es);
                else memset(p + i, 0xFF, es);
            }
        };
        const void* pad_value = op.is_pad ? static_cast<const void*>(&op.pad_bits) : nullptr;
        const void* dummy = padded ? pad_value : (!op.is_pad && op.count >= es ? gm : nullptr);
        fill(ub, left, pad_value);
        memcpy(ub + left, gm, op.count);
        fill(ub + left + op.count, op.right_pad * es, pad_value);
        fill(ub + used, tail, dummy);
    }
}

void exec_copy_out(const PipeOp& op) {
    for (uint32_t b = 0; b < op.blocks; ++b)
        memcpy(op.gm_dst + uint64_t(b) * op.gm_block_pitch, ub_base() + op.src0_off + uint64_t(b) * op.ub_block_pitch,
               op.count);
}

// The A2/A3 Cast table (asc-devkit Cast, "Atlas A2" combinations) for the types the twin
// models: a bit per RoundMode, 0 where the combination does not exist.
uint32_t cast_modes(Elem src, Elem dst) {
    auto bits = [](std::initializer_list<RoundMode> ms) {
        uint32_t b = 0;
        for (RoundMode m : ms) b |= 1u << int(m);
        return b;
    };
    using R = RoundMode;
    const uint32_t five = bits({R::CAST_RINT, R::CAST_FLOOR, R::CAST_CEIL, R::CAST_ROUND, R::CAST_TRUNC});
    if (src == Elem::F16 && dst == Elem::F32) return bits({R::CAST_NONE});
    if (src == Elem::F16 && dst == Elem::I32) return five;
    if (src == Elem::I32 && dst == Elem::F32) return five | bits({R::CAST_NONE});
    if (src == Elem::F32 && dst == Elem::F16) return five | bits({R::CAST_ODD, R::CAST_NONE});
    if (src == Elem::BF16 && dst == Elem::F32) return bits({R::CAST_NONE});
    if (src == Elem::F32 && dst == Elem::BF16) return five;
    if (src == Elem::F32 && dst == Elem::I32) return five;
    if (src == Elem::F32 && dst == Elem::F32) return five;
    return 0;
}

std::string modes_text(uint32_t modes) {
    std::string s;
    for (int m = 0; m < 7; ++m)
        if (modes & (1u << m)) s += std::string(s.empty() ? "" : "/") + kRoundName[m];
    return s;
}

}  // namespace

void vector_execute(const PipeOp& op) {
    switch (op.kind) {
    case OpKind::CopyIn: return exec_copy_in(op);
    case OpKind::CopyOut: return exec_copy_out(op);
    case OpKind::Cast: return exec_cast(op);
    case OpKind::Muls: return exec_muls(op);
    case OpKind::Add: return exec_add(op);
    case OpKind::Axpy: return exec_axpy(op);
    case OpKind::Dup: return exec_dup(op);
    default: fatal("%s: not a vector or copy op", op.name);
    }
}

void local_tensor_at(uint32_t addr, uint64_t bytes) {
    uint8_t* base = ub_base();
    if (base == nullptr) fatal("LocalTensor constructed outside a kernel core");
    const uint32_t ub = twin_soc().ub_bytes;
    if (uint64_t(addr) + bytes > ub)
        fatal("LocalTensor: vector tile (LocalTensor) %s runs past the core's %u KiB UB",
              range_text(addr, uint32_t(std::min<uint64_t>(uint64_t(addr) + bytes, 0xFFFFFFFFull))).c_str(), ub / 1024);
    ub_use(base + addr, uint32_t(bytes), UbRole::VectorTile, "LocalTensor");
}

void init_soc_state() { soc_state_init(); }

// DataCopy (no pad) moves whole 32-byte blocks: the bytes that really move, after reporting a
// length that is not a multiple of 32 B (both directions; ``towards`` says "to" or "from" UB,
// ``arrive`` what the data do). The GM address must be aligned to its elements.
static uint32_t whole_blocks(const char* op, const void* gm, uint32_t es, Elem elem, uint32_t bytes,
                             const UbOperand& ub, const char* towards, const char* arrive) {
    if (reinterpret_cast<uintptr_t>(gm) % es != 0)
        fatal("%s: GM address %p is not aligned to its %u-byte elements", op, const_cast<void*>(gm), es);
    if (bytes % 32 == 0) return bytes;
    const uint32_t whole = bytes / 32 * 32;
    report_violation(where() + ": " + op + " of " + std::to_string(bytes / es) + " " + kElemName[int(elem)] + " (" +
                     std::to_string(bytes) + " B) " + towards + " " + range_text(ub.off, ub.off + align32(bytes)) +
                     ": DataCopy moves whole 32-byte blocks, so only " + std::to_string(whole) + " B " + arrive +
                     " (use DataCopyPad for lengths that are not a multiple of 32 B)");
    return whole;
}

// DataCopyPad's parameter ranges (DataCopyExtParams), both directions.
static void check_pad_params(const char* op, const AscendC::DataCopyExtParams& p, uint32_t es) {
    if (p.blockCount > 4095 || p.blockLen > 2097151)
        fatal("%s: blockCount %u, blockLen %u: the ranges are [0, 4095] and [0, 2097151]", op, p.blockCount, p.blockLen);
    if (p.blockLen % es != 0) fatal("%s: blockLen %u B is not a multiple of sizeof(T) = %u", op, p.blockLen, es);
}

void copy_in(bool pad, const UbOperand& dst, const GmOperand& src, const AscendC::DataCopyExtParams& p, bool is_pad,
             uint8_t left, uint8_t right, uint64_t pad_bits, const Site& site) {
    const char* const op = pad ? "DataCopyPad (GM -> UB)" : "DataCopy (GM -> UB)";
    soc_state_require(op);
    const uint32_t es = esize(dst.elem);
    if (p.blockCount == 0 || p.blockLen == 0) return;  // a NOP on A2/A3
    uint64_t slot = 0;
    if (region_kind(src.addr, &slot) == kRegionPayload)  // stage 2 reading a window slot
        record_op("load", -1, (long long)p.blockCount * p.blockLen, (long long)slot, dst.off);
    PipeOp o;
    o.kind = OpKind::CopyIn;
    o.pipe = kPipeMte2;
    o.name = op;
    o.dst_off = dst.off;
    o.dst_elem = uint8_t(dst.elem);
    o.gm_src = src.addr;
    o.blocks = p.blockCount;
    uint64_t ub_bytes, gm_bytes;
    if (!pad) {
        const uint32_t bytes = whole_blocks(op, src.addr, es, dst.elem, p.blockLen, dst, "to", "arrive");
        if (bytes == 0) return;
        o.count = bytes;
        ub_bytes = gm_bytes = bytes;
    } else {
        check_pad_params(op, p, es);
        if (left * es > 32 || right * es > 32)
            fatal("%s: leftPadding %u, rightPadding %u elements: each may cover at most 32 B", op, left, right);
        const uint32_t block = align32(uint64_t(left) * es + p.blockLen + uint64_t(right) * es);
        o.count = p.blockLen;
        o.ub_block_pitch = block + p.dstStride * 32;
        o.gm_block_pitch = p.blockLen + p.srcStride;
        o.left_pad = left;
        o.right_pad = right;
        o.is_pad = is_pad;
        o.pad_bits = pad_bits;
        ub_bytes = uint64_t(p.blockCount - 1) * o.ub_block_pitch + block;
        gm_bytes = uint64_t(p.blockCount - 1) * o.gm_block_pitch + p.blockLen;
    }
    o.write = ub_operand(op, "destination", dst, ub_bytes);
    o.writes = true;
    if (src.elems != 0 && gm_bytes > src.elems * es)
        fatal("%s: reads %llu B of GM at %p, past its GlobalTensor's %llu elements", op, (unsigned long long)gm_bytes,
              static_cast<void*>(src.addr), (unsigned long long)src.elems);
    note_payload_read(src.addr, gm_bytes, op, site);  // issued after the flags this core observed so far
    pipe_issue(o);
}

void copy_out(bool pad, const GmOperand& dst, const UbOperand& src, const AscendC::DataCopyExtParams& p) {
    const char* const op = pad ? "DataCopyPad (UB -> GM)" : "DataCopy (UB -> GM)";
    soc_state_require(op);
    const uint32_t es = esize(src.elem);
    if (p.blockCount == 0 || p.blockLen == 0) return;
    uint64_t row = 0;
    if (region_kind(dst.addr, &row) == kRegionOutput)  // stage 2 writing an x_out row
        record_op("store", -1, (long long)p.blockCount * p.blockLen, (long long)row, src.off);
    PipeOp o;
    o.kind = OpKind::CopyOut;
    o.pipe = kPipeMte3;
    o.name = op;
    o.src0_off = src.off;
    o.gm_dst = dst.addr;
    o.blocks = p.blockCount;
    uint64_t ub_bytes, gm_bytes;
    if (!pad) {
        const uint32_t bytes = whole_blocks(op, dst.addr, es, src.elem, p.blockLen, src, "from", "leave");
        if (bytes == 0) return;
        o.count = bytes;
        ub_bytes = gm_bytes = bytes;
    } else {
        check_pad_params(op, p, es);
        o.count = p.blockLen;
        o.ub_block_pitch = align32(p.blockLen) + p.srcStride * 32;
        o.gm_block_pitch = p.blockLen + p.dstStride;
        ub_bytes = uint64_t(p.blockCount - 1) * o.ub_block_pitch + align32(p.blockLen);
        gm_bytes = uint64_t(p.blockCount - 1) * o.gm_block_pitch + p.blockLen;
    }
    if (!pad) o.ub_block_pitch = 0;
    o.reads[0] = ub_operand(op, "source", src, ub_bytes);
    o.n_reads = 1;
    if (dst.elems != 0 && gm_bytes > dst.elems * es)
        fatal("%s: writes %llu B of GM at %p, past its GlobalTensor's %llu elements", op, (unsigned long long)gm_bytes,
              static_cast<void*>(dst.addr), (unsigned long long)dst.elems);
    pipe_issue(o);
}

void vec_cast(const UbOperand& dst, const UbOperand& src, AscendC::RoundMode mode, uint32_t count) {
    const char* const op = cast_name(src.elem, dst.elem);
    soc_state_require(op);
    const uint32_t modes = cast_modes(src.elem, dst.elem);
    if (modes == 0)
        fatal("%s: not a Cast the twin models for A2/A3 (half/bfloat16_t/int32/float: half -> float, half -> int32, "
              "int32 -> float, float -> half, float -> int32, float -> float, bfloat16_t -> float, float -> bfloat16_t)", op);
    const int m = int(mode);
    if (m >= 7 || !(modes & (1u << m)))
        fatal("%s with %s: A2/A3 take %s for this pair (asc-devkit Cast)", op, m < 7 ? kRoundName[m] : "an unknown mode",
              modes_text(modes).c_str());
    if (dst.elem == Elem::F16 && mode != RoundMode::CAST_RINT && mode != RoundMode::CAST_NONE)
        fatal("%s with %s: not modeled by the twin (it models CAST_RINT and CAST_NONE to half)", op, kRoundName[m]);
    if (count == 0) return;
    PipeOp o;
    o.kind = OpKind::Cast;
    o.pipe = kPipeV;
    o.name = op;
    o.reads[0] = ub_operand(op, "source", src, uint64_t(count) * esize(src.elem));
    o.n_reads = 1;
    o.write = ub_operand(op, "destination", dst, uint64_t(count) * esize(dst.elem));
    o.writes = true;
    check_overlap(op, "destination", o.write, "source", o.reads[0], esize(dst.elem) != esize(src.elem));
    o.dst_off = dst.off;
    o.src0_off = src.off;
    o.dst_elem = uint8_t(dst.elem);
    o.src_elem = uint8_t(src.elem);
    o.round = uint8_t(mode);
    o.count = count;
    pipe_issue(o);
}

namespace {

bool arithmetic(Elem e) { return e == Elem::F32 || e == Elem::F16 || e == Elem::I32 || e == Elem::I16; }

}  // namespace

void vec_muls(const UbOperand& dst, const UbOperand& src, double scalar, int32_t count) {
    const char* const op = typed_name(kMuls, dst.elem);
    soc_state_require(op);
    if (!arithmetic(dst.elem)) fatal("%s: A2/A3 Muls takes int16, half, int32 or float", op);
    if (vec_count(op, count) == 0) return;
    PipeOp o;
    o.kind = OpKind::Muls;
    o.pipe = kPipeV;
    o.name = op;
    const uint64_t bytes = uint64_t(count) * esize(dst.elem);
    o.reads[0] = ub_operand(op, "source", src, bytes);
    o.n_reads = 1;
    o.write = ub_operand(op, "destination", dst, bytes);
    o.writes = true;
    check_overlap(op, "destination", o.write, "source", o.reads[0], false);
    o.dst_off = dst.off;
    o.src0_off = src.off;
    o.dst_elem = o.src_elem = uint8_t(dst.elem);
    o.scalar = scalar;
    o.count = uint32_t(count);
    pipe_issue(o);
}

void vec_add(const UbOperand& dst, const UbOperand& src0, const UbOperand& src1, int32_t count) {
    const char* const op = typed_name(kAdd, dst.elem);
    soc_state_require(op);
    if (!arithmetic(dst.elem)) fatal("%s: A2/A3 Add takes int16, half, int32 or float", op);
    if (vec_count(op, count) == 0) return;
    PipeOp o;
    o.kind = OpKind::Add;
    o.pipe = kPipeV;
    o.name = op;
    const uint64_t bytes = uint64_t(count) * esize(dst.elem);
    o.reads[0] = ub_operand(op, "source 0", src0, bytes);
    o.reads[1] = ub_operand(op, "source 1", src1, bytes);
    o.n_reads = 2;
    o.write = ub_operand(op, "destination", dst, bytes);
    o.writes = true;
    check_overlap(op, "destination", o.write, "source 0", o.reads[0], false);
    check_overlap(op, "destination", o.write, "source 1", o.reads[1], false);
    o.dst_off = dst.off;
    o.src0_off = src0.off;
    o.src1_off = src1.off;
    o.dst_elem = o.src_elem = uint8_t(dst.elem);
    o.count = uint32_t(count);
    pipe_issue(o);
}

void vec_axpy(const UbOperand& dst, const UbOperand& src, double scalar, int32_t count) {
    const char* const op = typed_name(kAxpy, dst.elem);
    soc_state_require(op);
    const bool ok = (dst.elem == Elem::F32 && src.elem == Elem::F32) || (dst.elem == Elem::F16 && src.elem == Elem::F16) ||
                    (dst.elem == Elem::F32 && src.elem == Elem::F16);
    if (!ok) fatal("%s: A2/A3 Axpy takes half -> half, float -> float or half -> float", op);
    if (vec_count(op, count) == 0) return;
    PipeOp o;
    o.kind = OpKind::Axpy;
    o.pipe = kPipeV;
    o.name = op;
    o.reads[0] = ub_operand(op, "source", src, uint64_t(count) * esize(src.elem));
    o.reads[1] = ub_operand(op, "destination", dst, uint64_t(count) * esize(dst.elem));  // dst is read too
    o.n_reads = 2;
    o.write = o.reads[1];
    o.writes = true;
    check_overlap(op, "destination", o.write, "source", o.reads[0], dst.elem != src.elem);
    o.dst_off = dst.off;
    o.src0_off = src.off;
    o.dst_elem = uint8_t(dst.elem);
    o.src_elem = uint8_t(src.elem);
    o.scalar = scalar;
    o.count = uint32_t(count);
    pipe_issue(o);
}

void vec_duplicate(const UbOperand& dst, double scalar, int32_t count) {
    const char* const op = typed_name(kDuplicate, dst.elem);
    soc_state_require(op);
    if (vec_count(op, count) == 0) return;
    PipeOp o;
    o.kind = OpKind::Dup;
    o.pipe = kPipeV;
    o.name = op;
    o.write = ub_operand(op, "destination", dst, uint64_t(count) * esize(dst.elem));
    o.writes = true;
    o.dst_off = dst.off;
    o.dst_elem = uint8_t(dst.elem);
    o.scalar = scalar;
    o.count = uint32_t(count);
    pipe_issue(o);
}

}  // namespace twin
