"""Figures of the lab: segment maps, plane bytes, run comparisons, history and sweeps.

One drawing per view, wherever it is shown. The views of a plan and of the modelled time
(:func:`segment_map`, :func:`plane_bytes_plot`, :func:`modelled_floors`) are the tuning app's
live drawings (:mod:`.svg`, an :class:`~combine_lab.lab.svg.SvgFigure`: why SVG is written there,
with the measurements); every other function returns a :class:`matplotlib.figure.Figure` made
without pyplot (no global figure state, nothing to close). Each has a title, axis labels and
units. Show either kind in a notebook with :func:`show` and save it as PNG with
:func:`save_figure`.

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

from ..kernels import CLASSIC, DOUBLEPLANE
from ..errors import ParameterError
from ..formats.files import write_atomic
# the plan views' drawings, and what every figure shares (units, colours, the PE's role)
from .svg import (ANNOTATE_CELLS, EMPTY_COLOR, MAX_PANELS, PE_ROLE, SDMA_COLOR, WIDTH, SvgFigure, byte_label, byte_unit,
                  largest_remote_segment, modelled_floors_svg, plane_bytes_svg, plan_arrays, segment_map_svg)

__all__ = ["byte_unit", "byte_label", "new_figure", "segment_map", "plane_bytes_plot", "compare_per_pe", "history_plot",
           "sweep_heatmaps", "sdma_share_plot", "figure_png", "figure_svg", "save_figure", "show", "SDMA_COLOR",
           "VARIANT_COLORS", "EMPTY_COLOR", "PE_ROLE", "NO_SDMA_NOTE", "core_timeline", "segment_crossover",
           "modelled_floors", "what_if_saving", "NO_SDMA_CASE", "sends_sdma", "WIDTH"]

#: Bar/line colour per variant (classic = MTE only, doubleplane = MTE + SDMA).
VARIANT_COLORS = {CLASSIC: "#7f7f7f", DOUBLEPLANE: "#1f77b4"}
_VARIANT_LABEL = {CLASSIC: "classic (MTE only)", DOUBLEPLANE: "doubleplane (MTE + SDMA)"}
_PLANE_COLORS = {"MTE": "#9ecae1", "SDMA": SDMA_COLOR}
_PLAIN = FuncFormatter(lambda v, _pos: f"{v:g}")
_EMPTY_EDGE = "#8c8c8c"
_SPEEDUP_AXIS = "speed-up classic / doubleplane (1)"


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


def segment_map(plan, *, dtype: str = "", max_panels: int = MAX_PANELS, width: int = WIDTH):
    """Segment map per PE: local_expert (rows) x src_rank (columns), colour = payload bytes; the
    one drawing of this view (:func:`combine_lab.lab.svg.segment_map_svg`), as an
    :class:`~combine_lab.lab.svg.SvgFigure` (a notebook shows it, :func:`save_figure` saves a PNG).

    ``plan``: a :class:`combine_lab.planning.planner.Plan`. Panel "PE d (expert owner, sends)" shows
    the segments PE d holds after dispatch (it ran those experts; dispatch's destination PE) and
    sends back, in combine, to each src_rank. Cell (le, s) of PE d is segment ``le * pes + s``
    (docs/protocol.md#2-dispatch-layout); its colour is the segment's payload bytes (token_count * h *
    sizeof(T)), empty segments grey; the scale turns logarithmic when sizes span more than 100x.
    Up to ``max_panels`` PEs get one panel each, SDMA segments outlined in red (cells annotated
    with their row count when they fit); more PEs are stacked into one image whose rows are
    (PE, local_expert), MTE segments in blues and SDMA segments in reds. ``dtype`` goes in the title.
    """
    return SvgFigure(segment_map_svg(plan, dtype, width=width, max_panels=max_panels), "segment map")


def plane_bytes_plot(plan, width: int = WIDTH):
    """What each plane would carry, per PE (the expert owner, which sends), and the rule's
    thresholds: the one drawing of this view (:func:`combine_lab.lab.svg.plane_bytes_svg`), as an
    :class:`~combine_lab.lab.svg.SvgFigure`.

    Left: payload bytes per PE by MTE and by SDMA (stacked), SDMA share in the title. Right: per
    PE the largest remote segment against the remote average segment (threshold_num /
    threshold_den of docs/decision-rule.md#1-the-rule) and the SDMA floor: a remote segment goes by SDMA
    when it is at least the floor and strictly above the average.
    """
    return SvgFigure(plane_bytes_svg(plan, width=width), "plane bytes")


def _perf_by_pe(res, metric: str) -> pd.Series:
    p = res.perf
    if p.empty:
        return pd.Series(dtype=float)
    rows = p[p["Metric"] == metric]
    return rows.groupby("ProfPe")["CoreMaxTime/us"].mean()


def _repeats_by_pe(runs, label: str, metric: str) -> pd.DataFrame:
    """Per profiled PE of run ``label``: median, lo, hi (min-max) of its CoreMaxTime/us over the
    repeats of a :class:`~combine_lab.harness.Comparison` (its ``outcomes``); a plain mapping (one
    repeat each): the run's own."""
    each = [o.result for o in getattr(runs, "outcomes", []) if o.run.label == label and o.result is not None]
    per = pd.concat([_perf_by_pe(r, metric).rename(i) for i, r in enumerate(each or [runs[label]])], axis=1)
    return pd.DataFrame({"median": per.median(axis=1), "lo": per.min(axis=1), "hi": per.max(axis=1)})


#: What a figure says when a case sends nothing by SDMA (both variants carry the same bytes).
NO_SDMA_CASE = "no SDMA traffic in this case: doubleplane = classic"


def sends_sdma(res) -> bool:
    """Whether a run (RunResult or ModelledResult) sent anything by SDMA, by its plan (True when
    it carries no plan: then nothing says otherwise)."""
    p = getattr(res, "plan", None)
    if p is None:
        return True
    return int(p.totals["sdma_bytes"].sum()) > 0


def compare_per_pe(runs: dict, dpi: int = 72) -> Figure:
    """comm_only and full_op of doubleplane against classic, per profiled PE.

    ``runs``: ``{CLASSIC: RunResult, DOUBLEPLANE: RunResult}`` as
    :func:`combine_lab.harness.compare` returns (keyed by label: with kernel settings
    ``classic-c4``, ``doubleplane-segment-c4``, named so in the legend). Bars are CoreMaxTime/us (the slowest
    core's mean over the profiled loops, docs/formats.md#3-perf-csv) for each PE that was
    profiled, as Triton's perf_report draws them: the median over the repeats (a Comparison's
    outcomes; a plain mapping: its one run) with their min-max as an error bar. The title names
    the case, its PEs and the clock, carries the x_out verdict of both runs, and says so when doubleplane sent
    nothing by SDMA (:data:`NO_SDMA_CASE`): then the two are the same traffic, not MTE against MTE + SDMA.
    """
    fig = new_figure(8.8, 3.5, dpi)  # 845 px as SVG: a JupyterLab column beside the sidebar
    axes = fig.subplots(1, 2)
    any_run = next(iter(runs.values()))
    # keyed by label: a run's kernel settings follow its combine (doubleplane-segment-c4)
    combine = {k: k.split("-")[0] for k in runs}
    dual = next((r for k, r in runs.items() if combine[k] == DOUBLEPLANE), None)
    no_sdma = dual is not None and not sends_sdma(dual)
    names = dict(_VARIANT_LABEL, doubleplane="doubleplane (no SDMA here)") if no_sdma else _VARIANT_LABEL
    label = {k: names.get(c, k) + ("" if k == c or c not in names else f", {k.removeprefix(c + '-')}")
             for k, c in combine.items()}
    width = 0.8 / max(len(runs), 1)
    for ax, metric in zip(axes, ("comm_only", "full_op")):
        top = 0.0
        for i, variant in enumerate(runs):
            s = _repeats_by_pe(runs, variant, metric)
            ax.bar(s.index.to_numpy() + (i - (len(runs) - 1) / 2) * width, s["median"].to_numpy(), width=width,
                   yerr=[(s["median"] - s["lo"]).to_numpy(), (s["hi"] - s["median"]).to_numpy()], capsize=3,
                   color=VARIANT_COLORS.get(combine[variant]), label=label[variant])
            top = max(top, float(s["hi"].max()) if len(s) else 0.0)
        ax.set_ylim(0, top * 1.3 if top > 0 else 1.0)  # room for the legend
        ax.set_title(f"{metric}, measured", fontsize=10)
        ax.set_xlabel("profiled PE")
        ax.set_ylabel("CoreMaxTime (us)")
        pes = sorted(set().union(*[set(_perf_by_pe(r, metric).index) for r in runs.values()]))
        ax.set_xticks(pes)
        ax.legend(fontsize=8, loc="upper right", ncols=2)
    verdict = ", ".join(f"{v} {'PASS' if r.check_ok else 'FAIL'}" for v, r in runs.items())
    where = f"{any_run.target} (the CPU twin)" if any_run.target == "cpu" else any_run.target
    pes = any_run.case_id.rsplit("_", 1)[-1]  # shape_bs_h_topk_E_pes
    n = max((sum(1 for o in getattr(runs, "outcomes", []) if o.run.label == k and o.result is not None)
             for k in runs), default=0) or 1
    fig.suptitle(f"Measured on {where}: {any_run.case_id} {any_run.routing}, {pes} PEs; median of {n} repeat"
                 f"{'s' if n > 1 else ''}, bars min-max\nx_out {verdict}"
                 + (f"; {NO_SDMA_CASE}" if no_sdma else ""), fontsize=10)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.15, top=0.76, wspace=0.28)
    return fig


def history_plot(history: pd.DataFrame, dpi: int = 72) -> Figure:
    """Runs so far: measured comm_only of both variants (left) and the speed-up of doubleplane (right).

    ``history``: one row per run with columns ``run`` (int), ``comm_only_classic_us``,
    ``comm_only_doubleplane_us`` (us) and ``comm_only_speedup`` (classic / doubleplane,
    above 1: doubleplane faster), and optionally ``target`` and ``comm_only_speedup_lo`` /
    ``_hi`` (the speed-up's min-max over the repeats: drawn as its error bar, the median as the
    point, as Triton's perf_report does), as :class:`combine_lab.lab.app.TuningApp` keeps it.
    """
    fig = new_figure(8.8, 3.2, dpi)
    a1, a2 = fig.subplots(1, 2)
    where = ", ".join(sorted({str(t) for t in history.get("target", pd.Series(dtype=str))})) or "the target"
    if len(history):
        x = history["run"].to_numpy()
        share = history["sdma_share"].to_numpy(dtype=float) if "sdma_share" in history else np.ones(len(x))
        for v in (CLASSIC, DOUBLEPLANE):
            a1.plot(x, history[f"comm_only_{v}_us"], "o-", color=VARIANT_COLORS[v], label=v)
        none = ~(share > 0)
        if none.any():  # the same bytes in both: the points say so, not "MTE + SDMA"
            a1.plot(x[none], history["comm_only_doubleplane_us"].to_numpy()[none], "o", mfc="white",
                    color=VARIANT_COLORS[DOUBLEPLANE], label="doubleplane, no SDMA traffic (= classic)")
        sp = history["comm_only_speedup"].to_numpy(dtype=float)
        if {"comm_only_speedup_lo", "comm_only_speedup_hi"} <= set(history.columns):  # the spread, min-max
            lo = np.nan_to_num(sp - history["comm_only_speedup_lo"].to_numpy(dtype=float))
            hi = np.nan_to_num(history["comm_only_speedup_hi"].to_numpy(dtype=float) - sp)
            a2.errorbar(x, sp, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], fmt="o-", color="black", capsize=3,
                        label="median, min-max over repeats")
            a2.legend(fontsize=8)
        else:
            a2.plot(x, sp, "o-", color="black")
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


