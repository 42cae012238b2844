"""Figures of the lab: segment maps, plane bytes, run comparisons, history and sweeps.

Every function returns a :class:`matplotlib.figure.Figure` made without pyplot (no
global figure state, nothing to close), with a title, axis labels and units. Show
one in a notebook with :func:`show` (PNG, works under any backend, MPLBACKEND=Agg
included) and save it with :func:`save_figure`.

Bytes are plotted in the binary unit that suits the largest value (B, KiB, MiB,
GiB); times in microseconds (us), as in the perf CSV (docs/formats.md#3-perf-csv).
"""

from __future__ import annotations

import io
import math
import os
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
from matplotlib.collections import PatchCollection

from ..errors import ParameterError

__all__ = ["byte_unit", "byte_label", "new_figure", "segment_map", "SegmentMapView", "plane_bytes_plot", "compare_per_pe", "history_plot",
           "sweep_heatmaps", "sdma_share_plot", "figure_png", "figure_svg", "save_figure", "show", "SDMA_COLOR",
           "VARIANT_COLORS", "EMPTY_COLOR", "PE_ROLE", "NO_SDMA_NOTE", "core_timeline", "segment_crossover",
           "modelled_floors", "what_if_saving"]

#: Outline colour of SDMA segments.
SDMA_COLOR = "#d62728"
#: Bar/line colour per variant (classic = MTE only, doubleplane = MTE + SDMA).
VARIANT_COLORS = {"classic": "#7f7f7f", "doubleplane": "#1f77b4"}
_VARIANT_LABEL = {"classic": "classic (MTE only)", "doubleplane": "doubleplane (MTE + SDMA)"}
_PLANE_COLORS = {"MTE": "#9ecae1", "SDMA": SDMA_COLOR}
_PLAIN = FuncFormatter(lambda v, _pos: f"{v:g}")
#: Colour of empty segments (no rows) and of cases without SDMA traffic.
EMPTY_COLOR = "#eeeeee"
_EMPTY_EDGE = "#8c8c8c"
#: How the figures name the PE a segment map shows: it ran the experts and, in combine, sends
#: their rows back to each src_rank (dispatch's destination PE).
PE_ROLE = "expert owner, sends"
_SPEEDUP_AXIS = "speed-up classic / doubleplane (1)"
#: Panel layout up to this many destination PEs; above it one stacked image.
MAX_PANELS = 8
#: Annotate cells with their row count when a panel has at most this many cells.
ANNOTATE_CELLS = 64


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """``(divisor, unit)`` for plotting byte values whose largest is ``max_bytes``:
    B below 1 KiB, then KiB, MiB, GiB (powers of 1024)."""
    for div, unit in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if max_bytes >= div:
            return float(div), unit
    return 1.0, "B"


def byte_label(n: float, digits: int = 3) -> str:
    """``n`` bytes as a plain label in the binary unit that suits it: "512 B", "256 KiB", "1 MiB",
    "1.5 MiB" (at most ``digits`` significant digits, no scientific notation)."""
    div, unit = byte_unit(abs(float(n)))
    return f"{float(n) / div:.{digits}g} {unit}"


