"""Figures of the lab: segment maps, plane bytes, run comparisons, history, one core's timeline and
the modelled crossover; the sweep's figures are :mod:`.sweep_plots`', what every figure shares
:mod:`.figures`' (both named here too, so ``plots.X`` stays the one place to find a figure).

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

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..errors import ParameterError
from ..kernels import CLASSIC, DOUBLEPLANE
# what every figure shares, and the sweep's figures (their own modules; named here as before)
from .figures import (VARIANT_COLORS, _PLANE_COLORS, _VARIANT_LABEL, _byte_log_axis, figure_png, figure_svg, new_figure,
                      save_figure, show)
from .sweep_plots import NO_SDMA_NOTE, sdma_share_plot, settings_times, sweep_heatmaps
# the plan views' drawings, and what every figure shares (units, colours, the PE's role)
from .svg import (ANNOTATE_CELLS, EMPTY_COLOR, MAX_PANELS, PE_ROLE, SDMA_COLOR, WIDTH, SvgFigure, byte_label, byte_unit,
                  largest_remote_segment, modelled_floors_svg, plane_bytes_svg, plan_arrays, segment_map_svg)

__all__ = ["byte_unit", "byte_label", "new_figure", "segment_map", "plane_bytes_plot", "compare_per_pe", "history_plot",
           "sweep_heatmaps", "sdma_share_plot", "figure_png", "figure_svg", "save_figure", "show", "SDMA_COLOR",
           "VARIANT_COLORS", "EMPTY_COLOR", "PE_ROLE", "NO_SDMA_NOTE", "core_timeline", "segment_crossover",
           "modelled_floors", "what_if_saving", "NO_SDMA_CASE", "sends_sdma", "WIDTH", "settings_times"]


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
        ax.set_ylim(0, top * 1.08 if top > 0 else 1.0)
        ax.set_title(f"{metric}, measured", fontsize=10)
        ax.set_xlabel("profiled PE")
        ax.set_ylabel("CoreMaxTime (us)")
        pes = sorted(set().union(*[set(_perf_by_pe(r, metric).index) for r in runs.values()]))
        ax.set_xticks(pes)
    # one legend for both panels, above them: inside a panel it reached over the y tick labels
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.80), ncols=max(len(runs), 1),
               fontsize=8, frameon=False)
    verdict = ", ".join(f"{v} {'PASS' if r.check_ok else 'FAIL'}" for v, r in runs.items())
    where = f"{any_run.target} (the CPU twin)" if any_run.target == "cpu" else any_run.target
    pes = any_run.case_id.rsplit("_", 1)[-1]  # shape_bs_h_topk_E_pes
    n = max((sum(1 for o in getattr(runs, "outcomes", []) if o.run.label == k and o.result is not None)
             for k in runs), default=0) or 1
    spread = f"median of {n} repeats, bars min-max" if n > 1 else "one run: no spread (repeats give one)"
    fig.suptitle(f"Measured on {where}: {any_run.case_id} {any_run.routing}, {pes} PEs; {spread}\nx_out {verdict}"
                 + (f"; {NO_SDMA_CASE}" if no_sdma else ""), fontsize=10)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.15, top=0.72, wspace=0.28)
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
        raise ParameterError("modelled_floors: give a curve or classic_us (the classic plan's modelled time, us)",
                             parameter="classic_us", value=None, allowed="a curve or classic_us")
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


