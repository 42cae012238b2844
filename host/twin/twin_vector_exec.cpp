// The twin's vector path, executing (twin_vector.cpp checks each Ascend C call and issues it on
// its pipe; twin_pipes.cpp runs it here when the pipe gets to it): DataCopy and DataCopyPad between
// GM and UB, Cast, Muls, Add, Axpy, Duplicate, vectorised: float16 conversions with F16C where the
// CPU has it (checked at run time), never fused multiply-adds except in Axpy, so float32 results
// round exactly as the golden's numpy does (-ffp-contract=off, CMakeLists.txt).
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernel_operator.h"
#include "twin_platform.h"
#include "twin_state.h"
#include "twin_vector_elems.h"

namespace twin {
namespace {

using AscendC::RoundMode;

// The vectorised kernels need AVX2 and F16C; COMBINE_TWIN_NO_SIMD=1 takes the portable loops
// (the tests check that both give the same bytes).
const bool kAvx2F16c = [] {
    __builtin_cpu_init();
    const char* off = getenv("COMBINE_TWIN_NO_SIMD");
    unsigned a = 0, b = 0, c = 0, d = 0;  // F16C: CPUID leaf 1, ECX bit 29 (clang 14 has no "f16c" feature name)
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    return !(off && *off && *off != '0') && __builtin_cpu_supports("avx2") && f16c;
}();

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

}  // namespace twin
