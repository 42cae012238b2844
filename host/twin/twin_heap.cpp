// The symmetric heap, PE bootstrap, barriers, waits and failure handling of the twin.
#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shmem.h"
#include "twin_platform.h"
#include "twin_state.h"

namespace twin {

PeState& pe_state() {
    static PeState s;
    return s;
}

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint8_t* heap_base(int pe) {
    PeState& s = pe_state();
    return s.segment + kControlBytes + uint64_t(pe) * s.heap_bytes;
}

namespace {
thread_local const Site* tl_site = nullptr;
}

SiteScope::SiteScope(const Site& site) : outer_(tl_site) { tl_site = &site; }
SiteScope::~SiteScope() { tl_site = outer_; }
const Site* current_site() { return tl_site; }

void fatal(const char* fmt, ...) {
    PeState& s = pe_state();
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const int core = current_core();
    std::string at;
    if (tl_site != nullptr && tl_site->file != nullptr) {  // unless the message names the call already
        const std::string where = site_text(Site{tl_site->file, tl_site->line, nullptr});
        if (strstr(msg, where.c_str() + 3) == nullptr) at = " (" + site_text(*tl_site) + ")";
    }
    if (core >= 0)
        fprintf(stderr, "twin: PE %d core %d: %s%s%s\n", s.my_pe, core, msg, at.c_str(), launch_note().c_str());
    else
        fprintf(stderr, "twin: PE %d: %s\n", s.my_pe, msg);
    fflush(stderr);
    if (s.ctrl != nullptr) {
        int32_t none = -1;
        s.ctrl->abort_pe.compare_exchange_strong(none, s.my_pe);
    }
    if (!s.shm_name.empty()) shm_unlink(s.shm_name.c_str());  // ENOENT is fine: someone already did
    _exit(3);
}

void abort_peers() {
    PeState& s = pe_state();
    if (s.ctrl == nullptr) return;
    int32_t none = -1;
    s.ctrl->abort_pe.compare_exchange_strong(none, s.my_pe);
}

void note_progress() {
    PeState& s = pe_state();
    if (s.ctrl == nullptr) return;
    const uint64_t now = now_ns();
    // At most one store a millisecond: every PE's puts land here.
    if (now > s.ctrl->last_landing_ns.load(std::memory_order_relaxed) + 1000000ull)
        s.ctrl->last_landing_ns.store(now, std::memory_order_relaxed);
}

double idle_s() {
    PeState& s = pe_state();
    if (s.ctrl == nullptr) return 0.0;
    const uint64_t last = s.ctrl->last_landing_ns.load(std::memory_order_relaxed), now = now_ns();
    return now > last ? double(now - last) * 1e-9 : 0.0;
}

Waiter::Waiter(const char* what, double patience)
    : what_(what), timeout_s_(pe_state().timeout_s * patience), start_ns_(now_ns()) {}

double Waiter::elapsed_s() const { return double(now_ns() - start_ns_) * 1e-9; }

// Exits (status 4) when another PE has failed: its waits would never be answered.
static void stop_if_a_peer_failed(const char* what) {
    PeState& s = pe_state();
    if (s.ctrl == nullptr) return;
    const int32_t failed = s.ctrl->abort_pe.load(std::memory_order_acquire);
    if (failed >= 0 && failed != s.my_pe) {
        fprintf(stderr, "twin: PE %d: stopped %s because PE %d failed\n", s.my_pe, what, failed);
        fflush(stderr);
        _exit(4);
    }
}

// Many PEs x cores share two CPUs: yield first, then sleep with a growing back-off.
static void back_off(uint32_t spins) {
    if (spins < 16) {
        std::this_thread::yield();
    } else {
        const long us = spins < 64 ? 5 : (spins < 512 ? 50 : 500);
        timespec ts{0, us * 1000};
        nanosleep(&ts, nullptr);
    }
}

bool Waiter::keep_waiting() {
    stop_if_a_peer_failed(what_);
    if (elapsed_s() > timeout_s_) return false;
    back_off(++spins_);
    return true;
}

static std::string session_name(const char* ip_port) {
    const char* env = getenv("COMBINE_TWIN_SESSION");
    std::string raw = env && *env ? env : (ip_port ? ip_port : "default");
    std::string out = "/combine_twin_";
    for (char c : raw) out += (isalnum((unsigned char)c) || c == '-' || c == '_') ? c : '_';
    return out;
}

static void barrier_wait(Barrier& b, uint32_t parties, const char* what) {
    const uint32_t gen = b.generation.load(std::memory_order_acquire);
    if (b.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == parties) {
        b.arrived.store(0, std::memory_order_relaxed);
        b.generation.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    Waiter w(what, kBarrierPatience);
    while (b.generation.load(std::memory_order_acquire) == gen) {
        if (!w.keep_waiting())
            fatal("timed out after %.1f s in %s (%u of %u arrived)", w.elapsed_s(), what,
                  b.arrived.load(std::memory_order_relaxed), parties);
    }
}

}  // namespace twin

using namespace twin;

// A PE ended by a signal (its launcher killed: PR_SET_PDEATHSIG, docs/twin.md#2-sessions-and-cleanup; Ctrl-C;
// the launcher's SIGTERM) before every PE attached would leave the segment's name behind: the
// handler drops the name (unlink is async-signal-safe; ENOENT once PE 0 dropped it), then dies of
// the signal as before, so the launcher still reads how the PE ended.
static char g_segment_path[512];

static void drop_segment_and_die(int sig) {
    if (g_segment_path[0] != '\0') unlink(g_segment_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void drop_segment_on_signals(const std::string& name) {
    snprintf(g_segment_path, sizeof g_segment_path, "/dev/shm%s", name.c_str());
    struct sigaction sa {};
    sa.sa_handler = drop_segment_and_die;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
}

int aclshmemx_init_attr(aclshmemx_bootstrap_t flags, aclshmemx_init_attr_t* attr) {
    PeState& s = pe_state();
    if (s.initialised) return 0;
    if (flags != ACLSHMEMX_INIT_WITH_DEFAULT) {
        fprintf(stderr, "twin: aclshmemx_init_attr: bootstrap flags %u: the twin boots with ACLSHMEMX_INIT_WITH_DEFAULT "
                        "(ip_port) only\n", unsigned(flags));
        return -1;
    }
    if (attr == nullptr || attr->n_pes < 1 || attr->my_pe < 0 || attr->my_pe >= attr->n_pes) {
        fprintf(stderr, "twin: aclshmemx_init_attr: my_pe=%d n_pes=%d: need 0 <= my_pe < n_pes\n",
                attr ? attr->my_pe : -1, attr ? attr->n_pes : -1);
        return -1;
    }
    if (const char* t = getenv("COMBINE_TWIN_TIMEOUT_S")) s.timeout_s = atof(t) > 0 ? atof(t) : s.timeout_s;
    s.wait_s = s.timeout_s;
    if (const char* t = getenv("COMBINE_TWIN_WAIT_S")) s.wait_s = atof(t) > 0 ? std::min(atof(t), s.timeout_s) : s.wait_s;
    s.my_pe = attr->my_pe;
    s.n_pes = attr->n_pes;
    s.user_heap_bytes = (attr->local_mem_size + 4095) / 4096 * 4096;
    // The protocol checker keeps at most 44 bytes per window slot (a payload slot of >= 32 B and a
    // status slot of 64 B): half as much again is ample.
    s.heap_bytes = s.user_heap_bytes + (s.user_heap_bytes / 2 + (64u << 10) + 4095) / 4096 * 4096;
    s.shm_name = session_name(attr->ip_port);
    s.segment_bytes = kControlBytes + size_t(s.n_pes) * s.heap_bytes;

    int fd = -1;
    if (s.my_pe == 0) {
        drop_segment_on_signals(s.shm_name);  // before the name exists: no window where a signal leaks it
        fd = shm_open(s.shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) {
            const int err = errno;
            g_segment_path[0] = '\0';
            s.shm_name.clear();  // not ours: never unlink another run's segment
            fatal("cannot create shared-memory segment /dev/shm%s: %s (another run uses this session or ip_port; "
                  "set COMBINE_TWIN_SESSION to a fresh name)", session_name(attr->ip_port).c_str(), strerror(err));
        }
        s.shm_linked = true;
        if (ftruncate(fd, off_t(s.segment_bytes)) != 0)
            fatal("cannot size /dev/shm%s to %zu bytes: %s", s.shm_name.c_str(), s.segment_bytes, strerror(errno));
    } else {
        drop_segment_on_signals(s.shm_name);  // PE 0 may be gone first: any PE drops the run's name
        Waiter w("waiting for PE 0 to create the symmetric heap");
        for (;;) {
            fd = shm_open(s.shm_name.c_str(), O_RDWR, 0600);
            struct stat st {};
            if (fd >= 0 && fstat(fd, &st) == 0 && size_t(st.st_size) == s.segment_bytes) break;
            if (fd >= 0) close(fd);
            fd = -1;
            if (!w.keep_waiting())
                fatal("timed out after %.1f s waiting for PE 0 to create /dev/shm%s of %zu bytes", w.elapsed_s(),
                      s.shm_name.c_str(), s.segment_bytes);
        }
    }
    void* p = mmap(nullptr, s.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) fatal("cannot map %zu bytes of /dev/shm%s: %s", s.segment_bytes, s.shm_name.c_str(), strerror(errno));
    s.segment = static_cast<uint8_t*>(p);
    Control* ctrl = reinterpret_cast<Control*>(s.segment);
    if (s.my_pe == 0) {
        new (ctrl) Control();
        ctrl->n_pes = s.n_pes;
        ctrl->heap_bytes = s.heap_bytes;
        ctrl->attached.store(0);
        ctrl->abort_pe.store(-1);
        ctrl->last_landing_ns.store(now_ns());
        ctrl->magic.store(kMagic, std::memory_order_release);
    } else {
        Waiter w("waiting for PE 0 to initialise the symmetric heap");
        while (ctrl->magic.load(std::memory_order_acquire) != kMagic) {
            if (!w.keep_waiting()) fatal("timed out after %.1f s waiting for PE 0 to initialise /dev/shm%s",
                                         w.elapsed_s(), s.shm_name.c_str());
        }
        if (ctrl->n_pes != s.n_pes || ctrl->heap_bytes != s.heap_bytes)
            fatal("symmetric heap mismatch: PE 0 has n_pes=%d heap=%llu bytes, this PE n_pes=%d heap=%llu bytes",
                  ctrl->n_pes, (unsigned long long)ctrl->heap_bytes, s.n_pes, (unsigned long long)s.heap_bytes);
    }
    s.ctrl = ctrl;
    ctrl->attached.fetch_add(1, std::memory_order_acq_rel);
    {
        Waiter w("waiting for every PE to attach", kBarrierPatience);
        while (ctrl->attached.load(std::memory_order_acquire) < s.n_pes) {
            if (!w.keep_waiting())
                fatal("timed out after %.1f s waiting for all PEs to attach (%d of %d)", w.elapsed_s(),
                      ctrl->attached.load(), s.n_pes);
        }
    }
    // Every PE has mapped the segment: drop its name so nothing outlives the run.
    if (s.my_pe == 0) shm_unlink(s.shm_name.c_str());
    s.engines = uint32_t(attr->option_attr.data_op_engine_type);
    engines_start(s.engines);
    s.initialised = true;
    barrier_wait(ctrl->host_barrier, uint32_t(s.n_pes), "host barrier after init");
    return 0;
}

// SHMEM's heap (src/host/mem/shmem_mgr.cpp) rounds every size up to 16 B and hands out the first
// idle range that fits: aclshmem_malloc guarantees 16 B alignment only, and aclshmem_align a
// power-of-two alignment (else nullptr). The twin's bump allocator gives the same guarantees and
// no more, so a window that needs 64 B lines gets them from aclshmem_align, not from luck.
namespace {
void* heap_alloc(size_t alignment, size_t bytes, const char* call) {
    PeState& s = pe_state();
    if (bytes == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0) {
        fprintf(stderr, "twin: PE %d: %s: refused: size %zu, alignment %zu (SHMEM: size > 0, alignment a power "
                "of 2)\n", s.my_pe, call, bytes, alignment);
        return nullptr;
    }
    const uint64_t off = (s.heap_used + alignment - 1) / alignment * alignment;
    const uint64_t size = (uint64_t(bytes) + 15) / 16 * 16;
    if (!s.initialised || off + size > s.user_heap_bytes) {
        fprintf(stderr, "twin: PE %d: %s(%zu) does not fit: %llu of %llu heap bytes used\n", s.my_pe, call, bytes,
                (unsigned long long)off, (unsigned long long)s.user_heap_bytes);
        return nullptr;
    }
    s.heap_used = off + size;
    return heap_base(s.my_pe) + off;
}
}  // namespace

void* aclshmem_malloc(size_t bytes) { return heap_alloc(16, bytes, "aclshmem_malloc"); }

void* aclshmem_align(size_t alignment, size_t bytes) { return heap_alloc(alignment, bytes, "aclshmem_align"); }

void aclshmem_free(void*) {}  // bump allocator: released at finalize

uint64_t twin::reserve_alloc(uint64_t bytes, const char* what) {
    PeState& s = pe_state();
    const uint64_t need = (bytes + 63) / 64 * 64;
    if (s.reserve_used + need > s.heap_bytes - s.user_heap_bytes)
        fatal("twin reserve exhausted allocating %llu bytes for %s", (unsigned long long)bytes, what);
    s.reserve_used += need;
    return s.heap_bytes - s.reserve_used;
}

int aclshmem_finalize() {
    PeState& s = pe_state();
    if (!s.initialised) return 0;
    barrier_wait(s.ctrl->host_barrier, uint32_t(s.n_pes), "host barrier at finalize");
    engines_stop();
    munmap(s.segment, s.segment_bytes);
    s.segment = nullptr;
    s.ctrl = nullptr;
    s.initialised = false;
    return 0;
}

int aclshmem_my_pe() { return pe_state().my_pe; }
int aclshmem_n_pes() { return pe_state().n_pes; }

void* aclshmem_ptr(void* sym, int pe) {
    PeState& s = pe_state();
    uint8_t* p = static_cast<uint8_t*>(sym);
    uint8_t* mine = heap_base(s.my_pe);
    if (pe < 0 || pe >= s.n_pes || p < mine || p >= mine + s.user_heap_bytes) return nullptr;
    return heap_base(pe) + (p - mine);
}

void aclshmem_barrier_all() {
    PeState& s = pe_state();
    // SHMEM's device barriers work in MIX kernels only (shmem_device_cc.h); an AIV-only kernel
    // ends with a core barrier and the host calls aclshmem_barrier_all after the stream sync.
    if (current_core() >= 0)
        fatal("aclshmem_barrier_all called from an AIV-only kernel: SHMEM's device barrier is for MIX kernels; end "
              "the kernel with AscendC::SyncAll<true>() and call the host aclshmem_barrier_all after "
              "aclrtSynchronizeStream");
    barrier_wait(s.ctrl->host_barrier, uint32_t(s.n_pes), "host barrier_all");
}

static bool compares(int cmp, int32_t v, int32_t value) {
    switch (cmp) {
        case ACLSHMEM_CMP_EQ: return v == value;
        case ACLSHMEM_CMP_NE: return v != value;
        case ACLSHMEM_CMP_GT: return v > value;
        case ACLSHMEM_CMP_GE: return v >= value;
        case ACLSHMEM_CMP_LT: return v < value;
        default: return v <= value;
    }
}

// A core observed the word at `sig` (the protocol checker's waited words, the op stream's waits).
static void core_waited(int32_t* sig) {
    if (current_core() < 0) return;
    note_wait(sig);
    uint64_t slot = 0;
    if (region_kind(sig, &slot) == kRegionStatus) record_op("wait", -1, 4, (long long)slot);
}

namespace twin {
int int32_test(int32_t* sig, int cmp, int32_t value, const Site& site) {
    static thread_local uint32_t failed_polls = 0;  // of this thread since its last success
    if (compares(cmp, __atomic_load_n(sig, __ATOMIC_ACQUIRE), value)) {
        core_waited(sig);
        note_ready_read(sig, cmp, value, site);
        failed_polls = 0;
        return 1;
    }
    // A core spinning on test: give the other PEs' threads the CPU, and stop if a peer failed.
    stop_if_a_peer_failed("polling a signal");
    back_off(++failed_polls);
    return 0;
}

// Gives up once nothing has landed on any PE for the wait budget (COMBINE_TWIN_WAIT_S, sized
// from the case by the launcher), or after COMBINE_TWIN_TIMEOUT_S in all: a wait nobody will
// answer (a masked slot the kernel waits for) is reported soon after the traffic stops.
int32_t signal_wait_until(int32_t* sig, int cmp, int32_t value, const Site& site) {
    core_waited(sig);
    auto satisfied = [cmp, value](int32_t v) { return compares(cmp, v, value); };
    int32_t v = __atomic_load_n(sig, __ATOMIC_ACQUIRE);
    if (!satisfied(v)) {
        Waiter w("waiting for a signal");
        const double budget_s = pe_state().wait_s;
        while (!satisfied(v = __atomic_load_n(sig, __ATOMIC_ACQUIRE))) {
            const double quiet_s = idle_s();
            const bool idle = quiet_s > budget_s && w.elapsed_s() > budget_s;
            if (idle || !w.keep_waiting()) {
                uint64_t slot = 0;
                char why[160] = "";
                if (idle)
                    snprintf(why, sizeof why, "; nothing landed on any PE for %.1f s (the wait budget, "
                             "COMBINE_TWIN_WAIT_S, sized from the case)", quiet_s);
                if (region_kind(sig, &slot) == kRegionStatus)
                    fatal("timed out after %.1f s waiting for status slot %llu to become %d (it is %d): no PE sent "
                          "it%s (%s)", w.elapsed_s(), (unsigned long long)slot, value, v, why,
                          site_text(site).c_str());
                fatal("timed out after %.1f s waiting for the signal at heap offset %lld to become %d (it is %d)%s "
                      "(%s)", w.elapsed_s(), (long long)((uint8_t*)sig - heap_base(pe_state().my_pe)), value, v, why,
                      site_text(site).c_str());
            }
        }
    }
    note_ready_read(sig, cmp, value, site);
    return v;
}
}  // namespace twin
