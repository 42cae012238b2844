#include "host_args.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

const char* kHostUsage =
    "usage: combine_host pe_size pe_id ipport g_npus first_pe first_npu dtype bs h topk expert_per_pe "
    "perf warmup loops csv case_id [policy [min_sdma_bytes [case_root [cores_per_rank]]]]\n"
    "  dtype: int32_t | float16_t | bfloat16_t; perf: 0 | 1;\n"
    "  policy: mte_only | dual_plane | dual_plane_segment (default dual_plane; docs/variants.md);\n"
    "  min_sdma_bytes: default 2097152; case_root: folder holding golden/<case_id>/ and output/ (default .);\n"
    "  cores_per_rank: AIV cores per source rank, 1 (default) to the SoC's AIV cores, at most 48\n";

static bool parse_u64(const char* name, const char* text, uint64_t lo, uint64_t hi, uint64_t* out) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "combine_host: %s=%s: must be an integer in [%llu, %llu]\n", name, text,
                (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = v;
    return true;
}

template <typename T>
static bool parse_int(const char* name, const char* text, uint64_t lo, uint64_t hi, T* out) {
    uint64_t v = 0;
    if (!parse_u64(name, text, lo, hi, &v)) return false;
    *out = T(v);
    return true;
}

bool parse_host_args(int argc, char** argv, HostArgs* a) {
    if (argc < 17 || argc > 21) {
        fprintf(stderr, "combine_host: got %d arguments, need 16 to 20\n%s", argc - 1, kHostUsage);
        return false;
    }
    const uint64_t k32 = 0x7fffffff;
    bool ok = parse_int("pe_size", argv[1], 1, 256, &a->pe_size) &&
              parse_int("pe_id", argv[2], 0, uint64_t(a->pe_size - 1), &a->pe_id);
    if (!ok) return false;
    a->ipport = argv[3];
    ok = parse_int("g_npus", argv[4], 1, 4096, &a->g_npus) && parse_int("first_pe", argv[5], 0, k32, &a->first_pe) &&
         parse_int("first_npu", argv[6], 0, 4096, &a->first_npu);
    if (!ok) return false;
    a->dtype_name = argv[7];
    if (a->dtype_name == "int32_t") {
        a->dtype = combine::Dtype::Int32;
    } else if (a->dtype_name == "float16_t") {
        a->dtype = combine::Dtype::Float16;
    } else if (a->dtype_name == "bfloat16_t") {
        a->dtype = combine::Dtype::BFloat16;
    } else {
        fprintf(stderr, "combine_host: dtype=%s: must be int32_t, float16_t or bfloat16_t\n", argv[7]);
        return false;
    }
    ok = parse_int("bs", argv[8], 1, k32, &a->bs) && parse_int("h", argv[9], 1, k32, &a->h) &&
         parse_int("topk", argv[10], 1, k32, &a->topk) && parse_int("expert_per_pe", argv[11], 1, k32, &a->expert_per_pe);
    if (!ok) return false;
    int perf = 0;
    ok = parse_int("perf", argv[12], 0, 1, &perf) && parse_int("warmup", argv[13], 0, 1000000, &a->warmup) &&
         parse_int("loops", argv[14], 1, 1000000, &a->loops);
    if (!ok) return false;
    a->perf = perf != 0;
    a->csv = argv[15];
    a->case_id = argv[16];
    if (argc > 17) {
        const std::string p = argv[17];
        if (p == "mte_only" || p == "classic") {
            a->policy = combine::Policy::MteOnly;
        } else if (p == "dual_plane" || p == "doubleplane") {
            a->policy = combine::Policy::DualPlane;
        } else if (p == "dual_plane_segment") {
            a->policy = combine::Policy::DualPlaneSegment;
        } else {
            fprintf(stderr, "combine_host: policy=%s: must be mte_only, dual_plane or dual_plane_segment\n", argv[17]);
            return false;
        }
    }
    if (argc > 18 && !parse_u64("min_sdma_bytes", argv[18], 0, ~0ull, &a->min_sdma_bytes)) return false;
    if (argc > 19) a->case_root = argv[19];
    // The SoC's own bound (its AIV cores) is checked once the device is known (combine_host.cpp).
    if (argc > 20 && !parse_int("cores_per_rank", argv[20], 1, combine::kMaxSdmaBlocks, &a->cores_per_rank)) return false;
    const uint64_t rows = a->capacity_rows();
    if (rows > k32 || rows * a->h > (1ull << 40)) {
        fprintf(stderr, "combine_host: pe_size*bs*topk=%llu rows of h=%u: too large (rows must fit int32)\n",
                (unsigned long long)rows, a->h);
        return false;
    }
    return true;
}
