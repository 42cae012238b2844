// Declaration-only stand-in for CANN opbase's host half (include/nnopbase/opdev/fp16_t.h,
// `op::fp16_t`: 16 bits of binary16 in `val`, made from and turned into float), for the NPU-branch
// compile check of a kernel folder written for SHMEM and of its driver. Declarations only.
#pragma once

#include <cstdint>

namespace op {
struct fp16_t {
    uint16_t val;
    fp16_t();
    fp16_t(const float& v);
    fp16_t(const int32_t& v);
    fp16_t& operator=(const float& v);
    operator float() const;
    float toFloat() const;
};
}  // namespace op
