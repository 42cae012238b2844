"""The operations the combine kernel issues, per PE and AIV core, derived from a case and its
plan without running anything (kernels/combine_kernel.cpp; docs/protocol.md#2-dispatch-layout, docs/decision-rule.md#1-the-rule and docs/protocol.md#5-kernel-protocol).

Stage 1, core ``c`` of PE ``d`` serves source ranks ``c, c + block_dim, ...``; for each of them,
local experts in order: (1) the SDMA puts of its SDMA segments, an SDMA quiet after every
256 issues; (2) per MTE segment: the payload puts, a quiet, the status flags; a quiet after
the last; (3) an SDMA quiet, the status flags of the SDMA rows, a quiet. Stage 2, tokens in
contiguous blocks per core: per token, wait for every valid slot, reduce, write x_out; then
the core barrier. A *run* is consecutive identical operations (``n`` puts of ``nbytes`` to
``dst``); :func:`core_runs` lists them, and the twin's recorded stream compresses to the same
runs (tests/model/test_model_stream.py).

:class:`CaseRows` holds what does not depend on the plan (each received row's segment,
position and slot), so that many plans of one case (``combine-lab suggest``) cost one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..case.case import Case
from ..planning.cores import kernel_constant, launch_block_dim
from ..planning.planner import sdma_mask

SDMA_QUIET_EVERY = kernel_constant("kSdmaQuietEvery")
SQE_BYTES = 1 << 20     # one SDMA descriptor carries up to 1 MiB (docs/hardware-rules.md#6-sdma)


@dataclass
class CaseRows:
    """Plan-independent facts of one case for the model.

    ``counts``: int64 [pes, epp*pes] rows per segment on each destination PE. Per received row
    (all PEs, in receive order, int64 [n_rows] each): ``dest`` (the PE holding it: the expert's
    owner, which sends it back), ``seg`` (segment index on dest), ``pos`` (index within its
    segment), ``owner`` (src_rank: the PE whose token it is), ``slot`` (token*topk + k on owner).
    ``valid``: bool [pes, bs, topk] (expert id in [0, E)). ``block_dim``: cores per launch.
    """

    pes: int
    epp: int
    bs: int
    topk: int
    h: int
    itemsize: int
    block_dim: int
    counts: np.ndarray
    dest: np.ndarray
    seg: np.ndarray
    pos: np.ndarray
    owner: np.ndarray
    slot: np.ndarray
    valid: np.ndarray

    @property
    def row_bytes(self) -> int:
        return self.h * self.itemsize

    def sdma(self, variant: str, min_sdma_bytes: int) -> np.ndarray:
        """bool [pes, epp*pes]: SDMA segments of ``variant`` (the planner's rule, one place)."""
        if variant == "classic":
            return np.zeros(self.counts.shape, dtype=bool)
        return sdma_mask(self.counts, self.row_bytes, min_sdma_bytes)


def case_rows(case: Case, soc: str) -> CaseRows:
    """:class:`CaseRows` of ``case`` for a launch on ``soc`` (block_dim = min(pes, AIV cores, 48))."""
    s = case.spec
    order = case._receive_order()  # flat slots sorted by expert, then slot
    per_rank = s.bs * s.topk
    ids = case.expert_ids.reshape(-1)[order].astype(np.int64)
    owner = order // per_rank
    dest = ids // s.expert_per_pe
    seg = (ids % s.expert_per_pe) * s.pes + owner
    key = ids * s.pes + owner  # non-decreasing along the order: one run per (dest, seg)
    n = len(order)
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if n else np.zeros(0, dtype=np.int64)
    group = np.cumsum(np.r_[True, key[1:] != key[:-1]]) - 1 if n else np.zeros(0, dtype=np.int64)
    pos = np.arange(n, dtype=np.int64) - (starts[group] if n else 0)
    E = s.moe_expert_num
    valid = (case.expert_ids >= 0) & (case.expert_ids < E)
    return CaseRows(s.pes, s.expert_per_pe, s.bs, s.topk, s.h, s.itemsize, launch_block_dim(s.pes, soc),
                    case.segment_counts.astype(np.int64), dest, seg, pos, owner, order % per_rank, valid)


@dataclass(frozen=True)
class Run:
    """``n`` consecutive identical operations of one core: ``kind`` in sdma_put, sdma_quiet,
    mte_put, quiet, flag, wait, reduce, barrier; ``dst`` PE (-1 when none), ``nbytes`` per
    operation (0 when none), ``seg`` (segment on this PE, or the token for wait/reduce, -1)."""

    kind: str
    dst: int = -1
    n: int = 1
    nbytes: int = 0
    seg: int = -1


def _append(runs: list[Run], r: Run) -> None:
    """Adds ``r``, merging it into the previous run when it is the same operation."""
    if r.n <= 0:
        return
    if runs and runs[-1].kind == r.kind and runs[-1].dst == r.dst and runs[-1].nbytes == r.nbytes \
            and runs[-1].seg == r.seg:
        last = runs[-1]
        runs[-1] = Run(last.kind, last.dst, last.n + r.n, last.nbytes, last.seg)
    else:
        runs.append(r)


def core_runs(rows: CaseRows, sdma: np.ndarray, pe: int, core: int, stage: int = 0) -> list[Run]:
    """The runs core ``core`` of PE ``pe`` issues: stage 1 (``stage=1``), stage 2 (``stage=2``)
    or both (0), in the kernel's order. ``sdma``: bool [pes, epp*pes] (:meth:`CaseRows.sdma`).

    Status flags are 32 B puts (``flag``); waits are per valid slot (``wait``, seg = token);
    ``reduce`` is one per token (n = its valid slots, nbytes = row bytes)."""
    P, B, epp, row = rows.pes, rows.block_dim, rows.epp, rows.row_bytes
    counts = rows.counts[pe]
    ranks = range(core, P, B)
    segs = [e * P + s for s in ranks for e in range(epp)]
    runs: list[Run] = []
    if stage in (0, 1):
        outstanding = 0
        sdma_rows = 0
        for g in segs:
            if not sdma[pe, g]:
                continue
            left = int(counts[g])
            sdma_rows += left
            while left:
                take = min(left, SDMA_QUIET_EVERY - outstanding)
                _append(runs, Run("sdma_put", g % P, take, row, g))
                left -= take
                outstanding += take
                if outstanding == SDMA_QUIET_EVERY:
                    _append(runs, Run("sdma_quiet"))
                    outstanding = 0
        any_mte = False
        for g in segs:
            if sdma[pe, g] or counts[g] == 0:
                continue
            _append(runs, Run("mte_put", g % P, int(counts[g]), row, g))
            _append(runs, Run("quiet"))
            _append(runs, Run("flag", g % P, int(counts[g]), 32, g))
            any_mte = True
        if any_mte:
            _append(runs, Run("quiet"))
        if sdma_rows:
            _append(runs, Run("sdma_quiet"))
            for g in segs:
                if sdma[pe, g]:
                    _append(runs, Run("flag", g % P, int(counts[g]), 32, g))
            _append(runs, Run("quiet"))
    if stage in (0, 2):
        per = -(-rows.bs // B)
        for t in range(core * per, min(rows.bs, (core + 1) * per)):
            nv = int(rows.valid[pe, t].sum())
            _append(runs, Run("wait", -1, nv, 32, t))
            _append(runs, Run("reduce", -1, nv, row, t))
        _append(runs, Run("barrier"))
    return runs


def recorded_runs(folder, pe: int, rows: CaseRows) -> dict[int, list[Run]]:
    """The runs each core of PE ``pe`` issued in the twin's last launch, from the operation stream
    it records with ``COMBINE_TWIN_OPS=<folder>`` (host/twin/twin_ops.cpp: ``ops_pe<r>.txt``),
    in :func:`core_runs` form. Stage 1 puts and flags carry no segment (seg -1: the twin sees
    addresses, not segments); the 8 word waits of a status slot are one wait; a token's waits
    are one ``wait`` run (n = its slots) and its payload loads one ``reduce`` run (n = the slots
    read, whatever the tiling), seg = the token.

    Raises:
        FileNotFoundError: no stream for ``pe`` in ``folder`` (the run did not record one).
    """
    from pathlib import Path

    lines = (Path(folder) / f"ops_pe{pe}.txt").read_text().splitlines()
    per_core: dict[int, list[tuple]] = {c: [] for c in range(rows.block_dim)}
    for ln in lines:
        if ln.startswith("#"):  # "# block_dim <n>"
            continue
        core, kind, dst, nbytes, slot, _ub = ln.split()
        if kind == "store":  # x_out rows: the model's reduce already writes them
            continue
        per_core.setdefault(int(core), []).append((kind, int(dst), int(nbytes), int(slot)))
    out = {}
    for core, ops in per_core.items():
        runs: list[Run] = []
        i = 0
        while i < len(ops):
            kind, dst, nbytes, slot = ops[i]
            if kind in ("wait", "load"):
                token = slot // rows.topk
                slots = []
                while i < len(ops) and ops[i][0] == kind and ops[i][3] // rows.topk == token:
                    if ops[i][3] not in slots:
                        slots.append(ops[i][3])
                    i += 1
                if kind == "wait":
                    _append(runs, Run("wait", -1, len(slots), 32, token))
                else:
                    _append(runs, Run("reduce", -1, len(slots), rows.row_bytes, token))
                continue
            if kind in ("mte_put", "sdma_put", "flag"):
                _append(runs, Run(kind, dst, 1, nbytes))
            else:  # quiet, sdma_quiet, barrier
                _append(runs, Run(kind))
            i += 1
        out[core] = runs
    return out


def without_segments(runs: list[Run]) -> list[Run]:
    """``runs`` with the segment of stage-1 operations dropped (as :func:`recorded_runs` has them),
    merging what that makes identical."""
    out: list[Run] = []
    for r in runs:
        seg = r.seg if r.kind in ("wait", "reduce") else -1
        _append(out, Run(r.kind, r.dst, r.n, r.nbytes, seg))
    return out
