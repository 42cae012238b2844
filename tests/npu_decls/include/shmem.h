// Declaration-only stand-in for SHMEM's public header (hicann/shmem include/shmem.h at
// 643bfb7 and the headers it includes), for the NPU-branch compile check: the host API
// always, the device API when compiling AI-core code (__CCE_AICORE__), as shmem.h does.
// Declarations only. As in SHMEM, the device headers include files from <shmem>/src/device
// (here ../src/device), which must be on the include path.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "acl/acl.h"
#include "host_device/shmem_common_types.h"

#define ACLSHMEM_HOST_API __attribute__((visibility("default")))
#define shmem_my_pe aclshmem_my_pe  // host/team/shmem_host_team.h and device/team/shmem_device_team.h

// ---- host/shmem_host_def.h ----
extern "C" {
constexpr int DEFAULT_TIMEOUT = 120;
#define ACLSHMEM_MAX_IP_PORT_LEN 64
enum aclshmemx_bootstrap_t : unsigned int {
    ACLSHMEMX_INIT_WITH_DEFAULT = 1U << 0,
    ACLSHMEMX_INIT_WITH_MPI = 1U << 1,
    ACLSHMEMX_INIT_WITH_UNIQUEID = 1U << 3,
    ACLSHMEMX_INIT_MAX = 1U << 31
};
typedef struct {
    int version;
    data_op_engine_type_t data_op_engine_type;
    uint32_t shm_init_timeout;
    uint32_t shm_create_timeout;
    uint32_t control_operation_timeout;
    int32_t sockFd;
} aclshmem_init_optional_attr_t;
typedef struct aclshmemx_init_attr_t {
    int my_pe;
    int n_pes;
    char ip_port[ACLSHMEM_MAX_IP_PORT_LEN] = {};
    uint64_t local_mem_size;
    aclshmem_init_optional_attr_t option_attr = {(1 << 16) + sizeof(aclshmem_init_optional_attr_t),
                                                 ACLSHMEM_DATA_OP_MTE, DEFAULT_TIMEOUT, DEFAULT_TIMEOUT,
                                                 DEFAULT_TIMEOUT};
    void* comm_args = nullptr;
    uint64_t instance_id = 0;
} aclshmemx_init_attr_t;
}

// ---- host/shmem_host_def.h: status codes and the uid of the uid bootstrap ----
enum aclshmem_error_code_t : int {
    ACLSHMEM_SUCCESS = 0,
    ACLSHMEM_INVALID_PARAM = -1,
    ACLSHMEM_INVALID_VALUE = -2,
    ACLSHMEM_SMEM_ERROR = -3,
    ACLSHMEM_INNER_ERROR = -4,
    ACLSHMEM_NOT_INITED = -5,
    ACLSHMEM_BOOTSTRAP_ERROR = -6,
    ACLSHMEM_TIMEOUT_ERROR = -7,
    ACLSHMEM_MALLOC_FAILED = -8,
    ACLSHMEM_DL_FUNC_FAILED = -9,
    ACLSHMEM_INNER_TIMEOUT = -10,
    ACLSHMEM_UNDER_API_UNLOAD = -11,
    ACLSHMEM_NOT_SUPPORTED = -100,
};
constexpr uint16_t ACLSHMEM_UNIQUE_ID_INNER_LEN = 124;
typedef struct {
    int32_t version;
    int my_pe;
    int n_pes;
    char internal[ACLSHMEM_UNIQUE_ID_INNER_LEN];
} aclshmemx_uniqueid_t;

// ---- host API: init, heap, rma, cc, p2p sync, team, log ----
extern "C" {
ACLSHMEM_HOST_API int aclshmemx_init_attr(aclshmemx_bootstrap_t bootstrap_flags, aclshmemx_init_attr_t* attributes);
ACLSHMEM_HOST_API int aclshmem_finalize(void);
ACLSHMEM_HOST_API void* aclshmem_malloc(size_t size);
ACLSHMEM_HOST_API void* aclshmem_align(size_t alignment, size_t size);
ACLSHMEM_HOST_API void aclshmem_free(void* ptr);
ACLSHMEM_HOST_API void* aclshmem_ptr(void* ptr, int pe);
ACLSHMEM_HOST_API void aclshmem_barrier_all(void);
ACLSHMEM_HOST_API uint64_t util_get_ffts_config(void);
ACLSHMEM_HOST_API void aclshmem_signal_wait_until(int32_t* sig_addr, int cmp, int32_t cmp_val);
ACLSHMEM_HOST_API int aclshmem_my_pe(void);
ACLSHMEM_HOST_API int aclshmem_n_pes(void);
ACLSHMEM_HOST_API void aclshmemx_get_prof(aclshmem_prof_pe_t** out_profs, bool verbose);
}

