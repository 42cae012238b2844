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
that no floor beats MTE-only everywhere in the unknowns' box, and which assumption would change that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from ..planning.settings import REFERENCE, KernelSettings, check_kernel_settings, parse_settings, variant_label
from .machines import NpuModel
from .replay import SDMA_MODES, replay, settings_args, stage1
from .stream import CaseRows
from .unknowns import RESOLUTION, Verdict, in_full_op, verdict as unknowns_verdict
from ..kernels import CLASSIC, DOUBLEPLANE

NEVER = -1  # the floor of the classic plan in the curve's threshold column

METRICS = ("comm_only", "full_op")
#: Chunks (rows x segments) the floor curve prices at once: larger blocks only cost memory traffic
#: (the README case's curve: 0.60 s at 2**19, 0.43 s at 2**16, 0.51 s at 2**14, CPU).
CURVE_BLOCK_CHUNKS = 1 << 16


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
    at_default: Verdict | None = None  # the verdict (its band, no ranking) at the default 2 MiB floor, where that is another
    label: str = DOUBLEPLANE  # the variant label priced (docs/variants.md)

    @property
    def beats(self) -> bool:
        """The best SDMA floor beats never-SDMA by more than the resolution over the unknowns' range."""
        return self.verdict is not None and self.verdict.beats

    def pick_text(self) -> str:
        """The last line: the best floor, or that none beats MTE-only and what would change that."""
        b = self.best
        never = f"never SDMA ({self._classic})"
        if self.verdict is None:
            pick = never if b["threshold_bytes"] == NEVER else f"min_sdma_bytes={int(b['threshold_bytes'])}"
            return f"best: {pick}: {b['modelled_us']:.3f} us, {b['speedup']:.3f}x classic"
        v = self.verdict
        if self.label != DOUBLEPLANE and v.floor != NEVER:  # other settings: the verdict's classic, then the reference's
            row = self.curve.loc[self.curve["threshold_bytes"] == v.floor].iloc[0]
            same = " (MTE only, the same cores)" if v.against == self._classic else ""
            return (f"{self.label} at min_sdma_bytes={v.floor}: {row['modelled_us']:.3f} us; against {v.against}{same}: "
                    f"{v.nominal:.3f}x at the nominal values, {v.low:.3f}x - {v.high:.3f}x over the unknowns' box: "
                    f"{band_sentence(v.low, v.high)}; {row['speedup']:.3f}x the reference's classic (one core per source "
                    "rank) at the nominal values")
        if v.floor == NEVER:  # a classic setting: one point, against the reference's classic
            band = "faster than" if v.beats else "slower than" if v.high < 1 / (1 + RESOLUTION) else "a tie with"
            return (f"{v.label}: {b['modelled_us']:.3f} us, {b['speedup']:.3f}x classic at the nominal values"
                    f"{self._in}, {v.low:.3f}x - {v.high:.3f}x over the unknowns' box (comm_only): {band} the "
                    f"reference's classic (the model's resolution {RESOLUTION:.0%})")
        row = self.curve.loc[self.curve["threshold_bytes"] == v.floor].iloc[0]
        if v.beats:
            return (f"best: min_sdma_bytes={v.floor}: {row['modelled_us']:.3f} us, {row['speedup']:.3f}x classic"
                    f"{self._in}; {v.low:.3f}x - {v.high:.3f}x over the unknowns' box (comm_only), above the model's "
                    f"resolution ({RESOLUTION:.0%}) throughout")
        return (f"no floor beats MTE-only everywhere in the unknowns' box: the best, min_sdma_bytes={v.floor}, is "
                f"{row['speedup']:.3f}x classic at the nominal values{self._in} and {v.low:.3f}x - {v.high:.3f}x over "
                f"the unknowns' box (comm_only; best only above {1 + RESOLUTION:.2f}x throughout, the model's "
                f"resolution); {v.pays_if()}")

    @property
    def _in(self) -> str:
        """' in full_op' where the curve's metric is not the band's (comm_only)."""
        return "" if self.metric == "comm_only" else f" in {self.metric}"

    @property
    def _classic(self) -> str:
        """The plan of the never-SDMA row: classic with the same cores per source rank."""
        cores = self.label.rpartition("-c")[2] if "-c" in self.label else ""
        return f"classic-c{cores}" if cores.isdigit() else CLASSIC

    def shown(self, most: int | None = 40) -> list[int]:
        """Positions in :attr:`curve` of the floors :meth:`text` shows: every one, or with more than
        ``most`` (None: no limit) ``most`` of them, evenly spread, always with the best floor, 2 MiB
        and never SDMA."""
        n = len(self.curve)
        if most is None or n <= most:
            return list(range(n))
        t = self.curve["threshold_bytes"].to_numpy()
        keep = set(np.linspace(0, n - 1, max(most - 3, 2)).round().astype(int).tolist())
        keep |= {int(np.flatnonzero(t == f)[0]) for f in (self.best["threshold_bytes"], DEFAULT_MIN_SDMA_BYTES, NEVER)
                 if (t == f).any()}
        return sorted(keep)

    def text(self, most: int | None = 40) -> str:
        """The curve and the suggestion, for the terminal. With more than ``most`` floors (None:
        no limit) the table shows ``most`` of them, evenly spread, always with the best floor, 2 MiB
        and never SDMA, and says how many it left out."""
        shown = self.curve.iloc[self.shown(most)].copy()
        shown["threshold"] = [(f"never SDMA ({self._classic})" if self._classic != CLASSIC else "never SDMA")
                              if t == NEVER else f"{t}" for t in shown["threshold_bytes"]]
        cols = ["threshold", "sdma_segments", "sdma_bytes", "modelled_us", "speedup"] + \
            [c for c in shown.columns if c.endswith("_us") and c not in ("modelled_us",)]
        note = ""
        if len(shown) < len(self.curve):
            note = (f"\n({len(shown)} of {len(self.curve)} floors shown: the best, 2 MiB, never SDMA and an even "
                    "spread; --all or --csv for every one)")
        table = shown[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}")
        unknown = f"{self.verdict.text()}\n" if self.verdict is not None else ""
        if self.at_default is not None:
            d = self.at_default
            unknown = f"{d.engines_line()} (the default floor)\n{d.band_text()}\n{d.pays_if()}\n{unknown}"
        priced = "" if self.label == DOUBLEPLANE else (
            f"priced: {self.label} (docs/variants.md); speed-up = the reference's classic (one core per source rank) "
            "/ this\n")
        return (f"{self.caption}\n{priced}metric: {self.metric} (the slowest PE's CoreMaxTime/us)\n{table}{note}\n"
                f"{unknown}{self.pick_text()}")


