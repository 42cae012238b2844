"""A launch as a time-scaled trace: Chrome trace-event JSON, what Perfetto's UI (ui.perfetto.dev,
"Open trace file") and chrome://tracing open (docs/formats.md#13-trace; docs/lab.md#9-traces).

One process per PE (per variant, when several are traced), tracks (threads) for the host's
launch, each AIV core and each core's SDMA queue, named with metadata events. Every operation a
core issues is a complete slice (``"ph": "X"``) with its bytes, destination PE, status slot and
segment as args: MTE puts, SDMA calls, quiets, flag puts, waits and the stage-2 steps; every SDMA
descriptor is a slice on its queue's track; a flow arrow (``"ph": "s"`` / ``"f"``, one id) leads
from each payload (an MTE put, or an SDMA call's last descriptor) to the flag put that releases it.

Two clocks:

- **measured on the CPU twin** (:func:`twin_launch`): the operation stream the twin records with
  ``COMBINE_TWIN_OPS`` (docs/formats.md#9-operation-stream) stamps each operation when the core
  issues it; its slice runs to the core's next issue (the call and the scalar work after it), the
  core's last to the launch's end. Descriptors run from when the copy thread took them to when
  they landed. CPU threads on this machine: never an NPU's time.
- **modelled on <machine>** (:func:`model_launch`): the plan-derived stream
  (:func:`combine_lab.model.stream.core_runs`) priced op by op
  (:func:`combine_lab.model.recorded.replay_recorded`, whose times are :func:`.replay.replay`'s for
  the lab's kernel); an MTE put is its UB -> destination leg, and each core's SDMA calls between two
  of its SDMA quiets share the engines' time evenly (the model's round robin, on average).

:class:`TraceRecording` is ``--trace`` around a run of the harness: the checks before it, a
recording folder per run label on the twin (removed after), the file.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..case.case import Case, make_case
from ..errors import ParameterError
from ..folders import usable_folder
from ..formats.files import write_atomic
from ..model.machines import NpuModel
from ..model.recorded import Op, RecordedStream, replay_recorded
from ..model.stream import SQE_BYTES, CaseRows, case_rows, core_runs

__all__ = ["Slice", "Launch", "twin_launch", "model_launch", "trace_events", "write_trace", "TraceRecording",
           "HOST_TID", "core_tid", "queue_tid"]

HOST_TID = 0


def core_tid(core: int) -> int:
    """The track (tid) of AIV core ``core``: 1 + core."""
    return 1 + int(core)


def queue_tid(core: int) -> int:
    """The track (tid) of core ``core``'s SDMA queue: 1001 + core."""
    return 1001 + int(core)


#: Slice names by operation kind (docs/formats.md#9-operation-stream).
NAMES = {"mte_put": "MTE put", "mte_put_ub": "MTE put (UB)", "control": "control put", "flag": "flag put",
         "sdma_put": "SDMA call", "sdma_quiet": "SDMA quiet", "quiet": "quiet", "wait": "wait", "load": "load",
         "store": "store", "reduce": "reduce", "barrier": "barrier", "sqe": "SDMA descriptor"}


@dataclass
class Slice:
    """One operation on one track: ``kind`` (:data:`NAMES`), times ``t0``, ``t1`` in us from the
    trace's start, destination PE ``dst`` (-1: none), ``nbytes``, status ``slot`` (-1: none),
    ``segment`` on the sending PE (-1: not known)."""

    kind: str
    t0: float
    t1: float
    dst: int = -1
    nbytes: int = 0
    slot: int = -1
    segment: int = -1
    call: int = -1  # SDMA: the core's call index (descriptors name the call they belong to)


@dataclass
class Launch:
    """One launch of one variant: ``ops[(pe, core)]`` in issue order, ``sqes[(pe, core)]`` (the
    descriptors of core's SDMA queue, in the order they ran), ``host[pe]`` = (t0, t1) of the launch;
    ``clock``: "measured on the CPU twin" or the model's "modelled on <machine>"."""

    label: str
    pes: int
    block_dim: int
    clock: str
    ops: dict = field(default_factory=dict)
    sqes: dict = field(default_factory=dict)
    host: dict = field(default_factory=dict)


