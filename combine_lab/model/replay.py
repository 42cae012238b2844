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
  (after every 256 issues, and before the SDMA rows' flags; the kernel bounds SQEs, which is the
  same for calls of one SQE, and the segment setting's larger calls are priced as if it bounded
  calls) waits for this core's calls, plus
  ``sdma_quiet_us``.
- **Link classes**: every parameter named ``<class>.<name>`` is that of the PE pair's class
  (:meth:`.machines.NpuModel.pair_class`: on A3 the die pair, the cards of a server, the servers).
- **Shared limits** (docs/timing-model.md#3-costs), each shared fairly: one link per ordered PE
  pair at its class's ``link_GBps`` one way (every core's MTE writes to that PE and the engines'
  SDMA on it: 48 cores on one link queue there), each PE sending at most ``egress_GBps`` in all but
  its SIO pair's bytes (:func:`.costs.egress_classes`),
  what it sends to other servers at its share of the server's uplinks (``uplink_GBps`` over the
  server's PEs in the launch), and its HBM (``hbm_GBps``) serving its cores' GM -> UB reads, its
  SDMA reads and the rows written into it. Senders progress at equal shares, so a sender that has
  moved X bytes cannot be done before the resource moved X of its own and up to X of every other
  sender's bytes: ``sum(min(bytes_k, X)) / bandwidth``, a bound on its completion;
  :attr:`ModelledTimes.queue_us` is how long each core waited on them.
- **Stage 2**, per token of a core's block: wait for the last of its valid slots' flags
  (``wait_us`` per slot polled), then read each valid row (``core_gm_GBps``), cast, scale and add
  it (``h / vec_elems_per_us``), and write x_out (one row), the PE's cores sharing its HBM
  (:func:`stage2_hbm_us`); then ``barrier_us`` after the slowest core of the PE.

Deterministic, and monotone by construction (every time is sums and maxima of costs that grow
with bytes and shrink with bandwidth). Approximations, said where times are shown: a row larger
than a staging buffer overlaps its chunks as if whole; the cache work is in the per-operation
costs; the uplinks are split equally among a server's PEs; the engines' round-robin ignores when
each core issues.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costs import egress_classes, link_rate, mte_remote_rate, sdma_call_us, uplink_classes, uplink_share
from .machines import LINK_PARAMETERS, ModelPoints, NpuModel
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
    queue_us: np.ndarray | None = None  # float64 [pes, block_dim]: waited on shared limits (Stage1.price)

    def core_max(self, metric: str) -> np.ndarray:
        """float64 [pes]: CoreMaxTime/us of each PE for ``metric`` (comm_only or full_op)."""
        return getattr(self, metric).max(axis=1)

    def time_us(self, metric: str, pe: int = 0) -> float:
        """CoreMaxTime/us of ``pe`` for ``metric``, as the profiled PE reports it."""
        return float(self.core_max(metric)[pe])


def _rate(gbps):
    return np.asarray(gbps, dtype=np.float64) * 1e3  # bytes per microsecond


