"""Modelled time of one launch: the kernel's operation stream (:mod:`.stream`) replayed in
virtual time on a model of the planes (:mod:`.params`), per PE and AIV core, as the profiling
frames delimit ``comm_only`` (stage 1) and ``full_op`` (through the closing core barrier).

The model, run by run (times in microseconds; bytes per microsecond = GB/s * 1e3):

- **MTE put** of a row: GM -> UB at ``core_gm_GBps`` (a), then UB -> destination (b) at
  ``core_gm_GBps`` to the core's own PE, or ``min(mte_remote_GBps, link_GBps)`` to another, plus
  ``mte_put_us``. Two staging buffers in turn make a run of n puts a two-stage pipeline:
  ``a + b + (n - 1) * max(a, b)``.
- **quiet**: waits for the payload, then ``quiet_us``. **Status flags**: ``flag_us`` each at the
  core; flag i lands at its owner ``flag_latency_us`` after it is issued.
- **SDMA put**: ``sdma_issue_us`` of core time; the PE's ``sdma_engines`` serve the calls
  (``ceil(bytes / 1 MiB)`` SQEs of ``sdma_sqe_us`` each, plus bytes at
  ``min(sdma_GBps, link_GBps)``), round-robin across the cores that issued them. An SDMA quiet
  (after every 256 issues, and before the SDMA rows' flags) waits for this core's calls, plus
  ``sdma_quiet_us``.
- **Links and egress** are shared fairly: one link per ordered PE pair at ``link_GBps`` one way,
  all usable at once (a full mesh), each PE sending at most ``egress_GBps`` in all. Senders (a
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

from .params import NpuModel
from .stream import SDMA_QUIET_EVERY, SQE_BYTES, CaseRows

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


def replay(rows: CaseRows, sdma: np.ndarray, model: NpuModel, sdma_mode: str = "row") -> ModelledTimes:
    """Replay the kernel's stream for plan ``sdma`` (bool [pes, epp*pes]) on ``model``.

    Returns :class:`ModelledTimes`. Raises ValueError for an unknown ``sdma_mode``.
    """
    if sdma_mode not in SDMA_MODES:
        raise ValueError(f"sdma_mode={sdma_mode!r}: one of {SDMA_MODES}")
    P, S, B, epp, row = rows.pes, rows.counts.shape[1], rows.block_dim, rows.epp, float(rows.row_bytes)
    m = model
    link, egress = _rate(m["link_GBps"]), _rate(m["egress_GBps"])
    n = rows.counts.ravel().astype(np.float64)
    sd = sdma.ravel().astype(bool)
    d = np.repeat(np.arange(P), S)
    seg = np.tile(np.arange(S), P)
    src = seg % P
    remote = src != d
    core = d * B + src % B                       # global core id of the segment's sender
    order = (src // B) * epp + seg // P          # the segment's place in its core's loops
    nbytes = n * row
    key = np.lexsort((order, core))              # segments by core, then loop order
    ks_core = core[key]

    # Bytes per link (d -> src) and per sender; PE d's senders: its B cores (MTE), its engines (SDMA).
    pair = d * P + src
    link_mte = np.bincount(pair, weights=nbytes * (remote & ~sd), minlength=P * P)
    link_sdma = np.bincount(pair, weights=nbytes * sd, minlength=P * P)
    core_remote = np.bincount(core, weights=nbytes * (remote & ~sd), minlength=P * B).reshape(P, B)
    pe_sdma = np.bincount(d, weights=nbytes * sd, minlength=P)
    senders = np.concatenate([core_remote, pe_sdma[:, None]], axis=1)  # [P, B + 1]

    # ---- SDMA calls: per core, in loop order; the engines go round-robin across the PE's cores ----
    sdma_rate = min(_rate(m["sdma_GBps"]), link)
    if sdma_mode == "row":
        ops = np.where(sd, n, 0.0)
        per_op = np.ceil(row / SQE_BYTES) * m["sdma_sqe_us"] + row / sdma_rate
        op_bytes = np.full(len(n), row)
    else:
        ops = np.where(sd & (n > 0), 1.0, 0.0)
        per_op = np.ceil(nbytes / SQE_BYTES) * m["sdma_sqe_us"] + nbytes / sdma_rate
        op_bytes = nbytes
    n_c = np.bincount(core, weights=ops, minlength=P * B).reshape(P, B)
    k_ops = ops[key]
    k_work = k_ops * np.where(sd, per_op, 0.0)[key]
    k_bytes = k_ops * np.where(sd, op_bytes, 0.0)[key]
    seg_end = _grouped_cumsum(ks_core, k_ops)   # the core's calls through this segment
    work_end = _grouped_cumsum(ks_core, k_work)
    bytes_end = _grouped_cumsum(ks_core, k_bytes)
    span = float(n.sum() + 2)

    def served(cores: np.ndarray, k: np.ndarray, ends: np.ndarray, amount: np.ndarray) -> np.ndarray:
        """``amount`` (work or bytes) of core ``cores``'s first ``k`` calls (k <= its calls)."""
        if len(ks_core) == 0:
            return np.zeros(len(k))
        at = np.minimum(np.searchsorted(ks_core * span + seg_end, cores * span + k, side="left"), len(ks_core) - 1)
        per = np.where(k_ops[at] > 0, amount[at] / np.where(k_ops[at] > 0, k_ops[at], 1), 0.0)
        got = ends[at] - amount[at] + (k - (seg_end[at] - k_ops[at])) * per
        return np.where((ks_core[at] == cores) & (k > 0), got, 0.0)

    peers = np.broadcast_to(np.arange(P)[:, None, None] * B + np.arange(B)[None, None, :], (P, B, B)).ravel()

    def round_robin(k: np.ndarray, ends: np.ndarray, amount: np.ndarray) -> np.ndarray:
        """[P, B]: ``amount`` the engines have served when core c's first k[p, c] calls are done:
        every core c' of the PE contributes its first min(n_c', k) calls."""
        kk = np.minimum(n_c[:, None, :], k[:, :, None]).ravel()
        return served(peers, kk, ends, amount).reshape(P, B, B).sum(axis=2)

    engines = m["sdma_engines"]
    t = np.zeros((P, B))
    gates = (n_c // SDMA_QUIET_EVERY).astype(np.int64)
    for j in range(1, int(gates.max(initial=0)) + 1):
        done = m["sdma_issue_us"] + round_robin(np.full((P, B), float(j * SDMA_QUIET_EVERY)), work_end, k_work) / engines
        t = np.where(gates >= j, np.maximum(t + SDMA_QUIET_EVERY * m["sdma_issue_us"], done) + m["sdma_quiet_us"], t)
    t = t + (n_c - gates * SDMA_QUIET_EVERY) * m["sdma_issue_us"]
    engine_done = m["sdma_issue_us"] + round_robin(n_c, work_end, k_work) / engines
    # Fair-share bounds of the SDMA calls: their links (each core's dsts) and the PE's egress.
    sdma_link = np.where(sd, (link_sdma + np.minimum(link_sdma, link_mte))[pair] / link, 0.0)
    link_bound = np.zeros(P * B)
    np.maximum.at(link_bound, core, sdma_link)
    moved = round_robin(n_c, bytes_end, k_bytes)            # the engines' bytes by then
    egress_bound = np.where(n_c > 0, _fair_moved(np.repeat(np.arange(P), B), senders,
                                                 moved.ravel()).reshape(P, B) / egress, 0.0)
    sdma_done = np.maximum.reduce([engine_done, link_bound.reshape(P, B), egress_bound])

    # ---- MTE segments in loop order: pipeline, then (payload done, within the bounds) quiet, flags ----
    a = row / _rate(m["core_gm_GBps"])
    b = row / np.where(remote, min(_rate(m["mte_remote_GBps"]), link), _rate(m["core_gm_GBps"])) + m["mte_put_us"]
    is_mte = ~sd & (n > 0)
    pipe = np.where(is_mte, a + b + (n - 1) * np.maximum(a, b), 0.0)
    tail = np.where(is_mte, m["quiet_us"] + n * m["flag_us"], 0.0)
    k_mte_remote = np.where(is_mte & remote, nbytes, 0.0)[key]
    to_dst = _grouped_cumsum(ks_core * P + src[key], k_mte_remote)  # the core's MTE bytes to this dst so far
    so_far = _grouped_cumsum(ks_core, k_mte_remote)                 # its remote MTE bytes so far
    k_pair = pair[key]
    bound = np.where(is_mte[key] & remote[key],
                     np.maximum((to_dst + np.minimum(to_dst, link_sdma[k_pair])) / link,
                                _fair_moved(d[key], senders, so_far) / egress), -np.inf)
    start = t.ravel()[ks_core]                                      # after the SDMA issue phase
    D = pipe[key] + tail[key]
    C = _grouped_cumsum(ks_core, D)
    lead = _group_scan(ks_core, np.where(is_mte[key], start + bound + tail[key] - C, -np.inf))
    end = C + np.maximum(start, lead)
    payload_done = np.empty(len(n))
    payload_done[key] = end - tail[key]
    mte_end = np.full(P * B, -np.inf)
    np.maximum.at(mte_end, ks_core, np.where(is_mte[key], end, -np.inf))
    any_mte = np.isfinite(mte_end).reshape(P, B)
    t = np.where(any_mte, mte_end.reshape(P, B) + m["quiet_us"], t)
    flag_start = payload_done + m["quiet_us"]

    # ---- SDMA tail: wait for this core's calls, then the SDMA rows' flags in loop order ----
    has_sdma = n_c > 0
    t = np.where(has_sdma, np.maximum(t, sdma_done) + m["sdma_quiet_us"], t)
    sdma_rows = np.where(sd, n, 0.0)[key]
    before = _grouped_cumsum(ks_core, sdma_rows) - sdma_rows
    sdma_flag_start = np.empty(len(n))
    sdma_flag_start[key] = t.ravel()[ks_core] + before * m["flag_us"]
    rows_c = np.bincount(core, weights=np.where(sd, n, 0.0), minlength=P * B).reshape(P, B)
    comm_only = t + np.where(has_sdma, rows_c * m["flag_us"] + m["quiet_us"], 0.0)
    flag_start = np.where(sd, sdma_flag_start, flag_start)

    # ---- Stage 2: every slot's flag landing, each token's last one, a scan per core ----
    land = flag_start[rows.dest * S + rows.seg] + (rows.pos + 1) * m["flag_us"] + m["flag_latency_us"]
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
