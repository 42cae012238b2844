// The pipes of one AIV core on the twin: what the hardware does between the scalar unit,
// MTE2 (GM -> UB), MTE3 (UB -> GM) and the flags between them, and the UB they share.
//
// - SHMEM's MTE put stages through ONE UB buffer: per chunk GM -> UB (MTE2), then UB ->
//   remote GM (MTE3), with an MTE3->MTE2 flag between chunks but not after the last one
//   (hicann/shmem shmem_device_mte.hpp; combine-facts section 10). That last leg is in flight
//   until a quiet, a PIPE_ALL/PIPE_MTE3 barrier or an MTE3->MTE2 flag set after it. An MTE2
//   copy into an overlapping UB range before then is a "UB reuse" violation; in chaos mode
//   the leg really lands late, from whatever the UB holds by then, so x_out shows it.
// - UB ranges given to SHMEM lie inside the core's UB, below SHMEM's own reserve (188 KiB
//   and up), 32-byte aligned, and one range serves one role (MTE staging, SDMA scratch,
//   MTE source): overlapping roles are fatal, naming both ranges.
// - SetFlag/WaitFlag pair per (event, id): a wait with no set hangs the core on hardware
//   (fatal here), a second set before the wait is a violation, and a SHMEM call's internal
//   flags collide with a kernel's pending flag of the same id. One sync id serves one plane.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin_state.h"

namespace twin {
namespace {

const char* const kRoleName[3] = {"MTE staging", "SDMA scratch", "MTE source (UB -> GM)"};
const char* const kPlaneName[2] = {"MTE", "SDMA"};
constexpr int kEvents = int(AscendC::HardEvent::MAX);
constexpr int kEventIds = 8;

const char* event_name(AscendC::HardEvent e) {
    static const char* const names[] = {
        "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "M_V", "V_M", "V_V",
        "MTE3_MTE1", "MTE1_MTE3", "MTE1_V", "MTE2_M", "M_MTE2", "V_MTE1", "M_FIX", "FIX_M", "MTE3_MTE2", "MTE2_MTE3",
        "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S", "MTE2_FIX", "FIX_MTE2", "FIX_S", "M_S", "FIX_MTE3",
        "MTE1_FIX", "FIX_MTE1", "FIX_FIX"};
    const int i = int(e);
    return i >= 0 && i < kEvents ? names[i] : "?";
}

// MTE3 is the source pipe of these events: their flag completes the MTE3 work before it.
bool mte3_source(AscendC::HardEvent e) {
    using E = AscendC::HardEvent;
    return e == E::MTE3_MTE2 || e == E::MTE3_V || e == E::MTE3_S || e == E::MTE3_MTE1;
}

struct UbRange {
    UbRole role;
    uint32_t begin, end;
    std::string op;
};

struct Leg {
    Put put;
    uint32_t begin, end;  // UB range it reads
    uint64_t seq;
    bool landed;          // already copied (outside chaos mode, legs land at issue)
    std::string op;
};

struct CoreState {
    std::vector<UbRange> ranges;
    std::vector<Leg> legs;  // MTE3 legs not yet known complete, in issue order
    uint64_t next_seq = 0;
    int8_t pending[kEvents][kEventIds] = {};
    uint64_t mark[kEvents][kEventIds] = {};
    int sync_plane[256];    // -1, or the plane that used the id first
    bool sync_reported[256];
};

thread_local CoreState tl;

std::string where() {
    char buf[64];
    snprintf(buf, sizeof buf, "PE %d core %d", pe_state().my_pe, current_core());
    return buf;
}

std::string range_text(uint32_t b, uint32_t e) {
    char buf[64];
    snprintf(buf, sizeof buf, "UB [%u, %u)", b, e);
    return buf;
}

// Completes the legs for which `done(leg)` holds; in chaos mode they land now, shuffled.
template <typename Pred>
void complete_legs(Pred done, uint64_t salt) {
    std::vector<Put> late;
    std::vector<Leg> keep;
    for (Leg& l : tl.legs) {
        if (!done(l)) {
            keep.push_back(std::move(l));
        } else if (!l.landed) {
            late.push_back(l.put);
        }
    }
    tl.legs.swap(keep);
    land_shuffled(late, salt);
}

}  // namespace

uint32_t ub_use(const void* p, uint32_t bytes, UbRole role, const char* op) {
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
    if (end > ub)
        fatal("%s: %s %s runs past the core's %u KiB UB", op, kRoleName[int(role)], range_text(off, uint32_t(end)).c_str(),
              ub / 1024);
    if (end > kUbShmemReserveOff)
        fatal("%s: %s %s reaches into SHMEM's own UB (%u KiB and up, ACLSHMEM_INTERNAL_UB_BUF_START_ADDR)", op,
              kRoleName[int(role)], range_text(off, uint32_t(end)).c_str(), kUbShmemReserveOff / 1024);
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

void mte2_to_ub(uint32_t off, uint32_t bytes, const char* op) {
    const uint32_t end = off + bytes;
    for (const Leg& l : tl.legs) {
        if (off < l.end && l.begin < end) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s: UB reuse: %s copies GM -> %s while the UB -> GM leg of %s from %s to PE %d "
                     "is still in flight (no quiet or MTE3->MTE2 flag between them)", where().c_str(), op,
                     range_text(off, end).c_str(), l.op.c_str(), range_text(l.begin, l.end).c_str(), l.put.pe);
            report_violation(buf);
            break;
        }
    }
}

