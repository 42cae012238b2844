// Declaration-only stand-in for the CANN runtime's runtime/rt_ffts.h (what SHMEM's examples take
// from it: the status type and its success value), for the NPU-branch compile check.
#pragma once

#include <cstdint>

typedef int32_t rtError_t;
#define RT_ERROR_NONE 0
