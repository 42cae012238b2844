"""The timing model on a RECORDED operation stream: what a kernel really issued on the twin
(``COMBINE_TWIN_OPS``, host/twin/twin_ops.cpp; docs/formats.md#9-operation-stream), priced op by
op on a machine model, so that any kernel, yours included, is priced as it works. The reference's
doubleplane, for one, puts a row, quiets, puts its status flag and quiets again, row after row;
the lab's kernel pipelines a segment's rows through two staging buffers and quiets once.

The prices are :mod:`.replay`'s, applied to each operation in issue order, core by core
(microseconds; rates from the model):

- ``sdma_put``: ``sdma_issue_us`` of core time; the PE's ``sdma_engines`` serve every core's calls
  round-robin, each core's calls at their average cost (per call :func:`.costs.sdma_call_us`, of the
  pair's link class).
  ``sdma_quiet``: waits for this core's calls so far (their round-robin share of the engines'
  work), the core's last one also for the fair share of its links and of the PE's egress; then
  ``sdma_quiet_us``.
- ``mte_put``: the puts since the last quiet form a two-stage pipeline (GM -> UB at
  ``core_gm_GBps``; UB -> destination at ``core_gm_GBps`` locally, ``min(mte_remote, link)``
  remotely, plus ``mte_put_us``). ``quiet``: waits for that pipeline and, for remote puts, for the
  fair share of the links and egress moving the core's bytes so far (counted from its first MTE
  put; the egress without the SIO pair's bytes, :func:`.costs.egress_classes`), then ``quiet_us``.
- ``flag``: ``flag_us`` each; it lands at its owner ``flag_latency_us`` later.
- Stage 2 starts at a core's first ``wait``, ``load`` or ``store``: that is ``comm_only``. Per
  token, in the order the core first touches it: wait for the last flag of the slots it waits on
  (``wait_us`` per slot), read each slot it loads (``core_gm_GBps``) and reduce it
  (``h / vec_elems_per_us``), write its x_out row (one row at ``core_gm_GBps``). A kernel whose
  stage 2 reads the window with scalar loads (the reference's), which the twin cannot see, is
  charged as if it loaded each slot it waited on whose expert is valid. ``full_op``: the PE's
  slowest core plus ``barrier_us``.

For the lab's kernel, whose recorded stream is the plan-derived one (tests/model/test_model_stream.py),
this gives :func:`.replay.replay`'s times (tests/model/test_model_recorded.py).
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..case.case import Case
from ..errors import ParameterError
from .machines import NpuModel
from .costs import egress_classes, link_rate, mte_remote_rate, sdma_call_us, uplink_classes, uplink_share
from .replay import ModelledTimes, _rate, stage2_hbm_us

__all__ = ["Op", "RecordedStream", "read_stream", "replay_recorded", "model_kernel"]


@dataclass(frozen=True)
class Op:
    """One recorded operation: ``kind``, destination PE ``dst`` (-1: none), ``nbytes``, ``slot`` (a
    status slot for flag and wait, a payload slot for load, an x_out row for store; -1: none)."""

    kind: str
    dst: int
    nbytes: int
    slot: int


@dataclass
class RecordedStream:
    """The stream of one launch: ``ops[pe][core]`` in issue order, ``block_dim`` cores per PE."""

    ops: list[list[list[Op]]]
    block_dim: int

    @property
    def pes(self) -> int:
        return len(self.ops)


def read_stream(folder: str | os.PathLike, pes: int) -> RecordedStream:
    """The stream the twin recorded in ``folder`` (``ops_pe<r>.txt`` of PEs 0..pes-1, its last launch).

    Raises:
        FileNotFoundError: a PE's file is missing (the run recorded no stream).
    """
    per_pe, block_dim = [], 0
    for pe in range(pes):
        lines = (Path(folder) / f"ops_pe{pe}.txt").read_text().splitlines()
        cores: dict[int, list[Op]] = {}
        blocks = 0
        for ln in lines:
            if ln.startswith("# block_dim"):
                blocks = int(ln.split()[2])
                continue
            if ln.startswith("#"):  # "# launch_ns <begin> <end>": the trace's (combine_lab/results/trace.py)
                continue
            core, kind, dst, nbytes, slot = ln.split()[:5]  # then ub_off, t_ns
            cores.setdefault(int(core), []).append(Op(kind, int(dst), int(nbytes), int(slot)))
        blocks = max(blocks, max(cores, default=-1) + 1)
        block_dim = max(block_dim, blocks)
        per_pe.append(cores)
    return RecordedStream([[pe_ops.get(c, []) for c in range(block_dim)] for pe_ops in per_pe], block_dim)


#: The operations that begin stage 2: a core's first of them ends its ``comm_only``.
_STAGE2 = ("wait", "load", "store", "barrier")


def _stage2_start(ops: list[Op]) -> int:
    """Index of the core's first stage-2 operation (``len(ops)``: none): where ``comm_only`` ends."""
    return next((i for i, o in enumerate(ops) if o.kind in _STAGE2), len(ops))


