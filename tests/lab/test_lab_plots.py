"""Every lab figure has a title, axis labels with units, and marks what it says it marks."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import xml.etree.ElementTree as ET

from combine_lab.lab import plots
from combine_lab.lab.svg import SvgFigure
from combine_lab.case.case import make_case
from combine_lab.planning.planner import plan
from combine_lab.case.spec import CaseSpec


NS = "{http://www.w3.org/2000/svg}"


def svg_texts(fig: SvgFigure) -> str:
    """The figure's texts, one ' | ' between text elements."""
    return " | ".join("".join(t.itertext()) for t in ET.fromstring(fig.svg).iter(f"{NS}text"))


def assert_labelled(fig):
    """A (sup)title, and on every visible data axes an x and a y label; it renders to PNG."""
    if isinstance(fig, SvgFigure):
        root = ET.fromstring(fig.svg)
        assert root.find(f"{NS}title").text, "figure without a title"
        words = svg_texts(fig)
        assert ("PE" in words or "floor" in words) and "(" in words, "no axis label with a unit"
        pytest.importorskip("resvg_py", reason="the lab extra (resvg-py) renders the PNG")
        assert plots.figure_png(fig)[:4] == b"\x89PNG"
        return
    axes = [a for a in fig.axes if a.get_visible() and a.get_label() != "<colorbar>"
            and getattr(a, "_colorbar", None) is None]
    titled = fig._suptitle is not None or all(a.get_title() for a in axes)
    assert titled, "figure without a title"
    for a in axes:
        if a.images or a.lines or a.patches or a.collections:
            assert a.get_xlabel() and a.get_ylabel(), f"axes {a.get_title()!r} lacks an axis label"
    png = plots.figure_png(fig)
    assert png[:4] == b"\x89PNG"


@pytest.fixture(scope="module")
def skewed_plan():
    case = make_case(CaseSpec(pes=4, bs=64, h=8192, topk=2, expert_per_pe=2, routing="hot-expert:0.5"))
    return plan(case, min_sdma_bytes=0)


def test_segment_map_panels_outline_exactly_the_sdma_segments(skewed_plan):
    fig = plots.segment_map(skewed_plan, dtype="int32_t")  # the drawing the app shows (svg.segment_map_svg)
    assert isinstance(fig, SvgFigure)
    assert_labelled(fig)
    root = ET.fromstring(fig.svg)
    words = svg_texts(fig)
    # titled by the PE that ran the experts and, in combine, sends each segment to src_rank
    assert all(f"PE {d} | (expert owner, sends)" in words for d in range(4))
    outlined = [r for r in root.iter(f"{NS}rect") if r.get("class") == "cl-sdma-cell"]
    for pe in range(4):
        assert sum(r.get("data-pe") == str(pe) for r in outlined) == len(skewed_plan.sdma_segments(pe))
    assert "src_rank" in words and "local_expert" in words and "payload (" in words  # colour bar with a byte unit
    # row counts readable (8 cells a panel), the empty-segment swatch outlined so that it shows
    counts = [t for t in root.iter(f"{NS}text") if t.get("class") == "cl-count"]
    assert counts and min(float(t.get("font-size")) for t in counts) >= 11
    assert "empty segment (0 rows)" in words and "stroke='#8c8c8c'" in fig.svg


def test_segment_map_stacked_for_many_pes():
    case = make_case(CaseSpec(pes=16, bs=64, h=4096, topk=4, expert_per_pe=4, routing="zipf:1.2"))
    p = plan(case, min_sdma_bytes=0)
    fig = plots.segment_map(p)
    assert_labelled(fig)
    root = ET.fromstring(fig.svg)
    assert len(list(root.iter(f"{NS}image"))) == 1  # one image, a pixel per cell (test_lab_svg reads it)
    words = svg_texts(fig).replace(" | ", " ")
    assert "MTE segments (KiB)" in words and f"SDMA segments (KiB): {int((p.segments.plane == 'SDMA').sum())}" in words


