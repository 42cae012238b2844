// The twin's Ascend C vector path (asc-devkit basic_api; docs/hardware-rules.md#10-ascend-c-vector-path): DataCopy
// and DataCopyPad between GM and UB, Cast, Muls, Add, Axpy, Duplicate on LocalTensors.
//
// Each call first checks what the hardware requires and refuses or reports the rest:
// - UB operands start 32-byte aligned (the LocalTensor constructor checks, twin_pipes.cpp
//   ub_use) and stay inside their LocalTensor; GM operands of DataCopy are aligned to the
//   element; counts and DataCopyExtParams stay in their documented ranges (fatal otherwise);
// - DataCopy moves whole 32-byte blocks: a length that is not a multiple of 32 B is a
//   violation, and, as on the hardware, only the whole blocks arrive;
// - Cast takes the A2/A3 (source, destination, RoundMode) combinations only;
// - operands overlap completely or not at all, and a widening Cast not at all;
// - the core's state was set (InitSocState) before the first such instruction.
// Then it issues one op on its pipe (MTE2, V or MTE3; twin_pipes.cpp checks the flags
// between pipes), which twin_vector_exec.cpp executes.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernel_operator.h"
#include "twin_platform.h"
#include "twin_state.h"
#include "twin_vector_elems.h"

namespace twin {
namespace {

using AscendC::RoundMode;

const char* const kElemName[kElems] = {"int8", "uint8", "int16", "uint16", "half", "int32", "uint32", "float", "int64",
                                       "uint64", "bfloat16_t"};
const char* const kRoundName[7] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC",
                                   "CAST_ODD"};

// Stable names for messages and op records ("Muls (float)", "Cast (half -> float)"), made
// once, before any core thread asks.
struct OpNames {
    std::string typed[4][kElems];
    std::string cast[kElems][kElems];
    OpNames() {
        static const char* const ops[4] = {"Muls", "Add", "Axpy", "Duplicate"};
        for (int e = 0; e < kElems; ++e) {
            for (int i = 0; i < 4; ++i) typed[i][e] = std::string(ops[i]) + " (" + kElemName[e] + ")";
            for (int d = 0; d < kElems; ++d) cast[e][d] = std::string("Cast (") + kElemName[e] + " -> " + kElemName[d] + ")";
        }
    }
};
const OpNames kNames;
enum TypedOp { kMuls = 0, kAdd, kAxpy, kDuplicate };

const char* typed_name(TypedOp op, Elem e) { return kNames.typed[op][int(e)].c_str(); }
const char* cast_name(Elem src, Elem dst) { return kNames.cast[int(src)][int(dst)].c_str(); }

UbSpan span_of(const UbOperand& t, uint64_t bytes) { return UbSpan{t.off, uint32_t(t.off + bytes)}; }

[[noreturn]] __attribute__((noinline, cold)) void past_tensor(const char* op, const char* what, const UbOperand& t,
                                                                uint64_t bytes, uint64_t cap) {
    fatal("%s: %s %s runs past its LocalTensor %s (%u %s)", op, what, range_text(t.off, uint32_t(t.off + bytes)).c_str(),
          range_text(t.off, uint32_t(t.off + cap)).c_str(), t.elems, kElemName[int(t.elem)]);
}

// `bytes` of tensor `t` used by `op`: inside its LocalTensor, else fatal.
inline UbSpan ub_operand(const char* op, const char* what, const UbOperand& t, uint64_t bytes) {
    const uint64_t cap = uint64_t(t.elems) * esize(t.elem);
    if (bytes > cap) past_tensor(op, what, t, bytes, cap);
    return span_of(t, bytes);
}

// asc-devkit's general overlap rule: operands of one instruction overlap 100% or not at all.
void check_overlap(const char* op, const char* a_name, const UbSpan& a, const char* b_name, const UbSpan& b,
                   bool none_allowed_only) {
    if (a.begin >= b.end || b.begin >= a.end) return;
    if (!none_allowed_only && a.begin == b.begin && a.end == b.end) return;
    fatal("%s: %s %s overlaps %s %s: %s (asc-devkit address overlap rule)", op, a_name, range_text(a.begin, a.end).c_str(),
          b_name, range_text(b.begin, b.end).c_str(),
          none_allowed_only ? "this instruction's operands must not overlap" : "operands must overlap completely or not at all");
}

int32_t vec_count(const char* op, int32_t count) {
    if (count < 0) fatal("%s: count %d is negative", op, count);
    return count;
}

// The A2/A3 Cast table (asc-devkit Cast, "Atlas A2" combinations) for the types the twin
// models: a bit per RoundMode, 0 where the combination does not exist.
uint32_t cast_modes(Elem src, Elem dst) {
    auto bits = [](std::initializer_list<RoundMode> ms) {
        uint32_t b = 0;
        for (RoundMode m : ms) b |= 1u << int(m);
        return b;
    };
    using R = RoundMode;
    const uint32_t five = bits({R::CAST_RINT, R::CAST_FLOOR, R::CAST_CEIL, R::CAST_ROUND, R::CAST_TRUNC});
    if (src == Elem::F16 && dst == Elem::F32) return bits({R::CAST_NONE});
    if (src == Elem::F16 && dst == Elem::I32) return five;
    if (src == Elem::I32 && dst == Elem::F32) return five | bits({R::CAST_NONE});
    if (src == Elem::F32 && dst == Elem::F16) return five | bits({R::CAST_ODD, R::CAST_NONE});
    if (src == Elem::BF16 && dst == Elem::F32) return bits({R::CAST_NONE});
    if (src == Elem::F32 && dst == Elem::BF16) return five;
    if (src == Elem::F32 && dst == Elem::I32) return five;
    if (src == Elem::F32 && dst == Elem::F32) return five;
    return 0;
}

std::string modes_text(uint32_t modes) {
    std::string s;
    for (int m = 0; m < 7; ++m)
        if (modes & (1u << m)) s += std::string(s.empty() ? "" : "/") + kRoundName[m];
    return s;
}

}  // namespace

