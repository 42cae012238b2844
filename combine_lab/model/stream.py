"""The operations the combine kernel issues, per PE and AIV core, derived from a case and its
plan without running anything (kernels/combine_kernel.cpp; docs/protocol.md#2-dispatch-layout, docs/decision-rule.md#1-the-rule and docs/protocol.md#5-kernel-protocol).

Stage 1, the cores form groups of ``cores_per_rank`` (``N``; docs/variants.md#2-cores-per-source-rank):
group ``g`` serves source ranks ``g, g + G, ...`` (``G = block_dim / N`` groups), core ``j`` of the
group the ``j``-th chunk of each segment's rows (``[n*j // N, n*(j+1) // N)``; with ``N = 1`` core
``c`` serves whole segments of ranks ``c, c + block_dim, ...``, the reference's structure). For each
rank, local experts in order: (1) the SDMA puts of its SDMA chunks, an SDMA quiet before a call's
SQEs would take the outstanding count past 256 and once it reaches 256 (every 256 calls of rows up
to 1 MiB); (2) per MTE chunk: the payload puts, a quiet, the status flags; a quiet after the last;
(3) an SDMA quiet, the status flags of the SDMA rows, a quiet. With the segment layout
(docs/variants.md#1-one-sdma-call-per-segment) stage 1 starts with the layout step (core 0: one
control put of the bases to each PE, a quiet, one 32 B ready put to each PE, a quiet; then every
core's barrier), and an SDMA chunk whose rows lie back to back (``h * sizeof(T)`` a multiple of
32) is one call of all its bytes (SHMEM cuts it into 1 MiB SQEs: :func:`sdma_sqes`). Stage 2,
tokens in contiguous blocks per core: per token, wait for every valid slot, reduce, write x_out;
then the core barrier. A *run* is consecutive identical operations (``n`` puts of ``nbytes`` to
``dst``); :func:`core_runs` lists them, and the twin's recorded stream compresses to the same
runs (tests/model/test_model_stream.py).

:class:`CaseRows` holds what does not depend on the plan (each received row's segment,
position and slot), so that many plans of one case (``combine-lab suggest``) cost one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..kernels import CLASSIC, DOUBLEPLANE
from ..case.case import Case
from ..planning.cores import kernel_constant, launch_block_dim
from ..planning.planner import sdma_mask
from ..planning.settings import REFERENCE, KernelSettings, check_kernel_settings, parse_settings

SDMA_QUIET_EVERY = kernel_constant("kSdmaQuietEvery")
SQE_BYTES = 1 << 20     # one SDMA descriptor carries up to 1 MiB (docs/hardware-rules.md#6-sdma)


@dataclass
class CaseRows:
    """Plan-independent facts of one case for the model (read-only once priced: stage 2 caches what it
    derives from them, :attr:`landing`).

    ``counts``: int64 [pes, epp*pes] rows per segment on each destination PE. Per received row
    (all PEs, in receive order, int64 [n_rows] each): ``dest`` (the PE holding it: the expert's
    owner, which sends it back), ``seg`` (segment index on dest), ``pos`` (index within its
    segment), ``owner`` (src_rank: the PE whose token it is), ``slot`` (token*topk + k on owner).
    ``valid``: bool [pes, bs, topk] (expert id in [0, E)). ``block_dim``: cores per launch
    (:func:`~combine_lab.planning.cores.launch_block_dim` of the settings' cores per rank).
    ``settings``: the kernel's :class:`~combine_lab.planning.settings.KernelSettings`.
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
    settings: KernelSettings = REFERENCE
    expert_ids: np.ndarray | None = None  # int [pes, bs*topk]: the segment layout's order (layout_slots)
    soc: str | None = None  # the SoC of the launch (block_dim of other settings: with_settings)

    @property
    def row_bytes(self) -> int:
        return self.h * self.itemsize

    @property
    def cores_per_rank(self) -> int:
        return self.settings.cores_per_rank

    @property
    def one_call(self) -> bool:
        """An SDMA chunk is one call: the segment layout with rows back to back in the window
        (``h * sizeof(T)`` a multiple of 32, so that the slot stride is the row)."""
        return self.settings.segment and self.row_bytes % 32 == 0

    def chunk(self, n, core: int):
        """Rows ``[begin, end)`` of a segment of ``n`` rows that core ``core`` sends (its chunk
        ``core % cores_per_rank``, the kernel's ChunkBegin/ChunkEnd); ``n`` int or int array."""
        N = self.cores_per_rank
        j = core % N
        return n * j // N, n * (j + 1) // N

    @cached_property
    def landing(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each status slot's flag comes from, plan-independent (stage 2 of
        :func:`.replay.replay`): int64 [pes*bs*topk], per slot (``owner*bs*topk + slot``) the index of
        its row's chunk in stage 1's flag order (``(dest*S + seg)*N + j``, S = epp*pes, chunk j of
        its segment), -1 for a slot without a row; float64 [pes*bs*topk]: its place in that chunk
        plus one (the flags written up to its own)."""
        N, S = self.cores_per_rank, self.counts.shape[1]
        n_seg = self.counts[self.dest, self.seg]
        j = ((self.pos + 1) * N - 1) // np.maximum(n_seg, 1)
        at = np.full(self.pes * self.bs * self.topk, -1, dtype=np.int64)
        after = np.zeros(len(at))
        where = self.owner * self.bs * self.topk + self.slot
        at[where] = (self.dest * S + self.seg) * N + j
        after[where] = self.pos - n_seg * j // N + 1
        return at, after

    @cached_property
    def valid_per_token(self) -> np.ndarray:
        """float64 [pes, bs]: valid slots of each token (the rows stage 2 reduces)."""
        return self.valid.sum(axis=2).astype(np.float64)

    @cached_property
    def incoming_bytes(self) -> np.ndarray:
        """float64 [pes]: bytes stage 1 writes into each PE's window, from every PE (its own
        tokens' rows): what its HBM takes in while it sends (docs/timing-model.md#3-costs)."""
        return np.bincount(self.owner, minlength=self.pes).astype(np.float64) * self.row_bytes

    def with_settings(self, settings: KernelSettings | str | None) -> "CaseRows":
        """These rows under other kernel ``settings`` (their block_dim on the same SoC).

        Raises:
            ParameterError: as :func:`case_rows`.
        """
        from dataclasses import replace

        settings = parse_settings(settings)
        if settings == self.settings:
            return self
        if settings.cores_per_rank != 1:
            check_kernel_settings(settings, DOUBLEPLANE, self.soc)
        return replace(self, settings=settings, block_dim=launch_block_dim(self.pes, self.soc, settings.cores_per_rank))

    def layout_slots(self, pe: int) -> np.ndarray:
        """int64 [valid slots of ``pe``]: the status slot whose row lies at each layout row of the
        segment layout on ``pe`` (valid slots by expert, then slot: the kernel's PlaceRows)."""
        ids = self.expert_ids[pe].reshape(-1)
        slots = np.flatnonzero(self.valid[pe].reshape(-1))
        return slots[np.lexsort((slots, ids[slots]))].astype(np.int64)

    def sdma(self, variant: str, min_sdma_bytes: int) -> np.ndarray:
        """bool [pes, epp*pes]: SDMA segments of ``variant`` (the planner's rule, one place)."""
        if variant == CLASSIC:
            return np.zeros(self.counts.shape, dtype=bool)
        return sdma_mask(self.counts, self.row_bytes, min_sdma_bytes)


def case_rows(case: Case, soc: str, settings: KernelSettings | str | None = None) -> CaseRows:
    """:class:`CaseRows` of ``case`` for a launch on ``soc`` with the kernel's ``settings``
    (KernelSettings or a settings label; default the reference's): block_dim =
    ``launch_block_dim(pes, soc, cores_per_rank)`` (min(pes, AIV cores, 48) for one core per rank).

    Raises:
        ParameterError: ``settings`` is not a settings label, or asks more cores per rank than
            the SoC has (:func:`~combine_lab.planning.settings.check_kernel_settings`).
    """
    settings = parse_settings(settings)
    if settings.cores_per_rank != 1:
        check_kernel_settings(settings, DOUBLEPLANE, soc)
    s = case.spec
    order = case._receive_order()  # flat slots sorted by expert, then slot
    per_rank = s.bs * s.topk
    # The order runs through the (dest, seg) pairs in the order of segment_counts' flat index
    # (expert e = dest*epp + local, then the slot's rank: key dest*S + local*pes + owner), so
    # each pair's rows are one run of counts[dest, seg] rows: dest, seg and the place in the run
    # follow from the counts alone, without sorting or comparing 2**21 keys.
    counts = case.segment_counts.astype(np.int64)
    S = counts.shape[1]
    run = counts.ravel()
    run_id = np.repeat(np.arange(run.size, dtype=np.int64), run)
    dest, seg = run_id // S, run_id % S
    pos = np.arange(len(order), dtype=np.int64)
    pos -= np.repeat(np.cumsum(run) - run, run)
    owner = order // per_rank
    E = s.moe_expert_num
    valid = (case.expert_ids >= 0) & (case.expert_ids < E)
    rows = CaseRows(s.pes, s.expert_per_pe, s.bs, s.topk, s.h, s.itemsize,
                    launch_block_dim(s.pes, soc, settings.cores_per_rank), counts, dest,
                    seg, pos, owner, order % per_rank, valid, settings, case.expert_ids.reshape(s.pes, -1), soc)
    return rows


@dataclass(frozen=True)
class Run:
    """``n`` consecutive identical operations of one core: ``kind`` in sdma_put, sdma_quiet,
    mte_put, quiet, flag, control, wait, reduce, barrier; ``dst`` PE (-1 when none), ``nbytes`` per
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
    or both (0), in the kernel's order, under ``rows.settings``. ``sdma``: bool [pes, epp*pes]
    (:meth:`CaseRows.sdma`).

    Status flags are 32 B puts (``flag``); the segment layout's bases and ready blocks are
    ``control`` puts (``4*epp`` and 32 B, core 0); waits are per valid slot (``wait``, seg =
    token); ``reduce`` is one per token (n = its valid slots, nbytes = row bytes)."""
    P, B, epp, row = rows.pes, rows.block_dim, rows.epp, rows.row_bytes
    N = rows.cores_per_rank
    G = B // N  # groups: one per source rank served at a time
    counts = rows.counts[pe]
    ranks = range(core // N, P, G)
    segs = [e * P + s for s in ranks for e in range(epp)]
    mine = {g: rows.chunk(int(counts[g]), core) for g in segs}
    take_n = {g: e - b for g, (b, e) in mine.items()}
    runs: list[Run] = []
    if stage in (0, 1):
        if rows.settings.segment:  # the layout step (LayOut): core 0 publishes, every core meets
            if core == 0:
                for d in range(P):
                    _append(runs, Run("control", d, 1, 4 * epp))
                _append(runs, Run("quiet"))
                for d in range(P):
                    _append(runs, Run("control", d, 1, 32))
                _append(runs, Run("quiet"))
            _append(runs, Run("barrier"))
        outstanding = 0
        sdma_rows = 0
        for g in segs:
            k = take_n[g]
            if not sdma[pe, g] or k == 0:
                continue
            sdma_rows += k
            calls, nbytes = (1, k * row) if rows.one_call else (k, row)
            sqes = -(-nbytes // SQE_BYTES)  # per call: the kernel bounds SQEs, not calls
            while calls:
                if outstanding and outstanding + sqes > SDMA_QUIET_EVERY:  # before a call that would overflow
                    _append(runs, Run("sdma_quiet"))
                    outstanding = 0
                take = max(1, min(calls, (SDMA_QUIET_EVERY - outstanding) // sqes))
                _append(runs, Run("sdma_put", g % P, take, nbytes, g))
                calls -= take
                outstanding += take * sqes
                if outstanding >= SDMA_QUIET_EVERY:
                    _append(runs, Run("sdma_quiet"))
                    outstanding = 0
        any_mte = False
        for g in segs:
            k = take_n[g]
            if sdma[pe, g] or k == 0:
                continue
            _append(runs, Run("mte_put", g % P, k, row, g))
            _append(runs, Run("quiet"))
            _append(runs, Run("flag", g % P, k, 32, g))
            any_mte = True
        if any_mte:
            _append(runs, Run("quiet"))
        if sdma_rows:
            _append(runs, Run("sdma_quiet"))
            for g in segs:
                if sdma[pe, g]:
                    _append(runs, Run("flag", g % P, take_n[g], 32, g))
            _append(runs, Run("quiet"))
    if stage in (0, 2):
        per = -(-rows.bs // B)
        for t in range(core * per, min(rows.bs, (core + 1) * per)):
            nv = int(rows.valid[pe, t].sum())
            _append(runs, Run("wait", -1, nv, 32, t))
            _append(runs, Run("reduce", -1, nv, row, t))
        _append(runs, Run("barrier"))
    return runs


def sdma_sqes(runs: list[Run]) -> int:
    """The SQEs the SDMA calls of ``runs`` become: SHMEM cuts a call into ``ceil(bytes / 1 MiB)``
    descriptors (docs/hardware-rules.md#6-sdma), as the twin counts them (``sdma_sqes``)."""
    return sum(r.n * -(-r.nbytes // SQE_BYTES) for r in runs if r.kind == "sdma_put")


def recorded_runs(folder, pe: int, rows: CaseRows) -> dict[int, list[Run]]:
    """The runs each core of PE ``pe`` issued in the twin's last launch, from the operation stream
    it records with ``COMBINE_TWIN_OPS=<folder>`` (host/twin/twin_ops.cpp: ``ops_pe<r>.txt``),
    in :func:`core_runs` form. Stage 1 puts and flags carry no segment (seg -1: the twin sees
    addresses, not segments); the 8 word waits of a status slot are one wait; a token's waits
    are one ``wait`` run (n = its slots) and its payload loads one ``reduce`` run (n = the slots
    read, whatever the tiling), seg = the token. With the segment layout a load names the layout
    row it read; it counts as the slot whose row lies there (:meth:`CaseRows.layout_slots`).

    Raises:
        FileNotFoundError: no stream for ``pe`` in ``folder`` (the run did not record one).
    """
    from pathlib import Path

    lines = (Path(folder) / f"ops_pe{pe}.txt").read_text().splitlines()
    # the segment layout: a load names the layout row it reads, the model names the slot there
    at_row = rows.layout_slots(pe) if rows.settings.segment else None
    per_core: dict[int, list[tuple]] = {c: [] for c in range(rows.block_dim)}
    for ln in lines:
        if ln.startswith("#"):  # "# block_dim <n>", "# launch_ns <begin> <end>"
            continue
        core, kind, dst, nbytes, slot = ln.split()[:5]  # then ub_off, t_ns
        if kind == "store":  # x_out rows: the model's reduce already writes them
            continue
        slot = int(slot)
        if kind == "load" and at_row is not None:
            slot = int(at_row[slot])
        per_core.setdefault(int(core), []).append((kind, int(dst), int(nbytes), slot))
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
            if kind in ("mte_put", "sdma_put", "flag", "control"):
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
