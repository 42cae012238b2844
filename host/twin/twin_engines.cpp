// The two data planes of the twin, their counters, and the protocol checker.
// MTE: a put is GM -> UB -> remote GM by the calling core (twin_pipes.cpp models the UB and
//   the MTE3 leg in flight); complete at aclshmem_quiet.
// SDMA: a put is a descriptor queued to the PE's copy-engine thread, complete at SDMA quiet.
//   As in SHMEM, only AIV blocks 0..47 have an SDMA stream: a put from block 48 or above
//   does nothing (a violation here), and block_dim must stay within the SoC's AIV count.
// Chaos mode (COMBINE_TWIN_CHAOS=<seed>): MTE legs run when every pipe drains (quiet, PIPE_ALL
// barrier, kernel end) in the order twin_pipes.cpp picks; SDMA descriptors land only at SDMA
// quiet, each batch in a seeded shuffled order.
// Checker (always on): a status put whose payload the issuing core has not completed is a
// violation at once (happens-before, twin_order.cpp); per window slot the twin also records the
// launch in which its payload landed, and a status-ready flag that lands before that (a payload
// by another PE) or with no payload put in this launch is a violation, reported with the writing
// PE and core, the slot, and both operations. A status slot read as ready that no status put of
// this launch made ready is a violation (launch epochs: a stale flag). Status slots must be waited
// on word by word, all 8 words, as the reference does.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shmem.h"
#include "twin_platform.h"
#include "twin_state.h"

