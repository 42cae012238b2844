// CPU twin of SHMEM's cycle-profiling frames (hicann/shmem src/device/utils/prof/shmemi_prof.h,
// on a kernel's include path through <shmem>/src/device). A frame records, per block, how many
// times it ran and its cycles at the SoC's rate (twin_kernel.cpp), on the PE named by
// SHMEM_CYCLE_PROF_PE only and for blocks below 64, as SHMEM's do; the host reads them with
// aclshmemx_get_prof.
#pragma once

#include "shmem.h"

#define SHMEMI_PROF_START(frame) twin::prof_start(frame)
#define SHMEMI_PROF_END(frame) twin::prof_end(frame)
