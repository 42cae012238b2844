// Host driver of the probe (`combine-lab probe`, docs/probe.md): one process per PE, as the
// combine's driver. Runs every measurement of a plan file, each `warmup` + `repeats` launches of
// the probe kernel (kernels/probe_kernel.cpp), and PE 0 prints one line per measurement with
// the time of each repeated launch, microseconds (the PE's span: the last core's end minus
// the first core's start, from the system cycles the cores recorded), after the SoC line:
//     probe_soc <soc name> <AIV cores>
//     probe_build sdma|mte-only       (whether SHMEM's SDMA calls are real in this build)
//     probe_row <index> <us> <us> ...
// PE 0 is the sender of every measurement; its first destination is the line's `dst` (the pair,
// and so the link class, the measurement crosses: docs/probe.md#6-link-classes), which also
// answers the flag round trips; the others take part in the barriers only (their windows receive).
//
// Usage: probe_host <pe_size> <pe_id> <ipport> <g_npus> <first_npu> <plan_file>
// Plan file: one measurement per line, `kind cores puts bytes peers buffers repeats warmup dst`
// (puts go to PEs dst .. dst + peers - 1 in turn),
// kind one of sdma sdma_issue mte_put flag flag_rtt quiet sdma_quiet wait.
// Exit status: 0 ok, 1 bad arguments or plan, 5 runtime failure, 6 its launcher was gone before
// it started, 7 a bounded wait timed out (the message names the PE, core and slot).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "acl/error_codes/rt_error_codes.h"
#include "shmem.h"
#include "combine_host_platform.h"
#include "host_guard.h"
#include "perf_csv.h"
#include "probe_kernel.h"