def replay_recorded(stream: RecordedStream, case: Case, model: NpuModel, recorder=None) -> ModelledTimes:
    """Price ``stream`` (recorded while ``case`` ran) on ``model``: per PE and core ``comm_only`` and
    ``full_op``, microseconds (see the module's docstring).

    ``recorder`` (optional, for the trace: combine_lab/results/trace.py) is told the virtual times,
    us: ``op(pe, core, i, t0, t1)`` for stage-1 op ``i`` of the core (an MTE put: its UB ->
    destination leg; a quiet: from the later of its issue and the last leg's end),
    ``sdma_served(pe, core, calls, t)`` at each SDMA quiet (the core's first ``calls`` calls are done
    by ``t``), ``token(pe, core, token, t0, t_waited, t1)`` per stage-2 token (its waits end at
    ``t_waited``, its reduce and x_out row at ``t1``) and ``barrier(pe, core, t0, t1)``.

    Raises:
        ParameterError: ``stream`` recorded another PE count than the case's (``parameter="stream"``).
    """
    P, B = stream.pes, stream.block_dim
    if P != case.spec.pes:
        raise ParameterError(f"stream: {P} PEs recorded, the case has {case.spec.pes}", parameter="stream", value=P)
    rates = _Rates(model, P)
    incoming = _incoming(stream)
    comm = np.zeros((P, B))
    land: dict[tuple[int, int], float] = {}  # (owner PE, status slot) -> when its flag lands
    for pe in range(P):
        senders = _PeSenders(stream.ops[pe], pe, B, rates, incoming[pe])
        for c, ops in enumerate(stream.ops[pe]):
            comm[pe, c] = _core_stage1(ops, pe, c, rates, senders, land, recorder)
    full = _stage2(stream, case, rates, comm, land, recorder)
    full_op = np.repeat(full.max(axis=1, keepdims=True) + model["barrier_us"], B, axis=1)
    for pe in range(P) if recorder is not None else ():
        for c in range(B):
            recorder.barrier(pe, c, float(full[pe, c]), float(full_op[pe, c]))
    return ModelledTimes(comm, full_op, B, model.caption())


class _Rates:
    """The model's rates and classes for a launch of ``pes`` PEs (bytes per microsecond), read once:
    every op of every core is priced with them."""

    def __init__(self, m: NpuModel, pes: int):
        self.m = m
        self.egress = float(_rate(m["egress_GBps"]))
        self.core_gm = float(_rate(m["core_gm_GBps"]))
        self.hbm = float(_rate(m["hbm_GBps"]))
        self.classes = m.pair_class(pes)
        self.link = link_rate(m, self.classes)               # [pe, dst], bytes/us
        self.remote_rate = mte_remote_rate(m, self.classes)
        self.up_cls, self.up_rate = uplink_classes(m), uplink_share(m, pes)
        self.eg_cls = egress_classes(m)  # the die's egress: every class but the SIO pair's


def _incoming(stream: RecordedStream) -> np.ndarray:
    """float [pes]: the bytes written into each PE's window (its HBM takes them in)."""
    P = stream.pes
    incoming = np.zeros(P)
    for cores in stream.ops:
        for ops in cores:
            for o in ops:
                if o.kind in ("mte_put", "mte_put_ub", "sdma_put") and 0 <= o.dst < P:
                    incoming[o.dst] += o.nbytes
    return incoming


