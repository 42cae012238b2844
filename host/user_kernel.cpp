// The driver's one call into your own kernel (host/user_kernel.h): compiled against your folder's
// combine_kernel.h (and nothing of kernels/), so that its declaration of combine_demo is the one
// called, with the contract's argument types: a folder whose declaration differs fails here, at
// compile time, naming the argument.
#include "user_kernel.h"

#include "combine_kernel.h"  // yours: template <class T> void combine_demo(...)
#include "opdev/fp16_t.h"    // op::fp16_t, the host half your float16 instance takes

namespace combine {

void launch_user_kernel(bool float16, uint32_t block_dim, void* stream, uint64_t ffts, uint8_t* expand_x,
                        int32_t* assist_info, int32_t* ep_recv_count, int32_t* expert_ids, float* expert_scales,
                        uint8_t* x_out, uint8_t* window, int bs, int h, int k, int moe_expert_num, int perf_mode) {
    if (float16) {
        combine_demo<op::fp16_t>(block_dim, stream, ffts, expand_x, assist_info, ep_recv_count, expert_ids,
                                 expert_scales, x_out, window, bs, h, k, moe_expert_num, kUserMagic, perf_mode,
                                 kUserFullFrame, kUserCommFrame, 0, 1);
    } else {
        combine_demo<int32_t>(block_dim, stream, ffts, expand_x, assist_info, ep_recv_count, expert_ids,
                              expert_scales, x_out, window, bs, h, k, moe_expert_num, kUserMagic, perf_mode,
                              kUserFullFrame, kUserCommFrame, 0, 1);
    }
}

}  // namespace combine