def thresholds(rows: CaseRows) -> np.ndarray:
    """int64: every floor at which the plan changes, largest first, then 2 MiB if not among them,
    then :data:`NEVER`."""
    counts = rows.counts
    P, S = counts.shape
    above = rows.sdma(DOUBLEPLANE, 0)  # remote, non-empty and above the PE's average
    sizes = np.unique(counts[above] * rows.row_bytes)[::-1]
    out = list(sizes.astype(np.int64))
    if DEFAULT_MIN_SDMA_BYTES not in out:
        out.append(DEFAULT_MIN_SDMA_BYTES)
        out.sort(reverse=True)
    return np.array(out + [NEVER], dtype=np.int64)


def suggest(rows: CaseRows, model: NpuModel, metric: str = "comm_only", what_if: str | None = None,
            unknowns: bool = True, *, settings: KernelSettings | str | None = None,
            variant: str = DOUBLEPLANE, baseline: KernelSettings | str | None = None) -> Suggestion:
    """Modelled time of ``metric`` at every floor where the plan of ``rows``' case changes, and
    (``unknowns``) the verdict over the unknowns at the best floor that sends anything by SDMA
    (:func:`.unknowns.verdict`, on comm_only).

    ``settings``: the kernel's settings priced (KernelSettings or a settings label; default
    ``rows.settings``, docs/variants.md#6-what-the-model-says); the never-SDMA row is classic with the
    same cores per source rank, and ``speedup`` is the reference's classic (one core per source rank)
    over each row, so that settings compare on one scale. ``variant=CLASSIC`` prices the classic
    kernel under ``settings`` alone (one row: never SDMA), its verdict at that point.
    ``baseline``: the classic the verdict (engine lines, band, pays_from) is against: default, for
    doubleplane, classic with the same cores per source rank (does SDMA pay for these settings?);
    for classic, the reference's; a settings label asks for another. With ``metric="full_op"`` the
    engine lines and pays_from are full_op's (the band is comm_only's, and says so).
    ``what_if``: also price SDMA calls per segment (``"segment"``, one SQE per MiB) instead of
    per row, the kernel's way (:data:`.replay.SDMA_MODES`; the reference's settings only: the
    segment setting is the built variant of it).

    Raises:
        ParameterError: ``metric`` not comm_only/full_op, an unknown ``what_if`` or one with other
            settings, a ``variant`` other than classic/doubleplane, settings the SoC cannot run.
    """
    if metric not in METRICS:
        raise ParameterError(f"metric={metric!r}: one of {', '.join(METRICS)}", parameter="metric", value=metric)
    if what_if is not None and (what_if not in SDMA_MODES or what_if == "row"):
        raise ParameterError(f"what_if={what_if!r}: segment (SDMA calls per segment, one SQE per MiB)",
                             parameter="what_if", value=what_if)
    if variant not in (CLASSIC, DOUBLEPLANE):
        raise ParameterError(f"variant={variant!r}: must be CLASSIC or DOUBLEPLANE", parameter="variant",
                             value=variant)
    settings = rows.settings if settings is None else parse_settings(settings)
    check_kernel_settings(settings, variant, rows.soc)
    if what_if is not None and not settings.is_reference:
        raise ParameterError(f"what_if={what_if!r} with settings={settings.label!r}: the what-if is the reference's "
                             "(one SDMA call per segment without the layout step that makes it possible); the segment "
                             "setting is that idea built, its layout step priced: --variant doubleplane-segment",
                             parameter="what_if", value=what_if)
    rows = rows.with_settings(settings)
    label = variant_label(variant, settings)
    floors = thresholds(rows) if variant == DOUBLEPLANE else np.array([NEVER], dtype=np.int64)
    # SDMA segments and bytes at each floor: the above-average segments of at least that size.
    sizes = np.sort((rows.counts * rows.row_bytes)[rows.sdma(DOUBLEPLANE, 0)])
    at_least = len(sizes) - np.searchsorted(sizes, np.where(floors == NEVER, np.iinfo(np.int64).max, floors))
    total = np.concatenate([[0], np.cumsum(sizes[::-1])])
    curve = pd.DataFrame({"threshold_bytes": floors, "sdma_segments": at_least.astype(np.int64),
                          "sdma_bytes": total[at_least].astype(np.int64)})
    classic_rows = rows.with_settings(KernelSettings(False, settings.cores_per_rank))
    modes = [None] + ([what_if] if what_if else [])
    for mode in modes:
        if metric == "comm_only":
            times = _comm_only_curve(rows, model, mode) if variant == DOUBLEPLANE else np.zeros(1)
            classic_c, _ = stage1(classic_rows.counts, rows.sdma(CLASSIC, 0), np.arange(rows.pes), rows.pes,
                                  classic_rows.block_dim, rows.epp, rows.row_bytes, model,
                                  **settings_args(classic_rows), incoming=rows.incoming_bytes)
            times[floors == NEVER] = float(classic_c.max())  # never SDMA: the classic kernel, same cores
        else:
            times = np.array([replay(classic_rows, rows.sdma(CLASSIC, 0), model) if f == NEVER else
                              replay(rows, rows.sdma(DOUBLEPLANE, int(f)), model, mode) for f in floors])
            times = np.array([t.core_max(metric).max() for t in times])
        curve["modelled_us" if mode is None else f"{mode}_us"] = times
    reference = rows.with_settings(REFERENCE)
    if settings.is_reference:
        classic = float(curve["modelled_us"].iloc[-1])
    elif metric == "comm_only":
        classic = float(stage1(reference.counts, rows.sdma(CLASSIC, 0), np.arange(rows.pes), rows.pes,
                               reference.block_dim, rows.epp, rows.row_bytes, model,
                               incoming=rows.incoming_bytes)[0].max())
    else:
        classic = float(replay(reference, rows.sdma(CLASSIC, 0), model).core_max(metric).max())
    curve["speedup"] = classic / curve["modelled_us"]
    if what_if:
        curve[f"{what_if}_saving_us"] = curve["modelled_us"] - curve[f"{what_if}_us"]
    best = curve.loc[curve["modelled_us"].idxmin()]  # first minimum: the largest such floor
    v = None
    against = parse_settings(baseline) if baseline is not None else (
        KernelSettings(False, settings.cores_per_rank) if variant == DOUBLEPLANE else REFERENCE)
    with_sdma = curve[(curve["threshold_bytes"] != NEVER) & (curve["sdma_segments"] > 0)]
    if unknowns and variant == CLASSIC:
        v = unknowns_verdict(rows, model, NEVER, CLASSIC, baseline=against)
    elif unknowns and len(with_sdma):
        v = unknowns_verdict(rows, model, int(with_sdma.loc[with_sdma["modelled_us"].idxmin(), "threshold_bytes"]),
                             baseline=against)
    d = None
    if v is not None and variant == DOUBLEPLANE and v.floor != DEFAULT_MIN_SDMA_BYTES and \
            rows.sdma(DOUBLEPLANE, DEFAULT_MIN_SDMA_BYTES).any():
        d = unknowns_verdict(rows, model, DEFAULT_MIN_SDMA_BYTES, joint=False, baseline=against)
    if metric == "full_op":  # one yardstick: the engine lines in the metric asked for
        v = None if v is None else in_full_op(v, rows, model, CLASSIC if variant == CLASSIC else DOUBLEPLANE,
                                                against)
        d = None if d is None else in_full_op(d, rows, model, baseline=against)
    caption = model.caption()
    return Suggestion(curve, best, metric, caption, v, d, label)


