// Declaration-only stand-in for SHMEM's cycle-profiling frames (hicann/shmem 643bfb7
// src/device/utils/prof/shmemi_prof.h), found through <shmem>/src/device. Like SHMEM's, it
// includes host_device/shmem_common_types.h (<shmem>/include) and device/shmemi_device_common.h
// (<shmem>/src), so it compiles only with <shmem>/src on the include path too. For the
// NPU-branch compile check only.
#pragma once

#include "host_device/shmem_common_types.h"
#include "device/shmemi_device_common.h"

// A frame is an if-statement on the calling block: when the frame id and the block index are
// below ACLSHMEM_CYCLE_PROF_FRAME_CNT and this PE is the one profiled (profs->pe_id, from
// SHMEM_CYCLE_PROF_PE), a full pipe barrier, then the system cycle counter is subtracted
// (START) or added (END, which also counts the frame) in this block's slot.
#define COMBINE_DECLS_PROF_FRAME(pf_id, UPDATE)                                                          \
    if ((pf_id) < ACLSHMEM_CYCLE_PROF_FRAME_CNT && AscendC::GetBlockIdx() < ACLSHMEM_CYCLE_PROF_FRAME_CNT) { \
        __gm__ aclshmem_device_host_state_t* combine_prof_state = aclshmemi_get_state();              \
        if (combine_prof_state->profs != nullptr && combine_prof_state->profs->pe_id == shmem_my_pe()) {   \
            pipe_barrier(PIPE_ALL);                                                                     \
            aclshmem_prof_block_t& combine_prof_block =                                                 \
                combine_prof_state->profs->block_prof[AscendC::GetBlockIdx()];                          \
            UPDATE;                                                                                     \
        }                                                                                               \
    }
#define SHMEMI_PROF_START(pf_id) \
    COMBINE_DECLS_PROF_FRAME(pf_id, combine_prof_block.cycles[pf_id] -= AscendC::GetSystemCycle())
#define SHMEMI_PROF_END(pf_id)                                                                   \
    COMBINE_DECLS_PROF_FRAME(pf_id, combine_prof_block.cycles[pf_id] += AscendC::GetSystemCycle(); \
                             combine_prof_block.ccount[pf_id] += 1)
