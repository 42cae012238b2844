"""Routing models: parse a routing string and draw expert_ids / expert_scales / x.

Models (the ``routing`` field of :class:`combine_lab.case.spec.CaseSpec`):

``uniform``
    The reference recipe of docs/protocol.md#3-reference-data-and-the-check, byte-identical:
    ``rng = default_rng(seed)``; x per rank in rank order; then
    ``expert_ids = rng.integers(0, E, (pes, bs, topk), int32)`` (repeats allowed);
    then ``expert_scales = rng.uniform(0.05, 1.0, (pes, bs, topk)).astype(float32)``,
    all 1.0 for int32. x and the routing come from that one stream; the routing is
    drawn by moving the stream past x without keeping it (float x: a jump ahead, int32
    x: drawn in chunks and dropped), so a modelled case never holds x.
``zipf:S``
    Expert popularity p ~ rank^-S (S >= 0) over a seeded permutation of the E experts;
    every token draws its top-k DISTINCT experts weighted by p (Gumbel-top-k).
``hot-expert:F``
    One seeded expert gets exactly round(F * pes*bs*topk) of all choices (at most one
    per token, so F <= 1/topk); every other choice is uniform over the other experts,
    distinct per token.
``hot-rank:F``
    The experts of one seeded PE get exactly round(F * pes*bs*topk) of all choices,
    spread as evenly as possible over tokens (each token gets floor or ceil of
    F*topk of them); within the hot PE and outside it, choices are uniform and
    distinct. Feasible iff (topk - (E - expert_per_pe))/topk <= F <= min(topk, expert_per_pe)/topk.
``trace:MODEL/DOMAIN/LAYER``
    Per-expert loads measured on a real model (see :mod:`combine_lab.traces` and
    data/routing/README.md): p = counts / sum(counts), top-k distinct by Gumbel-top-k.
    E must equal the trace's expert count.
``deepseek``
    Synthetic two-level Zipf preset calibrated to the DeepSeek-R1 figures of
    data/routing/reported_skew.csv (TensorRT-LLM blog 4, Table 1: EP32, E=256, top-8,
    no EPLB: per-expert max/mean 11.95, per-rank max/mean 2.56). Expert (pe, j) has
    popularity ``pe_rank^-A * j_rank^-B`` where pe_rank is a seeded permutation of
    the PEs and j_rank a seeded permutation of each PE's local experts, with
    A = DEEPSEEK_RANK_EXPONENT = 0.425, B = DEEPSEEK_EXPERT_EXPONENT = 1.89 (fitted on a
    grid of step 0.005 / 0.02); tokens draw top-k distinct by Gumbel-top-k. Measured at
    pes 32, expert_per_pe 8, topk 8, bs 128 (1024 choices per rank, as in the blog),
    seeds 0..59: per-expert max/mean mean 11.97 (sd 0.25, range 11.37-12.52), per-rank
    max/mean mean 2.55 (sd 0.04, range 2.43-2.62); at bs 1024: 11.92 and 2.54. The
    coefficients of variation come out 1.69 (expert) and 0.42 (rank) against the blog's
    1.28 and 0.48 (not fitted: two exponents fit the two max/mean figures only).
    Defined for any pes and expert_per_pe with the same exponents.
``external``
    Routing read from case files (:func:`combine_lab.formats.casefiles.read_case`); it cannot
    be drawn.

Streams: every model except uniform draws x exactly as the uniform recipe does from
``default_rng(seed)`` (so x is identical to uniform's for the same seed) and the
routing and scales from the independent stream ``default_rng([seed, 1])``, so the
routing is drawn without drawing x. Scales: float32 uniform(0.05, 1.0) for float16,
all 1.0 for int32. Masked slots (every model): exactly ``round(masked_fraction *
pes*bs*topk)`` slots, chosen by ``default_rng([seed, 2])``, get expert id -1.
"""

from __future__ import annotations

import difflib
import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from . import traces

#: Two-level Zipf exponents of the ``deepseek`` preset (see module docstring).
DEEPSEEK_RANK_EXPONENT = 0.425
DEEPSEEK_EXPERT_EXPONENT = 1.89

