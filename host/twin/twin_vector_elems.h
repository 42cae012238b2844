// The element types of the twin's vector path: their sizes and the 32-byte rounding of UB
// (twin_vector.cpp checks and issues the instructions, twin_vector_exec.cpp executes them).
#pragma once

#include <cstdint>

#include "twin_state.h"

namespace twin {

inline constexpr int kElems = int(Elem::BF16) + 1;
inline constexpr uint32_t kElemBytes[kElems] = {1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 2};

inline uint32_t esize(Elem e) { return kElemBytes[int(e)]; }
inline uint32_t align32(uint64_t n) { return uint32_t((n + 31) / 32 * 32); }

}  // namespace twin
