// The pipes of one AIV core on the twin: what the hardware does between the scalar unit,
// MTE2 (GM -> UB), the vector unit V, MTE3 (UB -> GM) and the flags between them, and the
// UB they share (docs/hardware-rules.md#2-pipes-and-the-order-between-them; asc-devkit SetFlag/WaitFlag, PipeBarrier and
// "static Tensor programming").
//
// - Every instruction that touches UB is a PipeOp on its pipe (twin_vector.cpp: DataCopy,
//   DataCopyPad, Cast, Muls, Add, Axpy, Duplicate; twin_engines.cpp: SHMEM's MTE put, whose
//   chunks go GM -> UB on MTE2 and UB -> remote GM on MTE3, with an MTE3->MTE2 flag between
//   chunks but not after the last one). Pipes run in parallel: an op of pipe C is ordered
//   after an op of pipe P only by SetFlag<P_C>/WaitFlag<P_C> (SetFlag waits for every P op
//   before it), by PipeBarrier<PIPE_C> when P = C (asc-devkit: also between two vector
//   instructions that share data, and between two DataCopy into the same UB), by
//   PipeBarrier<PIPE_ALL>/quiet, or transitively through such chains. The twin keeps one
//   watermark vector per pipe (ops of pipe X with seq < known[C][X] are complete before C's
//   next op), moved by exactly those events.
// - An op that reads UB another op writes, or writes UB another op reads or writes, with
//   no such order between them, is a violation naming both instructions, the UB range and
//   the flag that was missing. An MTE2 copy over the UB a SHMEM put's last leg still reads
//   is the "UB reuse" violation.
// - Outside chaos mode every op acts as if it executed at issue (the data happen to be right)
//   and only the violations report; a DataCopy GM -> UB actually runs when a flag, a barrier
//   or an access needs it, with its source prefetched at issue (run_mte2_late). In chaos mode (COMBINE_TWIN_CHAOS) ops are kept until every pipe
//   drains (PipeBarrier<PIPE_ALL>, quiet, SyncAll, kernel end) and then run in an order the
//   flags allow, chosen by the seed, with each reported pair run the wrong way round (the
//   reader before the writer it did not wait for, the writer before the reader it did not
//   wait for), so that a missing flag corrupts x_out. The scalar unit's own UB loads and
//   stores cannot be observed: an S_MTE3 flag after scalar stores is paired, not checked.
// - UB ranges given to SHMEM or to LocalTensors lie inside the core's UB (192 KiB on A2/A3; the
//   kernel may use all of it: SHMEM's 188 KiB+ area is its own launches' only), 32-byte aligned,
//   and one range serves one role (MTE staging,
//   SDMA scratch, MTE source, vector tile): overlapping roles are fatal, naming both ranges.
// - SetFlag/WaitFlag pair per (event, id): a wait with no set hangs the core on hardware
//   (fatal here), a second set before the wait is a violation, and a SHMEM call's internal
//   flags collide with a kernel's pending flag of the same id. One sync id serves one plane.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin_state.h"

