// Host-visible interface of the combine kernel: window layout, launch geometry and the
// launch wrapper. Layout and protocol: docs/protocol.md#2-dispatch-layout, docs/decision-rule.md#1-the-rule, docs/protocol.md#4-the-symmetric-window and docs/hardware-rules.md.
#pragma once

#include <cstddef>
#include <cstdint>

// Helpers the kernel, the driver and the twin share run on the host and on the AI core:
// asc-devkit spells that __host_aicore__ (kernel_operator.h); a host-only translation unit
// (the driver) has no AI-core side, so there the qualifier is empty.
#ifndef __host_aicore__
#define __host_aicore__
#endif

namespace combine {

enum class Dtype : uint32_t { Int32 = 0, Float16 = 1, BFloat16 = 2 };
// MteOnly: classic. DualPlane: doubleplane, one SDMA call per row into the token's slot.
// DualPlaneSegment: doubleplane with the receiver's layout by expert (docs/variants.md#1-one-sdma-call-per-segment):
// every row of a segment lands contiguously, so an SDMA segment goes in one call per core's chunk.
enum class Policy : uint32_t { MteOnly = 0, DualPlane = 1, DualPlaneSegment = 2 };

// A status slot: the ready value in 8 int32 words (32 B: what a status put writes and a wait
// checks, word by word), alone on a 64 B slot. The AI core's scalar data cache works on 64 B
// lines: a line holding two slots that different PEs write can have one PE's ready value
// undone when a core cleans the line after resetting the other slot (SHMEM pads its own flags
// to a full line for this; docs/hardware-rules.md#7-status-slots-and-the-scalar-cache).
constexpr uint32_t kStatusSlotBytes = 64;  // one scalar cache line per slot
constexpr uint32_t kStatusWords = 8;       // the ready block: 8 int32
constexpr uint32_t kStatusFlagBytes = kStatusWords * 4;
constexpr int32_t kStatusReady = 1;
// SDMA-quiet before the outstanding SQEs (1 MiB descriptors) would exceed this: the ring depth
// assumed, as SHMEM writes SQEs with no fullness check (docs/hardware-rules.md#6-sdma).
constexpr uint32_t kSdmaQuietEvery = 256;
constexpr uint64_t kSdmaSqeBytes = 1u << 20;  // SHMEM cuts an SDMA call into SQEs of at most 1 MiB
// SQEs of one SDMA call of `bytes`.
__host_aicore__ inline uint32_t sdma_sqes(uint64_t bytes) {
    return uint32_t((bytes + kSdmaSqeBytes - 1) / kSdmaSqeBytes);
}
constexpr uint32_t kPayloadAlign = 32;
constexpr uint32_t kProfFrameFullOp = 0;
constexpr uint32_t kProfFrameCommOnly = 1;
constexpr uint32_t kMaxSdmaBlocks = 48;    // SHMEM makes one SDMA stream per AIV block 0..47

// UB map of one AIV core (bytes), one place for every region the kernel uses. Everything
// stays inside the 192 KiB of A2/A3 (SHMEM's put paths check ub_limit = 192 KiB; its own
// 188 KiB+ area is used only inside SHMEM's own launches, docs/hardware-rules.md#5-ub-ranges); no two
// regions overlap (the twin refuses overlapping roles, host/twin/twin_pipes.cpp).
//   [0, 64)            SDMA scratch (SHMEM needs >= 64 B)
//   [64, 96)           the ready value x 8, source of status puts (filled by the scalar unit)
//   [1 KiB, 129 KiB)   MTE staging: two buffers, used in turn (stage 1)
//   [129 KiB, 177 KiB) stage 2 (ReduceTokens) tiles, LocalTensors at fixed addresses
//                      (asc-devkit "static Tensor programming": no TPipe, flags by hand):
//                      in[2] (T, double-buffered GM -> UB), cast (float32), acc (float32),
//                      out[2] (T, double-buffered UB -> GM)
constexpr uint32_t kUbSdmaOff = 0;
constexpr uint32_t kUbSdmaBytes = 64;
constexpr uint32_t kUbStatusOff = 64;
constexpr uint32_t kUbStatusBytes = kStatusFlagBytes;
constexpr uint32_t kUbMteOff = 1024;
constexpr uint32_t kUbMteStageBytes = 64 * 1024;   // per buffer (reported as UBsize/KB); a row of up to 16 Ki int32
constexpr uint32_t kUbMteBuffers = 2;
constexpr uint32_t kReduceTile = 2048;             // elements per stage-2 tile (h is cut into tiles of this)
constexpr uint32_t kReduceTileBytes = kReduceTile * 4;  // sized for 4-byte elements (int32, float32)
constexpr uint32_t kReduceBuffers = 2;             // in and out tiles are double-buffered
constexpr uint32_t kUbReduceOff = kUbMteOff + kUbMteBuffers * kUbMteStageBytes;
constexpr uint32_t kUbReduceInOff = kUbReduceOff;                                         // + b * kReduceTileBytes
constexpr uint32_t kUbReduceCastOff = kUbReduceInOff + kReduceBuffers * kReduceTileBytes;  // float32
constexpr uint32_t kUbReduceAccOff = kUbReduceCastOff + kReduceTileBytes;                  // float32
constexpr uint32_t kUbReduceOutOff = kUbReduceAccOff + kReduceTileBytes;                   // + b * kReduceTileBytes
constexpr uint32_t kUbEnd = kUbReduceOutOff + kReduceBuffers * kReduceTileBytes;
constexpr uint32_t kUbBytes = 192 * 1024;  // per AIV core on A2/A3
static_assert(kUbSdmaOff + kUbSdmaBytes <= kUbStatusOff, "UB: SDMA scratch overlaps the status block");
static_assert(kUbStatusOff + kUbStatusBytes <= kUbMteOff, "UB: status block overlaps MTE staging");
static_assert(kUbMteOff + kUbMteBuffers * kUbMteStageBytes <= kUbReduceOff, "UB: MTE staging overlaps stage 2");
static_assert(kUbEnd <= kUbBytes, "UB: the kernel's regions run past the core's UB");
static_assert(kUbSdmaOff % 32 == 0 && kUbStatusOff % 32 == 0 && kUbMteOff % 32 == 0 && kUbReduceOff % 32 == 0 &&
                  kReduceTileBytes % 32 == 0,
              "UB: regions must be 32-byte aligned (Ascend C: UB operands start at 32 B)");

// Pipe event ids (EVENT_ID0..7; asc-devkit reserves 6 and 7 for its own use in static
// Tensor programming). A SHMEM put pairs its own MTE2->MTE3 (and between chunks MTE3->MTE2)
// flags on the sync_id it is given, and the pipes run ahead of each other: two puts in flight
// on one id can set its bit twice (docs/hardware-rules.md#3-event-flags). So each MTE staging buffer has
// its own id, used by its puts and by its own "free again" MTE3->MTE2 flag (the put's flags
// and that one never overlap: the buffer is refilled only after it). Stage 1 otherwise: one
// id for SDMA (the SDMA calls' own MTE3->MTE2 flags) and one for the status puts (UB -> GM,
// after the S->MTE3 flag of their ready block). Stage 2: one id per double-buffer half, for
// each of MTE2_V, V_MTE2, V_MTE3 and MTE3_V.
constexpr uint32_t kSdmaSyncId = 0;   // EVENT_ID0
constexpr uint32_t kMteSyncId = 1;    // EVENT_ID1: status puts
constexpr uint32_t kStageEvent0 = 2;  // EVENT_ID2, EVENT_ID3: staging buffer 0, 1 (its puts' sync_id, free again)
constexpr uint32_t kReduceEvent0 = 4; // EVENT_ID4, EVENT_ID5: stage-2 tile 0, 1

// Distance between two status slots in the window: a whole line each.
constexpr uint32_t kStatusStride = kStatusSlotBytes;

__host_aicore__ inline uint64_t payload_stride(uint32_t h, uint32_t elem_bytes) {
    const uint64_t row = uint64_t(h) * elem_bytes;
    return (row + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign;
}

// Symmetric window of one PE: bs*topk payload slots, then bs*topk status slots of
// kStatusStride bytes (each on its own 64 B line). With `pes` > 0 (the segment variant,
// Policy::DualPlaneSegment) the segment area follows (docs/variants.md#3-extra-memory-and-steps):
//   positions [bs*topk] int32: where slot token*topk + k's row lies in the layout by expert;
//   bases [pes*epp] int32: the first layout row of each expert, by expert id (contiguous per
//     destination PE d: bases[d*epp, (d+1)*epp), the part d is sent);
//   cursor [pes*epp] int32: core 0's scratch while it places the rows;
//   inbox [pes] slots of inbox_stride bytes: slot r holds what receiver PE r published to this PE,
//     a 64 B ready line (the 32 B ready block, written by MTE after the bases) then its epp bases.
// The payload slots themselves are then indexed by layout row instead of by token*topk + k.
struct WindowLayout {
    uint64_t slots, stride, payload_off, status_off, total_bytes;
    uint64_t positions_off = 0, bases_off = 0, cursor_off = 0, inbox_off = 0, inbox_stride = 0;
};

__host_aicore__ inline uint64_t align_line(uint64_t n) { return (n + kStatusSlotBytes - 1) / kStatusSlotBytes * kStatusSlotBytes; }

__host_aicore__ inline WindowLayout window_layout(uint32_t bs, uint32_t topk, uint32_t h, uint32_t elem_bytes,
                                                  uint32_t pes = 0, uint32_t expert_per_pe = 0) {
    WindowLayout w{};
    w.slots = uint64_t(bs) * topk;
    w.stride = payload_stride(h, elem_bytes);
    w.payload_off = 0;
    w.status_off = align_line(w.slots * w.stride);  // on a line
    w.total_bytes = w.status_off + w.slots * kStatusStride;
    if (pes > 0) {
        const uint64_t experts = uint64_t(pes) * expert_per_pe;
        w.positions_off = w.total_bytes;
        w.bases_off = w.positions_off + align_line(w.slots * 4);
        w.cursor_off = w.bases_off + align_line(experts * 4);
        w.inbox_off = w.cursor_off + align_line(experts * 4);
        w.inbox_stride = kStatusSlotBytes + align_line(uint64_t(expert_per_pe) * 4);
        w.total_bytes = w.inbox_off + uint64_t(pes) * w.inbox_stride;
    }
    return w;
}

// Blocks of one launch: `cores_per_rank` per source rank (1: the reference's structure), but
// never more than the SoC's AIV cores (more would run in waves, and blocks wait on each other)
// nor SHMEM's 48 SDMA streams. The blocks form groups of cores_per_rank; group g serves source
// ranks g, g + G, g + 2*G, ... (G = block_dim / cores_per_rank), core j of a group the j-th chunk
// of each of those segments' rows (docs/variants.md#2-cores-per-source-rank). The host checks
// 1 <= cores_per_rank <= min(AIV cores, 48) before it launches.
inline uint32_t launch_block_dim(uint32_t pes, uint32_t aiv_cores, uint32_t cores_per_rank = 1) {
    const uint32_t cap0 = aiv_cores < kMaxSdmaBlocks ? aiv_cores : kMaxSdmaBlocks;
    const uint32_t cpr = cores_per_rank < 1 ? 1 : cores_per_rank;
    const uint32_t groups_cap = cap0 / cpr > 0 ? cap0 / cpr : 1;
    const uint32_t groups = pes < groups_cap ? pes : groups_cap;
    return groups * cpr;
}

// What a core of the kernel leaves for the host when one of its waits gives up (no device
// wait of SHMEM's is bounded, so the kernel bounds its own: docs/hardware-rules.md#8-bounded-waits). One
// record per core, each on its own 64 B line of the diagnostics buffer, zero while all is well.
// StatusSlot: a status slot's flag; Bases: the segment variant's inbox (slot = the receiver PE whose
// bases never came).
// SdmaQuiet: an SDMA quiet that gave up (combine_sdma_quiet false): `slot` and `expert` are the
// first and last expand_x rows its SDMA puts carried, `word` how many rows, `seen` the PE of the
// first, `waited` the cycles the quiet took; the core writes no flag of its SDMA rows after it.
enum class WaitKind : int32_t { None = 0, StatusSlot = 1, Bases = 2, SdmaQuiet = 3 };
struct WaitTimeout {
    int32_t kind;     // WaitKind
    int32_t core;     // the core that gave up
    int32_t slot;     // status slot token * topk + k (Bases: the receiver PE)
    int32_t word;     // the word of the slot's ready block that never became ready
    int32_t seen;     // the value it held at the end
    int32_t expert;   // expert_ids[token, k]: the slot is sent by the PE that owns it
    int64_t waited;   // system cycles waited
};
constexpr uint32_t kDiagRecordBytes = 64;

// SDMA quiet receipts (combine_sdma_quiet, kernels/combine_platform.h): per core that may issue
// SDMA (blocks 0..47), two 64 B lines after the window, on a line of their own: the receipt's source
// then its destination. The driver allocates them with the window; the window's layout (what the
// planner counts) does not include them.
constexpr uint64_t kSdmaReceiptBytes = uint64_t(kMaxSdmaBlocks) * 2 * 64;
static_assert(sizeof(WaitTimeout) <= kDiagRecordBytes, "a core's wait record fits its line");

// Launch one combine on `stream` with `block_dim` AIV cores (launch_block_dim with the same
// `cores_per_rank`).
// All pointers are device (GM) addresses; `window` is the symmetric window of this PE; `diag`
// holds block_dim records of kDiagRecordBytes (zeroed by the host) and `wait_budget` is how
// long a core waits for one flag word, in system cycles (AscendC::GetSystemCycle).
void launch_combine(Dtype dtype, uint32_t block_dim, void* stream, uint8_t* expand_x, uint8_t* assist_info,
                    uint8_t* ep_recv_count, uint8_t* expert_ids, uint8_t* expert_scales, uint8_t* x_out,
                    uint8_t* window, uint8_t* diag, uint32_t bs, uint32_t h, uint32_t topk, uint32_t expert_per_pe,
                    Policy policy, uint64_t min_sdma_bytes, uint64_t wait_budget, uint32_t cores_per_rank = 1);

}  // namespace combine