void local_tensor_at(uint32_t addr, uint64_t bytes) {
    uint8_t* base = ub_base();
    if (base == nullptr) fatal("LocalTensor constructed outside a kernel core");
    const uint32_t ub = twin_soc().ub_bytes;
    if (uint64_t(addr) + bytes > ub)
        fatal("LocalTensor: vector tile (LocalTensor) %s runs past the core's %u KiB UB",
              range_text(addr, uint32_t(std::min<uint64_t>(uint64_t(addr) + bytes, 0xFFFFFFFFull))).c_str(), ub / 1024);
    ub_use(base + addr, uint32_t(bytes), UbRole::VectorTile, "LocalTensor");
}

void init_soc_state() { soc_state_init(); }

// DataCopy (no pad) moves whole 32-byte blocks: the bytes that really move, after reporting a
// length that is not a multiple of 32 B (both directions; ``towards`` says "to" or "from" UB,
// ``arrive`` what the data do). The GM address must be aligned to its elements.
static uint32_t whole_blocks(const char* op, const void* gm, uint32_t es, Elem elem, uint32_t bytes,
                             const UbOperand& ub, const char* towards, const char* arrive) {
    if (reinterpret_cast<uintptr_t>(gm) % es != 0)
        fatal("%s: GM address %p is not aligned to its %u-byte elements", op, const_cast<void*>(gm), es);
    if (bytes % 32 == 0) return bytes;
    const uint32_t whole = bytes / 32 * 32;
    report_violation(where() + ": " + op + " of " + std::to_string(bytes / es) + " " + kElemName[int(elem)] + " (" +
                     std::to_string(bytes) + " B) " + towards + " " + range_text(ub.off, ub.off + align32(bytes)) +
                     ": DataCopy moves whole 32-byte blocks, so only " + std::to_string(whole) + " B " + arrive +
                     " (use DataCopyPad for lengths that are not a multiple of 32 B)");
    return whole;
}

