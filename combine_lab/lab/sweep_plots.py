"""The sweep's figures (:mod:`.sweep`'s summaries, measured or modelled): speed-up heatmaps over
tokens per PE and hidden size, times per kernel settings group, and the speed-up against the SDMA
share. Each a pyplot-free matplotlib Figure with a title, axis labels and units (:mod:`.figures`).
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.cm import ScalarMappable
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..kernels import CLASSIC, DOUBLEPLANE
from ..results.tables import noise_band
from .figures import _EMPTY_EDGE, _SPEEDUP_AXIS, new_figure
from .svg import EMPTY_COLOR, SDMA_COLOR

__all__ = ["sweep_heatmaps", "settings_times", "sdma_share_plot", "NO_SDMA_NOTE"]


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


def _covers_one(lo: float, hi: float) -> bool:
    """The spread [lo, hi] reaches both sides of 1: no verdict (a tie), however far the median is."""
    return bool(np.isfinite(lo) and np.isfinite(hi) and lo < hi and lo <= 1.0 <= hi)


def _heat_panel(ax, sub: pd.DataFrame, col: str, norm, bs_all: list, h_all: list, tie: str) -> None:
    """One routing's (and settings group's) cells of :func:`sweep_heatmaps`; ``tie`` labels a cell
    whose spread covers 1 (left uncoloured: a colour would be a verdict)."""
    with_sdma = sub[_has_sdma(sub) & sub[col].notna()]
    agg = with_sdma.groupby(["bs", "h"]).agg(mid=(col, "median"), lo=(f"{col}_lo", "min"),
                                             hi=(f"{col}_hi", "max"), share=("sdma_share", "median"))
    data = np.full((len(bs_all), len(h_all)), np.nan)
    for (b, hh), r in agg.iterrows():
        if not _covers_one(r["lo"], r["hi"]):
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
                spread = "" if r["lo"] == r["hi"] or not np.isfinite(r["lo"]) else f"\n[{r['lo']:.2f}-{r['hi']:.2f}]"
                if _covers_one(r["lo"], r["hi"]):  # a tie: framed, not coloured
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="white", edgecolor=_EMPTY_EDGE,
                                           linestyle=":", linewidth=1.0))
                    ax.text(j, i, f"{r['mid']:.2f}{spread}\n{tie}\nSDMA {100 * r['share']:.0f} %", ha="center",
                            va="center", fontsize=size, color="black")
                    continue
                strong = abs(float(norm(r["mid"])) - 0.5) > 0.3
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
    (doubleplane faster), red below, and no colour where the spread covers 1 (a tie: the cell is
    framed and says "within noise"; modelled, where the range over the unknowns covers 1, "either way
    over the unknowns"). Cases whose doubleplane run sent nothing by SDMA send
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
    modelled = bool(where and where.startswith("modelled"))
    tie = "either way over\nthe unknowns" if modelled else "within noise"
    for row, group in zip(axes, groups):
        in_group = _in_group(summary, group)
        for ax, routing in zip(row, routings):
            _heat_panel(ax, in_group[in_group["routing"] == routing], col, norm, bs_all, h_all, tie)
            ax.set_title(routing if groups == ["reference"] else f"{routing}, settings {group}", fontsize=10)
    cb = fig.colorbar(ScalarMappable(norm=norm, cmap="RdBu"), ax=list(axes.ravel()), shrink=0.9)
    cb.set_label(f"{metric} {_SPEEDUP_AXIS}\nabove 1: doubleplane faster")
    within = "" if groups == ["reference"] else (
        f" per kernel settings group ({', '.join(groups)}: classic and doubleplane under the same settings)")
    if modelled:
        head = f"{metric} speed-up of doubleplane over bs x h{within}, MODELLED (not measured): one value per case"
    else:
        head = (f"{metric} speed-up of doubleplane over bs x h{within}"
                f"{', ' + where if where else ''}: median [min-max] over {_repeats_text(summary)}")
    wrap = max(int(width_in * 12.5), 60)  # characters of a 9-10 pt title line that fit the figure's width
    lines = textwrap.wrap(head, wrap) + (textwrap.wrap(where, wrap) if modelled else [])
    covers = ("uncoloured: its range over the unknowns covers 1 (no verdict)" if modelled
              else "uncoloured: its spread covers 1 (within noise, a tie)")
    lines += textwrap.wrap(f"above 1: doubleplane faster; {covers}; hatched grey: no SDMA traffic (identical bytes, "
                           "nothing to compare)", wrap)
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
        lo, hi = noise_band(summary, metric)
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


