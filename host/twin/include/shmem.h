// CPU twin of the SHMEM API (hicann/shmem include/shmem.h) that the combine driver and
// kernel call: the same names, enum types, struct fields and parameter types as the
// public headers (docs/hardware-rules.md#11-public-headers-and-the-build). PEs are processes; the symmetric heap is
// one POSIX shared-memory segment mapped by every PE, so aclshmem_ptr is arithmetic.
// The device functions enforce what the hardware does (twin_engines.cpp, twin_checker.cpp, twin_pipes.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernel_operator.h"

// ---- host_device/shmem_common_types.h ----
enum data_op_engine_type_t {
    ACLSHMEM_DATA_OP_MTE = 0x01,
    ACLSHMEM_DATA_OP_SDMA = 0x02,
    ACLSHMEM_DATA_OP_ROCE = 0x04,
    ACLSHMEM_DATA_OP_UDMA = 0x08,
    ACLSHMEM_DATA_OP_MAX = 0x08,
};
enum aclshmem_cmp_op_type_t { ACLSHMEM_CMP_EQ = 0, ACLSHMEM_CMP_NE, ACLSHMEM_CMP_GT, ACLSHMEM_CMP_GE, ACLSHMEM_CMP_LT,
                              ACLSHMEM_CMP_LE };

#define ACLSHMEM_MAX_AIV_PER_NPU 48  // SDMA streams SHMEM creates: one per AIV block 0..47
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

// A device function of SHMEM, and what a kernel written for it marks its own helpers with;
// an AIV-only kernel entry.
#define ACLSHMEM_DEVICE __attribute__((always_inline)) __aicore__ __inline__
#define ACLSHMEM_GLOBAL_VECTOR [[bisheng::core_ratio(0, 1)]] __global__ __aicore__

// ---- host/shmem_host_def.h ----
#define ACLSHMEM_MAX_IP_PORT_LEN 64
constexpr int DEFAULT_TIMEOUT = 120;

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

// The unique id of SHMEM's uid bootstrap; the twin bootstraps by ip_port alone (twin_heap.cpp),
// so a driver that hands one over in comm_args is not asked for it.
constexpr uint16_t ACLSHMEM_UNIQUE_ID_INNER_LEN = 124;
typedef struct {
    int32_t version;
    int my_pe;
    int n_pes;
    char internal[ACLSHMEM_UNIQUE_ID_INNER_LEN];
} aclshmemx_uniqueid_t;

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
    aclshmem_init_optional_attr_t option_attr = {(1 << 16) + int(sizeof(aclshmem_init_optional_attr_t)),
                                                 ACLSHMEM_DATA_OP_MTE, DEFAULT_TIMEOUT, DEFAULT_TIMEOUT,
                                                 DEFAULT_TIMEOUT, 0};
    void* comm_args = nullptr;
    uint64_t instance_id = 0;
} aclshmemx_init_attr_t;

// ---- host API ----
int aclshmemx_init_attr(aclshmemx_bootstrap_t bootstrap_flags, aclshmemx_init_attr_t* attributes);
int aclshmem_finalize(void);
void* aclshmem_malloc(size_t size);  // 16 B aligned, as SHMEM's heap guarantees (sizes rounded up to 16 B)
// `size` bytes at a multiple of `alignment`, which must be a power of two; nullptr otherwise or
// when it does not fit (SHMEM include/host/mem/shmem_host_heap.h).
void* aclshmem_align(size_t alignment, size_t size);
void aclshmem_free(void* ptr);
void* aclshmem_ptr(void* ptr, int pe);
void aclshmem_barrier_all(void);  // host: all PEs; refused from a kernel core (MIX kernels only)
uint64_t util_get_ffts_config(void);
void aclshmemx_get_prof(aclshmem_prof_pe_t** out_profs, bool verbose);

// ---- device API (one function serves host and core threads on the twin) ----
int aclshmem_my_pe(void);
int aclshmem_n_pes(void);
// SHMEM's core barrier of an AIV-only kernel (GM flags; src/device/gm2gm/shmemi_device_cc.h):
// every block of the launch must be resident at once; it drains no pipe.
void aclshmemi_barrier_core_soft();
void util_set_ffts_config(uint64_t config);