class _PeSenders:
    """What PE ``pe`` sends in all, core by core (its links, egress, HBM and uplinks' senders and every
    core's SDMA calls): the totals the fair shares of its cores' quiets are taken against."""

    def __init__(self, cores: list[list[Op]], pe: int, B: int, r: _Rates, incoming: float):
        m, classes, eg_cls, up_cls = r.m, r.classes, r.eg_cls, r.up_cls
        self.B = B
        self.link_sdma: dict[int, float] = {}
        core_remote = np.zeros(B)
        self.calls = np.zeros(B)
        work = np.zeros(B)
        sent = np.zeros(B)
        self.core_read = np.zeros(B)
        self.core_up = np.zeros(B)
        self.core_dst: dict[int, np.ndarray] = {}  # per destination: each core's remote MTE bytes to it
        sdma_up = sdma_eg = 0.0
        for c, ops in enumerate(cores):
            for o in ops:
                if o.kind == "mte_put":
                    self.core_read[c] += o.nbytes
                if o.kind == "mte_put" and o.dst != pe:
                    core_remote[c] += o.nbytes * eg_cls[classes[pe, o.dst]]
                    self.core_dst.setdefault(o.dst, np.zeros(B))[c] += o.nbytes
                    if up_cls[classes[pe, o.dst]]:
                        self.core_up[c] += o.nbytes
                elif o.kind == "sdma_put":
                    if o.dst != pe and up_cls[classes[pe, o.dst]]:
                        sdma_up += o.nbytes
                    self.link_sdma[o.dst] = self.link_sdma.get(o.dst, 0.0) + o.nbytes
                    sdma_eg += o.nbytes * eg_cls[classes[pe, o.dst]]
                    self.calls[c] += 1
                    work[c] += float(sdma_call_us(m, classes[pe, o.dst], o.nbytes))
                    sent[c] += o.nbytes
        calls = self.calls
        self.per_call = np.divide(work, calls, out=np.zeros(B), where=calls > 0)
        self.per_byte = np.divide(sent, calls, out=np.zeros(B), where=calls > 0)
        self.senders = np.append(core_remote, sdma_eg)
        self.eg_frac = sdma_eg / sum(self.link_sdma.values()) if sdma_eg else 0.0
        self.hbm_senders = np.append(self.core_read, [sum(self.link_sdma.values()), incoming])
        self.up_senders = np.append(self.core_up, sdma_up)
        self.up_frac = sdma_up / sum(self.link_sdma.values()) if sdma_up else 0.0

    def fair(self, x: float, who: np.ndarray | None = None) -> float:
        """Bytes moved when each sender (default: the egress's) has moved up to ``x``."""
        return float(np.minimum(self.senders if who is None else who, x).sum())

    def on_link(self, d: int, x: float) -> float:
        """Bytes on link pe -> ``d`` when each sender there has moved up to ``x``."""
        return float(np.minimum(self.core_dst.get(d, np.zeros(self.B)), x).sum()) + min(self.link_sdma.get(d, 0.0), x)

    def served(self, k: int, per: np.ndarray) -> float:
        """Round robin: the engines' work (``per``: per call) when every core's first ``k`` calls are done."""
        return float((np.minimum(self.calls, k) * per).sum())


def _sdma_quiet_done(i: int, last: int, issued: int, dsts: set[int], pe: int, r: _Rates, s: _PeSenders) -> float:
    """When an SDMA quiet's wait ends: this core's ``issued`` calls served round-robin by the engines;
    the core's last quiet (``i == last``) also waits for the fair share of its links, egress, HBM and
    uplinks."""
    m = r.m
    done = m["sdma_issue_us"] + s.served(issued, s.per_call) / m["sdma_engines"]
    if i == last and issued:
        links = max((s.on_link(d, s.link_sdma[d]) / r.link[pe, d] for d in dsts), default=0.0)
        x = s.served(issued, s.per_byte)
        done = max(done, links, s.fair(x * s.eg_frac) / r.egress, s.fair(x, s.hbm_senders) / r.hbm,
                   s.fair(x * s.up_frac, s.up_senders) / r.up_rate[pe] if s.up_frac else 0.0)
    return done


def _mte_quiet_bound(c: int, pe: int, pending: set[int], to_dst: dict[int, float], so_far: float,
                     last_run: bool, r: _Rates, s: _PeSenders) -> float:
    """How long after its first MTE put core ``c``'s quiet waits at least: the fair share of the links
    to its ``pending`` remote destinations and of the egress; on its last MTE run (``last_run``) also
    of its HBM reads and its bytes off the server."""
    bound = max((s.on_link(d, to_dst[d]) / r.link[pe, d] for d in pending), default=-math.inf)
    if pending:
        bound = max(bound, s.fair(so_far) / r.egress)
    if last_run:
        bound = max(bound, s.fair(s.core_read[c], s.hbm_senders) / r.hbm)
        if s.core_up[c]:
            bound = max(bound, s.fair(s.core_up[c], s.up_senders) / r.up_rate[pe])
    return bound


