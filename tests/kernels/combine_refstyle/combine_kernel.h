// A test kernel folder written the way SHMEM's combine examples are (tests/run/test_kernel_source.py):
// this header declares the entry the lab's driver calls, the reference's combine_demo<T>
// (docs/own-kernel.md#2-the-entry-contract). Written for this project's tests.
// combine-lab rule: classic (every row goes by MTE)
#ifndef REFSTYLE_COMBINE_KERNEL_H
#define REFSTYLE_COMBINE_KERNEL_H

#include <cstdint>

template <class T>
void combine_demo(uint32_t block_dim, void *stream, uint64_t fftsAddr, uint8_t *expand_x, int32_t *assist_info,
                  int32_t *recv_count, int32_t *expert_ids, float *expert_scales, uint8_t *x_out, uint8_t *window,
                  int bs, int h, int k, int moe_expert_num, int magic, int perf_mode = 0, int full_frame_id = 0,
                  int comm_frame_id = 1, int warmup_count = 0, int loop_count = 1);

#endif