namespace twin {
namespace {

const char* const kRoleName[4] = {"MTE staging", "SDMA scratch", "MTE source (UB -> GM)", "vector tile (LocalTensor)"};
constexpr int kEvents = int(AscendC::HardEvent::MAX);
constexpr int kEventIds = 8;
constexpr uint64_t kNone = ~uint64_t(0);

struct UbRange {
    UbRole role;
    uint32_t begin, end;
    std::string op;
};

// Per UB span the ops touched: the latest op of each pipe that read it and that wrote it. With
// per-pipe watermarks, an op ordered after the latest one of a pipe is ordered after every
// earlier one of that pipe too. `rd`/`wr` hold seq + 1 (0: none), so "ordered before an op of
// pipe C" is rd[p] <= known[C][p].
struct SpanEntry {
    UbSpan span;
    std::vector<uint32_t> overlapping;  // indices of the entries whose spans overlap this one (itself too)
    uint64_t rd[kPipeCount] = {}, wr[kPipeCount] = {};
    const char* rd_name[kPipeCount] = {};
    const char* wr_name[kPipeCount] = {};
    int rd_pe[kPipeCount] = {-1, -1, -1, -1};  // a SHMEM put's leg: its destination PE
};

// The op a hazard is reported against.
struct OpRef {
    uint64_t seq;
    const char* name;
    int pe;
    UbSpan span;
};

// One hardware event bit (HardEvent, id) of the core. SetFlag and WaitFlag are themselves
// instructions of the source and destination pipes, with a seq each: the bit is set when the
// source pipe runs the SetFlag and cleared when the destination pipe runs the WaitFlag, so a
// SetFlag is safe only when the last WaitFlag of its bit is ordered before it.
struct FlagState {
    bool pending = false;             // program order: a SetFlag not yet waited
    uint64_t known[kPipeCount] = {};  // what the destination pipe learns at the wait
    uint64_t wait_seq = kNone;        // the last WaitFlag, an instruction of pipe wait_pipe
    int wait_pipe = -1;
    Site set_site, wait_site;
};

// An op kept for the drain (chaos mode).
struct Kept {
    PipeOp op;
    uint64_t seq;
    uint64_t deps[kPipeCount];  // ops of pipe X with seq < deps[X] run before it
    std::vector<uint32_t> waiters;  // kept ops (indices) that run after it where the flags allow
    int waiting = 0;                // kept ops that must run before it (a violating pair, reversed)
    bool done = false;
};

struct CoreState {
    std::vector<UbRange> ranges;
    std::vector<SpanEntry> spans;
    int32_t span_cache[256];  // span hash -> index in spans, or -1: most ops find their entry at once
    uint64_t next_seq = 0;
    uint64_t known[kPipeCount][kPipeCount] = {};
    FlagState flags[kEvents][kEventIds];
    std::vector<Kept> kept;
    std::vector<std::pair<uint64_t, PipeOp>> mte2_late;  // DataCopy GM -> UB issued, not yet run (seq, op)
    uint64_t drains = 0;
    bool chaos = false;  // chaos mode: ops kept for the drain
    bool in_core = false;
    bool soc_ready = false;
    bool soc_reported = false;
    int sync_plane[256];    // -1, or the plane that used the id first
    bool sync_reported[256];
};

// The calling core thread's state, made by pipes_core_begin and freed by pipes_thread_end. A
// pointer, so that reaching it costs no thread_local initialisation check on every op.
thread_local CoreState* tl_state = nullptr;
inline CoreState& core_state() {
    if (tl_state == nullptr) tl_state = new CoreState();
    return *tl_state;
}

bool overlaps(const UbSpan& a, const UbSpan& b) { return a.begin < b.end && b.begin < a.end; }

std::string sync_text(int from, int to) {
    if (from == to) return std::string("PipeBarrier<PIPE_") + pipe_name(from) + ">";
    return std::string("SetFlag/WaitFlag<HardEvent::") + pipe_name(from) + "_" + pipe_name(to) + ">";
}

enum Hazard { kRaw, kWar, kWaw };

std::string hazard_text(const PipeOp& op, Hazard kind, const OpRef& other, int other_pipe, const UbSpan& mine) {
    if (kind == kWar && op.pipe == kPipeMte2 && other_pipe == kPipeMte3 && other.pe >= 0) {
        char buf[512];  // the staging buffer of a SHMEM put refilled under its last leg
        snprintf(buf, sizeof buf, "%s: UB reuse: %s copies GM -> %s while the UB -> GM leg of %s from %s to PE %d "
                 "is still in flight (no quiet or MTE3->MTE2 flag between them)", where().c_str(), op.name,
                 range_text(op.write.begin, op.write.end).c_str(), other.name,
                 range_text(other.span.begin, other.span.end).c_str(), other.pe);
        return buf;
    }
    const uint32_t b = std::max(mine.begin, other.span.begin), e = std::min(mine.end, other.span.end);
    const char* verb = kind == kRaw ? "reads" : "writes";
    const char* theirs = kind == kRaw ? "has written it" : kind == kWar ? "may still read it" : "may still write it";
    return where() + ": " + op.name + " " + verb + " " + range_text(b, e) + (kind == kRaw ? " before " : " while ") +
           other.name + " " + theirs + " (no " + sync_text(other_pipe, op.pipe) + " between them)";
}

// Chaos mode: the kept op with seq `earlier` runs after the op being issued (kept index `mine`).
void run_before(uint64_t earlier, uint32_t mine) {
    CoreState& tl = core_state();
    for (size_t i = tl.kept.size(); i-- > 0;) {
        Kept& k = tl.kept[i];
        if (k.seq == earlier) {
            if (!k.done) {
                tl.kept[mine].waiters.push_back(uint32_t(i));
                ++k.waiting;
            }
            return;
        }
        if (k.seq < earlier) return;
    }
}

uint32_t span_hash(const UbSpan& s) { return ((s.begin * 0x9E3779B1u) ^ (s.end * 0x85EBCA77u)) >> 24; }

// The entry of span `s`, made (with its overlap lists) when first seen.
uint32_t entry_of(const UbSpan& s) {
    CoreState& tl = core_state();
    int32_t& slot = tl.span_cache[span_hash(s)];
    if (slot >= 0 && tl.spans[size_t(slot)].span.begin == s.begin && tl.spans[size_t(slot)].span.end == s.end)
        return uint32_t(slot);
    for (size_t i = 0; i < tl.spans.size(); ++i) {
        if (tl.spans[i].span.begin == s.begin && tl.spans[i].span.end == s.end) {
            slot = int32_t(i);
            return uint32_t(i);
        }
    }
    const uint32_t me = uint32_t(tl.spans.size());
    tl.spans.push_back(SpanEntry{});
    tl.spans.back().span = s;
    for (uint32_t i = 0; i <= me; ++i) {
        if (!overlaps(tl.spans[i].span, s)) continue;
        tl.spans[me].overlapping.push_back(i);
        if (i != me) tl.spans[i].overlapping.push_back(me);
    }
    slot = int32_t(me);
    return me;
}

// Checks `op` (seq `seq`) against the latest reader and writer of every pipe on each UB span
// it touches, reports its worst hazard (a read of unwritten data first, then a write under a
// reader, then a write under a writer) and, in chaos mode, makes that pair run the wrong way
// round; then records `op` as the latest reader/writer of its spans.
void track(const PipeOp& op, uint64_t seq, int kept_index) {
    CoreState& tl = core_state();
    const uint64_t* known = tl.known[op.pipe];
    int best_kind = 3, best_pipe = -1;  // 3: none yet
    uint32_t best_entry = 0;
    UbSpan best_span;
    auto consider = [&](Hazard kind, const uint64_t* seqs, uint32_t entry, const UbSpan& mine) {
        if (int(kind) >= best_kind) return;
        for (int p = 0; p < kPipeCount; ++p) {
            if (seqs[p] > known[p]) {  // not ordered before `op`
                best_kind = int(kind);
                best_pipe = p;
                best_entry = entry;
                best_span = mine;
                return;
            }
        }
    };
    uint32_t read_entry[2] = {0, 0};
    for (int r = 0; r < op.n_reads; ++r) {
        read_entry[r] = entry_of(op.reads[r]);
        for (uint32_t i : tl.spans[read_entry[r]].overlapping) consider(kRaw, tl.spans[i].wr, i, op.reads[r]);
    }
    uint32_t write_entry = 0;
    if (op.writes) {
        write_entry = entry_of(op.write);
        for (uint32_t i : tl.spans[write_entry].overlapping) {
            consider(kWar, tl.spans[i].rd, i, op.write);
            consider(kWaw, tl.spans[i].wr, i, op.write);
        }
    }
    if (best_kind < 3) {
        const SpanEntry& e = tl.spans[best_entry];
        const bool war = best_kind == kWar;
        const OpRef other{(war ? e.rd : e.wr)[best_pipe] - 1, (war ? e.rd_name : e.wr_name)[best_pipe],
                          war ? e.rd_pe[best_pipe] : -1, e.span};
        report_violation(hazard_text(op, Hazard(best_kind), other, best_pipe, best_span));
        if (kept_index >= 0) run_before(other.seq, uint32_t(kept_index));
    }
    for (int r = 0; r < op.n_reads; ++r) {
        SpanEntry& e = tl.spans[read_entry[r]];
        e.rd[op.pipe] = seq + 1;
        e.rd_name[op.pipe] = op.name;
        e.rd_pe[op.pipe] = op.kind == OpKind::ShmemLeg ? op.put.pe : -1;
    }
    if (op.writes) {
        SpanEntry& e = tl.spans[write_entry];
        e.wr[op.pipe] = seq + 1;
        e.wr_name[op.pipe] = op.name;
    }
}

void execute(const PipeOp& op) {
    switch (op.kind) {
    case OpKind::ShmemStage:
        memcpy(ub_base() + op.dst_off, op.gm_src, op.count);
        break;
    case OpKind::ShmemLeg:
        land(op.put);
        break;
    default:
        vector_execute(op);
    }
}

// Chaos mode: runs every kept op. An op is ready once the ops its flags wait for have run;
// among the ready ones, those that a violating pair says must go first do, else the seed picks.
void run_kept(uint64_t salt) {
    CoreState& tl = core_state();
    std::vector<Kept>& ks = tl.kept;
    const size_t n = ks.size();
    if (n == 0) return;
    std::mt19937_64 rng(chaos_seed() * 0x9E3779B97F4A7C15ull ^ (uint64_t(pe_state().my_pe) << 48) ^
                        (uint64_t(current_core()) << 32) ^ (tl.drains << 8) ^ salt ^ n);
    std::vector<uint32_t> by_pipe[kPipeCount];
    for (uint32_t i = 0; i < n; ++i) by_pipe[ks[i].op.pipe].push_back(i);
    size_t first_left[kPipeCount] = {}, scanned[kPipeCount] = {};
    std::vector<uint32_t> free_ops, held_ops;  // ready; ready but a violating partner must run first
    auto lowest_left = [&](int p) -> uint64_t {
        while (first_left[p] < by_pipe[p].size() && ks[by_pipe[p][first_left[p]]].done) ++first_left[p];
        return first_left[p] < by_pipe[p].size() ? ks[by_pipe[p][first_left[p]]].seq : kNone;
    };
    for (size_t left = n; left > 0;) {
        uint64_t low[kPipeCount];
        for (int p = 0; p < kPipeCount; ++p) low[p] = lowest_left(p);
        for (int p = 0; p < kPipeCount; ++p) {
            // deps only grow along a pipe, so the ready ops of a pipe are a prefix of it
            while (scanned[p] < by_pipe[p].size()) {
                const Kept& k = ks[by_pipe[p][scanned[p]]];
                bool ready = true;
                for (int x = 0; x < kPipeCount && ready; ++x) ready = low[x] >= k.deps[x] || low[x] == kNone;
                if (!ready) break;
                (k.waiting ? held_ops : free_ops).push_back(by_pipe[p][scanned[p]++]);
            }
        }
        uint32_t pick;
        if (!free_ops.empty()) {
            const size_t j = size_t(rng() % free_ops.size());
            pick = free_ops[j];
            free_ops[j] = free_ops.back();
            free_ops.pop_back();
        } else {
            // Only ops whose violating partners cannot run first remain: run the oldest.
            auto it = std::min_element(held_ops.begin(), held_ops.end(),
                                       [&](uint32_t a, uint32_t b) { return ks[a].seq < ks[b].seq; });
            if (it == held_ops.end()) fatal("chaos scheduler: %zu pipe ops left and none ready", left);
            pick = *it;
            held_ops.erase(it);
        }
        Kept& k = ks[pick];
        execute(k.op);
        k.done = true;
        --left;
        for (uint32_t w : k.waiters) {
            if (--ks[w].waiting == 0) {
                auto it = std::find(held_ops.begin(), held_ops.end(), w);
                if (it != held_ops.end()) {
                    held_ops.erase(it);
                    free_ops.push_back(w);
                }
            }
        }
    }
    ks.clear();
    ++tl.drains;
}

}  // namespace

uint32_t ub_use(const void* p, uint32_t bytes, UbRole role, const char* op) {
    CoreState& tl = core_state();
    uint8_t* base = ub_base();
    if (base == nullptr) fatal("%s called outside a kernel core", op);
    const uint8_t* q = static_cast<const uint8_t*>(p);
    const uint32_t ub = twin_soc().ub_bytes;
    if (q < base || q >= base + ub)
        fatal("%s: %s buffer %p is not a UB address of this core (UB is %u KiB on %s)", op, kRoleName[int(role)], p,
              ub / 1024, twin_soc().name);
    const uint32_t off = uint32_t(q - base);
    const uint64_t end = uint64_t(off) + bytes;
    if (off % 32 != 0) fatal("%s: %s at UB offset %u: UB addresses must be 32-byte aligned", op, kRoleName[int(role)], off);
    // The whole UB is the kernel's: SHMEM's own 188 KiB+ area (ACLSHMEM_INTERNAL_UB_BUF_START_ADDR)
    // is used only inside SHMEM's own launches, and its put paths check only ub_limit = 192 KiB
    // (src/device/shmemi_device_common.h; docs/hardware-rules.md#5-ub-ranges).
    if (end > ub)
        fatal("%s: %s %s runs past the core's %u KiB UB (%s; SHMEM checks UB ranges against ub_limit = 192 KiB)", op,
              kRoleName[int(role)], range_text(off, uint32_t(end)).c_str(), ub / 1024, twin_soc().name);
    for (const UbRange& r : tl.ranges) {
        if (r.role == role && r.begin == off && r.end == end) return off;
        if (r.role != role && off < r.end && r.begin < end) {
            // Named in role order, so the message is the same whichever use came first.
            const bool mine_first = int(role) < int(r.role);
            const std::string a = range_text(off, uint32_t(end)) + " used as " + kRoleName[int(role)] + " (by " + op + ")";
            const std::string b = range_text(r.begin, r.end) + " used as " + kRoleName[int(r.role)] + " (by " + r.op + ")";
            fatal("UB regions overlap: %s and %s", (mine_first ? a : b).c_str(), (mine_first ? b : a).c_str());
        }
    }
    tl.ranges.push_back(UbRange{role, off, uint32_t(end), op});
    return off;
}

namespace {

// Outside chaos mode a DataCopy GM -> UB runs when something could see its UB or when a flag
// or barrier says MTE2 is done with it, not at issue: the twin asks the CPU to prefetch its
// source at issue, so that, as on the NPU, the copy's memory traffic overlaps the vector
// work the kernel issues in between. Everything any op could observe is as at issue.
void run_mte2_late(uint64_t below) {
    CoreState& tl = core_state();
    size_t done = 0;
    for (; done < tl.mte2_late.size() && tl.mte2_late[done].first < below; ++done) execute(tl.mte2_late[done].second);
    tl.mte2_late.erase(tl.mte2_late.begin(), tl.mte2_late.begin() + long(done));
}

bool touches_mte2_late(const PipeOp& op) {
    for (const auto& late : core_state().mte2_late) {
        for (int r = 0; r < op.n_reads; ++r)
            if (overlaps(op.reads[r], late.second.write)) return true;
        if (op.writes && overlaps(op.write, late.second.write)) return true;
    }
    return false;
}

void prefetch(const uint8_t* p, uint64_t bytes) {
    for (uint64_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + i, 0, 3);
}

}  // namespace

uint64_t pipe_issue(PipeOp& op) {
    CoreState& tl = core_state();
    if (!tl.in_core) fatal("%s called outside a kernel core", op.name);
    const uint64_t seq = tl.next_seq++;
    int kept_index = -1;
    if (tl.chaos) {
        Kept k{op, seq, {}, {}, 0, false};
        std::copy(std::begin(tl.known[op.pipe]), std::end(tl.known[op.pipe]), k.deps);
        tl.kept.push_back(std::move(k));
        kept_index = int(tl.kept.size() - 1);
    }
    track(op, seq, kept_index);
    if (kept_index >= 0) return seq;
    if (op.kind == OpKind::CopyIn) {
        for (uint32_t b = 0; b < op.blocks && b < 4; ++b) prefetch(op.gm_src + uint64_t(b) * op.gm_block_pitch, op.count);
        tl.mte2_late.emplace_back(seq, op);
        return seq;
    }
    // Other pipes' ops may write GM a late copy reads: those run first; a V op only when it
    // touches UB a late copy writes.
    if (!tl.mte2_late.empty() && (op.pipe != kPipeV || touches_mte2_late(op))) run_mte2_late(kNone);
    execute(op);
    return seq;
}

bool pipe_done_before(int next, int pipe, uint64_t seq) { return core_state().known[next][pipe] > seq; }

uint64_t pipe_known_by_scalar(int pipe) { return core_state().known[kPipeS][pipe]; }

void pipes_drain() {
    CoreState& tl = core_state();
    if (current_core() < 0) return;
    run_mte2_late(kNone);
    run_kept(4);
    for (auto& row : tl.known)
        for (uint64_t& w : row) w = tl.next_seq;
}

void soc_state_init() {
    CoreState& tl = core_state();
    if (current_core() < 0) fatal("AscendC::InitSocState called outside a kernel core");
    tl.soc_ready = true;
}

void soc_state_require(const char* op) {
    CoreState& tl = core_state();
    if (tl.soc_ready || tl.soc_reported) return;
    tl.soc_reported = true;
    report_violation(where() + ": " + op + " before AscendC::InitSocState(): a kernel with LocalTensors at fixed "
                     "addresses (no TPipe) must set the core's mask mode and atomic state first (asc-devkit static "
                     "Tensor programming), else its vector and DataCopy instructions run in whatever state the last "
                     "kernel left");
}

void sync_id_use(uint32_t sync_id, int plane, const char* op) {
    CoreState& tl = core_state();
    if (sync_id >= kEventIds) fatal("%s: sync_id %u: event ids are EVENT_ID0..EVENT_ID7", op, sync_id);
    int& owner = tl.sync_plane[sync_id];
    if (owner < 0) {
        owner = plane;
    } else if (owner != plane && !tl.sync_reported[sync_id]) {
        tl.sync_reported[sync_id] = true;
        report_violation(where() + ": sync id " + std::to_string(sync_id) + " serves both planes (" +
                         kPlaneName[owner] + " and " + kPlaneName[plane] + ", by " + op +
                         "): SHMEM's internal flags of one plane then pair with the other's; give each plane its own "
                         "id (the reference: EVENT_ID0 SDMA, EVENT_ID1 MTE)");
    }
}

void pipes_core_begin() {
    CoreState& tl = core_state();
    tl.in_core = true;
    tl.chaos = chaos_seed() != 0;
    tl.ranges.clear();
    tl.spans.clear();
    std::fill(std::begin(tl.span_cache), std::end(tl.span_cache), -1);
    tl.kept.clear();
    tl.mte2_late.clear();
    tl.next_seq = 0;
    tl.drains = 0;
    tl.soc_ready = false;
    tl.soc_reported = false;
    for (auto& row : tl.known) std::fill(std::begin(row), std::end(row), uint64_t(0));
    for (auto& row : tl.flags)
        for (FlagState& f : row) f = FlagState{};
    std::fill(std::begin(tl.sync_plane), std::end(tl.sync_plane), -1);
    std::fill(std::begin(tl.sync_reported), std::end(tl.sync_reported), false);
}

void pipes_thread_end() {
    delete tl_state;
    tl_state = nullptr;
}

void pipes_core_end() {
    CoreState& tl = core_state();
    pipes_drain();  // the kernel's end drains every pipe
    tl.in_core = false;
    for (int e = 0; e < kEvents; ++e)
        for (int id = 0; id < kEventIds; ++id)
            if (tl.flags[e][id].pending)
                report_violation(where() + ": the kernel ended with SetFlag<HardEvent::" +
                                 event_name(AscendC::HardEvent(e)) + ">(" + std::to_string(id) +
                                 ") never waited: the flag stays set into the next kernel on this core");
}

void flag_set(AscendC::HardEvent event, int32_t id, const Site& site) {
    CoreState& tl = core_state();
    if (current_core() < 0) fatal("SetFlag called outside a kernel core");
    if (id < 0 || id >= kEventIds) fatal("SetFlag<HardEvent::%s>(%d): event ids are EVENT_ID0..EVENT_ID7", event_name(event), id);
    FlagState& f = tl.flags[int(event)][id];
    int src, dst;
    event_pipes(event, &src, &dst);
    const uint64_t seq = tl.next_seq++;  // the SetFlag is an instruction of the source pipe
    const std::string flag = std::string("SetFlag<HardEvent::") + event_name(event) + ">(" + std::to_string(id) + ")";
    if (f.pending) {
        report_violation(where() + ": " + flag + " " + site_text(site) + " while the SetFlag " +
                         site_text(f.set_site) + " is not yet waited: two SetFlags on one event bit with no WaitFlag "
                         "between them are undefined (a SHMEM call with sync_id " + std::to_string(id) +
                         " pairs its own flags on that id)");
    } else if (src >= 0 && dst >= 0 && f.wait_seq != kNone && tl.known[src][f.wait_pipe] <= f.wait_seq) {
        // In program order the bit was waited, but nothing makes the destination pipe run that
        // WaitFlag before the source pipe runs this SetFlag: the pipes may set the bit twice.
        report_violation(where() + ": " + flag + " " + site_text(site) + " may run on " + pipe_name(src) +
                         " before WaitFlag<HardEvent::" + event_name(event) + ">(" + std::to_string(id) + ") " +
                         site_text(f.wait_site) + " has run on " + pipe_name(f.wait_pipe) +
                         ": nothing orders that wait before this set, so the event bit can be set twice with no wait "
                         "between (undefined; the next PipeBarrier<PIPE_ALL> hangs). Puts in flight on different UB "
                         "buffers need their own sync_id (asc-devkit SetFlag/WaitFlag; docs/hardware-rules.md#3-event-flags)");
    }
    f.pending = true;
    f.set_site = site;
    if (src >= 0) {
        // SetFlag runs on the source pipe once every earlier op of that pipe is complete, and
        // passes on what that pipe knew of the others.
        std::copy(std::begin(tl.known[src]), std::end(tl.known[src]), f.known);
        f.known[src] = seq + 1;
    } else {
        std::fill(std::begin(f.known), std::end(f.known), uint64_t(0));
    }
}

void flag_wait(AscendC::HardEvent event, int32_t id, const Site& site) {
    CoreState& tl = core_state();
    if (current_core() < 0) fatal("WaitFlag called outside a kernel core");
    if (id < 0 || id >= kEventIds) fatal("WaitFlag<HardEvent::%s>(%d): event ids are EVENT_ID0..EVENT_ID7", event_name(event), id);
    FlagState& f = tl.flags[int(event)][id];
    if (!f.pending)
        fatal("WaitFlag<HardEvent::%s>(%d) %s with no SetFlag before it: on the NPU this core waits forever",
              event_name(event), id, site_text(site).c_str());
    f.pending = false;
    int src, dst;
    event_pipes(event, &src, &dst);
    const uint64_t seq = tl.next_seq++;  // the WaitFlag is an instruction of the destination pipe
    // A wait on the scalar unit runs in program order, before everything issued after it.
    f.wait_seq = dst >= 0 && dst != kPipeS ? seq : kNone;
    f.wait_pipe = dst;
    f.wait_site = site;
    if (src == kPipeMte2 && !tl.mte2_late.empty()) run_mte2_late(f.known[kPipeMte2]);  // what the flag covers
    if (dst < 0) return;
    // The destination pipe's later ops start after what the flag covers; when the scalar unit
    // waits, it issues nothing to any pipe before then.
    for (int c = 0; c < kPipeCount; ++c) {
        if (dst != kPipeS && c != dst) continue;
        for (int x = 0; x < kPipeCount; ++x) tl.known[c][x] = std::max(tl.known[c][x], f.known[x]);
    }
}

void pipe_barrier(pipe_t pipe) {
    CoreState& tl = core_state();
    if (current_core() < 0) fatal("PipeBarrier called outside a kernel core");
    switch (pipe) {
    case PIPE_ALL:
        pipes_drain();
        break;
    case PIPE_S:
        fatal("PipeBarrier<PIPE_S>: not supported (asc-devkit: the scalar pipe orders itself)");
    case PIPE_V:
        tl.known[kPipeV][kPipeV] = tl.next_seq;
        break;
    case PIPE_MTE2:
        run_mte2_late(kNone);
        tl.known[kPipeMte2][kPipeMte2] = tl.next_seq;
        break;
    case PIPE_MTE3:
        tl.known[kPipeMte3][kPipeMte3] = tl.next_seq;
        break;
    default:
        break;  // M, MTE1, FIX: no UB ops on an AIV core
    }
}

}  // namespace twin
