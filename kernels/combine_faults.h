// The broken kernels of `combine-lab selftest` (combine_lab/run/selftest.py BROKEN_KERNELS):
// each is the real kernel source built with one switch COMBINE_FAULT_<NAME>=1 (CMakeLists.txt,
// twin builds only), breaking one rule of docs/protocol.md#5-kernel-protocol and docs/hardware-rules.md#12-broken-kernels so that the twin's
// checker can be seen to catch it. This header is the only place that reads the switches;
// the kernel reaches them through the names below, so its body has no #if of its own.
//
// Included by combine_kernel.h after the UB map and event ids, which the hooks name.
// Two kinds of name, both of which the walkthrough's "real kernel" view relies on
// (combine_lab/lab/teach.py):
//   - k<Name>: a constexpr bool, true only in the broken kernel <NAME>; the kernel writes
//     `if constexpr (fault::k<Name>) ...` for what only that broken kernel issues and
//     `if constexpr (!fault::k<Name>) ...` for what it leaves out;
//   - hooks: fault::<Hook>(real, ...) returns `real`, what the real kernel uses (its first
//     argument), unless the broken kernel that changes that choice is built.
// The NPU build never defines COMBINE_TARGET_TWIN, so there every k<Name> is false and every
// hook returns `real`: the broken kernels compile away.
#pragma once

#include <cstdint>

// COMBINE_FAULT_ON(NAME): true when the build defines COMBINE_FAULT_<NAME> as 1, false when it
// leaves it undefined, without one #if per switch: a defined switch expands to 1, which pastes
// into COMBINE_FAULT_IS_1 = "~," and so shifts `true` into the second argument of the pick.
#if defined(COMBINE_TARGET_TWIN)
#define COMBINE_FAULT_ON(NAME) COMBINE_FAULT_ON_(COMBINE_FAULT_##NAME)
#define COMBINE_FAULT_ON_(value) COMBINE_FAULT_ON__(value)  // expands the switch first
#define COMBINE_FAULT_ON__(value) COMBINE_FAULT_PICK(COMBINE_FAULT_IS_##value true, false, ~)
#define COMBINE_FAULT_IS_1 ~,
#define COMBINE_FAULT_PICK(...) COMBINE_FAULT_PICK_(__VA_ARGS__)
#define COMBINE_FAULT_PICK_(first, second, ...) second
#else
#define COMBINE_FAULT_ON(NAME) false
#endif

