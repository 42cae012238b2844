// Declaration-only stand-in for SHMEM's include/host_device/shmem_common_types.h (hicann/shmem
// 643bfb7): the types, constants and qualifier macros shared by host and device code, which
// shmem.h, SHMEM's device headers and its profiling frames include. For the NPU-branch compile
// check only; ACLSHMEM_DEVICE (always_inline __aicore__ __inline__ there) is plain __aicore__
// here so that a declaration without its body draws no warning.
#pragma once

#include <cstddef>
#include <cstdint>

#include "acl/acl.h"  // SHMEM includes acl/acl_rt.h, which acl/acl.h includes

// Expanded only in device code, where kernel_operator.h (or bisheng) defines the qualifiers.
#define ACLSHMEM_DEVICE __aicore__
#define ACLSHMEM_GLOBAL_VECTOR [[bisheng::core_ratio(0, 1)]] __global__ __aicore__

extern "C" {
enum aclshmem_team_index_t { ACLSHMEM_TEAM_INVALID = -1, ACLSHMEM_TEAM_WORLD = 0 };
enum data_op_engine_type_t {
    ACLSHMEM_DATA_OP_MTE = 0x01,
    ACLSHMEM_DATA_OP_SDMA = 0x02,
    ACLSHMEM_DATA_OP_ROCE = 0x04,
    ACLSHMEM_DATA_OP_UDMA = 0x08,
    ACLSHMEM_DATA_OP_MAX = 0x08,
};
enum aclshmem_signal_op_type_t { ACLSHMEM_SIGNAL_SET, ACLSHMEM_SIGNAL_ADD };
enum aclshmem_cmp_op_type_t {
    ACLSHMEM_CMP_EQ = 0,
    ACLSHMEM_CMP_NE,
    ACLSHMEM_CMP_GT,
    ACLSHMEM_CMP_GE,
    ACLSHMEM_CMP_LT,
    ACLSHMEM_CMP_LE
};
typedef int aclshmem_team_t;
#define SCALAR_DATA_CACHELINE_SIZE 64
#define ACLSHMEM_MAX_AIV_PER_NPU 48
#define ACLSHMEM_CYCLE_PROF_MAX_BLOCK 64
#define ACLSHMEM_CYCLE_PROF_FRAME_CNT 1024
typedef struct {
    int64_t ccount[ACLSHMEM_CYCLE_PROF_FRAME_CNT];
    int64_t cycles[ACLSHMEM_CYCLE_PROF_FRAME_CNT];
} aclshmem_prof_block_t;
typedef struct {
    int32_t pe_id;
    aclshmem_prof_block_t block_prof[ACLSHMEM_CYCLE_PROF_MAX_BLOCK];
} aclshmem_prof_pe_t;
// The state the device functions read (aclshmemi_get_state): SHMEM's struct has some thirty
// members; declared here is only the one the profiling frames read, so its layout is not SHMEM's.
typedef struct {
    aclshmem_prof_pe_t* profs;
} aclshmem_device_host_state_t;
}
