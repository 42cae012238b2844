"""Modelled time of one launch: the kernel's operation stream (:mod:`.stream`) replayed in
virtual time on a model of the planes (:mod:`.params`), per PE and AIV core, as the profiling
frames delimit ``comm_only`` (stage 1) and ``full_op`` (through the closing core barrier).

The model, run by run (all times in microseconds, bytes per microsecond = GB/s * 1e3):

- **MTE put** of a row: GM -> UB at ``core_gm_GBps`` (a), then UB -> destination (b) at the
  core's rate (``core_gm_GBps`` to its own PE; to another PE ``min(mte_remote_GBps, the link's
  share, the PE's egress share)``) plus ``mte_put_us``. Two staging buffers in turn make a run of
  n puts a two-stage pipeline: ``a + b + (n - 1) * max(a, b)``.
- **quiet**: ``quiet_us`` after the puts it completes. **Status flags**: ``flag_us`` each at the
  core; flag i lands at its owner ``flag_latency_us`` after it is issued.
- **SDMA put**: ``sdma_issue_us`` of core time; the PE's ``sdma_engines`` serve descriptors
  (``ceil(bytes / 1 MiB)`` SQEs of ``sdma_sqe_us`` each, plus bytes at ``min(sdma_GBps, the
  link's share, the egress share)``) round-robin across the cores that issued them. An SDMA
  quiet (after every 256 issues, and before the SDMA rows' flags) waits for this core's
  descriptors, plus ``sdma_quiet_us``.
- **Links**: one per ordered PE pair at ``link_GBps`` one way, all usable at once (a full mesh);
  a link's MTE and SDMA bytes share it in proportion to their bytes; each PE sends at most
  ``egress_GBps`` in all, shared by its cores and its engines in proportion to their remote bytes.
- **Stage 2**, per token of a core's block: wait for the last of its valid slots' flags
  (``wait_us`` per slot polled), then read each valid row (``core_gm_GBps``), cast, scale and add
  it (``h / vec_elems_per_us``), and write x_out (one row); then ``barrier_us`` after the
  slowest core of the PE.

Deterministic: the same case, plan and parameters give identical times. Approximations (said
where times are shown): a row larger than a staging buffer overlaps its chunks as if whole;
HBM contention and the dcci work are in the per-operation costs; the engine's round-robin
ignores when each core issues.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .params import NpuModel
from .stream import SDMA_QUIET_EVERY, SQE_BYTES, CaseRows

#: What-if modes of the SDMA descriptors: one per row (the kernel today) or one per MiB of a
#: segment laid out contiguously (a variant not built: ``combine-lab suggest --what-if``).
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


def _rate(gbps) -> np.ndarray:
    return np.asarray(gbps, dtype=np.float64) * 1e3  # bytes per microsecond


def replay(rows: CaseRows, sdma: np.ndarray, model: NpuModel, sdma_mode: str = "row") -> ModelledTimes:
    """Replay the kernel's stream for plan ``sdma`` (bool [pes, epp*pes]) on ``model``.

    Returns :class:`ModelledTimes`. Raises ValueError for an unknown ``sdma_mode``.
    """
    if sdma_mode not in SDMA_MODES:
        raise ValueError(f"sdma_mode={sdma_mode!r}: one of {SDMA_MODES}")
    P, S, B, epp, row = rows.pes, rows.counts.shape[1], rows.block_dim, rows.epp, float(rows.row_bytes)
    m = model
    n = rows.counts.ravel().astype(np.float64)
    sd = sdma.ravel().astype(bool)
    d = np.repeat(np.arange(P), S)
    seg = np.tile(np.arange(S), P)
    src = seg % P
    remote = src != d
    core = d * B + src % B                       # global core id of the segment's sender
    order = (src // B) * epp + seg // P          # the segment's place in its core's loops
    nbytes = n * row

    # Links: per (d, src) the bytes of each plane; the planes share a link in proportion.
    pair = d * P + src
    mte_b = np.bincount(pair, weights=nbytes * (remote & ~sd), minlength=P * P)
    sdma_b = np.bincount(pair, weights=nbytes * sd, minlength=P * P)
    both = np.where(mte_b + sdma_b > 0, mte_b + sdma_b, 1.0)
    # A plane with no bytes on a link has no share to compute: 1 keeps its (unused) rate finite.
    share_mte = np.where(mte_b > 0, mte_b / both, 1.0)[pair]
    share_sdma = np.where(sdma_b > 0, sdma_b / both, 1.0)[pair]
    # Egress: a PE's cores (MTE) and engines (SDMA) share it in proportion to their remote bytes.
    core_mte_remote = np.bincount(core, weights=nbytes * (remote & ~sd), minlength=P * B)
    pe_remote = np.bincount(d, weights=nbytes * remote, minlength=P)
    pe_sdma = np.bincount(d, weights=nbytes * sd, minlength=P)
    total = np.where(pe_remote > 0, pe_remote, 1.0)[d]
    egress_mte = _rate(m["egress_GBps"]) * np.where(core_mte_remote[core] > 0, core_mte_remote[core] / total, 1.0)
    egress_sdma = _rate(m["egress_GBps"]) * np.where(pe_sdma[d] > 0, pe_sdma[d] / total, 1.0)

    # ---- MTE segments: pipeline, quiet, flags ----
    a = row / _rate(m["core_gm_GBps"])
    rate3 = np.where(remote, np.minimum.reduce([np.full(len(n), _rate(m["mte_remote_GBps"])),
                                                _rate(m["link_GBps"]) * share_mte, egress_mte]),
                     _rate(m["core_gm_GBps"]))
    b = row / rate3 + m["mte_put_us"]
    is_mte = ~sd & (n > 0)
    mte_dur = np.where(is_mte, a + b + (n - 1) * np.maximum(a, b) + m["quiet_us"] + n * m["flag_us"], 0.0)
    flags_after = a + b + (n - 1) * np.maximum(a, b) + m["quiet_us"]  # from the segment's start

    # ---- SDMA: per core its descriptors, the engines round-robin across the PE's cores ----
    # The engines together: each serves one descriptor at sdma_GBps, within the links and egress.
    sdma_rate = np.minimum.reduce([np.full(len(n), _rate(m["sdma_GBps"])), _rate(m["link_GBps"]) * share_sdma,
                                   egress_sdma / m["sdma_engines"]])
    if sdma_mode == "row":
        ops = np.where(sd, n, 0.0)  # one call per row
        svc = np.where(sd, n * (np.ceil(row / SQE_BYTES) * m["sdma_sqe_us"] + row / sdma_rate), 0.0)
    else:
        ops = np.where(sd & (n > 0), 1.0, 0.0)  # one call per segment, one SQE per MiB
        svc = np.where(sd, np.ceil(nbytes / SQE_BYTES) * m["sdma_sqe_us"] + nbytes / sdma_rate, 0.0)
    n_c = np.bincount(core, weights=ops, minlength=P * B).reshape(P, B)
    work_c = np.bincount(core, weights=svc, minlength=P * B).reshape(P, B)
    per_op = np.where(n_c > 0, work_c / np.where(n_c > 0, n_c, 1), 0.0)
    engines = m["sdma_engines"]

    def engine_done(k: np.ndarray) -> np.ndarray:
        """[P, B]: when each core's first k[p, c] descriptors are served (round-robin)."""
        served = np.minimum(n_c[:, None, :], k[:, :, None]) * per_op[:, None, :]
        return m["sdma_issue_us"] + served.sum(axis=2) / engines

    t = np.zeros((P, B))
    gates = (n_c // SDMA_QUIET_EVERY).astype(np.int64)
    for j in range(1, int(gates.max(initial=0)) + 1):
        on = gates >= j
        done = engine_done(np.full((P, B), float(j * SDMA_QUIET_EVERY)))
        t = np.where(on, np.maximum(t + SDMA_QUIET_EVERY * m["sdma_issue_us"], done) + m["sdma_quiet_us"], t)
    t = t + (n_c - gates * SDMA_QUIET_EVERY) * m["sdma_issue_us"]

    # ---- MTE phase: the core's MTE segments one after another, in loop order ----
    key = np.lexsort((order, core))              # by core, then loop order
    dur_sorted = mte_dur[key]
    csum = np.cumsum(dur_sorted)
    core_sorted = core[key]
    first = np.r_[True, core_sorted[1:] != core_sorted[:-1]]
    base = np.maximum.accumulate(np.where(first, csum - dur_sorted, 0.0))
    before = np.empty(len(n))
    before[key] = csum - dur_sorted - base       # MTE time of the core before this segment
    mte_total = np.bincount(core, weights=mte_dur, minlength=P * B).reshape(P, B)
    any_mte = np.bincount(core, weights=is_mte, minlength=P * B).reshape(P, B) > 0
    start_mte = t.ravel()[core]
    flag_start = start_mte + before + flags_after  # MTE segments' first flag issue
    t = t + mte_total + np.where(any_mte, m["quiet_us"], 0.0)

    # ---- SDMA tail: wait for the engine, then the SDMA rows' flags in loop order ----
    has_sdma = n_c > 0
    t = np.where(has_sdma, np.maximum(t, engine_done(n_c)) + m["sdma_quiet_us"], t)
    sdma_rows = np.where(sd, n, 0.0)
    s_sorted = sdma_rows[key]
    s_csum = np.cumsum(s_sorted)
    s_base = np.maximum.accumulate(np.where(first, s_csum - s_sorted, 0.0))
    s_before = np.empty(len(n))
    s_before[key] = s_csum - s_sorted - s_base
    sdma_flag_start = t.ravel()[core] + s_before * m["flag_us"]
    rows_c = np.bincount(core, weights=sdma_rows, minlength=P * B).reshape(P, B)
    comm_only = t + np.where(has_sdma, rows_c * m["flag_us"] + m["quiet_us"], 0.0)
    flag_start = np.where(sd, sdma_flag_start, flag_start)

    # ---- Stage 2: every slot's flag landing, each token's last one, a scan per core ----
    gseg = rows.dest * S + rows.seg
    land = flag_start[gseg] + (rows.pos + 1) * m["flag_us"] + m["flag_latency_us"]
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
    lead = np.maximum.accumulate(arrive - (S_ - work), axis=2)
    end = S_[:, :, -1] + np.maximum(comm_only, lead[:, :, -1])
    full_op = np.repeat(end.max(axis=1, keepdims=True) + m["barrier_us"], B, axis=1)
    return ModelledTimes(comm_only, full_op, B, model.caption())