def test_plane_bytes_compare_history_and_sweep_figures(skewed_plan):
    fig = plots.plane_bytes_plot(skewed_plan)
    assert_labelled(fig)
    words = svg_texts(fig)
    assert "payload (MiB)" in words and "segment payload (MiB)" in words and "PE (expert owner, sends)" in words
    perf = pd.DataFrame({"Metric": ["full_op", "comm_only"] * 2, "ProfPe": [0, 0, 1, 1],
                         "CoreMaxTime/us": [10.0, 5.0, 12.0, 6.0]})
    run = SimpleNamespace(perf=perf, check_ok=True, case_id="shape_x", routing="zipf:1", target="cpu")
    fig = plots.compare_per_pe({"classic": run, "doubleplane": run})
    assert_labelled(fig)
    assert "PASS" in fig._suptitle.get_text()
    assert all(a.get_ylabel() == "CoreMaxTime (us)" and a.get_title().endswith(", measured") for a in fig.axes)
    assert fig._suptitle.get_text().startswith("Measured on cpu")  # never read as a modelled time
    hist = pd.DataFrame({"run": [1, 2], "comm_only_classic_us": [5.0, 6.0], "comm_only_doubleplane_us": [4.0, 7.0],
                         "comm_only_speedup": [1.25, 6 / 7]})
    fig = plots.history_plot(hist)
    assert_labelled(fig)
    assert "classic / doubleplane" in fig.axes[1].get_ylabel()
    assert "above 1: doubleplane faster" in fig.axes[1].get_title()
    assert "measured" in fig.axes[0].get_title()
    assert_labelled(plots.history_plot(hist.iloc[0:0]))


def _summary(shares, speedups):
    n = len(shares)
    return pd.DataFrame({"routing": (["u", "z"] * n)[:n], "bs": [8, 8, 16, 16][:n], "h": [64] * n,
                         "sdma_share": shares, "comm_only_speedup": speedups,
                         "comm_only_speedup_lo": [v - 0.1 for v in speedups],
                         "comm_only_speedup_hi": [v + 0.1 for v in speedups], "repeats": [5] * n})


def test_sweep_figures_one_convention_and_no_sdma_marked():
    summary = _summary([0.0, 0.3, 0.0, 0.5], [1 / 1.2, 2.0, 1.25, np.nan])
    fig = plots.sweep_heatmaps(summary)
    assert_labelled(fig)
    assert [a.get_title() for a in fig.axes[:2]] == ["u", "z"]
    bar = fig.axes[-1]
    assert "speed-up classic / doubleplane" in bar.get_ylabel() and "above 1: doubleplane faster" in bar.get_ylabel()
    u = fig.axes[0]
    texts = [t.get_text() for t in u.texts]
    # "u" has no SDMA traffic: no colour, no speed-up, a hatched cell marked as such
    assert texts == ["no SDMA\n(same bytes)", "no SDMA\n(same bytes)"]
    assert sum(1 for p in u.patches if p.get_hatch()) == 2
    z = [t.get_text() for t in fig.axes[1].texts]
    assert z == ["2.00\n[1.90-2.10]\nSDMA 30 %", "no run"]  # the NaN case: its runs failed
    assert "5 repeats" in fig._suptitle.get_text()
    fig = plots.sdma_share_plot(summary)
    assert_labelled(fig)
    ax = fig.axes[0]
    assert "(%)" in ax.get_xlabel() and "classic / doubleplane" in ax.get_ylabel()
    labels = ax.get_legend_handles_labels()[1]
    assert any(l.startswith("no SDMA") for l in labels) and any(l.startswith("no-SDMA span") for l in labels)
    assert not any(plots.NO_SDMA_NOTE == t.get_text() for t in ax.texts)
    assert ax.get_xlim()[1] > 50  # shares up to 50 %


