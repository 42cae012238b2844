// Happens-before of payload and status on the twin (docs/hardware-rules.md#14-happens-before):
// a put's data count as delivered at the remote PE only once a call on the issuing core that
// completes it comes after it, per engine:
// - an MTE put (its UB -> remote leg on MTE3) is complete before the next MTE3 op once
//   aclshmem_quiet, aclshmem_fence (SHMEM: the same call), PipeBarrier<PIPE_ALL>,
//   PipeBarrier<PIPE_MTE3> or a chain of flags orders it there (twin_pipes.cpp's watermarks);
// - an SDMA put (the core's own SDMA stream) is complete after aclshmemx_sdma_quiet on that core;
//   an MTE quiet does not complete SDMA;
// - another core's put counts once that core completed it before a core barrier (SyncAll or
//   SHMEM's soft barrier) that the writing core has passed since: each core records, as it enters
//   a barrier, what it knows complete (epochs per PE, core and engine, below).
// A status put whose payload is not so delivered is a violation on every run, whatever the thread
// schedule, naming both calls' file:line, the PE, core and slot. A payload put by another PE is
// not checked here (nothing on the twin says which signal orders it): the landing check of
// twin_checker.cpp still sees it.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "twin_state.h"

namespace twin {
namespace {

constexpr int kSnapshots = 4;  // a core is at most one barrier ahead of one that passed the last

// Per payload slot, on the destination PE's heap: who issued its last put in which launch, and
// that put's sequence number on its engine (the MTE3 leg's op seq, or the core's SDMA count).
// who = launch (16) | PE (12) | core (8) | core barriers done at issue (8) | plane (1) | site (19).
struct PayloadShadow {
    uint64_t who_off = 0, seq_off = 0;
};
std::vector<PayloadShadow> g_payloads;

// Call sites, by index, for the payload puts of this process (a status put checks only the
// payload its own PE put, so an index read back is always one of ours).
std::mutex g_sites_mu;
std::vector<Site> g_sites;
constexpr uint32_t kMaxSites = (1u << 19) - 1;

uint32_t g_epoch = 0;

// What a core knew complete as it entered core barrier number `barrier` (counted over launches).
struct Snapshot {
    std::atomic<uint64_t> barrier{~0ull};
    std::atomic<uint32_t> epoch{0};
    std::atomic<uint64_t> mte_done{0};   // MTE ops with seq below this are complete
    std::atomic<uint64_t> sdma_done{0};  // SDMA puts with seq up to this are complete
};
Snapshot g_snap[kMaxCores][kSnapshots];

// The calling core's SDMA puts: issued and completed by its SDMA quiet, in this launch.
struct CoreSdma {
    int core = -1;
    uint32_t epoch = 0;
    uint64_t issued = 0, done = 0;
};
thread_local CoreSdma tl_sdma;

CoreSdma& core_sdma() {
    if (tl_sdma.core != current_core() || tl_sdma.epoch != g_epoch) tl_sdma = CoreSdma{current_core(), g_epoch, 0, 0};
    return tl_sdma;
}

uint32_t site_index_locked(const Site& site) {
    std::lock_guard<std::mutex> lk(g_sites_mu);
    for (size_t i = g_sites.size(); i-- > 0;)
        if (g_sites[i].file == site.file && g_sites[i].line == site.line && g_sites[i].inside == site.inside)
            return uint32_t(i);
    if (g_sites.size() >= kMaxSites) return kMaxSites;
    g_sites.push_back(site);
    return uint32_t(g_sites.size() - 1);
}

uint32_t site_index(const Site& site) {
    // A core puts from a few call sites over and over: the last one it used is kept without the lock.
    thread_local Site last{};
    thread_local uint32_t last_index = kMaxSites;
    if (last_index != kMaxSites && last.file == site.file && last.line == site.line && last.inside == site.inside)
        return last_index;
    last = site;
    last_index = site_index_locked(site);
    return last_index;
}

Site site_at(uint32_t i) {
    std::lock_guard<std::mutex> lk(g_sites_mu);
    return i < g_sites.size() ? g_sites[i] : Site{};
}

uint64_t* word(uint64_t off, int pe, uint64_t slot) { return reinterpret_cast<uint64_t*>(heap_base(pe) + off) + slot; }

// "aclshmemx_mte_put_nbi at combine_doubleplane/combine_doubleplane_kernel.cpp:188"
std::string call_text(const Site& s) {
    const std::string at = site_text(Site{s.file, s.line, nullptr});  // "at <file>:<line>"
    return s.inside != nullptr ? std::string(s.inside) + " " + at : at.substr(3);
}

}  // namespace

void order_begin_launch(uint32_t epoch) { g_epoch = epoch; }

int order_label_payload(uint64_t slots) {
    PayloadShadow s;
    uint8_t* mine = heap_base(pe_state().my_pe);
    s.who_off = reserve_alloc(slots * 8, "payload-order shadow");
    s.seq_off = reserve_alloc(slots * 8, "payload-order shadow");
    memset(mine + s.who_off, 0, slots * 8);
    memset(mine + s.seq_off, 0, slots * 8);
    g_payloads.push_back(s);
    return int(g_payloads.size() - 1);
}

void order_payload_put(int id, int pe, uint64_t first, uint64_t last, int plane, uint64_t seq, const Site& site) {
    if (id < 0) return;
    const PayloadShadow& s = g_payloads[size_t(id)];
    const uint64_t who = (uint64_t(g_epoch & 0xFFFFu) << 48) | (uint64_t(pe_state().my_pe & 0xFFF) << 36) |
                         (uint64_t(current_core() & 0xFF) << 28) | (uint64_t(core_barriers_done() & 0xFFu) << 20) |
                         (uint64_t(plane & 1) << 19) | site_index(site);
    for (uint64_t slot = first; slot <= last; ++slot) {
        __atomic_store_n(word(s.seq_off, pe, slot), seq, __ATOMIC_RELAXED);
        __atomic_store_n(word(s.who_off, pe, slot), who, __ATOMIC_RELEASE);
    }
}

uint64_t order_sdma_put() { return ++core_sdma().issued; }

void order_sdma_quiet() {
    CoreSdma& c = core_sdma();
    c.done = c.issued;
}

void order_barrier_enter() {
    const int core = current_core();
    if (core < 0 || core >= kMaxCores) return;
    const uint64_t barrier = core_barriers_done();
    Snapshot& s = g_snap[core][barrier % kSnapshots];
    s.mte_done.store(pipe_known_by_scalar(kPipeMte3), std::memory_order_relaxed);
    s.sdma_done.store(core_sdma().done, std::memory_order_relaxed);
    s.epoch.store(g_epoch, std::memory_order_relaxed);
    s.barrier.store(barrier, std::memory_order_release);  // the barrier's own atomics publish it
}

bool order_payload_by_me(int id, int pe, uint64_t row) {
    if (id < 0) return false;
    const uint64_t who = __atomic_load_n(word(g_payloads[size_t(id)].who_off, pe, row), __ATOMIC_ACQUIRE);
    return (who >> 48) == (g_epoch & 0xFFFFu) && int((who >> 36) & 0xFFF) == (pe_state().my_pe & 0xFFF);
}

void order_status_put(int id, int pe, uint64_t row, uint64_t slot, const Site& site) {
    if (id < 0) return;
    const PayloadShadow& s = g_payloads[size_t(id)];
    const uint64_t who = __atomic_load_n(word(s.who_off, pe, row), __ATOMIC_ACQUIRE);
    if ((who >> 48) != (g_epoch & 0xFFFFu)) return;  // no payload put in this launch: reported as it lands
    if (int((who >> 36) & 0xFFF) != (pe_state().my_pe & 0xFFF)) return;  // another PE's put
    const uint64_t seq = __atomic_load_n(word(s.seq_off, pe, row), __ATOMIC_RELAXED);
    const int issuer = int((who >> 28) & 0xFF), plane = int((who >> 19) & 1);
    const uint32_t barriers_then = uint32_t((who >> 20) & 0xFF);
    const Site payload_site = site_at(uint32_t(who & kMaxSites));
    const int me = current_core();
    const uint32_t barriers_now = core_barriers_done();
    bool done;
    std::string why;
    const char* quiet = plane == kPlaneMte ? "aclshmem_quiet (or aclshmem_fence, PipeBarrier<PIPE_ALL>)"
                                           : "aclshmemx_sdma_quiet (an MTE quiet does not complete SDMA)";
    if (issuer == (me & 0xFF)) {
        done = plane == kPlaneMte ? pipe_done_before(kPipeMte3, kPipeMte3, seq) : core_sdma().done >= seq;
        why = std::string("no ") + quiet + " on this core comes between them";
    } else if (barriers_then == (barriers_now & 0xFFu)) {
        done = false;
        why = "core " + std::to_string(issuer) + " of this PE put it, with no core barrier between them: this core's "
              "quiet does not complete another core's puts (each core writes the flags of its own chunk, "
              "docs/variants.md#2-cores-per-source-rank)";
    } else {
        const Snapshot& snap = g_snap[issuer][(barriers_now - 1) % kSnapshots];
        const bool seen = snap.barrier.load(std::memory_order_acquire) == uint64_t(barriers_now - 1) &&
                          snap.epoch.load(std::memory_order_relaxed) == g_epoch;
        done = seen && (plane == kPlaneMte ? snap.mte_done.load(std::memory_order_relaxed) > seq
                                           : snap.sdma_done.load(std::memory_order_relaxed) >= seq);
        why = "core " + std::to_string(issuer) + " of this PE put it and had not completed it (" + quiet +
              ") when it entered the last core barrier this core passed";
    }
    if (done) return;
    char head[320];
    snprintf(head, sizeof head, "PE %d core %d: status put (%s) makes slot %llu on PE %d ready before its payload is "
             "delivered: the %s payload put (%s) is not complete: ", pe_state().my_pe, me, call_text(site).c_str(),
             (unsigned long long)slot, pe, kPlaneName[plane], call_text(payload_site).c_str());
    report_violation(head + why + "; on the NPU the flag can land first, whatever the schedule "
                     "(docs/hardware-rules.md#14-happens-before)");
}

}  // namespace twin