def _settings_groups(summary: pd.DataFrame) -> list[str]:
    """The kernel settings groups of a summary, in order (docs/variants.md; ``reference`` when it has none)."""
    if "settings" not in summary.columns or summary.empty:
        return ["reference"]
    return [str(g) for g in dict.fromkeys(summary["settings"].fillna("reference"))]


def _in_group(summary: pd.DataFrame, group: str) -> pd.DataFrame:
    if "settings" not in summary.columns:
        return summary
    return summary[summary["settings"].fillna("reference").astype(str) == group]


def _heat_panel(ax, sub: pd.DataFrame, col: str, norm, bs_all: list, h_all: list) -> None:
    """One routing's (and settings group's) cells of :func:`sweep_heatmaps`."""
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
                spread = "" if r["lo"] == r["hi"] or not np.isfinite(r["lo"]) else f"\n[{r['lo']:.2f}-{r['hi']:.2f}]"
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


def sweep_heatmaps(summary: pd.DataFrame, metric: str = "comm_only", dpi: int = 72, where: str | None = None) -> Figure:
    """Speed-up of doubleplane (classic time / doubleplane time) over bs x h, one panel per routing
    and, where the summary holds several kernel settings groups (its ``settings`` column,
    docs/variants.md), one row of panels per group: classic and doubleplane of the same group
    compared (``classic-c4`` with ``doubleplane-segment-c4`` in ``segment-c4``).

    ``where`` says where the times come from, in the title: "measured on cpu (the twin)", or the
    model's caption ("modelled on a3 (...); assumed parameters: ...") for a modelled summary
    (:func:`combine_lab.lab.sweep.model_grid`: one deterministic value per case, no repeats).

    ``summary``: :func:`combine_lab.results.tables.summarize` output (columns routing, bs, h,
    sdma_share, ``<metric>_speedup`` and its spread (min-max) ``_lo`` / ``_hi``, repeats). Each
    cell shows the median speed-up over repeats, its spread and the SDMA share; blue above 1
    (doubleplane faster), red below. Cases whose doubleplane run sent nothing by SDMA send
    the same bytes as classic: they get no colour, a grey hatched cell marked "no SDMA".
    Where other axes (pes, topk, expert_per_pe, dtype) vary, a cell shows the median over
    the cases with SDMA traffic (spread: lowest min, highest max).
    """
    col = f"{metric}_speedup"
    routings = list(dict.fromkeys(summary["routing"]))
    groups = _settings_groups(summary)
    n, rows_n = max(len(routings), 1), len(groups)
    width_in = min(4.4 * n + 1.6, 17)
    fig = new_figure(width_in, 4.4 + 3.6 * (rows_n - 1), dpi)
    fig.set_layout_engine("constrained")
    axes = fig.subplots(rows_n, n, squeeze=False)
    sdma = summary[_has_sdma(summary)]
    norm = _speedup_norm(sdma[col].to_numpy(dtype=float))
    bs_all = sorted(set(summary["bs"]))
    h_all = sorted(set(summary["h"]))
    for row, group in zip(axes, groups):
        in_group = _in_group(summary, group)
        for ax, routing in zip(row, routings):
            _heat_panel(ax, in_group[in_group["routing"] == routing], col, norm, bs_all, h_all)
            ax.set_title(routing if groups == ["reference"] else f"{routing}, settings {group}", fontsize=10)
    cb = fig.colorbar(ScalarMappable(norm=norm, cmap="RdBu"), ax=list(axes.ravel()), shrink=0.9)
    cb.set_label(f"{metric} {_SPEEDUP_AXIS}\nabove 1: doubleplane faster")
    within = "" if groups == ["reference"] else (
        f" per kernel settings group ({', '.join(groups)}: classic and doubleplane under the same settings)")
    if where and where.startswith("modelled"):
        head = f"{metric} speed-up of doubleplane over bs x h{within}, MODELLED (not measured): one value per case"
    else:
        head = (f"{metric} speed-up of doubleplane over bs x h{within}"
                f"{', ' + where if where else ''}: median [min-max] over {_repeats_text(summary)}")
    wrap = max(int(width_in * 12.5), 60)  # characters of a 9-10 pt title line that fit the figure's width
    lines = textwrap.wrap(head, wrap) + (textwrap.wrap(where, wrap) if where and where.startswith("modelled") else [])
    lines += textwrap.wrap("above 1: doubleplane faster; hatched grey: no SDMA traffic (identical bytes, nothing to "
                           "compare)", wrap)
    fig.suptitle("\n".join(lines), fontsize=9 if len(lines) > 2 else 10)
    return fig


