// Command line of the combine host driver (one process per PE).
#pragma once

#include <cstdint>
#include <string>

#include "combine_kernel.h"

struct HostArgs {
    int pe_size = 0, pe_id = 0;
    std::string ipport;
    int g_npus = 0, first_pe = 0, first_npu = 0;
    combine::Dtype dtype = combine::Dtype::Int32;
    std::string dtype_name;
    uint32_t bs = 0, h = 0, topk = 0, expert_per_pe = 0;
    bool perf = false;
    uint32_t warmup = 0, loops = 1;
    std::string csv, case_id;
    combine::Policy policy = combine::Policy::DualPlane;
    uint64_t min_sdma_bytes = 2ull * 1024 * 1024;
    std::string case_root = ".";
    uint32_t cores_per_rank = 1;  // AIV cores per source rank (docs/variants.md#2-cores-per-source-rank)
    uint32_t ub_kb = combine::kUbMteStageBytes / 1024;  // UBsize/KB of the perf rows

    uint32_t elem_bytes() const { return dtype == combine::Dtype::Int32 ? 4u : 2u; }
    uint32_t experts() const { return uint32_t(pe_size) * expert_per_pe; }
    uint64_t capacity_rows() const { return uint64_t(pe_size) * bs * topk; }
};

extern const char* kHostUsage;

// Parse argv; on bad input print "combine_host: <arg>=<value>: <what is allowed>" and return false.
bool parse_host_args(int argc, char** argv, HostArgs* out);
