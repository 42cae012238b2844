// The operation stream the kernel issued, per PE and core, for the timing model
// (combine_lab/model/stream.py derives the same stream from the plan; a test holds them equal).
// On when COMBINE_TWIN_OPS=<folder>: each launch replaces <folder>/ops_pe<r>.txt, one line per
// operation in issue order: "core kind dst bytes slot ub_off t_ns" (-1 where it does not apply;
// t_ns: CLOCK_MONOTONIC ns (now_ns), one clock for every PE, when the core issued it, i.e. entered the call).
// kinds: mte_put (GM -> UB -> GM), flag (a UB -> GM status put; slot: the status slot on PE dst),
// sdma_put, sdma_quiet, quiet, wait (one status word; slot: its status slot), load (a GM -> UB copy
// of a payload slot), store (a UB -> GM copy of an x_out row; slot: the token), barrier (SyncAll or
// SHMEM's soft core barrier). The first line is "# block_dim <n>", then "# launch_ns <begin> <end>"
// (the host's launch). Recorded for any kernel: the twin's own calls record them
// (combine_lab/model/recorded.py prices a recorded stream). Beside it, sdma_pe<r>.txt: one line per
// SDMA descriptor the copy thread ran, "core dst bytes t0_ns t1_ns" (core: whose queue; the trace
// of combine_lab/results/trace.py, docs/formats.md#9-operation-stream).
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "twin_state.h"

namespace twin {
namespace {

struct OpRec {
    const char* kind;
    int dst;
    long long bytes;
    long long slot;
    long long ub;
    long long t_ns;
};

struct SqeRec {
    int core;
    int dst;
    long long bytes;
    long long t0, t1;
};

std::vector<std::vector<OpRec>> g_ops;  // per block of the launch in progress
std::vector<SqeRec> g_sqes;             // the copy thread's descriptors (its own thread: g_sqe_mu)
std::mutex g_sqe_mu;
long long g_launch_ns = 0;

const char* ops_dir() {
    static const char* dir = [] {
        const char* e = getenv("COMBINE_TWIN_OPS");
        return e && *e ? e : nullptr;
    }();
    return dir;
}

}  // namespace

long long ops_clock_ns() { return ops_dir() ? (long long)now_ns() : 0; }

void ops_begin_launch(uint32_t block_dim) {
    if (!ops_dir()) return;
    g_ops.assign(block_dim, {});
    std::lock_guard<std::mutex> lk(g_sqe_mu);
    g_sqes.clear();
    g_launch_ns = (long long)now_ns();
}

void record_sqe(int core, int dst, long long bytes, long long t0) {
    if (!ops_dir()) return;
    const long long t1 = (long long)now_ns();
    std::lock_guard<std::mutex> lk(g_sqe_mu);
    g_sqes.push_back(SqeRec{core, dst, bytes, t0, t1});
}

void record_op(const char* kind, int dst, long long bytes, long long slot, long long ub) {
    if (!ops_dir()) return;
    const int32_t core = current_core();
    if (core < 0 || size_t(core) >= g_ops.size()) return;
    g_ops[size_t(core)].push_back(OpRec{kind, dst, bytes, slot, ub, (long long)now_ns()});  // a block runs on one thread at a time
}

void ops_end_launch() {
    const char* dir = ops_dir();
    if (!dir) return;
    const long long end_ns = (long long)now_ns();
    const std::string pe = std::to_string(pe_state().my_pe);
    const std::string path = std::string(dir) + "/ops_pe" + pe + ".txt";
    FILE* f = fopen(path.c_str(), "w");
    if (!f) fatal("COMBINE_TWIN_OPS: cannot write %s", path.c_str());
    fprintf(f, "# block_dim %zu\n", g_ops.size());  // the launch's blocks, those that issued nothing included
    fprintf(f, "# launch_ns %lld %lld\n", g_launch_ns, end_ns);
    for (size_t c = 0; c < g_ops.size(); ++c)
        for (const OpRec& o : g_ops[c])
            fprintf(f, "%zu %s %d %lld %lld %lld %lld\n", c, o.kind, o.dst, o.bytes, o.slot, o.ub, o.t_ns);
    if (fclose(f) != 0) fatal("COMBINE_TWIN_OPS: cannot write %s", path.c_str());
    const std::string sdma = std::string(dir) + "/sdma_pe" + pe + ".txt";
    FILE* g = fopen(sdma.c_str(), "w");
    if (!g) fatal("COMBINE_TWIN_OPS: cannot write %s", sdma.c_str());
    std::lock_guard<std::mutex> lk(g_sqe_mu);  // every descriptor landed: the launch's quiets waited for them
    for (const SqeRec& q : g_sqes) fprintf(g, "%d %d %lld %lld %lld\n", q.core, q.dst, q.bytes, q.t0, q.t1);
    if (fclose(g) != 0) fatal("COMBINE_TWIN_OPS: cannot write %s", sdma.c_str());
}

}  // namespace twin