void mte3_from_ub(const Put& p, uint32_t off, const char* op) {
    Leg l{p, off, off + uint32_t((p.bytes + 31) / 32 * 32), tl.next_seq++, false, op};
    if (!chaos_seed()) {
        land(p);
        l.landed = true;
    }
    tl.legs.push_back(std::move(l));
}

void mte3_complete_all() { complete_legs([](const Leg&) { return true; }, 4); }

void sync_id_use(uint32_t sync_id, int plane, const char* op) {
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
    tl.ranges.clear();
    tl.legs.clear();
    tl.next_seq = 0;
    for (auto& row : tl.pending) std::fill(std::begin(row), std::end(row), int8_t(0));
    std::fill(std::begin(tl.sync_plane), std::end(tl.sync_plane), -1);
    std::fill(std::begin(tl.sync_reported), std::end(tl.sync_reported), false);
}

void pipes_core_end() {
    // The kernel's end drains every pipe.
    mte3_complete_all();
    for (int e = 0; e < kEvents; ++e)
        for (int id = 0; id < kEventIds; ++id)
            if (tl.pending[e][id])
                report_violation(where() + ": the kernel ended with SetFlag<HardEvent::" +
                                 event_name(AscendC::HardEvent(e)) + ">(" + std::to_string(id) +
                                 ") never waited: the flag stays set into the next kernel on this core");
}

void flag_set(AscendC::HardEvent event, int32_t id) {
    if (current_core() < 0) fatal("SetFlag called outside a kernel core");
    if (id < 0 || id >= kEventIds) fatal("SetFlag<HardEvent::%s>(%d): event ids are EVENT_ID0..EVENT_ID7", event_name(event), id);
    const int e = int(event);
    if (tl.pending[e][id])
        report_violation(where() + ": SetFlag<HardEvent::" + event_name(event) + ">(" + std::to_string(id) +
                         ") while an earlier SetFlag with that id is not yet waited (a SHMEM call with sync_id " +
                         std::to_string(id) + " pairs its own flags with it)");
    tl.pending[e][id] = 1;
    tl.mark[e][id] = tl.next_seq;
}

void flag_wait(AscendC::HardEvent event, int32_t id) {
    if (current_core() < 0) fatal("WaitFlag called outside a kernel core");
    if (id < 0 || id >= kEventIds) fatal("WaitFlag<HardEvent::%s>(%d): event ids are EVENT_ID0..EVENT_ID7", event_name(event), id);
    const int e = int(event);
    if (!tl.pending[e][id])
        fatal("WaitFlag<HardEvent::%s>(%d) with no SetFlag before it: on the NPU this core waits forever",
              event_name(event), id);
    tl.pending[e][id] = 0;
    if (mte3_source(event)) {
        const uint64_t mark = tl.mark[e][id];
        complete_legs([mark](const Leg& l) { return l.seq < mark; }, 5);
    }
}

void pipe_barrier(pipe_t pipe) {
    if (current_core() < 0) fatal("PipeBarrier called outside a kernel core");
    if (pipe == PIPE_ALL || pipe == PIPE_MTE3) mte3_complete_all();
}

}  // namespace twin
