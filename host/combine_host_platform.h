// Host-side hooks that only the twin implements: labelling the window's regions (so the
// twin can count status writes and name slots), dumping the per-plane counters, and telling
// the other PEs that this one failed.
// On the NPU they do nothing; the kernel and the driver's logic are the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(COMBINE_TARGET_TWIN)
#include "twin_platform.h"
inline void platform_label_window(uint8_t* payload, size_t payload_bytes, uint64_t stride, uint8_t* status,
                                  size_t status_bytes, uint64_t status_slot, uint64_t flag_bytes, uint64_t row_bytes = 0) {
    twin::label_region(payload, payload_bytes, twin::kRegionPayload, stride, row_bytes);
    twin::label_region(status, status_bytes, twin::kRegionStatus, status_slot, flag_bytes);
}
// The segment variant: `positions` maps a status slot to its payload row (int32 per slot, the
// receiver's own table), `inbox` holds the bases receivers publish (one slot of `inbox_slot` B each).
inline void platform_label_layout(uint8_t* positions, uint8_t* inbox, size_t inbox_bytes, uint64_t inbox_slot) {
    twin::label_layout(positions, inbox, inbox_bytes, inbox_slot);
}
// x_out, one slot per token row: the operation stream names the rows stage 2 stores (twin_ops.cpp).
inline void platform_label_output(uint8_t* x_out, size_t bytes, uint64_t row_bytes) {
    twin::label_region(x_out, bytes, twin::kRegionOutput, row_bytes);
}
inline bool platform_dump_counters(const std::string& path) { return twin::dump_counters(path.c_str()); }
// A failure after SHMEM started: the twin's other PEs stop at once (status 4) rather than wait.
inline void platform_abort_peers() { twin::abort_peers(); }
constexpr const char* kPlatformName = "twin";
// The twin has both data planes.
constexpr bool kPlatformHasSdma = true;
#else
inline void platform_label_window(uint8_t*, size_t, uint64_t, uint8_t*, size_t, uint64_t, uint64_t, uint64_t = 0) {}
inline void platform_label_output(uint8_t*, size_t, uint64_t) {}
inline void platform_label_layout(uint8_t*, uint8_t*, size_t, uint64_t) {}
inline bool platform_dump_counters(const std::string&) { return true; }
// No way to tell the other PEs on the NPU: they end by their own bounded waits (the kernel's
// flag waits, the timed stream sync, the barrier watchdog: combine_host.cpp), not by SHMEM's.
inline void platform_abort_peers() {}
constexpr const char* kPlatformName = "npu";
// SHMEM's SDMA engine needs CANN 9.0.0 or later; cmake/npu.cmake sets COMBINE_NPU_SDMA.
#if defined(COMBINE_NPU_SDMA) && COMBINE_NPU_SDMA
constexpr bool kPlatformHasSdma = true;
#else
constexpr bool kPlatformHasSdma = false;
#endif
#endif

// Data planes the driver asks SHMEM for (aclshmemx_init_attr option_attr.data_op_engine_type).
#if defined(COMBINE_TARGET_TWIN) || (defined(COMBINE_NPU_SDMA) && COMBINE_NPU_SDMA)
#define COMBINE_DATA_OP_ENGINES (ACLSHMEM_DATA_OP_MTE | ACLSHMEM_DATA_OP_SDMA)
#else
#define COMBINE_DATA_OP_ENGINES (ACLSHMEM_DATA_OP_MTE)
#endif