def test_a_heatmap_cell_whose_spread_covers_1_is_a_tie_not_a_colour():
    """A fresh user's find: 0.57 [0.48-1.32] was drawn dark red, a verdict its spread does not give."""
    summary = _summary([0.3, 0.3], [0.95, 0.5])  # [0.85-1.05] covers 1; [0.40-0.60] does not
    summary["bs"] = [8, 16]
    summary["routing"] = ["z", "z"]
    fig = plots.sweep_heatmaps(summary, where="measured on cpu (the twin)")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["0.95\n[0.85-1.05]\nwithin noise\nSDMA 30 %",
                                                "0.50\n[0.40-0.60]\nSDMA 30 %"]
    shown = ax.images[0].get_array()
    assert shown.mask[0, 0] and not shown.mask[1, 0] and shown[1, 0] == 0.5  # the tie is not coloured
    assert [p.get_linestyle() for p in ax.patches] == [":"]  # framed
    assert "uncoloured: its spread covers 1 (within noise, a tie)" in fig._suptitle.get_text().replace("\n", " ")
    modelled = plots.sweep_heatmaps(summary, where="modelled on a3 (A3); assumed parameters: sdma_engines")
    assert modelled.axes[0].texts[0].get_text() == "0.95\n[0.85-1.05]\neither way over\nthe unknowns\nSDMA 30 %"
    assert "its range over the unknowns covers 1 (no verdict)" in modelled._suptitle.get_text().replace("\n", " ")


def test_share_plot_when_no_case_sends_by_sdma():
    fig = plots.sdma_share_plot(_summary([0.0, 0.0, 0.0, 0.0], [0.9, 1.1, 1.3, 0.7]))
    assert_labelled(fig)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == [plots.NO_SDMA_NOTE]
    lo, hi = ax.get_xlim()
    assert lo < 0 and hi >= 100  # a real share axis, not -0.04..0.04


def test_save_and_show(tmp_path, skewed_plan):
    fig = plots.segment_map(skewed_plan)
    path = plots.save_figure(fig, tmp_path / "figs", "map")
    assert path == tmp_path / "figs" / "map.png" and path.read_bytes()[:4] == b"\x89PNG"
    assert plots.show(fig, tmp_path, "shown") is None and (tmp_path / "shown.png").is_file()


@pytest.mark.parametrize("n, unit", [(10, "B"), (4096, "KiB"), (3 * 2**20, "MiB"), (2**31, "GiB")])
def test_byte_unit(n, unit):
    assert plots.byte_unit(n)[1] == unit


# ---- the walkthrough's and the sweep's modelled figures (issue 14 item 4, issue 11 items 5 and 7) ----

def test_modelled_figures_say_modelled_and_name_the_machine():
    from combine_lab.lab import sweep, teach
    from combine_lab.model.machines import load_model
    from combine_lab.model.stream import case_rows
    from combine_lab.model.suggest import suggest
    m = load_model("a2")
    seg = teach.one_segment(m, [1, 8, 64, 255], h=16384, itemsize=4)
    fig = plots.segment_crossover(seg, m.caption(), floor=2 << 20)
    assert_labelled(fig)
    assert "MODELLED, not measured" in fig._suptitle.get_text() and "modelled on a2" in fig._suptitle.get_text()
    assert fig.axes[0].get_ylabel() == "modelled comm_only of its core (us)"
    case = make_case(CaseSpec(pes=2, bs=64, h=16384, topk=2, expert_per_pe=2, routing="hot-expert:0.5"))
    s = suggest(case_rows(case, m.soc), m, what_if="segment")
    fig = plots.modelled_floors(s.curve, s.caption, floor=2 << 20, what_if="segment")
    assert_labelled(fig)
    labels = svg_texts(fig).split(" | ")
    assert any(t.startswith("classic (MTE only)") for t in labels) and any("what-if" in t for t in labels)
    assert "modelled, not measured" in svg_texts(fig) and "modelled on a2" in svg_texts(fig)
    grid = sweep.make_grid([2], [16, 64], [8192], [2], [2], ["uniform", "hot-expert:0.5"])
    modelled = sweep.model_grid(grid, m)
    fig = plots.sweep_heatmaps(modelled, where=m.caption())
    assert "MODELLED (not measured)" in fig._suptitle.get_text() and "assumed" in fig._suptitle.get_text()
    assert_labelled(fig)
    fig = plots.what_if_saving(modelled, m.caption())
    assert_labelled(fig)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert sum("no SDMA traffic" in t for t in texts) == int((modelled["sdma_share"] == 0).sum())
    assert "us" in fig.axes[0].get_xlabel() and "MODELLED" in fig._suptitle.get_text()


