// Kernel launch on the twin: one thread per AIV core, each with its own UB, and the
// per-core profiling frames (nanoseconds, so 1000 "cycles" per microsecond).
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "aclshmem.h"
#include "kernel_operator.h"
#include "twin_platform.h"
#include "twin_state.h"

namespace twin {
namespace {

thread_local int32_t tl_core = -1;
thread_local uint32_t tl_block_dim = 0;
thread_local uint8_t* tl_ub = nullptr;
thread_local uint64_t tl_frame_start[ACLSHMEM_CYCLE_PROF_FRAME_CNT];

aclshmem_prof_pe_t g_prof;
int g_prof_state = -1;  // -1 unknown, 0 off, 1 on

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

int32_t current_core() { return tl_core; }
uint32_t current_block_dim() { return tl_block_dim; }
uint8_t* ub_base() { return tl_ub; }

void launch_kernel(uint32_t block_dim, void* /*stream*/, const std::function<void()>& body) {
    if (block_dim == 0 || block_dim > 256) fatal("launch with block_dim=%u: must be 1..256", block_dim);
    prof_enabled();
    counters_begin_launch();
    std::vector<std::vector<uint8_t>> ubs(block_dim, std::vector<uint8_t>(kUbBytes));
    std::vector<std::thread> cores;
    cores.reserve(block_dim);
    for (uint32_t c = 0; c < block_dim; ++c) {
        cores.emplace_back([c, block_dim, &body, &ubs] {
            tl_core = int32_t(c);
            tl_block_dim = block_dim;
            tl_ub = ubs[c].data();
            body();
            core_finish();
        });
    }
    for (std::thread& t : cores) t.join();
    counters_end_launch();
}

void prof_start(uint32_t frame) {
    if (g_prof_state == 1 && frame < ACLSHMEM_CYCLE_PROF_FRAME_CNT) tl_frame_start[frame] = now_ns();
}

void prof_end(uint32_t frame) {
    if (g_prof_state != 1 || frame >= ACLSHMEM_CYCLE_PROF_FRAME_CNT || tl_core < 0 ||
        tl_core >= ACLSHMEM_CYCLE_PROF_MAX_BLOCK)
        return;
    aclshmem_prof_block_t& b = g_prof.block_prof[tl_core];
    b.cycles[frame] += int64_t(now_ns() - tl_frame_start[frame]);
    b.ccount[frame] += 1;
}

}  // namespace twin

namespace AscendC {
int64_t GetBlockIdx() { return twin::tl_core; }
int64_t GetBlockNum() { return twin::tl_block_dim; }
}  // namespace AscendC

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
                           double(pb.cycles[f]) / double(pb.ccount[f]) / 1000.0);
            }
    }
}
