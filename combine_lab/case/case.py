"""Combine cases: routing, receive counts and the per-rank combine inputs (docs/protocol.md#1-the-combine-problem, docs/protocol.md#2-dispatch-layout and docs/formats.md#1-case-files).

``make_case(spec)`` draws the routing only; the receive counts come from it with one
bincount. The per-rank arrays (expand_x, assist_info_for_combine, golden_x_out) are
materialised on demand by ``Case.rank_inputs(r)``, which draws x once (lazily).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from .routing import draw_routing, draw_x
from .spec import CaseSpec

__all__ = ["RankInputs", "Case", "make_case", "case_from_arrays", "golden_x_out", "segment_counts_of",
           "receive_order", "golden_rank", "as_expert_ids"]

_INT32 = np.iinfo(np.int32)


def as_expert_ids(expert_ids, moe_expert_num: int, name: str = "expert_ids") -> np.ndarray:
    """``expert_ids`` as the int32 array the case files hold, every id outside ``[0, moe_expert_num)``
    still outside it (docs/protocol.md#1-the-combine-problem: such a slot is masked).

    ``expert_ids``: an array of any integer dtype (int8 ... int64, uint8 ... uint64), any shape.
    Valid ids are kept; a masked id that int32 can hold is kept as it is (-1, or E as a "not routed"
    padding); a masked id that int32 cannot hold (say the int64 ``2**32 + 1``, which a plain cast
    would turn into 1, a valid expert) becomes -1. An int32 array is returned as it is (no copy).

    Raises:
        SpecError: the array is not of an integer dtype (float, bool, object, ...); the message
            names ``name`` and the dtype found.
    """
    a = np.asarray(expert_ids)
    if a.dtype.kind not in "iu":
        raise SpecError(f"{name}: dtype {a.dtype.name}: must be an integer array (expert ids; ids outside "
                        f"[0, {moe_expert_num}) are masked)", parameter=name, value=a.dtype.name,
                        allowed="an integer array")
    if a.dtype == np.int32:
        return a
    if a.dtype.itemsize < 4:  # int8, int16, uint8, uint16: every value fits
        return a.astype(np.int32)
    fits = (a >= _INT32.min) & (a <= _INT32.max)  # compared in a's own dtype: no wrap-around
    return np.where(fits, a, -1).astype(np.int32)


@dataclass(frozen=True)
class RankInputs:
    """The combine inputs and golden output of one destination PE (docs/protocol.md#2-dispatch-layout).

    ``expand_x``: T [pes*bs*topk, h], rows past the last count zero;
    ``assist_info_for_combine``: int32 [pes*bs*topk, 3] (src_rank, token_id, topk_id),
    padding rows zero; ``ep_recv_count``: int32 [expert_per_pe*pes] cumulative;
    ``expert_ids``: int32 [bs, topk]; ``expert_scales``: float32 [bs, topk];
    ``golden_x_out``: T [bs, h].
    """

    expand_x: np.ndarray
    assist_info_for_combine: np.ndarray
    ep_recv_count: np.ndarray
    expert_ids: np.ndarray
    expert_scales: np.ndarray
    golden_x_out: np.ndarray


def segment_counts_of(expert_ids: np.ndarray, pes: int, expert_per_pe: int) -> np.ndarray:
    """Rows each destination PE receives per segment (non-cumulative).

    ``expert_ids``: int [pes, bs, topk]; ids outside [0, E) are masked and not counted.
    Returns int64 [pes, expert_per_pe*pes]: ``[d, local_expert*pes + src_rank]`` =
    number of (token, topk) slots of src_rank routed to expert d*expert_per_pe +
    local_expert (docs/protocol.md#2-dispatch-layout: segment = local_expert * pes + src_rank).
    """
    E = pes * expert_per_pe
    ids = expert_ids.reshape(pes, -1)
    src = np.broadcast_to(np.arange(pes)[:, None], ids.shape)
    valid = (ids >= 0) & (ids < E)
    # expert e = d*epp + local, so e*pes + src = d*(epp*pes) + local*pes + src
    key = ids[valid].astype(np.int64) * pes + src[valid]
    return np.bincount(key, minlength=E * pes).reshape(pes, expert_per_pe * pes)


def receive_order(expert_ids: np.ndarray, moe_expert_num: int) -> np.ndarray:
    """The order in which the expert owners hold the valid slots of ``expert_ids`` (docs/protocol.md#2-dispatch-layout).

    ``expert_ids``: int, any shape ending in topk, flattened in C order: [pes, bs, topk] gives
    slot = src_rank*bs*topk + token*topk + k; one rank's [bs, topk] gives token*topk + k.
    Returns int64 [n_valid]: the flat slots with an id in [0, moe_expert_num), sorted by expert id
    (= destination PE, then local expert), then by slot (= src_rank, token_id, topk_id): the
    receive-row order of dispatch, and the order in which a rank's rows come back in combine.
    """
    flat = expert_ids.reshape(-1)
    slots = np.flatnonzero((flat >= 0) & (flat < moe_expert_num))
    if moe_expert_num <= 1 << 16:  # slots ascend, so a stable sort by id orders by (id, slot); uint16's is a radix sort
        return slots[np.argsort(flat[slots].astype(np.uint16), kind="stable")]
    return slots[np.lexsort((slots, flat[slots]))]


#: Token rows per golden block: about 512 KiB of float32 per buffer, so the topk passes
#: over a block stay in cache.
_GOLDEN_BLOCK_BYTES = 1 << 19


def golden_rank(x_r: np.ndarray, expert_ids_r: np.ndarray, expert_scales_r: np.ndarray,
                moe_expert_num: int) -> np.ndarray:
    """Golden combine output of one PE with identity experts (docs/protocol.md#1-the-combine-problem and docs/protocol.md#3-reference-data-and-the-check).

    ``x_r``: T [bs, h]; ``expert_ids_r``: int32 [bs, topk]; ``expert_scales_r``:
    float32 [bs, topk]. For k = 0..topk-1 in order, over valid slots (id in [0, E)):
    ``acc = acc + x.astype(float32) * scale`` (a float32 product then a float32 sum,
    two roundings), acc starting at 0; then ``acc.astype(T)``. Returns T [bs, h].
    Works on blocks of tokens (vectorised within a block) to stay in cache.
    """
    bs, h = x_r.shape
    topk = expert_ids_r.shape[1]
    scales = np.asarray(expert_scales_r, dtype=np.float32)
    valid = (expert_ids_r >= 0) & (expert_ids_r < moe_expert_num)
    out = np.empty((bs, h), dtype=x_r.dtype)
    rows = max(1, min(bs, _GOLDEN_BLOCK_BYTES // (4 * h)))
    acc, xf, prod = (np.empty((rows, h), dtype=np.float32) for _ in range(3))
    for start in range(0, bs, rows):  # token blocks; each block is vectorised
        m = min(rows, bs - start)
        a, xb, p = acc[:m], xf[:m], prod[:m]
        a.fill(0.0)
        np.copyto(xb, x_r[start:start + m], casting="unsafe")
        for k in range(topk):  # topk order fixes the float32 rounding sequence
            np.multiply(xb, scales[start:start + m, k, None], out=p)
            np.add(a, p, out=a, where=valid[start:start + m, k, None])
        np.copyto(out[start:start + m], a, casting="unsafe")  # = a.astype(T)
    return out


class Case:
    """One combine case: spec, routing and receive counts; rank arrays on demand.

    Attributes: ``spec`` (CaseSpec); ``expert_ids`` int32 [pes, bs, topk] (-1 or any
    id outside [0, E) = masked; given in any integer dtype, see :func:`as_expert_ids`);
    ``expert_scales`` float32 [pes, bs, topk];
    ``segment_counts`` int64 [pes, expert_per_pe*pes] (rows per segment, non-cumulative);
    ``ep_recv_count`` int32 [pes, expert_per_pe*pes] (cumulative per destination PE,
    docs/protocol.md#2-dispatch-layout). ``x`` (T [pes, bs, h]) is drawn on first use.
    """

    def __init__(self, spec: CaseSpec, expert_ids: np.ndarray, expert_scales: np.ndarray):
        self.spec = spec
        self.expert_ids = as_expert_ids(expert_ids, spec.moe_expert_num)
        self.expert_scales = np.asarray(expert_scales, dtype=np.float32)
        self.segment_counts = segment_counts_of(self.expert_ids, spec.pes, spec.expert_per_pe)
        self.ep_recv_count = np.cumsum(self.segment_counts, axis=1).astype(np.int32)
        self._x = None
        self._order = None

    def meta(self) -> dict:
        """meta.json content for this case (``spec.to_meta()``)."""
        return self.spec.to_meta()

    @property
    def x(self) -> np.ndarray:
        """Token activations T [pes, bs, h] (identity experts: expert output = x), drawn once."""
        if self._x is None:
            self._x = draw_x(self.spec)
        return self._x

    def _receive_order(self) -> np.ndarray:
        """:func:`receive_order` of every rank's slots (src_rank*bs*topk + token*topk + k), once.
        Destination d's rows are a contiguous block."""
        if self._order is None:
            self._order = receive_order(self.expert_ids, self.spec.moe_expert_num)
        return self._order

    def rank_rows(self, r: int) -> np.ndarray:
        """int32 [n_r, 3]: (src_rank, token_id, topk_id) of PE r's received rows, in
        receive order (local_expert, src_rank, token_id, topk_id); n_r = ep_recv_count[r, -1]."""
        spec = self.spec
        rows_per_pe = self.segment_counts.sum(axis=1)
        start = int(rows_per_pe[:r].sum())
        slots = self._receive_order()[start:start + int(rows_per_pe[r])]
        per_rank = spec.bs * spec.topk
        return np.stack([slots // per_rank, (slots // spec.topk) % spec.bs, slots % spec.topk],
                        axis=1).astype(np.int32)

    def golden(self, r: int) -> np.ndarray:
        """Golden x_out of PE r, T [bs, h] (see :func:`golden_rank`)."""
        return golden_rank(self.x[r], self.expert_ids[r], self.expert_scales[r], self.spec.moe_expert_num)

    def rank_inputs(self, r: int) -> RankInputs:
        """Materialise PE r's combine inputs and golden output (docs/protocol.md#2-dispatch-layout).

        Memory: about capacity_rows*row_bytes for expand_x plus bs*row_bytes.
        Raises IndexError if r is not in [0, pes).
        """
        spec = self.spec
        if not 0 <= r < spec.pes:
            raise IndexError(f"r={r}: must be in [0, pes={spec.pes})")
        rows = self.rank_rows(r)
        n = rows.shape[0]
        expand_x = np.zeros((spec.capacity_rows, spec.h), dtype=spec.np_dtype)
        x_rows = self.x.reshape(spec.pes * spec.bs, spec.h)
        # identity experts: row = x[src_rank, token_id], gathered straight into place
        np.take(x_rows, rows[:, 0].astype(np.int64) * spec.bs + rows[:, 1], axis=0, out=expand_x[:n])
        assist = np.zeros((spec.capacity_rows, 3), dtype=np.int32)
        assist[:n] = rows
        return RankInputs(expand_x, assist, self.ep_recv_count[r].copy(), self.expert_ids[r].copy(),
                          self.expert_scales[r].copy(), self.golden(r))


def make_case(spec: CaseSpec) -> Case:
    """Draw the routing of ``spec`` and build its Case (counts only; x drawn lazily).

    Cost: the routing draw (for uniform, the whole recipe including x) plus one
    bincount over pes*bs*topk slots. Raises SpecError for routing 'external'.
    """
    expert_ids, expert_scales = draw_routing(spec)
    return Case(spec, expert_ids, expert_scales)


def case_from_arrays(spec: CaseSpec, x: np.ndarray, expert_ids: np.ndarray, expert_scales: np.ndarray) -> Case:
    """A Case with given activations and routing instead of drawn ones (hand-made cases).

    ``x``: numbers [pes, bs, h], the tokens and, the experts being identities, their expert
    outputs (cast to spec.dtype); ``expert_ids``: any integer dtype [pes, bs, topk], an id
    outside [0, E) is a masked slot, whatever its dtype (see :func:`as_expert_ids`: -1, E and
    the int64 ``2**32 + 1`` are all masked, never cast into range); ``expert_scales``: numbers
    [pes, bs, topk] (cast to float32). Use ``routing="external"`` in ``spec`` so that nothing is
    redrawn.

    Raises:
        SpecError: an array's shape differs from the spec's, ``expert_ids`` is not an integer
            array, or ``x`` / ``expert_scales`` are not numbers (the message names the array).
    """
    want = {"x": (spec.pes, spec.bs, spec.h), "expert_ids": (spec.pes, spec.bs, spec.topk),
            "expert_scales": (spec.pes, spec.bs, spec.topk)}
    arrays = {"x": np.asarray(x), "expert_ids": np.asarray(expert_ids), "expert_scales": np.asarray(expert_scales)}
    for name, shape in want.items():
        if arrays[name].shape != shape:
            raise SpecError(f"{name}: shape {arrays[name].shape}, expected {shape} for {spec.case_id}", parameter=name,
                            value=arrays[name].shape, allowed=f"shape {shape}")
    for name in ("x", "expert_scales"):
        if arrays[name].dtype.kind not in "iuf":
            raise SpecError(f"{name}: dtype {arrays[name].dtype.name}: must be an array of numbers (int or float)",
                            parameter=name, value=arrays[name].dtype.name, allowed="an array of numbers (int or float)")
    case = Case(spec, arrays["expert_ids"], arrays["expert_scales"])
    case._x = arrays["x"].astype(spec.np_dtype)
    return case


def golden_x_out(case: Case) -> np.ndarray:
    """Golden x_out of every PE, T [pes, bs, h] (docs/protocol.md#1-the-combine-problem and docs/protocol.md#3-reference-data-and-the-check)."""
    return np.stack([case.golden(r) for r in range(case.spec.pes)])
