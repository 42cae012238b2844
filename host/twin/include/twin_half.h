// Conversions of the twin's 2-byte floats: IEEE binary16 (bisheng's `half` on the kernel side,
// kernel_operator.h, and CANN's `op::fp16_t` on the host, opdev/fp16_t.h) and bfloat16 (bisheng's
// `bfloat16_t`: the top 16 bits of a float). By bits, rounding to nearest even (as the hardware's
// CAST_RINT and numpy's float16 / ml_dtypes' bfloat16 casts do); portable: no _Float16 or __bf16,
// which clang before 15 lacks on x86.
#pragma once

#include <cstdint>

namespace twin {

inline float f16_bits_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float v = float(m) * (1.0f / 16777216.0f);  // m * 2^-24, exact
        return sign ? -v : v;
    }
    const uint32_t bits = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);
    return __builtin_bit_cast(float, bits);
}
inline uint16_t f64_to_f16_bits(double d) {
    const uint64_t x = __builtin_bit_cast(uint64_t, d);
    const uint16_t sign = uint16_t((x >> 48) & 0x8000u);
    const uint64_t ax = x & 0x7fffffffffffffffull;
    if (ax >= 0x7ff0000000000000ull)  // inf, or NaN (kept quiet)
        return uint16_t(sign | 0x7c00u | (ax > 0x7ff0000000000000ull ? 0x200u | ((ax >> 42) & 0x3ffu) : 0u));
    if (ax >= 0x40effe0000000000ull) return uint16_t(sign | 0x7c00u);  // >= 65520: rounds to inf
    uint64_t r, rem, halfway;
    if (ax >= 0x3f10000000000000ull) {  // normal half (>= 2^-14)
        r = (((ax >> 52) - 1008u) << 10) | ((ax >> 42) & 0x3ffu);
        rem = ax & ((1ull << 42) - 1);
        halfway = 1ull << 41;
    } else {  // subnormal half or zero, in units of 2^-24
        if (ax < 0x3e60000000000000ull) return sign;  // below 2^-25
        const uint64_t m = (ax & ((1ull << 52) - 1)) | (1ull << 52);
        const unsigned shift = unsigned(1051u - (ax >> 52));
        r = m >> shift;
        rem = m & ((1ull << shift) - 1);
        halfway = 1ull << (shift - 1);
    }
    if (rem > halfway || (rem == halfway && (r & 1))) ++r;  // may carry into the exponent: still right
    return uint16_t(sign | r);
}

// bfloat16: exactly the float with these top 16 bits.
inline float bf16_bits_to_f32(uint16_t b) { return __builtin_bit_cast(float, uint32_t(b) << 16); }
// float -> bfloat16, half to even (CAST_RINT); a NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16_bits(float f) {
    const uint32_t x = __builtin_bit_cast(uint32_t, f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // may carry into the exponent: still right
}
}  // namespace twin