namespace combine {
namespace fault {

// Stage 1 (SendSegments): order of payload, quiet and flag.
constexpr bool kMteFlagBeforeQuiet = COMBINE_FAULT_ON(MTE_FLAG_BEFORE_QUIET);         // MTE flags before the quiet
constexpr bool kSdmaFlagBeforeSdmaQuiet = COMBINE_FAULT_ON(SDMA_FLAG_BEFORE_SDMA_QUIET);  // SDMA flags, then quiet
// The variants (docs/variants.md): the segment layout and cores per source rank.
constexpr bool kNoBasesWait = COMBINE_FAULT_ON(NO_BASES_WAIT);          // puts into the layout, bases not waited for
constexpr bool kSegmentFlagBeforeSdmaQuiet = COMBINE_FAULT_ON(SEGMENT_FLAG_BEFORE_SDMA_QUIET);  // segment's flags right after its call
constexpr bool kOtherGroupFlag = COMBINE_FAULT_ON(OTHER_GROUP_FLAG);    // a core writes the next core's chunk's flags
// Stage 1: UB staging, sync ids, SDMA streams.
constexpr bool kUbReuse = COMBINE_FAULT_ON(UB_REUSE);                  // one staging buffer, no "free again" flag
constexpr bool kUbOverlap = COMBINE_FAULT_ON(UB_OVERLAP);              // SDMA scratch inside staging buffer 0
constexpr bool kUbPastEnd = COMBINE_FAULT_ON(UB_PAST_END);             // staging buffer 1 runs past the UB
constexpr bool kSharedSyncId = COMBINE_FAULT_ON(SHARED_SYNC_ID);       // SDMA on the MTE status puts' id
constexpr bool kSharedMteSyncId = COMBINE_FAULT_ON(SHARED_MTE_SYNC_ID);  // both staging buffers on one id
constexpr bool kSdmaFromCore48 = COMBINE_FAULT_ON(SDMA_FROM_CORE_48);  // one core per rank: cores 48.. issue SDMA
constexpr bool kSdmaRingOverrun = COMBINE_FAULT_ON(SDMA_RING_OVERRUN);  // no SDMA quiet until the end: > 256 SQEs
// Status slots and waits.
constexpr bool kSharedCacheLine = COMBINE_FAULT_ON(SHARED_CACHE_LINE);      // 32 B slots, two per 64 B line
constexpr bool kPartialStatusWait = COMBINE_FAULT_ON(PARTIAL_STATUS_WAIT);  // a slot waited on at word 0 only
// Launch and core barrier.
constexpr bool kDeviceBarrier = COMBINE_FAULT_ON(DEVICE_BARRIER);   // SHMEM's MIX-only device barrier
constexpr bool kBlocksOverAiv = COMBINE_FAULT_ON(BLOCKS_OVER_AIV);  // more blocks than the SoC's AIV cores
// Stage 2 (ReduceTokens): the pipes' flags, barriers and copies.
constexpr bool kNoMte2VWait = COMBINE_FAULT_ON(NO_MTE2_V_WAIT);        // no MTE2_V flags
constexpr bool kNoVMte2Wait = COMBINE_FAULT_ON(NO_V_MTE2_WAIT);        // no V_MTE2 flags
constexpr bool kNoPipeVBarrier = COMBINE_FAULT_ON(NO_PIPE_V_BARRIER);  // no PipeBarrier<PIPE_V> between Muls and Add
constexpr bool kNoVMte3Wait = COMBINE_FAULT_ON(NO_V_MTE3_WAIT);        // no V_MTE3 flags
constexpr bool kNoMte3VWait = COMBINE_FAULT_ON(NO_MTE3_V_WAIT);        // no MTE3_V flags
constexpr bool kDatacopyUnaligned = COMBINE_FAULT_ON(DATACOPY_UNALIGNED);  // DataCopy whatever the length
constexpr bool kNoInitSocState = COMBINE_FAULT_ON(NO_INIT_SOC_STATE);  // vector code without InitSocState

// Both launch one core per source rank whatever the SoC has. SDMA_FROM_CORE_48 also ends with
// no core barrier: its 50 blocks run in waves on 48 cores, and the barrier would hang instead of
// showing what it is there to show (cores 48.. issue SDMA that does nothing).
constexpr bool kOneCorePerRank = kSdmaFromCore48 || kBlocksOverAiv;
constexpr bool kNoCoreBarrier = kDeviceBarrier || kSdmaFromCore48;

// ---- hooks: `real` unless their broken kernel is built ----

// SHARED_CACHE_LINE: status slots 32 B apart, two on each 64 B scalar cache line.
__host_aicore__ constexpr uint32_t StatusStride(uint32_t real) { return kSharedCacheLine ? kStatusFlagBytes : real; }
// SDMA_FROM_CORE_48, BLOCKS_OVER_AIV: a launch of one block per PE.
__host_aicore__ constexpr uint32_t LaunchBlocks(uint32_t real, uint32_t pes) { return kOneCorePerRank ? pes : real; }
// UB_REUSE: every row through staging buffer 0.
__host_aicore__ constexpr uint32_t NextStage(uint32_t real) { return kUbReuse ? 0 : real; }
// UB_PAST_END: staging buffer 1 at 129 KiB, so that it runs to 193 KiB, past the 192 KiB UB.
__host_aicore__ constexpr uint32_t StageOff(uint32_t real, uint32_t buf) {
    return kUbPastEnd && buf == 1 ? 129 * 1024 : real;
}
// UB_OVERLAP: the SDMA scratch at the start of staging buffer 0.
__host_aicore__ constexpr uint32_t SdmaOff(uint32_t real) { return kUbOverlap ? kUbMteOff : real; }
// SHARED_MTE_SYNC_ID: both staging buffers' puts on the status puts' id (two puts in flight share a bit).
__host_aicore__ constexpr uint32_t StageSyncId(uint32_t real) { return kSharedMteSyncId ? kMteSyncId : real; }
// SHARED_SYNC_ID: the SDMA calls on the status puts' id (both planes on one id).
__host_aicore__ constexpr uint32_t SdmaSyncId(uint32_t real) { return kSharedSyncId ? kMteSyncId : real; }
// The outstanding SQEs an SDMA quiet bounds: none under the ring-overrun fault (quiet only at the end).
__host_aicore__ constexpr uint32_t SdmaRingSqes(uint32_t real) { return kSdmaRingOverrun ? 0xFFFFFFFFu : real; }
// PARTIAL_STATUS_WAIT: a status slot (`status`; not the segment variant's inbox) waited on at word 0 only.
__host_aicore__ constexpr uint32_t StatusWaitWords(uint32_t real, bool status) {
    return kPartialStatusWait && status ? 1 : real;
}
// DATACOPY_UNALIGNED: DataCopy (whole 32-byte blocks) whatever the tile's length.
__host_aicore__ constexpr bool WholeBlocks(bool real) { return kDatacopyUnaligned || real; }

}  // namespace fault
}  // namespace combine