#: Models whose tokens choose distinct experts (all but uniform and external).
DISTINCT_MODELS = ("zipf", "hot-expert", "hot-rank", "trace", "deepseek")
_NO_PARAM = ("uniform", "deepseek", "external")
_ALLOWED = "uniform, zipf:S, hot-expert:F, hot-rank:F, trace:MODEL/DOMAIN/LAYER, deepseek, external"
# Rows of the Gumbel-top-k key matrix drawn at once: rows * E <= 2**18 float32 (1 MiB, drawn into
# one reused buffer: the cache holds it between the draw and the selection, 1.4x faster than 2**22,
# and the selection's temporaries stay small enough to be reused, 3k page faults instead of 66k).
# Not part of the stream definition: the keys are drawn in row order from one stream, so any block
# gives the same keys.
_KEY_BUDGET = 1 << 18
# Float slack for F comparisons against k/topk.
_EPS = 1e-9


@dataclass(frozen=True)
class Routing:
    """A parsed routing string.

    ``name``: one of uniform, zipf, hot-expert, hot-rank, trace, deepseek, external;
    ``param``: float S or F, the trace name (str) for trace, None otherwise;
    ``text``: the string it was parsed from.
    """

    name: str
    param: float | str | None
    text: str

    @property
    def distinct(self) -> bool:
        """True when each token's top-k experts are distinct (all models but uniform, external)."""
        return self.name in DISTINCT_MODELS


def parse_routing(text: str) -> Routing:
    """Parse a routing string such as ``"zipf:1.2"`` or ``"trace:olmoe/github/7"``.

    Returns: :class:`Routing`. Raises SpecError naming the routing string and what is
    allowed: unknown model, missing/extra parameter, S not a finite number >= 0,
    F not a number in [0, 1], unknown trace name. Source: this module's docstring
    (models) and docs/protocol.md#3-reference-data-and-the-check (uniform).
    """
    if not isinstance(text, str):
        raise SpecError.of("routing", text, f"must be a string, one of {_ALLOWED}")
    name, sep, arg = text.partition(":")
    if name in _NO_PARAM:
        if sep:
            raise SpecError.of("routing", text, f"model {name!r} takes no parameter")
        return Routing(name, None, text)
    if name in ("zipf", "hot-expert", "hot-rank"):
        letter = "S" if name == "zipf" else "F"
        try:
            value = float(arg) if sep else math.nan
        except ValueError:
            value = math.nan
        if name == "zipf" and not (math.isfinite(value) and value >= 0.0):
            raise SpecError.of("routing", text, "S must be a finite number >= 0, e.g. 'zipf:1.2'")
        if name != "zipf" and not (0.0 <= value <= 1.0):
            raise SpecError.of("routing", text, f"{letter} must be a number in [0, 1], e.g. '{name}:0.1'")
        return Routing(name, value, text)
    if name == "trace":
        try:
            traces.get_trace(arg)
        except KeyError:
            names = [t.removeprefix("trace:") for t in traces.list_traces()]
            near = difflib.get_close_matches(str(arg), names, n=3, cutoff=0.6)
            raise SpecError(
                f"routing={text!r}: unknown trace {arg!r}; names are MODEL/DOMAIN/LAYER, one of "
                f"{', '.join(names)}" + (f"; nearest: {', '.join(near)}" if near else ""),
                parameter="routing", value=text, allowed=", ".join(names)) from None
        return Routing(name, arg, text)
    models = [*_NO_PARAM, "zipf", "hot-expert", "hot-rank", "trace"]
    near = difflib.get_close_matches(name.lower().replace("_", "-"), models, n=1, cutoff=0.75)
    hint = f"; did you mean {near[0] + sep + arg!r}?" if near else ""
    raise SpecError.of("routing", text, f"unknown model {name!r}; allowed: {_ALLOWED}{hint}")


