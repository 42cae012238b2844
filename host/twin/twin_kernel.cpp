// Kernel launch on the twin: the SoC's AIV cores are worker threads with a UB each; a
// launch of block_dim blocks runs them on those cores in index order, in waves when
// block_dim exceeds the AIV count (as the hardware does), so blocks that wait for a block
// of a later wave hang here as they would on the NPU. Per-core profiling frames count system
// cycles at the modelled SoC's rate (50 per microsecond, twin_socs.h) and exist for 64 blocks,
// as in SHMEM.
#include <atomic>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <string>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernel_operator.h"
#include "shmem.h"
#include "twin_platform.h"
#include "twin_socs.h"
#include "twin_state.h"

namespace twin {
namespace {

thread_local bool tl_ffts_set = false;
thread_local int64_t tl_frame_start[ACLSHMEM_CYCLE_PROF_FRAME_CNT];

aclshmem_prof_pe_t g_prof;
int g_prof_state = -1;  // -1 unknown, 0 off, 1 on

// The launch in progress: blocks handed to cores in order, and SyncAll's counters.
struct Launch {
    uint32_t block_dim = 0;
    uint32_t cores = 0;
    std::atomic<uint32_t> next{0};
    std::atomic<uint32_t> started{0};
    std::atomic<uint32_t> sync_arrived{0};
    std::atomic<uint32_t> sync_generation{0};
};
Launch* g_launch = nullptr;
std::atomic<uint32_t> g_core_barriers{0};  // core barriers this PE's cores completed, all launches

bool prof_enabled() {
    if (g_prof_state < 0) {
        // Like SHMEM: only the PE named by SHMEM_CYCLE_PROF_PE records frames.
        const char* env = getenv("SHMEM_CYCLE_PROF_PE");
        g_prof_state = (env && *env && atoi(env) == pe_state().my_pe) ? 1 : 0;
        g_prof.pe_id = g_prof_state ? pe_state().my_pe : -1;
    }
    return g_prof_state == 1;
}

}  // namespace

// A PE that dies in the middle of a run, for the tests of what the others then do:
// COMBINE_TWIN_DIE=<pe>[:<launch>[:STOP]] kills that PE (SIGKILL, as the OOM killer or a crash
// would) when its launch number <launch> (1-based, default 1) starts, before any of its cores runs;
// with :STOP it stops it instead (SIGSTOP, as a debugger or Ctrl-Z would): alive, never finishing.
static void die_if_asked(uint32_t launch) {
    static const char* env = getenv("COMBINE_TWIN_DIE");
    if (env == nullptr || *env == '\0') return;
    int pe = -1;
    unsigned at = 1;
    char how[8] = "";
    if (sscanf(env, "%d:%u:%7s", &pe, &at, how) < 1) return;
    if (pe == pe_state().my_pe && launch == at) {
        fflush(nullptr);
        raise(strcmp(how, "STOP") == 0 ? SIGSTOP : SIGKILL);
    }
}

void launch_kernel(uint32_t block_dim, void* /*stream*/, const std::function<void()>& body) {
    if (block_dim == 0 || block_dim > 65535) fatal("launch with block_dim=%u: must be 1..65535", block_dim);
    static uint32_t launches = 0;
    die_if_asked(++launches);
    prof_enabled();
    counters_begin_launch();
    ops_begin_launch(block_dim);
    const TwinSoc& soc = twin_soc();
    Launch launch;
    launch.block_dim = block_dim;
    launch.cores = std::min<uint32_t>(block_dim, uint32_t(soc.aiv));
    g_launch = &launch;
    set_launch_geometry(launch.block_dim, launch.cores);
    std::vector<std::thread> cores;
    cores.reserve(launch.cores);
    for (uint32_t c = 0; c < launch.cores; ++c) {
        cores.emplace_back([&launch, &body, &soc] {
            std::vector<uint8_t> ub(soc.ub_bytes);
            set_core_ub(ub.data(), launch.block_dim);
            for (uint32_t b; (b = launch.next.fetch_add(1)) < launch.block_dim;) {
                set_current_core(int32_t(b));
                tl_ffts_set = false;
                launch.started.fetch_add(1);
                pipes_core_begin();
                body();
                core_finish();
                set_current_core(-1);
            }
            pipes_thread_end();
        });
    }
    for (std::thread& t : cores) t.join();
    g_launch = nullptr;
    set_launch_geometry(0, 0);
    counters_end_launch();
    ops_end_launch();
}

// Every block of the launch arrives before any leaves (`what` names the barrier).
static void cross_core_barrier(const char* what);

void sync_all_cores() {
    if (current_core() < 0 || g_launch == nullptr) fatal("AscendC::SyncAll called outside a kernel core");
    if (!tl_ffts_set)
        fatal("AscendC::SyncAll without the FFTS base address: on A2/A3 the kernel must call "
              "util_set_ffts_config(util_get_ffts_config() from the host) first");
    // SyncAll is a PIPE_ALL barrier, then the cross-core flag.
    record_op("barrier", -1, 0);
    pipe_barrier(PIPE_ALL);
    cross_core_barrier("AscendC::SyncAll");
}

uint32_t core_barriers_done() { return g_core_barriers.load(std::memory_order_acquire); }

void core_barrier_soft() {
    if (current_core() < 0 || g_launch == nullptr) fatal("aclshmemi_barrier_core_soft called outside a kernel core");
    // GM flags between the blocks, set and polled by the scalar unit: no pipe is drained.
    record_op("barrier", -1, 0);
    cross_core_barrier("aclshmemi_barrier_core_soft");
}

static void cross_core_barrier(const char* what) {
    order_barrier_enter();
    Launch& l = *g_launch;
    const uint32_t gen = l.sync_generation.load(std::memory_order_acquire);
    const uint32_t arrived = l.sync_arrived.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (arrived == l.block_dim) {
        l.sync_arrived.store(0, std::memory_order_relaxed);
        g_core_barriers.fetch_add(1, std::memory_order_acq_rel);  // before anyone leaves it
        l.sync_generation.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    // A block that arrived holds its core until the barrier opens, so when every core holds one, the
    // blocks of later waves never start: the NPU hangs here for ever. Said at once, not after the
    // bounded wait (docs/hardware-rules.md#9-cores-waves-and-barriers).
    if (arrived == l.cores) {
        char later[48];
        if (l.block_dim - 1 == l.cores) snprintf(later, sizeof later, "block %u, which starts", l.cores);
        else snprintf(later, sizeof later, "blocks %u..%u, which start", l.cores, l.block_dim - 1);
        fatal("deadlock in %s: all %u cores wait in it for %s only when one of them ends (the NPU hangs here)",
              what, l.cores, later);
    }
    Waiter w(what, kBarrierPatience);
    while (l.sync_generation.load(std::memory_order_acquire) == gen) {
        if (!w.keep_waiting()) {
            fatal("timed out after %.1f s in %s: %u of %u blocks arrived", w.elapsed_s(), what,
                  l.sync_arrived.load(), l.block_dim);
        }
    }
}

void prof_start(uint32_t frame) {
    if (g_prof_state != 1 || frame >= ACLSHMEM_CYCLE_PROF_FRAME_CNT) return;
    if (current_core() >= ACLSHMEM_CYCLE_PROF_MAX_BLOCK)
        fatal("profiling frame %u in block %d: SHMEM has profiling slots for %d blocks only", frame, current_core(),
              ACLSHMEM_CYCLE_PROF_MAX_BLOCK);
    pipe_barrier(PIPE_ALL);  // SHMEMI_PROF_START drains the pipes before reading the clock
    tl_frame_start[frame] = system_cycle();
}

void prof_end(uint32_t frame) {
    const int32_t core = current_core();
    if (g_prof_state != 1 || frame >= ACLSHMEM_CYCLE_PROF_FRAME_CNT || core < 0) return;
    if (core >= ACLSHMEM_CYCLE_PROF_MAX_BLOCK)
        fatal("profiling frame %u in block %d: SHMEM has profiling slots for %d blocks only", frame, core,
              ACLSHMEM_CYCLE_PROF_MAX_BLOCK);
    pipe_barrier(PIPE_ALL);
    aclshmem_prof_block_t& b = g_prof.block_prof[core];
    b.cycles[frame] += system_cycle() - tl_frame_start[frame];
    b.ccount[frame] += 1;
}

}  // namespace twin

namespace AscendC {
int64_t GetBlockIdx() { return twin::current_core(); }
int64_t GetBlockNum() { return twin::current_block_dim(); }
int64_t GetSystemCycle() { return twin::system_cycle(); }
}  // namespace AscendC

uint64_t util_get_ffts_config(void) { return twin::kFftsToken; }

void aclshmemi_barrier_core_soft() { twin::core_barrier_soft(); }

void util_set_ffts_config(uint64_t config) {
    if (twin::current_core() < 0) twin::fatal("util_set_ffts_config called outside a kernel core");
    if (config != twin::kFftsToken)
        twin::fatal("util_set_ffts_config(0x%llx): not the address util_get_ffts_config() returned on the host",
                    (unsigned long long)config);
    twin::tl_ffts_set = true;
}

void aclshmemx_get_prof(aclshmem_prof_pe_t** out, bool verbose) {
    const bool on = twin::prof_enabled();
    if (out) *out = on ? &twin::g_prof : nullptr;
    if (verbose && on) {
        for (int b = 0; b < ACLSHMEM_CYCLE_PROF_MAX_BLOCK; ++b)
            for (int f = 0; f < 4; ++f) {
                const aclshmem_prof_block_t& pb = twin::g_prof.block_prof[b];
                if (pb.ccount[f])
                    printf("prof pe %d block %d frame %d: count %lld cycles %lld avg %.3f us\n", twin::g_prof.pe_id,
                           b, f, (long long)pb.ccount[f], (long long)pb.cycles[f],
                           double(pb.cycles[f]) / double(pb.ccount[f]) / twin::kSystemCyclesPerUs);
            }
    }
}
