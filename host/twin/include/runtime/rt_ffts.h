// CPU twin of the CANN runtime's FFTS header (runtime/rt_ffts.h), as SHMEM's examples include it
// (examples/utils/utils.h): its status type and success value. The FFTS base address a kernel needs
// comes from SHMEM, util_get_ffts_config() (shmem.h).
#pragma once

#include <cstdint>

typedef int32_t rtError_t;
#define RT_ERROR_NONE 0