namespace twin {
namespace {

constexpr int kMaxCores = 256;
const char* const kPlaneName[2] = {"MTE", "SDMA"};
constexpr size_t kMaxViolationExamples = 8;

// puts: calls that carry payload (an SDMA call is one put however many SQEs it is cut into);
// control_*: writes into the segment variant's inbox (bases and their ready flags); sqes: the
// SDMA descriptors those calls became (SHMEM cuts a call into SQEs of at most 1 MiB).
constexpr int kCounterFields = 8;
struct PlaneCounters {
    std::atomic<uint64_t> puts{0}, bytes{0}, quiets{0}, status_writes{0}, status_bytes{0}, control_writes{0},
        control_bytes{0}, sqes{0};
    std::atomic<uint64_t>* field(int i) {
        std::atomic<uint64_t>* f[kCounterFields] = {&puts, &bytes, &quiets, &status_writes, &status_bytes,
                                                   &control_writes, &control_bytes, &sqes};
        return f[i];
    }
};
const char* const kCounterNames[kCounterFields] = {"puts", "bytes", "quiets", "status_writes", "status_bytes",
                                                   "control_writes", "control_bytes", "sqes"};
constexpr uint64_t kSdmaSqeBytes = 1u << 20;  // SHMEM cuts an SDMA call into SQEs of at most 1 MiB
// SHMEM writes SQEs into its SDMA ring with no fullness check; the ring's depth is set by its AICPU
// op, not in its source. Assumed: 256 SQEs per core between SDMA quiets, what SHMEM's own combine
// example keeps outstanding (docs/hardware-rules.md#6-sdma).
constexpr uint64_t kSdmaRingSqes = 256;
struct Counters {
    PlaneCounters mte, sdma;
};
struct Totals {
    uint64_t v[2][kCounterFields] = {};
};

Counters g_last;
Totals g_total;
uint64_t g_launches = 0;
uint32_t g_epoch = 0;  // 1-based index of the launch in progress, the same on every PE
uint32_t g_receive_checked = 0;  // the last launch whose payload reads were checked (twin_receive.cpp)

std::mutex g_violation_mu;
std::atomic<uint64_t> g_violations{0};
std::vector<std::string> g_violation_examples;

// A labelled region of the window. Payload regions own two symmetric shadow arrays of
// uint32 per slot: the launch in which the payload landed, and (launch << 1 | plane) of
// the put that was issued for it. A status region points at its payload region and keeps,
// per slot, the words waited on and the waiting core, when and by whom its flag landed and a
// hash of what landed; per 64 B line, the last clean of the line by a core that had changed it.
// Stamps are (launch << 8 | x): launch numbers count from 1, so 0 is "never".
struct Region {
    uint8_t* begin;
    uint8_t* end;
    RegionKind kind;
    uint64_t slot_bytes;
    uint64_t landed_off = 0, issued_off = 0;  // heap offsets of the shadows (payload regions)
    uint64_t row_bytes = 0;                   // payload regions: a slot is complete once this many landed (0: at once)
    uint64_t landed_bytes_off = 0;            // (launch << 40 | bytes landed) per slot, uint64 (row_bytes > 0)
    int order_id = -1;                        // payload regions: their happens-before shadows (twin_order.cpp)
    int receive_id = -1;                      // payload regions: their reads and observed flags (twin_receive.cpp)
    int64_t map_off = -1;                     // payload regions of the segment variant: heap offset of positions
    int payload_region = -1;                  // status regions
    uint64_t flag_bytes = 0;                  // status regions: the ready block at each slot's start
    uint64_t waited_off = 0;                  // (launch << 8 | words waited) per slot
    uint64_t waiter_off = 0;                  // (launch << 8 | waiting core) per slot
    uint64_t flag_landed_off = 0;             // (launch << 8 | writing PE) per slot
    uint64_t prev_landed_off = 0;             // what flag_landed held before the first landing of a later launch
    uint64_t flag_hash_off = 0;               // hash of the flag block that landed, per slot
    uint64_t cleaned_off = 0;                 // (launch << 8 | core) per 64 B line: a clean of a changed line
    uint64_t stale_off = 0;                   // launch whose start found the slot still ready from before, per slot
    uint64_t stale_hash_off = 0;              // the hash of what it held then
    uint64_t read_off = 0;                    // launch in which a stale ready read of the slot was reported
    uint8_t* line_base = nullptr;             // the first 64 B line of the region
    uint64_t lines = 0;
    uint64_t slots = 0;
};
std::vector<Region> g_regions;

thread_local std::vector<Put> tl_sdma_pending;  // chaos: land at the next SDMA quiet
thread_local uint64_t tl_sdma_outstanding = 0;  // this core's SQEs since its last SDMA quiet (this launch)
thread_local uint64_t tl_sdma_stalled = 0;      // this core's SQEs its stalled stream never ran (give-up fault)
thread_local bool tl_quiet_gave_up = false;      // the last SDMA quiet of this core gave up

// SHMEM's SDMA quiet gives up after this many polls of its completion flag and returns silently
// (src/device/gm2gm/engine/shmem_device_sdma.hpp, aclshmemi_sdma_poll_for_completion).
constexpr uint64_t kShmemSdmaQuietPolls = 1000000;

// COMBINE_TWIN_SDMA_QUIET_GIVEUP=<pe>:<core>: that core's SDMA stream stalls (its descriptors
// never run), so its quiets give up as SHMEM's does once its polls run out. A fault outside the
// kernel: the kernel must report it (combine_sdma_quiet, kernels/combine_platform.h), not flag
// the rows. Read once.
static bool sdma_stream_stalled(int core) {
    static int pe = -2, at = -1;
    if (pe == -2) {
        const char* env = getenv("COMBINE_TWIN_SDMA_QUIET_GIVEUP");
        if (env == nullptr || sscanf(env, "%d:%d", &pe, &at) != 2) pe = -1;
    }
    return pe == pe_state().my_pe && at == core;
}
// The segment variant: per receiver PE, (launch << 8 | words) this core waited on of its inbox slot.
thread_local std::vector<uint32_t> tl_inbox_waited;
thread_local int tl_inbox_core = -1;

struct SdmaEngine {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<Put, int>> queue;
    bool stop = false;
    std::thread thread;
    std::atomic<uint64_t> issued[kMaxCores];
    std::atomic<uint64_t> done[kMaxCores];
};
SdmaEngine* g_sdma = nullptr;

int find_region(const void* sym, uint64_t* slot) {
    const uint8_t* p = static_cast<const uint8_t*>(sym);
    for (size_t i = 0; i < g_regions.size(); ++i) {
        const Region& r = g_regions[i];
        if (p >= r.begin && p < r.end) {
            if (slot) *slot = uint64_t(p - r.begin) / r.slot_bytes;
            return int(i);
        }
    }
    return -1;
}

uint32_t* shadow(uint64_t off, int pe, uint64_t slot) {
    return reinterpret_cast<uint32_t*>(heap_base(pe) + off) + slot;
}
uint64_t* shadow64(uint64_t off, int pe, uint64_t slot) {
    return reinterpret_cast<uint64_t*>(heap_base(pe) + off) + slot;
}

// The payload row of status slot `slot` on PE `pe`: the slot itself, or in the segment variant
// what that PE's positions table says (-1: none).
int64_t payload_row(const Region& payload, int pe, uint64_t slot) {
    if (payload.map_off < 0) return int64_t(slot);
    return int64_t(*reinterpret_cast<const int32_t*>(heap_base(pe) + payload.map_off + slot * 4));
}

// The slots [*first, *last] of payload region `r` that `bytes` at `sym` touch.
void slots_touched(const Region& r, const void* sym, size_t bytes, uint64_t* first, uint64_t* last) {
    const uint64_t off = uint64_t(static_cast<const uint8_t*>(sym) - r.begin);
    *first = off / r.slot_bytes;
    *last = std::min<uint64_t>((off + (bytes ? bytes : 1) - 1) / r.slot_bytes, r.slots ? r.slots - 1 : 0);
}

// Called when a payload put is issued: remembers, for every slot it writes, its plane for the
// report of a flag that lands before it.
void note_issue(const Put& p) {
    uint64_t slot = 0;
    const int ri = find_region(p.dst_sym, &slot);
    if (ri < 0 || g_regions[ri].kind != kRegionPayload) return;
    const Region& r = g_regions[ri];
    uint64_t first, last;
    slots_touched(r, p.dst_sym, p.bytes, &first, &last);
    for (uint64_t s = first; s <= last; ++s)
        __atomic_store_n(shadow(r.issued_off, p.pe, s), (g_epoch << 1) | uint32_t(p.plane), __ATOMIC_RELAXED);
}

// The payload slots `p` (one MTE leg, or one SDMA call) writes are delivered once what completes
// op `seq` of its engine on this core has run (twin_order.cpp).
void note_delivery(const Put& p, uint64_t seq, const Site& site) {
    const int ri = find_region(p.dst_sym, nullptr);
    if (ri < 0 || g_regions[ri].kind != kRegionPayload) return;
    uint64_t first, last;
    slots_touched(g_regions[ri], p.dst_sym, p.bytes, &first, &last);
    order_payload_put(g_regions[ri].order_id, p.pe, first, last, p.plane, seq, site);
}

void sdma_main(SdmaEngine* e) {
    for (;;) {
        std::pair<Put, int> d;
        {
            std::unique_lock<std::mutex> lk(e->mu);
            e->cv.wait(lk, [e] { return e->stop || !e->queue.empty(); });
            if (e->queue.empty()) return;
            d = e->queue.front();
            e->queue.pop_front();
        }
        const long long t0 = ops_clock_ns();
        land(d.first);
        record_sqe(d.second, d.first.pe, (long long)d.first.bytes, t0);  // before done: a quiet sees it recorded
        e->done[d.second].fetch_add(1, std::memory_order_release);
    }
}

void count_put(PlaneCounters& c, const void* dst_sym, size_t bytes) {
    const int kind = region_kind(dst_sym, nullptr);
    if (kind == kRegionControl) {
        c.control_writes.fetch_add(1, std::memory_order_relaxed);
        c.control_bytes.fetch_add(bytes, std::memory_order_relaxed);
    } else if (kind == kRegionStatus) {
        c.status_writes.fetch_add(1, std::memory_order_relaxed);
        c.status_bytes.fetch_add(bytes, std::memory_order_relaxed);
    } else {
        c.puts.fetch_add(1, std::memory_order_relaxed);
        c.bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
}

uint8_t* remote(void* dst_sym, int pe, size_t bytes, const char* plane) {
    void* p = aclshmem_ptr(dst_sym, pe);
    PeState& s = pe_state();
    uint8_t* mine = heap_base(s.my_pe);
    if (p == nullptr || static_cast<uint8_t*>(dst_sym) + bytes > mine + s.user_heap_bytes)
        fatal("%s put of %zu bytes to PE %d at %p is outside the symmetric heap", plane, bytes, pe, dst_sym);
    return static_cast<uint8_t*>(p);
}

int core_or_die(const char* what) {
    const int core = current_core();
    if (core < 0 || core >= kMaxCores) fatal("%s called outside a kernel core (core %d)", what, core);
    return core;
}

constexpr uint64_t kLine = 64;  // the scalar data cache's line (SHMEM: SCALAR_DATA_CACHELINE_SIZE)

uint32_t stamp_of(uint32_t x) { return (g_epoch << 8) | (x & 0xFFu); }
bool this_launch(uint32_t stamp) { return (stamp >> 8) == g_epoch; }

uint32_t hash_bytes(const uint8_t* p, size_t n) {
    uint32_t h = 2166136261u;  // FNV-1a
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
    return h;
}

}  // namespace

void report_violation(const std::string& msg);

namespace {

// A status put's bytes, each 4 B word stored exactly once, in order. memcpy may store a byte twice
// (glibc copies 32 B as two overlapping 32 B moves): a waiter that saw the flag, and reset it, in
// between had it set again by the second store, a stale flag the next launch read as ready. No
// put stores a byte twice on the hardware.
void write_once(void* dst, const void* src, size_t n) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    size_t i = 0;
    if ((reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s)) % 4 == 0)
        for (; i + 4 <= n; i += 4) {
            uint32_t w;
            memcpy(&w, s + i, 4);  // a 4 B load of the source: one move, not a store to the slot
            __atomic_store_n(reinterpret_cast<uint32_t*>(d + i), w, __ATOMIC_RELEASE);
        }
    for (; i < n; ++i) __atomic_store_n(d + i, s[i], __ATOMIC_RELEASE);
}

// The status slots of region `r` whose flag blocks overlap the 64 B line starting at `line`:
// [first, last], or first > last when none.
void slots_in_line(const Region& r, const uint8_t* line, int64_t* first, int64_t* last) {
    const int64_t lo = int64_t(line - r.begin), hi = lo + int64_t(kLine);  // the line, in region offsets
    const int64_t stride = int64_t(r.slot_bytes), flag = int64_t(r.flag_bytes);
    *first = lo - flag + 1 <= 0 ? 0 : (lo - flag + 1 + stride - 1) / stride;  // the first block ending after lo
    *last = std::min<int64_t>((hi - 1) / stride, int64_t(r.slots) - 1);      // the last block starting before hi
}

// The lines of region `r` (indices from line_base) that slot `slot`'s flag block touches.
void lines_of_slot(const Region& r, uint64_t slot, uint64_t* l0, uint64_t* l1) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(r.line_base);
    const uintptr_t a = reinterpret_cast<uintptr_t>(r.begin + slot * r.slot_bytes);
    *l0 = (a - base) / kLine;
    *l1 = (a + r.flag_bytes - 1 - base) / kLine;
}

