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

enum RegionKind : int { kRegionPayload = 0, kRegionStatus = 1, kRegionOutput = 2, kRegionControl = 3 };

// Host-side annotation: puts landing in a status region count as status writes, and
// waits on it report their slot; an output region (x_out, one slot per token row) names the
// token of the vector path's stores in the operation stream (twin_ops.cpp). `slot_bytes` is the size of one slot of the region (its
// stride); for a status region, `flag_bytes` is the ready block at the slot's start that
// status puts write and waits must cover word by word (0: the whole slot).
// For a payload region, `flag_bytes` is the row a slot receives (h*sizeof(T)): a slot's payload is
// complete once that many of its bytes have landed, whatever puts carried them (0: at the first).
void label_region(void* sym, size_t bytes, RegionKind kind, uint64_t slot_bytes, uint64_t flag_bytes = 0);

// The segment variant (docs/variants.md#1-one-sdma-call-per-segment), after label_region of the
// payload and status regions: `positions` (int32 per status slot, this PE's own table) names the
// payload row of each status slot, and `inbox` (a control region of `inbox_slot`-byte slots, slot r
// written by receiver PE r: a 32 B ready block, then its bases) is what a core must wait on before
// it puts into PE r's layout. Writes into the inbox count as control writes, not payload.
void label_layout(void* positions, void* inbox, size_t inbox_bytes, uint64_t inbox_slot);

// Per-plane counters (puts, bytes, quiets, status writes, control writes, SDMA SQEs) of the last launch and of all
// launches, as JSON. Returns false (errno set) when the file cannot be written.
bool dump_counters(const char* path);

// The driver failed after aclshmemx_init_attr: tell the other PEs (they stop with status 4
// at their next wait) instead of leaving them to wait for it. Nothing before init.
void abort_peers();

}  // namespace twin