// DataCopyPad's parameter ranges (DataCopyExtParams), both directions.
static void check_pad_params(const char* op, const AscendC::DataCopyExtParams& p, uint32_t es) {
    if (p.blockCount > 4095 || p.blockLen > 2097151)
        fatal("%s: blockCount %u, blockLen %u: the ranges are [0, 4095] and [0, 2097151]", op, p.blockCount, p.blockLen);
    if (p.blockLen % es != 0) fatal("%s: blockLen %u B is not a multiple of sizeof(T) = %u", op, p.blockLen, es);
}

void copy_in(bool pad, const UbOperand& dst, const GmOperand& src, const AscendC::DataCopyExtParams& p, bool is_pad,
             uint8_t left, uint8_t right, uint64_t pad_bits, const Site& site) {
    const char* const op = pad ? "DataCopyPad (GM -> UB)" : "DataCopy (GM -> UB)";
    soc_state_require(op);
    const uint32_t es = esize(dst.elem);
    if (p.blockCount == 0 || p.blockLen == 0) return;  // a NOP on A2/A3
    uint64_t slot = 0;
    if (region_kind(src.addr, &slot) == kRegionPayload)  // stage 2 reading a window slot
        record_op("load", -1, (long long)p.blockCount * p.blockLen, (long long)slot, dst.off);
    PipeOp o;
    o.kind = OpKind::CopyIn;
    o.pipe = kPipeMte2;
    o.name = op;
    o.dst_off = dst.off;
    o.dst_elem = uint8_t(dst.elem);
    o.gm_src = src.addr;
    o.blocks = p.blockCount;
    uint64_t ub_bytes, gm_bytes;
    if (!pad) {
        const uint32_t bytes = whole_blocks(op, src.addr, es, dst.elem, p.blockLen, dst, "to", "arrive");
        if (bytes == 0) return;
        o.count = bytes;
        ub_bytes = gm_bytes = bytes;
    } else {
        check_pad_params(op, p, es);
        if (left * es > 32 || right * es > 32)
            fatal("%s: leftPadding %u, rightPadding %u elements: each may cover at most 32 B", op, left, right);
        const uint32_t block = align32(uint64_t(left) * es + p.blockLen + uint64_t(right) * es);
        o.count = p.blockLen;
        o.ub_block_pitch = block + p.dstStride * 32;
        o.gm_block_pitch = p.blockLen + p.srcStride;
        o.left_pad = left;
        o.right_pad = right;
        o.is_pad = is_pad;
        o.pad_bits = pad_bits;
        ub_bytes = uint64_t(p.blockCount - 1) * o.ub_block_pitch + block;
        gm_bytes = uint64_t(p.blockCount - 1) * o.gm_block_pitch + p.blockLen;
    }
    o.write = ub_operand(op, "destination", dst, ub_bytes);
    o.writes = true;
    if (src.elems != 0 && gm_bytes > src.elems * es)
        fatal("%s: reads %llu B of GM at %p, past its GlobalTensor's %llu elements", op, (unsigned long long)gm_bytes,
              static_cast<void*>(src.addr), (unsigned long long)src.elems);
    note_payload_read(src.addr, gm_bytes, op, site);  // issued after the flags this core observed so far
    pipe_issue(o);
}

