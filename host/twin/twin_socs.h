// The SoCs the CPU twin models, in one table: the twin enforces their AIV core counts and UB
// (twin_core.cpp, COMBINE_TWIN_SOC) and combine_lab/planning/cores.py reads this file for the
// same facts and the same refusal text, so keep each row on one line in the form below.
// AIV cores and UB per AIV: docs/hardware-rules.md#9-cores-waves-and-barriers (910B3/B4 40 AIV,
// 910B2 48, each 910_93 die 48; UB 192 KiB on A2/A3).
#pragma once

#include <cstdint>

namespace twin {

struct SocRow {
    const char* name;   // the SoC's name, or with `per_die` the prefix of its dies' names
    bool per_die;       // name is a prefix (Ascend910_93xx: one name per die) and the counts are per die
    int aiv;            // AIV cores: a launch with more blocks runs them in waves
    uint32_t ub_bytes;  // UB per AIV core
};

constexpr uint32_t kUbBytesA2A3 = 192 * 1024;

// Rows with the same counts side by side: the refusal names them together, in this order.
constexpr SocRow kSocs[] = {
    {"Ascend910B2", false, 48, kUbBytesA2A3},
    {"Ascend910B3", false, 40, kUbBytesA2A3},
    {"Ascend910B4", false, 40, kUbBytesA2A3},
    {"Ascend910_93", true, 48, kUbBytesA2A3},
};

// The system counter (AscendC::GetSystemCycle) and SHMEM's profiling frames run at 50 cycles per
// microsecond on A2/A3, every SoC above (1000 on Ascend950, which the twin does not model):
// aclrtGetSocName says the modelled SoC's name, so a driver's cycles-to-us choice is right.
constexpr uint32_t kSystemCyclesPerUs = 50;

// The SoC the twin models when COMBINE_TWIN_SOC is unset.
constexpr const char* kDefaultSoc = "Ascend910B3";

}  // namespace twin