def settings_times(summary: pd.DataFrame, metric: str = "comm_only", dpi: int = 72, where: str | None = None) -> Figure:
    """Per case, the ``metric`` time of classic and doubleplane under each kernel settings group
    (docs/variants.md), median with min-max bars over repeats, us: what each setting changes on
    the same case files. ``summary``: :func:`combine_lab.results.tables.summarize` output with its
    ``settings`` column; ``where``: where the times come from, for the title ("measured on cpu
    (the twin)")."""
    groups = _settings_groups(summary)
    cases = list(dict.fromkeys(zip(summary["case_id"], summary["routing"])))
    fig = new_figure(8.8, max(3.0, 0.5 * len(cases) * len(groups) + 1.8), dpi)
    ax = fig.add_axes((0.34, 0.14, 0.5, 0.72))
    colors = {CLASSIC: "#1f77b4", DOUBLEPLANE: SDMA_COLOR}
    labels, y = [], 0.0
    for case, routing in cases:
        for group in groups:
            sel = summary[(summary["case_id"] == case) & (summary["routing"] == routing)]
            sel = _in_group(sel, group)
            if sel.empty:
                continue
            r = sel.iloc[0]
            for k, v in enumerate((CLASSIC, DOUBLEPLANE)):
                mid, lo, hi = (float(r[f"{metric}_{v}{s}_us"]) for s in ("", "_lo", "_hi"))
                if not np.isfinite(mid):
                    continue
                err = [[max(mid - lo, 0.0)], [max(hi - mid, 0.0)]] if np.isfinite(lo) and np.isfinite(hi) else None
                ax.barh(y + 0.2 * (2 * k - 1), mid, height=0.38, color=colors[v], xerr=err, capsize=2,
                        label=v if not labels else None)
            labels.append((y, f"{routing} {str(case).removeprefix('shape_')}\nsettings {group}"))
            y += 1.0
        y += 0.4
    ax.set_yticks([p for p, _ in labels])
    ax.set_yticklabels([t for _, t in labels], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric} time, CoreMaxTime of the slowest PE (us)")
    ax.set_ylabel("case and kernel settings group")
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles[:2], names[:2], fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    ax.set_title(f"{metric} time per kernel settings group{', ' + where if where else ''}\n(median, bars min-max "
                 f"over {_repeats_text(summary)}; shorter is faster)", fontsize=9)
    return fig


