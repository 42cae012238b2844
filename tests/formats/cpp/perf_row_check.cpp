// Drives host/perf_csv.cpp's append_perf_row with hand-made profiling frames, so that a test can
// compare the bytes it writes with a row computed by hand (docs/formats.md#3-perf-csv).
// Usage: perf_row_check <csv path>; appends a comm_only row (4 cores, core 1 idle) and a
// full_op row (every core idle) for PE 1 of a 4-PE case, bs 8, h 16, topk 2, 2 experts per PE.
#include <cstdio>
#include <string>

#include "perf_csv.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: perf_row_check <csv path>\n");
        return 1;
    }
    HostArgs a;
    a.pe_size = 4;
    a.pe_id = 1;
    a.dtype = combine::Dtype::Int32;
    a.dtype_name = "int32_t";
    a.bs = 8;
    a.h = 16;
    a.topk = 2;
    a.expert_per_pe = 2;
    a.perf = true;
    a.warmup = 5;
    a.loops = 50;
    a.csv = argv[1];
    a.case_id = "shape_8_16_2_8_4";
    const uint32_t blocks = 4;
    FrameSnapshot before, after;
    before.cycles = {100, 7, 0, 0};
    before.ccount = {1, 4, 0, 0};
    // core 0: 6654 cycles over 2 frames; core 1: no new frame (left out); core 2: 26034 over 10;
    // core 3: 1 over 3 (0.000333 us: rounds to 0.0003).
    after.cycles = {100 + 6654, 7, 26034, 1};
    after.ccount = {1 + 2, 4, 10, 3};
    std::string error;
    if (!append_perf_row(a, "comm_only", before, after, 1000.0, blocks, &error) ||
        !append_perf_row(a, "full_op", before, before, 1000.0, blocks, &error)) {
        fprintf(stderr, "%s\n", error.c_str());
        return 1;
    }
    return 0;
}