def check_routing(routing: Routing, pes: int, expert_per_pe: int, topk: int) -> None:
    """Check that ``routing`` can be drawn for this shape; raise SpecError if not.

    Rules: topk <= E = pes*expert_per_pe for distinct models; hot-expert F <= 1/topk
    (and F == 1/topk when topk == E); hot-rank
    (topk - (E - expert_per_pe))/topk <= F <= min(topk, expert_per_pe)/topk;
    trace: E equals the trace's expert count. Called by CaseSpec.__post_init__.
    """
    E = pes * expert_per_pe
    text = routing.text
    if routing.distinct and topk > E:
        raise SpecError.of("topk", topk, f"must be <= moe_expert_num={E} when choices are distinct (routing {text!r})")
    if routing.name == "hot-expert":
        F = routing.param
        if F * topk > 1.0 + _EPS:
            raise SpecError.of(
                "routing", text, f"F={F:g} must be <= 1/topk={1 / topk:.6g} (topk={topk}): "
                "a token picks each expert at most once")
        if topk == E and F * topk < 1.0 - _EPS:
            raise SpecError.of(
                "routing", text, f"F={F:g} must equal 1/topk={1 / topk:.6g} when topk={topk} == "
                f"moe_expert_num={E}: every token picks every expert")
    elif routing.name == "hot-rank":
        F = routing.param
        hi = min(topk, expert_per_pe)
        lo = max(0, topk - (E - expert_per_pe))
        if F * topk > hi + _EPS:
            raise SpecError.of(
                "routing", text, f"F={F:g} must be <= min(topk, expert_per_pe)/topk={hi / topk:.6g} "
                f"(topk={topk}, expert_per_pe={expert_per_pe}): a token picks at most "
                f"{hi} distinct experts of one PE")
        if F * topk < lo - _EPS:
            raise SpecError.of(
                "routing", text, f"F={F:g} must be >= (topk - (moe_expert_num - expert_per_pe))/topk"
                f"={lo / topk:.6g} (topk={topk}, moe_expert_num={E}, expert_per_pe={expert_per_pe}): "
                f"a token picks at most {E - expert_per_pe} distinct experts off the hot PE")
    elif routing.name == "trace":
        n = traces.get_trace(routing.param).num_experts
        if n != E:
            raise SpecError.of("routing", text, f"moe_expert_num={E} (pes*expert_per_pe) must equal the trace's "
                                              f"expert count {n}")


# --------------------------------------------------------------------------- x


def _draw_x_from(rng: np.random.Generator, pes: int, bs: int, h: int, np_dtype: type) -> np.ndarray:
    """x per rank in rank order, exactly as docs/protocol.md#3-reference-data-and-the-check draws it
    (``np_dtype``: T's numpy type, ``CaseSpec.np_dtype``)."""
    x = np.empty((pes, bs, h), dtype=np_dtype)
    for r in range(pes):  # one draw per rank: the recipe's stream order
        if np_dtype is np.int32:
            x[r] = rng.integers(-5, 6, size=(bs, h), dtype=np.int32)
        else:  # float16 or bfloat16: the same draw, rounded half to even to T
            x[r] = rng.uniform(-1.0, 1.0, size=(bs, h)).astype(np_dtype)
    return x


#: int32 x values drawn (and dropped) at once when a uniform routing skips past x.
_SKIP_CHUNK = 1 << 20


def _skip_x(rng: np.random.Generator, n: int, np_dtype: type) -> None:
    """Move ``rng`` past the ``n`` values of x that :func:`_draw_x_from` would draw, exactly.

    float16 / bfloat16: ``uniform`` takes one 64-bit output per value and leaves PCG64's 32-bit
    buffer empty (the stream is fresh), so the stream jumps ahead by ``n`` (``advance``, which also
    leaves the buffer empty). int32: ``integers`` rejects a few 32-bit outputs (Lemire's method), so
    how many it takes depends on them: they are drawn in chunks and dropped; call boundaries do not
    change what is taken (the buffer lives in the bit generator).
    """
    if np_dtype is np.int32:
        for start in range(0, n, _SKIP_CHUNK):
            rng.integers(-5, 6, size=min(_SKIP_CHUNK, n - start), dtype=np.int32)
    else:
        rng.bit_generator.advance(n)


#: Bytes of drawn routings kept for the cases that follow (a grid's cases differing in h only
#: share one draw, uniform's where x's length is the same): the oldest dropped first.
CACHE_BYTES = 64 << 20
_cache: OrderedDict = OrderedDict()
_cache_bytes = 0


