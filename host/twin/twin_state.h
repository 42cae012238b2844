// Internal state of the CPU twin, shared by its translation units (not a public API).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin_core.h"  // the calling core, the SoC (twin_soc, current_core, ub_base, launch_note)

namespace twin {

// Control block at the start of the shared segment, before the PEs' heaps.
struct Barrier {
    std::atomic<uint32_t> arrived;
    std::atomic<uint32_t> generation;
};

struct Control {
    std::atomic<uint64_t> magic;  // set last by PE 0: the segment is ready
    int32_t n_pes;
    uint64_t heap_bytes;
    std::atomic<int32_t> attached;
    std::atomic<int32_t> abort_pe;  // -1, or the first PE that failed
    Barrier host_barrier;
    std::atomic<uint64_t> last_landing_ns;  // when a put last landed on any PE (or a launch began)
};

constexpr uint64_t kMagic = 0x636f6d62696e6531ull;  // "combine1"
constexpr size_t kControlBytes = 4096;

struct PeState {
    bool initialised = false;
    int my_pe = -1;
    int n_pes = 0;
    std::string shm_name;  // "/combine_twin_<session>"
    bool shm_linked = false;
    uint8_t* segment = nullptr;
    size_t segment_bytes = 0;
    Control* ctrl = nullptr;
    uint64_t heap_bytes = 0;     // per PE: what the host asked for, then the twin's own reserve
    uint64_t user_heap_bytes = 0;  // local_mem_size: the part aclshmem_malloc hands out
    uint64_t heap_used = 0;
    uint64_t reserve_used = 0;     // twin bookkeeping, allocated down from the heap's end
    double timeout_s = 60.0;
    double wait_s = 60.0;  // a status wait gives up once nothing landed anywhere for this long
    uint32_t engines = 0;
};

PeState& pe_state();

// Symmetric twin-private memory (every PE calls it in the same order); returns the offset
// from the heap base, or fatal when the reserve is exhausted.
uint64_t reserve_alloc(uint64_t bytes, const char* what);
uint8_t* heap_base(int pe);

// The SHMEM call the calling core is inside, while it runs: a fatal error in it names the kernel's
// line that made the call (a refused call says where it was made).
class SiteScope {
public:
    explicit SiteScope(const Site& site);
    ~SiteScope();
    SiteScope(const SiteScope&) = delete;
    SiteScope& operator=(const SiteScope&) = delete;
private:
    const Site* outer_;
};
const Site* current_site();

// Print "twin: PE p core c: <msg>" (plus the call site when inside a SHMEM call and the launch
// note), tell the other PEs, remove the segment name, exit 3.
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Back-off waiting: returns false once `timeout_s` has passed; exits if another PE aborted.
// Waits on other waiters (barriers) get this much more patience than the wait at the root
// of a hang (a signal or an SDMA quiet), so that the root is the one that reports.
constexpr double kBarrierPatience = 1.5;

class Waiter {
public:
    // `patience` scales the timeout: waits on other waiters (barriers, attach) get more, so
    // the wait at the root of a hang (a signal or SDMA quiet) is the one that reports it.
    explicit Waiter(const char* what, double patience = 1.0);
    bool keep_waiting();  // sleeps a little, checks abort and timeout
    double elapsed_s() const;
private:
    const char* what_;
    double timeout_s_;
    uint64_t start_ns_;
    uint32_t spins_ = 0;
};

uint64_t now_ns();
// A put landed (or a launch began): the job makes progress. Seconds since it last did.
void note_progress();
double idle_s();

// Chaos mode (COMBINE_TWIN_CHAOS=<seed>): puts land as late and in as odd an order as
// their semantics allow. 0 when off.
uint64_t chaos_seed();

constexpr int kPlaneMte = 0, kPlaneSdma = 1;
inline constexpr const char* kPlaneName[2] = {"MTE", "SDMA"};
// Cores (block indices) a PE's per-core tables hold.
inline constexpr int kMaxCores = 256;

// One copy to remote memory: `src` is GM (SDMA) or the issuing core's UB (an MTE3 leg).
struct Put {
    uint8_t* dst;         // remote address
    const void* dst_sym;  // local symmetric address (for the checker)
    const void* src;
    size_t bytes;
    int pe;
    int plane;
    Site site{};  // the kernel's call that issued it (status puts: named when their flag lands too early)
};
// The moment a put becomes visible at its destination (runs the status/payload checker).
void land(const Put& p);
// Lands `puts` in a seeded shuffled order (chaos mode) and clears it.
void land_shuffled(std::vector<Put>& puts, uint64_t salt);
// Counts a protocol violation and prints the first few.
void report_violation(const std::string& msg);

// Pipes of the calling core (twin_pipes.cpp): UB ranges by role, the UB operations of every
// pipe with what they read and write, pipe flags and sync ids. Every check names the PE,
// core, operation and UB range.
enum class UbRole { MteStaging = 0, SdmaScratch, MteSource, VectorTile };
// Registers `bytes` of the calling core's UB at `p` in `role` and returns its offset; fatal
// when outside the UB, in SHMEM's reserve, misaligned, or overlapping another role's range.
uint32_t ub_use(const void* p, uint32_t bytes, UbRole role, const char* op);

// The pipes of an AIV core whose UB accesses the twin tracks. S (the scalar unit) issues
// every instruction in order; its own UB loads and stores cannot be observed by the twin.
enum PipeIdx : int { kPipeS = 0, kPipeV, kPipeMte2, kPipeMte3, kPipeCount };

// [begin, end) byte offsets in the core's UB.
struct UbSpan {
    uint32_t begin = 0, end = 0;
};

enum class OpKind : uint8_t { CopyIn, CopyOut, Cast, Muls, Add, Axpy, Dup, ShmemStage, ShmemLeg };

// One instruction of a pipe that touches UB: what it reads and writes (for the hazard
// checks) and what it does (executed at issue, or in chaos mode at a drain). Vector
// operands are UB offsets with their element type (twin::Elem, kernel_operator.h).
struct PipeOp {
    OpKind kind = OpKind::CopyIn;
    int pipe = kPipeS;
    const char* name = "";
    UbSpan reads[2];
    int n_reads = 0;
    UbSpan write;
    bool writes = false;
    // Vector operands / copies (twin_vector.cpp).
    uint32_t dst_off = 0, src0_off = 0, src1_off = 0;
    uint8_t dst_elem = 0, src_elem = 0, round = 0;
    uint32_t count = 0;  // elements (vector) or bytes per block (copies)
    double scalar = 0.0;
    const uint8_t* gm_src = nullptr;
    uint8_t* gm_dst = nullptr;
    uint16_t blocks = 0;
    uint32_t ub_block_pitch = 0, gm_block_pitch = 0;  // bytes from one block's start to the next
    uint8_t left_pad = 0, right_pad = 0;              // elements
    bool is_pad = false;
    uint64_t pad_bits = 0;                            // padding value, as the element's bits
    // SHMEM's MTE put (twin_engines.cpp): the GM -> UB stage of a chunk, or its UB -> remote leg.
    Put put{};
};

// Issues `op` on its pipe: checks it against every UB operation of the other pipes (and of
// its own pipe) that no flag or barrier has ordered before it, reporting the first hazard
// (read after write, write after read, write after write) with the flag that was missing;
// then executes it now, or (chaos mode) keeps it for the next drain.
uint64_t pipe_issue(PipeOp& op);  // returns the op's seq on this core
// Whether ops of `pipe` with seq <= `seq` are known complete before the next op of `next`.
bool pipe_done_before(int next, int pipe, uint64_t seq);
// What the scalar unit knows complete of `pipe` (ops with seq below it), e.g. at a core barrier.
uint64_t pipe_known_by_scalar(int pipe);
// Executes one vector or copy op (twin_vector.cpp).
void vector_execute(const PipeOp& op);
// Every pipe's operations complete (PipeBarrier<PIPE_ALL>, quiet, SyncAll, kernel end): in
// chaos mode the kept operations run now, in an order only the flags constrain, chosen
// against the kernel: an unordered pair that conflicts runs in the order that corrupts.
void pipes_drain();
// A SHMEM call's sync_id on `plane`: one id serves one plane per core.
void sync_id_use(uint32_t sync_id, int plane, const char* op);
// Ascend C state of the core: AscendC::InitSocState() sets it; static Tensor programming
// (LocalTensors at fixed addresses, no TPipe) requires that before the first vector or
// DataCopy instruction, else `op` is a violation (reported once per core).
void soc_state_init();
void soc_state_require(const char* op);
// How the twin names what it reports (twin_names.cpp).
// "PE p core c" of the calling core, for messages.
std::string where();
// "at kernels/combine_kernel.cpp:128", or "inside <SHMEM call> called at ...".
std::string site_text(const Site& site);
std::string range_text(uint32_t begin, uint32_t end);
// A report's kind: its text with every number but a source line ("kernel.cpp:187") made '#'.
std::string kind_of(const std::string& report);
// "MTE2_V"; the pipes a HardEvent joins (-1 for those the twin does not track: M, MTE1, FIX); "MTE2".
const char* event_name(AscendC::HardEvent e);
void event_pipes(AscendC::HardEvent e, int* src, int* dst);
const char* pipe_name(int pipe);
void pipes_core_begin();
void pipes_core_end();
// A core thread ends: frees its pipe state.
void pipes_thread_end();

// The operation stream for the timing model (twin_ops.cpp; on with COMBINE_TWIN_OPS=<folder>).
void ops_begin_launch(uint32_t block_dim);
void record_op(const char* kind, int dst, long long bytes, long long slot = -1, long long ub = -1);
void ops_end_launch();
// now_ns() when the stream is on (0 when off), and one SDMA descriptor that ran from `t0` to now.
long long ops_clock_ns();
void record_sqe(int core, int dst, long long bytes, long long t0);

// Happens-before of payload and status (twin_order.cpp): payload regions get shadows (an id);
// each payload put records its engine's op seq, each status put checks that its payload's put is
// complete on the issuing core (or before a core barrier passed since), reporting it if not.
void order_begin_launch(uint32_t epoch);
int order_label_payload(uint64_t slots);
void order_payload_put(int id, int pe, uint64_t first, uint64_t last, int plane, uint64_t seq, const Site& site);
void order_status_put(int id, int pe, uint64_t row, uint64_t slot, const Site& site);
// Whether this PE issued payload row `row` on PE `pe` in this launch (so its status puts were checked).
bool order_payload_by_me(int id, int pe, uint64_t row);
uint64_t order_sdma_put();   // the calling core's next SDMA put: its seq
void order_sdma_quiet();     // the calling core's SDMA puts so far are complete
void order_barrier_enter();  // the calling core enters a core barrier: what it knows complete

// Receiver side (twin_receive.cpp): per payload region of this PE (`receive_label_payload`: its
// rows, returns its id), a core observing the slot of `row` ready in `launch` at `site`, a core
// reading rows [first, last] by `op` at `site`, and, once every PE's puts of `launch` landed, the
// check of one row whose status slot `slot` PE `writer`'s status put made ready in that launch: a
// read before any observation, or no observation at all, is a violation.
int receive_label_payload(uint64_t rows);
void receive_observed(int id, uint64_t row, uint32_t launch, const Site& site);
void receive_read(int id, uint64_t first, uint64_t last, uint32_t launch, const char* op, const Site& site);
void receive_check(int id, uint64_t slot, uint64_t row, uint32_t launch, int writer);
// A core reads `bytes` of GM at `src` by `op` at `site` (DataCopy, DataCopyPad GM -> UB): the
// payload rows of this PE it touches are checked against their flags (twin_checker.cpp).
void note_payload_read(const void* src, uint64_t bytes, const char* op, const Site& site);

// Engines: MTE/SDMA counters, region labels, SDMA thread.
void engines_start(uint32_t engine_mask);
void engines_stop();
void counters_begin_launch();
void counters_end_launch();
// SHMEM's soft core barrier (twin_kernel.cpp).
void core_barrier_soft();
// How many core barriers (soft or SyncAll) this PE's cores have completed so far.
uint32_t core_barriers_done();
// Lands whatever the calling core left outstanding when its kernel body returned.
void core_finish();
// A core waited on the word at `sig` (status slots must be waited on word by word).
void note_wait(const void* sig);
// A core's wait on the word at `sig` (cmp, value) was satisfied at `site`: a status slot read as
// ready that no status put of this launch made ready is a violation (a stale flag).
void note_ready_read(const void* sig, int cmp, int32_t value, const Site& site);
// The FFTS base address util_get_ffts_config hands out (twin_kernel.cpp checks it).
constexpr uint64_t kFftsToken = 0x46465453ull;  // "FFTS"
// Which labelled region holds `sym` (local symmetric address); -1 if none.
int region_kind(const void* sym, uint64_t* slot_index);

}  // namespace twin
