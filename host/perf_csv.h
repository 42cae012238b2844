// The perf CSV rows (docs/formats.md#3-perf-csv) from SHMEM profiling frames.
#pragma once

#include <string>
#include <vector>

#include "shmem.h"
#include "host_args.h"

// Per-core cycles and counts of one frame, copied out of aclshmem_prof_pe_t.
struct FrameSnapshot {
    std::vector<int64_t> cycles, ccount;
};
FrameSnapshot snapshot_frame(const aclshmem_prof_pe_t* prof, uint32_t frame, uint32_t blocks);

// 50 cycles/us on A2/A3 (and on the twin, which names the SoC it models), 1000 on Ascend950.
double cycles_per_us(const char* soc_name);

// Appends one row (Metric `metric`) built from the difference `after - before` in the format of
// docs/formats.md#3-perf-csv: the 19-name header first when the file is new or empty; every float
// with 4 decimals; one time per core whose frame count is not 0, after CaseId; UBsize/KB is
// a.ub_kb (kUbMteStageBytes / 1024 for the lab's kernel). Returns false with `error` set.
bool append_perf_row(const HostArgs& a, const char* metric, const FrameSnapshot& before, const FrameSnapshot& after,
                     double cyc_per_us, uint32_t blocks, std::string* error);
