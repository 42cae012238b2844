"""``combine-lab selftest``: a short form of the protocol checker and the fault suite, with
a one-screen report (cases tried, violations, hangs, leaks: all zero when healthy).

The broken kernels are the real kernel with one patch each, ``kernels/broken/<name>.patch``,
applied to a copy of ``kernels/`` in the build folder (:mod:`~combine_lab.run.broken`), each breaking
one rule the hardware or the protocol imposes (docs/protocol.md#5-kernel-protocol and
docs/hardware-rules.md#12-broken-kernels); the real kernel's text carries none of them. They are
built into their own build folder, never installed, and each must be caught by the twin in the
way :data:`BROKEN_KERNELS` states.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import psutil

from ..kernels import CLASSIC, DOUBLEPLANE
from ..case.case import case_from_arrays
from ..formats.casefiles import rank_file
from ..case.spec import CaseSpec
from .build import broken_binary, build, default_build_dir
from .launch import LaunchError, tagged_host_pids, tagged_segments
from ..planning.settings import variant_label
from .runner import prepare_case, run_case

#: A small case with SDMA segments at min_sdma_bytes=0 (zipf skew puts some above average).
CHECKER_SPEC = CaseSpec(pes=3, bs=12, h=20, topk=3, expert_per_pe=2, routing="zipf:1.2", dtype="float16_t")
# 3 cores x 3 tokens x topk 3: 9 status slots per core, so with 32 B slots the line of each core's
# last slot holds the next core's first (within a core, the next token's slots are waited for
# before the last token's are reset).
SHARED_LINE_SPEC = CaseSpec(pes=3, bs=9, h=20, topk=3, expert_per_pe=2, routing="zipf:1.2", dtype="float16_t")


def sdma_from_core_48_case():
    """50 PEs, every token routed to expert 0 on PE 0 (PE 48 twice as many as the rest), so
    PE 0's segment from source rank 48 is its only remote segment above average: at
    min_sdma_bytes=0 it goes by SDMA, from core 48 when a core serves one rank each."""
    pes, bs, h = 50, 2, 8
    spec = CaseSpec(pes=pes, bs=bs, h=h, topk=1, expert_per_pe=1, routing="external")
    ids = np.full((pes, bs, 1), -1, dtype=np.int32)
    ids[:, 0, 0] = 0
    ids[48, 1, 0] = 0
    return case_from_arrays(spec, np.ones((pes, bs, h)), ids, np.ones((pes, bs, 1)))


def many_sdma_rows_case():
    """3 PEs: all 300 tokens of PE 1 and one of PE 2 routed to expert 0 on PE 0, so PE 0's segment
    from source rank 1 (300 rows, above the average of 150.5) goes by SDMA at min_sdma_bytes=0, one
    SQE per row from one core: more than the 256 SQEs the SDMA ring is assumed to hold."""
    pes, bs, h = 3, 300, 8
    spec = CaseSpec(pes=pes, bs=bs, h=h, topk=1, expert_per_pe=1, routing="external", dtype="int32_t")
    ids = np.full((pes, bs, 1), -1, dtype=np.int32)
    ids[1, :, 0] = 0
    ids[2, 0, 0] = 0
    return case_from_arrays(spec, np.ones((pes, bs, h)), ids, np.ones((pes, bs, 1)))


#: A case whose rows go by SDMA in contiguous chunks in the segment variant (rows of 64 B, back to
#: back in the window) at min_sdma_bytes=0.
SEGMENT_SPEC = CaseSpec(pes=3, bs=12, h=32, topk=3, expert_per_pe=2, routing="zipf:1.2", dtype="float16_t")


def two_row_segments_case():
    """2 PEs, every token routed to expert 0 and expert 1: every segment holds 4 rows, so with 2
    cores per source rank each core's chunk of every segment is non-empty (2 rows each)."""
    spec = CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=1, routing="external", dtype="float16_t")
    ids = np.tile(np.array([0, 1], dtype=np.int32), (2, 4, 1))
    return case_from_arrays(spec, np.ones((2, 4, 16)), ids, np.full((2, 4, 2), .5))


