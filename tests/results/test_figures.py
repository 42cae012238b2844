"""Figures as Triton's perf_report draws them (combine_lab/results/analysis.py, combine_lab/lab/plots.py;
docs/formats.md#7-figures-and-report): the median as the bar or point, the spread (min-max over
repeats) as an error bar, every variant in one figure, titles naming the case, PEs and clock. Read
back from the matplotlib artists and compared with the run table's numbers."""

from __future__ import annotations

import pytest
from matplotlib.container import BarContainer

from combine_lab.cli import main
from combine_lab.results.analysis import comparison_figure, perf_rows

FLAGS = ["-pes", "3", "-bs", "12", "-h", "40", "-topk", "3", "-expertPerPe", "2", "--routing", "zipf:1.2",
         "--min-sdma-bytes", "0"]


def _bars(ax):
    return [c for c in ax.containers if isinstance(c, BarContainer)]


def _error_spans(container):
    """(low, high) of each bar's error bar."""
    return [tuple(seg[:, 1]) for seg in container.errorbar.lines[2][0].get_segments()]


def test_compare_plot_draws_both_variants_at_the_tables_medians_and_spreads(tmp_path, capsys, no_leaks):
    out_dir = tmp_path / "perf"
    assert main(["compare", *FLAGS, "--perf", "--repeats", "3", "--warmup", "0", "--loops", "2", "--output-dir",
                 str(out_dir), "-a", "plot"]) == 0
    out = capsys.readouterr().out
    assert (f"comparison figures: {out_dir / 'combine_compare_full_op.png'}, "
            f"{out_dir / 'combine_compare_comm_only.png'}") in out
    assert (out_dir / "combine_compare_comm_only.png").read_bytes()[:4] == b"\x89PNG"
    table = {ln.split()[2]: ln.split() for ln in out.splitlines() if ln.startswith("shape_12_40_3_6_3 ")}
    runs = {v: perf_rows(out_dir / v, v)[0] for v in ("classic", "doubleplane")}
    for metric, col in (("comm_only", 4), ("full_op", 6)):
        fig = comparison_figure(runs, metric, "measured on the CPU twin")
        (ax,) = fig.axes
        assert fig._suptitle.get_text().replace("\n", " ") == (
            f"{metric}: classic, doubleplane on shape_12_40_3_6_3, 3 PEs, measured on the CPU twin; bars: median "
            "over repeats, error bars: min-max")
        bars = _bars(ax)
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["classic (MTE only)",
                                                                       "doubleplane (MTE + SDMA)"]
        for v, container in zip(("classic", "doubleplane"), bars):
            (bar,) = container
            assert round(bar.get_height(), 3) == float(table[v][col])  # the table's median
            lo, hi = map(float, table[v][col + 1].split("-"))
            (span,) = _error_spans(container)
            assert span == pytest.approx((lo, hi), abs=5e-4)  # the table's spread, min-max
