// Host driver of the combine: one process per PE (docs/npu.md#6-host-api).
// Reads this PE's case files, runs warmup + loops combines, writes output/x_out_<pe>.bin,
// checks it against golden, and appends the full_op / comm_only rows when profiling.
// Built with COMBINE_USER_KERNEL=1 it launches your own kernel instead of the lab's, by the
// reference's entry contract, with the reference's window and block_dim (host/user_kernel.h,
// docs/own-kernel.md#2-the-entry-contract); everything else is the same.
// Exit status: 0 ok, 1 bad arguments or case files, 2 x_out mismatch, 5 runtime failure,
// 6 its launcher was gone before it started, 7 a bounded wait timed out (a core's wait for a
// status flag, the stream, or the barrier of all PEs: the message names the PE, core and slot).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "acl/acl.h"
#include "acl/error_codes/rt_error_codes.h"
#include "shmem.h"
#include "case_io.h"
#include "combine_host_platform.h"
#include "combine_kernel.h"
#include "host_args.h"
#include "host_guard.h"
#include "perf_csv.h"
#if COMBINE_USER_KERNEL
#include "user_kernel.h"
#endif

namespace {

int g_pe = -1;

#define CHECK_ACL(call)                                                                          \
    do {                                                                                         \
        const aclError err_ = (call);                                                            \
        if (err_ != ACL_SUCCESS) {                                                               \
            fprintf(stderr, "combine_host: PE %d: %s failed with %d\n", g_pe, #call, int(err_)); \
            platform_abort_peers();                                                              \
            return 5;                                                                            \
        }                                                                                        \
    } while (0)

void* device_copy_of(const void* host, size_t bytes) {
    void* dev = nullptr;
    if (aclrtMalloc(&dev, bytes ? bytes : 1, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) return nullptr;
    if (bytes && aclrtMemcpy(dev, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE) != ACL_SUCCESS) return nullptr;
    return dev;
}

std::string counters_path(const std::string& csv) {
    const std::string tag = "_perf_rank";
    const size_t at = csv.rfind(tag);
    if (at == std::string::npos) return csv + ".counters.json";
    std::string out = csv.substr(0, at) + "_counters_rank" + csv.substr(at + tag.size());
    if (out.size() > 4 && out.compare(out.size() - 4, 4, ".csv") == 0) out.replace(out.size() - 4, 4, ".json");
    return out;
}

// Dies with its launcher, the launcher's wait timeout, and SHMEM's host barrier behind a watchdog:
// host/host_guard.h, shared with the probe's driver.
using host_guard::kTimedOutExit;
using host_guard::wait_timeout_s;

bool watch_launcher() { return host_guard::watch_launcher("combine_host"); }

// SHMEM's host barrier has no timeout (a device barrier, then a stream sync that waits forever):
// a PE that died would leave the others in it for good; the watchdog ends this PE instead.
void timed_barrier_all(double seconds, const char* when) {
    host_guard::timed_barrier_all("combine_host", g_pe, seconds, when);
}

// The symmetric window of the kernel this driver launches: the lab's (64 B status slots, each on
// its own scalar cache line) or your kernel's (the reference's: 32 B slots right after the payload).
struct DriverWindow {
    uint64_t total, payload_bytes, stride, status_off, status_slot, flag_bytes;
    uint64_t alloc = 0;  // what the driver allocates: total, and the lab kernel's SDMA quiet receipts after it
    uint64_t positions_off = 0, inbox_off = 0, inbox_stride = 0;  // the segment variant's area (0: none)
    uint64_t row_bytes = 0;  // what a payload slot receives, for the twin's checker (0: your kernel's, any put)
};

DriverWindow driver_window(const HostArgs& a) {
#if COMBINE_USER_KERNEL
    const combine::UserWindow w = combine::user_window(a.bs, a.topk, a.h, a.elem_bytes());
    return DriverWindow{w.total_bytes, w.status_off, w.stride, w.status_off, combine::kUserStatusSlotBytes,
                        combine::kUserStatusSlotBytes, w.total_bytes, 0, 0, 0, 0};
#else
    const combine::WindowLayout w =
        a.policy == combine::Policy::DualPlaneSegment
            ? combine::window_layout(a.bs, a.topk, a.h, a.elem_bytes(), uint32_t(a.pe_size), a.expert_per_pe)
            : combine::window_layout(a.bs, a.topk, a.h, a.elem_bytes());
    return DriverWindow{w.total_bytes, w.status_off - w.payload_off, w.stride, w.status_off, combine::kStatusStride,
                        combine::kStatusFlagBytes, combine::align_line(w.total_bytes) + combine::kSdmaReceiptBytes,
                        w.positions_off, w.inbox_off, w.inbox_stride, uint64_t(a.h) * a.elem_bytes()};
#endif
}

int prof_pe_from_env() {
    const char* env = getenv("SHMEM_CYCLE_PROF_PE");
    return env && *env ? atoi(env) : 0;
}

// The cores' diagnostics lines after a launch: prints each core's wait that gave up and
// returns how many gave up. `cyc_per_us` converts the waited system cycles.
int report_wait_timeouts(const uint8_t* diag, uint32_t block_dim, const HostArgs& a, double cyc_per_us,
                         int64_t aiv_cores) {
    int n = 0;
    for (uint32_t b = 0; b < block_dim; ++b) {
        combine::WaitTimeout rec;
        memcpy(&rec, diag + uint64_t(b) * combine::kDiagRecordBytes, sizeof rec);
        if (rec.kind == int32_t(combine::WaitKind::None)) continue;
        ++n;
        if (rec.kind == int32_t(combine::WaitKind::SdmaQuiet)) {  // slot, expert: first, last row; word: rows; seen: PE
            fprintf(stderr, "combine_host: PE %d core %d: SDMA quiet gave up after %.3f s (SHMEM's quiet returns after "
                            "1000000 polls as if all had landed): expand_x rows %d..%d (%d rows, the first to PE %d) "
                            "went by SDMA and may not have landed; the core wrote none of its SDMA rows' flags\n",
                    a.pe_id, rec.core, double(rec.waited) / cyc_per_us * 1e-6, rec.slot, rec.expert, rec.word,
                    rec.seen);
            continue;
        }
        if (rec.kind == int32_t(combine::WaitKind::Bases)) {
            fprintf(stderr, "combine_host: PE %d core %d: timed out after %.1f s waiting for the segment bases of PE %d "
                            "(inbox slot %d, word %d of %u is %d): PE %d never published its layout\n", a.pe_id, rec.core,
                    double(rec.waited) / cyc_per_us * 1e-6, rec.slot, rec.slot, rec.word, combine::kStatusWords,
                    rec.seen, rec.slot);
            continue;
        }
        const int32_t token = rec.slot / int32_t(a.topk), k = rec.slot % int32_t(a.topk);
        const int32_t owner = rec.expert >= 0 ? rec.expert / int32_t(a.expert_per_pe) : -1;
        char wave[256] = "";
        if (int64_t(block_dim) > aiv_cores)
            snprintf(wave, sizeof wave, " [block_dim %u exceeds the %lld AIV cores: blocks %lld.. run in a later wave, "
                     "after blocks of this one end, so a block that waits for them waits forever]", block_dim,
                     (long long)aiv_cores, (long long)aiv_cores);
        fprintf(stderr, "combine_host: PE %d core %d: timed out after %.1f s waiting for status slot %d to become %d "
                        "(it is %d; word %d of %u; token %d, k %d: expert %d, sent by PE %d)%s\n", a.pe_id, rec.core,
                double(rec.waited) / cyc_per_us * 1e-6, rec.slot, combine::kStatusReady, rec.seen, rec.word,
                combine::kStatusWords, token, k, rec.expert, owner, wave);
    }
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    if (!watch_launcher()) return 6;
    HostArgs a;
    if (!parse_host_args(argc, argv, &a)) return 1;
    g_pe = a.pe_id;
    if (a.policy != combine::Policy::MteOnly && !kPlatformHasSdma) {
        fprintf(stderr, "combine_host: policy=%s: refused: this %s build has no SDMA (CANN older than "
                        "9.0.0); use mte_only\n", a.policy == combine::Policy::DualPlaneSegment ? "dual_plane_segment" : "dual_plane",
                kPlatformName);
        return 1;
    }

#if COMBINE_USER_KERNEL
    if (a.dtype == combine::Dtype::BFloat16) {  // the entry contract's instances (host/user_kernel.h)
        fprintf(stderr, "combine_host: dtype=bfloat16_t: refused for your own kernel: its entry contract "
                        "instantiates combine_demo for int32_t and op::fp16_t only\n");
        return 1;
    }
#endif
    // Everything about the input is checked before any runtime is touched.
    RankCase rc;
    std::string error;
    if (!read_rank_case(a, &rc, &error)) {
        fprintf(stderr, "combine_host: PE %d: %s\n", a.pe_id, error.c_str());
        return 1;
    }

    CHECK_ACL(aclInit(nullptr));
    CHECK_ACL(aclrtSetDevice(a.pe_id % a.g_npus + a.first_npu));
    aclrtStream stream = nullptr;
    CHECK_ACL(aclrtCreateStream(&stream));

    const DriverWindow w = driver_window(a);
    aclshmemx_init_attr_t attr{};
    attr.my_pe = a.pe_id;
    attr.n_pes = a.pe_size;
    snprintf(attr.ip_port, sizeof attr.ip_port, "%s", a.ipport.c_str());
    // The window plus 1 MiB of slack, in 2 MiB units.
    attr.local_mem_size = (w.alloc + (1u << 20) + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    // data_op_engine_type_t is an enum: MTE | SDMA is an int and must be cast back.
    attr.option_attr.data_op_engine_type = static_cast<data_op_engine_type_t>(COMBINE_DATA_OP_ENGINES);
    if (aclshmemx_init_attr(ACLSHMEMX_INIT_WITH_DEFAULT, &attr) != 0) {
        fprintf(stderr, "combine_host: PE %d: aclshmemx_init_attr failed (ipport %s)\n", a.pe_id, a.ipport.c_str());
        return 5;
    }
    // The slots are 64 B lines (kStatusSlotBytes): aclshmem_malloc guarantees only 16 B.
    uint8_t* window = static_cast<uint8_t*>(aclshmem_align(combine::kStatusSlotBytes, w.alloc));
    if (window == nullptr) {
        fprintf(stderr, "combine_host: PE %d: aclshmem_align(%u, %llu) failed\n", a.pe_id, combine::kStatusSlotBytes,
                (unsigned long long)w.alloc);
        platform_abort_peers();
        return 5;
    }
    CHECK_ACL(aclrtMemset(window, w.alloc, 0, w.alloc));
    const uint64_t status_bytes = (w.positions_off ? w.positions_off : w.total) - w.status_off;
    platform_label_window(window, w.payload_bytes, w.stride, window + w.status_off, status_bytes, w.status_slot,
                          w.flag_bytes, w.row_bytes);
    if (w.positions_off)  // the layout by expert: status slot -> payload row, and the bases' inbox
        platform_label_layout(window + w.positions_off, window + w.inbox_off, uint64_t(a.pe_size) * w.inbox_stride,
                              w.inbox_stride);

    const size_t x_out_bytes = size_t(a.bs) * a.h * a.elem_bytes();
    // expand_x keeps its full [pe_size*bs*topk, h] shape on the device; only the used rows are filled.
    uint8_t* d_expand_x = nullptr;
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&d_expand_x), a.capacity_rows() * a.h * a.elem_bytes(),
                          ACL_MEM_MALLOC_HUGE_FIRST));
    if (!rc.expand_x.empty())
        CHECK_ACL(aclrtMemcpy(d_expand_x, rc.expand_x.size(), rc.expand_x.data(), rc.expand_x.size(),
                              ACL_MEMCPY_HOST_TO_DEVICE));
    uint8_t* d_assist = static_cast<uint8_t*>(device_copy_of(rc.assist_info.data(), rc.assist_info.size() * 4));
    uint8_t* d_counts = static_cast<uint8_t*>(device_copy_of(rc.ep_recv_count.data(), rc.ep_recv_count.size() * 4));
    uint8_t* d_ids = static_cast<uint8_t*>(device_copy_of(rc.expert_ids.data(), rc.expert_ids.size() * 4));
    uint8_t* d_scales = static_cast<uint8_t*>(device_copy_of(rc.expert_scales.data(), rc.expert_scales.size() * 4));
    uint8_t* d_x_out = nullptr;
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&d_x_out), x_out_bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    if (!d_expand_x || !d_assist || !d_counts || !d_ids || !d_scales) {
        fprintf(stderr, "combine_host: PE %d: device allocation or copy of the case failed\n", a.pe_id);
        platform_abort_peers();
        return 5;
    }
    // x_out starts as garbage (NaN in float16, -1 in int32): every element must be written.
    CHECK_ACL(aclrtMemset(d_x_out, x_out_bytes, 0xFF, x_out_bytes));
    platform_label_output(d_x_out, x_out_bytes, uint64_t(a.h) * a.elem_bytes());
    timed_barrier_all(1.25 * wait_timeout_s(), "before the first launch");  // every window is zeroed before anyone sends

