// Host-visible interface of the combine kernel: window layout and the launch wrapper.
// Layout and protocol: shared/docs/combine-facts.md sections 2, 4 and 5.
#pragma once

#include <cstddef>
#include <cstdint>

namespace combine {

enum class Dtype : uint32_t { Int32 = 0, Float16 = 1 };
enum class Policy : uint32_t { MteOnly = 0, DualPlane = 1 };

constexpr uint32_t kStatusSlotBytes = 32;  // 8 int32 per status slot
constexpr int32_t kStatusReady = 1;
constexpr uint32_t kSdmaQuietEvery = 256;  // SDMA-quiet after this many outstanding issues
constexpr uint32_t kPayloadAlign = 32;
constexpr uint32_t kProfFrameFullOp = 0;
constexpr uint32_t kProfFrameCommOnly = 1;
constexpr uint32_t kUbMteStageBytes = 96 * 1024;  // UB staging for MTE puts (reported as UBsize/KB)

inline uint64_t payload_stride(uint32_t h, uint32_t elem_bytes) {
    const uint64_t row = uint64_t(h) * elem_bytes;
    return (row + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign;
}

// Symmetric window of one PE: bs*topk payload slots, bs*topk status slots, then one
// 32-byte block of ready values that status puts copy from (puts are GM to GM).
struct WindowLayout {
    uint64_t slots, stride, payload_off, status_off, ready_src_off, total_bytes;
};

inline WindowLayout window_layout(uint32_t bs, uint32_t topk, uint32_t h, uint32_t elem_bytes) {
    WindowLayout w{};
    w.slots = uint64_t(bs) * topk;
    w.stride = payload_stride(h, elem_bytes);
    w.payload_off = 0;
    w.status_off = w.slots * w.stride;
    w.ready_src_off = w.status_off + w.slots * kStatusSlotBytes;
    w.total_bytes = w.ready_src_off + kStatusSlotBytes;
    return w;
}

// Launch one combine on `stream` with block_dim = pes AIV cores (one per source rank).
// All pointers are device (GM) addresses; `window` is the symmetric window of this PE.
void launch_combine(Dtype dtype, uint32_t block_dim, void* stream, uint8_t* expand_x, uint8_t* assist_info,
                    uint8_t* ep_recv_count, uint8_t* expert_ids, uint8_t* expert_scales, uint8_t* x_out,
                    uint8_t* window, uint32_t bs, uint32_t h, uint32_t topk, uint32_t expert_per_pe,
                    Policy policy, uint64_t min_sdma_bytes);

}  // namespace combine