// A status put lands on `slot` of PE p.pe's status region `ri`: remember when, by whom and
// what; if a core of that PE already cleaned the slot's line in this launch after changing the
// line, nothing ordered this write after that clean: on the NPU it could have landed between the
// core's load of the line and its write-back, and been undone. Returns false when it is undone
// (chaos mode: the worst order of the two).
bool note_flag_landed(int ri, const Put& p, uint64_t slot) {
    const Region& r = g_regions[ri];
    const uint32_t writer = uint32_t(pe_state().my_pe);
    // A PE already in the next launch may land here before this PE checked its reads of the last
    // one (check_receives): keep the last launch's stamp, stored before the new one.
    const uint32_t before = __atomic_load_n(shadow(r.flag_landed_off, p.pe, slot), __ATOMIC_ACQUIRE);
    if (before != 0 && !this_launch(before))
        __atomic_store_n(shadow(r.prev_landed_off, p.pe, slot), before, __ATOMIC_RELEASE);
    __atomic_store_n(shadow(r.flag_landed_off, p.pe, slot), stamp_of(writer), __ATOMIC_RELEASE);
    const size_t n = std::min<size_t>(p.bytes, r.flag_bytes);
    __atomic_store_n(shadow(r.flag_hash_off, p.pe, slot), hash_bytes(static_cast<const uint8_t*>(p.src), n),
                     __ATOMIC_RELEASE);
    uint64_t l0, l1;
    lines_of_slot(r, slot, &l0, &l1);
    bool kept = true;
    for (uint64_t l = l0; l <= l1 && l < r.lines; ++l) {
        const uint32_t c = __atomic_load_n(shadow(r.cleaned_off, p.pe, l), __ATOMIC_ACQUIRE);
        if (!this_launch(c)) continue;
        char buf[480];
        snprintf(buf, sizeof buf, "PE %d core %d: its status put to slot %llu on PE %d lands in the 64 B cache line "
                 "that PE %d core %u cleaned in this launch after changing another slot of it; nothing orders this "
                 "write after that core's load of the line, so its write-back can undo this ready value (two status "
                 "slots share a 64 B scalar cache line: give each slot a line of its own, docs/hardware-rules.md#7-status-slots-and-the-scalar-cache)",
                 pe_state().my_pe, current_core(), (unsigned long long)slot, p.pe, p.pe, c & 0xFFu);
        report_violation(buf);
        if (chaos_seed()) kept = false;
    }
    return kept;
}

}  // namespace

void report_violation(const std::string& msg) {
    g_violations.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lk(g_violation_mu);
    if (g_violation_examples.size() < kMaxViolationExamples) {
        g_violation_examples.push_back(msg);
        fprintf(stderr, "twin: protocol violation: %s\n", msg.c_str());
    }
}

