// Declaration-only stand-in for SHMEM's src/device/gm2gm/shmemi_device_cc.h (hicann/shmem
// 643bfb7), which the public device/gm2gm/shmem_device_cc.h includes, so shmem.h's device part
// needs <shmem>/src/device on the include path. For the NPU-branch compile check only.
#pragma once

#include "kernel_operator.h"
#include "shmemi_device_common.h"
#include "host_device/shmem_common_types.h"

// The barrier of the launch's vector cores over GM flags: SHMEM's core barrier without a MIX
// kernel (with one it is SyncAll). C++ linkage, outside SHMEM's extern "C" blocks.
ACLSHMEM_DEVICE void aclshmemi_barrier_core_soft();
