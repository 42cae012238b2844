"""Modelled time of one launch: the kernel's operation stream (:mod:`.stream`) replayed in
virtual time on a model of the planes (:mod:`.machines`), per PE and AIV core, as the profiling
frames delimit ``comm_only`` (stage 1) and ``full_op`` (through the closing core barrier).

The model, run by run (times in microseconds; bytes per microsecond = GB/s * 1e3):

- **MTE put** of a row: GM -> UB at ``core_gm_GBps`` (a), then UB -> destination (b) at
  ``core_gm_GBps`` to the core's own PE, or ``min(mte_remote_GBps, link_GBps)`` to another, plus
  ``mte_put_us``. Two staging buffers in turn make a run of n puts a two-stage pipeline:
  ``a + b + (n - 1) * max(a, b)``.
- **quiet**: waits for the payload, then ``quiet_us``. **Status flags**: ``flag_us`` each at the
  core; flag i lands at its owner ``flag_latency_us`` after it is issued.
- **SDMA put**: ``sdma_issue_us`` of core time; the PE's ``sdma_engines`` serve the calls
  (:func:`.costs.sdma_call_us`: ``ceil(bytes / 1 MiB)`` SQEs, each ``sdma_sqe_us`` plus its bytes at
  ``sdma_GBps``, or their max, by the link class's form), round-robin across the cores that
  issued them, each core's calls at their average cost. An SDMA quiet
  (after every 256 issues, and before the SDMA rows' flags) waits for this core's calls, plus
  ``sdma_quiet_us``.
- **Link classes**: every parameter named ``<class>.<name>`` is that of the PE pair's class
  (:meth:`.machines.NpuModel.pair_class`: on A3 the die pair, the cards of a server, the servers).
- **Links and egress** are shared fairly: one link per ordered PE pair at its class's
  ``link_GBps`` one way, all usable at once, each PE sending at most ``egress_GBps`` in all. Senders (a
  core's MTE writes, the engines' SDMA) progress at equal shares, so a sender that has moved X
  bytes cannot be done before the link (or egress) moved X of its own and up to X of every
  other sender's bytes: ``sum(min(bytes_k, X)) / bandwidth``, a bound on its completion.
- **Stage 2**, per token of a core's block: wait for the last of its valid slots' flags
  (``wait_us`` per slot polled), then read each valid row (``core_gm_GBps``), cast, scale and add
  it (``h / vec_elems_per_us``), and write x_out (one row); then ``barrier_us`` after the
  slowest core of the PE.

Deterministic, and monotone by construction (every time is sums and maxima of costs that grow
with bytes and shrink with bandwidth). Approximations, said where times are shown: a row larger
than a staging buffer overlaps its chunks as if whole; HBM contention and the cache work are in
the per-operation costs; the engines' round-robin ignores when each core issues.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costs import link_rate, mte_remote_rate, sdma_call_us
from .machines import NpuModel
from .stream import SDMA_QUIET_EVERY, CaseRows

#: What-if modes of the SDMA calls: one per row (the kernel today) or one per segment laid out
#: contiguously, one SQE per MiB (a variant not built: ``combine-lab suggest --what-if``).
SDMA_MODES = ("row", "segment")


@dataclass
class ModelledTimes:
    """Modelled per-core times of one launch: ``comm_only`` and ``full_op``, float64 [pes,
    block_dim] in microseconds; ``caption``: the model's "modelled on ..." line."""

    comm_only: np.ndarray
    full_op: np.ndarray
    block_dim: int
    caption: str

    def core_max(self, metric: str) -> np.ndarray:
        """float64 [pes]: CoreMaxTime/us of each PE for ``metric`` (comm_only or full_op)."""
        return getattr(self, metric).max(axis=1)

    def time_us(self, metric: str, pe: int = 0) -> float:
        """CoreMaxTime/us of ``pe`` for ``metric``, as the profiled PE reports it."""
        return float(self.core_max(metric)[pe])


def _rate(gbps) -> float:
    return float(gbps) * 1e3  # bytes per microsecond


