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
from types import SimpleNamespace

import numpy as np

from .costs import egress_classes, link_rate, mte_remote_rate, sdma_call_us, uplink_classes, uplink_share
from .fair import SparseFair, fair_moved, fair_work, group_scan, grouped_cumsum, starts
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
        self.model, self.pes, self.epp, self.layout, self.pe_of = model, pes, epp, layout, np.asarray(pe_of)
        self.B, self.row = block_dim, float(row_bytes)
        c = self._chunks(counts, sdma, max(int(cores_per_rank), 1))
        lim = self._shared_limits(c, incoming)
        calls = self._row_calls(c) if sdma_mode == "row" else self._segment_calls(c)
        self._sdma_quiets(c, calls)
        core_hbm_bytes, core_up_t = self._sdma_bounds(c, lim, calls)
        self._mte_bounds(c, lim, core_hbm_bytes, core_up_t)
        self._chunk_rows(c)

    def _chunks(self, counts: np.ndarray, sdma: np.ndarray, N: int) -> SimpleNamespace:
        """Every chunk in loop order, with its sender core, source rank and link class: the order
        every later step scans, fixed by the plan alone."""
        P, B, m = self.pes, self.B, self.model
        G = max(B // N, 1)                           # groups of N cores, one source rank each at a time
        counts = chunk_counts(counts, N)
        sdma = np.repeat(np.asarray(sdma, dtype=bool), N, axis=1)
        V, S = counts.shape                          # S: chunks (segments when N = 1)
        self.V, self.S = V, S
        classes = m.pair_class(P)                    # link class of each (sender, receiver) pair
        # Every chunk in loop order (by core, then the order it sends them): one permutation of the
        # S chunks, the same in every row, rows in turn; arrays [V, S] in that order, raveled.
        us_ = np.arange(S) // N
        local = np.lexsort(((us_ % P // G) * self.epp + us_ // P, (us_ % P % G) * N + np.arange(S) % N))
        src_l = local // N % P                                        # its source rank: whose link it takes
        n2 = counts[:, local].astype(np.float64)
        sd2 = sdma[:, local]
        v = np.repeat(np.arange(V), S)
        core = (np.arange(V)[:, None] * B + ((src_l % G) * N + local % N)[None, :]).ravel()  # its sender, sorted
        src = np.tile(src_l, V)
        n = n2.ravel()
        return SimpleNamespace(
            N=N, V=V, S=S, n2=n2, sd2=sd2, n=n, sd=sd2.ravel(), v=v, core=core, src=src,
            key=(np.arange(V)[:, None] * S + local[None, :]).ravel(),  # each chunk's place in the rows
            remote=(src_l[None, :] != self.pe_of[:, None]).ravel(),
            firsts=starts(core),                                       # where each core's chunks start
            nbytes=n * self.row, pair=v * P + src, owner=np.repeat(np.arange(V), B),
            cls=classes[self.pe_of[:, None], src_l[None, :]].ravel(),  # the segment's link class
            link_pair=link_rate(m, classes[np.repeat(self.pe_of, P), np.tile(np.arange(P), V)]))  # [V * P]

    def _shared_limits(self, c: SimpleNamespace, incoming: np.ndarray | None) -> SimpleNamespace:
        """Who shares each limit and with how many bytes: the links, the die's egress, its HBM and
        the server's uplinks (docs/timing-model.md#3-costs), each bound a sender's completion."""
        P, B, V, m = self.pes, self.B, c.V, self.model
        sd, nbytes, core, v = c.sd, c.nbytes, c.core, c.v
        # Bytes per link (pe -> src) and per sender; a PE's senders: its B cores (MTE), its engines (SDMA).
        mte_remote = nbytes * (c.remote & ~sd)
        link_sdma = np.bincount(c.pair, weights=nbytes * sd, minlength=V * P)
        # Every sender on a link: each core's MTE bytes to that destination, and the engines' SDMA
        # (sparse: the (link, sender) pairs that move anything): they share the link fairly, however
        # many cores a source rank has.
        if c.N == 1:  # one core per source rank: a link has one core's MTE and the engines' SDMA
            link_mte = np.bincount(c.pair, weights=mte_remote, minlength=V * P)
            on_link = lambda g, x: np.minimum(link_mte[g], x) + np.minimum(link_sdma[g], x)  # noqa: E731
        else:
            dense = np.bincount(c.pair * (B + 1) + core % B, weights=mte_remote, minlength=V * P * (B + 1))
            dense[B::B + 1] = link_sdma
            sender_key = np.flatnonzero(dense)
            on_link = SparseFair(sender_key // (B + 1), dense[sender_key], V * P)
        # The die's egress: its bytes to other dies but the SIO pair's (costs.egress_classes).
        eg = egress_classes(m)[c.cls]
        core_remote = np.bincount(core, weights=mte_remote * eg, minlength=V * B).reshape(V, B)
        pe_sdma = (c.n2 * c.sd2).sum(axis=1) * self.row
        pe_sdma_eg = np.bincount(v, weights=nbytes * (sd & eg), minlength=V)
        # The die's HBM: its cores' GM -> UB reads (every MTE chunk), its SDMA reads and the rows
        # written into its window (``incoming``, default what it sends: a balanced exchange).
        core_read = np.bincount(core, weights=nbytes * ~sd, minlength=V * B).reshape(V, B)
        inc = (c.n2.sum(axis=1) * self.row if incoming is None
               else np.broadcast_to(np.asarray(incoming, dtype=np.float64), (V,)))
        # The server's uplinks: what the PE sends off its server, at its share of them.
        up_c = uplink_classes(m)[c.cls] & c.remote
        core_up = np.bincount(core, weights=nbytes * (up_c & ~sd), minlength=V * B).reshape(V, B)
        pe_sdma_up = np.bincount(v, weights=nbytes * (up_c & sd), minlength=V)
        return SimpleNamespace(
            link_sdma=link_sdma, on_link=on_link, eg=eg, pe_sdma=pe_sdma, pe_sdma_eg=pe_sdma_eg,
            senders=np.concatenate([core_remote, pe_sdma_eg[:, None]], axis=1),            # [V, B + 1]
            core_read=core_read,
            hbm_senders=np.concatenate([core_read, pe_sdma[:, None], inc[:, None]], axis=1),  # [V, B + 2]
            up_rate=uplink_share(m, P)[self.pe_of], core_up=core_up, pe_sdma_up=pe_sdma_up,  # up_rate: [V] bytes/us
            up_senders=np.concatenate([core_up, pe_sdma_up[:, None]], axis=1))             # [V, B + 1]

    def _row_calls(self, c: SimpleNamespace) -> SimpleNamespace:
        """The SDMA calls of one per row, each at its link class's cost: how many each core issues
        and the engines' work and bytes when every core has had k of its calls served."""
        V, B, m = c.V, self.B, self.model
        ops = np.where(c.sd, c.n, 0.0)
        n_c = np.bincount(c.core, weights=ops, minlength=V * B).reshape(V, B)
        per_class = sdma_call_us(m, np.arange(len(m.links)), self.row)   # a row's call costs its class's
        work_c = np.bincount(c.core, weights=ops * np.where(c.sd, per_class[c.cls], 0.0), minlength=V * B)
        avg_c = np.divide(work_c.reshape(V, B), n_c, out=np.zeros((V, B)), where=n_c > 0)
        # the engines' work (us) when core c's first k[v, c] calls are done: every core c' of the
        # PE contributes min(n_c', k) calls, at its calls' average cost (bytes: one row each).
        engines = fair_work(c.owner, n_c, avg_c)
        return SimpleNamespace(
            n_c=n_c,
            work_done=lambda k: engines(k.ravel()).reshape(V, B),
            bytes_done=lambda k: fair_moved(c.owner, n_c, k.ravel()).reshape(V, B) * self.row,
            quiet_done=lambda x, act: engines(np.full(len(act), x), c.owner[act]))

    def _segment_calls(self, c: SimpleNamespace) -> SimpleNamespace:
        """The SDMA calls of one per segment (chunk), each of its own size: as :meth:`_row_calls`,
        a whole call counted at once."""
        V, B, ks_core = c.V, self.B, c.core
        ops = np.where(c.sd & (c.n > 0), 1.0, 0.0)
        n_c = np.bincount(ks_core, weights=ops, minlength=V * B).reshape(V, B)
        work = np.where(c.sd, sdma_call_us(self.model, c.cls, c.nbytes), 0.0) * ops
        seg_end = grouped_cumsum(ks_core, ops, c.firsts)
        work_end, bytes_end = grouped_cumsum(ks_core, work, c.firsts), grouped_cumsum(ks_core, c.nbytes * ops, c.firsts)
        span = float(c.n.sum() + 2)
        peers = np.broadcast_to(np.arange(V)[:, None, None] * B + np.arange(B)[None, None, :], (V, B, B)).ravel()

        def served(k: np.ndarray, ends: np.ndarray) -> np.ndarray:
            if len(ks_core) == 0:
                return np.zeros((V, B))
            kk = np.minimum(n_c[:, None, :], k[:, :, None]).ravel()
            at = np.minimum(np.searchsorted(ks_core * span + seg_end, peers * span + kk, side="left"),
                            len(ks_core) - 1)
            got = np.where((ks_core[at] == peers) & (kk > 0) & (ops[at] > 0), ends[at], 0.0)
            return got.reshape(V, B, B).sum(axis=2)  # kk counts whole calls: a segment is one

        return SimpleNamespace(
            n_c=n_c, work_done=lambda k: served(k, work_end), bytes_done=lambda k: served(k, bytes_end),
            quiet_done=lambda x, act: served(np.full((V, B), x), work_end).ravel()[act])

    def _sdma_quiets(self, c: SimpleNamespace, calls: SimpleNamespace) -> None:
        """The engines' work done at each core's SDMA quiet j (after every SDMA_QUIET_EVERY issues),
        asked once here: it depends on no timing parameter but the links'."""
        gates = (calls.n_c // SDMA_QUIET_EVERY).astype(np.int64).ravel()
        by_gates = np.argsort(-gates, kind="stable")
        desc = -gates[by_gates]
        self.quiets = []
        for j in range(1, int(gates.max(initial=0)) + 1):
            act = by_gates[:np.searchsorted(desc, -j, side="right")]   # the cores with at least j quiets
            self.quiets.append((act, calls.quiet_done(float(j * SDMA_QUIET_EVERY), act)))
        self.issues_after = (calls.n_c.ravel() - gates * SDMA_QUIET_EVERY)     # SDMA issues after the last quiet
        self.n_c = calls.n_c.ravel()
        self.engine_work = calls.work_done(calls.n_c).ravel()

    def _sdma_bounds(self, c: SimpleNamespace, lim: SimpleNamespace,
                     calls: SimpleNamespace) -> tuple[np.ndarray, np.ndarray]:
        """Fair-share bounds of each core's SDMA calls: their links (each core's dsts), the PE's
        egress and HBM (as bytes, divided by each point's rate when priced) and the uplinks.
        Returns each core's HBM bytes and uplink time for its last MTE chunk."""
        V, B, owner, firsts = c.V, self.B, c.owner, c.firsts
        sdma_link = np.where(c.sd, (lim.on_link(np.arange(V * self.pes), lim.link_sdma) / c.link_pair)[c.pair], 0.0)
        self.core_first, self.core_of_first = firsts, c.core[firsts]
        link_bound = np.zeros(V * B)
        if len(c.core):
            link_bound[self.core_of_first] = np.maximum.reduceat(sdma_link, firsts)
        self.link_bound = link_bound
        bd = calls.bytes_done(calls.n_c).ravel()     # the engines' bytes when each core's calls are done
        busy = (calls.n_c > 0).ravel()
        pe_sdma = lim.pe_sdma
        eg_frac = np.divide(lim.pe_sdma_eg, pe_sdma, out=np.zeros(V), where=pe_sdma > 0)[owner]
        self.egress_bytes = np.where(busy, fair_moved(owner, lim.senders, bd * eg_frac), 0.0)
        # HBM and uplinks bound a core's completion (its SDMA calls, its last MTE chunk), not each
        # chunk: one query per core (the chunks before its last are bounded by the links and egress)
        hb = fair_moved(np.tile(owner, 2), lim.hbm_senders, np.concatenate([bd, lim.core_read.ravel()]))
        self.sdma_hbm_bytes = np.where(busy, hb[:V * B], 0.0)
        up_frac = np.divide(lim.pe_sdma_up, pe_sdma, out=np.zeros(V), where=pe_sdma > 0)[owner]
        if lim.up_senders.any():
            ut = fair_moved(np.tile(owner, 2), lim.up_senders, np.concatenate([bd * up_frac, lim.core_up.ravel()]))
            ut = ut / np.tile(lim.up_rate[owner], 2)
        else:
            ut = np.zeros(2 * V * B)
        sdma_up_t = np.where(busy & (up_frac > 0), ut[:V * B], 0.0)
        self.sdma_static = np.maximum(self.link_bound, sdma_up_t)  # the bounds that no point moves
        return hb[V * B:], np.where(lim.core_up.ravel() > 0, ut[V * B:], 0.0)

    def _mte_bounds(self, c: SimpleNamespace, lim: SimpleNamespace, core_hbm_bytes: np.ndarray,
                    core_up_t: np.ndarray) -> None:
        """The MTE chunks in loop order and their bounds by the links and the egress; each core's
        last MTE chunk also carries its HBM and uplink bounds (its whole reads, its bytes off the server)."""
        ks_core, firsts = c.core, c.firsts
        is_mte = ~c.sd & (c.n > 0)
        far = is_mte & c.remote
        k_mte_remote = np.where(far, c.nbytes, 0.0)
        to_dst = grouped_cumsum(ks_core * self.pes + c.src, k_mte_remote)  # the core's MTE bytes to this dst so far
        so_far = grouped_cumsum(ks_core, k_mte_remote * lim.eg, firsts)  # its MTE bytes through the egress so far
        fp = c.pair[far]
        self.far, self.is_mte = far, is_mte
        last = np.full(len(ks_core), False)
        if len(ks_core):
            at_last = np.maximum.reduceat(np.where(is_mte, np.arange(len(ks_core)), -1), firsts)
            last[at_last[at_last >= 0]] = True
        self.last_mte = last
        self.mte_hbm_bytes = core_hbm_bytes[ks_core[last]]
        static = np.full(len(ks_core), -np.inf)
        static[far] = lim.on_link(fp, to_dst[far]) / c.link_pair[fp]
        static[last] = np.maximum(static[last], core_up_t[ks_core[last]])
        self.far_static = static[far]            # the bounds that no point moves
        self.last_static = static[last]
        self.far_egress_bytes = fair_moved(c.v[far], lim.senders, so_far[far])

    def _chunk_rows(self, c: SimpleNamespace) -> None:
        """What :meth:`price` reads of every chunk: its place, sender, rows, link class, and the
        SDMA rows its core flags before it (the flags follow the calls in loop order)."""
        self.key, self.ks_core = c.key, c.core
        self.k_n, self.k_remote, self.k_cls = c.n, c.remote, c.cls
        sdma_rows = np.where(c.sd, c.n, 0.0)
        self.before = grouped_cumsum(c.core, sdma_rows, c.firsts) - sdma_rows  # the core's SDMA rows before it
        self.rows_c = np.bincount(c.core, weights=sdma_rows, minlength=c.V * self.B)
        self.sd = c.sd

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
        C = grouped_cumsum(ks_core, D, self.core_first)
        bound = np.full((K, len(ks_core)), -np.inf)
        bound[:, self.far] = np.maximum(self.far_static, self.far_egress_bytes / egress)
        last = self.last_mte
        bound[:, last] = np.maximum(np.maximum(bound[:, last], self.last_static), self.mte_hbm_bytes / hbm)
        lead = group_scan(ks_core, np.where(is_mte, start + bound + tail - C, -np.inf))
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
    flag_at = np.append(flag_start, -np.inf)  # index -1: a slot without a row never lands
    by_slot = (flag_at[at] + after * m["flag_us"]).reshape(-1, rows.topk)
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
    return fair_moved(np.repeat(np.arange(P), B), moved, moved.ravel()).reshape(P, B)