def _segments(case: Case, soc: str):
    """(dest PE, owner PE, status slot) -> (segment on dest, position in it), from the receive order."""
    rows = case_rows(case, soc)
    return {(int(d), int(o), int(sl)): (int(g), int(p))
            for d, o, sl, g, p in zip(rows.dest, rows.owner, rows.slot, rows.seg, rows.pos)}, rows


def twin_launch(folder: str | os.PathLike, case: Case, label: str) -> Launch:
    """The twin's last launch recorded in ``folder`` (``ops_pe<r>.txt``, ``sdma_pe<r>.txt``), measured
    times in us from the earliest launch start of any PE (one CLOCK_MONOTONIC for all).

    Raises:
        FileNotFoundError: the run recorded no stream (COMBINE_TWIN_OPS was not set for it).
    """
    folder = Path(folder)
    P = case.spec.pes
    parsed, spans, block_dim = [], {}, 0
    for pe in range(P):
        per_core: dict[int, list] = defaultdict(list)
        for ln in (folder / f"ops_pe{pe}.txt").read_text().splitlines():
            f = ln.split()
            if f[:2] == ["#", "block_dim"]:
                block_dim = max(block_dim, int(f[2]))
            elif f[:2] == ["#", "launch_ns"]:
                spans[pe] = (int(f[2]), int(f[3]))
            elif not ln.startswith("#"):
                per_core[int(f[0])].append((f[1], int(f[2]), int(f[3]), int(f[4]), int(f[6])))
        sq = defaultdict(list)
        for ln in (folder / f"sdma_pe{pe}.txt").read_text().splitlines():
            c, d, b, t0, t1 = map(int, ln.split())
            sq[c].append((d, b, t0, t1))
        parsed.append((per_core, sq))
    zero = min(s[0] for s in spans.values())
    us = lambda ns: (ns - zero) / 1e3  # noqa: E731
    seg_of, _ = _segments(case, _twin_soc())
    out = Launch(label, P, block_dim, "measured on the CPU twin")
    for pe, (per_core, sq) in enumerate(parsed):
        end = spans[pe][1]
        out.host[pe] = (us(spans[pe][0]), us(end))
        for c, ops in per_core.items():
            slices = []
            for i, (kind, dst, nbytes, slot, t) in enumerate(ops):
                t_next = ops[i + 1][4] if i + 1 < len(ops) else end
                seg = seg_of.get((pe, dst, slot), (-1, 0))[0] if kind == "flag" else -1
                slices.append(Slice(kind, us(t), us(max(t_next, t)), dst, nbytes, slot, seg))
            out.ops[(pe, c)] = slices
        for c, descs in sq.items():
            out.sqes[(pe, c)] = [Slice("sqe", us(t0), us(t1), d, b) for d, b, t0, t1 in descs]
        _number_calls(out, pe)
    return out


def _twin_soc() -> str:
    from ..planning.cores import TWIN_DEFAULT_SOC
    return os.environ.get("COMBINE_TWIN_SOC") or TWIN_DEFAULT_SOC