// The moment a put becomes visible at its destination.
void land(const Put& p) {
    note_progress();
    uint64_t slot = 0;
    const int ri = find_region(p.dst_sym, &slot);
    if (ri >= 0 && g_regions[ri].kind == kRegionStatus) {
        const Region& status = g_regions[ri];
        const Region& payload = g_regions[status.payload_region];
        const int64_t row = payload_row(payload, p.pe, slot);
        const bool in_range = row >= 0 && uint64_t(row) < payload.slots;
        const uint32_t landed = in_range ? __atomic_load_n(shadow(payload.landed_off, p.pe, uint64_t(row)), __ATOMIC_ACQUIRE) : 0;
        if (landed != g_epoch && !(in_range && order_payload_by_me(payload.order_id, p.pe, uint64_t(row)))) {
            const uint32_t issued = in_range ? __atomic_load_n(shadow(payload.issued_off, p.pe, uint64_t(row)), __ATOMIC_RELAXED) : 0;
            char buf[400];
            if ((issued >> 1) == g_epoch)
                snprintf(buf, sizeof buf, "PE %d core %d: status slot %llu on PE %d became ready (%s status put) "
                         "before its payload was complete (%s payload put issued, not yet landed)",
                         pe_state().my_pe, current_core(), (unsigned long long)slot, p.pe, kPlaneName[p.plane],
                         kPlaneName[issued & 1]);
            else
                snprintf(buf, sizeof buf, "PE %d core %d: status slot %llu on PE %d became ready (%s status put) "
                         "with no payload put issued for it in this launch",
                         pe_state().my_pe, current_core(), (unsigned long long)slot, p.pe, kPlaneName[p.plane]);
            report_violation(p.site.file ? std::string(buf) + " (" + site_text(p.site) + ")" : std::string(buf));
        }
        // First: once the flag is visible, its waiter may reset the slot and clean its line.
        if (note_flag_landed(ri, p, slot)) write_once(p.dst, p.src, p.bytes);
        return;
    }
    memcpy(p.dst, p.src, p.bytes);
    if (ri < 0 || g_regions[ri].kind != kRegionPayload) return;
    const Region& r = g_regions[ri];
    if (r.row_bytes == 0) {  // complete at its first put
        __atomic_store_n(shadow(r.landed_off, p.pe, slot), g_epoch, __ATOMIC_RELEASE);
        return;
    }
    // Complete once the slot's whole row has landed, whatever puts (or SQEs of one) carried it.
    uint64_t first, last;
    slots_touched(r, p.dst_sym, p.bytes, &first, &last);
    const uint64_t lo = uint64_t(static_cast<const uint8_t*>(p.dst_sym) - r.begin), hi = lo + p.bytes;
    for (uint64_t s = first; s <= last; ++s) {
        const uint64_t a = std::max(lo, s * r.slot_bytes), b = std::min(hi, s * r.slot_bytes + r.row_bytes);
        if (b <= a) continue;  // only the slot's padding
        uint64_t* acc = shadow64(r.landed_bytes_off, p.pe, s);
        uint64_t old = __atomic_load_n(acc, __ATOMIC_ACQUIRE), now;
        do {
            const uint64_t have = (old >> 40) == g_epoch ? (old & ((1ull << 40) - 1)) : 0;
            now = (uint64_t(g_epoch) << 40) | (have + (b - a));
        } while (!__atomic_compare_exchange_n(acc, &old, now, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
        if ((now & ((1ull << 40) - 1)) >= r.row_bytes)
            __atomic_store_n(shadow(r.landed_off, p.pe, s), g_epoch, __ATOMIC_RELEASE);
    }
}

void land_shuffled(std::vector<Put>& puts, uint64_t salt) {
    if (puts.empty()) return;
    std::mt19937_64 rng(chaos_seed() * 0x9E3779B97F4A7C15ull ^ (uint64_t(pe_state().my_pe) << 48) ^
                        (uint64_t(current_core()) << 32) ^ (uint64_t(g_epoch) << 8) ^ salt ^ puts.size());
    std::shuffle(puts.begin(), puts.end(), rng);
    for (const Put& p : puts) land(p);
    puts.clear();
}

uint64_t chaos_seed() {
    static const uint64_t seed = [] {
        const char* env = getenv("COMBINE_TWIN_CHAOS");
        return env && *env ? strtoull(env, nullptr, 10) + 1 : 0;  // +1: seed 0 is a valid seed
    }();
    return seed;
}

int region_kind(const void* sym, uint64_t* slot_index) {
    const int ri = find_region(sym, slot_index);
    return ri < 0 ? -1 : g_regions[ri].kind;
}

void label_region(void* sym, size_t bytes, RegionKind kind, uint64_t slot_bytes, uint64_t flag_bytes) {
    uint8_t* p = static_cast<uint8_t*>(sym);
    Region r{p, p + bytes, kind, slot_bytes ? slot_bytes : 1};
    r.slots = bytes / r.slot_bytes;
    r.flag_bytes = flag_bytes ? std::min<uint64_t>(flag_bytes, r.slot_bytes) : r.slot_bytes;
    if (kind == kRegionOutput) {  // x_out: only named, nothing checked
        g_regions.push_back(r);
        return;
    }
    uint8_t* mine = heap_base(pe_state().my_pe);
    if (kind == kRegionControl) {  // the segment variant's inbox: waits noted per core, nothing else
        g_regions.push_back(r);
        return;
    }
    if (kind == kRegionPayload) {
        r.row_bytes = std::min<uint64_t>(flag_bytes, r.slot_bytes);
        r.landed_off = reserve_alloc(r.slots * 4, "payload-landed shadow");
        r.issued_off = reserve_alloc(r.slots * 4, "payload-issued shadow");
        r.order_id = order_label_payload(r.slots);
        r.receive_id = receive_label_payload(r.slots);
        memset(mine + r.landed_off, 0, r.slots * 4);
        memset(mine + r.issued_off, 0, r.slots * 4);
        if (r.row_bytes) {
            r.landed_bytes_off = reserve_alloc(r.slots * 8, "payload-bytes shadow");
            memset(mine + r.landed_bytes_off, 0, r.slots * 8);
        }
    } else {
        for (int i = int(g_regions.size()) - 1; i >= 0 && r.payload_region < 0; --i)
            if (g_regions[i].kind == kRegionPayload) r.payload_region = i;
        if (r.payload_region < 0) fatal("label a payload region before its status region");
        r.line_base = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p) / kLine * kLine);
        r.lines = (uint64_t(reinterpret_cast<uintptr_t>(p + bytes) - reinterpret_cast<uintptr_t>(r.line_base)) + kLine - 1) / kLine;
        for (uint64_t* off : {&r.waited_off, &r.waiter_off, &r.flag_landed_off, &r.prev_landed_off, &r.flag_hash_off,
                              &r.stale_off, &r.stale_hash_off, &r.read_off}) {
            *off = reserve_alloc(r.slots * 4, "status shadow");
            memset(mine + *off, 0, r.slots * 4);
        }
        r.cleaned_off = reserve_alloc(r.lines * 4, "status-line shadow");
        memset(mine + r.cleaned_off, 0, r.lines * 4);
    }
    g_regions.push_back(r);
}

void label_layout(void* positions, void* inbox, size_t inbox_bytes, uint64_t inbox_slot) {
    int payload = -1;
    for (int i = int(g_regions.size()) - 1; i >= 0 && payload < 0; --i)
        if (g_regions[i].kind == kRegionPayload) payload = i;
    if (payload < 0) fatal("label the payload region before the layout");
    g_regions[payload].map_off = int64_t(static_cast<uint8_t*>(positions) - heap_base(pe_state().my_pe));
    label_region(inbox, inbox_bytes, kRegionControl, inbox_slot, 32);
}

namespace {
// The segment variant's rule: a core puts into PE `pe`'s layout only after it waited on all 8
// words of PE `pe`'s inbox slot in this launch (the bases it uses are PE pe's of this launch).
void check_layout_put(const void* dst_sym, int pe, size_t bytes, const char* op, const Site& site) {
    const int ri = find_region(dst_sym, nullptr);
    if (ri < 0 || g_regions[ri].kind != kRegionPayload || g_regions[ri].map_off < 0) return;
    const int core = current_core();
    const uint32_t w = tl_inbox_core == core && size_t(pe) < tl_inbox_waited.size() ? tl_inbox_waited[pe] : 0;
    if ((w >> 8) == g_epoch && (w & 0xFFu) == 0xFFu) return;
    char buf[480];
    snprintf(buf, sizeof buf, "PE %d core %d: a put of %zu bytes (%s) %s into PE %d's layout by expert before this "
             "core waited for PE %d's segment bases in this launch (inbox slot %d, word mask 0x%02x of 8): the rows "
             "may land where PE %d does not read them (docs/variants.md#1-one-sdma-call-per-segment)",
             pe_state().my_pe, core, bytes, op, site_text(site).c_str(), pe, pe, pe,
             (w >> 8) == g_epoch ? w & 0xFFu : 0u, pe);
    report_violation(buf);
}

// A status put to `dst_sym` on PE `pe` at `site`: its payload must be delivered (twin_order.cpp).
void check_status_order(const void* dst_sym, int pe, const Site& site) {
    uint64_t slot = 0;
    const int ri = find_region(dst_sym, &slot);
    if (ri < 0 || g_regions[ri].kind != kRegionStatus) return;
    const Region& payload = g_regions[g_regions[ri].payload_region];
    const int64_t row = payload_row(payload, pe, slot);
    if (row < 0 || uint64_t(row) >= payload.slots) return;  // reported when it lands
    order_status_put(payload.order_id, pe, uint64_t(row), slot, site);
}
}  // namespace

