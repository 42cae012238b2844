// Internal state of the CPU twin, shared by its translation units (not a public API).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace twin {

// Control block at the start of the shared segment, before the PEs' heaps.
struct Barrier {
    std::atomic<uint32_t> arrived;
    std::atomic<uint32_t> generation;
};

struct Control {
    std::atomic<uint64_t> magic;  // set last by PE 0: the segment is ready
    int32_t n_pes;
    uint64_t heap_bytes;
    std::atomic<int32_t> attached;
    std::atomic<int32_t> abort_pe;  // -1, or the first PE that failed
    Barrier host_barrier;
    Barrier core_barrier;
};

constexpr uint64_t kMagic = 0x636f6d62696e6531ull;  // "combine1"
constexpr size_t kControlBytes = 4096;

struct PeState {
    bool initialised = false;
    int my_pe = -1;
    int n_pes = 0;
    std::string shm_name;  // "/combine_twin_<session>"
    bool shm_linked = false;
    uint8_t* segment = nullptr;
    size_t segment_bytes = 0;
    Control* ctrl = nullptr;
    uint64_t heap_bytes = 0;     // per PE: what the host asked for, then the twin's own reserve
    uint64_t user_heap_bytes = 0;  // local_mem_size: the part aclshmem_malloc hands out
    uint64_t heap_used = 0;
    uint64_t reserve_used = 0;     // twin bookkeeping, allocated down from the heap's end
    double timeout_s = 60.0;
    uint32_t engines = 0;
};

PeState& pe_state();

// Symmetric twin-private memory (every PE calls it in the same order); returns the offset
// from the heap base, or fatal when the reserve is exhausted.
uint64_t reserve_alloc(uint64_t bytes, const char* what);
uint8_t* heap_base(int pe);

// Calling core's index, or -1 on a host thread.
int32_t current_core();
uint32_t current_block_dim();

// Print "twin: PE p core c: <msg>", tell the other PEs, remove the segment name, exit 3.
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Back-off waiting: returns false once `timeout_s` has passed; exits if another PE aborted.
class Waiter {
public:
    // `patience` scales the timeout: waits on other waiters (barriers, attach) get more, so
    // the wait at the root of a hang (a signal or SDMA quiet) is the one that reports it.
    explicit Waiter(const char* what, double patience = 1.0);
    bool keep_waiting();  // sleeps a little, checks abort and timeout
    double elapsed_s() const;
private:
    const char* what_;
    double timeout_s_;
    uint64_t start_ns_;
    uint32_t spins_ = 0;
};

uint64_t now_ns();

// Chaos mode (COMBINE_TWIN_CHAOS=<seed>): puts land as late and in as odd an order as
// their semantics allow. 0 when off.
uint64_t chaos_seed();

// Engines: MTE/SDMA counters, region labels, SDMA thread.
void engines_start(uint32_t engine_mask);
void engines_stop();
void counters_begin_launch();
void counters_end_launch();
// Lands whatever the calling core left outstanding when its kernel body returned.
void core_finish();
// Which labelled region holds `sym` (local symmetric address); -1 if none.
int region_kind(const void* sym, uint64_t* slot_index);

}  // namespace twin
