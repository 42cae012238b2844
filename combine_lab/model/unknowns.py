"""The verdict over the model's unknowns: the range the modelled speed-up of doubleplane over
classic (comm_only of the slowest PE) takes when the assumed parameters move over their box
(docs/timing-model.md#5-assumptions and #8-choosing-the-floor).

The band is a search of the box, not one parameter at a time: the model's times are monotone in
each parameter, their ratio is not. A parameter only doubleplane reads (the SDMA ones; with the
segment layout also its step's flag latency and barrier) moves the ratio one way, so its extremes
lie at its range's ends: the band's low end has each at the end that slows doubleplane, the high
end at the other. The parameters both plans read (the MTE ones) are searched: every vertex of
their ranges, then a local optimiser (a bounded compass search, :func:`compass_search`) from the most extreme vertex of each end,
and the end is the most extreme value found (a value the model takes at a stated point: the
point is reported). ``sdma_engines`` is a count: it is only ever set to whole numbers (its ends,
and the engine curve's counts). The suite checks the band by sampling random points of the box.

The sensitivity is joint: the 2-level full factorial over every vertex of the unknowns that
comm_only reads (the speed-up's geometric mean with a parameter at each end, over every
combination of the others; the strongest two-way interactions), and the vertices that flip the
verdict ("pays if": what every vertex where doubleplane beats classic has in common).

A floor "beats MTE-only" only when its speed-up exceeds ``1 + RESOLUTION`` over the whole band
(its low end): :data:`RESOLUTION` is the model's resolution, the size of effect its
approximations (fair sharing, the engines' average round robin) cannot be trusted below.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..planning.settings import REFERENCE, KernelSettings, parse_settings, variant_label
from .machines import NpuModel
from .replay import Stage1, settings_args
from .stream import CaseRows
from ..kernels import CLASSIC, DOUBLEPLANE

#: Below this relative difference two modelled times are a tie (5 %).
RESOLUTION = 0.05
#: SDMA engines (concurrent SQs) the engine curve is given at: 1 to the 48 SQs SHMEM creates.
ENGINES = (1, 2, 4, 8, 16, 32, 48)
#: The parameters stage 1 reads (comm_only); SDMA ones only where a plan sends by SDMA; the
#: segment layout's step also reads :data:`LAYOUT_READS`.
STAGE1_READS = ("egress_GBps", "core_gm_GBps", "mte_remote_GBps", "mte_put_us", "flag_us", "quiet_us",
                "sdma_engines", "sdma_issue_us", "sdma_quiet_us", "hbm_GBps")
SDMA_READS = ("sdma_engines", "sdma_issue_us", "sdma_quiet_us")
LAYOUT_READS = ("flag_latency_us", "barrier_us")
#: Units of parameters that are counts: only whole values are priced.
COUNT_UNITS = ("engines",)
#: Vertices the local optimiser starts from, per end of the band.
STARTS = 1
#: PEs the local optimiser prices per plan: the slowest ones at the vertices (every end it finds
#: is priced again with every PE).
CANDIDATE_PES = 4
_FEV, _XTOL = 40, 1e-3


def word(speedup: float) -> str:
    """'3.2x slower', '1.6x faster' or 'parity' (within :data:`RESOLUTION`)."""
    if abs(speedup - 1) <= RESOLUTION:
        return "parity"
    return f"{speedup:.1f}x faster" if speedup > 1 else f"{1 / speedup:.1f}x slower"


def _point_text(at: dict) -> str:
    # 4 significant digits: an optimiser's 0.589844 says no more than 0.5898 and reads as a byte count
    return ", ".join(f"{n} {v:.4g}" for n, v in at.items())


@dataclass
class Verdict:
    """The speed-up (classic / doubleplane comm_only, > 1: doubleplane faster) at ``floor``:
    ``nominal``; ``low``, ``high``: the band over the unknowns' box (module doc), reached at the
    points ``low_at``, ``high_at`` (parameter -> value, the unknowns comm_only reads); ``engines``
    (DataFrame: engines, speedup; the rest nominal); ``sensitivity`` (DataFrame, most moving first:
    parameter, low, high (its range), speedup_at_low, speedup_at_high (the speed-up's geometric mean
    over every vertex with the parameter at that end), spread = |log of their ratio|, the factorial
    main effect); ``interactions`` (DataFrame, strongest first: parameters "a x b", effect: the
    two-way interaction of log speed-up); ``vertices`` (DataFrame: one row per vertex of the
    unknowns, their values and the speedup); ``no_effect``: assumed parameters comm_only does not
    read (``held``: the assumed link-class parameters, which the box leaves at their nominal
    values); ``pays_from``: the fewest engines of :data:`ENGINES` at which doubleplane beats classic by
    more than the resolution, the rest nominal (None: at none); ``limits``: for each parameter only
    the variant reads, how far it may move from ``high_at`` and still pay (">=" or "<=", the bound;
    left out where it pays over its whole range), ``engines_needed`` the fewest whole engines of
    them (None: not at all, or no SDMA)."""

    floor: int
    nominal: float
    low: float
    high: float
    engines: pd.DataFrame
    sensitivity: pd.DataFrame
    no_effect: tuple[str, ...]
    pays_from: int | None
    label: str = DOUBLEPLANE  # the variant label priced (docs/variants.md): doubleplane-segment-c6, classic-c6
    low_at: dict = field(default_factory=dict)
    high_at: dict = field(default_factory=dict)
    vertices: pd.DataFrame | None = None
    interactions: pd.DataFrame | None = None
    engines_needed: int | None = None
    against: str = CLASSIC  # the classic the speed-up is over: classic (the reference's), classic-c6, ...
    metric: str = "comm_only"  # of the engine curve and pays_from; the band is comm_only's
    held: tuple[str, ...] = ()  # assumed link-class parameters, not searched (held at nominal)
    limits: dict = field(default_factory=dict)  # name -> (">=" or "<=", bound): how far each may move and still pay

    @property
    def beats(self) -> bool:
        """Doubleplane beats classic by more than the resolution over the whole band."""
        return self.low > 1 + RESOLUTION

    def engines_line(self) -> str:
        """:func:`engines_line` of this verdict."""
        return engines_line(self.floor, self.engines, self.label, self.against, self.metric)

    def band_text(self) -> str:
        """The band and the points of its ends."""
        return (f"over the unknowns' box (comm_only): {self.low:.3f}x - {self.high:.3f}x {self.against} (nominal "
                f"{self.nominal:.3f}x; "
                f"the model's resolution {RESOLUTION:.0%}); lowest at {_point_text(self.low_at)}; highest at "
                f"{_point_text(self.high_at)}")

    def pays_if(self) -> str:
        """Which combination of the unknowns makes doubleplane pay (beat classic by more than the
        resolution), from the vertices: 'faster, up to 1.711x, if sdma_engines >= 40 and ...'."""
        if self.high <= 1 + RESOLUTION:
            return f"it pays nowhere in the box (at most {self.high:.3f}x)"
        if self.beats:
            return f"it pays everywhere in the box (at least {self.low:.3f}x)"
        conds = [f"{n} {op} {x:.3g}" for n, (op, x) in self.limits.items()]
        v = self.vertices
        if v is not None and len(v):
            names = [c for c in v.columns if c != "speedup"]
            pays = v[v["speedup"] > 1 + RESOLUTION]
            for n in names:
                if n in self.limits or not len(pays) or pays[n].nunique() != 1:
                    continue
                lo, hi = v[n].min(), v[n].max()
                end = float(pays[n].iloc[0])
                conds.append(f"{n} = {end:g}" if lo == hi else (f"{n} <= {lo:g}" if end == lo else f"{n} >= {hi:g}"))
            share = f" (it pays at {len(pays)} of the box's {len(v)} vertices)"
        else:
            share = ""
        cond = " and ".join(conds) if conds else "the unknowns combine as at its highest point"
        return f"faster, up to {self.high:.3f}x, if {cond}{share}; highest at {_point_text(self.high_at)}"

    def text(self) -> str:
        """The verdict, the band, what makes it pay and the joint ranking, for the terminal."""
        lines = [self.engines_line(), self.band_text(), self.pays_if()]
        if len(self.sensitivity):
            n = 0 if self.vertices is None else len(self.vertices)
            lines.append(f"what moves the verdict most, jointly (measure first; the speed-up's geometric mean with the "
                         f"parameter at each end over the {n} vertices of the unknowns):")
        for i, r in enumerate(self.sensitivity.itertuples(index=False), 1):
            lines.append(f"  {i}. {r.parameter} [{r.low:g}, {r.high:g}]: {r.speedup_at_low:.3f}x at {r.low:g}, "
                         f"{r.speedup_at_high:.3f}x at {r.high:g}")
        if self.interactions is not None and len(self.interactions):
            top = self.interactions.head(3)
            lines.append("  strongest interactions (log speed-up): " + ", ".join(
                f"{r.parameters} {r.effect:+.3f}" for r in top.itertuples(index=False)))
        if self.no_effect:
            lines.append(f"  no effect on comm_only: {', '.join(self.no_effect)}")
        if self.held:
            lines.append(f"  held at their nominal values (the box is the chip-wide unknowns'): {', '.join(self.held)}")
        return "\n".join(lines)

    def record(self) -> dict:
        """The verdict as plain values (``suggest --json``): min_sdma_bytes, variant, against, nominal, low,
        high, low_at, high_at, pays_from, engines_needed, limits, pays_if."""
        return {"min_sdma_bytes": int(self.floor), "variant": self.label, "against": self.against,
                "nominal": float(self.nominal),
                "low": float(self.low), "high": float(self.high),
                "low_at": {k: float(x) for k, x in self.low_at.items()},
                "high_at": {k: float(x) for k, x in self.high_at.items()},
                "pays_from": self.pays_from, "engines_needed": self.engines_needed,
                "limits": {n: [op, float(x)] for n, (op, x) in self.limits.items()}, "pays_if": self.pays_if()}


def engines_line(floor: int, engines: pd.DataFrame, label: str = DOUBLEPLANE, against: str = CLASSIC,
                 metric: str = "comm_only") -> str:
    """'doubleplane at floor F B: 10.3x slower with 1, ..., parity with 48 SDMA engines, the rest
    nominal: it pays only if N or more run at once' (or: with none of them), from an
    :func:`engines_curve`; ``label``: the variant label priced (``doubleplane-segment-c6``; a classic
    one sends no SDMA: 'classic-c6 (no SDMA): 1.6x faster with any number of SDMA engines');
    ``against``: the classic it is compared with, named where it is not the reference's; ``metric``:
    named where it is not comm_only."""
    than = "" if against == CLASSIC else f" than {against}"
    of = "" if metric == "comm_only" else f" ({metric})"
    if label.startswith(CLASSIC):
        return f"{label} (no SDMA){of}: {word(float(engines['speedup'].iloc[0]))}{than} with any number of SDMA engines"
    parts = [f"{word(s)} with {int(e)}" for e, s in zip(engines["engines"], engines["speedup"])]
    pays = next((int(e) for e, x in zip(engines["engines"], engines["speedup"]) if x > 1 + RESOLUTION), None)
    tail = (f"it pays with any of {ENGINES[0]}-{ENGINES[-1]} running at once" if pays == ENGINES[0] else
            f"it pays only if {pays} or more run at once" if pays is not None else
            f"it does not pay with any of {ENGINES[0]}-{ENGINES[-1]} running at once")
    return (f"{label} at floor {int(floor):,} B{of}: " + ", ".join(parts) +  # bytes as the app writes them
            f" SDMA engines{than}, the rest nominal: {tail}")


class Pricer:
    """classic / ``variant`` comm_only of the slowest PE at many points of ``model``'s unknowns: the
    two plans' stage 1 built once (:class:`~.replay.Stage1`), priced at every point together.
    ``names``: the assumed parameters comm_only reads here; ``only_variant``: those of them the
    classic baseline never reads (the ratio is monotone in each)."""

    def __init__(self, rows: CaseRows, model: NpuModel, floor: int, variant: str = DOUBLEPLANE,
                 baseline: KernelSettings = REFERENCE, pes: np.ndarray | None = None):
        self.rows, self.model, self.floor, self.variant, self.baseline = rows, model, int(floor), variant, baseline
        mask = rows.sdma(variant, int(floor))
        base = rows.with_settings(baseline)
        self.pes = np.arange(rows.pes) if pes is None else np.asarray(pes)
        p = self.pes
        self.plan = Stage1(rows.counts[p], mask[p], p, rows.pes, rows.block_dim, rows.epp, rows.row_bytes, model,
                           **settings_args(rows), incoming=rows.incoming_bytes[p])
        self.classic = Stage1(base.counts[p], np.zeros_like(mask[p]), p, rows.pes, base.block_dim, base.epp,
                              base.row_bytes, model, **settings_args(base), incoming=rows.incoming_bytes[p])
        reads = set(STAGE1_READS) | (set(LAYOUT_READS) if rows.settings.segment else set())
        if not mask.any():
            reads -= set(SDMA_READS)
        classic_reads = set(STAGE1_READS) - set(SDMA_READS)
        self.reads_sdma, self.reads = bool(mask.any()), reads
        # a range of one value is a constant: nothing to search
        self.names = [n for n in model.assumed if n in reads and model.params[n].range[1] > model.params[n].range[0]]
        self.only_variant = [n for n in self.names if n not in classic_reads]
        self.shared = [n for n in self.names if n in classic_reads]

    def per_pe(self, values: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(classic, variant) comm_only of each PE, float64 [K, pes] us, at the K points ``values``
        (classic priced once per distinct value of the parameters it reads)."""
        pts = self.model.points(values)
        shared = [n for n in self.shared if n in values]
        key = np.stack([pts.values[n] for n in shared], axis=1) if shared else np.zeros((len(pts), 0))
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        cl = self.classic.price(self.model.points(dict(zip(shared, uniq.T))), flags=False)[0].max(axis=2)
        return cl[inv.ravel()], self.plan.price(pts, flags=False)[0].max(axis=2)

    def speedups(self, values: dict[str, np.ndarray]) -> np.ndarray:
        """float64 [K]: classic / variant comm_only of the slowest PE at the K points ``values``."""
        cl, dp = self.per_pe(values)
        return cl.max(axis=1) / np.maximum(dp.max(axis=1), 1e-12)