#: What the twin says of a status put whose payload the issuing core has not completed
#: (host/twin/twin_order.cpp; docs/hardware-rules.md#14-happens-before), on every run.
MTE_NOT_COMPLETE = "is not complete: no aclshmem_quiet (or aclshmem_fence, PipeBarrier<PIPE_ALL>) on this core comes between them"
SDMA_NOT_COMPLETE = "is not complete: no aclshmemx_sdma_quiet (an MTE quiet does not complete SDMA) on this core comes between them"


@dataclass(frozen=True)
class BrokenKernel:
    """One deliberately broken kernel and how the twin must catch it.

    ``name``: its patch, ``kernels/broken/<name>.patch``; ``rule``: what it breaks;
    ``case``: the case (a CaseSpec, or a function making one); ``variant``, ``settings`` (the
    kernel settings label, docs/variants.md), ``min_sdma_bytes``, ``chaos_seed`` and ``env`` (e.g.
    COMBINE_TWIN_SOC) of the run; ``evidence``: text that a violation must contain (or a tuple:
    one of them, where the order the cores happen to run in decides which report comes first),
    or with ``fatal``, the error that stops the run (a fatal rule, or a hang and its timeout);
    ``corrupts``: x_out must also differ from golden.
    """

    name: str
    rule: str
    case: CaseSpec | Callable
    variant: str
    evidence: str | tuple[str, ...]
    min_sdma_bytes: int = 0
    chaos_seed: int | None = 1
    env: dict = field(default_factory=dict)
    fatal: bool = False
    corrupts: bool = False
    settings: str = "reference"

    def seen_in(self, text: str) -> bool:
        """The evidence (or one of its texts) is in ``text``."""
        return any(e in text for e in ((self.evidence,) if isinstance(self.evidence, str) else self.evidence))