    int64_t aiv_cores = 0;
    CHECK_ACL(aclrtGetDeviceInfo(uint32_t(a.pe_id % a.g_npus + a.first_npu), ACL_DEV_ATTR_VECTOR_CORE_NUM, &aiv_cores));
    if (aiv_cores < 1) {
        fprintf(stderr, "combine_host: PE %d: the device reports %lld vector cores\n", a.pe_id, (long long)aiv_cores);
        platform_abort_peers();
        return 5;
    }
#if COMBINE_USER_KERNEL
    // As the reference's driver launches it: one core per source rank (the kernel's core c serves rank c).
    const uint32_t block_dim = uint32_t(a.pe_size);
    a.ub_kb = combine::kUserUbKb;
#else
    if (a.cores_per_rank > uint64_t(aiv_cores)) {
        fprintf(stderr, "combine_host: cores_per_rank=%u: must be in [1, %lld] (the AIV cores of %s)\n",
                a.cores_per_rank, (long long)aiv_cores, aclrtGetSocName());
        platform_abort_peers();
        return 1;
    }
    const uint32_t block_dim = combine::launch_block_dim(uint32_t(a.pe_size), uint32_t(aiv_cores), a.cores_per_rank);
#endif
    // Every wait is bounded: a core's wait for one flag word (in system cycles, at the SoC's
    // rate), the stream (twice that, plus the kernel's own work), the barrier of all PEs.
    const double timeout_s = wait_timeout_s();
    const double cyc_per_us = cycles_per_us(aclrtGetSocName());
    const uint64_t wait_budget = uint64_t(timeout_s * 1e6 * cyc_per_us);
    const int32_t stream_timeout_ms = int32_t(std::min(2.0 * timeout_s + 30.0, 2.0e6) * 1000.0);
    const size_t diag_bytes = size_t(block_dim) * combine::kDiagRecordBytes;
    uint8_t* d_diag = nullptr;
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&d_diag), diag_bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMemset(d_diag, diag_bytes, 0, diag_bytes));
    std::vector<uint8_t> diag(diag_bytes);
    bool timed_out = false;
    // `timed`: a launch of the profiled loops (your kernel records its frames only when told so).
    auto launch = [&](bool timed) {
#if COMBINE_USER_KERNEL
        (void)wait_budget;  // your kernel bounds no wait of its own: the timed stream sync does
        combine::launch_user_kernel(a.dtype == combine::Dtype::Float16, block_dim, stream, util_get_ffts_config(),
                                    d_expand_x, reinterpret_cast<int32_t*>(d_assist), reinterpret_cast<int32_t*>(d_counts),
                                    reinterpret_cast<int32_t*>(d_ids), reinterpret_cast<float*>(d_scales), d_x_out,
                                    window, int(a.bs), int(a.h), int(a.topk), int(a.experts()),
                                    timed && a.perf ? 1 : 0);
#else
        (void)timed;
        combine::launch_combine(a.dtype, block_dim, stream, d_expand_x, d_assist, d_counts, d_ids, d_scales, d_x_out,
                                window, d_diag, a.bs, a.h, a.topk, a.expert_per_pe, a.policy, a.min_sdma_bytes,
                                wait_budget, a.cores_per_rank);
#endif
        aclError e = aclrtSynchronizeStreamWithTimeout(stream, stream_timeout_ms);
        if (e == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) {
            fprintf(stderr, "combine_host: PE %d: timed out after %.1f s waiting for the kernel "
                            "(aclrtSynchronizeStreamWithTimeout): a core is stuck where the kernel bounds no wait\n",
                    a.pe_id, stream_timeout_ms / 1000.0);
            timed_out = true;
            return ACL_SUCCESS;
        }
        if (e == ACL_SUCCESS) e = aclrtMemcpy(diag.data(), diag_bytes, d_diag, diag_bytes, ACL_MEMCPY_DEVICE_TO_HOST);
        if (e == ACL_SUCCESS && report_wait_timeouts(diag.data(), block_dim, a, cyc_per_us, aiv_cores) > 0) {
            timed_out = true;
            return ACL_SUCCESS;
        }
        // No PE refills a window slot before its owner has read it: every PE's kernel ends
        // before anyone launches the next (an AIV-only kernel cannot barrier PEs itself).
        if (e == ACL_SUCCESS) timed_barrier_all(1.25 * timeout_s, "after a launch");
        return e;
    };
    // Repeated-call check (COMBINE_HOST_REPEAT_CHECK=1): call i sends rows filled with i+1
    // and its x_out must be (i+1) weighted by the scales, never a value left by a call before.
    const bool repeat_check = getenv("COMBINE_HOST_REPEAT_CHECK") && atoi(getenv("COMBINE_HOST_REPEAT_CHECK")) == 1;
    uint32_t call = 0;
    uint64_t repeat_bad = 0;
    auto checked_launch = [&](bool timed) -> aclError {
        if (repeat_check) {
            std::vector<uint8_t> filled(rc.expand_x.size());
            fill_rows(a, double(call + 1), filled.data(), filled.size());
            const aclError e = aclrtMemcpy(d_expand_x, filled.size(), filled.data(), filled.size(),
                                           ACL_MEMCPY_HOST_TO_DEVICE);
            if (e != ACL_SUCCESS) return e;
        }
        const aclError e = launch(timed);
        if (e == ACL_SUCCESS && repeat_check && !timed_out) {
            std::vector<uint8_t> got(x_out_bytes), want(x_out_bytes);
            const aclError c = aclrtMemcpy(got.data(), x_out_bytes, d_x_out, x_out_bytes, ACL_MEMCPY_DEVICE_TO_HOST);
            if (c != ACL_SUCCESS) return c;
            expected_constant_x_out(a, rc, double(call + 1), want.data());
            std::string detail;
            const uint64_t bad = count_mismatches(a, got.data(), want.data(), &detail);
            if (bad) {
                fprintf(stderr, "combine_host: PE %d: call %u (rows filled with %u): %llu elements wrong; first: %s\n",
                        a.pe_id, call, call + 1, (unsigned long long)bad, detail.c_str());
                repeat_bad += bad;
            }
        }
        ++call;
        return e;
    };
    // A core that gave up waiting: its PE stops here, telling the others (the twin's stop at once;
    // on the NPU their own bounded waits and barrier watchdogs end them).
    auto give_up = [&]() {
        platform_abort_peers();
        return kTimedOutExit;
    };
    for (uint32_t i = 0; i < a.warmup; ++i) {
        CHECK_ACL(checked_launch(false));
        if (timed_out) return give_up();
    }
    aclshmem_prof_pe_t* prof = nullptr;
    aclshmemx_get_prof(&prof, false);
    const FrameSnapshot full0 = snapshot_frame(prof, combine::kProfFrameFullOp, block_dim);
    const FrameSnapshot comm0 = snapshot_frame(prof, combine::kProfFrameCommOnly, block_dim);
    for (uint32_t i = 0; i < a.loops; ++i) {
        CHECK_ACL(checked_launch(true));
        if (timed_out) return give_up();
    }
    aclshmemx_get_prof(&prof, false);

    std::string out_dir = a.case_root + "/output";
    mkdir(out_dir.c_str(), 0755);
    std::vector<uint8_t> x_out(x_out_bytes);
    CHECK_ACL(aclrtMemcpy(x_out.data(), x_out_bytes, d_x_out, x_out_bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    int rc_exit = 0;
    if (!write_file(out_dir + "/x_out_" + std::to_string(a.pe_id) + ".bin", x_out.data(), x_out_bytes, &error)) {
        fprintf(stderr, "combine_host: PE %d: %s\n", a.pe_id, error.c_str());
        rc_exit = 5;
    }
    std::string detail;
    const uint64_t bad =
        repeat_check ? repeat_bad : count_mismatches(a, x_out.data(), rc.golden_x_out.data(), &detail);
    if (bad != 0) {
        if (!repeat_check)
            fprintf(stderr, "combine_host: PE %d: x_out mismatch: %llu of %llu elements differ from golden; first: %s\n",
                    a.pe_id, (unsigned long long)bad, (unsigned long long)(uint64_t(a.bs) * a.h), detail.c_str());
        rc_exit = rc_exit ? rc_exit : 2;
    }

    if (a.perf && prof != nullptr && prof_pe_from_env() == a.pe_id) {
        const double cpu = cyc_per_us;
        const FrameSnapshot full1 = snapshot_frame(prof, combine::kProfFrameFullOp, block_dim);
        const FrameSnapshot comm1 = snapshot_frame(prof, combine::kProfFrameCommOnly, block_dim);
        if (!append_perf_row(a, "full_op", full0, full1, cpu, block_dim, &error) ||
            !append_perf_row(a, "comm_only", comm0, comm1, cpu, block_dim, &error)) {
            fprintf(stderr, "combine_host: PE %d: %s\n", a.pe_id, error.c_str());
            rc_exit = rc_exit ? rc_exit : 5;
        }
    }
    if (!a.csv.empty() && !platform_dump_counters(counters_path(a.csv))) {
        fprintf(stderr, "combine_host: PE %d: cannot write %s\n", a.pe_id, counters_path(a.csv).c_str());
        rc_exit = rc_exit ? rc_exit : 5;
    }

    aclrtFree(d_expand_x);
    aclrtFree(d_assist);
    aclrtFree(d_counts);
    aclrtFree(d_ids);
    aclrtFree(d_scales);
    aclrtFree(d_x_out);
    aclrtFree(d_diag);
    aclshmem_free(window);
    aclshmem_finalize();
    aclrtDestroyStream(stream);
    aclrtResetDevice(a.pe_id % a.g_npus + a.first_npu);
    aclFinalize();
    if (rc_exit == 0) printf("combine_host: PE %d: x_out matches golden (%u tokens x %u)\n", a.pe_id, a.bs, a.h);
    return rc_exit;
}