void note_wait(const void* sig) {
    uint64_t slot = 0;
    const int ri = find_region(sig, &slot);
    if (ri >= 0 && g_regions[ri].kind == kRegionControl) {
        const uint32_t word = uint32_t((static_cast<const uint8_t*>(sig) - g_regions[ri].begin) % g_regions[ri].slot_bytes) / 4;
        if (tl_inbox_core != current_core()) {
            tl_inbox_waited.assign(size_t(pe_state().n_pes), 0);
            tl_inbox_core = current_core();
        }
        if (slot < tl_inbox_waited.size() && word < 8) {
            uint32_t& w = tl_inbox_waited[slot];
            w = ((w >> 8) == g_epoch ? w : (g_epoch << 8)) | (1u << word);
        }
        return;
    }
    if (ri < 0 || g_regions[ri].kind != kRegionStatus) return;
    const uint32_t word = uint32_t((static_cast<const uint8_t*>(sig) - g_regions[ri].begin) % g_regions[ri].slot_bytes) / 4;
    uint32_t* w = shadow(g_regions[ri].waited_off, pe_state().my_pe, slot);
    const uint32_t stamp = g_epoch << 8;
    uint32_t old = __atomic_load_n(w, __ATOMIC_RELAXED);
    const uint32_t now = ((old & ~0xFFu) == stamp ? old : stamp) | (word < 8 ? 1u << word : 0u);
    __atomic_store_n(w, now, __ATOMIC_RELAXED);  // one core waits on a given slot
    __atomic_store_n(shadow(g_regions[ri].waiter_off, pe_state().my_pe, slot), stamp_of(uint32_t(current_core())),
                     __ATOMIC_RELAXED);
}

// A core of this PE saw status slot `slot` of region `r` as it is now: when its flag landed in this
// launch, the payload row it covers counts as observed (twin_receive.cpp).
static void observe_slot(const Region& r, uint64_t slot, const Site& site) {
    const int me = pe_state().my_pe;
    if (!this_launch(__atomic_load_n(shadow(r.flag_landed_off, me, slot), __ATOMIC_ACQUIRE))) return;
    const Region& payload = g_regions[r.payload_region];
    const int64_t row = payload_row(payload, me, slot);
    if (row >= 0 && uint64_t(row) < payload.slots) receive_observed(payload.receive_id, uint64_t(row), g_epoch, site);
}

// A clean of the 64 B line at `addr` by the calling core. The twin cannot see the core's scalar
// stores, but it sees what they did: a line is dirty in this core's cache when it holds a slot
// this core waited on in this launch whose flag block no longer holds what landed there (the
// core reset it). Cleaning a dirty line writes all 64 B back as the core cached them; another
// slot of the line that a status put made ready in this launch, which this core never waited on,
// may have landed after the core loaded the line: its ready value is undone. In chaos mode the
// write-back does undo it (the block goes back to the value before that put: the reset value 0).
void dcache_clean_line(const void* addr, const Site& site) {
    if (current_core() < 0) return;
    uint64_t any = 0;
    const int ri = find_region(addr, &any);
    if (ri < 0 || g_regions[ri].kind != kRegionStatus) return;
    const Region& r = g_regions[ri];
    const int me = pe_state().my_pe;
    const uint32_t core = uint32_t(current_core());
    const uint8_t* line = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(addr) / kLine * kLine);
    int64_t first, last;
    slots_in_line(r, line, &first, &last);
    // Invalidating the line is how a core reads flags by scalar loads, which the twin does not see:
    // a slot of the line whose flag landed in this launch counts as observed (lenient: whether the
    // core then compared the value is not seen either; docs/hardware-rules.md#17-payload-reads-after-their-flag).
    for (int64_t s = first; s <= last; ++s) observe_slot(r, uint64_t(s), site);
    auto mine = [&](int64_t s) {
        const uint32_t w = __atomic_load_n(shadow(r.waiter_off, me, s), __ATOMIC_RELAXED);
        return this_launch(w) && (w & 0xFFu) == (core & 0xFFu);
    };
    bool dirty = false;
    for (int64_t s = first; s <= last && !dirty; ++s) {
        if (!mine(s) || !this_launch(__atomic_load_n(shadow(r.flag_landed_off, me, s), __ATOMIC_ACQUIRE))) continue;
        const uint32_t landed = __atomic_load_n(shadow(r.flag_hash_off, me, s), __ATOMIC_RELAXED);
        dirty = hash_bytes(r.begin + s * r.slot_bytes, r.flag_bytes) != landed;
    }
    if (!dirty) return;
    const uint64_t line_index = uint64_t(line - r.line_base) / kLine;
    __atomic_store_n(shadow(r.cleaned_off, me, line_index), stamp_of(core), __ATOMIC_RELEASE);
    for (int64_t s = first; s <= last; ++s) {
        if (mine(s)) continue;
        const uint32_t landed = __atomic_load_n(shadow(r.flag_landed_off, me, s), __ATOMIC_ACQUIRE);
        if (!this_launch(landed)) continue;  // not written in this launch (yet): reported when it lands
        char buf[560];
        snprintf(buf, sizeof buf, "PE %d core %u: DataCacheCleanAndInvalid %s writes back the 64 B line of "
                 "status slots %llu..%llu as this core cached it, after resetting a slot of it; slot %llu, which PE %u's "
                 "status put made ready in this launch and this core never waited on, may have landed after the core "
                 "loaded the line: the write-back undoes that ready value (two status slots share a 64 B scalar cache "
                 "line: give each slot a line of its own, docs/hardware-rules.md#7-status-slots-and-the-scalar-cache)", me, core, site_text(site).c_str(),
                 (unsigned long long)first, (unsigned long long)last, (unsigned long long)s, landed & 0xFFu);
        report_violation(buf);
        if (chaos_seed()) memset(r.begin + s * r.slot_bytes, 0, r.flag_bytes);
    }
}

void engines_start(uint32_t engine_mask) {
    if ((engine_mask & ACLSHMEM_DATA_OP_SDMA) && g_sdma == nullptr) {
        g_sdma = new SdmaEngine();
        for (int i = 0; i < kMaxCores; ++i) {
            g_sdma->issued[i].store(0);
            g_sdma->done[i].store(0);
        }
        g_sdma->thread = std::thread(sdma_main, g_sdma);
    }
}

void engines_stop() {
    if (g_sdma == nullptr) return;
    {
        std::lock_guard<std::mutex> lk(g_sdma->mu);
        g_sdma->stop = true;
    }
    g_sdma->cv.notify_all();
    g_sdma->thread.join();
    delete g_sdma;
    g_sdma = nullptr;
}

namespace {
// Launch `launch`'s receiver-side check (twin_receive.cpp), once every PE's puts of it have landed
// (the host barrier after each launch): every status slot of this PE that a status put of that
// launch made ready, with its payload row. A PE already in the next launch may have landed there
// since: then the slot's previous stamp says (no PE gets two launches ahead of this one).
void check_receives(uint32_t launch) {
    if (launch == 0 || launch <= g_receive_checked) return;
    g_receive_checked = launch;
    const int me = pe_state().my_pe;
    for (const Region& r : g_regions) {
        if (r.kind != kRegionStatus) continue;
        const Region& payload = g_regions[r.payload_region];
        for (uint64_t slot = 0; slot < r.slots; ++slot) {
            uint32_t landed = __atomic_load_n(shadow(r.flag_landed_off, me, slot), __ATOMIC_ACQUIRE);
            if ((landed >> 8) > launch) landed = __atomic_load_n(shadow(r.prev_landed_off, me, slot), __ATOMIC_ACQUIRE);
            if ((landed >> 8) != launch) continue;
            const int64_t row = payload_row(payload, me, slot);
            if (row >= 0 && uint64_t(row) < payload.slots)
                receive_check(payload.receive_id, slot, uint64_t(row), launch, int(landed & 0xFFu));
        }
    }
}
}  // namespace

