// Declaration-only stand-in for SHMEM's src/device/shmemi_device_common.h (hicann/shmem
// 643bfb7), reached as "shmemi_device_common.h" through <shmem>/src/device and as
// "device/shmemi_device_common.h" through <shmem>/src. For the NPU-branch compile check only.
#pragma once

#include "host_device/shmem_common_types.h"

// The state SHMEM's host side keeps for the device (heap bases, sync pools, profiling slots).
ACLSHMEM_DEVICE __gm__ aclshmem_device_host_state_t* aclshmemi_get_state();
