// Host-side hooks that only the twin implements: labelling the window's regions (so the
// twin can count status writes and name slots) and dumping the per-plane counters.
// On the NPU they do nothing; the kernel and the driver's logic are the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(COMBINE_TARGET_TWIN)
#include "twin_platform.h"
inline void platform_label_window(uint8_t* payload, size_t payload_bytes, uint64_t stride, uint8_t* status,
                                  size_t status_bytes, uint64_t status_slot) {
    twin::label_region(payload, payload_bytes, twin::kRegionPayload, stride);
    twin::label_region(status, status_bytes, twin::kRegionStatus, status_slot);
}
inline bool platform_dump_counters(const std::string& path) { return twin::dump_counters(path.c_str()); }
constexpr const char* kPlatformName = "twin";
#else
inline void platform_label_window(uint8_t*, size_t, uint64_t, uint8_t*, size_t, uint64_t) {}
inline bool platform_dump_counters(const std::string&) { return true; }
constexpr const char* kPlatformName = "npu";
#endif