void note_payload_read(const void* src, uint64_t bytes, const char* op, const Site& site) {
    if (current_core() < 0 || bytes == 0) return;
    const int ri = find_region(src, nullptr);
    if (ri < 0) return;
    uint64_t first, last;
    slots_touched(g_regions[ri], src, bytes, &first, &last);
    if (g_regions[ri].kind == kRegionStatus) {  // a copy of status slots to UB: a poll the twin sees
        for (uint64_t s = first; s <= last && s < g_regions[ri].slots; ++s) observe_slot(g_regions[ri], s, site);
        return;
    }
    if (g_regions[ri].kind != kRegionPayload) return;
    receive_read(g_regions[ri].receive_id, first, last, g_epoch, op, site);
}

void counters_begin_launch() {
    check_receives(g_epoch);  // the launch before this one: every PE has passed the barrier after it
    for (PlaneCounters* c : {&g_last.mte, &g_last.sdma})
        for (int i = 0; i < kCounterFields; ++i) c->field(i)->store(0);
    g_epoch = uint32_t(g_launches + 1);
    order_begin_launch(g_epoch);
    note_progress();
    // Launch epochs: a status slot of this PE that still holds the flag an earlier launch landed
    // there (nobody reset it) can release this launch's wait before this launch's put lands.
    // Read the slot before its stamp: a put of this launch stamps before it copies.
    const int me = pe_state().my_pe;
    for (const Region& r : g_regions) {
        if (r.kind != kRegionStatus) continue;
        for (uint64_t slot = 0; slot < r.slots; ++slot) {
            const uint32_t now = hash_bytes(r.begin + slot * r.slot_bytes, r.flag_bytes);
            std::atomic_thread_fence(std::memory_order_seq_cst);
            const uint32_t landed = __atomic_load_n(shadow(r.flag_landed_off, me, slot), __ATOMIC_ACQUIRE);
            if (landed == 0 || this_launch(landed)) continue;
            if (now != __atomic_load_n(shadow(r.flag_hash_off, me, slot), __ATOMIC_RELAXED)) continue;
            __atomic_store_n(shadow(r.stale_hash_off, me, slot), now, __ATOMIC_RELAXED);
            __atomic_store_n(shadow(r.stale_off, me, slot), g_epoch, __ATOMIC_RELEASE);
        }
    }
}

void note_ready_read(const void* sig, int /*cmp*/, int32_t /*value*/, const Site& site) {
    uint64_t slot = 0;
    const int ri = find_region(sig, &slot);
    if (ri < 0 || g_regions[ri].kind != kRegionStatus || current_core() < 0) return;
    const Region& r = g_regions[ri];
    const int me = pe_state().my_pe;
    const Region& payload = g_regions[r.payload_region];
    const int64_t row = payload_row(payload, me, slot);
    if (row >= 0 && uint64_t(row) < payload.slots) receive_observed(payload.receive_id, uint64_t(row), g_epoch, site);
    uint32_t* reported = shadow(r.read_off, me, slot);
    if (__atomic_load_n(reported, __ATOMIC_RELAXED) == g_epoch) return;  // once per slot and launch
    const uint32_t landed = __atomic_load_n(shadow(r.flag_landed_off, me, slot), __ATOMIC_ACQUIRE);
    const bool stale = __atomic_load_n(shadow(r.stale_off, me, slot), __ATOMIC_ACQUIRE) == g_epoch;
    char what[200];
    if (!this_launch(landed)) {
        if (landed == 0)
            snprintf(what, sizeof what, "no status put has ever written it");
        else
            snprintf(what, sizeof what, "no status put of this launch has written it: it holds the flag PE %u sent "
                     "in launch %u", landed & 0xFFu, landed >> 8);
    } else if (stale && __atomic_load_n(shadow(r.flag_hash_off, me, slot), __ATOMIC_RELAXED) ==
                            __atomic_load_n(shadow(r.stale_hash_off, me, slot), __ATOMIC_RELAXED)) {
        snprintf(what, sizeof what, "it already held that ready value when this launch began (an earlier launch's "
                 "flag, never reset), so the wait can pass before this launch's status put lands");
    } else {
        return;
    }
    __atomic_store_n(reported, g_epoch, __ATOMIC_RELAXED);
    char buf[640];
    snprintf(buf, sizeof buf, "PE %d core %d: status slot %llu read as ready in launch %u (%s %s), but %s: reset each "
             "status slot after its wait, before the next launch (docs/hardware-rules.md#15-launch-epochs)", me,
             current_core(), (unsigned long long)slot, g_epoch, site.inside ? site.inside : "a wait",
             site_text(Site{site.file, site.line, nullptr}).c_str(), what);
    report_violation(buf);
}

void counters_end_launch() {
    PlaneCounters* planes[2] = {&g_last.mte, &g_last.sdma};
    for (int p = 0; p < 2; ++p)
        for (int i = 0; i < kCounterFields; ++i) g_total.v[p][i] += planes[p]->field(i)->load();
    // A status slot is 8 words; the reference waits on every one of them (a 32 B MTE write
    // need not become visible all at once), so a wait on fewer is a violation.
    const int me = pe_state().my_pe;
    for (const Region& r : g_regions) {
        if (r.kind != kRegionStatus) continue;
        const uint32_t all = (1u << std::min<uint64_t>(r.flag_bytes / 4, 8)) - 1u;
        for (uint64_t slot = 0; slot < r.slots; ++slot) {
            const uint32_t w = *shadow(r.waited_off, me, slot);
            if ((w >> 8) == g_epoch && (w & 0xFFu) != all) {
                char buf[256];
                snprintf(buf, sizeof buf, "PE %d: status slot %llu was waited on at word mask 0x%02x of its %llu words: "
                         "wait on all of them, as the reference does", me, (unsigned long long)slot, w & 0xFFu,
                         (unsigned long long)(r.flag_bytes / 4));
                report_violation(buf);
            }
        }
    }
    ++g_launches;
}

void core_finish() {
    pipes_core_end();
    tl_sdma_outstanding = 0;
    tl_sdma_stalled = 0;
    tl_quiet_gave_up = false;
    land_shuffled(tl_sdma_pending, 2);
}

