"""``-a plot`` and ``-a md``: the perf CSVs of one run (docs/formats.md#3-perf-csv) drawn and tabulated.

For one variant's folder: per metric (full_op, comm_only), Bandwidth/GB/s and CoreMaxTime/us per
case and profiled PE, from the per-rank CSVs, with the summary's slowest PE (``--prof-pe all``)
marked; as Triton's perf_report draws them, each bar is the median over the repeats (a CSV row
each) and its error bar their spread (min-max). For a run of several variants, one figure per
metric compares them all (:func:`comparison_figure`). ``plot`` writes one PNG per metric
(:func:`combine_lab.formats.perf_csv.figure_name`), ``md``
one Markdown file with a table per metric (:func:`combine_lab.formats.perf_csv.report_name`). Values
are those of the CSVs: times in microseconds, bandwidths in "GB/s" as the CSV header names them
(2^30 bytes per second), 4 decimals.
"""

from __future__ import annotations

import io
import textwrap

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..kernels import RULE_TITLES
from ..errors import ResultFileError
from ..formats.files import write_atomic
from ..formats.perf_csv import (PERF_METRICS, comparison_figure_name, figure_name, file_prefix, fixed4,
                                perf_summary_name, rank_files, read_perf_csv, report_name, speedup_figure_name)
from .pairs import varying_keys

__all__ = ["perf_rows", "perf_figure", "write_figures", "comparison_figure", "write_comparison_figures",
           "markdown_report", "write_report", "speedup_figure", "speedup_figures"]

_LABEL = dict(RULE_TITLES)
_BANDWIDTH = "Bandwidth/GB/s"
_TIME = "CoreMaxTime/us"
#: Columns of the Markdown tables, in order (``cores``: how many cores recorded the frame).
REPORT_COLUMNS = ["CaseId", "ProfPe", "Npus", "Blocks", "DataSize/B", "GlobalDataSize/B", _BANDWIDTH,
                  "PerPeBandwidth/GB/s", _TIME, "cores"]