#if defined(__CCE_AICORE__)
#include "kernel_operator.h"

// ---- device/shmem_def.h ----
extern "C" {
constexpr uint64_t ACLSHMEM_INTERNAL_UB_BUF_START_ADDR = 188 * 1024;
constexpr uint32_t UB_ALIGN_SIZE = 32;
struct non_contiguous_copy_param {
    uint32_t repeat;
    uint32_t length;
    uint32_t src_ld;
    uint32_t dst_ld;
};
}

// ---- device/team, device/gm2gm: mo, cc, p2p sync ----
extern "C" {
ACLSHMEM_DEVICE int aclshmem_my_pe(void);
ACLSHMEM_DEVICE int aclshmem_n_pes(void);
ACLSHMEM_DEVICE void aclshmem_quiet(void);
ACLSHMEM_DEVICE void aclshmem_fence(void);
ACLSHMEM_DEVICE void util_set_ffts_config(uint64_t config);
ACLSHMEM_DEVICE void aclshmem_barrier(aclshmem_team_t team);
ACLSHMEM_DEVICE void aclshmem_barrier_all(void);
[[deprecated("aclshmemx_barrier_all_vec is deprecated, please use aclshmem_barrier_all instead.")]]
ACLSHMEM_DEVICE void aclshmemx_barrier_all_vec(void);
ACLSHMEM_DEVICE void aclshmemx_signal_op(__gm__ int32_t* sig_addr, int32_t signal, int sig_op, int pe);
ACLSHMEM_DEVICE int32_t aclshmem_signal_wait_until(__gm__ int32_t* sig_addr, int cmp, int32_t cmp_val);
// device/gm2gm/shmem_device_p2p_sync.h declares aclshmem_<type>_test for each of its types
// (ACLSHMEM_TEST over ACLSHMEM_P2P_SYNC_TYPE_FUNC): 1 when *ivars, read after invalidating its
// cache line, compares (cmp: aclshmem_cmp_op_type_t) true with cmp_value, else 0.
ACLSHMEM_DEVICE int aclshmem_int32_test(__gm__ int32_t* ivars, int cmp, int32_t cmp_value);
}
// device/gm2gm/shmem_device_cc.h ends by including SHMEM's internal core barriers from src/device.
#include "gm2gm/shmemi_device_cc.h"

// ---- device/gm2gm/engine/shmem_device_mte.h ----
ACLSHMEM_DEVICE __gm__ void* aclshmem_ptr(__gm__ void* ptr, int pe);
template <typename T>
ACLSHMEM_DEVICE void aclshmemx_mte_get_nbi(__gm__ T* dst, __gm__ T* src, __ubuf__ T* buf, uint32_t ub_size,
                                           uint32_t elem_size, int pe, uint32_t sync_id);
template <typename T>
ACLSHMEM_DEVICE void aclshmemx_mte_put_nbi(__gm__ T* dst, __gm__ T* src, __ubuf__ T* buf, uint32_t ub_size,
                                           uint32_t elem_size, int pe, uint32_t sync_id);
template <typename T>
ACLSHMEM_DEVICE void aclshmemx_mte_put_nbi(__gm__ T* dst, __gm__ T* src, __ubuf__ T* buf, uint32_t ub_size,
                                           const non_contiguous_copy_param& copy_params, int pe, uint32_t sync_id);
ACLSHMEM_DEVICE void aclshmemx_mte_quiet();

// ---- device/ub2gm/engine/shmem_device_mte.h ----
template <typename T>
ACLSHMEM_DEVICE void aclshmemx_mte_get_nbi(__ubuf__ T* dst, __gm__ T* src, uint32_t elem_size, int pe,
                                           uint32_t sync_id);
template <typename T>
ACLSHMEM_DEVICE void aclshmemx_mte_put_nbi(__gm__ T* dst, __ubuf__ T* src, uint32_t elem_size, int pe,
                                           uint32_t sync_id);

// ---- device/gm2gm/engine/shmem_device_sdma.h ----
template <typename T>
ACLSHMEM_DEVICE void aclshmemx_sdma_get_nbi(__gm__ T* dst, __gm__ T* src, __ubuf__ T* buf, uint32_t ub_size,
                                            uint32_t elem_size, int pe, uint32_t sync_id);
template <typename T>
ACLSHMEM_DEVICE void aclshmemx_sdma_put_nbi(__gm__ T* dst, __gm__ T* src, __ubuf__ T* buf, uint32_t ub_size,
                                            uint32_t elem_size, int pe, uint32_t sync_id);
template <typename T>
ACLSHMEM_DEVICE void aclshmemx_sdma_quiet(__ubuf__ T* buf, uint32_t ub_size, uint32_t sync_id);
#endif  // __CCE_AICORE__
