"""The verdict over the model's unknowns: how the modelled speed-up of doubleplane over classic
(comm_only of the slowest PE) moves when the assumed parameters move over their ranges
(docs/timing-model.md#5-assumptions).

For one SDMA floor: the speed-up at the nominal values; at each ``sdma_engines`` of
:data:`ENGINES` (how many of the 48 SQs run at once, which nobody has published); with each
other assumed parameter at either end of its range, the rest nominal (the sensitivity ranking:
which unknown moves the verdict most, i.e. what to measure first); and at the two corners (every
parameter at the end that favours, then hurts, doubleplane), the range over all of them. The
model is monotone in each parameter, so the corners bound the speed-up over the whole box.

A floor "beats MTE-only" only when its speed-up exceeds ``1 + RESOLUTION`` over the whole range
(the low corner): :data:`RESOLUTION` is the model's resolution, the size of effect its
approximations (fair sharing, the engines' average round robin) cannot be trusted below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..planning.settings import REFERENCE, KernelSettings, parse_settings, variant_label
from .machines import NpuModel
from .replay import settings_args, stage1
from .stream import CaseRows

#: Below this relative difference two modelled times are a tie (5 %).
RESOLUTION = 0.05
#: SDMA engines (concurrent SQs) the verdict is given at: 1 to the 48 SQs SHMEM creates.
ENGINES = (1, 2, 4, 8, 16, 32, 48)
#: Assumed parameters comm_only does not depend on (stage 2 and the closing barrier only).
STAGE2_ONLY = ("flag_latency_us", "vec_elems_per_us", "wait_us", "barrier_us")


def word(speedup: float) -> str:
    """'3.2x slower', '1.6x faster' or 'parity' (within :data:`RESOLUTION`)."""
    if abs(speedup - 1) <= RESOLUTION:
        return "parity"
    return f"{speedup:.1f}x faster" if speedup > 1 else f"{1 / speedup:.1f}x slower"


@dataclass
class Verdict:
    """The speed-up (classic / doubleplane comm_only, > 1: doubleplane faster) at ``floor``:
    ``nominal``; ``low``, ``high``: over the unknowns' range (the corners); ``engines``
    (DataFrame: engines, speedup); ``sensitivity`` (DataFrame, most moving first: parameter,
    low, high (its range), speedup_at_low, speedup_at_high, spread = |log of their ratio|);
    ``no_effect``: assumed parameters comm_only does not depend on; ``pays_from``: the fewest
    engines of :data:`ENGINES` at which doubleplane beats classic by more than the resolution
    (None: at none); ``best_change``: (parameter, value, speedup) of the single change within a
    range that favours doubleplane most."""

    floor: int
    nominal: float
    low: float
    high: float
    engines: pd.DataFrame
    sensitivity: pd.DataFrame
    no_effect: tuple[str, ...]
    pays_from: int | None
    best_change: tuple[str, float, float]
    label: str = "doubleplane"  # the variant label priced (docs/variants.md): doubleplane-segment-c6, classic-c6
    @property
    def beats(self) -> bool:
        """Doubleplane beats classic by more than the resolution over the whole range."""
        return self.low > 1 + RESOLUTION

    def engines_line(self) -> str:
        """:func:`engines_line` of this verdict."""
        return engines_line(self.floor, self.engines, self.label)

    def text(self) -> str:
        """The verdict and the ranking, for the terminal."""
        lines = [self.engines_line(),
                 f"over every unknown's range: {self.low:.3f}x - {self.high:.3f}x classic (nominal "
                 f"{self.nominal:.3f}x; the model's resolution {RESOLUTION:.0%})",
                 "what moves the verdict most (measure first):"]
        for i, r in enumerate(self.sensitivity.itertuples(index=False), 1):
            lines.append(f"  {i}. {r.parameter} [{r.low:g}, {r.high:g}]: {r.speedup_at_low:.3f}x at {r.low:g}, "
                         f"{r.speedup_at_high:.3f}x at {r.high:g}")
        if self.no_effect:
            lines.append(f"  no effect on comm_only: {', '.join(self.no_effect)}")
        return "\n".join(lines)


#: Parameters the classic plan (no SDMA) never reads: its time is shared by models that differ only there.
_SDMA_ONLY = ("sdma_engines", "sdma_issue_us", "sdma_quiet_us", ".sdma_sqe_us", ".sdma_GBps")


def engines_line(floor: int, engines: pd.DataFrame, label: str = "doubleplane") -> str:
    """'doubleplane at floor F B: 10.3x slower with 1, ..., parity with 48 SDMA engines: it pays only
    if N or more run at once' (or: with none of them), from an :func:`engines_curve`; ``label``: the
    variant label priced (``doubleplane-segment-c6``; a classic one sends no SDMA: 'classic-c6
    (no SDMA): 1.6x faster with any number of SDMA engines')."""
    if label.startswith("classic"):
        return f"{label} (no SDMA): {word(float(engines['speedup'].iloc[0]))} with any number of SDMA engines"
    parts = [f"{word(s)} with {int(e)}" for e, s in zip(engines["engines"], engines["speedup"])]
    pays = next((int(e) for e, x in zip(engines["engines"], engines["speedup"]) if x > 1 + RESOLUTION), None)
    tail = (f"it pays only if {pays} or more run at once" if pays is not None else
            f"it does not pay with any of {ENGINES[0]}-{ENGINES[-1]} running at once")
    return f"{label} at floor {int(floor)} B: " + ", ".join(parts) + f" SDMA engines: {tail}"


def _speedups(rows: CaseRows, mask: np.ndarray, models: list[NpuModel], cache: dict | None = None,
              baseline: KernelSettings = REFERENCE) -> np.ndarray:
    """classic / doubleplane comm_only of the slowest PE under each model, plan ``mask``; the
    classic times in ``cache``, by the values the classic plan reads. Classic runs under
    ``baseline`` (default the reference's: one core per source rank); doubleplane under
    ``rows.settings`` (a classic setting, such as ``c6``, with an all-False ``mask``)."""
    P = rows.pes
    cache = {} if cache is None else cache
    pe_of = np.arange(P)
    base = rows.with_settings(baseline)
    out = []
    for m in models:
        key = (baseline.label,) + tuple((n, p.value) for n, p in m.params.items() if not n.endswith(_SDMA_ONLY))
        if key not in cache:
            comm, _ = stage1(base.counts, np.zeros_like(mask), pe_of, P, base.block_dim, base.epp, base.row_bytes, m,
                             **settings_args(base))
            cache[key] = float(comm.max())
        comm, _ = stage1(rows.counts, mask, pe_of, P, rows.block_dim, rows.epp, rows.row_bytes, m,
                         **settings_args(rows))
        out.append(cache[key] / max(float(comm.max()), 1e-12))
    return np.array(out)


def engines_curve(rows: CaseRows, model: NpuModel, floor: int, cache: dict | None = None,
                  variant: str = "doubleplane", *, baseline: KernelSettings | str | None = None) -> pd.DataFrame:
    """The speed-up of ``variant`` (under ``rows.settings``) at ``floor`` over classic under
    ``baseline`` (default the reference's) at each engine count of :data:`ENGINES` (DataFrame:
    engines, speedup), the rest nominal."""
    mask = rows.sdma(variant, int(floor))
    s = _speedups(rows, mask, [model.with_values(sdma_engines=float(e)) for e in ENGINES], cache,
                  parse_settings(baseline))
    return pd.DataFrame({"engines": ENGINES, "speedup": s})


def verdict(rows: CaseRows, model: NpuModel, floor: int, variant: str = "doubleplane", *,
            baseline: KernelSettings | str | None = None) -> Verdict:
    """The :class:`Verdict` of ``variant`` at ``floor`` (bytes) for ``rows``' case on ``model``, under
    the kernel settings of ``rows`` (docs/variants.md), against classic under ``baseline`` (default
    the reference's: one core per source rank, MTE only; a sweep's settings group compares with its
    own classic, e.g. ``c4`` for ``segment-c4``).

    Raises:
        ParameterError: as the model's :meth:`~.machines.NpuModel.pair_class` (too many PEs); a
            ``baseline`` that is no settings label, or a segment layout (classic has none).
    """
    baseline = parse_settings(baseline)
    if baseline.segment:
        raise ParameterError(f"baseline={baseline.label!r}: classic has no segment layout; one of 'reference', 'c<N>'",
                             parameter="baseline", value=baseline.label)
    mask = rows.sdma(variant, int(floor))
    cache: dict = {}
    ranged = [n for n in model.assumed if n != "sdma_engines" and n not in STAGE2_ONLY]
    trials = [model]
    trials += [model.with_values(sdma_engines=float(e)) for e in ENGINES]
    for n in ranged:
        lo, hi = model.params[n].range
        trials += [model.with_values(**{n: lo}), model.with_values(**{n: hi})]
    s = _speedups(rows, mask, trials, cache, baseline)
    nominal, eng = float(s[0]), s[1:1 + len(ENGINES)]
    ends = s[1 + len(ENGINES):].reshape(-1, 2)
    # the corners: each parameter at the end that favours doubleplane (then the other)
    favour = {n: model.params[n].range[int(np.argmax(e))] for n, e in zip(ranged, ends)}
    hurt = {n: model.params[n].range[int(np.argmin(e))] for n, e in zip(ranged, ends)}
    lo_e, hi_e = ENGINES[int(np.argmin(eng))], ENGINES[int(np.argmax(eng))]
    corners = _speedups(rows, mask, [model.with_values(**hurt, sdma_engines=float(lo_e)),
                                     model.with_values(**favour, sdma_engines=float(hi_e))], cache, baseline)
    sens = [{"parameter": "sdma_engines", "low": float(ENGINES[0]), "high": float(ENGINES[-1]),
             "speedup_at_low": float(eng[0]), "speedup_at_high": float(eng[-1]),
             "spread": abs(math.log(eng.max() / eng.min()))}]
    for n, (a, b) in zip(ranged, ends):
        lo, hi = model.params[n].range
        sens.append({"parameter": n, "low": lo, "high": hi, "speedup_at_low": float(a), "speedup_at_high": float(b),
                     "spread": abs(math.log(a / b))})
    sens = pd.DataFrame(sens).sort_values("spread", ascending=False, kind="stable").reset_index(drop=True)
    pays = next((e for e, x in zip(ENGINES, eng) if x > 1 + RESOLUTION), None)
    changes = [("sdma_engines", float(hi_e), float(eng.max()))] + [
        (n, float(favour[n]), float(max(e))) for n, e in zip(ranged, ends)]
    best_change = max(changes, key=lambda c: c[2])
    return Verdict(int(floor), nominal, float(min(corners.min(), s.min())), float(max(corners.max(), s.max())),
                   pd.DataFrame({"engines": ENGINES, "speedup": eng}), sens,
                   tuple(n for n in model.assumed if n in STAGE2_ONLY), pays, best_change,
                   variant_label(variant, rows.settings))
