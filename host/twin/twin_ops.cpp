// The operation stream the kernel issued, per PE and core, for the timing model
// (combine_lab/model/stream.py derives the same stream from the plan; a test holds them equal).
// On when COMBINE_TWIN_OPS=<folder>: each launch replaces <folder>/ops_pe<r>.txt, one line per
// operation in issue order: "core kind dst bytes slot ub_off" (-1 where it does not apply).
// kinds: mte_put (GM -> UB -> GM), flag (a UB -> GM status put; slot: the status slot on PE dst),
// sdma_put, sdma_quiet, quiet, wait (one status word; slot: its status slot), load (a GM -> UB copy
// of a payload slot), store (a UB -> GM copy of an x_out row; slot: the token), barrier (SyncAll or
// SHMEM's soft core barrier). The first line is "# block_dim <n>". Recorded for any kernel: the
// twin's own calls record them (combine_lab/model/recorded.py prices a recorded stream).
#include <cstdio>
#include <cstdlib>
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
};

std::vector<std::vector<OpRec>> g_ops;  // per block of the launch in progress

const char* ops_dir() {
    static const char* dir = [] {
        const char* e = getenv("COMBINE_TWIN_OPS");
        return e && *e ? e : nullptr;
    }();
    return dir;
}

}  // namespace

void ops_begin_launch(uint32_t block_dim) {
    if (!ops_dir()) return;
    g_ops.assign(block_dim, {});
}

void record_op(const char* kind, int dst, long long bytes, long long slot, long long ub) {
    if (!ops_dir()) return;
    const int32_t core = current_core();
    if (core < 0 || size_t(core) >= g_ops.size()) return;
    g_ops[size_t(core)].push_back(OpRec{kind, dst, bytes, slot, ub});  // a block runs on one thread at a time
}

void ops_end_launch() {
    const char* dir = ops_dir();
    if (!dir) return;
    const std::string path = std::string(dir) + "/ops_pe" + std::to_string(pe_state().my_pe) + ".txt";
    FILE* f = fopen(path.c_str(), "w");
    if (!f) fatal("COMBINE_TWIN_OPS: cannot write %s", path.c_str());
    fprintf(f, "# block_dim %zu\n", g_ops.size());  // the launch's blocks, those that issued nothing included
    for (size_t c = 0; c < g_ops.size(); ++c)
        for (const OpRec& o : g_ops[c])
            fprintf(f, "%zu %s %d %lld %lld %lld\n", c, o.kind, o.dst, o.bytes, o.slot, o.ub);
    if (fclose(f) != 0) fatal("COMBINE_TWIN_OPS: cannot write %s", path.c_str());
}

}  // namespace twin