// GM -> UB -> remote in chunks of ub_size, as SHMEM's aclshmemx_mte_put_nbi does: per chunk
// an MTE2 op into the staging buffer, the put's own MTE2->MTE3 flag, then the MTE3 leg; the
// put's own MTE3->MTE2 flag orders each chunk after the previous one's leg, but nothing
// orders the last leg before what the kernel does next (twin_pipes.cpp).
void mte_put_gm(void* dst_sym, const void* src, void* ub, uint32_t ub_size, size_t bytes, size_t elem_bytes, int pe,
                uint32_t sync_id, const Site& site) {
    const SiteScope scope(site);  // a refusal names the kernel's line
    static const char* const op = "aclshmemx_mte_put_nbi (GM -> UB -> GM)";
    core_or_die(op);
    const uint64_t block = ub_size / elem_bytes * elem_bytes;
    if (block == 0) fatal("%s: ub_size %u is smaller than one element (%zu B)", op, ub_size, elem_bytes);
    const uint32_t off = ub_use(ub, ub_size, UbRole::MteStaging, op);
    sync_id_use(sync_id, kPlaneMte, op);
    uint8_t* dst = remote(dst_sym, pe, bytes, "MTE");
    check_layout_put(dst_sym, pe, bytes, op, site);
    Put whole{dst, dst_sym, src, bytes, pe, kPlaneMte};
    note_issue(whole);
    record_op(region_kind(dst_sym, nullptr) == kRegionControl ? "control" : "mte_put", pe, (long long)bytes, -1, off);
    count_put(g_last.mte, dst_sym, bytes);
    uint8_t* staging = static_cast<uint8_t*>(ub);
    for (uint64_t done = 0; done < bytes; done += block) {
        const uint64_t n = std::min<uint64_t>(block, bytes - done);
        const UbSpan span{off, off + uint32_t((n + 31) / 32 * 32)};
        if (done > 0) {  // the put's own MTE3->MTE2 sync between its chunks
            flag_set(AscendC::HardEvent::MTE3_MTE2, int32_t(sync_id), site);
            flag_wait(AscendC::HardEvent::MTE3_MTE2, int32_t(sync_id), site);
        }
        PipeOp in;
        in.kind = OpKind::ShmemStage;
        in.pipe = kPipeMte2;
        in.name = op;
        in.write = span;
        in.writes = true;
        in.dst_off = off;
        in.gm_src = static_cast<const uint8_t*>(src) + done;
        in.count = uint32_t(n);
        pipe_issue(in);
        flag_set(AscendC::HardEvent::MTE2_MTE3, int32_t(sync_id), site);
        flag_wait(AscendC::HardEvent::MTE2_MTE3, int32_t(sync_id), site);
        PipeOp leg;
        leg.kind = OpKind::ShmemLeg;
        leg.pipe = kPipeMte3;
        leg.name = op;
        leg.reads[0] = span;
        leg.n_reads = 1;
        leg.put = Put{dst + done, static_cast<uint8_t*>(dst_sym) + done, staging, size_t(n), pe, kPlaneMte, site};
        check_status_order(leg.put.dst_sym, pe, site);
        note_delivery(leg.put, pipe_issue(leg), site);
    }
}

void mte_put_ub(void* dst_sym, const void* ub_src, size_t bytes, int pe, uint32_t sync_id, const Site& site) {
    const SiteScope scope(site);  // a refusal names the kernel's line
    static const char* const op = "aclshmemx_mte_put_nbi (UB -> GM)";
    core_or_die(op);
    const uint32_t padded = uint32_t((bytes + 31) / 32 * 32);
    const uint32_t off = ub_use(ub_src, padded, UbRole::MteSource, op);
    sync_id_use(sync_id, kPlaneMte, op);
    const Put p{remote(dst_sym, pe, bytes, "MTE"), dst_sym, ub_src, bytes, pe, kPlaneMte, site};
    check_layout_put(dst_sym, pe, bytes, op, site);
    check_status_order(dst_sym, pe, site);
    note_issue(p);
    count_put(g_last.mte, dst_sym, bytes);
    uint64_t slot = 0;
    const int kind = region_kind(dst_sym, &slot);
    const bool status = kind == kRegionStatus;
    record_op(status ? "flag" : kind == kRegionControl ? "control" : "mte_put_ub", pe, (long long)bytes,
              status ? (long long)slot : -1, off);
    PipeOp leg;
    leg.kind = OpKind::ShmemLeg;
    leg.pipe = kPipeMte3;
    leg.name = op;
    leg.reads[0] = UbSpan{off, off + padded};
    leg.n_reads = 1;
    leg.put = p;
    note_delivery(p, pipe_issue(leg), site);
}

// SHMEM's SDMA calls drain every pipe (PipeBarrier<PIPE_ALL>) around the scalar and MTE3 work
// of writing descriptors and the doorbell through the UB scratch, and pair an MTE3->MTE2 flag
// on sync_id after each such write (src/device/gm2gm/engine/shmem_device_sdma.hpp): a kernel
// flag of that pair and id still set collides with it.
static void sdma_internal_flags(uint32_t sync_id, const Site& site, bool drain_after) {
    pipes_drain();
    flag_set(AscendC::HardEvent::MTE3_MTE2, int32_t(sync_id), site);
    flag_wait(AscendC::HardEvent::MTE3_MTE2, int32_t(sync_id), site);
    if (drain_after) pipes_drain();
}

