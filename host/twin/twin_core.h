// Who the calling thread is, as the twin sees it: a host thread, or AIV core (block) b of the
// launch in progress, with its UB, on the SoC the twin models (twin_core.cpp). Every other part
// of the twin asks here and nothing here asks them, so failure handling (twin_heap.cpp fatal)
// can name the core without depending on the launch code (twin_kernel.cpp), which sets it.
#pragma once

#include <cstdint>
#include <string>

namespace twin {

// The SoC whose core counts and UB the twin enforces (COMBINE_TWIN_SOC; twin_socs.h).
struct TwinSoc {
    const char* name;
    int aiv;            // AIV cores: a launch with more blocks runs them in waves
    uint32_t ub_bytes;  // UB per AIV core
};
const TwinSoc& twin_soc();
// AscendC::GetSystemCycle of the calling thread: cycles at the modelled SoC's rate (twin_socs.h).
int64_t system_cycle();

// Calling core's block index, or -1 on a host thread; the launch's block_dim.
int32_t current_core();
uint32_t current_block_dim();
// Base of the calling core's UB (the worker thread's), or nullptr on a host thread.
uint8_t* ub_base();

// When the launch in progress runs in waves: a note on what that means for waits, else "".
std::string launch_note();

// Set by the launch (twin_kernel.cpp): its block_dim and the cores running it (0, 0 between
// launches); the worker thread's UB; the block it runs now (-1: between blocks).
void set_launch_geometry(uint32_t block_dim, uint32_t cores);
void set_core_ub(uint8_t* ub, uint32_t block_dim);
void set_current_core(int32_t block);

}  // namespace twin