def test_core_timeline_draws_both_frames_over_one_cores_operations():
    from combine_lab.model.stream import case_rows, core_runs
    from combine_lab.planning.cores import TWIN_DEFAULT_SOC
    case = make_case(CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, seed=42))
    rows = case_rows(case, TWIN_DEFAULT_SOC)
    ops = core_runs(rows, rows.sdma("doubleplane", 0), pe=0, core=1)
    fig = plots.core_timeline(ops, "PE 0, core 1")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.startswith("comm_only frame") and "stage 1" in t for t in texts)
    assert any(t.startswith("full_op frame") and "barrier" in t for t in texts)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[0] == "SDMA put (no wait)" and legend[-1] == "core barrier" and "SDMA quiet" in legend
    assert fig._suptitle.get_text() == "PE 0, core 1" and fig.axes[0].get_xlabel()


def test_modelled_byte_axes_read_plain_byte_values_and_keep_the_legend_inside():
    from combine_lab.lab import teach
    from combine_lab.model.machines import load_model
    from combine_lab.model.stream import case_rows
    from combine_lab.model.suggest import suggest
    assert [plots.byte_label(v) for v in (512, 256 << 10, 1 << 20, 3 << 19, 2 << 20)] == \
        ["512 B", "256 KiB", "1 MiB", "1.5 MiB", "2 MiB"]
    # one engine and a quick put: no crossover on a2 (at the nominal put, MTE and one engine's SDMA tie
    # per row since both run at A2's write link, 20.284 GB/s)
    m = load_model("a2").with_values(sdma_engines=1.0, mte_put_us=0.5)
    case = make_case(CaseSpec(pes=2, bs=64, h=16384, topk=2, expert_per_pe=2, routing="hot-expert:0.5"))
    s = suggest(case_rows(case, m.soc), m, what_if="segment")
    seg = teach.one_segment(m, [1, 8, 64, 255], h=16384, itemsize=4)
    fig = plots.segment_crossover(seg, m.caption(), floor=2 << 20)
    ax = fig.axes[0]
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(l.endswith(("B", "KiB", "MiB", "GiB")) and "10" not in l.replace("10 ", "")
                          for l in labels), labels
    assert not ax.xaxis.get_minor_locator()()  # no minor ticks, so no "2x10^0" labels
    box = ax.get_legend().get_window_extent()
    page = fig.bbox
    assert box.x0 >= page.x0 and box.x1 <= page.x1 and box.y0 >= page.y0, (box, page)
    # the modelled curve over floors (SVG): byte ticks, and every text inside the figure
    mf = plots.modelled_floors(s.curve, s.caption, floor=2 << 20, what_if="segment")
    root = ET.fromstring(mf.svg)
    width, height = mf.size
    ticks = [t.text for t in root.iter(f"{NS}text") if t.get("text-anchor") == "middle" and t.get("font-size") == "11"]
    assert "2 MiB" in ticks and "4 MiB" in ticks and not any("e+" in t or "^" in t for t in ticks), ticks
    for t in root.iter(f"{NS}text"):
        assert 0 <= float(t.get("x")) <= width and 0 <= float(t.get("y")) <= height, (t.text, t.get("x"), t.get("y"))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "no crossover: MTE is faster at every size shown" in legend
