// CPU twin of the SHMEM host and device API that the combine driver and kernel call
// (combine-facts sections 6 and 7). PEs are processes; the symmetric heap is one POSIX
// shared-memory segment mapped by every PE, so aclshmem_ptr is address arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

#define ACLSHMEM_CYCLE_PROF_MAX_BLOCK 64
#define ACLSHMEM_CYCLE_PROF_FRAME_CNT 1024
#define ACLSHMEM_MAX_IP_PORT_LEN 64

enum { ACLSHMEM_CMP_EQ = 0, ACLSHMEM_CMP_NE, ACLSHMEM_CMP_GT, ACLSHMEM_CMP_GE, ACLSHMEM_CMP_LT, ACLSHMEM_CMP_LE };
enum { ACLSHMEMX_INIT_WITH_DEFAULT = 0 };

typedef enum : uint32_t {
    ACLSHMEM_DATA_OP_MTE = 0x01,
    ACLSHMEM_DATA_OP_SDMA = 0x02,
} data_op_engine_type_t;

typedef struct {
    uint32_t data_op_engine_type;
    uint32_t shm_init_timeout;
    uint32_t shm_create_timeout;
    uint32_t control_operation_timeout;
    int32_t sockFd;
} aclshmem_init_optional_attr_t;

typedef struct {
    int version;
    int my_pe;
    int n_pes;
    char ip_port[ACLSHMEM_MAX_IP_PORT_LEN];
    uint64_t local_mem_size;
    aclshmem_init_optional_attr_t option_attr;
} aclshmemx_init_attr_t;

typedef struct {
    int64_t ccount[ACLSHMEM_CYCLE_PROF_FRAME_CNT];
    int64_t cycles[ACLSHMEM_CYCLE_PROF_FRAME_CNT];
} aclshmem_prof_block_t;

typedef struct {
    int32_t pe_id;
    aclshmem_prof_block_t block_prof[ACLSHMEM_CYCLE_PROF_MAX_BLOCK];
} aclshmem_prof_pe_t;

// ---- host API ----
int aclshmemx_init_attr(int flags, aclshmemx_init_attr_t* attr);
void* aclshmem_malloc(size_t bytes);
void aclshmem_free(void* ptr);
int aclshmem_finalize();
// Twin profiling frames count nanoseconds: 1000 "cycles" per microsecond.
void aclshmemx_get_prof(aclshmem_prof_pe_t** out, bool verbose);

// ---- host and device API ----
int aclshmem_my_pe();
int aclshmem_n_pes();
void* aclshmem_ptr(void* sym, int pe);
// From a host thread: all PEs. From a kernel core: every core of every PE.
void aclshmem_barrier_all();
void aclshmem_quiet();
int32_t aclshmem_signal_wait_until(int32_t* sig, int cmp, int32_t value);

namespace twin {
void mte_put(void* dst_sym, const void* src, size_t bytes, int pe);
void sdma_put(void* dst_sym, const void* src, size_t bytes, int pe, uint32_t ub_size);
void sdma_quiet(uint32_t ub_size);
void prof_start(uint32_t frame);
void prof_end(uint32_t frame);
}  // namespace twin

template <typename T>
inline void aclshmemx_mte_put_nbi(T* dst, T* src, T* /*ub*/, uint32_t /*ub_size*/, uint32_t elem_count, int pe,
                                  uint32_t /*sync_id*/) {
    twin::mte_put(dst, src, size_t(elem_count) * sizeof(T), pe);
}

template <typename T>
inline void aclshmemx_sdma_put_nbi(T* dst, T* src, T* /*ub*/, uint32_t ub_size, uint32_t elem_count, int pe,
                                   uint32_t /*sync_id*/) {
    twin::sdma_put(dst, src, size_t(elem_count) * sizeof(T), pe, ub_size);
}

template <typename T>
inline void aclshmemx_sdma_quiet(T* /*ub*/, uint32_t ub_size, uint32_t /*sync_id*/) {
    twin::sdma_quiet(ub_size);
}

#define SHMEMI_PROF_START(frame) twin::prof_start(frame)
#define SHMEMI_PROF_END(frame) twin::prof_end(frame)