def _grid(names: list[str], model: NpuModel) -> dict[str, np.ndarray]:
    """Every vertex of ``names``' ranges: name -> float64 [2**len(names)], the first name slowest."""
    ends = [model.params[n].range for n in names]
    combos = np.array(list(itertools.product(*ends)), dtype=np.float64).reshape(-1, len(names))
    return {n: combos[:, i] for i, n in enumerate(names)}


def _corner(names: list[str], model: NpuModel, slow: bool) -> dict[str, float]:
    """Each of ``names`` at the end that makes the plan slower (``slow``) or faster."""
    out = {}
    for n in names:
        p = model.params[n]
        out[n] = p.range[1] if p.cost == slow else p.range[0]
    return out


def compass_search(f, x0: np.ndarray, tol: float, budget: int) -> np.ndarray:
    """A bounded compass (pattern) search for a minimum of ``f`` on the unit box [0, 1]^d from
    ``x0`` (float [d]): each round prices every move of ``step`` along one coordinate, both ways
    (clipped to the box), at once (``f`` maps float [K, d] to [K]); it takes the best move that
    lowers ``f``, else halves the step, from 1/4 until below ``tol`` or after ``budget`` points.
    Deterministic; returns the point (float [d]). The box's ends are vertices already priced, so
    a local search from the most extreme vertex is what the band needs (docs/timing-model.md#8-choosing-the-floor)."""
    x = np.asarray(x0, dtype=np.float64).copy()
    fx = float(f(x[None, :])[0])
    step, used = 0.25, 1
    while step >= tol and used < budget:
        moves = []
        for i in range(len(x)):
            for sgn in (1.0, -1.0):
                y = x.copy()
                y[i] = min(max(x[i] + sgn * step, 0.0), 1.0)
                if y[i] != x[i]:
                    moves.append(y)
        if not moves:
            step /= 2
            continue
        vals = np.asarray(f(np.array(moves)), dtype=np.float64)
        used += len(moves)
        j = int(np.argmin(vals))
        if vals[j] < fx - 1e-12 * abs(fx):
            x, fx = moves[j], float(vals[j])
        else:
            step /= 2
    return x


