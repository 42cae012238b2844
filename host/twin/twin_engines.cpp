// The two data planes of the twin, their counters, and the protocol checker.
// MTE: a put is a copy made by the calling core, complete at aclshmem_quiet.
// SDMA: a put is a descriptor queued to the PE's copy-engine thread, complete at SDMA quiet.
// Chaos mode (COMBINE_TWIN_CHAOS=<seed>): MTE puts land only at the next quiet and SDMA
// descriptors only at SDMA quiet, each batch in a seeded shuffled order.
// Checker (always on): per window slot the twin records the launch in which its payload
// landed; a status-ready flag that lands before that is a violation, reported with the
// writing PE and core, the slot, and both operations.
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

#include "aclshmem.h"
#include "twin_platform.h"
#include "twin_state.h"

namespace twin {
namespace {

constexpr int kMaxCores = 256;
constexpr int kPlaneMte = 0, kPlaneSdma = 1;
const char* const kPlaneName[2] = {"MTE", "SDMA"};
constexpr size_t kMaxViolationExamples = 8;

struct PlaneCounters {
    std::atomic<uint64_t> puts{0}, bytes{0}, quiets{0}, status_writes{0}, status_bytes{0};
};
struct Counters {
    PlaneCounters mte, sdma;
};
struct Totals {
    uint64_t v[2][5] = {};
};

Counters g_last;
Totals g_total;
uint64_t g_launches = 0;
uint32_t g_epoch = 0;  // 1-based index of the launch in progress, the same on every PE

std::mutex g_violation_mu;
std::atomic<uint64_t> g_violations{0};
std::vector<std::string> g_violation_examples;

// A labelled region of the window. Payload regions own two symmetric shadow arrays of
// uint32 per slot: the launch in which the payload landed, and (launch << 1 | plane) of
// the put that was issued for it. A status region points at its payload region.
struct Region {
    uint8_t* begin;
    uint8_t* end;
    RegionKind kind;
    uint64_t slot_bytes;
    uint64_t landed_off = 0, issued_off = 0;  // heap offsets of the shadows (payload regions)
    int payload_region = -1;                  // status regions
};
std::vector<Region> g_regions;

struct Put {
    uint8_t* dst;       // remote address
    const void* dst_sym;  // local symmetric address (for the checker)
    const void* src;
    size_t bytes;
    int pe;
    int plane;
};

thread_local std::vector<Put> tl_mte_pending;   // chaos: land at the next quiet
thread_local std::vector<Put> tl_sdma_pending;  // chaos: land at the next SDMA quiet

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

void report_violation(const std::string& msg) {
    g_violations.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lk(g_violation_mu);
    if (g_violation_examples.size() < kMaxViolationExamples) {
        g_violation_examples.push_back(msg);
        fprintf(stderr, "twin: protocol violation: %s\n", msg.c_str());
    }
}

// Called when the payload put for `slot` is issued: remembers its plane for the report.
void note_issue(const Put& p) {
    uint64_t slot = 0;
    const int ri = find_region(p.dst_sym, &slot);
    if (ri < 0 || g_regions[ri].kind != kRegionPayload) return;
    __atomic_store_n(shadow(g_regions[ri].issued_off, p.pe, slot), (g_epoch << 1) | uint32_t(p.plane),
                     __ATOMIC_RELAXED);
}

// The moment a put becomes visible at its destination.
void land(const Put& p) {
    uint64_t slot = 0;
    const int ri = find_region(p.dst_sym, &slot);
    if (ri >= 0 && g_regions[ri].kind == kRegionStatus) {
        const Region& status = g_regions[ri];
        const Region& payload = g_regions[status.payload_region];
        const uint32_t landed = __atomic_load_n(shadow(payload.landed_off, p.pe, slot), __ATOMIC_ACQUIRE);
        if (landed != g_epoch) {
            const uint32_t issued = __atomic_load_n(shadow(payload.issued_off, p.pe, slot), __ATOMIC_RELAXED);
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
            report_violation(buf);
        }
        memcpy(p.dst, p.src, p.bytes);
        return;
    }
    memcpy(p.dst, p.src, p.bytes);
    if (ri >= 0 && g_regions[ri].kind == kRegionPayload)
        __atomic_store_n(shadow(g_regions[ri].landed_off, p.pe, slot), g_epoch, __ATOMIC_RELEASE);
}

void land_shuffled(std::vector<Put>& puts, uint64_t salt) {
    if (puts.empty()) return;
    std::mt19937_64 rng(chaos_seed() * 0x9E3779B97F4A7C15ull ^ (uint64_t(pe_state().my_pe) << 48) ^
                        (uint64_t(current_core()) << 32) ^ (uint64_t(g_epoch) << 8) ^ salt ^ puts.size());
    std::shuffle(puts.begin(), puts.end(), rng);
    for (const Put& p : puts) land(p);
    puts.clear();
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
        land(d.first);
        e->done[d.second].fetch_add(1, std::memory_order_release);
    }
}

void count_put(PlaneCounters& c, const void* dst_sym, size_t bytes) {
    if (region_kind(dst_sym, nullptr) == kRegionStatus) {
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

}  // namespace

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

void label_region(void* sym, size_t bytes, RegionKind kind, uint64_t slot_bytes) {
    uint8_t* p = static_cast<uint8_t*>(sym);
    Region r{p, p + bytes, kind, slot_bytes ? slot_bytes : 1};
    const uint64_t slots = bytes / r.slot_bytes;
    if (kind == kRegionPayload) {
        r.landed_off = reserve_alloc(slots * 4, "payload-landed shadow");
        r.issued_off = reserve_alloc(slots * 4, "payload-issued shadow");
        memset(heap_base(pe_state().my_pe) + r.landed_off, 0, slots * 4);
        memset(heap_base(pe_state().my_pe) + r.issued_off, 0, slots * 4);
    } else {
        for (int i = int(g_regions.size()) - 1; i >= 0 && r.payload_region < 0; --i)
            if (g_regions[i].kind == kRegionPayload) r.payload_region = i;
        if (r.payload_region < 0) fatal("label a payload region before its status region");
    }
    g_regions.push_back(r);
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

void counters_begin_launch() {
    for (PlaneCounters* c : {&g_last.mte, &g_last.sdma}) {
        c->puts = 0;
        c->bytes = 0;
        c->quiets = 0;
        c->status_writes = 0;
        c->status_bytes = 0;
    }
    g_epoch = uint32_t(g_launches + 1);
}

void counters_end_launch() {
    const PlaneCounters* planes[2] = {&g_last.mte, &g_last.sdma};
    for (int p = 0; p < 2; ++p) {
        g_total.v[p][0] += planes[p]->puts;
        g_total.v[p][1] += planes[p]->bytes;
        g_total.v[p][2] += planes[p]->quiets;
        g_total.v[p][3] += planes[p]->status_writes;
        g_total.v[p][4] += planes[p]->status_bytes;
    }
    ++g_launches;
}

void core_finish() {
    land_shuffled(tl_mte_pending, 1);
    land_shuffled(tl_sdma_pending, 2);
}

void mte_put(void* dst_sym, const void* src, size_t bytes, int pe) {
    core_or_die("aclshmemx_mte_put_nbi");
    const Put p{remote(dst_sym, pe, bytes, "MTE"), dst_sym, src, bytes, pe, kPlaneMte};
    note_issue(p);
    count_put(g_last.mte, dst_sym, bytes);
    if (chaos_seed())
        tl_mte_pending.push_back(p);
    else
        land(p);
}

void sdma_put(void* dst_sym, const void* src, size_t bytes, int pe, uint32_t ub_size) {
    const int core = core_or_die("aclshmemx_sdma_put_nbi");
    if (g_sdma == nullptr) fatal("SDMA put without the SDMA engine: init with ACLSHMEM_DATA_OP_SDMA");
    if (ub_size < 64) fatal("SDMA needs at least 64 B of UB, got %u", ub_size);
    if (region_kind(dst_sym, nullptr) == kRegionStatus)
        fatal("a status slot was written by SDMA: status flags must go by MTE (combine-facts section 5)");
    const Put p{remote(dst_sym, pe, bytes, "SDMA"), dst_sym, src, bytes, pe, kPlaneSdma};
    note_issue(p);
    count_put(g_last.sdma, dst_sym, bytes);
    if (chaos_seed()) {
        tl_sdma_pending.push_back(p);
        return;
    }
    g_sdma->issued[core].fetch_add(1, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(g_sdma->mu);
        g_sdma->queue.emplace_back(p, core);
    }
    g_sdma->cv.notify_one();
}

void sdma_quiet(uint32_t ub_size) {
    const int core = core_or_die("aclshmemx_sdma_quiet");
    if (g_sdma == nullptr) fatal("SDMA quiet without the SDMA engine: init with ACLSHMEM_DATA_OP_SDMA");
    if (ub_size < 64) fatal("SDMA needs at least 64 B of UB, got %u", ub_size);
    g_last.sdma.quiets.fetch_add(1, std::memory_order_relaxed);
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

void mte_quiet() {
    core_or_die("aclshmem_quiet");
    g_last.mte.quiets.fetch_add(1, std::memory_order_relaxed);
    if (chaos_seed()) land_shuffled(tl_mte_pending, 4);
    // Publish the copies before whatever the core writes next (its status flags).
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool dump_counters(const char* path) {
    FILE* f = fopen(path, "w");
    if (!f) return false;
    const PlaneCounters* last[2] = {&g_last.mte, &g_last.sdma};
    fprintf(f, "{\"pe\": %d, \"launches\": %llu, \"chaos_seed\": %lld", pe_state().my_pe,
            (unsigned long long)g_launches, chaos_seed() ? (long long)(chaos_seed() - 1) : -1LL);
    for (int which = 0; which < 2; ++which) {
        fprintf(f, ", \"%s\": {", which == 0 ? "last" : "total");
        for (int p = 0; p < 2; ++p) {
            uint64_t v[5];
            if (which == 0) {
                v[0] = last[p]->puts; v[1] = last[p]->bytes; v[2] = last[p]->quiets;
                v[3] = last[p]->status_writes; v[4] = last[p]->status_bytes;
            } else {
                for (int i = 0; i < 5; ++i) v[i] = g_total.v[p][i];
            }
            fprintf(f, "%s\"%s\": {\"puts\": %llu, \"bytes\": %llu, \"quiets\": %llu, \"status_writes\": %llu, "
                       "\"status_bytes\": %llu}", p ? ", " : "", kPlaneName[p], (unsigned long long)v[0],
                    (unsigned long long)v[1], (unsigned long long)v[2], (unsigned long long)v[3],
                    (unsigned long long)v[4]);
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

void aclshmem_quiet() { twin::mte_quiet(); }
