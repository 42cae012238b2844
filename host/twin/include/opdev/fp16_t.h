// CPU twin of CANN's host half type, `op::fp16_t` (opbase include/nnopbase/opdev/fp16_t.h): 16 bits
// of IEEE binary16 in `val`, made from and turned into float (and any arithmetic type) with one
// rounding to nearest even; arithmetic and comparisons go through float. A host driver reads a
// float16 case file into an array of them, as SHMEM's examples do.
#pragma once

#include <cstdint>
#include <type_traits>

#include "twin_half.h"

namespace op {

struct fp16_t {
    uint16_t val;
    fp16_t() : val(0) {}
    template <typename U, typename = typename std::enable_if<std::is_arithmetic<U>::value>::type>
    fp16_t(U v) : val(twin::f64_to_f16_bits(double(v))) {}
    operator float() const { return twin::f16_bits_to_f32(val); }
    template <typename U, typename = typename std::enable_if<std::is_arithmetic<U>::value>::type>
    fp16_t& operator=(U v) {
        val = twin::f64_to_f16_bits(double(v));
        return *this;
    }
    float toFloat() const { return float(*this); }
};
static_assert(sizeof(fp16_t) == 2, "fp16_t is 2 bytes");

}  // namespace op