BROKEN_KERNELS: dict[str, BrokenKernel] = {k.name: k for k in [
    BrokenKernel("mte_flag_before_quiet", "MTE status flags written before the quiet that completes their payload",
                 CHECKER_SPEC, CLASSIC, MTE_NOT_COMPLETE, min_sdma_bytes=2 << 20, chaos_seed=None),
    BrokenKernel("sdma_flag_before_sdma_quiet", "SDMA rows' flags written before the SDMA quiet",
                 CHECKER_SPEC, DOUBLEPLANE, SDMA_NOT_COMPLETE, chaos_seed=None),
    BrokenKernel("sdma_ring_overrun", "no SDMA quiet before the outstanding SQEs exceed the assumed ring depth (256)",
                 many_sdma_rows_case, DOUBLEPLANE, "more than the 256 its ring is assumed to hold", chaos_seed=None),
    BrokenKernel("ub_reuse", "one MTE staging buffer refilled while its last UB -> GM leg is in flight",
                 CHECKER_SPEC, CLASSIC, "UB reuse:", min_sdma_bytes=2 << 20, corrupts=True),
    BrokenKernel("sdma_from_core_48", "one core per source rank at 50 PEs: cores 48.. issue SDMA, which SHMEM "
                 "gives no stream", sdma_from_core_48_case, DOUBLEPLANE, "did nothing: SHMEM creates SDMA streams",
                 chaos_seed=None, env={"COMBINE_TWIN_SOC": "Ascend910B2"}, corrupts=True),
    BrokenKernel("shared_sync_id", "one sync id for both planes", CHECKER_SPEC, DOUBLEPLANE,
                 "serves both planes"),
    BrokenKernel("shared_mte_sync_id", "both MTE staging buffers' puts on one sync_id: MTE2 may set its bit again "
                 "before MTE3 waited", CHECKER_SPEC, CLASSIC,
                 "may run on MTE2 before WaitFlag<HardEvent::MTE2_MTE3>(1) inside aclshmemx_mte_put_nbi",
                 min_sdma_bytes=2 << 20, chaos_seed=None),
    BrokenKernel("shared_cache_line", "32 B status slots, two per 64 B cache line: a clean after a reset can undo "
                 "a neighbour's flag", SHARED_LINE_SPEC, CLASSIC,
                 "two status slots share a 64 B scalar cache line", min_sdma_bytes=2 << 20, chaos_seed=None),
    BrokenKernel("partial_status_wait", "a status slot waited on at its first word only", CHECKER_SPEC,
                 DOUBLEPLANE, "was waited on at word mask 0x01 of its 8 words"),
    BrokenKernel("ub_overlap", "the SDMA scratch placed inside an MTE staging buffer", CHECKER_SPEC, DOUBLEPLANE,
                 "UB regions overlap: UB [1024, 66560) used as MTE staging (by aclshmemx_mte_put_nbi (GM -> UB -> GM)) "
                 "and UB [1024, 1088) used as SDMA scratch", chaos_seed=None, fatal=True),
    BrokenKernel("ub_past_end", "an MTE staging buffer running past the core's 192 KiB UB",
                 CHECKER_SPEC, CLASSIC, "MTE staging UB [132096, 197632) runs past the core's 192 KiB UB",
                 min_sdma_bytes=2 << 20, chaos_seed=None, fatal=True),
    BrokenKernel("device_barrier", "SHMEM's device barrier_all in an AIV-only kernel (it is for MIX kernels)",
                 CHECKER_SPEC, CLASSIC, "aclshmem_barrier_all called from an AIV-only kernel",
                 min_sdma_bytes=2 << 20, chaos_seed=None, fatal=True),
    BrokenKernel("blocks_over_aiv", "41 blocks on a 40-core SoC with a core barrier: the 41st waits for a wave that "
                 "never comes", CaseSpec(pes=41, bs=2, h=8, topk=1, expert_per_pe=1), CLASSIC,
                 "exceeds the 40 AIV cores of Ascend910B3", min_sdma_bytes=2 << 20, chaos_seed=None,
                 env={"COMBINE_TWIN_SOC": "Ascend910B3", "COMBINE_TWIN_TIMEOUT_S": "2"}, fatal=True),
    # Stage 2's pipes (twin_pipes.cpp): each missing flag is reported always and, in chaos mode,
    # lets the pipes run the wrong way round, so x_out is wrong.
    BrokenKernel("no_mte2_v_wait", "stage 2 casts an input tile without waiting (MTE2_V) for its DataCopy",
                 CHECKER_SPEC, CLASSIC, "Cast (half -> float) reads UB [132096, 132136) before DataCopyPad (GM -> UB) "
                 "has written it (no SetFlag/WaitFlag<HardEvent::MTE2_V> between them)", min_sdma_bytes=2 << 20,
                 corrupts=True),
    BrokenKernel("no_v_mte2_wait", "stage 2 refills an input tile the vector unit may still read (no V_MTE2)",
                 CHECKER_SPEC, CLASSIC, "DataCopyPad (GM -> UB) writes UB [132096, 132136) while Cast (half -> float) "
                 "may still read it (no SetFlag/WaitFlag<HardEvent::V_MTE2> between them)", min_sdma_bytes=2 << 20,
                 corrupts=True),
    BrokenKernel("no_pipe_v_barrier", "stage 2 adds what Muls wrote with no PipeBarrier<PIPE_V> between them",
                 CHECKER_SPEC, CLASSIC, "Add (float) reads UB [148480, 148560) before Muls (float) has written it "
                 "(no PipeBarrier<PIPE_V> between them)", min_sdma_bytes=2 << 20, corrupts=True),
    BrokenKernel("no_v_mte3_wait", "stage 2 copies an output tile to x_out before the vector unit wrote it (no V_MTE3)",
                 CHECKER_SPEC, CLASSIC, "DataCopyPad (UB -> GM) reads UB [164864, 164904) before Cast (float -> half) "
                 "has written it (no SetFlag/WaitFlag<HardEvent::V_MTE3> between them)", min_sdma_bytes=2 << 20,
                 corrupts=True),
    BrokenKernel("no_mte3_v_wait", "stage 2 overwrites an output tile MTE3 may still copy out (no MTE3_V)",
                 CHECKER_SPEC, CLASSIC, "Cast (float -> half) writes UB [164864, 164904) while DataCopyPad (UB -> GM) "
                 "may still read it (no SetFlag/WaitFlag<HardEvent::MTE3_V> between them)", min_sdma_bytes=2 << 20,
                 corrupts=True),
    BrokenKernel("datacopy_unaligned", "stage 2 uses DataCopy for rows of 40 B: whole 32-byte blocks only",
                 CHECKER_SPEC, CLASSIC, "DataCopy (GM -> UB) of 20 half (40 B) to UB [132096, 132160): DataCopy moves "
                 "whole 32-byte blocks, so only 32 B arrive", min_sdma_bytes=2 << 20, chaos_seed=None, corrupts=True),
    BrokenKernel("no_init_soc_state", "vector instructions without AscendC::InitSocState() first", CHECKER_SPEC,
                 CLASSIC, "DataCopyPad (GM -> UB) before AscendC::InitSocState(): a kernel with LocalTensors at fixed "
                 "addresses (no TPipe) must set the core's mask mode and atomic state first", min_sdma_bytes=2 << 20,
                 chaos_seed=None),
    BrokenKernel("payload_before_flag", "stage 2 reads the last slot of each token without waiting for its flag",
                 CHECKER_SPEC, CLASSIC, "before any core of PE", min_sdma_bytes=2 << 20, chaos_seed=None),
    # The variants beyond the reference (docs/variants.md).
    BrokenKernel("segment_flag_before_sdma_quiet", "segment variant: a segment's flags written right after its SDMA "
                 "call, before the SDMA quiet that completes its last SQE", SEGMENT_SPEC, DOUBLEPLANE,
                 SDMA_NOT_COMPLETE, settings="segment", chaos_seed=None),
    BrokenKernel("no_bases_wait", "segment variant: rows put into a receiver's layout without waiting for the bases "
                 "it publishes", SEGMENT_SPEC, DOUBLEPLANE, "layout by expert before this core waited for PE",
                 settings="segment", chaos_seed=None),
    BrokenKernel("other_group_flag", "2 cores per source rank: each core writes the flags of the other core's chunk "
                 "(no core barrier orders that core's payload before them)", two_row_segments_case, CLASSIC,
                 ("with no core barrier between them", "with no payload put issued for it in this launch",
                  "before its payload was complete"), min_sdma_bytes=2 << 20, settings="c2", chaos_seed=None),
]}


