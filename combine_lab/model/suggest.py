"""Which SDMA floor (``min_sdma_bytes``) to use: the modelled time at every floor where the plan
changes (``combine-lab suggest``).

The decision rule (docs/decision-rule.md#1-the-rule) sends a remote segment by SDMA when it is at least
the floor and strictly above its PE's average remote segment. The plan changes only at the sizes
of segments above average: each such size is a floor of the curve, plus the default 2 MiB
and "never SDMA" (the classic plan). ``comm_only`` is a PE's own stage 1, so each PE is priced
at its own floors and the case's curve is their maximum: every floor is exact and cheap.
``full_op`` needs every PE at once (stage 2 waits for the others' flags): one replay per floor.

A tie is a tie: the best floor is named "best" only when it beats never-SDMA by more than the
model's resolution over the whole range of its unknowns (:mod:`.unknowns`); otherwise the text says
that no floor beats MTE-only under these assumptions, and which assumption would change that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from .machines import NpuModel
from .replay import SDMA_MODES, replay, stage1
from .stream import CaseRows
from .unknowns import RESOLUTION, Verdict, engines_curve, engines_line, verdict as unknowns_verdict

NEVER = -1  # the floor of the classic plan in the curve's threshold column

METRICS = ("comm_only", "full_op")


@dataclass
class Suggestion:
    """The curve and its best floor. ``curve`` (DataFrame, one row per floor, largest first):
    threshold_bytes (int; -1 = never SDMA), sdma_segments, sdma_bytes (int), modelled_us (the
    slowest PE's CoreMaxTime of ``metric``), speedup (classic / this, > 1: faster than MTE-only),
    and with a what-if, ``<mode>_us`` and ``<mode>_saving_us``. ``best``: the row with the least
    modelled_us (ties: the larger floor, fewer SDMA segments). ``verdict``: the
    :class:`~.unknowns.Verdict` at the best floor that sends anything by SDMA (None: no such floor,
    or not asked for); :attr:`beats`: whether that floor is best under every assumption."""

    curve: pd.DataFrame
    best: pd.Series
    metric: str
    caption: str
    verdict: Verdict | None = None
    at_default: pd.DataFrame | None = None  # the engines curve at the default 2 MiB floor, where that is another

    @property
    def beats(self) -> bool:
        """The best SDMA floor beats never-SDMA by more than the resolution over the unknowns' range."""
        return self.verdict is not None and self.verdict.beats

    def pick_text(self) -> str:
        """The last line: the best floor, or that none beats MTE-only and what would change that."""
        b = self.best
        if self.verdict is None:
            pick = "never SDMA (classic)" if b["threshold_bytes"] == NEVER else f"min_sdma_bytes={int(b['threshold_bytes'])}"
            return f"best: {pick}: {b['modelled_us']:.3f} us, {b['speedup']:.3f}x classic"
        v = self.verdict
        row = self.curve.loc[self.curve["threshold_bytes"] == v.floor].iloc[0]
        if v.beats:
            return (f"best: min_sdma_bytes={v.floor}: {row['modelled_us']:.3f} us, {row['speedup']:.3f}x classic; "
                    f"{v.low:.3f}x - {v.high:.3f}x over every unknown's range, above the model's resolution "
                    f"({RESOLUTION:.0%}) throughout")
        name, value, sp = v.best_change
        would = (f"it would with {name} = {value:g} ({sp:.3f}x)" if sp > 1 + RESOLUTION else
                 "no single unknown within its range changes that")
        return (f"no floor beats MTE-only under these assumptions: the best, min_sdma_bytes={v.floor}, is "
                f"{row['speedup']:.3f}x classic at the nominal values and {v.low:.3f}x - {v.high:.3f}x over the "
                f"unknowns' range (best only above {1 + RESOLUTION:.2f}x throughout, the model's resolution); "
                f"{would}")

    def text(self, most: int | None = 40) -> str:
        """The curve and the suggestion, for the terminal. With more than ``most`` floors (None:
        no limit) the table shows ``most`` of them, evenly spread, always with the best floor, 2 MiB
        and never SDMA, and says how many it left out."""
        shown = self.curve.copy()
        shown["threshold"] = [("never SDMA" if t == NEVER else f"{t}") for t in shown["threshold_bytes"]]
        cols = ["threshold", "sdma_segments", "sdma_bytes", "modelled_us", "speedup"] + \
            [c for c in shown.columns if c.endswith("_us") and c not in ("modelled_us",)]
        note = ""
        if most is not None and len(shown) > most:
            n = len(shown)
            keep = set(np.linspace(0, n - 1, max(most - 3, 2)).round().astype(int).tolist())
            keep |= {int(np.flatnonzero(shown["threshold_bytes"].to_numpy() == t)[0])
                     for t in (self.best["threshold_bytes"], DEFAULT_MIN_SDMA_BYTES, NEVER)
                     if (shown["threshold_bytes"] == t).any()}
            shown = shown.iloc[sorted(keep)]
            note = f"\n({len(shown)} of {n} floors shown: the best, 2 MiB, never SDMA and an even spread; --all or --csv for every one)"
        table = shown[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}")
        unknown = f"{self.verdict.text()}\n" if self.verdict is not None else ""
        if self.at_default is not None:
            unknown = f"{engines_line(DEFAULT_MIN_SDMA_BYTES, self.at_default)} (the default floor)\n{unknown}"
        return (f"{self.caption}\nmetric: {self.metric} (the slowest PE's CoreMaxTime/us)\n{table}{note}\n"
                f"{unknown}{self.pick_text()}")


def thresholds(rows: CaseRows) -> np.ndarray:
    """int64: every floor at which the plan changes, largest first, then 2 MiB if not among them,
    then :data:`NEVER`."""
    counts = rows.counts
    P, S = counts.shape
    above = rows.sdma("doubleplane", 0)  # remote, non-empty and above the PE's average
    sizes = np.unique(counts[above] * rows.row_bytes)[::-1]
    out = list(sizes.astype(np.int64))
    if DEFAULT_MIN_SDMA_BYTES not in out:
        out.append(DEFAULT_MIN_SDMA_BYTES)
        out.sort(reverse=True)
    return np.array(out + [NEVER], dtype=np.int64)


def suggest(rows: CaseRows, model: NpuModel, metric: str = "comm_only", what_if: str | None = None,
            unknowns: bool = True) -> Suggestion:
    """Modelled time of ``metric`` at every floor where the plan of ``rows``' case changes, and
    (``unknowns``) the verdict over the unknowns at the best floor that sends anything by SDMA
    (:func:`.unknowns.verdict`, on comm_only).

    ``what_if``: also price SDMA calls per segment (``"segment"``, one SQE per MiB) instead of
    per row, the kernel's way (:data:`.replay.SDMA_MODES`).

    Raises:
        ParameterError: ``metric`` not comm_only/full_op, or an unknown ``what_if``.
    """
    if metric not in METRICS:
        raise ParameterError(f"metric={metric!r}: one of {', '.join(METRICS)}")
    if what_if is not None and (what_if not in SDMA_MODES or what_if == "row"):
        raise ParameterError(f"what_if={what_if!r}: segment (SDMA calls per segment, one SQE per MiB)")
    floors = thresholds(rows)
    # SDMA segments and bytes at each floor: the above-average segments of at least that size.
    sizes = np.sort((rows.counts * rows.row_bytes)[rows.sdma("doubleplane", 0)])
    at_least = len(sizes) - np.searchsorted(sizes, np.where(floors == NEVER, np.iinfo(np.int64).max, floors))
    total = np.concatenate([[0], np.cumsum(sizes[::-1])])
    curve = pd.DataFrame({"threshold_bytes": floors, "sdma_segments": at_least.astype(np.int64),
                          "sdma_bytes": total[at_least].astype(np.int64)})
    modes = ["row"] + ([what_if] if what_if else [])
    for mode in modes:
        times = _comm_only_curve(rows, model, mode) if metric == "comm_only" else np.array(
            [replay(rows, rows.sdma("classic", 0) if f == NEVER else rows.sdma("doubleplane", int(f)), model,
                    mode).core_max(metric).max() for f in floors])
        curve["modelled_us" if mode == "row" else f"{mode}_us"] = times
    classic = float(curve["modelled_us"].iloc[-1])
    curve["speedup"] = classic / curve["modelled_us"]
    if what_if:
        curve[f"{what_if}_saving_us"] = curve["modelled_us"] - curve[f"{what_if}_us"]
    best = curve.loc[curve["modelled_us"].idxmin()]  # first minimum: the largest such floor
    v = None
    with_sdma = curve[(curve["threshold_bytes"] != NEVER) & (curve["sdma_segments"] > 0)]
    if unknowns and len(with_sdma):
        v = unknowns_verdict(rows, model, int(with_sdma.loc[with_sdma["modelled_us"].idxmin(), "threshold_bytes"]))
    d = None
    if v is not None and v.floor != DEFAULT_MIN_SDMA_BYTES and rows.sdma("doubleplane", DEFAULT_MIN_SDMA_BYTES).any():
        d = engines_curve(rows, model, DEFAULT_MIN_SDMA_BYTES)
    return Suggestion(curve, best, metric, model.caption(), v, d)


def _comm_only_curve(rows: CaseRows, model: NpuModel, mode: str) -> np.ndarray:
    """The slowest PE's comm_only at each floor of :func:`thresholds`: each PE is priced once per
    plan of its own (no SDMA, then one more of its above-average sizes at a time), all in one
    batch, and each floor takes every PE's plan at that floor."""
    floors = thresholds(rows)
    P = rows.pes
    seg_bytes = rows.counts * rows.row_bytes
    above = rows.sdma("doubleplane", 0)
    own = [np.unique(seg_bytes[p][above[p]])[::-1] for p in range(P)]  # each PE's sizes, largest first
    first = np.cumsum([0] + [len(u) + 1 for u in own])
    pe_of = np.repeat(np.arange(P), [len(u) + 1 for u in own])
    cut = np.concatenate([np.r_[np.inf, u] for u in own])              # plan j: sizes >= cut[j] by SDMA
    sdma = above[pe_of] & (seg_bytes[pe_of] >= cut[:, None])
    comm, _ = stage1(rows.counts[pe_of], sdma, pe_of, P, rows.block_dim, rows.epp, rows.row_bytes, model, mode)
    slowest = comm.max(axis=1)
    # PE p's plan at floor f: as many of its sizes as are >= f (none for the classic plan).
    f = np.where(floors == NEVER, np.inf, floors.astype(np.float64))
    out = np.zeros(len(floors))
    for p, u in enumerate(own):
        idx = len(u) - np.searchsorted(u[::-1], f, side="left")
        out = np.maximum(out, slowest[first[p] + idx])
    return out