def box_search(pricer: Pricer, grid: dict[str, np.ndarray], cl: np.ndarray, dp: np.ndarray) -> tuple[tuple, tuple]:
    """The band's ends over the box: from the vertices ``grid`` (name -> [K] values, every
    unknown of ``pricer.names`` at an end) and each PE's classic and variant time there (``cl``,
    ``dp``: [K, pes], :meth:`Pricer.per_pe`), a bounded local search
    (:func:`compass_search`) over the continuous parameters both plans read, from the
    :data:`STARTS` most extreme vertices of each end, the others held at that vertex; each point it
    ends at priced again with every PE. Returns ((low, low_at), (high, high_at)), ``*_at``: name ->
    value."""
    model, names = pricer.model, pricer.names
    free = [n for n in pricer.shared if model.params[n].unit not in COUNT_UNITS
            and model.params[n].range[1] > model.params[n].range[0]]
    speedup = cl.max(axis=1) / np.maximum(dp.max(axis=1), 1e-12)
    # the slowest PEs at the vertices stand for all of them in the optimiser's many small pricings
    cand = np.unique(np.concatenate([np.argsort(-cl, axis=1)[:, :CANDIDATE_PES].ravel(),
                                     np.argsort(-dp, axis=1)[:, :CANDIDATE_PES].ravel()]))
    small = Pricer(pricer.rows, model, pricer.floor, pricer.variant, pricer.baseline, pricer.pes[cand]) \
        if free else None
    ends = []
    for sign in (1.0, -1.0):  # the low end (minimise), then the high end (maximise)
        order = np.argsort(sign * speedup, kind="stable")
        k0 = int(order[0])
        best, best_at = float(speedup[k0]), {n: float(grid[n][k0]) for n in names}
        found = []
        for k in order[:STARTS] if free else ():
            at = {n: float(grid[n][k]) for n in names}
            lo = np.array([model.params[n].range[0] for n in free])
            span = np.array([model.params[n].range[1] for n in free]) - lo

            def f(x, at=at):  # x: [K, len(free)] in the unit box -> sign * speed-up [K]
                point = {n: np.full(len(x), v) for n, v in at.items()}
                point.update({n: lo[i] + span[i] * x[:, i] for i, n in enumerate(free)})
                return sign * small.speedups(point)

            x0 = np.array([(at[n] - lo[i]) / span[i] for i, n in enumerate(free)])
            x = compass_search(f, x0, _XTOL, _FEV * len(free))
            found.append(dict(at, **{n: lo[i] + span[i] * float(x[i]) for i, n in enumerate(free)}))
        if found:
            full = pricer.speedups({n: np.array([p[n] for p in found]) for n in names})
            for p, s in zip(found, full):
                if sign * s < sign * best:
                    best, best_at = float(s), p
        ends.append((best, best_at))
    return ends[0], ends[1]