def _number_calls(launch: Launch, pe: int) -> None:
    """Each core's SDMA calls numbered in issue order, and each descriptor with the call it is part of
    (SHMEM cuts a call into ceil(bytes / 1 MiB) descriptors; one queue per core runs them in order)."""
    for (p, c), ops in launch.ops.items():
        if p != pe:
            continue
        descs = iter(launch.sqes.get((pe, c), []))
        k = 0
        for s in ops:
            if s.kind != "sdma_put":
                continue
            s.call = k
            for _ in range(max(-(-s.nbytes // SQE_BYTES), 1)):
                d = next(descs, None)
                if d is not None:
                    d.call, d.segment = k, s.segment
            k += 1


class _Recorder:
    """Collects :func:`replay_recorded`'s virtual times (its ``recorder`` argument)."""

    def __init__(self, stream: RecordedStream, info: dict):
        self.stream, self.info = stream, info
        self.ops: dict = defaultdict(list)
        self.served: dict = defaultdict(list)
        self.tokens: dict = defaultdict(list)
        self.barriers: dict = {}

    def op(self, pe, core, i, t0, t1):
        o = self.stream.ops[pe][core][i]
        self.ops[(pe, core)].append(Slice(o.kind, float(t0), float(t1), o.dst, o.nbytes, o.slot,
                                          self.info[(pe, core)][i]))

    def sdma_served(self, pe, core, calls, t):
        self.served[(pe, core)].append((int(calls), float(t)))

    def token(self, pe, core, token, t0, t_waited, t1):
        self.tokens[(pe, core)].append((int(token), float(t0), float(t_waited), float(t1)))

    def barrier(self, pe, core, t0, t1):
        self.barriers[(pe, core)] = (t0, t1)


def derived_stream(rows: CaseRows, sdma: np.ndarray) -> tuple[RecordedStream, dict]:
    """The plan-derived runs (:func:`core_runs`) as one :class:`Op` per operation, as the twin would
    record them: flags with their status slot on the owner, a token's waits one per valid slot and
    its reduce one ``load`` per slot read. Returns (stream, segment of each op: ``{(pe, core): [seg]}``)."""
    P, S = rows.pes, rows.counts.shape[1]
    slot_at = {(int(d), int(g), int(p)): int(sl) for d, g, p, sl in zip(rows.dest, rows.seg, rows.pos, rows.slot)}
    ops, info = [], {}
    for pe in range(P):
        per_pe = []
        for c in range(rows.block_dim):
            out, segs = [], []
            for r in core_runs(rows, sdma, pe, c):
                if r.kind == "flag":
                    b, _ = rows.chunk(int(rows.counts[pe, r.seg]), c)
                    new = [Op("flag", r.dst, r.nbytes, slot_at[(pe, r.seg, b + k)]) for k in range(r.n)]
                elif r.kind in ("wait", "reduce"):
                    slots = [r.seg * rows.topk + k for k in range(rows.topk) if rows.valid[pe, r.seg, k]]
                    new = [Op("wait" if r.kind == "wait" else "load", -1, r.nbytes, s) for s in slots]
                else:
                    new = [Op(r.kind, r.dst, r.nbytes, -1)] * r.n
                out += new
                segs += [r.seg if r.kind not in ("wait", "reduce") else -1] * len(new)
            per_pe.append(out)
            info[(pe, c)] = segs
        ops.append(per_pe)
    assert S == rows.epp * P
    return RecordedStream(ops, rows.block_dim), info


_SEGMENT_ON_MODEL = ("--trace on a timing model: settings {!r} (the segment layout) are priced as a whole, not op "
                     "by op; trace them on the twin (--clock wall)")


def model_launch(case: Case, variant: str, sdma: np.ndarray, model: NpuModel, label: str, settings=None) -> Launch:
    """``variant`` of ``case`` with SDMA segments ``sdma`` (bool [pes, epp*pes], the plan's) priced
    op by op on ``model``: virtual times in us from the launch (see the module's docstring).

    Raises:
        ParameterError: the segment layout's settings (its layout step is priced as a whole by the
            model, not op by op: docs/formats.md#13-trace).
    """
    rows = case_rows(case, model.soc, settings)
    if rows.settings.segment:
        raise ParameterError(_SEGMENT_ON_MODEL.format(rows.settings.label), parameter="trace",
                             value=rows.settings.label)
    stream, info = derived_stream(rows, sdma)
    rec = _Recorder(stream, info)
    times = replay_recorded(stream, case, model, recorder=rec)
    out = Launch(label, rows.pes, rows.block_dim, model.caption())
    for pe in range(rows.pes):
        out.host[pe] = (0.0, float(times.full_op[pe].max()))
        for c in range(rows.block_dim):
            slices = list(rec.ops[(pe, c)])
            for token, t0, tw, t1 in rec.tokens[(pe, c)]:
                slices.append(Slice("wait", t0, tw, slot=token * rows.topk))
                slices.append(Slice("reduce", tw, t1, nbytes=rows.row_bytes, slot=token * rows.topk))
            b0, b1 = rec.barriers[(pe, c)]
            slices.append(Slice("barrier", b0, b1))
            out.ops[(pe, c)] = slices
            out.sqes[(pe, c)] = _modelled_descriptors(slices, rec.served[(pe, c)])
        _number_calls(out, pe)
    return out


def _modelled_descriptors(ops: list[Slice], served: list[tuple[int, float]]) -> list[Slice]:
    """The core's SDMA calls on its queue: the calls between two SDMA quiets share the window from
    the previous quiet's completion to this one's evenly, none before its issue ends; each call's
    descriptors share its time evenly."""
    calls = [s for s in ops if s.kind == "sdma_put"]
    out, k0, prev_done, end = [], 0, 0.0, 0.0
    for k1, done in served:
        group = calls[k0:k1]
        w = (done - prev_done) / max(len(group), 1)
        for j, s in enumerate(group):
            start = max(end, s.t1, prev_done)
            end = max(start, prev_done + (j + 1) * w)
            n = max(-(-s.nbytes // SQE_BYTES), 1)
            for q in range(n):
                nb = min(SQE_BYTES, s.nbytes - q * SQE_BYTES) if s.nbytes else 0
                out.append(Slice("sqe", start + (end - start) * q / n, start + (end - start) * (q + 1) / n, s.dst, nb,
                                 segment=s.segment))
        k0, prev_done = k1, max(prev_done, done)
    return out


def _flows(launch: Launch, pe: int, core: int) -> list[tuple[Slice, tuple, Slice]]:
    """(payload, its track, flag) for each flag put of the core: a flag releases the payload of the
    plane its core quieted last (MTE: quiet, SDMA: SDMA quiet), the oldest not yet released to that PE
    (one SDMA call of a whole segment releases each of its rows' flags)."""
    fifo: dict = defaultdict(deque)
    last: dict = {}
    plane, out = "mte", []
    descs = launch.sqes.get((pe, core), [])
    last_desc = {d.call: d for d in descs}
    for s in launch.ops.get((pe, core), []):
        if s.kind == "mte_put" and s.dst >= 0:
            fifo[("mte", s.dst)].append((s, ("core", core)))
        elif s.kind == "sdma_put" and s.call in last_desc:
            fifo[("sdma", s.dst)].append((last_desc[s.call], ("queue", core)))
        elif s.kind in ("quiet", "sdma_quiet"):
            plane = "mte" if s.kind == "quiet" else "sdma"
        elif s.kind == "flag":
            q = fifo[(plane, s.dst)]
            got = q.popleft() if q else last.get((plane, s.dst))
            if got is not None:
                last[(plane, s.dst)] = got
                got[0].segment = got[0].segment if got[0].segment >= 0 else s.segment
                out.append((got[0], got[1], s))
    return out


def trace_events(launches: list[Launch], title: str = "") -> dict:
    """The trace of ``launches`` (one process per PE and launch, pid ``1000 * i + pe``) as Chrome
    trace-event JSON: ``{"traceEvents": [...], "displayTimeUnit": "ns", "metadata": {...}}``; ``ts``
    and ``dur`` in us, as the format has them."""
    ev: list[dict] = []
    flow_id = 0
    for i, L in enumerate(launches):
        for pe in range(L.pes):
            pid = 1000 * i + pe
            ev.append({"ph": "M", "pid": pid, "name": "process_name",
                       "args": {"name": f"{L.label} PE {pe} ({L.clock})"}})
            ev.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}})
            tracks = [(HOST_TID, "host: launch")]
            tracks += [(core_tid(c), f"AIV core {c}") for c in range(L.block_dim)]
            tracks += [(queue_tid(c), f"SDMA queue (core {c})") for c in range(L.block_dim)
                       if L.sqes.get((pe, c))]
            for tid, name in tracks:
                ev.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
                ev.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
            t0, t1 = L.host[pe]
            ev.append(_x(pid, HOST_TID, "launch", t0, t1, {"variant": L.label, "block_dim": L.block_dim}))
            for c in range(L.block_dim):
                for s in L.ops.get((pe, c), []):
                    ev.append(_x(pid, core_tid(c), NAMES.get(s.kind, s.kind), s.t0, s.t1, _args(s)))
                for s in L.sqes.get((pe, c), []):
                    ev.append(_x(pid, queue_tid(c), NAMES["sqe"], s.t0, s.t1, _args(s)))
                for payload, (where, core), flag in _flows(L, pe, c):
                    flow_id += 1
                    tid = core_tid(core) if where == "core" else queue_tid(core)
                    ev.append({"ph": "s", "id": flow_id, "pid": pid, "tid": tid, "name": "releases", "cat": "flow",
                               "ts": payload.t0 + (payload.t1 - payload.t0) / 2})
                    ev.append({"ph": "f", "bp": "e", "id": flow_id, "pid": pid, "tid": core_tid(c), "name": "releases",
                               "cat": "flow", "ts": flag.t0 + (flag.t1 - flag.t0) / 2})
    return {"traceEvents": ev, "displayTimeUnit": "ns",
            "metadata": {"title": title, "clocks": sorted({L.clock for L in launches})}}


def _x(pid, tid, name, t0, t1, args) -> dict:
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": "combine", "ts": round(float(t0), 6),
            "dur": round(max(float(t1) - float(t0), 0.0), 6), "args": args}


def _args(s: Slice) -> dict:
    a = {"bytes": int(s.nbytes)}
    for k in ("dst", "slot", "segment", "call"):
        v = getattr(s, k)
        if v >= 0:
            a["dst PE" if k == "dst" else k] = int(v)
    return a


def write_trace(path: str | os.PathLike, launches: list[Launch], title: str = "") -> Path:
    """Write the trace of ``launches`` to ``path`` whole or not at all (combine_lab/formats/files.py);
    returns the path. Raises ResultFileError naming the file when it cannot be written."""
    doc = trace_events(launches, title)
    for e in doc["traceEvents"]:  # JSON has no NaN: a time that is not one is a bug here
        if "ts" in e and not math.isfinite(e["ts"]):
            raise ValueError(f"trace: a non-finite time in {e}")
    return write_atomic(path, json.dumps(doc, separators=(",", ":")))


class TraceRecording:
    """What ``--trace`` needs around one ``run``/``compare`` (combine_lab/cli/run_cases.py; the app may use
    it the same way around :func:`combine_lab.harness.execute`): checked before anything runs
    (:meth:`check`), an environment per run label on the twin (:meth:`env`), the file after
    (:meth:`write`). A context manager: its recording folders are removed on the way out."""

    def __init__(self, path: str | None, model=None):
        self.path = Path(path) if path else None
        self.model = model
        self._dir: str | None = None

    def check(self, specs: list, kernels: list, target: str, settings: list = ()) -> None:
        """Raises ParameterError before anything runs: several cases, your kernel on a model, an NPU,
        the segment layout on a model (``settings``: the KernelSettings of the lab's runs)."""
        if self.path is None:
            return
        for st in settings if self.model is not None else ():
            if st.segment:
                raise ParameterError(_SEGMENT_ON_MODEL.format(st.label), parameter="trace", value=st.label)
        if len(specs) != 1:
            raise ParameterError(f"--trace {self.path}: traces one case, the flags make {len(specs)} (a sweep)",
                                 parameter="trace", said_as="--trace", value=str(self.path))
        if self.model is not None and kernels:
            raise ParameterError(f"--trace {self.path}: your kernel on a timing model is priced from one launch "
                                 "on the twin; trace it there (--clock wall)", parameter="trace", said_as="--trace",
                                 value=str(self.path))
        if self.model is None and target != "cpu":
            raise ParameterError(f"--trace {self.path}: the twin records the operation stream (--target cpu); on an "
                                 "NPU use msprof", parameter="trace", said_as="--trace", value=str(self.path))
        usable_folder(self.path.parent if str(self.path.parent) else Path("."), "--trace")

    def env(self, label: str) -> dict | None:
        """The environment of the twin run ``label``: its own COMBINE_TWIN_OPS folder; None untraced."""
        if self.path is None or self.model is not None:
            return None
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="combine_lab_trace_")
        folder = Path(self._dir) / re.sub(r"[^A-Za-z0-9_.-]", "_", label)
        folder.mkdir(exist_ok=True)
        return {"COMBINE_TWIN_OPS": str(folder)}

    def write(self, outcomes: list) -> Path | None:
        """The trace of each label's last launch among ``outcomes`` (those that ran), one process per
        PE and label; prints where it went. Returns the path, or None when not asked."""
        if self.path is None:
            return None
        last = {o.run.label: o for o in outcomes if o.result is not None and o.run.variant != "baseline"}
        launches = []
        for label, o in last.items():
            if self.model is not None:
                res = o.result
                sdma = (res.plan.segments["plane"].to_numpy() == "SDMA").reshape(o.spec.pes, -1)
                launches.append(model_launch(res.case, res.variant, sdma, self.model, label, res.settings))
            else:
                launches.append(twin_launch(o.run.env["COMBINE_TWIN_OPS"], make_case(o.spec), label))
        if not launches:
            return None
        spec = next(iter(last.values())).spec
        clock = launches[0].clock
        path = write_trace(self.path, launches, f"{spec.case_id} ({spec.routing}), {spec.pes} PEs, {clock}")
        print(f"trace: {path} ({clock}; open it in ui.perfetto.dev: Open trace file)")
        return path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        return False