namespace {

const char* kProgram = "probe_host";
int g_pe = -1;

#define CHECK_ACL(call)                                                                       \
    do {                                                                                      \
        const aclError err_ = (call);                                                         \
        if (err_ != ACL_SUCCESS) {                                                            \
            fprintf(stderr, "%s: PE %d: %s failed with %d\n", kProgram, g_pe, #call, int(err_)); \
            platform_abort_peers();                                                           \
            return 5;                                                                         \
        }                                                                                     \
    } while (0)

struct Row {
    std::string kind_name;
    probe::Kind kind;
    uint32_t cores, puts, peers, buffers, repeats, warmup, dst;
    uint64_t bytes;
};

const struct {
    const char* name;
    probe::Kind kind;
} kKinds[] = {{"sdma", probe::Kind::Sdma},   {"sdma_issue", probe::Kind::SdmaIssue}, {"mte_put", probe::Kind::MtePut},
              {"flag", probe::Kind::Flag},   {"flag_rtt", probe::Kind::FlagRtt},     {"quiet", probe::Kind::Quiet},
              {"sdma_quiet", probe::Kind::SdmaQuiet}, {"wait", probe::Kind::Wait}};

bool times_sdma(probe::Kind k) {
    return k == probe::Kind::Sdma || k == probe::Kind::SdmaIssue || k == probe::Kind::SdmaQuiet;
}

bool uses_payload(probe::Kind k) {
    return k == probe::Kind::Sdma || k == probe::Kind::SdmaIssue || k == probe::Kind::MtePut ||
           k == probe::Kind::FlagRtt;
}

// Each line checked as combine_lab/run/probe.py checks it before writing the plan.
bool read_plan(const char* path, int pes, int64_t aiv_cores, std::vector<Row>* rows, std::string* error) {
    std::ifstream in(path);
    if (!in) {
        *error = std::string("plan ") + path + ": cannot read it: " + strerror(errno);
        return false;
    }
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        if (line.empty()) continue;
        std::istringstream f(line);
        Row r{};
        if (!(f >> r.kind_name >> r.cores >> r.puts >> r.bytes >> r.peers >> r.buffers >> r.repeats >> r.warmup >>
              r.dst)) {
            *error = "plan line " + std::to_string(n) + ": '" + line +
                     "': need `kind cores puts bytes peers buffers repeats warmup dst`";
            return false;
        }
        bool known = false;
        for (const auto& k : kKinds) {
            if (r.kind_name == k.name) {
                r.kind = k.kind;
                known = true;
            }
        }
        const uint64_t max_cores = std::min<int64_t>(aiv_cores, probe::kMaxCores);
        const char* bad = !known ? "unknown kind"
            : r.cores < 1 || r.cores > max_cores ? "cores must be 1 .. min(AIV cores, 48)"
            : r.puts < 1 ? "puts must be >= 1"
            : r.peers < 1 || int(r.peers) >= pes ? "peers must be 1 .. pes - 1"
            : r.dst < 1 || int64_t(r.dst) + r.peers > pes ? "dst must be 1 .. pes - peers (PE 0 sends to dst ..)"
            : r.buffers < 1 || r.buffers > probe::kUbStages ? "buffers must be 1 or 2"
            : r.repeats < 1 ? "repeats must be >= 1"
            : uses_payload(r.kind) && (r.bytes < 32 || r.bytes % 32) ? "bytes must be a positive multiple of 32"
            : (r.kind == probe::Kind::MtePut || r.kind == probe::Kind::FlagRtt) && r.bytes > probe::kUbStageBytes
                ? "an MTE row is at most 65536 bytes (one staging buffer)"
            : times_sdma(r.kind) && r.bytes > uint64_t(probe::kSdmaQuietEvery) * probe::kSdmaSqeBytes
                ? "an SDMA put is at most 256 MiB (256 SQEs, the ring depth assumed)"
            : r.kind == probe::Kind::SdmaIssue &&
                    r.puts * ((r.bytes + probe::kSdmaSqeBytes - 1) / probe::kSdmaSqeBytes) > probe::kSdmaQuietEvery
                ? "sdma_issue puts x SQEs per put must be <= 256 (no quiet between them)"
            : r.kind == probe::Kind::FlagRtt && r.cores != 1 ? "flag_rtt runs on one core"
            // an MTE-only build's SDMA calls are empty stand-ins (kernels/combine_platform.h): nothing to time
            : times_sdma(r.kind) && !kPlatformHasSdma ? "this build has no SDMA (CANN < 9.0.0 or Ascend950)"
            : nullptr;
        if (bad) {
            *error = "plan line " + std::to_string(n) + ": '" + line + "': " + bad + " (" + std::to_string(aiv_cores) +
                     " AIV cores, " + std::to_string(pes) + " PEs)";
            return false;
        }
        rows->push_back(r);
    }
    if (rows->empty()) {
        *error = std::string("plan ") + path + ": no measurement in it";
        return false;
    }
    return true;
}

const char* slot_name(int32_t slot) {
    switch (slot % int32_t(probe::kSlotsPerCore)) {
        case 0: return "ping/flag slot";
        case 1: return "answer slot";
        default: return "ready slot";
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (!host_guard::watch_launcher(kProgram)) return 6;
    if (argc != 7) {
        fprintf(stderr, "usage: %s <pe_size> <pe_id> <ipport> <g_npus> <first_npu> <plan_file>\n", kProgram);
        return 1;
    }
    const int pes = atoi(argv[1]), pe = atoi(argv[2]), g_npus = atoi(argv[4]), first_npu = atoi(argv[5]);
    g_pe = pe;
    if (pes < 2 || pe < 0 || pe >= pes || g_npus < 1 || first_npu < 0 || strlen(argv[3]) >= ACLSHMEM_MAX_IP_PORT_LEN) {
        fprintf(stderr, "%s: pe_size=%s pe_id=%s g_npus=%s first_npu=%s ipport=%s: need pe_size >= 2, "
                        "0 <= pe_id < pe_size, g_npus >= 1, first_npu >= 0, ipport under %d characters\n",
                kProgram, argv[1], argv[2], argv[4], argv[5], argv[3], ACLSHMEM_MAX_IP_PORT_LEN);
        return 1;
    }
    const int device = pe % g_npus + first_npu;
    CHECK_ACL(aclInit(nullptr));
    CHECK_ACL(aclrtSetDevice(device));
    int64_t aiv_cores = 0;
    CHECK_ACL(aclrtGetDeviceInfo(uint32_t(device), ACL_DEV_ATTR_VECTOR_CORE_NUM, &aiv_cores));
    std::vector<Row> rows;
    std::string error;
    if (!read_plan(argv[6], pes, aiv_cores, &rows, &error)) {
        fprintf(stderr, "%s: PE %d: %s\n", kProgram, pe, error.c_str());
        return 1;
    }
    uint64_t max_bytes = 32;
    uint32_t max_cores = 1;
    for (const Row& r : rows) {
        if (uses_payload(r.kind)) max_bytes = std::max(max_bytes, r.bytes);
        max_cores = std::max(max_cores, r.cores);
    }
    aclrtStream stream = nullptr;
    CHECK_ACL(aclrtCreateStream(&stream));
    const uint64_t win = probe::window_bytes(max_bytes);
    aclshmemx_init_attr_t attr{};
    attr.my_pe = pe;
    attr.n_pes = pes;
    snprintf(attr.ip_port, sizeof attr.ip_port, "%s", argv[3]);
    attr.local_mem_size = (win + (1u << 20) + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    attr.option_attr.data_op_engine_type = static_cast<data_op_engine_type_t>(COMBINE_DATA_OP_ENGINES);
    if (aclshmemx_init_attr(ACLSHMEMX_INIT_WITH_DEFAULT, &attr) != 0) {
        fprintf(stderr, "%s: PE %d: aclshmemx_init_attr failed (ipport %s)\n", kProgram, pe, argv[3]);
        return 5;
    }
    // The flag slots are 64 B lines (kFlagSlotBytes): aclshmem_malloc guarantees only 16 B.
    uint8_t* window = static_cast<uint8_t*>(aclshmem_align(probe::kFlagSlotBytes, win));
    if (window == nullptr) {
        fprintf(stderr, "%s: PE %d: aclshmem_align(%u, %llu) failed\n", kProgram, pe, probe::kFlagSlotBytes,
                (unsigned long long)win);
        platform_abort_peers();
        return 5;
    }
    CHECK_ACL(aclrtMemset(window, win, 0, win));
    const uint64_t src_bytes = uint64_t(probe::kMaxCores) * probe::row_stride(max_bytes);
    uint8_t* d_src = nullptr;
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&d_src), src_bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMemset(d_src, src_bytes, 0x5A, src_bytes));
    const size_t rec_bytes = size_t(max_cores) * probe::kRecordBytes;
    uint8_t* d_rec = nullptr;
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&d_rec), rec_bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    std::vector<uint8_t> rec(rec_bytes);