def _core_stage1(ops: list[Op], pe: int, c: int, r: _Rates, s: _PeSenders, land: dict, recorder) -> float:
    """Core ``c`` of ``pe``'s stage-1 ops in issue order (SDMA puts and quiets, the MTE pipeline and its
    quiets, flags, whose landings go into ``land``): its ``comm_only``, us."""
    m, classes, eg_cls = r.m, r.classes, r.eg_cls
    t, issued = 0.0, 0
    last_sdma_quiet = max((i for i, o in enumerate(ops) if o.kind == "sdma_quiet"), default=-1)
    stage2 = _stage2_start(ops)
    last_put = max((i for i, o in enumerate(ops[:stage2]) if o.kind in ("mte_put", "mte_put_ub")), default=-1)
    mte_start = None
    pipe_a = pipe_b = None  # the pipeline of the puts since the last quiet: GM -> UB, UB -> dst ends
    pending: set[int] = set()  # remote destinations among them
    to_dst: dict[int, float] = {}
    so_far = 0.0
    sdma_dsts: set[int] = set()
    for i in range(stage2):
        o = ops[i]
        t_in, span = t, None
        if o.kind == "sdma_put":
            t += m["sdma_issue_us"]
            issued += 1
            sdma_dsts.add(o.dst)
        elif o.kind == "sdma_quiet":
            done = _sdma_quiet_done(i, last_sdma_quiet, issued, sdma_dsts, pe, r, s)
            t = max(t, done) + m["sdma_quiet_us"]
            if recorder is not None:
                recorder.sdma_served(pe, c, issued, done)
        elif o.kind in ("mte_put", "mte_put_ub"):
            if mte_start is None:
                mte_start = t
            a = o.nbytes / r.core_gm if o.kind == "mte_put" else 0.0
            b = o.nbytes / (r.remote_rate[pe, o.dst] if o.dst != pe else r.core_gm) + m["mte_put_us"]
            pipe_a = (t if pipe_a is None else pipe_a) + a
            pipe_b = max(pipe_a, pipe_b if pipe_b is not None else -math.inf) + b
            span = (pipe_b - b, pipe_b)
            if o.dst != pe and o.kind == "mte_put":
                to_dst[o.dst] = to_dst.get(o.dst, 0.0) + o.nbytes
                so_far += o.nbytes * eg_cls[classes[pe, o.dst]]
                pending.add(o.dst)
        elif o.kind == "quiet":
            if pipe_b is not None:
                # last_put < i: the core's last MTE run, its HBM reads and its bytes off the server
                bound = _mte_quiet_bound(c, pe, pending, to_dst, so_far, last_put < i, r, s)
                t = max(t, pipe_b, mte_start + bound)
                t_in = max(t_in, pipe_b)
            t += m["quiet_us"]
            pipe_a = pipe_b = None
            pending = set()
        elif o.kind == "flag":
            t += m["flag_us"]
            land[(o.dst, o.slot)] = t + m["flag_latency_us"]
        if recorder is not None:
            recorder.op(pe, c, i, *(span or (t_in, t)))
    return t


def _tokens(ops: list[Op], topk: int) -> dict[int, tuple[set[int], set[int]]]:
    """A core's stage-2 tokens in the order it first touches them: each one's waited and loaded slots."""
    tokens: dict[int, tuple[set[int], set[int]]] = {}
    for o in ops[_stage2_start(ops):]:
        if o.kind not in ("wait", "load", "store"):
            continue
        token = o.slot if o.kind == "store" else o.slot // topk
        waited, loaded = tokens.setdefault(token, (set(), set()))
        if o.kind == "wait":
            waited.add(o.slot)
        elif o.kind == "load":
            loaded.add(o.slot)
    return tokens