def factorial(grid: dict[str, np.ndarray], speedup: np.ndarray, model: NpuModel) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The 2-level full factorial of log ``speedup`` over the vertices ``grid``: (sensitivity,
    interactions) as :class:`Verdict` holds them."""
    y = np.log(np.maximum(speedup, 1e-300))
    sens, inter = [], []
    high = {n: grid[n] == model.params[n].range[1] for n in grid}
    for n in grid:
        lo, hi = model.params[n].range
        a, b = float(np.exp(y[~high[n]].mean())), float(np.exp(y[high[n]].mean()))
        sens.append({"parameter": n, "low": lo, "high": hi, "speedup_at_low": a, "speedup_at_high": b,
                     "spread": abs(math.log(a / b))})
    for a, b in itertools.combinations(grid, 2):
        same = high[a] == high[b]
        inter.append({"parameters": f"{a} x {b}", "effect": float(y[same].mean() - y[~same].mean()) / 2})
    sens = pd.DataFrame(sens, columns=["parameter", "low", "high", "speedup_at_low", "speedup_at_high", "spread"])
    inter = pd.DataFrame(inter, columns=["parameters", "effect"])
    sens = sens.sort_values("spread", ascending=False, kind="stable").reset_index(drop=True)
    inter = inter.reindex(inter["effect"].abs().sort_values(ascending=False, kind="stable").index).reset_index(drop=True)
    return sens, inter


def engines_curve(rows: CaseRows, model: NpuModel, floor: int, cache: dict | None = None,
                  variant: str = DOUBLEPLANE, *, baseline: KernelSettings | str | None = None) -> pd.DataFrame:
    """The speed-up of ``variant`` (under ``rows.settings``) at ``floor`` over classic under
    ``baseline`` (default the reference's) at each engine count of :data:`ENGINES` (DataFrame:
    engines, speedup), the rest nominal. ``cache``: unused (kept for callers)."""
    pr = Pricer(rows, model, floor, variant, parse_settings(baseline))
    return pd.DataFrame({"engines": ENGINES, "speedup": pr.speedups({"sdma_engines": np.array(ENGINES, float)})})


def _pay_limit(pr: Pricer, at: dict, name: str) -> tuple[str, float] | None:
    """How far parameter ``name`` (one only the variant reads: the speed-up is monotone in it) may
    move from the point ``at`` (where it pays) and still pay: (">=" or "<=", the bound), found by
    bisection (whole numbers for a count); None when it pays over the whole range."""
    p = pr.model.params[name]
    lo, hi = p.range
    worse = hi if p.cost else lo              # the end that slows the variant
    pays = lambda x: pr.speedups({n: np.array([x if n == name else v]) for n, v in at.items()})[0] > 1 + RESOLUTION  # noqa: E731
    if pays(worse):
        return None
    good, bad = at[name], worse
    whole = p.unit in COUNT_UNITS
    for _ in range(40):
        if (whole and abs(good - bad) <= 1) or (not whole and abs(good - bad) <= 1e-3 * (hi - lo)):
            break
        mid = float(round((good + bad) / 2)) if whole else (good + bad) / 2
        good, bad = (mid, bad) if pays(mid) else (good, mid)
    return ("<=" if p.cost else ">=", float(good))


def engines_curve_full_op(rows: CaseRows, model: NpuModel, floor: int, variant: str = DOUBLEPLANE, *,
                          baseline: KernelSettings | str | None = None) -> pd.DataFrame:
    """:func:`engines_curve` in full_op (the slowest PE's, one replay per engine count)."""
    from .replay import replay

    base = rows.with_settings(parse_settings(baseline))
    classic = float(replay(base, rows.sdma(CLASSIC, 0), model).core_max("full_op").max())
    mask = rows.sdma(variant, int(floor))
    s = [classic / float(replay(rows, mask, model.with_values(sdma_engines=float(e))).core_max("full_op").max())
         for e in ENGINES]
    return pd.DataFrame({"engines": ENGINES, "speedup": s})


def in_full_op(v: Verdict, rows: CaseRows, model: NpuModel, variant: str = DOUBLEPLANE,
               baseline: KernelSettings | str | None = None) -> Verdict:
    """``v`` with its engine curve and ``pays_from`` in full_op (:func:`engines_curve_full_op`);
    the band stays comm_only's and says so."""
    from dataclasses import replace

    eng = engines_curve_full_op(rows, model, v.floor, variant, baseline=baseline)
    pays = next((int(e) for e, x in zip(eng["engines"], eng["speedup"]) if x > 1 + RESOLUTION), None)
    return replace(v, engines=eng, pays_from=pays, metric="full_op")


def verdict(rows: CaseRows, model: NpuModel, floor: int, variant: str = DOUBLEPLANE, *,
            baseline: KernelSettings | str | None = None, joint: bool = True) -> Verdict:
    """The :class:`Verdict` of ``variant`` at ``floor`` (bytes) for ``rows``' case on ``model``, under
    the kernel settings of ``rows`` (docs/variants.md), against classic under ``baseline`` (default
    the reference's: one core per source rank, MTE only; a sweep's settings group compares with its
    own classic, e.g. ``c4`` for ``segment-c4``). ``joint``: price every vertex of the unknowns (the
    factorial sensitivity and "pays if"); otherwise only the vertices of the parameters both plans
    read with the others at the two corners (the same band, docs/timing-model.md#8-choosing-the-floor), no ranking.

    Raises:
        ParameterError: as the model's :meth:`~.machines.NpuModel.pair_class` (too many PEs); a
            ``baseline`` that is no settings label, or a segment layout (classic has none).
    """
    baseline = parse_settings(baseline)
    if baseline.segment:
        raise ParameterError(f"baseline={baseline.label!r}: classic has no segment layout; one of 'reference', 'c<N>'",
                             parameter="baseline", value=baseline.label)
    pr = Pricer(rows, model, floor, variant, baseline)
    names = pr.names
    nominal = float(pr.speedups({})[0])
    if pr.reads_sdma:
        eng = pr.speedups({"sdma_engines": np.array(ENGINES, dtype=np.float64)})
    else:
        eng = np.full(len(ENGINES), nominal)
    if joint:
        grid = _grid(names, model)
    else:  # the shared parameters' vertices, the others at the corner that slows the plan, then speeds it
        shared = _grid(pr.shared, model)
        k = len(next(iter(shared.values()))) if shared else 1
        grid = {n: np.tile(shared[n], 2) for n in pr.shared}
        for n in pr.only_variant:
            grid[n] = np.repeat([_corner([n], model, True)[n], _corner([n], model, False)[n]], k)
    if names:
        cl, dp = pr.per_pe(grid)
        s = cl.max(axis=1) / np.maximum(dp.max(axis=1), 1e-12)
        (low, low_at), (high, high_at) = box_search(pr, grid, cl, dp)
    else:
        s, (low, low_at), (high, high_at) = np.array([nominal]), (nominal, {}), (nominal, {})
    low, high = min(low, nominal), max(high, nominal)
    if "sdma_engines" in names:  # the engine curve's counts lie in the box too
        low, high = min(low, float(eng.min())), max(high, float(eng.max()))
    if joint and names:
        sens, inter = factorial(grid, s, model)
        vertices = pd.DataFrame(dict(grid, speedup=s))
    else:
        sens = pd.DataFrame(columns=["parameter", "low", "high", "speedup_at_low", "speedup_at_high", "spread"])
        inter, vertices = None, None
    limits = {}
    if 1 + RESOLUTION < high and low <= 1 + RESOLUTION:  # how far each monotone one may move and still pay
        for n in pr.only_variant:
            lim = _pay_limit(pr, high_at, n)
            if lim is not None:
                limits[n] = lim
    needed = int(limits["sdma_engines"][1]) if "sdma_engines" in limits else None
    pays = next((e for e, x in zip(ENGINES, eng) if x > 1 + RESOLUTION), None)
    return Verdict(int(floor), nominal, float(low), float(high), pd.DataFrame({"engines": ENGINES, "speedup": eng}),
                   sens, tuple(n for n in model.assumed if n not in pr.reads and "." not in n), pays,
                   variant_label(variant, rows.settings), low_at, high_at, vertices, inter, needed,
                   variant_label(CLASSIC, baseline), held=tuple(n for n in model.assumed if "." in n), limits=limits)