void sdma_put(void* dst_sym, const void* src, void* ub, uint32_t ub_size, size_t bytes, int pe, uint32_t sync_id,
              const Site& site) {
    const SiteScope scope(site);  // a refusal names the kernel's line
    static const char* const op = "aclshmemx_sdma_put_nbi";
    const int core = core_or_die(op);
    if (g_sdma == nullptr) fatal("SDMA put without the SDMA engine: init with ACLSHMEM_DATA_OP_SDMA");
    if (ub_size < 64) fatal("%s: SDMA needs at least 64 B of UB, got %u", op, ub_size);
    ub_use(ub, ub_size, UbRole::SdmaScratch, op);
    sync_id_use(sync_id, kPlaneSdma, op);
    uint64_t status_slot = 0;
    if (region_kind(dst_sym, &status_slot) == kRegionStatus)
        fatal("status slot %llu on PE %d was written by SDMA (%s): status flags must go by MTE "
              "(docs/protocol.md#6-status-flags)", (unsigned long long)status_slot, pe, site_text(site).c_str());
    uint8_t* dst = remote(dst_sym, pe, bytes, "SDMA");
    if (core >= ACLSHMEM_MAX_AIV_PER_NPU) {
        char buf[320];
        snprintf(buf, sizeof buf, "PE %d core %d: SDMA put of %zu bytes to PE %d did nothing: SHMEM creates SDMA "
                 "streams for AIV blocks 0..%d only (block_dim must stay within min(AIV cores, %d))",
                 pe_state().my_pe, core, bytes, pe, ACLSHMEM_MAX_AIV_PER_NPU - 1, ACLSHMEM_MAX_AIV_PER_NPU);
        report_violation(buf);
        pipes_drain();  // SHMEM's early return for such a block is a PipeBarrier<PIPE_ALL>
        return;
    }
    check_layout_put(dst_sym, pe, bytes, op, site);
    sdma_internal_flags(sync_id, site, true);
    const Put p{dst, dst_sym, src, bytes, pe, kPlaneSdma, site};
    note_issue(p);
    note_delivery(p, order_sdma_put(), site);
    count_put(g_last.sdma, dst_sym, bytes);
    record_op("sdma_put", pe, (long long)bytes);
    // SHMEM cuts the call into SQEs of at most 1 MiB; each lands on its own (chaos: in any order).
    std::vector<Put> sqes;
    for (size_t done = 0; done < bytes || (bytes == 0 && done == 0); done += kSdmaSqeBytes) {
        const size_t n = std::min<size_t>(kSdmaSqeBytes, bytes - done);
        sqes.push_back(Put{dst + done, static_cast<uint8_t*>(dst_sym) + done, static_cast<const uint8_t*>(src) + done,
                           n, pe, kPlaneSdma, site});
        if (bytes == 0) break;
    }
    g_last.sdma.sqes.fetch_add(sqes.size(), std::memory_order_relaxed);
    if (sdma_stream_stalled(core)) {  // the fault: written into the ring, never run
        tl_sdma_stalled += sqes.size();
        return;
    }
    const uint64_t before = tl_sdma_outstanding;
    tl_sdma_outstanding += sqes.size();
    if (before <= kSdmaRingSqes && tl_sdma_outstanding > kSdmaRingSqes) {  // once per overrun
        char buf[400];
        snprintf(buf, sizeof buf, "PE %d core %d: %llu SDMA SQEs (1 MiB each at most) outstanding since its last SDMA "
                 "quiet, more than the %llu its ring is assumed to hold: SHMEM writes them with no fullness check "
                 "(%s; docs/hardware-rules.md#6-sdma)", pe_state().my_pe, core,
                 (unsigned long long)tl_sdma_outstanding, (unsigned long long)kSdmaRingSqes, site_text(site).c_str());
        report_violation(buf);
    }
    if (chaos_seed()) {
        tl_sdma_pending.insert(tl_sdma_pending.end(), sqes.begin(), sqes.end());
        return;
    }
    g_sdma->issued[core].fetch_add(sqes.size(), std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(g_sdma->mu);
        for (const Put& q : sqes) g_sdma->queue.emplace_back(q, core);
    }
    g_sdma->cv.notify_one();
}

void sdma_quiet(void* ub, uint32_t ub_size, uint32_t sync_id, const Site& site) {
    const SiteScope scope(site);  // a refusal names the kernel's line
    static const char* const op = "aclshmemx_sdma_quiet";
    const int core = core_or_die(op);
    if (g_sdma == nullptr) fatal("SDMA quiet without the SDMA engine: init with ACLSHMEM_DATA_OP_SDMA");
    if (ub_size < 64) fatal("%s: SDMA needs at least 64 B of UB, got %u", op, ub_size);
    ub_use(ub, ub_size, UbRole::SdmaScratch, op);
    sync_id_use(sync_id, kPlaneSdma, op);
    if (core >= ACLSHMEM_MAX_AIV_PER_NPU) {
        char buf[256];
        snprintf(buf, sizeof buf, "PE %d core %d: SDMA quiet from a block with no SDMA stream (blocks 0..%d have one)",
                 pe_state().my_pe, core, ACLSHMEM_MAX_AIV_PER_NPU - 1);
        report_violation(buf);
        return;
    }
    g_last.sdma.quiets.fetch_add(1, std::memory_order_relaxed);
    record_op("sdma_quiet", -1, 0);
    tl_sdma_outstanding = 0;
    // Its last step resets the completion flag through the scratch: MTE3, then an MTE3->MTE2
    // flag with no barrier after it.
    sdma_internal_flags(sync_id, site, false);
    tl_quiet_gave_up = false;
    if (tl_sdma_stalled > 0) {  // the stalled stream: SHMEM's polls run out and it returns as if all were done
        for (uint64_t poll = 0; poll < kShmemSdmaQuietPolls; ++poll) (void)g_sdma->done[core].load(std::memory_order_acquire);
        tl_sdma_stalled = 0;
        tl_quiet_gave_up = true;
        return;
    }
    order_sdma_quiet();  // once it returns, every SDMA put of this core is delivered
    if (chaos_seed()) {
        land_shuffled(tl_sdma_pending, 3);
        return;
    }
    const uint64_t want = g_sdma->issued[core].load(std::memory_order_relaxed);
    Waiter w("waiting for SDMA quiet");
    while (g_sdma->done[core].load(std::memory_order_acquire) < want) {
        if (!w.keep_waiting())
            fatal("timed out after %.1f s waiting for SDMA quiet (%llu of %llu descriptors done)", w.elapsed_s(),
                  (unsigned long long)g_sdma->done[core].load(), (unsigned long long)want);
    }
}

bool sdma_quiet_landed() {
    const bool landed = !tl_quiet_gave_up;
    tl_quiet_gave_up = false;
    return landed;
}

void mte_quiet(const Site& site) {
    const SiteScope scope(site);  // a refusal names the kernel's line
    core_or_die("aclshmem_quiet");
    g_last.mte.quiets.fetch_add(1, std::memory_order_relaxed);
    record_op("quiet", -1, 0);
    // quiet = PipeBarrier<PIPE_ALL> (every pipe's ops complete) + a whole-cache clean.
    pipes_drain();
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool dump_counters(const char* path) {
    check_receives(g_epoch);  // the last launch (the host dumps after its barrier)
    FILE* f = fopen(path, "w");
    if (!f) return false;
    PlaneCounters* last[2] = {&g_last.mte, &g_last.sdma};
    fprintf(f, "{\"pe\": %d, \"launches\": %llu, \"chaos_seed\": %lld", pe_state().my_pe,
            (unsigned long long)g_launches, chaos_seed() ? (long long)(chaos_seed() - 1) : -1LL);
    for (int which = 0; which < 2; ++which) {
        fprintf(f, ", \"%s\": {", which == 0 ? "last" : "total");
        for (int p = 0; p < 2; ++p) {
            fprintf(f, "%s\"%s\": {", p ? ", " : "", kPlaneName[p]);
            for (int i = 0; i < kCounterFields; ++i) {
                const uint64_t v = which == 0 ? last[p]->field(i)->load() : g_total.v[p][i];
                fprintf(f, "%s\"%s\": %llu", i ? ", " : "", kCounterNames[i], (unsigned long long)v);
            }
            fprintf(f, "}");
        }
        fprintf(f, "}");
    }
    fprintf(f, ", \"violations\": %llu, \"violation_examples\": [", (unsigned long long)g_violations.load());
    {
        std::lock_guard<std::mutex> lk(g_violation_mu);
        for (size_t i = 0; i < g_violation_examples.size(); ++i) {
            fprintf(f, "%s\"", i ? ", " : "");
            for (char c : g_violation_examples[i]) fputs(c == '"' ? "\\\"" : c == '\\' ? "\\\\" : std::string(1, c).c_str(), f);
            fprintf(f, "\"");
        }
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0;
}

}  // namespace twin

