// Declaration-only stand-in for SHMEM's cycle-profiling macros (hicann/shmem
// src/device/utils/prof/shmemi_prof.h): a frame id, a pipe barrier and the system cycle
// counter, all AI-core code. For the NPU-branch compile check only.
#pragma once

#include "kernel_operator.h"

#define SHMEMI_PROF_START(pf_id)                     \
    if ((pf_id) < ACLSHMEM_CYCLE_PROF_FRAME_CNT) {   \
        AscendC::PipeBarrier<PIPE_ALL>();            \
        (void)AscendC::GetSystemCycle();             \
    }
#define SHMEMI_PROF_END(pf_id) SHMEMI_PROF_START(pf_id)