void copy_out(bool pad, const GmOperand& dst, const UbOperand& src, const AscendC::DataCopyExtParams& p) {
    const char* const op = pad ? "DataCopyPad (UB -> GM)" : "DataCopy (UB -> GM)";
    soc_state_require(op);
    const uint32_t es = esize(src.elem);
    if (p.blockCount == 0 || p.blockLen == 0) return;
    uint64_t row = 0;
    if (region_kind(dst.addr, &row) == kRegionOutput)  // stage 2 writing an x_out row
        record_op("store", -1, (long long)p.blockCount * p.blockLen, (long long)row, src.off);
    PipeOp o;
    o.kind = OpKind::CopyOut;
    o.pipe = kPipeMte3;
    o.name = op;
    o.src0_off = src.off;
    o.gm_dst = dst.addr;
    o.blocks = p.blockCount;
    uint64_t ub_bytes, gm_bytes;
    if (!pad) {
        const uint32_t bytes = whole_blocks(op, dst.addr, es, src.elem, p.blockLen, src, "from", "leave");
        if (bytes == 0) return;
        o.count = bytes;
        ub_bytes = gm_bytes = bytes;
    } else {
        check_pad_params(op, p, es);
        o.count = p.blockLen;
        o.ub_block_pitch = align32(p.blockLen) + p.srcStride * 32;
        o.gm_block_pitch = p.blockLen + p.dstStride;
        ub_bytes = uint64_t(p.blockCount - 1) * o.ub_block_pitch + align32(p.blockLen);
        gm_bytes = uint64_t(p.blockCount - 1) * o.gm_block_pitch + p.blockLen;
    }
    if (!pad) o.ub_block_pitch = 0;
    o.reads[0] = ub_operand(op, "source", src, ub_bytes);
    o.n_reads = 1;
    if (dst.elems != 0 && gm_bytes > dst.elems * es)
        fatal("%s: writes %llu B of GM at %p, past its GlobalTensor's %llu elements", op, (unsigned long long)gm_bytes,
              static_cast<void*>(dst.addr), (unsigned long long)dst.elems);
    pipe_issue(o);
}

void vec_cast(const UbOperand& dst, const UbOperand& src, AscendC::RoundMode mode, uint32_t count) {
    const char* const op = cast_name(src.elem, dst.elem);
    soc_state_require(op);
    const uint32_t modes = cast_modes(src.elem, dst.elem);
    if (modes == 0)
        fatal("%s: not a Cast the twin models for A2/A3 (half/bfloat16_t/int32/float: half -> float, half -> int32, "
              "int32 -> float, float -> half, float -> int32, float -> float, bfloat16_t -> float, float -> bfloat16_t)", op);
    const int m = int(mode);
    if (m >= 7 || !(modes & (1u << m)))
        fatal("%s with %s: A2/A3 take %s for this pair (asc-devkit Cast)", op, m < 7 ? kRoundName[m] : "an unknown mode",
              modes_text(modes).c_str());
    if (dst.elem == Elem::F16 && mode != RoundMode::CAST_RINT && mode != RoundMode::CAST_NONE)
        fatal("%s with %s: not modeled by the twin (it models CAST_RINT and CAST_NONE to half)", op, kRoundName[m]);
    if (count == 0) return;
    PipeOp o;
    o.kind = OpKind::Cast;
    o.pipe = kPipeV;
    o.name = op;
    o.reads[0] = ub_operand(op, "source", src, uint64_t(count) * esize(src.elem));
    o.n_reads = 1;
    o.write = ub_operand(op, "destination", dst, uint64_t(count) * esize(dst.elem));
    o.writes = true;
    check_overlap(op, "destination", o.write, "source", o.reads[0], esize(dst.elem) != esize(src.elem));
    o.dst_off = dst.off;
    o.src0_off = src.off;
    o.dst_elem = uint8_t(dst.elem);
    o.src_elem = uint8_t(src.elem);
    o.round = uint8_t(mode);
    o.count = count;
    pipe_issue(o);
}

namespace {

bool arithmetic(Elem e) { return e == Elem::F32 || e == Elem::F16 || e == Elem::I32 || e == Elem::I16; }

}  // namespace