def _cached(key: tuple, draw) -> tuple[np.ndarray, np.ndarray]:
    """``draw()`` (ids, scales) under ``key``, made read-only and kept within CACHE_BYTES."""
    global _cache_bytes
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    ids, scales = draw()
    for a in (ids, scales):
        a.setflags(write=False)
    _cache[key] = (ids, scales)
    _cache_bytes += ids.nbytes + scales.nbytes
    while len(_cache) > 1 and _cache_bytes > CACHE_BYTES:
        _, (i, sc) = _cache.popitem(last=False)
        _cache_bytes -= i.nbytes + sc.nbytes
    return ids, scales


def _uniform_routing(spec) -> tuple[np.ndarray, np.ndarray]:
    """The recipe's ids and scales with the stream moved past x; h and the dtype's family (int32 or
    float) set where they start in the stream."""
    is_int = spec.np_dtype is np.int32
    pes, bs, topk = spec.pes, spec.bs, spec.topk

    def draw():
        rng = np.random.default_rng(spec.seed)
        _skip_x(rng, pes * bs * spec.h, np.int32 if is_int else np.float16)
        ids = rng.integers(0, spec.moe_expert_num, size=(pes, bs, topk), dtype=np.int32)
        scales = rng.uniform(0.05, 1.0, size=(pes, bs, topk)).astype(np.float32)
        if is_int:
            scales[...] = 1.0
        return ids, scales
    return _cached(("uniform", pes, bs, spec.h, topk, spec.moe_expert_num, is_int, spec.seed), draw)


def _distinct_routing(spec, routing: "Routing") -> tuple[np.ndarray, np.ndarray]:
    """A non-uniform model's ids and scales from ``default_rng([seed, 1])``: h plays no part."""
    is_int = spec.dtype == "int32_t"

    def draw():
        rng = np.random.default_rng([spec.seed, 1])
        ids = _draw_distinct(spec, routing, rng)
        if is_int:
            scales = np.ones(ids.shape, dtype=np.float32)
        else:
            scales = rng.uniform(0.05, 1.0, size=ids.shape).astype(np.float32)
        return ids, scales
    return _cached((routing.text, spec.pes, spec.bs, spec.topk, spec.expert_per_pe, is_int, spec.seed), draw)


def clear_cache() -> None:
    """Drop the cached routings (at most CACHE_BYTES)."""
    global _cache_bytes
    _cache.clear()
    _cache_bytes = 0


def _refuse_external(spec, what: str) -> None:
    if parse_routing(spec.routing).name == "external":
        raise SpecError.of("routing", "external", f"{what} cannot be drawn; it was read from case files")


def draw_x(spec) -> np.ndarray:
    """Token activations x, T [pes, bs, h] (T = spec.np_dtype).

    Drawn from ``default_rng(spec.seed)`` rank by rank as in docs/protocol.md#3-reference-data-and-the-check,
    for every model (x does not depend on the routing); a fresh writable array each call.
    Raises SpecError for routing 'external'.
    """
    _refuse_external(spec, "x")
    return _draw_x_from(np.random.default_rng(spec.seed), spec.pes, spec.bs, spec.h, spec.np_dtype)


# --------------------------------------------------------------------- routing


