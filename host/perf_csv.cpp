#include "perf_csv.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/stat.h>

FrameSnapshot snapshot_frame(const aclshmem_prof_pe_t* prof, uint32_t frame, uint32_t blocks) {
    FrameSnapshot s;
    s.cycles.assign(blocks, 0);
    s.ccount.assign(blocks, 0);
    if (prof == nullptr) return s;
    for (uint32_t b = 0; b < blocks && b < ACLSHMEM_CYCLE_PROF_MAX_BLOCK; ++b) {
        s.cycles[b] = prof->block_prof[b].cycles[frame];
        s.ccount[b] = prof->block_prof[b].ccount[frame];
    }
    return s;
}

double cycles_per_us(const char* soc) {
    const std::string name = soc ? soc : "";
    if (name.find("Ascend950") != std::string::npos) return 1000.0;
    return 50.0;
}

bool append_perf_row(const HostArgs& a, const char* metric, const FrameSnapshot& before, const FrameSnapshot& after,
                     double cyc_per_us, uint32_t blocks, std::string* error) {
    // One time per core that recorded the frame, in core order; a core whose frame count is 0
    // did not run it and is left out, not written as 0 (docs/formats.md#3-perf-csv).
    std::vector<double> core_us;
    for (uint32_t b = 0; b < blocks; ++b) {
        const int64_t n = after.ccount[b] - before.ccount[b];
        if (n > 0) core_us.push_back(double(after.cycles[b] - before.cycles[b]) / double(n) / cyc_per_us);
    }
    const double core_max = core_us.empty() ? 0.0 : *std::max_element(core_us.begin(), core_us.end());
    const uint64_t data = uint64_t(a.bs) * a.topk * a.h * a.elem_bytes();
    const uint64_t global = data * uint64_t(a.pe_size);
    // GiB/s from bytes per microsecond: bytes/us * 1e6 / 2^30.
    auto gibps = [core_max](uint64_t bytes) { return core_max > 0 ? double(bytes) / core_max * 1e6 / 1073741824.0 : 0.0; };

    // The header goes once, when the file is new (or empty); later runs append rows.
    struct stat st {};
    const bool need_header = stat(a.csv.c_str(), &st) != 0 || st.st_size == 0;
    FILE* f = fopen(a.csv.c_str(), "a");
    if (!f) {
        *error = a.csv + ": cannot open for append (" + strerror(errno) + ")";
        return false;
    }
    if (need_header) {
        fprintf(f, "DataSize/B,Npus,Blocks,UBsize/KB,Bandwidth/GB/s,CoreMaxTime/us,Metric,GlobalDataSize/B,"
                   "PerPeBandwidth/GB/s,BS,H,TopK,ExpertPerPe,Dtype,Warmup,Loops,ProfPe,CaseId,SingleCoreTime/us\n");
    }
    // Bandwidth: all PEs' data over this PE's slowest core; PerPeBandwidth: this PE's data.
    // UBsize/KB: the MTE staging buffer the kernel runs with (HostArgs::ub_kb); every float with 4 decimals.
    fprintf(f, "%llu,%d,%u,%u,%.4f,%.4f,%s,%llu,%.4f,%u,%u,%u,%u,%s,%u,%u,%d,%s", (unsigned long long)data, a.pe_size,
            blocks, a.ub_kb, gibps(global), core_max, metric, (unsigned long long)global,
            gibps(data), a.bs, a.h, a.topk, a.expert_per_pe, a.dtype_name.c_str(), a.warmup, a.loops, a.pe_id,
            a.case_id.c_str());
    for (double us : core_us) fprintf(f, ",%.4f", us);
    fprintf(f, "\n");
    if (fclose(f) != 0) {
        *error = a.csv + ": write failed (" + strerror(errno) + ")";
        return false;
    }
    return true;
}