#: What :func:`sdma_share_plot` writes on the figure when no case sent anything by SDMA.
NO_SDMA_NOTE = ("Every case sent 0 bytes by SDMA: doubleplane sent exactly the bytes of classic,\n"
                "so there is no speed-up to read here, only timing noise. Use larger bs or h,\n"
                "a skewed routing (zipf, hot-expert) or a lower min_sdma_bytes.")


def sdma_share_plot(summary: pd.DataFrame, metric: str = "comm_only", dpi: int = 72) -> Figure:
    """Speed-up of doubleplane (classic time / doubleplane time, median with min-max bars over
    repeats) against the share of payload bytes the doubleplane run sent by SDMA, one colour
    per routing.

    Cases with SDMA share 0 send identical bytes with both variants: they are drawn apart
    (hollow grey, "no SDMA") and the band their min-max bars span is the timing noise, the
    yardstick for the other points. When every case has share 0, the figure says so in a note
    (:data:`NO_SDMA_NOTE`) instead of drawing a degenerate share axis.

    ``summary``: :func:`combine_lab.results.tables.summarize` output (columns routing, sdma_share in
    [0, 1], ``<metric>_speedup`` and its spread (min-max) ``_lo`` / ``_hi``, repeats; ``settings``
    where several kernel settings groups ran: one marker each, classic and doubleplane of a group
    compared).
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
    groups = _settings_groups(summary)
    markers = dict(zip(groups, "osD^vP*X"))
    hues = {r: f"C{i % 10}" for i, r in enumerate(dict.fromkeys(summary["routing"]))}  # a routing keeps its colour
    for group in groups:  # one marker per kernel settings group (docs/variants.md), one colour per routing
        in_group = _in_group(summary, group)
        for routing, sub in in_group[_has_sdma(in_group) & in_group[col].notna()].groupby("routing", sort=False):
            mid, err = bars(sub)
            ax.errorbar(100 * sub["sdma_share"].to_numpy(dtype=float), mid, yerr=err, fmt=markers.get(group, "o"),
                        color=hues[routing], capsize=3, alpha=0.85,
                        label=str(routing) if groups == ["reference"] else f"{routing}, settings {group}")
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
    ax.set_title(f"Measured speed-up against SDMA byte share\n(median, bars min-max over {_repeats_text(summary)}; "
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


def modelled_floors(curve: pd.DataFrame | None, caption: str, floor: int | None = None, metric: str = "comm_only",
                    what_if: str | None = None, *, classic_us: float | None = None, floor_us: float | None = None,
                    stale: bool = False, width: int = WIDTH):
    """The modelled time of ``metric`` (the slowest PE's CoreMaxTime, us) against the SDMA floor:
    the one drawing of this view (:func:`combine_lab.lab.svg.modelled_floors_svg`), as an
    :class:`~combine_lab.lab.svg.SvgFigure`.

    ``curve``: a :class:`combine_lab.model.suggest.Suggestion` curve (threshold_bytes, -1 = never
    SDMA, modelled_us, and ``<what_if>_us`` when ``what_if`` is given), or None when it is not
    computed (then ``classic_us`` and ``floor_us`` must be given). The classic time is a dashed
    line, the best floor starred, ``floor`` marked (its time ``floor_us``, read off the curve when
    not given); ``caption`` (the model's "modelled on ...") under the title; ``stale``: the curve
    belongs to other inputs; ``width``: CSS pixels. A floor that only ties with never SDMA is no
    best floor: then never SDMA is starred and the legend says it is a tie. Raises ParameterError
    when neither a curve nor ``classic_us`` is given.
    """
    best = None
    if curve is not None and len(curve):
        never = curve.loc[curve["threshold_bytes"] < 0, "modelled_us"]
        if classic_us is None:
            classic_us = float(never.iloc[0]) if len(never) else float(curve["modelled_us"].max())
        best = int(curve.loc[curve["modelled_us"].idxmin(), "threshold_bytes"])  # ties: the first, the larger floor
        least = float(curve["modelled_us"].min())
        if len(never) and float(never.iloc[0]) <= least * (1 + 1e-9):
            best = -1  # a tie with sending nothing by SDMA is not a floor that helps
        if floor is not None and floor_us is None:
            at = curve[(curve["threshold_bytes"] >= floor)]
            floor_us = float(at["modelled_us"].iloc[-1]) if len(at) else classic_us
    if classic_us is None:
        raise ParameterError("modelled_floors: give a curve or classic_us (the classic plan's modelled time, us)")
    return SvgFigure(modelled_floors_svg(curve, classic_us, None if floor is None else int(floor),
                                         None if floor_us is None else float(floor_us), caption, best=best,
                                         stale=stale, metric=metric, what_if=what_if, width=width),
                     f"modelled {metric} over floors")


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


def _is_svg(fig) -> bool:
    return hasattr(fig, "svg") and hasattr(fig, "png")


def figure_png(fig, dpi: int | None = None) -> bytes:
    """The figure rendered as PNG bytes: a matplotlib Figure at ``dpi`` (default its own), an
    :class:`~combine_lab.lab.svg.SvgFigure` at ``dpi`` per 96 CSS pixels (default 144)."""
    if _is_svg(fig):
        return fig.png((dpi or 144) / 96)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi)
    return buf.getvalue()


def figure_svg(fig) -> str:
    """The figure as an inline ``<svg>`` element (class ``cl-figure``), its text left to the browser
    (sharp at any pixel density), shown at its own size (1 inch = 96 px) or narrower when the page is.
    An :class:`~combine_lab.lab.svg.SvgFigure` is that already: its text is returned."""
    if _is_svg(fig):
        return fig.svg
    import matplotlib
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none",
                                "font.family": ["DejaVu Sans", "Liberation Sans", "Arial", "sans-serif"]}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    return text.replace("<svg ", "<svg class=\"cl-figure\" style=\"max-width:100%;height:auto;display:block\" ", 1)


def save_figure(fig, out_dir: str | os.PathLike, name: str, dpi: int | None = None) -> Path:
    """Save ``fig`` (a matplotlib Figure, or an :class:`~combine_lab.lab.svg.SvgFigure`) as
    ``<out_dir>/<name>.png`` (folder created) and return the path. ``dpi``: a Figure's (default 100),
    an SvgFigure's device pixels per 96 CSS pixels (default 144: sharp text). Raises OSError when
    the folder cannot be written."""
    path = Path(out_dir) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, figure_png(fig, dpi if _is_svg(fig) else dpi or 100))


def show(fig, out_dir: str | os.PathLike | None = None, name: str | None = None) -> None:
    """Display ``fig`` in IPython: a matplotlib Figure as a PNG (any matplotlib backend), an
    :class:`~combine_lab.lab.svg.SvgFigure` as its SVG (the drawing the app shows) with its PNG
    beside it (shown where SVG is not: an untrusted notebook); when
    ``out_dir`` and ``name`` are given, save it there as ``<name>.png`` (see :func:`save_figure`).
    Returns None, so that a notebook cell ending with it shows only the figure."""
    path = save_figure(fig, out_dir, name) if out_dir is not None and name else None
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:  # pragma: no cover - IPython ships with the lab extra
        return None
    if get_ipython() is not None:
        if _is_svg(fig):  # SVG (sharp, the browser's text) and, for an untrusted notebook, the PNG
            display(fig.mimebundle(path.read_bytes() if path else None), raw=True)
        else:
            display(Image(data=path.read_bytes() if path else figure_png(fig, 100), format="png"))
    return None
