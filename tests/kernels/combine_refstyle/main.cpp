// The test kernel folder's own host driver, in the style of SHMEM's example drivers
// (tests/run/test_kernel_source.py builds it with `combine-lab build --kernel-source DIR --main`):
//   combine_refstyle pe_size pe_id ipport dtype bs h topk expert_per_pe case_root loops
// reads golden/<case>/rank_<pe>/ under case_root, runs `loops` profiled launches, checks x_out
// against golden (int32 exact, float16 within 1e-2, as op::fp16_t host values), writes
// output/x_out_<pe>.bin and prints the comm_only and full_op frames in microseconds, converted
// with the cycle rate the SoC's name implies (50 per us on A2/A3, 1000 on Ascend950), beside the
// host's wall-clock time per launch. Written for this project's tests.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "acl/acl.h"
#include "opdev/fp16_t.h"
#include "runtime/rt_ffts.h"
#include "shmem.h"

#include "combine_kernel.h"

namespace {

bool Slurp(const std::string &path, void *dst, size_t bytes)
{
    std::ifstream f(path, std::ios::binary);
    return f.read(static_cast<char *>(dst), std::streamsize(bytes)).good();
}

double CyclesPerUs()
{
    const char *soc = aclrtGetSocName();
    return soc != nullptr && std::string(soc).find("Ascend950") != std::string::npos ? 1000.0 : 50.0;
}

double FrameUs(aclshmem_prof_pe_t *prof, int frame, int blocks)
{
    double worst = 0.0;
    for (int b = 0; prof != nullptr && b < blocks && b < ACLSHMEM_CYCLE_PROF_MAX_BLOCK; ++b) {
        const aclshmem_prof_block_t &p = prof->block_prof[b];
        if (p.ccount[frame] > 0) {
            worst = std::max(worst, double(p.cycles[frame]) / double(p.ccount[frame]) / CyclesPerUs());
        }
    }
    return worst;
}

template <typename T>
bool Same(T a, T b)
{
    return static_cast<float>(a) == static_cast<float>(b);
}
template <>
bool Same<op::fp16_t>(op::fp16_t a, op::fp16_t b)
{
    return std::fabs(static_cast<float>(a) - static_cast<float>(b)) <= 1.0e-2F;
}

template <typename T>
int Run(int pes, int pe, int bs, int h, int k, int epp, const std::string &root, int loops)
{
    const int experts = pes * epp;
    const std::string rank = root + "/golden/shape_" + std::to_string(bs) + "_" + std::to_string(h) + "_" +
                             std::to_string(k) + "_" + std::to_string(experts) + "_" + std::to_string(pes) +
                             "/rank_" + std::to_string(pe);
    const size_t rows = size_t(pes) * bs * k;
    std::vector<T> expand_x(rows * h), x_out(size_t(bs) * h), golden(size_t(bs) * h);
    std::vector<int32_t> assist(rows * 3), counts(size_t(epp) * pes), ids(size_t(bs) * k);
    std::vector<float> scales(size_t(bs) * k);
    std::ifstream probe(rank + "/expand_x.bin", std::ios::binary | std::ios::ate);
    const size_t used = probe ? size_t(probe.tellg()) : 0;
    if (!Slurp(rank + "/expand_x.bin", expand_x.data(), used) ||
        !Slurp(rank + "/ep_recv_count.bin", counts.data(), counts.size() * 4) ||
        !Slurp(rank + "/expert_ids.bin", ids.data(), ids.size() * 4) ||
        !Slurp(rank + "/expert_scales.bin", scales.data(), scales.size() * 4) ||
        !Slurp(rank + "/golden_x_out.bin", golden.data(), golden.size() * sizeof(T))) {
        fprintf(stderr, "[refstyle] pe %d: cannot read %s\n", pe, rank.c_str());
        return 1;
    }
    std::ifstream a(rank + "/assist_info.bin", std::ios::binary | std::ios::ate);
    const size_t assist_bytes = a ? size_t(a.tellg()) : 0;
    Slurp(rank + "/assist_info.bin", assist.data(), assist_bytes);

    void *d_x = nullptr, *d_assist = nullptr, *d_counts = nullptr, *d_ids = nullptr, *d_scales = nullptr;
    void *d_out = nullptr, *host = nullptr;
    aclrtStream stream = nullptr;
    if (aclrtCreateStream(&stream) != ACL_ERROR_NONE || aclrtMallocHost(&host, 64) != ACL_ERROR_NONE ||
        aclrtMalloc(&d_x, expand_x.size() * sizeof(T), ACL_MEM_MALLOC_HUGE_FIRST) != ACL_ERROR_NONE ||
        aclrtMalloc(&d_assist, assist.size() * 4, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_ERROR_NONE ||
        aclrtMalloc(&d_counts, counts.size() * 4, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_ERROR_NONE ||
        aclrtMalloc(&d_ids, ids.size() * 4, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_ERROR_NONE ||
        aclrtMalloc(&d_scales, scales.size() * 4, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_ERROR_NONE ||
        aclrtMalloc(&d_out, x_out.size() * sizeof(T), ACL_MEM_MALLOC_HUGE_FIRST) != ACL_ERROR_NONE) {
        fprintf(stderr, "[refstyle] pe %d: allocation failed\n", pe);
        return 1;
    }
    aclrtMemcpy(d_x, expand_x.size() * sizeof(T), expand_x.data(), expand_x.size() * sizeof(T),
                ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtMemcpy(d_assist, assist.size() * 4, assist.data(), assist.size() * 4, ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtMemcpy(d_counts, counts.size() * 4, counts.data(), counts.size() * 4, ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtMemcpy(d_ids, ids.size() * 4, ids.data(), ids.size() * 4, ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtMemcpy(d_scales, scales.size() * 4, scales.data(), scales.size() * 4, ACL_MEMCPY_HOST_TO_DEVICE);
    const size_t stride = (size_t(h) * sizeof(T) + 31) / 32 * 32;
    const size_t window_bytes = size_t(bs) * k * (stride + 32);
    uint8_t *window = static_cast<uint8_t *>(aclshmem_malloc(window_bytes));
    aclrtMemset(window, window_bytes, 0, window_bytes);
    aclshmem_barrier_all();
    const uint64_t ffts = util_get_ffts_config();
    double wall_us = 0.0;
    for (int i = 0; i < loops; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        combine_demo<T>(uint32_t(pes), stream, ffts, static_cast<uint8_t *>(d_x), static_cast<int32_t *>(d_assist),
                        static_cast<int32_t *>(d_counts), static_cast<int32_t *>(d_ids),
                        static_cast<float *>(d_scales), static_cast<uint8_t *>(d_out), window, bs, h, k, experts,
                        1024, 1, 0, 1, 0, 1);
        aclrtSynchronizeStream(stream);
        wall_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        aclshmem_barrier_all();
    }
    aclrtMemcpy(x_out.data(), x_out.size() * sizeof(T), d_out, x_out.size() * sizeof(T), ACL_MEMCPY_DEVICE_TO_HOST);
    mkdir((root + "/output").c_str(), 0755);
    std::ofstream(root + "/output/x_out_" + std::to_string(pe) + ".bin", std::ios::binary)
        .write(reinterpret_cast<const char *>(x_out.data()), std::streamsize(x_out.size() * sizeof(T)));
    size_t bad = 0;
    for (size_t i = 0; i < x_out.size(); ++i) {
        bad += Same(x_out[i], golden[i]) ? 0 : 1;
    }
    aclshmem_prof_pe_t *prof = nullptr;
    aclshmemx_get_prof(&prof, false);
    printf("[refstyle] pe %d: %s; comm_only %.3f us, full_op %.3f us (frames); wall %.3f us per launch\n", pe,
           bad ? "x_out WRONG" : "x_out correct", FrameUs(prof, 1, pes), FrameUs(prof, 0, pes), wall_us / loops);
    aclshmem_free(window);
    aclrtFree(d_x);
    aclrtFree(d_assist);
    aclrtFree(d_counts);
    aclrtFree(d_ids);
    aclrtFree(d_scales);
    aclrtFree(d_out);
    aclrtFreeHost(host);
    aclrtDestroyStream(stream);
    return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv)
{
    if (argc != 11) {
        fprintf(stderr, "usage: combine_refstyle pe_size pe_id ipport dtype bs h topk expert_per_pe case_root loops\n");
        return 1;
    }
    const int pes = atoi(argv[1]), pe = atoi(argv[2]);
    aclshmemx_uniqueid_t uid{};
    aclshmemx_init_attr_t attr;
    attr.my_pe = pe;
    attr.n_pes = pes;
    snprintf(attr.ip_port, ACLSHMEM_MAX_IP_PORT_LEN, "%s", argv[3]);
    attr.local_mem_size = 256UL << 20;
    attr.option_attr.data_op_engine_type = static_cast<data_op_engine_type_t>(ACLSHMEM_DATA_OP_MTE);
    attr.comm_args = &uid;
    if (aclInit(nullptr) != ACL_ERROR_NONE || aclrtSetDevice(pe) != ACL_ERROR_NONE ||
        aclshmemx_init_attr(ACLSHMEMX_INIT_WITH_DEFAULT, &attr) != ACLSHMEM_SUCCESS) {
        fprintf(stderr, "[refstyle] pe %d: init failed\n", pe);
        return 1;
    }
    const std::string dtype = argv[4];
    const int bs = atoi(argv[5]), h = atoi(argv[6]), k = atoi(argv[7]), epp = atoi(argv[8]), loops = atoi(argv[10]);
    const int status = dtype == "float16_t" ? Run<op::fp16_t>(pes, pe, bs, h, k, epp, argv[9], loops)
                                            : Run<int32_t>(pes, pe, bs, h, k, epp, argv[9], loops);
    aclshmem_finalize();
    aclrtResetDevice(pe);
    aclFinalize();
    return status;
}
