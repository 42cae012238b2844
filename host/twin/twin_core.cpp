// The calling thread's core identity and the SoC the twin models (twin_core.h).
#include "twin_core.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "twin_socs.h"

#if defined(__x86_64__) && defined(__linux__)
#include <asm/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace twin {

namespace {

thread_local int32_t tl_core = -1;
thread_local uint32_t tl_block_dim = 0;
thread_local uint8_t* tl_ub = nullptr;

// The launch in progress, written before its core threads start and after they end.
uint32_t g_launch_blocks = 0;
uint32_t g_launch_cores = 0;

bool soc_matches(const SocRow& r, const char* name) {
    return r.per_die ? strncmp(name, r.name, strlen(r.name)) == 0 : strcmp(name, r.name) == 0;
}

bool same_counts(const SocRow& a, const SocRow& b) { return a.aiv == b.aiv && a.per_die == b.per_die; }

// "the twin models A (48 AIV), B and C (40 AIV) and Dxx (48 AIV per die)": neighbouring rows with
// the same counts named together (combine_lab/planning/cores.py says the same from this table).
std::string socs_modelled() {
    std::vector<std::pair<size_t, size_t>> groups;  // [first, last) rows
    for (size_t i = 0; i < sizeof kSocs / sizeof kSocs[0]; ++i) {
        if (i > 0 && same_counts(kSocs[i - 1], kSocs[i]))
            groups.back().second = i + 1;
        else
            groups.emplace_back(i, i + 1);
    }
    std::string out = "the twin models ";
    for (size_t g = 0; g < groups.size(); ++g) {
        if (g > 0) out += g + 1 == groups.size() ? " and " : ", ";
        for (size_t i = groups[g].first; i < groups[g].second; ++i) {
            if (i > groups[g].first) out += " and ";
            out += kSocs[i].name;
            if (kSocs[i].per_die) out += "xx";
        }
        const SocRow& r = kSocs[groups[g].first];
        out += " (" + std::to_string(r.aiv) + " AIV" + (r.per_die ? " per die" : "") + ")";
    }
    return out;
}

}  // namespace

const TwinSoc& twin_soc() {
    static const TwinSoc soc = [] {
        const char* env = getenv("COMBINE_TWIN_SOC");
        const char* name = env && *env ? env : kDefaultSoc;
        for (const SocRow& r : kSocs)
            if (soc_matches(r, name)) return TwinSoc{name, r.aiv, r.ub_bytes};
        fprintf(stderr, "twin: COMBINE_TWIN_SOC=%s: %s\n", name, socs_modelled().c_str());
        exit(1);
    }();
    return soc;
}

int64_t system_cycle() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const int64_t ns = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    return ns / (1000 / int64_t(kSystemCyclesPerUs));  // 20 ns per cycle at 50 per us
}

int32_t current_core() { return tl_core; }
uint32_t current_block_dim() { return tl_block_dim; }
uint8_t* ub_base() { return tl_core >= 0 ? tl_ub : nullptr; }

std::string launch_note() {
    if (tl_core < 0 || g_launch_blocks <= g_launch_cores) return "";
    char buf[256];
    snprintf(buf, sizeof buf, " [block_dim %u exceeds the %d AIV cores of %s: blocks %u.. run in a later wave, "
             "after blocks of this one end, so a block that waits for them waits forever]", g_launch_blocks,
             twin_soc().aiv, twin_soc().name, g_launch_cores);
    return buf;
}

void set_launch_geometry(uint32_t block_dim, uint32_t cores) {
    g_launch_blocks = block_dim;
    g_launch_cores = cores;
}

// A kernel's UB pointers are byte offsets in address space 256, which x86-64 addresses relative
// to GS (kernel_operator.h): the core thread's GS base is its UB, so `(__ubuf__ T*)off` is byte
// `off` of this core's UB. arch_prctl(ARCH_SET_GS) sets it for this thread alone, on every x86-64
// Linux kernel (with or without the FSGSBASE instructions); the kernel keeps it across context
// switches, and nothing else in a Linux process uses GS (glibc's thread pointer is FS).
static void set_gs_base(uint8_t* ub) {
#if defined(__x86_64__) && defined(__linux__)
    if (syscall(SYS_arch_prctl, ARCH_SET_GS, reinterpret_cast<unsigned long>(ub)) != 0) {
        fprintf(stderr, "twin: arch_prctl(ARCH_SET_GS) failed: a core's UB cannot be addressed by offset\n");
        exit(3);
    }
#else
    (void)ub;  // no segment base elsewhere: kernels there must not dereference UB pointers
#endif
}

void set_core_ub(uint8_t* ub, uint32_t block_dim) {
    tl_ub = ub;
    tl_block_dim = block_dim;
    set_gs_base(ub);
}

void set_current_core(int32_t block) { tl_core = block; }

}  // namespace twin