#: The folder of a kernel written as SHMEM's examples are (docs/own-kernel.md), in a checkout.
REFSTYLE = Path(__file__).resolve().parents[2] / "tests" / "kernels" / "combine_refstyle"
REFSTYLE_SOURCE = "combine_refstyle_kernel.cpp"
#: The case the refstyle bugs run on: masked slots none (the refstyle kernel skips them anyway).
REFSTYLE_SPEC = CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=2, dtype="float16_t")


@dataclass(frozen=True)
class RefstyleBug:
    """A copy of :data:`REFSTYLE` with one realistic bug, and how a default run (no chaos) must catch it.

    ``old`` (text of the source, once) becomes ``new``; ``evidence``: text of the violation or error;
    ``at``: text of the line (of the changed source) that the report must name as
    ``combine_refstyle_kernel.cpp:<line>``.
    """

    name: str
    rule: str
    old: str
    new: str
    evidence: str
    at: str

    def source(self) -> str:
        """The changed kernel source. Raises ValueError when ``old`` is not in the folder's source."""
        text = (REFSTYLE / REFSTYLE_SOURCE).read_text()
        if text.count(self.old) < 1:
            raise ValueError(f"{self.name}: {self.old!r} is not in {REFSTYLE / REFSTYLE_SOURCE}")
        return text.replace(self.old, self.new, 1)

    def line(self) -> int:
        """The 1-based line of ``at`` in :meth:`source`."""
        return next(i for i, ln in enumerate(self.source().splitlines(), 1) if self.at in ln)

    def site(self) -> str:
        """``combine_refstyle_kernel.cpp:<line>``: what the report names."""
        return f"{REFSTYLE_SOURCE}:{self.line()}"


