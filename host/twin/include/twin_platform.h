// Twin-only entry points that the platform header maps the NPU spellings onto.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace twin {

// Base of the calling core's unified buffer (the modelled SoC's UB per AIV core).
uint8_t* ub_base();

// Run `body` as block_dim blocks on the SoC's AIV cores (in waves when block_dim exceeds
// them) and wait for them: the stream is synchronous.
void launch_kernel(uint32_t block_dim, void* stream, const std::function<void()>& body);

}  // namespace twin

namespace twin {

enum RegionKind : int { kRegionPayload = 0, kRegionStatus = 1, kRegionOutput = 2 };

// Host-side annotation: puts landing in a status region count as status writes, and
// waits on it report their slot; an output region (x_out, one slot per token row) names the
// token of the vector path's stores in the operation stream (twin_ops.cpp). `slot_bytes` is the size of one slot of the region (its
// stride); for a status region, `flag_bytes` is the ready block at the slot's start that
// status puts write and waits must cover word by word (0: the whole slot).
void label_region(void* sym, size_t bytes, RegionKind kind, uint64_t slot_bytes, uint64_t flag_bytes = 0);

// Per-plane counters (puts, bytes, quiets, status writes) of the last launch and of all
// launches, as JSON. Returns false (errno set) when the file cannot be written.
bool dump_counters(const char* path);

// The driver failed after aclshmemx_init_attr: tell the other PEs (they stop with status 4
// at their next wait) instead of leaving them to wait for it. Nothing before init.
void abort_peers();

}  // namespace twin
