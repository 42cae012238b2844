// The twin's protocol checker (always on), over the regions the host labels in the window.
// A status put whose payload the issuing core has not completed is a violation at once
// (happens-before, twin_order.cpp); per window slot the twin also records the launch in which
// its payload landed, and a status-ready flag that lands before that (a payload by another PE)
// or with no payload put in this launch is a violation, reported with the writing PE and core,
// the slot, and both operations. A status slot read as ready that no status put of this launch
// made ready is a violation (launch epochs: a stale flag). Status slots must be waited on word by
// word, all 8 words, as the reference does. Every put of either plane lands here (land).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shmem.h"
#include "twin_platform.h"
#include "twin_state.h"
#include "twin_checker.h"

namespace twin {
namespace {

uint32_t g_epoch = 0;  // 1-based index of the launch in progress, the same on every PE
uint32_t g_receive_checked = 0;  // the last launch whose payload reads were checked (twin_receive.cpp)



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

// The segment variant: per receiver PE, (launch << 8 | words) this core waited on of its inbox slot.
thread_local std::vector<uint32_t> tl_inbox_waited;
thread_local int tl_inbox_core = -1;

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

constexpr uint64_t kLine = 64;  // the scalar data cache's line (SHMEM: SCALAR_DATA_CACHELINE_SIZE)

uint32_t stamp_of(uint32_t x) { return (g_epoch << 8) | (x & 0xFFu); }
bool this_launch(uint32_t stamp) { return (stamp >> 8) == g_epoch; }

uint32_t hash_bytes(const uint8_t* p, size_t n) {
    uint32_t h = 2166136261u;  // FNV-1a
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
    return h;
}

}  // namespace

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

void checker_begin_launch(uint32_t launch) {
    check_receives(g_epoch);  // the launch before this one: every PE has passed the barrier after it
    g_epoch = launch;
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

void checker_end_launch() {
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
}

void checker_flush() { check_receives(g_epoch); }

}  // namespace twin