def band_records(rows: CaseRows, model: NpuModel, s: Suggestion, floors=None) -> list[dict]:
    """The band over the unknowns (:func:`.unknowns.verdict`) of ``s``'s setting at each floor of
    ``floors`` (bytes; default: those :meth:`Suggestion.shown` shows, never SDMA included), as
    ``suggest --json`` writes them: per floor the :meth:`~.unknowns.Verdict.record` (min_sdma_bytes
    (-1: never SDMA), variant, nominal, low, high and the point of each end, pays_if), with
    sdma_segments, sdma_bytes and modelled_us (``s.metric``, nominal) of the curve's row. The
    verdicts ``s`` already holds are reused."""
    from ..planning.settings import parse_variant_label

    variant, settings = parse_variant_label(s.label)
    rows = rows.with_settings(settings)
    have = {v.floor: v for v in (s.verdict, s.at_default) if v is not None}
    against = parse_variant_label(s.verdict.against)[1] if s.verdict is not None else None
    if floors is None:
        floors = s.curve["threshold_bytes"].iloc[s.shown()].tolist()
    out = []
    for f in floors:
        row = s.curve.loc[s.curve["threshold_bytes"] == int(f)].iloc[0]
        v = have.get(int(f))
        if v is None:
            v = unknowns_verdict(rows, model, int(f), CLASSIC if f == NEVER else variant, joint=False,
                                 baseline=against)
        rec = v.record()
        rec.update({"min_sdma_bytes": int(f), "sdma_segments": int(row["sdma_segments"]),
                    "sdma_bytes": int(row["sdma_bytes"]), f"{s.metric}_us": float(row["modelled_us"])})
        out.append(rec)
    return out


