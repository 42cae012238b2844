// The two data planes of the twin and their counters.
// MTE: a put is GM -> UB -> remote GM by the calling core (twin_pipes.cpp models the UB and
//   the MTE3 leg in flight); complete at aclshmem_quiet.
// SDMA: a put is a descriptor queued to the PE's copy-engine thread, complete at SDMA quiet.
//   As in SHMEM, only AIV blocks 0..47 have an SDMA stream: a put from block 48 or above
//   does nothing (a violation here), and block_dim must stay within the SoC's AIV count.
// Chaos mode (COMBINE_TWIN_CHAOS=<seed>): MTE legs run when every pipe drains (quiet, PIPE_ALL
// barrier, kernel end) in the order twin_pipes.cpp picks; SDMA descriptors land only at SDMA
// quiet, each batch in a seeded shuffled order. Each call tells the protocol checker
// (twin_checker.cpp) what it issued and delivered, and every put lands through it.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shmem.h"
#include "twin_platform.h"
#include "twin_state.h"
#include "twin_checker.h"

namespace twin {
namespace {

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

}  // namespace

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
    for (PlaneCounters* c : {&g_last.mte, &g_last.sdma})
        for (int i = 0; i < kCounterFields; ++i) c->field(i)->store(0);
    checker_begin_launch(uint32_t(g_launches + 1));
}

void counters_end_launch() {
    checker_end_launch();
    PlaneCounters* planes[2] = {&g_last.mte, &g_last.sdma};
    for (int p = 0; p < 2; ++p)
        for (int i = 0; i < kCounterFields; ++i) g_total.v[p][i] += planes[p]->field(i)->load();
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
    checker_flush();  // the last launch (the host dumps after its barrier)
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
    const auto text = [f](const std::string& s) {  // a JSON string
        fputc('"', f);
        for (char c : s) fputs(c == '"' ? "\\\"" : c == '\\' ? "\\\\" : std::string(1, c).c_str(), f);
        fputc('"', f);
    };
    fprintf(f, ", \"violations\": %llu, \"violation_examples\": [", (unsigned long long)violation_count());
    const std::vector<std::string> examples = violation_examples();
    for (size_t i = 0; i < examples.size(); ++i) {
        fputs(i ? ", " : "", f);
        text(examples[i]);
    }
    fprintf(f, "], \"violation_kinds\": [");
    const std::vector<ViolationKind> kinds = violation_kinds();
    for (size_t i = 0; i < kinds.size(); ++i) {
        fprintf(f, "%s{\"count\": %llu, \"key\": ", i ? ", " : "", (unsigned long long)kinds[i].count);
        text(kinds[i].key);
        fputs(", \"example\": ", f);
        text(kinds[i].example);
        fputc('}', f);
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0;
}

}  // namespace twin
