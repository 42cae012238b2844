// CPU twin of the part of Ascend C (asc-devkit kernel_operator.h) that the combine kernel
// calls. An AIV core is a thread; GetBlockIdx/GetBlockNum read that thread's block.
// Names, parameter order and types follow asc-devkit (combine-facts section 10); the
// twin enforces what the pipes and flags mean (host/twin/twin_pipes.cpp).
#pragma once

#include <cstdint>

// Address spaces and targets mean nothing to the host compiler: the declaration-only
// headers of the NPU-branch compile check (tests/npu_decls) give them their meaning.
#define __aicore__
#define __host_aicore__
#define __global__
#define __gm__
#define __ubuf__

using GM_ADDR = uint8_t*;  // asc-devkit: __gm__ uint8_t*
using half = _Float16;

// bisheng built-ins (pipes and event ids), named as the compiler names them.
enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

namespace AscendC {

using TEventID = int8_t;

// src_dst pairs, in asc-devkit's order (impl/basic_api/kernel_event.h).
enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX,
};

enum class CacheLine : uint64_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint64_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

int64_t GetBlockIdx();
int64_t GetBlockNum();
int64_t GetSystemCycle();

}  // namespace AscendC

namespace twin {
// Pipe events of the calling core (twin_pipes.cpp): pairing, and MTE3 completion.
void flag_set(AscendC::HardEvent event, int32_t id);
void flag_wait(AscendC::HardEvent event, int32_t id);
void pipe_barrier(pipe_t pipe);
void sync_all_cores();
}  // namespace twin

namespace AscendC {

template <HardEvent event>
inline void SetFlag(int32_t eventID) { twin::flag_set(event, eventID); }
template <HardEvent event>
inline void WaitFlag(int32_t eventID) { twin::flag_wait(event, eventID); }
template <pipe_t pipe>
inline void PipeBarrier() { twin::pipe_barrier(pipe); }

// All-AIV hardware barrier (FFTS): every block of the launch must be resident at once.
template <bool isAIVOnly = true>
inline void SyncAll() {
    static_assert(isAIVOnly, "the combine kernel is AIV-only");
    twin::sync_all_cores();
}

template <typename T>
class GlobalTensor {
public:
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize = 0) {
        addr_ = buffer;
        size_ = bufferSize;
    }
    __gm__ T* GetPhyAddr() const { return addr_; }
private:
    __gm__ T* addr_ = nullptr;
    uint64_t size_ = 0;
};

// The twin's memory is coherent: the scalar cache needs no clean or invalidate.
template <typename T, CacheLine entireType, DcciDst dcciDst>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T>&) {}

}  // namespace AscendC
