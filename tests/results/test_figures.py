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


def test_suggest_out_draws_the_speedup_against_sdma_engines_from_the_models_curve(tmp_path, capsys):
    from combine_lab import CaseSpec, make_case
    from combine_lab.lab.unknowns_plot import engines_plot
    from combine_lab.model import load_model
    from combine_lab.model.stream import case_rows
    from combine_lab.model.suggest import suggest
    from combine_lab.model.unknowns import ENGINES, engines_curve

    argv = ["suggest", "-pes", "16", "-bs", "256", "-h", "7168", "-topk", "8", "-expertPerPe", "2", "--routing",
            "zipf:1.2", "--out", str(tmp_path / "s")]
    assert main(argv) == 0
    assert f"engines figure: {tmp_path / 's' / 'suggest_engines.png'}" in capsys.readouterr().out
    assert (tmp_path / "s" / "suggest_engines.png").read_bytes()[:4] == b"\x89PNG"
    spec = CaseSpec(pes=16, bs=256, h=7168, topk=8, expert_per_pe=2, routing="zipf:1.2")
    model = load_model("a3")
    rows = case_rows(make_case(spec), model.soc)
    s = suggest(rows, model)
    curves = {"at suggest's floor": s.verdict.engines, "at 2 MiB": s.at_default.engines}
    fig = engines_plot(curves, f"{spec.case_id} (zipf:1.2)", 16, s.caption)
    (ax,) = fig.axes
    lines = [ln for ln in ax.get_lines() if ln.get_label() in curves]
    assert [ln.get_label() for ln in lines] == list(curves)
    for ln, floor in zip(lines, (s.verdict.floor, 2 << 20)):
        want = engines_curve(rows, model, floor)
        assert list(ln.get_xdata()) == list(ENGINES) == list(want["engines"])
        assert list(ln.get_ydata()) == pytest.approx(list(want["speedup"]), rel=1e-12)
    title = fig._suptitle.get_text()
    assert title.startswith(f"{spec.case_id} (zipf:1.2), 16 PEs: speed-up of doubleplane against SDMA engines "
                            "(MODELLED, not measured)\nmodelled on a3")
    # the default floor pays only from 16 engines on this case: the curve says where it crosses parity
    assert s.at_default.engines["speedup"].iloc[0] < 0.2 and s.at_default.engines["speedup"].iloc[-1] == pytest.approx(1.0, abs=0.05)


def test_suggest_out_refuses_several_labels_before_pricing(tmp_path, capsys):
    argv = ["suggest", "-pes", "4", "-bs", "16", "--variant", "doubleplane,classic", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert (f"--out {tmp_path}: the engines figure is drawn for one variant label, not 2 (doubleplane,classic)"
            in capsys.readouterr().err)


def test_the_labs_comparison_and_history_figures_show_medians_and_spreads(no_leaks):
    import pandas as pd

    from combine_lab import CaseSpec
    from combine_lab.harness import compare
    from combine_lab.lab import plots
    from combine_lab.results.tables import summarize

    spec = CaseSpec(pes=3, bs=12, h=40, topk=3, expert_per_pe=2, routing="zipf:1.2")
    cmp = compare(spec, repeats=3, warmup=0, loops=2, perf=True, min_sdma_bytes=0)
    s = summarize(cmp.tidy()).iloc[0]
    fig = plots.compare_per_pe(cmp)
    assert fig._suptitle.get_text().startswith(f"Measured on cpu (the CPU twin): {spec.case_id} zipf:1.2, 3 PEs; "
                                               "median of 3 repeats, bars min-max\nx_out classic PASS")
    one = plots.compare_per_pe({v: cmp[v] for v in ("classic", "doubleplane")})  # one run of each: no spread to draw
    assert "; one run: no spread (repeats give one)\nx_out classic PASS" in one._suptitle.get_text()
    for ax, metric in zip(fig.axes, ("comm_only", "full_op")):
        for v, container in zip(("classic", "doubleplane"), _bars(ax)):
            (bar,) = container  # the one profiled PE: the table's median and spread over the repeats
            assert bar.get_height() == pytest.approx(s[f"{metric}_{v}_us"], rel=1e-9)
            assert _error_spans(container) == [pytest.approx((s[f"{metric}_{v}_lo_us"], s[f"{metric}_{v}_hi_us"]))]
    hist = pd.DataFrame({"run": [1, 2], "comm_only_classic_us": [5.0, 6.0], "comm_only_doubleplane_us": [4.0, 7.0],
                         "comm_only_speedup": [1.039, 0.9], "comm_only_speedup_lo": [0.98, 0.8],
                         "comm_only_speedup_hi": [1.99, 0.95]})
    ax = plots.history_plot(hist).axes[1]
    (bars,) = ax.containers  # one errorbar: the speed-up per run
    assert list(bars.lines[0].get_ydata()) == [1.039, 0.9]  # the median as the point
    assert [tuple(seg[:, 1]) for seg in bars.lines[2][0].get_segments()] == [pytest.approx((0.98, 1.99)),
                                                                            pytest.approx((0.8, 0.95))]