def _comm_only_curve(rows: CaseRows, model: NpuModel, mode: str | None) -> np.ndarray:
    """The slowest PE's comm_only at each floor of :func:`thresholds`: each PE is priced once per
    plan of its own (no SDMA, then one more of its above-average sizes at a time), all in one
    batch, and each floor takes every PE's plan at that floor."""
    floors = thresholds(rows)
    P = rows.pes
    seg_bytes = rows.counts * rows.row_bytes
    above = rows.sdma(DOUBLEPLANE, 0)
    own = [np.unique(seg_bytes[p][above[p]])[::-1] for p in range(P)]  # each PE's sizes, largest first
    first = np.cumsum([0] + [len(u) + 1 for u in own])
    pe_of = np.repeat(np.arange(P), [len(u) + 1 for u in own])
    cut = np.concatenate([np.r_[np.inf, u] for u in own])              # plan j: sizes >= cut[j] by SDMA
    slowest = np.empty(len(pe_of))
    step = max(1, CURVE_BLOCK_CHUNKS // rows.counts.shape[1])
    for i in range(0, len(pe_of), step):  # rows are independent: in blocks, so the arrays stay small
        pe, c = pe_of[i:i + step], cut[i:i + step]
        comm, _ = stage1(rows.counts[pe], above[pe] & (seg_bytes[pe] >= c[:, None]), pe, P, rows.block_dim, rows.epp,
                         rows.row_bytes, model, **settings_args(rows, mode), incoming=rows.incoming_bytes[pe])
        slowest[i:i + step] = comm.max(axis=1)
    # PE p's plan at floor f: as many of its sizes as are >= f (none for the classic plan).
    f = np.where(floors == NEVER, np.inf, floors.astype(np.float64))
    out = np.zeros(len(floors))
    for p, u in enumerate(own):
        idx = len(u) - np.searchsorted(u[::-1], f, side="left")
        out = np.maximum(out, slowest[first[p] + idx])
    return out


#: Verdict words of a setting's band over the unknowns (:func:`band_word`).
FASTER, SLOWER, TIE, DEPENDS = "faster", "slower", "tie", "depends on the unknowns"


def band_word(low: float, high: float) -> str:
    """What a speed-up band over the unknowns says, by the tie rule (:data:`.unknowns.RESOLUTION`):
    ``faster`` (above 1 + 5 % throughout), ``slower`` (below 1 / 1.05 throughout), ``tie`` (within
    the resolution throughout), else ``depends on the unknowns``."""
    if low > 1 + RESOLUTION:
        return FASTER
    if high < 1 / (1 + RESOLUTION):
        return SLOWER
    if low >= 1 / (1 + RESOLUTION) and high <= 1 + RESOLUTION:
        return TIE
    return DEPENDS


def band_sentence(low: float, high: float) -> str:
    """:func:`band_word`, and for ``depends on the unknowns`` which words the band spans, so that a line
    saying it never pays and one saying it depends do not read as two verdicts: ``depends on the
    unknowns (slower to a tie: it pays nowhere in the box)``, ``(a tie to faster: never slower)`` or
    ``(slower to faster)``."""
    word = band_word(low, high)
    if word != DEPENDS:
        return word
    if high <= 1 + RESOLUTION:
        return f"{word} (slower to a tie: it pays nowhere in the box)"
    if low >= 1 / (1 + RESOLUTION):
        return f"{word} (a tie to faster: never slower)"
    return f"{word} (slower to faster)"


@dataclass
class SettingsComparison:
    """Several kernel settings side by side (floors x variants x cores): ``table`` (DataFrame, one row
    per variant label, in the order asked: variant, best_floor (-1: never SDMA), modelled_us, speedup
    (the reference's classic / this, nominal), low, high (over the unknowns' range), verdict
    (:func:`band_word`), pays_from (fewest SDMA engines at which it beats the reference's classic by
    more than the resolution; None: at none, or no SDMA), measure_first (the unknown that moves it
    most)); ``suggestions``: label -> its :class:`Suggestion`."""

    table: pd.DataFrame
    suggestions: dict[str, Suggestion]
    metric: str
    caption: str

    def text(self) -> str:
        """The table and how to read it, for the terminal."""
        shown = self.table.copy()
        shown["best_floor"] = ["never SDMA" if f == NEVER else str(int(f)) for f in shown["best_floor"]]
        shown["band"] = [f"{lo:.3f}x - {hi:.3f}x" for lo, hi in zip(shown["low"], shown["high"])]
        shown["pays_from"] = ["-" if p is None else f"{int(p)} engine{'s' if int(p) != 1 else ''}"
                              for p in shown["pays_from"]]
        cols = ["variant", "best_floor", "modelled_us", "speedup", "band", "verdict", "pays_from", "measure_first"]
        table = shown[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}")
        return (f"{self.caption}\nmetric: {self.metric} (the slowest PE's CoreMaxTime/us) at each setting's best "
                f"floor; speed-up = the reference's classic (MTE only, one core per source rank) / the setting; "
                f"band: the least and most speed-up over the unknowns' box, searched (comm_only), verdict by the model's resolution "
                f"({RESOLUTION:.0%}: within it, a tie)\n{table}")


def suggest_settings(rows: CaseRows, model: NpuModel, labels, metric: str = "comm_only") -> SettingsComparison:
    """:func:`suggest` for each variant label of ``labels`` (``doubleplane``, ``doubleplane-segment-c6``,
    ``classic-c6``, ...; docs/variants.md#6-what-the-model-says), side by side: each at its best
    floor, with its band over the unknowns against the reference's classic.

    Raises:
        ParameterError: a label that is no variant label, or settings the SoC cannot run.
    """
    from ..planning.settings import parse_variant_label

    parsed = [(str(lb),) + parse_variant_label(lb) for lb in labels]
    out, recs = {}, []
    for _, variant, settings in parsed:
        sg = suggest(rows, model, metric, settings=settings, variant=variant, baseline=REFERENCE)  # one scale
        label = variant_label(variant, settings)
        out[label] = sg
        v = sg.verdict
        if variant == DOUBLEPLANE and v is not None:
            floor = v.floor
            us = float(sg.curve.loc[sg.curve["threshold_bytes"] == floor, "modelled_us"].iloc[0])
            sp = float(sg.curve.loc[sg.curve["threshold_bytes"] == floor, "speedup"].iloc[0])
        else:  # classic, or nothing goes by SDMA at any floor: the never-SDMA row
            floor = NEVER
            us = float(sg.curve["modelled_us"].iloc[-1])
            sp = float(sg.curve["speedup"].iloc[-1])
        recs.append({"variant": label, "best_floor": int(floor), "modelled_us": us, "speedup": sp,
                     "low": v.low if v is not None else sp, "high": v.high if v is not None else sp,
                     "verdict": band_word(v.low, v.high) if v is not None else band_word(sp, sp),
                     "pays_from": v.pays_from if v is not None and variant == DOUBLEPLANE else None,
                     "measure_first": str(v.sensitivity["parameter"].iloc[0])
                     if v is not None and v.sensitivity["spread"].iloc[0] > 0 else "-"})
    table = pd.DataFrame(recs)
    table["pays_from"] = pd.Series([r["pays_from"] for r in recs], dtype=object)  # None stays None
    return SettingsComparison(table, out, metric, model.caption())
