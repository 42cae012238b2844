// CPU twin of the small part of Ascend C that the combine kernel uses.
// An AIV core is a thread; GetBlockIdx/GetBlockNum read that thread's launch slot.
#pragma once

#include <cstdint>

#define __aicore__
#define __global__
#define __gm__
#define __ubuf__

using GM_ADDR = uint8_t*;
using half = _Float16;

namespace AscendC {

int64_t GetBlockIdx();
int64_t GetBlockNum();

enum class HardEvent { S_MTE3, MTE3_S, S_MTE2, MTE2_S, MTE3_MTE2, MTE2_MTE3, V_MTE3, MTE3_V };
enum TEventID : int32_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

// Pipe events order scalar, MTE and vector units on a core; a twin core is one thread
// executing in program order, so they only need to stop the compiler reordering.
template <HardEvent E>
inline void SetFlag(int32_t) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
template <HardEvent E>
inline void WaitFlag(int32_t) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

}  // namespace AscendC
