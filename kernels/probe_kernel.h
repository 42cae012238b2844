// Host-visible interface of the probe kernel (`combine-lab probe`): microbenchmarks of the
// quantities the timing model assumes (docs/probe.md#2-what-each-measurement-times): SDMA
// throughput from k cores, the MTE put of one row, status flags and their round trip, the cost
// of aclshmem_quiet and of the SDMA quiet, polling a ready slot. One source for the NPU
// (bisheng) and the CPU twin (clang), written as the combine kernel is (kernels/combine_kernel.cpp).
#pragma once

#include <cstdint>

#ifndef __host_aicore__
#define __host_aicore__
#endif

namespace probe {

// What one launch measures. Every core of the launch runs the same body once; it records the
// system cycle before and after (ProbeTimes), the host takes the PE's span (last end - first
// start) as the launch's time.
enum class Kind : uint32_t {
    Sdma = 1,       // `puts` SDMA puts of `bytes` each, then one SDMA quiet (a quiet every 256 issues)
    SdmaIssue = 2,  // only the issue of `puts` SDMA puts (<= 256); the SDMA quiet after the timed span
    MtePut = 3,     // `puts` MTE puts of one row (`bytes`, GM -> UB -> remote GM), then aclshmem_quiet
    Flag = 4,       // `puts` 32 B status puts from UB, then aclshmem_quiet
    FlagRtt = 5,    // `puts` round trips: row + quiet + flag to dst, dst answers the same way
    Quiet = 6,      // `puts` aclshmem_quiet with nothing outstanding
    SdmaQuiet = 7,  // `puts` SDMA quiets with nothing outstanding
    Wait = 8,       // `puts` polls of a ready 8-word slot in this PE's window
};
// The rtt's answering side (the dst PE's launch of FlagRtt).
constexpr uint32_t kRoleSend = 0;
constexpr uint32_t kRoleAnswer = 1;

constexpr uint32_t kSdmaQuietEvery = 256;  // SQEs outstanding at most, as the combine kernel
constexpr uint64_t kSdmaSqeBytes = 1u << 20;  // SHMEM cuts an SDMA put into SQEs of at most 1 MiB
constexpr uint32_t kMaxCores = 48;         // SHMEM makes one SDMA stream per AIV block 0..47
constexpr uint32_t kStatusWords = 8;       // a status flag: 8 int32 (32 B), alone on a 64 B line
constexpr uint32_t kFlagSlotBytes = 64;
constexpr uint32_t kRowAlign = 512;        // each core's payload region starts on 512 B

// UB map of one core (bytes), as the combine kernel's: [0, 64) SDMA scratch, [64, 96) the
// status block (source of flag puts, written by the scalar unit), two MTE staging buffers.
constexpr uint32_t kUbSdmaOff = 0;
constexpr uint32_t kUbSdmaBytes = 64;
constexpr uint32_t kUbStatusOff = 64;
constexpr uint32_t kUbStageOff = 1024;
constexpr uint32_t kUbStageBytes = 64 * 1024;  // an MTE row is at most this (one UB -> GM leg)
constexpr uint32_t kUbStages = 2;
static_assert(kUbStageOff + kUbStages * kUbStageBytes <= 192 * 1024, "UB: the probe's regions fit A2/A3's 192 KiB");

// Pipe event ids: SDMA's own flags, the status puts, one per staging buffer (its puts' sync_id
// and its "free again" MTE3->MTE2 flag), as in kernels/combine_kernel.h.
constexpr uint32_t kSdmaSyncId = 0;
constexpr uint32_t kMteSyncId = 1;
constexpr uint32_t kStageEvent0 = 2;

// The symmetric window of one PE: a payload region per core (`row_stride` bytes each), then
// the flag slots: per core, slot 0 (its flag puts land here, and the rtt's ping), slot 1 (the
// rtt's answer), slot 2 (the ready slot Wait polls).
constexpr uint32_t kSlotsPerCore = 3;
__host_aicore__ inline uint64_t row_stride(uint64_t max_bytes) {
    return (max_bytes + kRowAlign - 1) / kRowAlign * kRowAlign;
}
__host_aicore__ inline uint64_t flags_offset(uint64_t max_bytes) { return uint64_t(kMaxCores) * row_stride(max_bytes); }
__host_aicore__ inline uint64_t window_bytes(uint64_t max_bytes) {
    return flags_offset(max_bytes) + uint64_t(kMaxCores) * kSlotsPerCore * kFlagSlotBytes;
}

// What each core leaves per launch (its 64 B line of the results buffer): the system cycles at
// the start and end of its timed span, and what it gave up waiting for (zero while all is well).
struct ProbeRecord {
    int64_t start;
    int64_t end;
    int32_t timed_out;  // 1: a wait gave up, the rest below say which
    int32_t slot;       // the flag slot waited on (kSlotsPerCore per core: core * 3 + slot)
    int32_t want;       // the value it waited for
    int32_t seen;       // the value it held at the end
    int64_t waited;     // system cycles waited
    int32_t word;       // the word of the slot's 8 that never became `want`
    int32_t core;
};
constexpr uint32_t kRecordBytes = 64;
static_assert(sizeof(ProbeRecord) <= kRecordBytes, "a core's record fits its line");

// One launch of the probe on `stream` with `cores` AIV blocks. `src` (GM, cores * row_stride
// bytes: each core's rows), `window` (this PE's symmetric window, window_bytes(max_bytes)),
// `records` (cores * kRecordBytes, zeroed by the host). Put j of core c goes to PE
// (my_pe + first + (c + j) % peers) % n_pes (1 <= first, first + peers <= n_pes: `first` picks the
// pair, and so the link class, a measurement crosses: docs/probe.md#6-link-classes); the rtt's
// sender pings PE my_pe + first, the answerer (role kRoleAnswer) answers PE my_pe - first;
// `seq` numbers the launch (rtt flag values continue from seq * puts); `wait_budget`: how long
// any wait lasts, in system cycles.
void launch_probe(uint32_t cores, void* stream, uint8_t* src, uint8_t* window, uint8_t* records, Kind kind,
                  uint32_t role, uint32_t puts, uint64_t bytes, uint64_t max_bytes, uint32_t first, uint32_t peers,
                  uint32_t buffers, uint32_t seq, uint64_t wait_budget);

}  // namespace probe