def _stage2(stream: RecordedStream, case: Case, r: _Rates, comm: np.ndarray, land: dict, recorder) -> np.ndarray:
    """float [pes, cores]: when each core's stage 2 ends (us), token by token from its ``comm_only``,
    within the PE's shared HBM (:func:`.replay.stage2_hbm_us`)."""
    s, m = case.spec, r.m
    P, B = comm.shape
    row = float(s.h * s.itemsize)
    valid = (case.expert_ids >= 0) & (case.expert_ids < s.moe_expert_num)
    read = row / r.core_gm
    full = np.zeros((P, B))
    moved = np.zeros((P, B))  # stage 2's HBM bytes per core: rows read, x_out rows written
    for pe in range(P):
        for c, ops in enumerate(stream.ops[pe]):
            e = comm[pe, c]
            for token, (waited, loaded) in _tokens(ops, s.topk).items():
                arrive = max((land.get((pe, sl), -math.inf) for sl in waited), default=-math.inf)
                # a kernel that reads with scalar loads (invisible to the twin) reads each valid slot it waited on
                n_read = len(loaded) if loaded else sum(1 for sl in waited if valid[pe, sl // s.topk, sl % s.topk])
                e_in, waited_at = e, max(e, arrive) + len(waited) * m["wait_us"]
                e = waited_at + n_read * (read + s.h / m["vec_elems_per_us"]) + read
                moved[pe, c] += (n_read + 1) * row
                if recorder is not None:
                    recorder.token(pe, c, token, e_in, waited_at, e)
            full[pe, c] = e
    return np.maximum(full, stage2_hbm_us(comm, moved, m["hbm_GBps"]))


def model_kernel(case, kernel, model: NpuModel, *, variant: str | None = None, min_sdma_bytes: int | None = None,
                 prof_pe: int | str = 0, warmup: int = 5, loops: int = 50, timeout_s: float = 120.0, ipport=None,
                 binary=None):
    """Price your kernel (``kernel``: a folder or KernelSource) on ``model`` from the operation stream
    it records: one launch on the twin (the SoC of ``model`` where the twin models it), checked as any
    run is (a failed check or a hang raises), then :func:`replay_recorded`. ``case``: a CaseSpec, Case
    or PreparedCase. Returns a :class:`~combine_lab.model.modelled.ModelledResult` whose ``kernel`` is
    the kernel's label; ``warmup``/``loops`` are what its perf rows record (nothing more is launched).

    Raises:
        KernelSourceError, KernelFailed: as :func:`combine_lab.run.runner.run_case`; LaunchError when the
        run's check fails (a priced kernel must compute the combine); ParameterError: a bad warmup, loops
        or prof_pe, in :mod:`combine_lab.run.options`'s words (as every entry's).
    """
    from ..planning.cores import aiv_cores
    from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
    from ..run.kernel_source import kernel_source
    from ..run.launch import LaunchError
    from ..run.options import check_loops, check_warmup, profiled_pes
    from ..run.runner import prepare_case, run_case
    from .modelled import ModelledResult

    warmup, loops = check_warmup(warmup), check_loops(loops)  # before the case files are written
    ks = kernel_source(kernel)
    floor = DEFAULT_MIN_SDMA_BYTES if min_sdma_bytes is None else int(min_sdma_bytes)
    prepared = prepare_case(case)
    try:
        pes = prepared.case.spec.pes
        prof_pes = profiled_pes(prof_pe, pes)  # the one check of each run option (combine_lab.run.options)
        env = {}
        try:
            aiv_cores(model.soc)
            env["COMBINE_TWIN_SOC"] = model.soc  # the twin launches on the model's SoC
        except ValueError:
            pass
        with tempfile.TemporaryDirectory(prefix="combine_lab_ops_") as ops:
            env["COMBINE_TWIN_OPS"] = ops
            res = run_case(prepared, variant or ks.rule, min_sdma_bytes=floor, perf=False, timeout_s=timeout_s,
                           ipport=ipport, binary=binary, env=env, kernel_source=ks)
            if not res.check_ok or res.violation_count:
                bad = [f"PE {r}: {c}" for r, c in enumerate(res.checks) if not c.ok]
                raise LaunchError(f"{ks.label}: its run on the twin failed its check ({'; '.join(bad)}; "
                                  f"{res.violation_count} protocol violations): a kernel is priced only once it "
                                  "computes the combine")
            times = replay_recorded(read_stream(ops, pes), prepared.case, model)
    finally:
        if prepared is not case:
            prepared.cleanup()
    return ModelledResult(prepared.case, res.variant, floor, model, res.plan, times, prof_pes, int(warmup), int(loops),
                          kernel=ks.label, kernel_source=ks.path, ub_kb=190)
