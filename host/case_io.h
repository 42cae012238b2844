// Reading one rank's case files (docs/formats.md#1-case-files), writing x_out, checking it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host_args.h"

struct RankCase {
    std::vector<uint8_t> expand_x;       // [used_rows, h] T: the rows ep_recv_count covers
    uint64_t used_rows = 0;              // ep_recv_count[last]; the file holds pe_size*bs*topk rows
    std::vector<int32_t> assist_info;    // [pe_size*bs*topk, 3]
    std::vector<int32_t> ep_recv_count;  // [expert_per_pe*pe_size], cumulative
    std::vector<int32_t> expert_ids;     // [bs, topk]; ids outside [0, E) are masked slots
    std::vector<float> expert_scales;    // [bs, topk]
    std::vector<uint8_t> golden_x_out;   // [bs, h] T
};

std::string rank_dir(const HostArgs& a);

// Reads and validates every file; on failure returns false with `error` naming the file,
// the index and what was expected.
bool read_rank_case(const HostArgs& a, RankCase* rc, std::string* error);

bool write_file(const std::string& path, const void* data, size_t bytes, std::string* error);

// Fills `bytes` of T elements with `value` (repeated-call check).
void fill_rows(const HostArgs& a, double value, uint8_t* out, size_t bytes);

// x_out when every received row holds `value`: per token, float32 acc = acc + value * scale
// over valid slots in topk order, cast to T.
void expected_constant_x_out(const HostArgs& a, const RankCase& rc, double value, uint8_t* out);

// Bit-exact for both dtypes (a NaN never passes): the kernel and the golden both reduce in
// float32 in topk order and cast once. (The reference tools' own check, reading the
// x_out_{r}.bin we write, allows 1e-2 for float16; docs/protocol.md#3-reference-data-and-the-check.)
// Returns the number of mismatching elements; the first one goes to `detail`.
uint64_t count_mismatches(const HostArgs& a, const uint8_t* x_out, const uint8_t* golden, std::string* detail);