def _byte_log_axis(ax, values, max_ticks: int = 8) -> None:
    """A log2 x axis of byte values (plotted in bytes) whose ticks are powers of two covering
    ``values``, labelled plainly ("256 KiB", "2 MiB"); no minor ticks, so no "2x10^0" labels."""
    v = np.asarray([x for x in np.asarray(values, dtype=float).ravel() if x > 0])
    lo, hi = (math.floor(math.log2(v.min())), math.ceil(math.log2(v.max()))) if v.size else (0, 1)
    hi = max(hi, lo + 1)
    step = max(1, math.ceil((hi - lo + 1) / max_ticks))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(lo, hi + 1, step)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: byte_label(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(2.0 ** lo / 1.15, 2.0 ** hi * 1.15)


def new_figure(width: float, height: float, dpi: int = 72) -> Figure:
    """A pyplot-free Figure of ``width`` x ``height`` inches with an Agg canvas attached."""
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def plan_arrays(plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bytes, token_count, sdma mask, each [pes, expert_per_pe, pes] = [d, local_expert, src_rank]."""
    shape = (plan.pes, plan.expert_per_pe, plan.pes)
    seg = plan.segments
    nbytes = seg["bytes"].to_numpy(dtype=np.float64).reshape(shape)
    rows = seg["token_count"].to_numpy(dtype=np.int64).reshape(shape)
    sdma = (seg["plane"].to_numpy() == "SDMA").reshape(shape)
    return nbytes, rows, sdma


def largest_remote_segment(plan) -> np.ndarray:
    """float64 [pes]: each PE's largest remote segment in bytes (segments to src_rank != pe), the
    point the rule's thresholds are drawn against (0 where a PE has no remote rows)."""
    nbytes, _, _ = plan_arrays(plan)
    pes = plan.pes
    remote = np.ones((pes, plan.expert_per_pe, pes), dtype=bool)
    remote[np.arange(pes), :, np.arange(pes)] = False
    return np.where(remote, nbytes, 0.0).reshape(pes, -1).max(axis=1)


def _cmap(name: str = "viridis"):
    import matplotlib
    return matplotlib.colormaps[name].with_extremes(bad=EMPTY_COLOR)  # bad = empty segments


def _bytes_norm(values: np.ndarray):
    """Linear colour scale from 0, or logarithmic when non-zero values span over 100x."""
    from matplotlib.colors import LogNorm, Normalize
    nz = values[values > 0]
    if nz.size and nz.max() / nz.min() > 100:
        return LogNorm(vmin=float(nz.min()), vmax=float(nz.max()))
    return Normalize(vmin=0.0, vmax=max(float(nz.max()) if nz.size else 0.0, 1e-12))


def _floor_text(n: int) -> str:
    div, unit = byte_unit(n)
    return f"{n / div:g} {unit}"


def _cell_fontsize(cells: int) -> int:
    """Row-count text size for a panel of ``cells`` cells: large when there is room."""
    return 12 if cells <= 8 else 10 if cells <= 24 else 8


def segment_map(plan, *, max_panels: int = MAX_PANELS, title: str | None = None, dpi: int = 72) -> Figure:
    """Segment map per PE: local_expert (rows) x src_rank (columns), colour = bytes.

    ``plan``: a :class:`combine_lab.planning.planner.Plan`. Panel "PE d (expert owner, sends)" shows
    the segments PE d holds after dispatch (it ran those experts; dispatch's destination
    PE) and sends back, in combine, to each src_rank. Cell (le, s) of PE d is segment
    ``le * pes + s`` (docs/protocol.md#2-dispatch-layout); its colour is the segment's payload
    bytes (token_count * h * sizeof(T)), empty segments grey; the scale turns
    logarithmic when sizes span more than 100x. Up to ``max_panels`` PEs get one panel
    each, SDMA segments outlined in red (cells annotated with their row count when
    small); more PEs are stacked into one image whose rows are (PE, local_expert), PEs
    separated by white lines, MTE segments in blues and SDMA segments in reds (see
    :class:`SegmentMapView` to redraw it in place).
    """
    nbytes, rows, sdma = plan_arrays(plan)
    pes, epp = plan.pes, plan.expert_per_pe
    div, unit = byte_unit(nbytes.max(initial=0.0))
    norm = _bytes_norm(nbytes / div)
    cmap = _cmap()
    head = title or (f"Segment map, {plan.variant} (SDMA floor {plan.min_sdma_bytes:,} B):"
                     f"{chr(10) if pes <= 2 else ' '}bytes per segment each PE sends back to src_rank")
    legend = [Patch(facecolor="none", edgecolor=SDMA_COLOR, linewidth=2, label="SDMA segment"),
              Patch(facecolor=EMPTY_COLOR, edgecolor=_EMPTY_EDGE, linewidth=1, label="empty segment (0 rows)")]
    if pes <= max_panels:
        ncols = min(pes, 4)
        nrows = math.ceil(pes / ncols)
        fig = new_figure(min(3.2 * ncols + 1.8, 15), 1.2 + nrows * (0.42 * epp + 1.1), dpi)
        fig.set_layout_engine("constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
        im = None
        for d in range(nrows * ncols):
            ax = axes.flat[d]
            if d >= pes:
                ax.set_visible(False)
                continue
            data = np.ma.masked_equal(nbytes[d] / div, 0.0)
            im = ax.imshow(data, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest",
                           origin="upper")
            ys, xs = np.nonzero(sdma[d])
            if len(xs):
                ax.add_collection(PatchCollection(
                    [Rectangle((x - 0.5, y - 0.5), 1, 1) for x, y in zip(xs, ys)],
                    facecolor="none", edgecolor=SDMA_COLOR, linewidth=2.5))
            if epp * pes <= ANNOTATE_CELLS:
                size = _cell_fontsize(epp * pes)
                for le in range(epp):
                    for s in range(pes):
                        if rows[d, le, s]:
                            dark = float(norm(nbytes[d, le, s] / div)) < 0.6
                            ax.text(s, le, f"{rows[d, le, s]}", ha="center", va="center", fontsize=size,
                                    fontweight="bold", color="white" if dark else "black")
            ax.set_title(f"PE {d} ({PE_ROLE})", fontsize=10)
            ax.set_xticks(range(pes) if pes <= 16 else range(0, pes, max(1, pes // 8)))
            ax.set_yticks(range(epp) if epp <= 16 else range(0, epp, max(1, epp // 8)))
            ax.set_xlabel("src_rank (PE the rows return to)", fontsize=9)
            ax.set_ylabel("local_expert", fontsize=9)
        cb = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.9)
        cb.set_label(f"payload ({unit}); text = rows")
        fig.suptitle(head, fontsize=10)
        fig.legend(handles=legend, loc="outside lower center", fontsize=9, ncols=2)
        return fig
    return _StackedMap(pes, epp, dpi).update(plan, title)


class _StackedMap:
    """The segment map of many PEs as one image whose rows are (PE, local_expert):
    MTE segments in blues, SDMA segments in reds (two colour bars, same scale), empty grey.
    Built once per (pes, expert_per_pe); :meth:`update` redraws it in place for a new plan."""

    def __init__(self, pes: int, epp: int, dpi: int = 72):
        self.pes, self.epp = pes, epp
        self.fig = fig = new_figure(9, 6.2, dpi)
        self.ax = ax = fig.add_axes((0.1, 0.12, 0.64, 0.76))
        caxes = (fig.add_axes((0.77, 0.12, 0.022, 0.76)), fig.add_axes((0.88, 0.12, 0.022, 0.76)))
        self.image = ax.imshow(np.zeros((pes * epp, pes, 4)), aspect="auto", interpolation="nearest",
                               extent=(-0.5, pes - 0.5, pes * epp - 0.5, -0.5))
        self.cmaps = (_cmap("Blues"), _cmap("Reds"))
        self.mappables = tuple(ScalarMappable(cmap=c) for c in self.cmaps)
        ax.set_facecolor("#eeeeee")
        ax.hlines(np.arange(1, pes) * epp - 0.5, -0.5, pes - 0.5, colors="white", linewidths=0.4)
        # Few tick labels and short texts: rendering glyphs is most of a redraw's cost.
        step = max(1, pes // 8)
        ax.set_yticks([d * epp + (epp - 1) / 2 for d in range(0, pes, step)])
        ax.set_yticklabels([str(d) for d in range(0, pes, step)], fontsize=8)
        ax.set_xticks(range(0, pes, step))
        ax.set_xlabel("src_rank (PE the rows return to)")
        ax.set_ylabel(f"PE ({PE_ROLE}; {epp} local experts each)")
        self.colorbars = []
        for sm, cax in zip(self.mappables, caxes):
            cax.tick_params(labelsize=8)
            self.colorbars.append(fig.colorbar(sm, cax=cax))

    def update(self, plan, title: str | None = None) -> Figure:
        """Redraw for ``plan`` (same pes and expert_per_pe); returns the Figure. Raises
        ParameterError for a plan of another shape."""
        nbytes, _, sdma = plan_arrays(plan)
        if nbytes.shape != (self.pes, self.epp, self.pes):
            raise ParameterError(f"plan has pes={plan.pes}, expert_per_pe={plan.expert_per_pe}; this map was built "
                             f"for pes={self.pes}, expert_per_pe={self.epp}")
        div, unit = byte_unit(nbytes.max(initial=0.0))
        flat = nbytes.reshape(self.pes * self.epp, self.pes) / div
        mask = sdma.reshape(self.pes * self.epp, self.pes)
        norm = _bytes_norm(flat)
        scaled = norm(np.ma.masked_equal(flat, 0.0))
        rgba = np.where(mask[..., None], self.cmaps[1](scaled), self.cmaps[0](scaled))
        rgba[flat == 0] = (0.93, 0.93, 0.93, 1.0)
        self.image.set_data(rgba)
        self.ax.set_title(title or f"Segment map, {plan.variant}, SDMA floor {_floor_text(plan.min_sdma_bytes)}",
                          fontsize=10)
        labels = (f"MTE segment payload ({unit})", f"SDMA segment payload ({unit}), {int(mask.sum())} segments")
        for sm, cb, label in zip(self.mappables, self.colorbars, labels):
            sm.set_norm(norm)
            cb.update_normal(sm)
            cb.minorticks_off()  # log scales: minor ticks cost more than the image
            cb.ax.yaxis.set_major_formatter(_PLAIN)  # plain numbers, no mathtext to parse
            cb.set_label(label)
        return self.fig


class SegmentMapView:
    """A segment map that redraws in place: for more than ``max_panels`` PEs it keeps one
    Figure per (pes, expert_per_pe) and only updates its image, scales and texts, which
    is what makes the tuning view's redraw fast; fewer PEs get a fresh panel figure.

    ``view.draw(plan)`` returns the Figure (same object between stacked redraws)."""

    def __init__(self, max_panels: int = MAX_PANELS, dpi: int = 72):
        self.max_panels, self.dpi = max_panels, dpi
        self._stacked: _StackedMap | None = None

    def draw(self, plan, title: str | None = None) -> Figure:
        if plan.pes <= self.max_panels:
            return segment_map(plan, max_panels=self.max_panels, title=title, dpi=self.dpi)
        if self._stacked is None or (self._stacked.pes, self._stacked.epp) != (plan.pes, plan.expert_per_pe):
            self._stacked = _StackedMap(plan.pes, plan.expert_per_pe, self.dpi)
        return self._stacked.update(plan, title)


def plane_bytes_plot(plan, dpi: int = 72) -> Figure:
    """What each plane would carry, per PE (the expert owner, which sends), and the rule's thresholds.

    Left: payload bytes per PE by MTE and by SDMA (stacked). Right: per PE the largest
    remote segment against the remote average segment (threshold_num / threshold_den of
    docs/decision-rule.md#1-the-rule) and the SDMA floor: a remote segment goes by SDMA when it is
    at least the floor and strictly above the average.
    """
    t = plan.totals
    pes = plan.pes
    largest = largest_remote_segment(plan)
    fig = new_figure(11, 3.6, dpi)
    a1, a2 = fig.subplots(1, 2)
    x = np.arange(pes)
    div, unit = byte_unit(float((t["mte_bytes"] + t["sdma_bytes"]).max()))
    mte = t["mte_bytes"].to_numpy(dtype=float) / div
    sd = t["sdma_bytes"].to_numpy(dtype=float) / div
    a1.bar(x, mte, color=_PLANE_COLORS["MTE"], label="MTE", width=0.8)
    a1.bar(x, sd, bottom=mte, color=_PLANE_COLORS["SDMA"], label="SDMA", width=0.8)
    share = float(t["sdma_bytes"].sum()) / max(float((t["mte_bytes"] + t["sdma_bytes"]).sum()), 1.0)
    a1.set_title(f"Payload per plane (SDMA share {100 * share:.1f} %)", fontsize=10)
    a1.set_xlabel(f"PE ({PE_ROLE})")
    a1.set_ylabel(f"payload ({unit})")
    a1.legend(fontsize=8)
    div2, unit2 = byte_unit(max(float(largest.max(initial=0.0)), float(plan.min_sdma_bytes),
                                float(t["remote_avg_segment_bytes"].max())))
    a2.plot(x, largest / div2, "o", color="black", label="largest remote segment", markersize=4)
    a2.plot(x, t["remote_avg_segment_bytes"].to_numpy() / div2, "_", color=SDMA_COLOR, markersize=12,
            markeredgewidth=2, label="remote average (must be exceeded)")
    a2.axhline(plan.min_sdma_bytes / div2, color="grey", linestyle="--", linewidth=1,
               label=f"SDMA floor {plan.min_sdma_bytes:,} B")
    a2.set_title("Decision thresholds per PE (docs/decision-rule.md#1-the-rule)", fontsize=10)
    a2.set_xlabel(f"PE ({PE_ROLE})")
    a2.set_ylabel(f"segment payload ({unit2})")
    a2.legend(fontsize=7)
    if pes > 16:
        for a in (a1, a2):
            a.set_xticks(range(0, pes, max(1, pes // 8)))
    else:
        for a in (a1, a2):
            a.set_xticks(range(pes))
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.15, top=0.88, wspace=0.25)
    return fig


def _perf_by_pe(res, metric: str) -> pd.Series:
    p = res.perf
    if p.empty:
        return pd.Series(dtype=float)
    rows = p[p["Metric"] == metric]
    return rows.groupby("ProfPe")["CoreMaxTime/us"].mean()


def compare_per_pe(runs: dict, dpi: int = 72) -> Figure:
    """comm_only and full_op of doubleplane against classic, per profiled PE.

    ``runs``: ``{"classic": RunResult, "doubleplane": RunResult}`` as
    :func:`combine_lab.harness.compare` returns. Bars are CoreMaxTime/us (the slowest
    core's mean over the profiled loops, docs/formats.md#3-perf-csv) for each PE that was
    profiled; the title carries the x_out verdict of both runs.
    """
    fig = new_figure(8.8, 3.5, dpi)  # 845 px as SVG: a JupyterLab column beside the sidebar
    axes = fig.subplots(1, 2)
    any_run = next(iter(runs.values()))
    width = 0.8 / max(len(runs), 1)
    for ax, metric in zip(axes, ("comm_only", "full_op")):
        top = 0.0
        for i, (variant, res) in enumerate(runs.items()):
            s = _perf_by_pe(res, metric)
            ax.bar(s.index.to_numpy() + (i - (len(runs) - 1) / 2) * width, s.to_numpy(), width=width,
                   color=VARIANT_COLORS.get(variant), label=_VARIANT_LABEL.get(variant, variant))
            top = max(top, float(s.max()) if len(s) else 0.0)
        ax.set_ylim(0, top * 1.3 if top > 0 else 1.0)  # room for the legend
        ax.set_title(f"{metric}, measured", fontsize=10)
        ax.set_xlabel("profiled PE")
        ax.set_ylabel("CoreMaxTime (us)")
        pes = sorted(set().union(*[set(_perf_by_pe(r, metric).index) for r in runs.values()]))
        ax.set_xticks(pes)
        ax.legend(fontsize=8, loc="upper right", ncols=2)
    verdict = ", ".join(f"{_VARIANT_LABEL.get(v, v)} {'PASS' if r.check_ok else 'FAIL'}" for v, r in runs.items())
    fig.suptitle(f"Measured on {any_run.target}: {any_run.case_id} {any_run.routing}\nx_out {verdict}", fontsize=10)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.15, top=0.76, wspace=0.28)
    return fig


def history_plot(history: pd.DataFrame, dpi: int = 72) -> Figure:
    """Runs so far: measured comm_only of both variants (left) and the speed-up of doubleplane (right).

    ``history``: one row per run with columns ``run`` (int), ``comm_only_classic_us``,
    ``comm_only_doubleplane_us`` (us) and ``comm_only_speedup`` (classic / doubleplane,
    above 1: doubleplane faster), and optionally ``target``, as
    :class:`combine_lab.lab.app.TuningApp` keeps it.
    """
    fig = new_figure(8.8, 3.2, dpi)
    a1, a2 = fig.subplots(1, 2)
    where = ", ".join(sorted({str(t) for t in history.get("target", pd.Series(dtype=str))})) or "the target"
    if len(history):
        x = history["run"].to_numpy()
        for v in ("classic", "doubleplane"):
            a1.plot(x, history[f"comm_only_{v}_us"], "o-", color=VARIANT_COLORS[v], label=_VARIANT_LABEL[v])
        a2.plot(x, history["comm_only_speedup"], "o-", color="black")
        a1.set_xticks(x)
        a2.set_xticks(x)
        a1.legend(fontsize=8)
    a2.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    a1.set_title(f"comm_only per run, measured on {where}", fontsize=10)
    a1.set_xlabel("run")
    a1.set_ylabel("CoreMaxTime (us)")
    a2.set_title("speed-up of doubleplane (above 1: doubleplane faster)", fontsize=9)
    a2.set_xlabel("run")
    a2.set_ylabel("classic / doubleplane (1)")
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.17, top=0.88, wspace=0.28)
    return fig


def _speedup_norm(values: np.ndarray) -> TwoSlopeNorm:
    finite = values[np.isfinite(values)]
    lo = float(finite.min()) if finite.size else 1.0
    hi = float(finite.max()) if finite.size else 1.0
    return TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.95), vmax=max(hi, 1.05))


def _repeats_text(summary: pd.DataFrame) -> str:
    reps = sorted({int(r) for r in summary.get("repeats", pd.Series(dtype=float)).dropna()})
    if not reps:
        return "repeats unknown"
    n = str(reps[0]) if len(reps) == 1 else f"{reps[0]}-{reps[-1]}"
    return f"{n} repeat{'s' if reps[-1] > 1 else ''}"


def _has_sdma(summary: pd.DataFrame) -> np.ndarray:
    """True where the doubleplane run sent bytes by SDMA (sdma_share > 0)."""
    return summary["sdma_share"].fillna(0.0).to_numpy(dtype=float) > 0


def sweep_heatmaps(summary: pd.DataFrame, metric: str = "comm_only", dpi: int = 72, where: str | None = None) -> Figure:
    """Speed-up of doubleplane (classic time / doubleplane time) over bs x h, one panel per routing.

    ``where`` says where the times come from, in the title: "measured on cpu (the twin)", or the
    model's caption ("modelled on a3 (...); assumed parameters: ...") for a modelled summary
    (:func:`combine_lab.lab.sweep.model_grid`: one deterministic value per case, no repeats).

    ``summary``: :func:`combine_lab.results.tables.summarize` output (columns routing, bs, h,
    sdma_share, ``<metric>_speedup`` and its quartiles ``_lo`` / ``_hi``, repeats). Each
    cell shows the median speed-up over repeats, its quartiles and the SDMA share; blue above 1
    (doubleplane faster), red below. Cases whose doubleplane run sent nothing by SDMA send
    the same bytes as classic: they get no colour, a grey hatched cell marked "no SDMA".
    Where other axes (pes, topk, expert_per_pe, dtype) vary, a cell shows the median over
    the cases with SDMA traffic (lowest first quartile, highest third quartile).
    """
    col = f"{metric}_speedup"
    routings = list(dict.fromkeys(summary["routing"]))
    n = max(len(routings), 1)
    fig = new_figure(min(4.4 * n + 1.6, 17), 4.4, dpi)
    fig.set_layout_engine("constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    sdma = summary[_has_sdma(summary)]
    norm = _speedup_norm(sdma[col].to_numpy(dtype=float))
    bs_all = sorted(set(summary["bs"]))
    h_all = sorted(set(summary["h"]))
    for ax, routing in zip(axes, routings):
        sub = summary[summary["routing"] == routing]
        with_sdma = sub[_has_sdma(sub) & sub[col].notna()]
        agg = with_sdma.groupby(["bs", "h"]).agg(mid=(col, "median"), lo=(f"{col}_lo", "min"),
                                                 hi=(f"{col}_hi", "max"), share=("sdma_share", "median"))
        data = np.full((len(bs_all), len(h_all)), np.nan)
        for (b, hh), r in agg.iterrows():
            data[bs_all.index(b), h_all.index(hh)] = r["mid"]
        ax.imshow(np.ma.masked_invalid(data), cmap="RdBu", norm=norm, aspect="auto", origin="lower",
                  interpolation="nearest")
        ax.set_facecolor("white")
        present = set(zip(sub["bs"], sub["h"]))
        no_sdma = set(zip(sub.loc[~_has_sdma(sub), "bs"], sub.loc[~_has_sdma(sub), "h"]))
        cells = len(bs_all) * len(h_all)
        size = 9 if cells <= 6 else 8 if cells <= 12 else 7
        for i, b in enumerate(bs_all):
            for j, hh in enumerate(h_all):
                if (b, hh) in agg.index:
                    r = agg.loc[(b, hh)]
                    strong = abs(float(norm(r["mid"])) - 0.5) > 0.3
                    spread = "" if r["lo"] == r["hi"] else f"\n[{r['lo']:.2f}-{r['hi']:.2f}]"
                    ax.text(j, i, f"{r['mid']:.2f}{spread}\nSDMA {100 * r['share']:.0f} %", ha="center",
                            va="center", fontsize=size, color="white" if strong else "black")
                elif (b, hh) in no_sdma:  # only cases without SDMA traffic here
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=EMPTY_COLOR, edgecolor=_EMPTY_EDGE,
                                           hatch="//", linewidth=0.8))
                    ax.text(j, i, "no SDMA\n(same bytes)", ha="center", va="center", fontsize=size, color="#555555")
                elif (b, hh) in present:  # its runs failed: no time
                    ax.text(j, i, "no run", ha="center", va="center", fontsize=size, color="#555555")
        ax.set_xticks(range(len(h_all)))
        ax.set_xticklabels([str(c) for c in h_all])
        ax.set_yticks(range(len(bs_all)))
        ax.set_yticklabels([str(i) for i in bs_all])
        ax.set_xlim(-0.5, len(h_all) - 0.5)
        ax.set_ylim(-0.5, len(bs_all) - 0.5)
        ax.set_xlabel("h (elements per row)")
        ax.set_ylabel("bs (tokens per PE)")
        ax.set_title(routing, fontsize=10)
    cb = fig.colorbar(ScalarMappable(norm=norm, cmap="RdBu"), ax=list(axes), shrink=0.9)
    cb.set_label(f"{metric} {_SPEEDUP_AXIS}\nabove 1: doubleplane faster")
    if where and where.startswith("modelled"):
        head = f"{metric} speed-up of doubleplane over bs x h, MODELLED (not measured): one value per case"
    else:
        head = (f"{metric} speed-up of doubleplane over bs x h"
                f"{', ' + where if where else ''}: median [quartiles] over {_repeats_text(summary)}")
    lines = [head] + (textwrap.wrap(where, 120) if where and where.startswith("modelled") else [])
    fig.suptitle("\n".join(lines + ["above 1: doubleplane faster; hatched grey: no SDMA traffic (identical bytes, "
                                     "nothing to compare)"]), fontsize=9 if len(lines) > 1 else 10)
    return fig


#: What :func:`sdma_share_plot` writes on the figure when no case sent anything by SDMA.
NO_SDMA_NOTE = ("Every case sent 0 bytes by SDMA: doubleplane sent exactly the bytes of classic,\n"
                "so there is no speed-up to read here, only timing noise. Use larger bs or h,\n"
                "a skewed routing (zipf, hot-expert) or a lower min_sdma_bytes.")


def sdma_share_plot(summary: pd.DataFrame, metric: str = "comm_only", dpi: int = 72) -> Figure:
    """Speed-up of doubleplane (classic time / doubleplane time, median with quartile bars over
    repeats) against the share of payload bytes the doubleplane run sent by SDMA, one colour
    per routing.

    Cases with SDMA share 0 send identical bytes with both variants: they are drawn apart
    (hollow grey, "no SDMA") and the band their quartile bars span is the timing noise, the
    yardstick for the other points. When every case has share 0, the figure says so in a note
    (:data:`NO_SDMA_NOTE`) instead of drawing a degenerate share axis.

    ``summary``: :func:`combine_lab.results.tables.summarize` output (columns routing, sdma_share in
    [0, 1], ``<metric>_speedup`` and its quartiles ``_lo`` / ``_hi``, repeats).
    """
    col = f"{metric}_speedup"
    fig = new_figure(7.8, 4.4, dpi)
    ax = fig.add_axes((0.1, 0.12, 0.54, 0.74))
    has = _has_sdma(summary)
    zero = summary[~has & summary[col].notna()]

    def bars(sub):
        mid = sub[col].to_numpy(dtype=float)
        lo = sub.get(f"{col}_lo", sub[col]).to_numpy(dtype=float)
        hi = sub.get(f"{col}_hi", sub[col]).to_numpy(dtype=float)
        return mid, np.vstack([np.clip(mid - lo, 0, None), np.clip(hi - mid, 0, None)])

    if len(zero):
        lo = float(zero.get(f"{col}_lo", zero[col]).min())
        hi = float(zero.get(f"{col}_hi", zero[col]).max())
        ax.axhspan(lo, hi, color=EMPTY_COLOR, zorder=0, label=f"no-SDMA span = noise\n({lo:.2f}-{hi:.2f})")
        mid, err = bars(zero)
        ax.errorbar(np.zeros(len(zero)), mid, yerr=err, fmt="o", mfc="white", mec="#7f7f7f", ecolor="#7f7f7f",
                    capsize=3, label=f"no SDMA, identical\ntraffic ({len(zero)} cases)")
    for routing, sub in summary[has & summary[col].notna()].groupby("routing", sort=False):
        mid, err = bars(sub)
        ax.errorbar(100 * sub["sdma_share"].to_numpy(dtype=float), mid, yerr=err, fmt="o", capsize=3,
                    alpha=0.85, label=str(routing))
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="equal time")
    if has.any():
        top = float(100 * summary.loc[has, "sdma_share"].max())
        ax.set_xlim(-0.06 * top - 0.5, top * 1.12 + 0.5)
    else:
        ax.set_xlim(-5, 100)
        ax.text(0.55, 0.95, NO_SDMA_NOTE, transform=ax.transAxes, ha="center", va="top", fontsize=7.5,
                bbox=dict(boxstyle="round", facecolor="#fff8e1", edgecolor="#b35900"))
    ax.set_xlabel("SDMA share of payload bytes, doubleplane run (%)")
    ax.set_ylabel(f"{metric} {_SPEEDUP_AXIS}")
    ax.set_title(f"Measured speed-up against SDMA byte share\n(median, bars quartiles over {_repeats_text(summary)}; "
                 "above 1: doubleplane faster)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


# ------------------------------------------------------------------------ teaching and modelled time

_OP_COLORS = {"sdma_put": SDMA_COLOR, "sdma_quiet": "#7f0000", "mte_put": "#1f77b4", "quiet": "#08306b",
              "flag": "#ff9f1c", "wait": "#9e9e9e", "reduce": "#2ca02c", "barrier": "#222222"}
_OP_LABELS = {"sdma_put": "SDMA put (no wait)", "sdma_quiet": "SDMA quiet", "mte_put": "MTE put",
              "quiet": "quiet (MTE)", "flag": "status flags by MTE", "wait": "wait for flags (stage 2)",
              "reduce": "reduce, write x_out", "barrier": "core barrier"}


def core_timeline(runs, title: str, dpi: int = 72) -> Figure:
    """One AIV core's operations in the kernel's order, as boxes along a line (order, not time: widths
    grow with the count, not to scale), with the two profiling frames above them: ``comm_only`` from
    its PROF_START to its PROF_END around stage 1 (SendSegments), ``full_op`` from before stage 1
    to after the core barrier that ends stage 2.

    ``runs``: :class:`combine_lab.model.stream.Run` of the core (``core_runs(rows, sdma, pe, core)``);
    consecutive stage-2 waits and reductions are drawn as one box each per token group."""
    stage1, stage2 = [], []
    for r in runs:
        (stage2 if r.kind in ("wait", "reduce", "barrier") else stage1).append(r)
    boxes = [(r.kind, r.n) for r in stage1]
    tokens = sum(1 for r in stage2 if r.kind == "reduce")
    slots = sum(r.n for r in stage2 if r.kind == "wait")
    if tokens:
        boxes += [("wait", slots), ("reduce", tokens)]
    boxes += [("barrier", 1)]
    fig = new_figure(9.6, 3.0, dpi)
    ax = fig.add_axes((0.02, 0.28, 0.96, 0.5))
    x = 0.0
    spans = []
    for kind, n in boxes:
        w = 1.0 + math.log2(1 + n)
        ax.add_patch(Rectangle((x, 0), w, 1, facecolor=_OP_COLORS[kind], edgecolor="white", linewidth=1.5))
        label = f"x{n}" if kind not in ("quiet", "sdma_quiet", "barrier") else ""
        if kind == "wait":
            label = f"{n} slots"
        if kind == "reduce":
            label = f"{n} tokens"
        ax.text(x + w / 2, 0.5, label, ha="center", va="center", fontsize=8, color="white")
        spans.append((x, w))
        x += w
    end1 = sum(w for (_, w), _b in zip(spans, range(len(stage1))))
    for y, (lo, hi), text in ((1.25, (0, end1), "comm_only frame: SHMEMI_PROF_START/END(kProfFrameCommOnly) = stage 1"),
                              (1.85, (0, x), "full_op frame: SHMEMI_PROF_START/END(kProfFrameFullOp) = stage 1 + "
                                             "stage 2 + the core barrier")):
        ax.annotate("", xy=(lo, y), xytext=(hi, y), arrowprops=dict(arrowstyle="<->", color="black", lw=1.2))
        ax.text((lo + hi) / 2, y + 0.12, text, ha="center", va="bottom", fontsize=8.5)
    ax.axvline(end1, color="black", linestyle=":", linewidth=1)
    ax.set_xlim(-0.2, x + 0.2)
    ax.set_ylim(-0.1, 2.4)
    ax.set_yticks([])
    ax.set_xticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("the core's operations in order (box width grows with the count; not to scale in time)")
    used = list(dict.fromkeys(k for k, _ in boxes))
    fig.legend(handles=[Patch(facecolor=_OP_COLORS[k], label=_OP_LABELS[k]) for k in used], loc="lower center",
               ncols=min(len(used), 4), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    return fig


def segment_crossover(table: pd.DataFrame, caption: str, floor: int | None = None, dpi: int = 72) -> Figure:
    """Modelled comm_only of one remote segment alone, sent by MTE and by SDMA, against its size.

    ``table``: :func:`combine_lab.lab.teach.one_segment` output (rows, bytes, mte_replay_us,
    sdma_replay_us); ``caption``: the model's "modelled on ..." line (in the title); ``floor``: an
    SDMA floor in bytes to mark. The crossover (first size at which SDMA is faster) is marked."""
    fig = new_figure(8.8, 4.0, dpi)
    ax = fig.add_axes((0.09, 0.14, 0.88, 0.66))
    x = table["bytes"].to_numpy(dtype=float)
    ax.plot(x, table["mte_replay_us"], "o-", color=_PLANE_COLORS["MTE"], markeredgecolor="#1f77b4",
            label="MTE: the core puts every row")
    ax.plot(x, table["sdma_replay_us"], "s-", color=SDMA_COLOR, label="SDMA: the core issues, the engine copies")
    cross = table[table["faster"] == "SDMA"]
    if len(cross):
        c = cross.iloc[0]
        ax.axvline(c["bytes"], color="grey", linestyle=":", linewidth=1,
                   label=f"crossover: SDMA faster from {int(c['rows'])} rows ({byte_label(c['bytes'])})")
    else:  # say it on the figure too: the reader was promised a crossover
        ax.plot([], [], " ", label="no crossover: MTE is faster at every size shown")
    if floor is not None and floor <= table["bytes"].max():
        ax.axvline(floor, color="black", linestyle="--", linewidth=1, label=f"SDMA floor {floor:,} B ({byte_label(floor)})")
    _byte_log_axis(ax, x)
    ax.set_xlabel("segment payload (bytes, log scale)")
    ax.set_ylabel("modelled comm_only of its core (us)")
    ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("One remote segment alone: which plane is faster (MODELLED, not measured)\n"
                 + "\n".join(textwrap.wrap(caption, 120)), fontsize=8.5)
    return fig


def modelled_floors(curve: pd.DataFrame, caption: str, floor: int | None = None, metric: str = "comm_only",
                    what_if: str | None = None, dpi: int = 72) -> Figure:
    """The modelled time of ``metric`` at every SDMA floor where the plan changes (a
    :class:`combine_lab.model.suggest.Suggestion` curve: threshold_bytes, -1 = never SDMA, modelled_us,
    and ``<what_if>_us`` when given), the classic time as a dashed line, the best floor starred and
    ``floor`` marked; ``caption`` (the model's "modelled on ...") in the title."""
    fig = new_figure(8.8, 4.4, dpi)
    ax = fig.add_axes((0.09, 0.29, 0.88, 0.51))
    c = curve[curve["threshold_bytes"] >= 0].sort_values("threshold_bytes")
    classic = float(curve.loc[curve["threshold_bytes"] < 0, "modelled_us"].iloc[0])
    x = c["threshold_bytes"].to_numpy(dtype=float)
    ax.step(x, c["modelled_us"], where="post", color=VARIANT_COLORS["doubleplane"], marker="o", markersize=3,
            label="doubleplane at this floor (the kernel: one SDMA call per row)")
    if what_if and f"{what_if}_us" in c:
        ax.step(x, c[f"{what_if}_us"], where="post", color="#9467bd", linestyle="-.",
                label="what-if: one SDMA call per segment (not built)")
    ax.axhline(classic, color=VARIANT_COLORS["classic"], linestyle="--", label=f"classic (MTE only) {classic:,.1f} us")
    best = curve.loc[curve["modelled_us"].idxmin()]
    if best["threshold_bytes"] >= 0:
        ax.plot(best["threshold_bytes"], best["modelled_us"], "*", color="#e6a100", markersize=14,
                label=f"best floor {int(best['threshold_bytes']):,} B ({byte_label(best['threshold_bytes'])})")
    if floor is not None:
        ax.axvline(floor, color=SDMA_COLOR, linewidth=1, label=f"floor {floor:,} B ({byte_label(floor)})")
    _byte_log_axis(ax, list(x) + ([floor] if floor else []))
    ax.set_xlabel("SDMA floor min_sdma_bytes (bytes, log scale)")
    ax.set_ylabel(f"modelled {metric}, slowest PE (us)")
    # below the axes, inside the figure: long labels are never cut off
    ax.legend(fontsize=7.5, loc="lower center", bbox_to_anchor=(0.5, 0.0), bbox_transform=fig.transFigure, ncols=2,
              frameon=False)
    fig.suptitle(f"Modelled {metric} against the SDMA floor (MODELLED, not measured)\n"
                 + "\n".join(textwrap.wrap(caption, 120)), fontsize=8.5)
    return fig


def what_if_saving(modelled: pd.DataFrame, caption: str, dpi: int = 72) -> Figure:
    """Per case of a modelled sweep (:func:`combine_lab.lab.sweep.model_grid`): how much modelled
    comm_only one SDMA call per segment (one descriptor per MiB) would save against one per row, as
    the kernel does today, in us and in % of the doubleplane time; cases without SDMA traffic save
    nothing and are marked."""
    fig = new_figure(8.8, max(2.8, 0.32 * len(modelled) + 1.6), dpi)
    ax = fig.add_axes((0.36, 0.16, 0.6, 0.7))
    y = np.arange(len(modelled))
    save = modelled["what_if_saving_us"].to_numpy(dtype=float)
    pct = modelled["what_if_saving_pct"].to_numpy(dtype=float)
    ax.barh(y, save, color="#9467bd")
    for i, (v, p, share) in enumerate(zip(save, pct, modelled["sdma_share"])):
        ax.text(max(v, 0), i, f"  {v:,.1f} us ({p:.1f} %)" if share > 0 else "  no SDMA traffic: nothing to save",
                va="center", fontsize=7.5)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{r} bs {b} h {h}" for r, b, h in zip(modelled["routing"], modelled["bs"], modelled["h"])],
                       fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlim(0, max(float(np.nanmax(save)) if len(save) else 1.0, 1e-9) * 1.6)
    ax.set_xlabel("modelled comm_only saved by one SDMA call per segment (us)")
    ax.set_ylabel("case (routing, bs, h)")
    fig.suptitle("What-if, MODELLED: SDMA descriptors per segment instead of per row\n"
                 + "\n".join(textwrap.wrap(caption, 110)), fontsize=8)
    return fig


def figure_png(fig: Figure, dpi: int | None = None) -> bytes:
    """The figure rendered as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi)
    return buf.getvalue()


def figure_svg(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element (class ``cl-figure``), its text left to the browser
    (sharp at any pixel density), shown at its own size (1 inch = 96 px) or narrower when the page is."""
    import matplotlib
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none",
                                "font.family": ["DejaVu Sans", "Liberation Sans", "Arial", "sans-serif"]}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    return text.replace("<svg ", "<svg class=\"cl-figure\" style=\"max-width:100%;height:auto;display:block\" ", 1)


def save_figure(fig: Figure, out_dir: str | os.PathLike, name: str, dpi: int = 100) -> Path:
    """Save ``fig`` as ``<out_dir>/<name>.png`` (folder created) and return the path."""
    path = Path(out_dir) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=dpi)
    return path


def show(fig: Figure, out_dir: str | os.PathLike | None = None, name: str | None = None) -> None:
    """Display ``fig`` as a PNG in IPython (any matplotlib backend) and, when ``out_dir``
    and ``name`` are given, save it there as ``<name>.png`` (see :func:`save_figure`).
    Returns None, so that a notebook cell ending with it shows only the figure."""
    path = save_figure(fig, out_dir, name) if out_dir is not None and name else None
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:  # pragma: no cover - IPython ships with the lab extra
        return None
    if get_ipython() is not None:
        display(Image(data=path.read_bytes() if path else figure_png(fig, 100), format="png"))
    return None