namespace twin {
// The device calls below take the caller's file and line (defaulted builtins, twin only) so
// that every message about a call names the kernel line that made it.
void mte_quiet(const Site& site);
int32_t signal_wait_until(int32_t* sig, int cmp, int32_t value, const Site& site);
int int32_test(int32_t* sig, int cmp, int32_t value, const Site& site);
void mte_put_gm(void* dst, const void* src, void* ub, uint32_t ub_size, size_t bytes, size_t elem_bytes, int pe,
                uint32_t sync_id, const Site& site);
void mte_put_ub(void* dst, const void* ub_src, size_t bytes, int pe, uint32_t sync_id, const Site& site);
void sdma_put(void* dst, const void* src, void* ub, uint32_t ub_size, size_t bytes, int pe, uint32_t sync_id,
              const Site& site);
void sdma_quiet(void* ub, uint32_t ub_size, uint32_t sync_id, const Site& site);
// Whether the calling core's last SDMA quiet saw every SDMA put of the core land (false: it gave
// up, COMBINE_TWIN_SDMA_QUIET_GIVEUP); what the NPU build proves with a receipt
// (combine_sdma_quiet, kernels/combine_platform.h). Twin only.
bool sdma_quiet_landed();
void prof_start(uint32_t frame);
void prof_end(uint32_t frame);
}  // namespace twin

// GM -> UB -> remote GM through `buf`, in chunks of ub_size bytes (the last UB -> GM leg
// stays in flight until a quiet or an MTE3->MTE2 flag).
template <typename T>
inline void aclshmemx_mte_put_nbi(__gm__ T* dst, __gm__ T* src, __ubuf__ T* buf, uint32_t ub_size, uint32_t elem_size,
                                  int pe, uint32_t sync_id, const char* file = __builtin_FILE(),
                                  int line = __builtin_LINE()) {
    twin::mte_put_gm(dst, src, twin::ub_flat(buf), ub_size, size_t(elem_size) * sizeof(T), sizeof(T), pe, sync_id,
                     twin::Site{file, line, "aclshmemx_mte_put_nbi"});
}

// UB -> remote GM (MTE3 only).
template <typename T>
inline void aclshmemx_mte_put_nbi(__gm__ T* dst, __ubuf__ T* src, uint32_t elem_size, int pe, uint32_t sync_id,
                                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    twin::mte_put_ub(dst, twin::ub_flat(src), size_t(elem_size) * sizeof(T), pe, sync_id,
                     twin::Site{file, line, "aclshmemx_mte_put_nbi"});
}

template <typename T>
inline void aclshmemx_sdma_put_nbi(__gm__ T* dst, __gm__ T* src, __ubuf__ T* buf, uint32_t ub_size, uint32_t elem_size,
                                   int pe, uint32_t sync_id, const char* file = __builtin_FILE(),
                                   int line = __builtin_LINE()) {
    twin::sdma_put(dst, src, twin::ub_flat(buf), ub_size, size_t(elem_size) * sizeof(T), pe, sync_id,
                   twin::Site{file, line, "aclshmemx_sdma_put_nbi"});
}

template <typename T>
inline void aclshmemx_sdma_quiet(__ubuf__ T* buf, uint32_t ub_size, uint32_t sync_id, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
    twin::sdma_quiet(twin::ub_flat(buf), ub_size, sync_id, twin::Site{file, line, "aclshmemx_sdma_quiet"});
}

// Every pipe's operations complete and the data cache is cleaned: the calling core's puts are
// delivered (src/device/gm2gm/shmem_device_mo.hpp). aclshmem_fence is the same call in SHMEM.
inline void aclshmem_quiet(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    twin::mte_quiet(twin::Site{file, line, "aclshmem_quiet"});
}
inline void aclshmem_fence(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    twin::mte_quiet(twin::Site{file, line, "aclshmem_fence"});
}

inline int32_t aclshmem_signal_wait_until(__gm__ int32_t* sig_addr, int cmp, int32_t cmp_val,
                                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return twin::signal_wait_until(sig_addr, cmp, cmp_val, twin::Site{file, line, "aclshmem_signal_wait_until"});
}

// 1 when *ivars compares true with cmp_value (after a clean/invalidate of its line), else 0
// (include/device/gm2gm/shmem_device_p2p_sync.h, ACLSHMEM_TEST for int32). A core polling it
// gives the twin's other threads the CPU between polls.
inline int aclshmem_int32_test(__gm__ int32_t* ivars, int cmp, int32_t cmp_value, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
    return twin::int32_test(ivars, cmp, cmp_value, twin::Site{file, line, "aclshmem_int32_test"});
}