def _group_scan(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` (float [n] or [K, n], along the last axis) restarting at each
    new ``group`` (int [n], sorted ascending); -inf entries come out below 0 (every time here is
    >= 0, so they never win a max with one)."""
    if values.shape[-1] == 0:
        return values
    finite = np.isfinite(values)
    lo = np.minimum(np.where(finite, values, np.inf).min(axis=-1, keepdims=True), 0.0) - 1.0
    hi = np.maximum(np.where(finite, values, -np.inf).max(axis=-1, keepdims=True), 0.0)
    lo, hi = np.where(np.isfinite(lo), lo, -1.0), np.where(np.isfinite(hi), hi, 0.0)
    lift = (hi - lo + 1.0) * group  # a later group always starts above every earlier value
    return np.maximum.accumulate(np.where(finite, values, lo) + lift, axis=-1) - lift


def _grouped_cumsum(group: np.ndarray, values: np.ndarray, firsts: np.ndarray | None = None) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` (float [n] or [K, n], along the last axis)
    restarting at each new ``group`` (int [n], sorted); ``firsts``: where each group starts, if
    known (:func:`_starts`)."""
    c = np.cumsum(values, axis=-1)
    if not c.shape[-1]:
        return c
    firsts = _starts(group) if firsts is None else firsts
    lengths = np.diff(np.append(firsts, len(group)))
    return c - np.repeat(c[..., firsts] - values[..., firsts], lengths, axis=-1)


def _starts(group: np.ndarray) -> np.ndarray:
    """int [groups]: where each run of equal values of ``group`` (sorted) starts."""
    return np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(group) else np.zeros(0, dtype=np.int64)


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


class _SparseFair:
    """:func:`_fair_moved` over senders listed sparsely: sender i of group ``group[i]`` (int [n])
    moves ``totals[i]`` bytes in all (float [n]); ``groups``: how many groups. Called with queries
    (group int [q], x float [q]): for each, the sum over that group's senders of min(total, x)."""

    def __init__(self, group: np.ndarray, totals: np.ndarray, groups: int):
        order = np.lexsort((totals, group))
        self.g, t = group[order], totals[order]
        self.span = float(t.max(initial=0.0)) + 1.0
        self.key = self.g * self.span + t
        self.csum = np.concatenate([[0.0], np.cumsum(t)])
        self.start = np.searchsorted(self.g, np.arange(groups), side="left")
        self.end = np.searchsorted(self.g, np.arange(groups), side="right")

    def __call__(self, qg: np.ndarray, x: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self.key, qg * self.span + x, side="right")
        pos = np.clip(pos, self.start[qg], self.end[qg])
        return self.csum[pos] - self.csum[self.start[qg]] + (self.end[qg] - pos) * x


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


def _points(model: NpuModel | ModelPoints) -> ModelPoints:
    return model if isinstance(model, ModelPoints) else model.points({})


def layout_us(pe_of: np.ndarray, pes: int, epp: int, model: NpuModel | ModelPoints) -> np.ndarray:
    """float64 [V] ([K, V] for K :class:`~.machines.ModelPoints`): when the segment layout's step
    (docs/variants.md#1-one-sdma-call-per-segment) lets stage 1 of PE ``pe_of[v]`` start sending (us
    after the launch). Core 0 puts ``4*epp`` B of bases to each PE 0..pes-1 (the MTE pipeline of
    :func:`stage1`), quiets, puts a 32 B ready block to each (``flag_us`` each), quiets; every core
    then meets in the core barrier (``barrier_us``). A sender starts after that and after the last
    ready block to it has landed (``flag_latency_us`` after its issue): it waits for every
    receiver's bases before its first put to it (an approximation: the kernel waits per receiver,
    at its first put there)."""
    m, P = _points(model), int(pes)
    val = lambda name: m[name][:, :, None]  # noqa: E731  [K, 1, 1]
    classes = m.pair_class(P)
    nb = 4.0 * epp
    a = nb / _rate(val("core_gm_GBps"))
    pe_all = np.arange(P)
    b = nb / np.where(pe_all[:, None] == pe_all[None, :], _rate(val("core_gm_GBps")),
                      np.minimum(_rate(val("mte_remote_GBps")), link_rate(m, classes))) + val("mte_put_us")
    a, q, f = a[:, :, 0], m["quiet_us"], m["flag_us"]                     # b: [K, sender, receiver]
    pa, pb = np.zeros((len(m), P)), np.full((len(m), P), -np.inf)
    for d in range(P):  # the two-stage pipeline of the bases puts, in destination order
        pa = pa + a
        pb = np.maximum(pa, pb) + b[:, :, d]
    ready = pb + q                                                         # ready blocks start
    own = ready + P * f + q + m["barrier_us"]
    landed = (ready[:, :, None] + (pe_all[None, None, :] + 1) * f[:, :, None]
              + val("flag_latency_us")).max(axis=1)
    out = np.maximum(own, landed)[:, np.asarray(pe_of)]
    return out if isinstance(model, ModelPoints) else out[0]


#: Points :meth:`Stage1.price` prices at once.
PRICE_BLOCK = 4
class Stage1:
    """Stage 1 of the PEs whose segment counts are the rows of ``counts`` (float/int [V, epp*pes]),
    with SDMA segments ``sdma`` (bool [V, epp*pes]); row v stands for PE ``pe_of[v]`` of a launch of
    ``pes`` PEs: the plan's operation stream sorted and summed once (what does not depend on the
    timing parameters, given the links'), priced by :meth:`price` at one model or
    many points of it (:class:`~.machines.ModelPoints`: the verdict's search over the unknowns,
    :mod:`.unknowns`). Stage 1 of a PE depends on nothing outside it, so rows may repeat a PE under
    other plans (``combine-lab suggest`` prices many thresholds at once this way).

    Kernel settings (docs/variants.md): ``cores_per_rank`` N splits each segment into N chunks,
    chunk j sent by core j of the group serving its source rank (groups ``block_dim / N``), each
    chunk priced as a segment of its own on its own core; ``layout``: the segment layout's step
    first (:func:`layout_us`); ``sdma_mode="segment"`` then prices one SDMA call per chunk.
    ``incoming``: float [V], the bytes written into each row's PE in the launch (its HBM takes them
    in: :attr:`.stream.CaseRows.incoming_bytes`; default what the PE sends, a balanced exchange).

    Raises ValueError for an unknown ``sdma_mode``.
    """

    def __init__(self, counts: np.ndarray, sdma: np.ndarray, pe_of: np.ndarray, pes: int, block_dim: int,
                 epp: int, row_bytes: int, model: NpuModel, sdma_mode: str = "row", *, cores_per_rank: int = 1,
                 layout: bool = False, incoming: np.ndarray | None = None):
        if sdma_mode not in SDMA_MODES:
            raise ValueError(f"sdma_mode={sdma_mode!r}: one of {SDMA_MODES}")
        N = max(int(cores_per_rank), 1)
        P, B, row, m = pes, block_dim, float(row_bytes), model
        G = max(B // N, 1)                           # groups of N cores, one source rank each at a time
        counts = chunk_counts(counts, N)
        sdma = np.repeat(np.asarray(sdma, dtype=bool), N, axis=1)
        V, S = counts.shape                          # S: chunks (segments when N = 1)
        self.model, self.pes, self.epp, self.layout, self.pe_of = m, P, epp, layout, np.asarray(pe_of)
        self.V, self.B, self.row = V, B, row
        classes = m.pair_class(P)                    # link class of each (sender, receiver) pair
        # Every chunk in loop order (by core, then the order it sends them): one permutation of the
        # S chunks, the same in every row, rows in turn; arrays [V, S] in that order, raveled.
        us_ = np.arange(S) // N
        local = np.lexsort(((us_ % P // G) * epp + us_ // P, (us_ % P % G) * N + np.arange(S) % N))
        key = (np.arange(V)[:, None] * S + local[None, :]).ravel()   # each chunk's place in the rows
        src_l = local // N % P                                        # its source rank: whose link it takes
        n2 = counts[:, local].astype(np.float64)
        sd2 = sdma[:, local]
        remote2 = src_l[None, :] != self.pe_of[:, None]
        n, sd, remote = n2.ravel(), sd2.ravel(), remote2.ravel()
        v = np.repeat(np.arange(V), S)
        ks_core = (np.arange(V)[:, None] * B + ((src_l % G) * N + local % N)[None, :]).ravel()  # its sender, sorted
        core = ks_core
        firsts = _starts(ks_core)                    # where each core's chunks start
        src = np.tile(src_l, V)
        nbytes = n * row
        cls = classes[self.pe_of[:, None], src_l[None, :]].ravel()   # the segment's link class
        link_pair = link_rate(m, classes[np.repeat(self.pe_of, P), np.tile(np.arange(P), V)])  # [V * P]

        # Bytes per link (pe -> src) and per sender; a PE's senders: its B cores (MTE), its engines (SDMA).
        pair = v * P + src
        mte_remote = nbytes * (remote & ~sd)
        link_sdma = np.bincount(pair, weights=nbytes * sd, minlength=V * P)
        # Every sender on a link: each core's MTE bytes to that destination, and the engines' SDMA
        # (sparse: the (link, sender) pairs that move anything): they share the link fairly, however
        # many cores a source rank has.
        if N == 1:  # one core per source rank: a link has one core's MTE and the engines' SDMA
            link_mte = np.bincount(pair, weights=mte_remote, minlength=V * P)
            on_link = lambda g, x: np.minimum(link_mte[g], x) + np.minimum(link_sdma[g], x)  # noqa: E731
        else:
            dense = np.bincount(pair * (B + 1) + core % B, weights=mte_remote, minlength=V * P * (B + 1))
            dense[B::B + 1] = link_sdma
            sender_key = np.flatnonzero(dense)
            on_link = _SparseFair(sender_key // (B + 1), dense[sender_key], V * P)
        # The die's egress: its bytes to other dies but the SIO pair's (costs.egress_classes).
        eg = egress_classes(m)[cls]
        mte_eg = mte_remote * eg
        core_remote = np.bincount(core, weights=mte_eg, minlength=V * B).reshape(V, B)
        pe_sdma = (n2 * sd2).sum(axis=1) * row
        pe_sdma_eg = np.bincount(v, weights=nbytes * (sd & eg), minlength=V)
        senders = np.concatenate([core_remote, pe_sdma_eg[:, None]], axis=1)  # [V, B + 1]
        owner = np.repeat(np.arange(V), B)
        # The die's HBM: its cores' GM -> UB reads (every MTE chunk), its SDMA reads and the rows
        # written into its window (``incoming``, default what it sends: a balanced exchange).
        core_read = np.bincount(core, weights=nbytes * ~sd, minlength=V * B).reshape(V, B)
        inc = n2.sum(axis=1) * row if incoming is None else np.broadcast_to(np.asarray(incoming, dtype=np.float64), (V,))
        hbm_senders = np.concatenate([core_read, pe_sdma[:, None], inc[:, None]], axis=1)  # [V, B + 2]
        # The server's uplinks: what the PE sends off its server, at its share of them.
        up_c = uplink_classes(m)[cls] & remote
        up_rate = uplink_share(m, P)[self.pe_of]                                           # [V] bytes/us
        core_up = np.bincount(core, weights=nbytes * (up_c & ~sd), minlength=V * B).reshape(V, B)
        pe_sdma_up = np.bincount(v, weights=nbytes * (up_c & sd), minlength=V)
        up_senders = np.concatenate([core_up, pe_sdma_up[:, None]], axis=1)                # [V, B + 1]

        # ---- SDMA calls: per core, in loop order; the engines go round-robin across the PE's cores ----
        if sdma_mode == "row":  # one call per row; its cost is its link class's
            ops = np.where(sd, n, 0.0)
            n_c = np.bincount(core, weights=ops, minlength=V * B).reshape(V, B)
            per_class = sdma_call_us(m, np.arange(len(m.links)), row)   # a row's call costs its class's
            work_c = np.bincount(core, weights=ops * np.where(sd, per_class[cls], 0.0), minlength=V * B)
            avg_c = np.divide(work_c.reshape(V, B), n_c, out=np.zeros((V, B)), where=n_c > 0)

            # the engines' work (us) when core c's first k[v, c] calls are done: every core c' of the
            # PE contributes min(n_c', k) calls, at its calls' average cost (bytes: one row each).
            fair_work = _fair_work(owner, n_c, avg_c)
            work_done = lambda k: fair_work(k.ravel()).reshape(V, B)                         # noqa: E731
            bytes_done = lambda k: _fair_moved(owner, n_c, k.ravel()).reshape(V, B) * row  # noqa: E731
        else:  # one call per segment, of its own size
            ops = np.where(sd & (n > 0), 1.0, 0.0)
            n_c = np.bincount(core, weights=ops, minlength=V * B).reshape(V, B)
            work = np.where(sd, sdma_call_us(m, cls, nbytes), 0.0) * ops
            k_ops, k_work, k_bytes = ops, work, nbytes * ops
            seg_end = _grouped_cumsum(ks_core, k_ops, firsts)
            work_end, bytes_end = _grouped_cumsum(ks_core, k_work, firsts), _grouped_cumsum(ks_core, k_bytes, firsts)
            span = float(n.sum() + 2)
            peers = np.broadcast_to(np.arange(V)[:, None, None] * B + np.arange(B)[None, None, :], (V, B, B)).ravel()

            def served(k: np.ndarray, ends: np.ndarray) -> np.ndarray:
                if len(ks_core) == 0:
                    return np.zeros((V, B))
                kk = np.minimum(n_c[:, None, :], k[:, :, None]).ravel()
                at = np.minimum(np.searchsorted(ks_core * span + seg_end, peers * span + kk, side="left"),
                                len(ks_core) - 1)
                got = np.where((ks_core[at] == peers) & (kk > 0) & (k_ops[at] > 0), ends[at], 0.0)
                return got.reshape(V, B, B).sum(axis=2)  # kk counts whole calls: a segment is one

            work_done = lambda k: served(k, work_end)    # noqa: E731
            bytes_done = lambda k: served(k, bytes_end)  # noqa: E731

        # SDMA quiet j (after every SDMA_QUIET_EVERY issues) of the cores that have one: the engines'
        # work then done, asked once here (it depends on no timing parameter but the links').
        gates = (n_c // SDMA_QUIET_EVERY).astype(np.int64).ravel()
        by_gates = np.argsort(-gates, kind="stable")
        desc = -gates[by_gates]
        self.quiets = []
        for j in range(1, int(gates.max(initial=0)) + 1):
            act = by_gates[:np.searchsorted(desc, -j, side="right")]   # the cores with at least j quiets
            if sdma_mode == "row":
                done = fair_work(np.full(len(act), float(j * SDMA_QUIET_EVERY)), owner[act])
            else:
                done = work_done(np.full((V, B), float(j * SDMA_QUIET_EVERY))).ravel()[act]
            self.quiets.append((act, done))
        self.issues_after = (n_c.ravel() - gates * SDMA_QUIET_EVERY)     # SDMA issues after the last quiet
        self.n_c = n_c.ravel()
        self.engine_work = work_done(n_c).ravel()
        # Fair-share bounds of the SDMA calls: their links (each core's dsts) and the PE's egress.
        sdma_link = np.where(sd, (on_link(np.arange(V * P), link_sdma) / link_pair)[pair], 0.0)
        self.core_first, self.core_of_first = firsts, ks_core[firsts]
        link_bound = np.zeros(V * B)
        if len(ks_core):
            link_bound[self.core_of_first] = np.maximum.reduceat(sdma_link, firsts)
        # the egress bounds as bytes: divided by each point's egress rate when priced
        self.link_bound = link_bound
        bd = bytes_done(n_c).ravel()                 # the engines' bytes when each core's calls are done
        busy = (n_c > 0).ravel()
        eg_frac = np.divide(pe_sdma_eg, pe_sdma, out=np.zeros(V), where=pe_sdma > 0)[owner]
        self.egress_bytes = np.where(busy, _fair_moved(owner, senders, bd * eg_frac), 0.0)
        # HBM and uplinks bound a core's completion (its SDMA calls, its last MTE chunk), not each
        # chunk: one query per core (the chunks before its last are bounded by the links and egress)
        hb = _fair_moved(np.tile(owner, 2), hbm_senders, np.concatenate([bd, core_read.ravel()]))
        self.sdma_hbm_bytes = np.where(busy, hb[:V * B], 0.0)
        core_hbm_bytes = hb[V * B:]
        up_frac = np.divide(pe_sdma_up, pe_sdma, out=np.zeros(V), where=pe_sdma > 0)[owner]
        if up_senders.any():
            ut = _fair_moved(np.tile(owner, 2), up_senders, np.concatenate([bd * up_frac, core_up.ravel()]))
            ut = ut / np.tile(up_rate[owner], 2)
        else:
            ut = np.zeros(2 * V * B)
        sdma_up_t = np.where(busy & (up_frac > 0), ut[:V * B], 0.0)
        core_up_t = np.where(core_up.ravel() > 0, ut[V * B:], 0.0)
        self.sdma_static = np.maximum(self.link_bound, sdma_up_t)  # the bounds that no point moves

        # ---- MTE chunks in loop order: their bounds by the links and the egress ----
        is_mte = ~sd & (n > 0)
        far = is_mte & remote
        k_mte_remote = np.where(far, nbytes, 0.0)
        to_dst = _grouped_cumsum(ks_core * P + src, k_mte_remote)  # the core's MTE bytes to this dst so far
        so_far = _grouped_cumsum(ks_core, k_mte_remote * eg, firsts)  # its MTE bytes through the egress so far
        fp = pair[far]
        self.far = far
        # each core's last MTE chunk carries its HBM and uplink bounds (its whole reads, its bytes off the server)
        last = np.full(len(ks_core), False)
        if len(ks_core):
            at_last = np.maximum.reduceat(np.where(is_mte, np.arange(len(ks_core)), -1), firsts)
            last[at_last[at_last >= 0]] = True
        self.last_mte = last
        self.mte_hbm_bytes = core_hbm_bytes[ks_core[last]]
        static = np.full(len(ks_core), -np.inf)
        static[far] = on_link(fp, to_dst[far]) / link_pair[fp]
        static[last] = np.maximum(static[last], core_up_t[ks_core[last]])
        self.far_static = static[far]            # the bounds that no point moves
        self.last_static = static[last]
        self.far_egress_bytes = _fair_moved(v[far], senders, so_far[far])
        self.key, self.ks_core, self.is_mte = key, ks_core, is_mte
        self.k_n, self.k_remote, self.k_cls = n, remote, cls
        sdma_rows = np.where(sd, n, 0.0)
        self.before = _grouped_cumsum(ks_core, sdma_rows, firsts) - sdma_rows   # SDMA rows of the core before this chunk
        self.rows_c = np.bincount(core, weights=sdma_rows, minlength=V * B)
        self.sd, self.S = sd, S

    def price(self, model: NpuModel | ModelPoints, flags: bool = True, queue: bool = False):
        """comm_only float64 [K, V, block_dim] in us at the K points of ``model`` (K = 1 for an
        NpuModel), and (``flags``) flag_start float64 [K, V*epp*pes*N]: when each chunk's first status
        flag is issued, chunk ``j`` of segment ``s`` of row ``v`` at ``(v*epp*pes + s)*N + j``;
        with ``queue`` a third value, queue_us float64 [K, V, block_dim]: how long each core waited
        on the shared limits (its links, the egress, the server's uplinks, the HBM) beyond its own
        MTE pipeline and its SDMA calls' engine work (docs/timing-model.md#3-costs).

        Raises ValueError: a point whose links' parameters are not those it was built on.
        """
        m = _points(model)
        if queue:
            if len(m) > PRICE_BLOCK:
                raise ValueError(f"Stage1.price: queue=True prices at most {PRICE_BLOCK} points")
            return self._price(m, flags, True)
        return self._price(m, flags, False)[:2]

    def _price(self, m: ModelPoints, flags: bool, queue: bool):
        if len(m) > PRICE_BLOCK:  # in blocks: a few points' arrays stay in cache
            parts = [self._price(ModelPoints(m.model, {n: x[i:i + PRICE_BLOCK] for n, x in m.values.items()}), flags,
                                 False) for i in range(0, len(m), PRICE_BLOCK)]
            return (np.concatenate([c for c, _, _ in parts]),
                    np.concatenate([f for _, f, _ in parts]) if flags else None, None)
        base = self.model
        if m.model.links != base.links or any(
                not np.array_equal(m.link_values(n), base.link_values(n)) for n in LINK_PARAMETERS):
            raise ValueError("Stage1.price: the points' link parameters must be those it was built on")
        K, V, B, row = len(m), self.V, self.B, self.row
        issue, engines, sq = m["sdma_issue_us"], m["sdma_engines"], m["sdma_quiet_us"]
        quiet, flag = m["quiet_us"], m["flag_us"]
        t = np.zeros((K, V * B))
        for act, done in self.quiets:  # SDMA quiet j of each core that has one
            t[:, act] = np.maximum(t[:, act] + SDMA_QUIET_EVERY * issue, issue + done / engines) + sq
        t = t + self.issues_after * issue
        egress, hbm = _rate(m["egress_GBps"]), _rate(m["hbm_GBps"])
        sdma_own = issue + self.engine_work / engines
        sdma_done = np.maximum(np.maximum(sdma_own, self.sdma_static),
                               np.maximum(self.egress_bytes / egress, self.sdma_hbm_bytes / hbm))

        # ---- MTE chunks in loop order: pipeline, then (payload done, within the bounds) quiet, flags ----
        gm = _rate(m["core_gm_GBps"])
        a = row / gm
        b = row / np.where(self.k_remote, mte_remote_rate(m, self.k_cls), gm) + m["mte_put_us"]
        is_mte, n, ks_core = self.is_mte, self.k_n, self.ks_core
        pipe = np.where(is_mte, a + b + (n - 1) * np.maximum(a, b), 0.0)
        tail = np.where(is_mte, quiet + n * flag, 0.0)
        start = t[:, ks_core]                                            # after the SDMA issue phase
        D = pipe + tail
        C = _grouped_cumsum(ks_core, D, self.core_first)
        bound = np.full((K, len(ks_core)), -np.inf)
        bound[:, self.far] = np.maximum(self.far_static, self.far_egress_bytes / egress)
        last = self.last_mte
        bound[:, last] = np.maximum(np.maximum(bound[:, last], self.last_static), self.mte_hbm_bytes / hbm)
        lead = _group_scan(ks_core, np.where(is_mte, start + bound + tail - C, -np.inf))
        end = C + np.maximum(start, lead)
        mte_end = np.full((K, V * B), -np.inf)
        if len(ks_core):
            mte_end[:, self.core_of_first] = np.maximum.reduceat(np.where(is_mte, end, -np.inf), self.core_first,
                                                                 axis=1)
        waited = None
        if queue:  # without the shared limits a core's last MTE chunk ends at start + its own pipeline
            own = np.full((K, V * B), -np.inf)
            if len(ks_core):
                own[:, self.core_of_first] = np.maximum.reduceat(np.where(is_mte, start + C, -np.inf),
                                                                 self.core_first, axis=1)
            fin = np.isfinite(mte_end)
            waited = np.where(fin, np.where(fin, mte_end, 0.0) - np.where(fin, own, 0.0), 0.0)
            waited = waited + np.where(self.n_c > 0, np.maximum(sdma_done - sdma_own, 0.0), 0.0)
        t = np.where(np.isfinite(mte_end), mte_end + quiet, t)

        # ---- SDMA tail: wait for this core's calls, then the SDMA rows' flags in loop order ----
        has_sdma = self.n_c > 0
        t = np.where(has_sdma, np.maximum(t, sdma_done) + sq, t)
        comm_only = t + np.where(has_sdma, self.rows_c * flag + quiet, 0.0)
        out = None
        if flags:
            out = np.empty((K, len(self.key)))
            out[:, self.key] = np.where(self.sd, t[:, ks_core] + self.before * flag, end - tail + quiet)
        if self.layout:  # nothing moves before the layout step: the whole stage shifts by it
            t0 = layout_us(self.pe_of, self.pes, self.epp, m)                # [K, V]
            comm_only = comm_only + np.repeat(t0, B, axis=1)
            out = None if out is None else out + np.repeat(t0, self.S, axis=1)
        if queue:
            return comm_only.reshape(K, V, B), out, waited.reshape(K, V, B)
        return comm_only.reshape(K, V, B), out, None


def stage1(counts: np.ndarray, sdma: np.ndarray, pe_of: np.ndarray, pes: int, block_dim: int, epp: int,
           row_bytes: int, model: NpuModel, sdma_mode: str = "row", *, cores_per_rank: int = 1,
           layout: bool = False, incoming: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:class:`Stage1` built and priced at ``model`` (same arguments; ``incoming``: float [V] bytes
    written into each row's PE in the launch, :attr:`.stream.CaseRows.incoming_bytes`, default
    what the PE sends).

    Returns (comm_only float64 [V, block_dim] in us, flag_start float64 [V*epp*pes*N]: when each
    chunk's first status flag is issued, chunk ``j`` of segment ``s`` of row ``v`` at
    ``(v*epp*pes + s)*N + j``). Raises ValueError for an unknown ``sdma_mode``."""
    comm, flags = Stage1(counts, sdma, pe_of, pes, block_dim, epp, row_bytes, model, sdma_mode,
                         cores_per_rank=cores_per_rank, layout=layout, incoming=incoming).price(model)
    return comm[0], flags[0]


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
    P, B, m = rows.pes, rows.block_dim, model
    row = float(rows.row_bytes)
    st = Stage1(rows.counts, sdma, np.arange(P), P, B, rows.epp, rows.row_bytes, m,
                **settings_args(rows, sdma_mode), incoming=rows.incoming_bytes)
    comm_only, flag_start, queue_us = (x[0] for x in st.price(m, queue=True))

    # ---- Stage 2: every slot's flag landing, each token's last one, a scan per core ----
    at, after = rows.landing  # each slot's chunk (-1: no row) and its place in it
    starts = np.append(flag_start, -np.inf)  # index -1: a slot without a row never lands
    by_slot = (starts[at] + after * m["flag_us"]).reshape(-1, rows.topk)
    arrive = by_slot[:, 0].copy()
    for k in range(1, rows.topk):  # each token's last flag (slice by slice: a reduce over a short axis is slower)
        np.maximum(arrive, by_slot[:, k], out=arrive)
    arrive = arrive.reshape(P, rows.bs) + m["flag_latency_us"]
    nv = rows.valid_per_token
    read = row / _rate(m["core_gm_GBps"])
    work = nv * (read + rows.h / m["vec_elems_per_us"] + m["wait_us"]) + read
    per = -(-rows.bs // B)
    pad = B * per - rows.bs
    moved = np.pad((nv + 1.0) * row, ((0, 0), (0, pad))).reshape(P, B, per).sum(axis=2)  # HBM bytes per core
    arrive = np.pad(arrive, ((0, 0), (0, pad)), constant_values=-np.inf).reshape(P, B, per)
    work = np.pad(work, ((0, 0), (0, pad))).reshape(P, B, per)
    S_ = np.cumsum(work, axis=2)
    lead2 = np.maximum.accumulate(arrive - (S_ - work), axis=2)
    end2 = S_[:, :, -1] + np.maximum(comm_only, lead2[:, :, -1])
    end2 = np.maximum(end2, stage2_hbm_us(comm_only, moved, m["hbm_GBps"]))
    full_op = np.repeat(end2.max(axis=1, keepdims=True) + m["barrier_us"], B, axis=1)
    return ModelledTimes(comm_only, full_op, B, model.caption(), queue_us)


def stage2_hbm_us(comm_only: np.ndarray, moved: np.ndarray, hbm_GBps: float) -> np.ndarray:
    """float64 [pes, cores]: the HBM bound of stage 2 (us): the PE's cores read their rows and write
    x_out through one HBM (``hbm_GBps``), shared fairly, so a core that moves X bytes (``moved``,
    float [pes, cores]) ends no earlier than the PE's first core to start stage 2 (``comm_only``'s
    minimum) plus ``sum(min(moved_k, X)) / hbm`` over the PE's cores (docs/timing-model.md#3-costs).
    The one rule :func:`replay` and :mod:`.recorded` share."""
    fair = _fair_rows(np.asarray(moved, dtype=np.float64))
    return comm_only.min(axis=1, keepdims=True) + fair / _rate(hbm_GBps)


def _fair_rows(moved: np.ndarray) -> np.ndarray:
    """float [P, B]: for each core, sum over its PE's cores k of min(moved[k], moved[core])."""
    P, B = moved.shape
    return _fair_moved(np.repeat(np.arange(P), B), moved, moved.ravel()).reshape(P, B)