_STATUS_PUT = "aclshmemx_mte_put_nbi(status + slot * kSlotInts, ready, uint32_t(kSlotInts), core, EVENT_ID1);"
_WAIT = "aclshmem_signal_wait_until(status + (t * k + j) * kSlotInts + w"
_WRONG_WAIT = "aclshmem_signal_wait_until(status + (t * k) * kSlotInts + w"
REFSTYLE_BUGS: dict[str, RefstyleBug] = {b.name: b for b in [
    RefstyleBug("dropped_quiet", "the quiet between a row's payload put and its status put removed",
                f"aclshmem_quiet();\n                {_STATUS_PUT}", _STATUS_PUT, MTE_NOT_COMPLETE, _STATUS_PUT),
    RefstyleBug("never_reset", "status slots never reset after their wait: launch 1's flags release launch 2's waits",
                "status[t * k * kSlotInts + j] = 0;", "(void)j;", "read as ready in launch 2", _WAIT),
    RefstyleBug("sdma_status", "the status block sent by SDMA instead of MTE", _STATUS_PUT,
                "aclshmemx_sdma_put_nbi(status + slot * kSlotInts, status, (__ubuf__ int32_t *)(uint64_t(512)), 64, "
                "uint32_t(kSlotInts), core, EVENT_ID0);", "was written by SDMA", "aclshmemx_sdma_put_nbi(status"),
    RefstyleBug("stale_flag", "only the first of a token's k status slots reset: the others stay ready into the next "
                "launch", "j < k * kSlotInts; ++j", "j < kSlotInts; ++j", "read as ready in launch 2", _WAIT),
    RefstyleBug("wrong_slot_wait", "stage 2 waits on the token's first status slot for each of its k slots, then reads "
                "slot j's payload row without its flag", _WAIT, _WRONG_WAIT, "but no core of PE", _WRONG_WAIT),
]}


def try_refstyle_bug(name: str, folder: str | os.PathLike) -> tuple[bool, str]:
    """Write :data:`REFSTYLE_BUGS` ``name``'s copy of the refstyle folder into ``folder`` (an empty
    folder), build it and run it on :data:`REFSTYLE_SPEC` as ``combine-lab run --kernel-source`` does by
    default (no chaos); return (caught, what was seen). Caught: a violation or the run's error holds
    the bug's evidence and names its ``combine_refstyle_kernel.cpp:<line>``."""
    bug = REFSTYLE_BUGS[name]
    folder = Path(folder)
    for f in REFSTYLE.iterdir():
        if f.is_file():
            (folder / f.name).write_text(bug.source() if f.name == REFSTYLE_SOURCE else f.read_text())
    try:
        res = run_case(REFSTYLE_SPEC, kernel_source=folder, timeout_s=60)
        said = res.violations
    except LaunchError as e:
        said = e.stderr_lines()  # what the PEs said (the twin's report), not the error's wording
    hit = [s for s in said if bug.evidence in s and bug.site() in s]
    return bool(hit), (hit[0] if hit else (said[0] if said else "no violation"))


