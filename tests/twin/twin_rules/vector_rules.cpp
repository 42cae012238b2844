// One Ascend C misuse per case, run on one twin core (tests/twin/test_twin_vector_rules.py): each
// rule of host/twin/twin_vector.cpp and twin_pipes.cpp that the real kernel never breaks, so
// that no broken kernel of the self-test shows it. `vector_rules <case>` runs the case; a
// fatal rule ends the process with status 3 and the message on stderr, a violation is printed
// on stderr, and cases that compute print their result bits on stdout.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin_platform.h"

using namespace AscendC;

namespace {

constexpr uint32_t kBase = 132096;  // a vector-tile address of the kernel's UB map
constexpr uint32_t kTile = 256;     // elements

uint32_t bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

uint16_t bits(half h) {
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

// Two tiles in through MTE2, each scaled by V once MTE2_V says it arrived (ids `id0`, `id1`);
// with `flag_back`, MTE2 waits for V_MTE2 (set after the first Muls) before the second copy.
void two_tiles(int32_t id0, int32_t id1, bool flag_back) {
    static float gm[16];
    GlobalTensor<float> g;
    g.SetGlobalBuffer(gm, 16);
    LocalTensor<float> a(TPosition::VECCALC, kBase, 8), b(TPosition::VECCALC, kBase + 32, 8);
    DataCopy(a, g, 8);
    SetFlag<HardEvent::MTE2_V>(id0);  // tile-a-set
    WaitFlag<HardEvent::MTE2_V>(id0);  // tile-a-wait
    Muls(a, a, 2.0f, 8);
    if (flag_back) {
        SetFlag<HardEvent::V_MTE2>(7);
        WaitFlag<HardEvent::V_MTE2>(7);
    }
    DataCopy(b, g[8], 8);
    SetFlag<HardEvent::MTE2_V>(id1);  // tile-b-set
    WaitFlag<HardEvent::MTE2_V>(id1);
    Muls(b, b, 2.0f, 8);
    PipeBarrier<PIPE_ALL>();
}

const std::map<std::string, std::function<void()>> kCases = {
    // Cast: only the A2/A3 (source, destination, RoundMode) combinations.
    {"cast_float_to_int32_none", [] {
         LocalTensor<float> f(TPosition::VECCALC, kBase, kTile);
         LocalTensor<int32_t> i(TPosition::VECCALC, kBase + 1024, kTile);
         Cast(i, f, RoundMode::CAST_NONE, kTile);
     }},
    {"cast_half_to_float_rint", [] {
         LocalTensor<half> h(TPosition::VECCALC, kBase, kTile);
         LocalTensor<float> f(TPosition::VECCALC, kBase + 1024, kTile);
         Cast(f, h, RoundMode::CAST_RINT, kTile);
     }},
    {"cast_int32_to_half", [] {
         LocalTensor<int32_t> i(TPosition::VECCALC, kBase, kTile);
         LocalTensor<half> h(TPosition::VECCALC, kBase + 1024, kTile);
         Cast(h, i, RoundMode::CAST_NONE, kTile);
     }},
    // Operands overlap completely or not at all; a widening Cast not at all.
    {"add_partial_overlap", [] {
         LocalTensor<float> a(TPosition::VECCALC, kBase, kTile);
         LocalTensor<float> b(TPosition::VECCALC, kBase + 32, kTile);
         Add(b, a, a, int32_t(kTile));
     }},
    {"cast_widening_in_place", [] {
         LocalTensor<half> h(TPosition::VECCALC, kBase, kTile);
         LocalTensor<float> f(TPosition::VECCALC, kBase, kTile);
         Cast(f, h, RoundMode::CAST_NONE, kTile);
     }},
    // LocalTensors start 32-byte aligned and end inside the UB; the whole 192 KiB is the kernel's.
    {"tensor_misaligned", [] { LocalTensor<float> f(TPosition::VECCALC, kBase + 16, kTile); }},
    {"tensor_past_ub", [] { LocalTensor<float> f(TPosition::VECCALC, 192 * 1024 - 512, kTile); }},
    {"tensor_at_ub_top", [] {  // [191 KiB, 192 KiB): SHMEM's 188 KiB+ area is not reserved in a kernel's launch
         LocalTensor<float> f(TPosition::VECCALC, 191 * 1024, kTile);
         Duplicate(f, 1.0f, int32_t(kTile));
         PipeBarrier<PIPE_ALL>();
     }},
    // An operand stays inside its LocalTensor, a copy inside its GlobalTensor.
    {"muls_past_tensor", [] {
         LocalTensor<float> f(TPosition::VECCALC, kBase, kTile);
         Muls(f, f, 2.0f, int32_t(kTile + 8));
     }},
    {"copy_past_global", [] {
         static float gm[64];
         GlobalTensor<float> g;
         g.SetGlobalBuffer(gm, 16);
         LocalTensor<float> f(TPosition::VECCALC, kBase, kTile);
         DataCopy(f, g, 32);
     }},
    {"pad_block_len_not_elements", [] {
         static half gm[64];
         GlobalTensor<half> g;
         g.SetGlobalBuffer(gm, 64);
         LocalTensor<half> h(TPosition::VECCALC, kBase, kTile);
         DataCopyPad(h, g, DataCopyExtParams(1, 41, 0, 0, 0), DataCopyPadExtParams<half>());
     }},
    {"pipe_barrier_s", [] { PipeBarrier<PIPE_S>(); }},
    // Two vector instructions on one tile with no PipeBarrier<PIPE_V> between them (WAW).
    {"vector_waw_without_barrier", [] {
         LocalTensor<float> f(TPosition::VECCALC, kBase, kTile);
         Duplicate(f, 1.0f, int32_t(kTile));
         Duplicate(f, 2.0f, int32_t(kTile));
         PipeBarrier<PIPE_V>();
         Muls(f, f, 3.0f, int32_t(kTile));
     }},
    // Event bits as the pipes run them: MTE2 copies two tiles and sets MTE2_V after each; V
    // waits before each Muls. On one id, MTE2 may run the second SetFlag before V has run the
    // first WaitFlag (the bit set twice); one id per tile, or a V->MTE2 flag that MTE2 waits for
    // before the second tile, orders them.
    {"flag_set_twice_in_flight", [] { two_tiles(0, 0, false); }},
    {"flag_one_id_per_tile", [] { two_tiles(0, 1, false); }},
    {"flag_ordered_by_a_flag_back", [] { two_tiles(0, 0, true); }},
    {"flag_set_twice_in_program_order", [] {
         SetFlag<HardEvent::MTE2_V>(3);  // flag-set-first
         SetFlag<HardEvent::MTE2_V>(3);  // flag-set-second
         WaitFlag<HardEvent::MTE2_V>(3);  // one bit: one wait clears it (a second would wait forever)
     }},
    // DataCopyPad of 20 half (40 B) into 32-byte blocks: with no padding asked for and isPad
    // false the block is filled up with its first element; with 2 elements of left padding and
    // isPad, padding and fill are the padding value; with isPad but no padding the docs leave
    // the fill open: garbage (NaN).
    {"pad_dummy_and_value", [] {
         static half gm[20], out[96];
         for (int i = 0; i < 20; ++i) gm[i] = half(float(i + 1));
         GlobalTensor<half> g, o;
         g.SetGlobalBuffer(gm, 20);
         o.SetGlobalBuffer(out, 96);
         LocalTensor<half> a(TPosition::VECCALC, kBase, 32), b(TPosition::VECCALC, kBase + 64, 32),
             c(TPosition::VECCALC, kBase + 128, 32);
         DataCopyPad(a, g, DataCopyExtParams(1, 40, 0, 0, 0), DataCopyPadExtParams<half>());
         DataCopyPad(b, g, DataCopyExtParams(1, 40, 0, 0, 0), DataCopyPadExtParams<half>(true, 2, 0, half(7.0f)));
         DataCopyPad(c, g, DataCopyExtParams(1, 40, 0, 0, 0), DataCopyPadExtParams<half>(true, 0, 0, half(7.0f)));
         SetFlag<HardEvent::MTE2_MTE3>(0);
         WaitFlag<HardEvent::MTE2_MTE3>(0);
         DataCopy(o, a, 32);
         DataCopy(o[32], b, 32);
         DataCopy(o[64], c, 32);
         PipeBarrier<PIPE_ALL>();
         for (int i = 0; i < 96; ++i) printf("%g%s", float(out[i]), i == 95 ? "\n" : " ");
     }},
    // Axpy rounds once: 1 + 2^-12 times itself is 1 + 2^-11 + 2^-24 exactly; Muls rounds that
    // to 1 + 2^-11 (a tie, to even), so Muls + Add of -(1 + 2^-11) gives 0 and Axpy 2^-24.
    {"axpy_rounds_once", [] {
         static float one[8], out[16];
         const float a = 1.0f + 1.0f / 4096;
         for (float& v : one) v = a;
         GlobalTensor<float> g, o;
         g.SetGlobalBuffer(one, 8);
         o.SetGlobalBuffer(out, 16);
         LocalTensor<float> x(TPosition::VECCALC, kBase, 8), acc(TPosition::VECCALC, kBase + 32, 8),
             tmp(TPosition::VECCALC, kBase + 64, 8), acc2(TPosition::VECCALC, kBase + 96, 8);
         DataCopy(x, g, 8);
         SetFlag<HardEvent::MTE2_V>(0);
         WaitFlag<HardEvent::MTE2_V>(0);
         Duplicate(acc, -(1.0f + 1.0f / 2048), 8);
         Duplicate(acc2, -(1.0f + 1.0f / 2048), 8);
         Muls(tmp, x, a, 8);
         PipeBarrier<PIPE_V>();
         Axpy(acc, x, a, 8);
         Add(acc2, acc2, tmp, 8);
         SetFlag<HardEvent::V_MTE3>(0);
         WaitFlag<HardEvent::V_MTE3>(0);
         DataCopy(o, acc, 8);
         DataCopy(o[8], acc2, 8);
         PipeBarrier<PIPE_ALL>();
         printf("axpy %08x muls+add %08x\n", bits(out[0]), bits(out[8]));
     }},
    // Cast rounding: float -> half half to even, float -> int32 toward zero.
    {"cast_rounding", [] {
         static float in[8] = {2055.0f, 2053.0f, -1.75f, 1.75f, 65520.0f, -0.0f, 0.1f, 3.5f};
         static half h[16];
         static int32_t i32[8];
         GlobalTensor<float> g;
         GlobalTensor<half> oh;
         GlobalTensor<int32_t> oi;
         g.SetGlobalBuffer(in, 8);
         oh.SetGlobalBuffer(h, 16);
         oi.SetGlobalBuffer(i32, 8);
         LocalTensor<float> f(TPosition::VECCALC, kBase, 8);
         LocalTensor<half> th(TPosition::VECCALC, kBase + 32, 16);
         LocalTensor<int32_t> ti(TPosition::VECCALC, kBase + 64, 8);
         DataCopy(f, g, 8);
         SetFlag<HardEvent::MTE2_V>(0);
         WaitFlag<HardEvent::MTE2_V>(0);
         Cast(th, f, RoundMode::CAST_RINT, 8);
         Cast(ti, f, RoundMode::CAST_TRUNC, 8);
         SetFlag<HardEvent::V_MTE3>(0);
         WaitFlag<HardEvent::V_MTE3>(0);
         DataCopy(oh, th, 16);
         DataCopy(oi, ti, 8);
         PipeBarrier<PIPE_ALL>();
         for (int k = 0; k < 8; ++k) printf("%04x ", bits(h[k]));
         for (int k = 0; k < 8; ++k) printf("%d%s", i32[k], k == 7 ? "\n" : " ");
     }},
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2 || kCases.count(argv[1]) == 0) {
        fprintf(stderr, "usage: vector_rules <case>; cases:");
        for (const auto& c : kCases) fprintf(stderr, " %s", c.first.c_str());
        fprintf(stderr, "\n");
        return 2;
    }
    const std::function<void()>& body = kCases.at(argv[1]);
    twin::launch_kernel(1, nullptr, [&]() {
        InitSocState();
        body();
    });
    return 0;
}