def _group_scan(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each new ``group`` (sorted ascending); -inf
    entries come out below 0 (every time here is >= 0, so they never win a max with one)."""
    if len(values) == 0:
        return values
    finite = np.isfinite(values)
    lo = min(float(values[finite].min(initial=0.0)), 0.0) - 1.0
    hi = float(values[finite].max(initial=0.0))
    lift = (hi - lo + 1.0) * group  # a later group always starts above every earlier value
    return np.maximum.accumulate(np.where(finite, values, lo) + lift) - lift


def _grouped_cumsum(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` restarting at each new ``group`` (sorted)."""
    c = np.cumsum(values)
    first = np.r_[True, group[1:] != group[:-1]] if len(group) else np.zeros(0, dtype=bool)
    base = np.maximum.accumulate(np.where(first, c - values, -np.inf)) if len(c) else c
    return c - base


def _fair_moved(owner: np.ndarray, totals: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each query i: sum over the senders k of PE ``owner[i]`` of ``min(totals[owner, k], x[i])``.
    ``totals``: float [pes, senders] bytes each sender moves in all."""
    P, K = totals.shape
    srt = np.sort(totals, axis=1)
    pre = np.concatenate([np.zeros((P, 1)), np.cumsum(srt, axis=1)], axis=1)
    span = float(srt.max(initial=0.0)) + 1.0
    flat = (np.arange(P)[:, None] * span + srt).ravel()
    below = np.searchsorted(flat, owner * span + x, side="right") - owner * K  # senders with totals <= x
    return pre[owner, below] + (K - below) * x


def _fair_work(owner: np.ndarray, calls: np.ndarray, per_call: np.ndarray):
    """A function of queries x: for each i, the sum over the senders k of PE ``owner[i]`` of
    ``min(calls[owner, k], x[i]) * per_call[owner, k]``: the engines' work when every core has had
    up to x of its calls served, each core's calls counted at their average cost (``per_call``:
    float [pes, senders]). Sorted once, asked at every SDMA quiet."""
    P, K = calls.shape
    order = np.argsort(calls, axis=1, kind="stable")
    srt = np.take_along_axis(calls, order, axis=1)
    w = np.take_along_axis(per_call, order, axis=1)
    pre = np.concatenate([np.zeros((P, 1)), np.cumsum(srt * w, axis=1)], axis=1)
    suf = np.concatenate([np.cumsum(w[:, ::-1], axis=1)[:, ::-1], np.zeros((P, 1))], axis=1)
    span = float(srt.max(initial=0.0)) + 1.0
    flat = (np.arange(P)[:, None] * span + srt).ravel()

    def at(x: np.ndarray, who: np.ndarray | None = None) -> np.ndarray:
        """``who``: the PE of each query (default ``owner``, one query per sender)."""
        who = owner if who is None else who
        below = np.searchsorted(flat, who * span + x, side="right") - who * K
        return pre[who, below] + x * suf[who, below]
    return at


def chunk_counts(counts: np.ndarray, cores_per_rank: int) -> np.ndarray:
    """Rows per chunk: [V, S] segment counts -> [V, S * N] (unit ``seg * N + j``: chunk ``j`` of
    segment ``seg``, ``n*(j+1) // N - n*j // N`` rows, the kernel's ChunkBegin/ChunkEnd), N =
    ``cores_per_rank``; N = 1 gives ``counts`` itself."""
    N = max(int(cores_per_rank), 1)
    if N == 1:
        return counts
    c = np.asarray(counts)[:, :, None]
    j = np.arange(N)
    return (c * (j + 1) // N - c * j // N).reshape(c.shape[0], -1)


def layout_us(pe_of: np.ndarray, pes: int, epp: int, model: NpuModel) -> np.ndarray:
    """float64 [V]: when the segment layout's step (docs/variants.md#1-one-sdma-call-per-segment)
    lets stage 1 of PE ``pe_of[v]`` start sending (us after the launch). Core 0 puts ``4*epp`` B of
    bases to each PE 0..pes-1 (the MTE pipeline of :func:`stage1`), quiets, puts a 32 B ready block to
    each (``flag_us`` each), quiets; every core then meets in the core barrier (``barrier_us``). A
    sender starts after that and after the last ready block to it has landed (``flag_latency_us``
    after its issue): it waits for every receiver's bases before its first put to it (an
    approximation: the kernel waits per receiver, at its first put there)."""
    m, P = model, int(pes)
    classes = m.pair_class(P)
    nb = 4.0 * epp
    a = nb / _rate(m["core_gm_GBps"])
    pe_all = np.arange(P)
    b = nb / np.where(pe_all[:, None] == pe_all[None, :], _rate(m["core_gm_GBps"]), mte_remote_rate(m, classes)) \
        + m["mte_put_us"]                                                     # [sender, receiver]
    pa, pb = np.zeros(P), np.full(P, -np.inf)
    for d in range(P):  # the two-stage pipeline of the bases puts, in destination order
        pa = pa + a
        pb = np.maximum(pa, pb) + b[:, d]
    ready = pb + m["quiet_us"]                                                # ready blocks start
    own = ready + P * m["flag_us"] + m["quiet_us"] + m["barrier_us"]
    landed = (ready[:, None] + (pe_all[None, :] + 1) * m["flag_us"] + m["flag_latency_us"]).max(axis=0)
    return np.maximum(own, landed)[np.asarray(pe_of)]


def stage1(counts: np.ndarray, sdma: np.ndarray, pe_of: np.ndarray, pes: int, block_dim: int, epp: int,
           row_bytes: int, model: NpuModel, sdma_mode: str = "row", *, cores_per_rank: int = 1,
           layout: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1 of the PEs whose segment counts are the rows of ``counts`` (float/int [V, epp*pes]),
    with SDMA segments ``sdma`` (bool [V, epp*pes]); row v stands for PE ``pe_of[v]`` of a launch of
    ``pes`` PEs. Stage 1 of a PE depends on nothing outside it, so rows may repeat a PE under
    other plans (``combine-lab suggest`` prices many thresholds at once this way).

    Kernel settings (docs/variants.md): ``cores_per_rank`` N splits each segment into N chunks,
    chunk j sent by core j of the group serving its source rank (groups ``block_dim / N``), each
    chunk priced as a segment of its own on its own core; ``layout``: the segment layout's step
    first (:func:`layout_us`); ``sdma_mode="segment"`` then prices one SDMA call per chunk.

    Returns (comm_only float64 [V, block_dim] in us, flag_start float64 [V*epp*pes*N]: when each
    chunk's first status flag is issued, chunk ``j`` of segment ``s`` of row ``v`` at
    ``(v*epp*pes + s)*N + j``)."""
    if sdma_mode not in SDMA_MODES:
        raise ValueError(f"sdma_mode={sdma_mode!r}: one of {SDMA_MODES}")
    N = max(int(cores_per_rank), 1)
    P, B, row, m = pes, block_dim, float(row_bytes), model
    G = max(B // N, 1)                           # groups of N cores, one source rank each at a time
    counts = chunk_counts(counts, N)
    sdma = np.repeat(np.asarray(sdma, dtype=bool), N, axis=1)
    V, S = counts.shape                          # S: chunks (segments when N = 1)
    egress = _rate(m["egress_GBps"])
    classes = m.pair_class(P)                    # link class of each (sender, receiver) pair
    n = counts.ravel().astype(np.float64)
    sd = sdma.ravel().astype(bool)
    v = np.repeat(np.arange(V), S)
    unit = np.tile(np.arange(S), V)
    seg = unit // N
    src = seg % P
    remote = src != np.asarray(pe_of)[v]
    core = v * B + (src % G) * N + unit % N      # global core id of the chunk's sender
    nbytes = n * row
    cls = classes[np.asarray(pe_of)[v], src]     # the segment's link class
    link_pair = link_rate(m, classes[np.repeat(np.asarray(pe_of), P), np.tile(np.arange(P), V)])  # [V * P]
    # Chunks by core, then loop order: the same permutation within every row, rows in turn.
    us_ = np.arange(S) // N
    local = np.lexsort(((us_ % P // G) * epp + us_ // P, (us_ % P % G) * N + np.arange(S) % N))
    key = (np.arange(V)[:, None] * S + local[None, :]).ravel()
    ks_core = core[key]

    # Bytes per link (pe -> src) and per sender; a PE's senders: its B cores (MTE), its engines (SDMA).
    pair = v * P + src
    link_mte = np.bincount(pair, weights=nbytes * (remote & ~sd), minlength=V * P)
    link_sdma = np.bincount(pair, weights=nbytes * sd, minlength=V * P)
    core_remote = np.bincount(core, weights=nbytes * (remote & ~sd), minlength=V * B).reshape(V, B)
    pe_sdma = np.bincount(v, weights=nbytes * sd, minlength=V)
    senders = np.concatenate([core_remote, pe_sdma[:, None]], axis=1)  # [V, B + 1]
    owner = np.repeat(np.arange(V), B)

    # ---- SDMA calls: per core, in loop order; the engines go round-robin across the PE's cores ----
    engines = m["sdma_engines"]
    if sdma_mode == "row":  # one call per row; its cost is its link class's
        ops = np.where(sd, n, 0.0)
        n_c = np.bincount(core, weights=ops, minlength=V * B).reshape(V, B)
        per_class = sdma_call_us(m, np.arange(len(m.links)), row)   # a row's call costs its class's
        work_c = np.bincount(core, weights=ops * np.where(sd, per_class[cls], 0.0), minlength=V * B)
        avg_c = np.divide(work_c.reshape(V, B), n_c, out=np.zeros((V, B)), where=n_c > 0)

        # [V, B]: the engines' work (bytes) when core c's first k[v, c] calls are done: every core c'
        # of the PE contributes min(n_c', k) calls, at its calls' average cost (bytes: one row each).
        fair_work = _fair_work(owner, n_c, avg_c)
        work_done = lambda k: fair_work(k.ravel()).reshape(V, B)                         # noqa: E731
        bytes_done = lambda k: _fair_moved(owner, n_c, k.ravel()).reshape(V, B) * row  # noqa: E731
    else:  # one call per segment, of its own size
        ops = np.where(sd & (n > 0), 1.0, 0.0)
        n_c = np.bincount(core, weights=ops, minlength=V * B).reshape(V, B)
        work = np.where(sd, sdma_call_us(m, cls, nbytes), 0.0) * ops
        k_ops, k_work, k_bytes = ops[key], work[key], (nbytes * ops)[key]
        seg_end = _grouped_cumsum(ks_core, k_ops)
        work_end, bytes_end = _grouped_cumsum(ks_core, k_work), _grouped_cumsum(ks_core, k_bytes)
        span = float(n.sum() + 2)
        peers = np.broadcast_to(np.arange(V)[:, None, None] * B + np.arange(B)[None, None, :], (V, B, B)).ravel()

        def served(k: np.ndarray, ends: np.ndarray, amount: np.ndarray) -> np.ndarray:
            if len(ks_core) == 0:
                return np.zeros((V, B))
            kk = np.minimum(n_c[:, None, :], k[:, :, None]).ravel()
            at = np.minimum(np.searchsorted(ks_core * span + seg_end, peers * span + kk, side="left"),
                            len(ks_core) - 1)
            got = np.where((ks_core[at] == peers) & (kk > 0) & (k_ops[at] > 0), ends[at], 0.0)
            return got.reshape(V, B, B).sum(axis=2)  # kk counts whole calls: a segment is one

        work_done = lambda k: served(k, work_end, k_work)     # noqa: E731
        bytes_done = lambda k: served(k, bytes_end, k_bytes)  # noqa: E731

    t = np.zeros((V, B))
    gates = (n_c // SDMA_QUIET_EVERY).astype(np.int64)
    if sdma_mode == "row":  # SDMA quiet j of each core that has one: only those cores are asked
        tflat, gflat = t.ravel(), gates.ravel()
        by_gates = np.argsort(-gflat, kind="stable")
        desc = -gflat[by_gates]
        for j in range(1, int(gates.max(initial=0)) + 1):
            act = by_gates[:np.searchsorted(desc, -j, side="right")]   # the cores with at least j quiets
            done = m["sdma_issue_us"] + fair_work(np.full(len(act), float(j * SDMA_QUIET_EVERY)), owner[act]) / engines
            tflat[act] = np.maximum(tflat[act] + SDMA_QUIET_EVERY * m["sdma_issue_us"], done) + m["sdma_quiet_us"]
        t = tflat.reshape(V, B)
    for j in range(1, int(gates.max(initial=0)) + 1) if sdma_mode != "row" else ():
        done = m["sdma_issue_us"] + work_done(np.full((V, B), float(j * SDMA_QUIET_EVERY))) / engines
        t = np.where(gates >= j, np.maximum(t + SDMA_QUIET_EVERY * m["sdma_issue_us"], done) + m["sdma_quiet_us"], t)
    t = t + (n_c - gates * SDMA_QUIET_EVERY) * m["sdma_issue_us"]
    engine_done = m["sdma_issue_us"] + work_done(n_c) / engines
    # Fair-share bounds of the SDMA calls: their links (each core's dsts) and the PE's egress.
    sdma_link = np.where(sd, ((link_sdma + np.minimum(link_sdma, link_mte)) / link_pair)[pair], 0.0)
    link_bound = np.zeros(V * B)
    np.maximum.at(link_bound, core, sdma_link)
    egress_bound = np.where(n_c > 0, _fair_moved(owner, senders, bytes_done(n_c).ravel()).reshape(V, B) / egress, 0.0)
    sdma_done = np.maximum.reduce([engine_done, link_bound.reshape(V, B), egress_bound])

    # ---- MTE segments in loop order: pipeline, then (payload done, within the bounds) quiet, flags ----
    a = row / _rate(m["core_gm_GBps"])
    b = row / np.where(remote, mte_remote_rate(m, cls), _rate(m["core_gm_GBps"])) + m["mte_put_us"]
    is_mte = ~sd & (n > 0)
    pipe = np.where(is_mte, a + b + (n - 1) * np.maximum(a, b), 0.0)
    tail = np.where(is_mte, m["quiet_us"] + n * m["flag_us"], 0.0)
    k_mte_remote = np.where(is_mte & remote, nbytes, 0.0)[key]
    to_dst = _grouped_cumsum(ks_core * P + src[key], k_mte_remote)  # the core's MTE bytes to this dst so far
    so_far = _grouped_cumsum(ks_core, k_mte_remote)                 # its remote MTE bytes so far
    k_pair = pair[key]
    bound = np.where(is_mte[key] & remote[key],
                     np.maximum((to_dst + np.minimum(to_dst, link_sdma[k_pair])) / link_pair[k_pair],
                                _fair_moved(v[key], senders, so_far) / egress), -np.inf)
    start = t.ravel()[ks_core]                                      # after the SDMA issue phase
    D = pipe[key] + tail[key]
    C = _grouped_cumsum(ks_core, D)
    lead = _group_scan(ks_core, np.where(is_mte[key], start + bound + tail[key] - C, -np.inf))
    end = C + np.maximum(start, lead)
    payload_done = np.empty(len(n))
    payload_done[key] = end - tail[key]
    mte_end = np.full(V * B, -np.inf)
    np.maximum.at(mte_end, ks_core, np.where(is_mte[key], end, -np.inf))
    any_mte = np.isfinite(mte_end).reshape(V, B)
    t = np.where(any_mte, mte_end.reshape(V, B) + m["quiet_us"], t)
    flag_start = payload_done + m["quiet_us"]

    # ---- SDMA tail: wait for this core's calls, then the SDMA rows' flags in loop order ----
    has_sdma = n_c > 0
    t = np.where(has_sdma, np.maximum(t, sdma_done) + m["sdma_quiet_us"], t)
    sdma_rows = np.where(sd, n, 0.0)[key]
    before = _grouped_cumsum(ks_core, sdma_rows) - sdma_rows
    sdma_flag_start = np.empty(len(n))
    sdma_flag_start[key] = t.ravel()[ks_core] + before * m["flag_us"]
    rows_c = np.bincount(core, weights=np.where(sd, n, 0.0), minlength=V * B).reshape(V, B)
    comm_only = t + np.where(has_sdma, rows_c * m["flag_us"] + m["quiet_us"], 0.0)
    flags = np.where(sd, sdma_flag_start, flag_start)
    if layout:  # nothing moves before the layout step: the whole stage shifts by it
        t0 = layout_us(pe_of, P, epp, m)
        comm_only, flags = comm_only + t0[:, None], flags + t0[v]
    return comm_only, flags


def settings_args(rows: CaseRows, sdma_mode: str | None = None) -> dict:
    """The keyword arguments of :func:`stage1` for ``rows``' kernel settings: ``sdma_mode``
    (default: ``segment``, one call per chunk, where the segment layout puts rows back to back,
    else ``row``), ``cores_per_rank`` and ``layout``."""
    mode = sdma_mode if sdma_mode is not None else ("segment" if rows.one_call else "row")
    return {"sdma_mode": mode, "cores_per_rank": rows.cores_per_rank, "layout": rows.settings.segment}


def replay(rows: CaseRows, sdma: np.ndarray, model: NpuModel, sdma_mode: str | None = None) -> ModelledTimes:
    """Replay the kernel's stream for plan ``sdma`` (bool [pes, epp*pes]) on ``model``, under
    ``rows.settings`` (:func:`settings_args`; ``sdma_mode`` overrides how SDMA calls are priced:
    ``segment`` with the reference's settings is the what-if of one call per segment).

    Returns :class:`ModelledTimes`. Raises ValueError for an unknown ``sdma_mode``.
    """
    P, S, B, m = rows.pes, rows.counts.shape[1], rows.block_dim, model
    N = rows.cores_per_rank
    row = float(rows.row_bytes)
    comm_only, flag_start = stage1(rows.counts, sdma, np.arange(P), P, B, rows.epp, rows.row_bytes, m,
                                   **settings_args(rows, sdma_mode))

    # ---- Stage 2: every slot's flag landing, each token's last one, a scan per core ----
    # the row's chunk j (n*j//N <= pos < n*(j+1)//N) and its place in it
    n_seg = rows.counts[rows.dest, rows.seg]
    j = ((rows.pos + 1) * N - 1) // np.maximum(n_seg, 1)
    in_chunk = rows.pos - n_seg * j // N
    land = flag_start[(rows.dest * S + rows.seg) * N + j] + (in_chunk + 1) * m["flag_us"] + m["flag_latency_us"]
    arrive = np.full(P * rows.bs * rows.topk, -np.inf)
    arrive[rows.owner * rows.bs * rows.topk + rows.slot] = land
    arrive = arrive.reshape(P, rows.bs, rows.topk).max(axis=2)
    nv = rows.valid.sum(axis=2).astype(np.float64)
    read = row / _rate(m["core_gm_GBps"])
    work = nv * (read + rows.h / m["vec_elems_per_us"] + m["wait_us"]) + read
    per = -(-rows.bs // B)
    pad = B * per - rows.bs
    arrive = np.pad(arrive, ((0, 0), (0, pad)), constant_values=-np.inf).reshape(P, B, per)
    work = np.pad(work, ((0, 0), (0, pad))).reshape(P, B, per)
    S_ = np.cumsum(work, axis=2)
    lead2 = np.maximum.accumulate(arrive - (S_ - work), axis=2)
    end2 = S_[:, :, -1] + np.maximum(comm_only, lead2[:, :, -1])
    full_op = np.repeat(end2.max(axis=1, keepdims=True) + m["barrier_us"], B, axis=1)
    return ModelledTimes(comm_only, full_op, B, model.caption())