#: The real kernel's runs of the self-test per case: (variant, settings label, min_sdma_bytes).
REAL_KERNEL_RUNS = ((CLASSIC, "reference", 2 << 20), (DOUBLEPLANE, "reference", 0),
                    (DOUBLEPLANE, "segment-c2", 0), (CLASSIC, "c3", 2 << 20))


def build_broken_kernels(build_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Build every broken kernel of :data:`BROKEN_KERNELS` in one build folder (the twin compiled
    once, the kernel once per patch, ``kernels/broken/<name>.patch``, each on its own copy of
    ``kernels/`` there); returns name -> driver.

    Raises:
        BuildError: the build failed, or a patch no longer applies to the kernel (the message names
            the patch and its hunk: combine_lab.run.broken.BrokenPatchError).
    """
    folder = Path(build_dir) if build_dir is not None else default_build_dir("cpu").parent / "broken"
    build("cpu", build_dir=folder, broken=list(BROKEN_KERNELS))
    return {name: broken_binary(folder, name) for name in BROKEN_KERNELS}


def build_broken_kernel(name: str, build_dir: str | os.PathLike | None = None) -> Path:
    """The driver with the broken kernel ``name`` (a key of :data:`BROKEN_KERNELS`): the real kernel
    with its patch ``kernels/broken/<name>.patch`` applied (built with the others, once).

    Raises:
        KeyError: unknown name. BuildError: the build failed.
    """
    BROKEN_KERNELS[name]  # KeyError for an unknown name, before building anything
    return build_broken_kernels(build_dir)[name]


def try_broken_kernel(name: str, binary: Path) -> tuple[bool, str]:
    """Run broken kernel ``name`` (built at ``binary``) on its case; return (caught, what was seen).

    Caught means: a violation (or, for a fatal rule or a hang, the run's error) contains the
    kernel's evidence text, and x_out differs from golden where the kernel corrupts it.
    """
    k = BROKEN_KERNELS[name]
    case = k.case() if callable(k.case) else k.case
    try:
        res = run_case(case, k.variant, min_sdma_bytes=k.min_sdma_bytes, chaos_seed=k.chaos_seed, binary=binary,
                       env=dict(k.env), timeout_s=60, settings=k.settings)
    except LaunchError as e:
        lines = e.stderr_lines()  # what the PEs said (the twin's report), not the error's wording
        hit = [ln.strip() for ln in lines if k.seen_in(ln)]
        return (k.fatal and bool(hit)), (hit[0] if hit else (lines or str(e).splitlines())[0])
    seen = [v for v in res.violations if k.seen_in(v)]
    caught = not k.fatal and bool(seen) and (res.check_ok is False if k.corrupts else True)
    return caught, (seen[0] if seen else f"{res.violation_count} violations, x_out {'ok' if res.check_ok else 'wrong'}")


@dataclass
class Report:
    """Counts of the self-test; ``lines``: one line per check, for the screen."""

    cases: int = 0
    violations: int = 0   # by the real kernel (the broken ones must have some)
    mismatches: int = 0
    hangs: int = 0        # runs that timed out when they should have finished, or hung past their limit
    leaks: int = 0
    failures: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not (self.violations or self.mismatches or self.hangs or self.leaks or self.failures)

    def text(self) -> str:
        verdict = "healthy" if self.healthy else "NOT HEALTHY"
        tail = [f"cases tried: {self.cases}, violations: {self.violations}, mismatches: {self.mismatches}, "
                f"hangs: {self.hangs}, leaks: {self.leaks} -- {verdict}"]
        return "\n".join(["combine-lab selftest (CPU twin)"] + self.lines + [f"  FAILED: {f}" for f in self.failures]
                         + tail)


def run_selftest(seeds: int = 5) -> Report:
    """Run the short checker and fault suite on the twin; returns the :class:`Report`.

    Its runs carry their own session tag, so leaks are counted for them alone, whatever
    else runs on the machine.

    Args:
        seeds: chaos seeds for the real kernel (each case x :data:`REAL_KERNEL_RUNS` x seeds runs).
    """
    old_tag = os.environ.get("COMBINE_LAB_SESSION_TAG")
    tag = f"st{os.getpid()}x"
    os.environ["COMBINE_LAB_SESSION_TAG"] = tag
    try:
        return _run_selftest(seeds, tag)
    finally:
        if old_tag is None:
            os.environ.pop("COMBINE_LAB_SESSION_TAG", None)
        else:
            os.environ["COMBINE_LAB_SESSION_TAG"] = old_tag


def _run_selftest(seeds: int, tag: str) -> Report:
    """The checks in turn, each adding its counts and lines to one Report; leaks are what ``tag``
    holds beyond what it held before them."""
    rep = Report()
    me = psutil.Process()
    held = tagged_segments(tag), tagged_host_pids(tag), me.num_fds()
    _check_broken_kernels(rep)
    _check_refstyle_bugs(rep)
    _check_real_kernel(rep, seeds)
    _check_faults(rep)
    _count_leaks(rep, tag, me, held)
    return rep


def _check_broken_kernels(rep: Report) -> None:
    """1. The checker catches every broken kernel: the proof that a clean run below means something."""
    caught = []
    for name in BROKEN_KERNELS:
        ok, seen = try_broken_kernel(name, build_broken_kernel(name))
        rep.cases += 1
        if ok:
            caught.append(name)
        else:
            rep.failures.append(f"broken kernel {name} was not caught: {seen}")
    rep.lines.append(f"  checker      broken kernels caught: {len(caught)}/{len(BROKEN_KERNELS)}")
    width = max((len(n) for n in caught), default=0)  # one column for the rules, whatever the longest name
    for name in caught:
        rep.lines.append(f"    {name:{width}s}  {BROKEN_KERNELS[name].rule}")


def _check_refstyle_bugs(rep: Report) -> None:
    """2. Your kernel: the refstyle folder with one realistic bug each, caught on a default run
    (skipped, and said, where the checkout's refstyle folder is absent)."""
    if not REFSTYLE.is_dir():
        rep.lines.append(f"  your kernel  refstyle bugs skipped: no {REFSTYLE} (a checkout has it)")
        return
    found = []
    for name in REFSTYLE_BUGS:
        rep.cases += 1
        with tempfile.TemporaryDirectory(prefix="combine_refstyle_") as tmp:
            copy = Path(tmp) / "combine_refstyle"
            copy.mkdir()
            ok, seen = try_refstyle_bug(name, copy)
        if ok:
            found.append(name)
        else:
            rep.failures.append(f"refstyle bug {name} was not caught on a default run: {seen}")
    rep.lines.append(f"  your kernel  refstyle bugs caught on a default run: {len(found)}/{len(REFSTYLE_BUGS)}")
    width = max((len(n) for n in found), default=0)
    for name in found:
        rep.lines.append(f"    {name:{width}s}  {REFSTYLE_BUGS[name].rule}")


def _check_real_kernel(rep: Report, seeds: int) -> None:
    """3. The real kernel under chaos: no violation, x_out = golden, counters = plan, over every
    variant of REAL_KERNEL_RUNS and ``seeds`` chaos seeds."""
    specs = [CHECKER_SPEC, CaseSpec(pes=4, bs=8, h=33, topk=2, expert_per_pe=2, masked_fraction=0.25),
             CaseSpec(pes=2, bs=16, h=16, topk=4, expert_per_pe=2, routing="hot-expert:0.25", dtype="float16_t")]
    before = rep.violations + rep.mismatches
    for spec in specs:
        for variant, settings, min_sdma in REAL_KERNEL_RUNS:
            for seed in range(seeds):
                rep.cases += 1
                try:
                    res = run_case(spec, variant, min_sdma_bytes=min_sdma, chaos_seed=seed, timeout_s=60,
                                   settings=settings)
                except LaunchError as e:
                    rep.hangs += e.hung
                    rep.failures.append(f"{spec.case_id} {variant}/{settings} seed {seed}: {str(e).splitlines()[0]}")
                    continue
                rep.violations += res.violation_count
                rep.mismatches += (not res.check_ok) + len(res.counter_mismatches())
    labels = ", ".join(variant_label(v, st) for v, st, _ in REAL_KERNEL_RUNS)
    rep.lines.append(f"  real kernel  {len(specs)} cases x {len(REAL_KERNEL_RUNS)} variants ({labels}) x {seeds} chaos seeds: "
                     f"{rep.violations + rep.mismatches - before} violations or mismatches")


def _check_faults(rep: Report) -> None:
    """4. Faults: fully masked token and PE, repeated calls, a slot nobody sends (which must end,
    naming it, well before its limit)."""
    fault_ok = _masked_slots(rep) + _repeated_calls(rep) + _slot_nobody_sends(rep)
    rep.lines.append(f"  faults       masked slots, repeated calls, a slot nobody sends: {fault_ok}/3 as expected")
    if fault_ok != 3:
        rep.failures.append(f"{3 - fault_ok} fault cases misbehaved")


def _masked_slots(rep: Report) -> int:
    """1 if a fully masked token and a fully masked PE run and leave their x_out rows zero."""
    spec = CaseSpec(pes=2, bs=4, h=32, topk=2, expert_per_pe=2, dtype="float16_t", routing="external")
    ids = np.array([[[0, 2], [1, -1], [-1, -1], [3, 0]]] * 2, dtype=np.int32)
    res = run_case(case_from_arrays(spec, np.ones((2, 4, 32)), ids, np.full((2, 4, 2), .5)), DOUBLEPLANE,
                   min_sdma_bytes=0)
    rep.cases += 1
    return int(res.ok and not res.x_out[0][2].any())


def _repeated_calls(rep: Report) -> int:
    """1 if warmup and loops calls of one launch each pass the driver's repeat check."""
    res = run_case(CaseSpec(pes=2, bs=4, h=32, topk=2, expert_per_pe=2, routing="zipf:0.5"), DOUBLEPLANE,
                   min_sdma_bytes=0, warmup=2, loops=3, env={"COMBINE_HOST_REPEAT_CHECK": "1"})
    rep.cases += 1
    return int(res.driver_status == [0, 0])


def _slot_nobody_sends(rep: Report) -> int:
    """1 if a case whose rows were removed is reported as a wait that never ended, within 15 s."""
    with tempfile.TemporaryDirectory(prefix="combine_selftest_") as tmp:
        prepared = prepare_case(CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2), tmp)
        counts = rank_file(prepared.case_dir, 0, "ep_recv_count.bin")
        np.zeros(4, dtype=np.int32).tofile(counts)  # PE 0 sends nothing, but its owners wait
        t0 = time.monotonic()
        rep.cases += 1
        try:
            run_case(prepared, CLASSIC, timeout_s=20, env={"COMBINE_TWIN_TIMEOUT_S": "2"})
            rep.failures.append("a case whose rows were removed did not hang")
        except LaunchError as e:
            if e.wait is not None and time.monotonic() - t0 < 15:
                return 1
            rep.hangs += 1
            rep.failures.append(f"hang not reported as expected: {str(e).splitlines()[0]}")
    return 0


def _count_leaks(rep: Report, tag: str, me: psutil.Process, held: tuple) -> None:
    """5. Leaks: shared-memory segments, PE processes and open files of this session's tag beyond
    ``held``, what it held before the self-test."""
    segs0, pids0, fds0 = held
    segs, pids, fds = tagged_segments(tag) - segs0, tagged_host_pids(tag) - pids0, me.num_fds() - fds0
    rep.leaks = len(segs) + len(pids) + max(fds, 0)
    rep.lines.append(f"  leaks        shared-memory segments {len(segs)}, PE processes {len(pids)}, "
                     f"open files {max(fds, 0)}")