def weighted_topk_distinct(rng: np.random.Generator, p: np.ndarray, n: int, k: int) -> np.ndarray:
    """Sample k distinct indices per row without replacement, weighted by p (Gumbel-top-k).

    Each row keeps the k smallest of ``Exp(1)_i / p_i`` (equivalently the k largest
    ``log p_i + Gumbel_i``), in increasing key order = the order of sequential
    sampling without replacement. Keys are float32 (Exp(1) draws of
    ``rng.standard_exponential(dtype=float32)``). ``p``: float64 [E], >= 0, at least k positive
    entries for an exact law (zero-weight entries are only taken when fewer remain).
    Returns int32 [n, k]. Keys are drawn in blocks of _KEY_BUDGET // E rows.
    """
    E = p.size
    if k == 0:
        return np.empty((n, 0), dtype=np.int32)
    with np.errstate(divide="ignore", over="ignore"):
        inv_p = np.where(p > 0, 1.0 / np.where(p > 0, p, 1.0), np.inf).astype(np.float32)
    out = np.empty((n, k), dtype=np.int32)
    rows = max(1, _KEY_BUDGET // E)
    buf = np.empty((min(rows, n), E), dtype=np.float32)  # one block's keys, reused: no fresh pages per block
    for start in range(0, n, rows):  # blocks bound memory; each block is vectorised
        m = min(rows, n - start)
        keys = rng.standard_exponential(dtype=np.float32, out=buf[:m])
        keys *= inv_p
        out[start:start + m] = _k_smallest(keys, k)
    return out


def _k_smallest(keys: np.ndarray, k: int) -> np.ndarray:
    """int [m, k]: per row of ``keys`` (float32 [m, E], >= 0, inf allowed) the columns of its k
    smallest keys in increasing key order, exactly what ``argpartition`` then a stable ``argsort``
    of the k gives (the law's definition, :func:`weighted_topk_distinct`), but faster: the keys
    below a threshold (about 3k per row, taken from a sample of rows) are sorted once for the whole
    block as one uint64 each, (row, the key's float32 bits, column) packed high to low (a
    non-negative float32 orders as its bits); a row with k or fewer below it, or a tie among its
    k + 1 smallest (where argpartition's order would decide), is done the exact way."""
    m, E = keys.shape
    if 3 * k >= E or m < 64:  # the threshold's sample is every (m // 64)-th row
        return _k_smallest_exact(keys, k)
    cb = max(1, (E - 1).bit_length())  # bits of a column, below 31 bits of the key, below the row
    if (m - 1).bit_length() + 31 + cb > 64:
        return _k_smallest_exact(keys, k)
    c = 3 * k
    sample = keys[:: m // 64]
    t = np.float32(np.median(np.partition(sample, c, axis=1)[:, c]))
    if not np.isfinite(t):  # fewer than 3k positive weights: the exact way
        return _k_smallest_exact(keys, k)
    flat = np.flatnonzero(keys < t)
    rows = flat // E
    packed = ((rows.astype(np.uint64) << np.uint64(31 + cb))
              | (keys.view(np.uint32).ravel()[flat].astype(np.uint64) << np.uint64(cb))
              | (flat - rows * E).astype(np.uint64))
    packed.sort()  # by row, then key, then column; every entry distinct
    cnt = np.bincount(rows, minlength=m)
    ok = np.flatnonzero(cnt > k)
    first = packed[(np.cumsum(cnt) - cnt)[ok, None] + np.arange(k + 1)]  # each row's k + 1 smallest
    out = np.empty((m, k), dtype=np.int64)
    out[ok] = first[:, :k] & np.uint64((1 << cb) - 1)
    key = first >> np.uint64(cb)  # (row, key): equal iff the two keys tie
    redo = np.concatenate([np.flatnonzero(cnt <= k), ok[(key[:, 1:] == key[:, :-1]).any(axis=1)]])
    if len(redo):
        out[redo] = _k_smallest_exact(keys[redo], k)
    return out


def _k_smallest_exact(keys: np.ndarray, k: int) -> np.ndarray:
    idx = np.argpartition(keys, k - 1, axis=1)[:, :k]
    order = np.argsort(np.take_along_axis(keys, idx, axis=1), axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1)


def _zipf_weights(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    """float64 [n]: weight rank^-exponent placed on a seeded permutation of n items."""
    w = np.empty(n)
    w[rng.permutation(n)] = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return w


def _deepseek_weights(rng: np.random.Generator, pes: int, epp: int) -> np.ndarray:
    rank_w = _zipf_weights(rng, pes, DEEPSEEK_RANK_EXPONENT)
    local_rank = rng.permuted(np.tile(np.arange(epp), (pes, 1)), axis=1)
    local_w = (local_rank + 1.0) ** -DEEPSEEK_EXPERT_EXPONENT
    return (rank_w[:, None] * local_w).ravel()


def _hot_expert_ids(rng, F, T, topk, E):
    hot = int(rng.integers(E))
    n_hot = T if F * topk >= 1.0 - _EPS else min(T, round(F * T * topk))
    hot_tokens = rng.permutation(T)[:n_hot]
    pos = rng.integers(topk, size=n_hot)
    p = np.ones(E)
    p[hot] = 0.0
    others = weighted_topk_distinct(rng, p, T, min(topk, E - 1))
    if others.shape[1] < topk:  # topk == E: every token is hot; pad the slot the hot expert takes
        others = np.concatenate([others, np.full((T, 1), -1, dtype=np.int32)], axis=1)
    ids = others.copy()
    cols = np.arange(topk)
    src = cols[None, :] - (cols[None, :] > pos[:, None])  # shift right of the hot slot
    ids[hot_tokens] = np.take_along_axis(others[hot_tokens], src, axis=1)
    ids[hot_tokens, pos] = hot
    return ids


def _hot_rank_ids(rng, F, T, topk, pes, epp):
    E = pes * epp
    hot_pe = int(rng.integers(pes))
    hi, lo = min(topk, epp), max(0, topk - (E - epp))
    n_hot = min(max(round(F * T * topk), T * lo), T * hi)
    q, rem = divmod(n_hot, T)
    c = np.full(T, q, dtype=np.int64)
    c[rng.permutation(T)[:rem]] += 1
    hot_ids = hot_pe * epp + weighted_topk_distinct(rng, np.ones(epp), T, hi)
    cold_pool = np.delete(np.arange(E, dtype=np.int32), np.arange(hot_pe * epp, (hot_pe + 1) * epp))
    n_cold = min(topk, E - epp)
    cold_ids = cold_pool[weighted_topk_distinct(rng, np.ones(E - epp), T, n_cold)] if n_cold else \
        np.empty((T, 0), dtype=np.int32)
    cand = np.concatenate([hot_ids, cold_ids], axis=1)
    take = np.concatenate([np.arange(hi)[None, :] < c[:, None],
                           np.arange(n_cold)[None, :] < (topk - c)[:, None]], axis=1)
    ids = cand[take].reshape(T, topk)  # each row takes exactly topk candidates
    shuffle = np.argsort(rng.random((T, topk)), axis=1)
    return np.take_along_axis(ids, shuffle, axis=1).astype(np.int32)


def _draw_distinct(spec, routing: Routing, rng: np.random.Generator) -> np.ndarray:
    pes, epp, topk, E = spec.pes, spec.expert_per_pe, spec.topk, spec.moe_expert_num
    T = pes * spec.bs
    if routing.name == "zipf":
        ids = weighted_topk_distinct(rng, _zipf_weights(rng, E, routing.param), T, topk)
    elif routing.name == "deepseek":
        ids = weighted_topk_distinct(rng, _deepseek_weights(rng, pes, epp), T, topk)
    elif routing.name == "trace":
        ids = weighted_topk_distinct(rng, traces.get_trace(routing.param).probabilities, T, topk)
    elif routing.name == "hot-expert":
        ids = _hot_expert_ids(rng, routing.param, T, topk, E)
    else:
        ids = _hot_rank_ids(rng, routing.param, T, topk, pes, epp)
    return ids.reshape(pes, spec.bs, topk)


def apply_mask(expert_ids: np.ndarray, spec) -> None:
    """Set exactly round(spec.masked_fraction * ids.size) slots of ``expert_ids`` to -1, in place.

    ``expert_ids``: int32 [pes, bs, topk], writable. The slots are chosen without
    replacement by ``default_rng([spec.seed, 2])``; Python round (half to even).
    """
    n = round(spec.masked_fraction * expert_ids.size)
    if n:
        idx = np.random.default_rng([spec.seed, 2]).choice(expert_ids.size, size=n, replace=False)
        expert_ids.reshape(-1)[idx] = -1


def draw_routing(spec) -> tuple[np.ndarray, np.ndarray]:
    """Draw the routing of ``spec`` (a CaseSpec).

    Returns ``(expert_ids, expert_scales)``: int32 [pes, bs, topk] with masked slots -1,
    and float32 [pes, bs, topk] (all 1.0 for int32_t). Fresh writable arrays.
    uniform follows docs/protocol.md#3-reference-data-and-the-check without drawing x: the stream
    is moved past x (:func:`_skip_x`), the same ids and scales as drawing it; the other models use
    ``default_rng([seed, 1])`` and never draw x. The draws are kept (:data:`CACHE_BYTES`), so the
    cases of a grid that differ in h only draw once (uniform: once per h). Raises SpecError for
    'external'.
    """
    _refuse_external(spec, "the routing")
    routing = parse_routing(spec.routing)
    draw = _uniform_routing(spec) if routing.name == "uniform" else _distinct_routing(spec, routing)
    ids, scales = draw[0].copy(), draw[1].copy()
    apply_mask(ids, spec)
    return ids, scales