    const double timeout_s = host_guard::wait_timeout_s();
    const double cyc_per_us = cycles_per_us(aclrtGetSocName());
    const uint64_t wait_budget = uint64_t(timeout_s * 1e6 * cyc_per_us);
    const int32_t stream_timeout_ms = int32_t(std::min(2.0 * timeout_s + 30.0, 2.0e6) * 1000.0);
    const uint64_t flags_off = probe::flags_offset(max_bytes);
    if (pe == 0) printf("probe_soc %s %lld\nprobe_build %s\n", aclrtGetSocName(), (long long)aiv_cores,
                        kPlatformHasSdma ? "sdma" : "mte-only");
    host_guard::timed_barrier_all(kProgram, pe, 1.25 * timeout_s, "before the first measurement");

    for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        // Fresh flag slots for every measurement (round-trip values restart at 1).
        CHECK_ACL(aclrtMemset(window + flags_off, win - flags_off, 0, win - flags_off));
        host_guard::timed_barrier_all(kProgram, pe, 1.25 * timeout_s, "before a measurement");
        const bool active = pe == 0 || (r.kind == probe::Kind::FlagRtt && pe == int(r.dst));
        const uint32_t role = pe == 0 ? probe::kRoleSend : probe::kRoleAnswer;
        std::vector<double> times;
        for (uint32_t l = 0; l < r.warmup + r.repeats; ++l) {
            if (active) {
                CHECK_ACL(aclrtMemset(d_rec, rec_bytes, 0, rec_bytes));
                probe::launch_probe(r.cores, stream, d_src, window, d_rec, r.kind, role, r.puts, r.bytes, max_bytes,
                                    r.dst, r.peers, r.buffers, l, wait_budget);
                const aclError e = aclrtSynchronizeStreamWithTimeout(stream, stream_timeout_ms);
                if (e == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) {
                    fprintf(stderr, "%s: PE %d: timed out after %.1f s waiting for the probe kernel (%s, measurement "
                                    "%zu): a core is stuck where the kernel bounds no wait\n",
                            kProgram, pe, stream_timeout_ms / 1000.0, r.kind_name.c_str(), i);
                    platform_abort_peers();
                    return host_guard::kTimedOutExit;
                }
                CHECK_ACL(e);
                CHECK_ACL(aclrtMemcpy(rec.data(), rec_bytes, d_rec, rec_bytes, ACL_MEMCPY_DEVICE_TO_HOST));
                int64_t first = INT64_MAX, last = INT64_MIN;
                for (uint32_t c = 0; c < r.cores; ++c) {
                    probe::ProbeRecord p;
                    memcpy(&p, rec.data() + size_t(c) * probe::kRecordBytes, sizeof p);
                    if (p.timed_out) {
                        fprintf(stderr, "%s: PE %d core %u: timed out after %.1f s waiting for %s %d (core %d's) to "
                                        "become %d (it is %d; word %d of %u) in measurement %zu (%s, launch %u)\n",
                                kProgram, pe, c, double(p.waited) / cyc_per_us * 1e-6, slot_name(p.slot), p.slot,
                                p.slot / int32_t(probe::kSlotsPerCore), p.want, p.seen, p.word, probe::kStatusWords, i,
                                r.kind_name.c_str(), l);
                        platform_abort_peers();
                        return host_guard::kTimedOutExit;
                    }
                    first = std::min(first, p.start);
                    last = std::max(last, p.end);
                }
                if (l >= r.warmup) times.push_back(double(last - first) / cyc_per_us);
            }
            // No PE starts the next launch before every PE finished this one.
            host_guard::timed_barrier_all(kProgram, pe, 1.25 * timeout_s, "after a probe launch");
        }
        if (pe == 0) {
            printf("probe_row %zu", i);
            for (double t : times) printf(" %.4f", t);
            printf("\n");
            fflush(stdout);
        }
    }

    aclrtFree(d_src);
    aclrtFree(d_rec);
    aclshmem_free(window);
    aclshmem_finalize();
    aclrtDestroyStream(stream);
    aclrtResetDevice(device);
    aclFinalize();
    return 0;
}