void vec_muls(const UbOperand& dst, const UbOperand& src, double scalar, int32_t count) {
    const char* const op = typed_name(kMuls, dst.elem);
    soc_state_require(op);
    if (!arithmetic(dst.elem)) fatal("%s: A2/A3 Muls takes int16, half, int32 or float", op);
    if (vec_count(op, count) == 0) return;
    PipeOp o;
    o.kind = OpKind::Muls;
    o.pipe = kPipeV;
    o.name = op;
    const uint64_t bytes = uint64_t(count) * esize(dst.elem);
    o.reads[0] = ub_operand(op, "source", src, bytes);
    o.n_reads = 1;
    o.write = ub_operand(op, "destination", dst, bytes);
    o.writes = true;
    check_overlap(op, "destination", o.write, "source", o.reads[0], false);
    o.dst_off = dst.off;
    o.src0_off = src.off;
    o.dst_elem = o.src_elem = uint8_t(dst.elem);
    o.scalar = scalar;
    o.count = uint32_t(count);
    pipe_issue(o);
}

void vec_add(const UbOperand& dst, const UbOperand& src0, const UbOperand& src1, int32_t count) {
    const char* const op = typed_name(kAdd, dst.elem);
    soc_state_require(op);
    if (!arithmetic(dst.elem)) fatal("%s: A2/A3 Add takes int16, half, int32 or float", op);
    if (vec_count(op, count) == 0) return;
    PipeOp o;
    o.kind = OpKind::Add;
    o.pipe = kPipeV;
    o.name = op;
    const uint64_t bytes = uint64_t(count) * esize(dst.elem);
    o.reads[0] = ub_operand(op, "source 0", src0, bytes);
    o.reads[1] = ub_operand(op, "source 1", src1, bytes);
    o.n_reads = 2;
    o.write = ub_operand(op, "destination", dst, bytes);
    o.writes = true;
    check_overlap(op, "destination", o.write, "source 0", o.reads[0], false);
    check_overlap(op, "destination", o.write, "source 1", o.reads[1], false);
    o.dst_off = dst.off;
    o.src0_off = src0.off;
    o.src1_off = src1.off;
    o.dst_elem = o.src_elem = uint8_t(dst.elem);
    o.count = uint32_t(count);
    pipe_issue(o);
}

void vec_axpy(const UbOperand& dst, const UbOperand& src, double scalar, int32_t count) {
    const char* const op = typed_name(kAxpy, dst.elem);
    soc_state_require(op);
    const bool ok = (dst.elem == Elem::F32 && src.elem == Elem::F32) || (dst.elem == Elem::F16 && src.elem == Elem::F16) ||
                    (dst.elem == Elem::F32 && src.elem == Elem::F16);
    if (!ok) fatal("%s: A2/A3 Axpy takes half -> half, float -> float or half -> float", op);
    if (vec_count(op, count) == 0) return;
    PipeOp o;
    o.kind = OpKind::Axpy;
    o.pipe = kPipeV;
    o.name = op;
    o.reads[0] = ub_operand(op, "source", src, uint64_t(count) * esize(src.elem));
    o.reads[1] = ub_operand(op, "destination", dst, uint64_t(count) * esize(dst.elem));  // dst is read too
    o.n_reads = 2;
    o.write = o.reads[1];
    o.writes = true;
    check_overlap(op, "destination", o.write, "source", o.reads[0], dst.elem != src.elem);
    o.dst_off = dst.off;
    o.src0_off = src.off;
    o.dst_elem = uint8_t(dst.elem);
    o.src_elem = uint8_t(src.elem);
    o.scalar = scalar;
    o.count = uint32_t(count);
    pipe_issue(o);
}

void vec_duplicate(const UbOperand& dst, double scalar, int32_t count) {
    const char* const op = typed_name(kDuplicate, dst.elem);
    soc_state_require(op);
    if (vec_count(op, count) == 0) return;
    PipeOp o;
    o.kind = OpKind::Dup;
    o.pipe = kPipeV;
    o.name = op;
    o.write = ub_operand(op, "destination", dst, uint64_t(count) * esize(dst.elem));
    o.writes = true;
    o.dst_off = dst.off;
    o.dst_elem = uint8_t(dst.elem);
    o.scalar = scalar;
    o.count = uint32_t(count);
    pipe_issue(o);
}

}  // namespace twin
