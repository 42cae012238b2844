// The two data planes of the twin and their counters.
// MTE: a put is a copy made by the calling core, complete at aclshmem_quiet.
// SDMA: a put is a descriptor queued to the PE's copy-engine thread, complete at SDMA quiet.
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "aclshmem.h"
#include "twin_platform.h"
#include "twin_state.h"

namespace twin {
namespace {

constexpr int kMaxCores = 256;

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

struct Region {
    uint8_t* begin;
    uint8_t* end;
    RegionKind kind;
    uint64_t slot_bytes;
};
std::vector<Region> g_regions;

struct Descriptor {
    uint8_t* dst;
    const uint8_t* src;
    size_t bytes;
    int core;
};

struct SdmaEngine {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Descriptor> queue;
    bool stop = false;
    std::thread thread;
    std::atomic<uint64_t> issued[kMaxCores];
    std::atomic<uint64_t> done[kMaxCores];
};
SdmaEngine* g_sdma = nullptr;

void sdma_main(SdmaEngine* e) {
    for (;;) {
        Descriptor d;
        {
            std::unique_lock<std::mutex> lk(e->mu);
            e->cv.wait(lk, [e] { return e->stop || !e->queue.empty(); });
            if (e->queue.empty()) return;
            d = e->queue.front();
            e->queue.pop_front();
        }
        memcpy(d.dst, d.src, d.bytes);
        e->done[d.core].fetch_add(1, std::memory_order_release);
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
    if (p == nullptr || static_cast<uint8_t*>(dst_sym) + bytes > mine + s.heap_bytes)
        fatal("%s put of %zu bytes to PE %d at %p is outside the symmetric heap", plane, bytes, pe, dst_sym);
    return static_cast<uint8_t*>(p);
}

int core_or_die(const char* what) {
    const int core = current_core();
    if (core < 0 || core >= kMaxCores) fatal("%s called outside a kernel core (core %d)", what, core);
    return core;
}

}  // namespace

int region_kind(const void* sym, uint64_t* slot_index) {
    const uint8_t* p = static_cast<const uint8_t*>(sym);
    for (const Region& r : g_regions) {
        if (p >= r.begin && p < r.end) {
            if (slot_index) *slot_index = uint64_t(p - r.begin) / r.slot_bytes;
            return r.kind;
        }
    }
    return -1;
}

void label_region(void* sym, size_t bytes, RegionKind kind, uint64_t slot_bytes) {
    uint8_t* p = static_cast<uint8_t*>(sym);
    g_regions.push_back(Region{p, p + bytes, kind, slot_bytes ? slot_bytes : 1});
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

void mte_put(void* dst_sym, const void* src, size_t bytes, int pe) {
    core_or_die("aclshmemx_mte_put_nbi");
    uint8_t* dst = remote(dst_sym, pe, bytes, "MTE");
    memcpy(dst, src, bytes);
    count_put(g_last.mte, dst_sym, bytes);
}

void sdma_put(void* dst_sym, const void* src, size_t bytes, int pe, uint32_t ub_size) {
    const int core = core_or_die("aclshmemx_sdma_put_nbi");
    if (g_sdma == nullptr) fatal("SDMA put without the SDMA engine: init with ACLSHMEM_DATA_OP_SDMA");
    if (ub_size < 64) fatal("SDMA needs at least 64 B of UB, got %u", ub_size);
    if (region_kind(dst_sym, nullptr) == kRegionStatus)
        fatal("a status slot was written by SDMA: status flags must go by MTE (combine-facts section 5)");
    uint8_t* dst = remote(dst_sym, pe, bytes, "SDMA");
    g_sdma->issued[core].fetch_add(1, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(g_sdma->mu);
        g_sdma->queue.push_back(Descriptor{dst, static_cast<const uint8_t*>(src), bytes, core});
    }
    g_sdma->cv.notify_one();
    count_put(g_last.sdma, dst_sym, bytes);
}

void sdma_quiet(uint32_t ub_size) {
    const int core = core_or_die("aclshmemx_sdma_quiet");
    if (g_sdma == nullptr) fatal("SDMA quiet without the SDMA engine: init with ACLSHMEM_DATA_OP_SDMA");
    if (ub_size < 64) fatal("SDMA needs at least 64 B of UB, got %u", ub_size);
    g_last.sdma.quiets.fetch_add(1, std::memory_order_relaxed);
    const uint64_t want = g_sdma->issued[core].load(std::memory_order_relaxed);
    Waiter w("waiting for SDMA quiet");
    while (g_sdma->done[core].load(std::memory_order_acquire) < want) {
        if (!w.keep_waiting())
            fatal("timed out after %.1f s waiting for SDMA quiet (%llu of %llu descriptors done)", w.elapsed_s(),
                  (unsigned long long)g_sdma->done[core].load(), (unsigned long long)want);
    }
}

bool dump_counters(const char* path) {
    FILE* f = fopen(path, "w");
    if (!f) return false;
    const PlaneCounters* last[2] = {&g_last.mte, &g_last.sdma};
    const char* names[2] = {"MTE", "SDMA"};
    fprintf(f, "{\"pe\": %d, \"launches\": %llu", pe_state().my_pe, (unsigned long long)g_launches);
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
                       "\"status_bytes\": %llu}", p ? ", " : "", names[p], (unsigned long long)v[0],
                    (unsigned long long)v[1], (unsigned long long)v[2], (unsigned long long)v[3],
                    (unsigned long long)v[4]);
        }
        fprintf(f, "}");
    }
    fprintf(f, "}\n");
    return fclose(f) == 0;
}

}  // namespace twin

void aclshmem_quiet() {
    twin::core_or_die("aclshmem_quiet");
    twin::g_last.mte.quiets.fetch_add(1, std::memory_order_relaxed);
    // MTE copies are already done by the calling core; the fence publishes them before
    // whatever the core writes next (its status flags).
    std::atomic_thread_fence(std::memory_order_seq_cst);
}
