// Your own kernel (docs/own-kernel.md): a folder with a combine kernel written against SHMEM and
// Ascend C, built unchanged beside this driver (COMBINE_KERNEL_DIR, CMakeLists.txt and
// cmake/npu.cmake; COMBINE_USER_KERNEL=1). What the driver needs to know about such a kernel, and
// the one call into it; host/user_kernel.cpp, compiled against the folder's own combine_kernel.h,
// makes that call.
#pragma once

#include <cstdint>

namespace combine {

// The entry contract, the reference's (SHMEM examples/combine/*/combine_kernel.h):
//   template <class T> void combine_demo(uint32_t block_dim, void* stream, uint64_t fftsAddr,
//       uint8_t* expand_x, int32_t* assist_info_for_combine, int32_t* ep_recv_count,
//       int32_t* expert_ids, float* expert_scales, uint8_t* x_out, uint8_t* shmem_window,
//       int bs, int h, int k, int moe_expert_num, int magic, int perf_mode, int full_frame_id,
//       int comm_frame_id, int warmup_count, int loop_count);
// instantiated for T = int32_t and op::fp16_t. The driver launches it as the reference's driver
// does: block_dim = PEs (one core per source rank), magic 1024, perf_mode 1 in the timed launches
// of a profiled run (else 0), frames 0 (full_op) and 1 (comm_only), warmup_count 0, loop_count 1.
constexpr int kUserMagic = 1024;
constexpr int kUserFullFrame = 0;
constexpr int kUserCommFrame = 1;
// UBsize/KB of the perf rows: what the reference's driver writes (its kernel stages 190 KiB); the
// driver cannot see what a kernel stages.
constexpr uint32_t kUserUbKb = 190;

// The kernel's symmetric window, the reference's: bs*topk payload slots of align_up(h*sizeof(T), 32)
// bytes, then bs*topk status slots of 32 B (8 int32; ready value 1), right after the payload.
constexpr uint64_t kUserStatusSlotBytes = 32;
struct UserWindow {
    uint64_t slots, stride, status_off, total_bytes;
};
inline UserWindow user_window(uint32_t bs, uint32_t topk, uint32_t h, uint32_t elem_bytes) {
    UserWindow w{};
    w.slots = uint64_t(bs) * topk;
    w.stride = (uint64_t(h) * elem_bytes + 31) / 32 * 32;
    w.status_off = w.slots * w.stride;
    w.total_bytes = w.status_off + w.slots * kUserStatusSlotBytes;
    return w;
}

// combine_demo<int32_t> or combine_demo<op::fp16_t> with these arguments.
void launch_user_kernel(bool float16, uint32_t block_dim, void* stream, uint64_t ffts, uint8_t* expand_x,
                        int32_t* assist_info, int32_t* ep_recv_count, int32_t* expert_ids, float* expert_scales,
                        uint8_t* x_out, uint8_t* window, int bs, int h, int k, int moe_expert_num, int perf_mode);

}  // namespace combine