def perf_rows(folder: str | Path, variant: str) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The per-rank rows of ``variant`` in ``folder`` (in file order, then row order) and its summary
    (None when there is none), as :func:`combine_lab.formats.perf_csv.read_perf_csv` reads them.

    Raises:
        ResultFileError: no per-rank CSV of ``variant`` in ``folder``, or one that does not read.
    """
    folder = Path(folder)
    files = rank_files(folder, variant)
    if not files:
        raise ResultFileError(f"{folder}: no {file_prefix(variant)}_perf_rank<r>.csv to analyse",
                              parameter="folder", value=folder)
    rows = pd.concat([read_perf_csv(p) for p in files], ignore_index=True)
    summary_path = folder / perf_summary_name(variant)
    return rows, read_perf_csv(summary_path) if summary_path.is_file() else None


def _spread(values) -> tuple[float, float, float]:
    """(median, min, max) of ``values`` (NaN when there are none)."""
    v = pd.Series(values, dtype=float).dropna()
    return (float(v.median()), float(v.min()), float(v.max())) if len(v) else (float("nan"),) * 3


def _bars(ax, xs, stats, **kw):
    """Bars at the medians with min-max error bars (Triton's perf_report: the median, the spread)."""
    med = [m for m, _, _ in stats]
    err = [[max(m - lo, 0.0) for m, lo, _ in stats], [max(hi - m, 0.0) for m, _, hi in stats]]
    return ax.bar(xs, med, yerr=err, capsize=3, error_kw={"elinewidth": 1}, **kw)


def _where(rows: pd.DataFrame, note: str) -> str:
    """The PEs of the cases and the clock: "2 PEs, measured on the CPU twin" (``note``: the clock)."""
    pes = ", ".join(str(int(p)) for p in sorted(set(rows["Npus"].dropna()))) or "?"
    return f"{pes} PEs" + (f", {note}" if note else "")


def perf_figure(rows: pd.DataFrame, summary: pd.DataFrame | None, variant: str, metric: str,
                note: str = "") -> Figure:
    """Bandwidth/GB/s (left) and CoreMaxTime/us (right) of ``metric`` per case: one bar per profiled
    PE at the median of its rows (one per repeat) with their min-max as an error bar, and the
    summary's value (slowest PE) as a black mark when ``summary`` is given. Cases in the order they
    ran; the title names the cases' PE counts and ``note``, the clock ("measured on the CPU twin",
    "modelled on ..."). Made without pyplot (nothing global to close)."""
    sel = rows[rows["Metric"] == metric]
    cases = list(dict.fromkeys(sel["CaseId"]))
    pes = sorted(set(sel["ProfPe"]))
    fig = Figure(figsize=(max(8.0, 2.0 + 1.6 * len(cases)) * 2, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    width = 0.8 / max(len(pes), 1)
    for ax, column, label in zip(fig.subplots(1, 2), (_BANDWIDTH, _TIME),
                                 ("bandwidth (GB/s = 2^30 B/s, all PEs' data)", "CoreMaxTime (us)")):
        for i, pe in enumerate(pes):
            by_case = sel[sel["ProfPe"] == pe].groupby("CaseId", sort=False)[column]
            xs = [c + (i - (len(pes) - 1) / 2) * width for c in range(len(cases))]
            stats = [_spread(by_case.get_group(case)) if case in by_case.groups else (0.0, 0.0, 0.0) for case in cases]
            _bars(ax, xs, stats, width=width, label=f"PE {pe}")
        if summary is not None:
            top = summary[summary["Metric"] == metric].groupby("CaseId", sort=False)[column].max()
            marks = [(x, top[c]) for x, c in enumerate(cases) if c in top.index]
            if marks:
                ax.scatter([m[0] for m in marks], [m[1] for m in marks], marker="_", s=600, color="black",
                           linewidths=2, label="summary (slowest PE)", zorder=3)
        ax.set_xticks(range(len(cases)), cases, rotation=30, ha="right")
        ax.set_xlabel("case (shape_bs_h_topk_E_pes)")
        ax.set_ylabel(label)
        ax.set_title(f"{column} per case")
        ax.grid(axis="y", alpha=0.3)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, title="profiled PE", loc="outside right upper", fontsize="small")
    title = f"{file_prefix(variant)}: {metric}, {_LABEL[variant]}, {len(cases)} case(s), {_where(sel, note)}"
    title += "; bars: median over repeats, error bars: min-max"
    fig.suptitle(textwrap.fill(title, width=int(fig.get_figwidth() * 10)), fontsize="medium")
    return fig


def _slowest_per_repeat(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per case and repeat (the n-th row of a case in each PE's file), CoreMaxTime/us of the slowest
    profiled PE: the combine ends when every PE has (as the run table's median takes it)."""
    sel = rows[rows["Metric"] == metric].copy()
    sel["repeat"] = sel.groupby(["CaseId", "ProfPe"], sort=False).cumcount()
    return sel.groupby(["CaseId", "repeat"], sort=False)[_TIME].max().reset_index()


def comparison_figure(runs: dict[str, pd.DataFrame], metric: str, note: str = "") -> Figure:
    """Every variant (and kernel) of a run in one figure: ``runs`` maps a label to its per-rank rows
    (:func:`perf_rows`); per case one bar per label at the median over the repeats of the slowest
    profiled PE's CoreMaxTime/us of ``metric`` (the run table's number) with the repeats' min-max as
    an error bar. The title names the metric, the cases' PE counts and ``note``, the clock."""
    per = {label: _slowest_per_repeat(rows, metric) for label, rows in runs.items()}
    cases = list(dict.fromkeys(c for t in per.values() for c in t["CaseId"]))
    fig = Figure(figsize=(max(8.0, 2.0 + 1.4 * len(cases) * max(len(runs), 1) / 2), 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.8 / max(len(runs), 1)
    for i, (label, t) in enumerate(per.items()):
        by_case = t.groupby("CaseId", sort=False)[_TIME]
        stats = [_spread(by_case.get_group(c)) if c in by_case.groups else (float("nan"),) * 3 for c in cases]
        _bars(ax, [c + (i - (len(runs) - 1) / 2) * width for c in range(len(cases))], stats, width=width,
              label=_LABEL.get(label, label))
    ax.set_xticks(range(len(cases)), cases, rotation=30 if len(cases) > 1 else 0, ha="right" if len(cases) > 1 else "center")
    ax.set_xlabel("case (shape_bs_h_topk_E_pes)")
    ax.set_ylabel(f"{metric} CoreMaxTime (us), slowest profiled PE")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(title="variant", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    every = pd.concat(list(runs.values()), ignore_index=True) if runs else pd.DataFrame({"Npus": []})
    title = (f"{metric}: {', '.join(runs)} on {', '.join(cases)}, {_where(every, note)}; bars: median over repeats, "
             "error bars: min-max")
    fig.suptitle(textwrap.fill(title, width=int(fig.get_figwidth() * 10)), fontsize="medium")
    return fig


def comparison_figures(folder: str | Path, runs: dict[str, tuple[Path, str]], draw: bool, note: str = "") -> list[str]:
    """After a ``--perf`` run of several variants: with ``draw`` (``-a plot``) :func:`write_comparison_figures`
    into ``folder``, else an earlier run's comparison figures there removed (a folder holds one run's
    files). Returns the lines to print."""
    if draw:
        return ["comparison figures: " + ", ".join(str(p) for p in write_comparison_figures(folder, runs, note))]
    for metric in PERF_METRICS:
        (Path(folder) / comparison_figure_name(metric)).unlink(missing_ok=True)
    return []


def write_comparison_figures(folder: str | Path, runs: dict[str, tuple[Path, str]], note: str = "") -> list[Path]:
    """Write :func:`comparison_figure` of each metric as PNG into ``folder``
    (:func:`combine_lab.formats.perf_csv.comparison_figure_name`); ``runs`` maps a label to its folder
    and the variant naming its files. Returns the paths."""
    rows = {label: perf_rows(f, variant)[0] for label, (f, variant) in runs.items()}
    out = []
    for metric in PERF_METRICS:
        buf = io.BytesIO()
        comparison_figure(rows, metric, note).savefig(buf, format="png", dpi=100)
        out.append(write_atomic(Path(folder) / comparison_figure_name(metric), buf.getvalue()))
    return out


def write_figures(folder: str | Path, variant: str, note: str = "") -> list[Path]:
    """Write :func:`perf_figure` of each metric as PNG into ``folder``; returns the paths."""
    folder = Path(folder)
    rows, summary = perf_rows(folder, variant)
    out = []
    for metric in PERF_METRICS:
        path = folder / figure_name(variant, metric)
        buf = io.BytesIO()
        perf_figure(rows, summary, variant, metric, note).savefig(buf, format="png", dpi=100)
        write_atomic(path, buf.getvalue())
        out.append(path)
    return out


def _markdown_table(df: pd.DataFrame) -> list[str]:
    """``df`` as a GitHub Markdown table: floats with 4 decimals (as in the CSVs), numbers right-aligned."""
    def cell(v) -> str:
        return fixed4(v) if isinstance(v, float) else str(v)
    numeric = [pd.api.types.is_numeric_dtype(df[c]) for c in df.columns]
    lines = ["| " + " | ".join(df.columns) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return lines


def _report_frame(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    sel = rows[rows["Metric"] == metric].copy()
    sel["cores"] = [len(t) for t in sel["core_times_us"]]
    order = {case: i for i, case in enumerate(dict.fromkeys(sel["CaseId"]))}  # cases in the order they ran
    sel["_case"] = sel["CaseId"].map(order)
    sel = sel.sort_values(["_case", "ProfPe"], kind="stable")
    return sel[REPORT_COLUMNS].reset_index(drop=True)


def markdown_report(folder: str | Path, variant: str, note: str = "") -> str:
    """The ``-a md`` text: per metric, Bandwidth/GB/s, PerPeBandwidth/GB/s and CoreMaxTime/us per case
    and profiled PE, then the summary's rows (slowest PE per case) when there is one; ``note`` (e.g.
    "modelled on ...") follows the title."""
    folder = Path(folder)
    rows, summary = perf_rows(folder, variant)
    files = ", ".join(p.name for p in rank_files(folder, variant))
    out = [f"# {file_prefix(variant)} perf: {_LABEL[variant]}", ""] + ([f"**{note}**", ""] if note else []) + [
           f"From `{folder}`: {files}" + (f", {perf_summary_name(variant)}" if summary is not None else "") + ".",
           "Times in microseconds (us); bandwidths in GB/s as the CSVs write them (2^30 bytes per second; "
           "Bandwidth: all PEs' data, PerPeBandwidth: one PE's); cores: cores that recorded the frame.", ""]
    for metric in PERF_METRICS:
        out += [f"## {metric}", ""] + _markdown_table(_report_frame(rows, metric)) + [""]
        if summary is not None:
            out += [f"### {metric}: summary (per case the slowest profiled PE)", ""]
            out += _markdown_table(_report_frame(summary, metric).drop(columns="cores")) + [""]
    return "\n".join(out)


def write_report(folder: str | Path, variant: str, note: str = "") -> Path:
    """Write :func:`markdown_report` to ``folder / report_name(variant)``; returns the path."""
    path = Path(folder) / report_name(variant)
    return write_atomic(path, markdown_report(folder, variant, note))


def speedup_figure(pairs: pd.DataFrame, metric: str, note: str = "") -> Figure:
    """Every kernel's speed-up in one figure: ``pairs`` (:func:`combine_lab.results.pairs.pair_speedups`)
    per case one bar per kernel at the median speed-up of ``metric`` (baseline time / kernel time of
    the same repeat; above the line at 1: the kernel faster) with the repeats' min-max as an error
    bar, labelled "kernel / baseline". The title names the metric and ``note``, the clock."""
    # a case: its CaseId, with its routing, dtype, ... where they differ between the rows (a sweep's cases)
    keys = ["case_id", *(["routing"] if pairs["routing"].nunique() > 1 else []), *varying_keys(pairs)]
    case_of = [" ".join(str(r[c]) for c in keys) for _, r in pairs.iterrows()]
    cases = list(dict.fromkeys(case_of))
    labels = list(dict.fromkeys(f"{k} / {b}" for k, b in zip(pairs["kernel"], pairs["baseline"])))
    fig = Figure(figsize=(max(8.0, 2.0 + 1.4 * len(cases) * max(len(labels), 1) / 2), 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        mine = [i for i, (k, b) in enumerate(zip(pairs["kernel"], pairs["baseline"])) if f"{k} / {b}" == label]
        by_case = {case_of[i]: tuple(float(pairs[f"{metric}_speedup{s}"].iloc[i]) for s in ("", "_lo", "_hi"))
                   for i in mine}
        _bars(ax, [c + (i - (len(labels) - 1) / 2) * width for c in range(len(cases))],
              [by_case.get(c, (float("nan"),) * 3) for c in cases], width=width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(cases)), cases, rotation=30 if len(cases) > 1 else 0, ha="right" if len(cases) > 1 else "center")
    ax.set_xlabel("case (shape_bs_h_topk_E_pes" + "".join(f", {k}" for k in keys[1:]) + ")")
    ax.set_ylabel(f"{metric} speed-up: baseline time / kernel time (1)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(title="kernel / baseline", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    title = (f"{metric} speed-up of every kernel against its baseline{', ' + note if note else ''}; bars: median "
             "over paired repeats, error bars: min-max; above 1: the kernel faster")
    fig.suptitle(textwrap.fill(title, width=int(fig.get_figwidth() * 10)), fontsize="medium")
    return fig


def speedup_figures(folder: str | Path, pairs: pd.DataFrame, draw: bool, note: str = "") -> list[str]:
    """After a ``--perf`` run: with ``draw`` (``-a plot``) and pairs to show, :func:`speedup_figure` of
    each metric written into ``folder`` (:func:`combine_lab.formats.perf_csv.speedup_figure_name`), else
    an earlier run's removed (a folder holds one run's files). Returns the lines to print."""
    paths = [Path(folder) / speedup_figure_name(m) for m in PERF_METRICS]
    if not (draw and len(pairs)):
        for path in paths:
            path.unlink(missing_ok=True)
        return []
    for metric, path in zip(PERF_METRICS, paths):
        buf = io.BytesIO()
        speedup_figure(pairs, metric, note).savefig(buf, format="png", dpi=100)
        write_atomic(path, buf.getvalue())
    return ["speed-up figures: " + ", ".join(str(p) for p in paths)]

