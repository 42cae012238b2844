"""The tuning app, driven without a browser: live plan, Run on the twin, bad values launch nothing."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
from conftest import LAB_EXTRA, host_processes, require

require("ipywidgets", "IPython", "resvg_py", reason=LAB_EXTRA)

from combine_lab.case.case import Case, make_case  # noqa: E402
from combine_lab.errors import ParameterError, SpecError  # noqa: E402
from combine_lab.lab import app as app_mod  # noqa: E402
from combine_lab.lab import app_form  # noqa: E402
from combine_lab.lab import tuning, tuning_model  # noqa: E402
from combine_lab.lab.app import TuningApp, routing_string  # noqa: E402
from combine_lab.model.replay import replay  # noqa: E402
from combine_lab.model.stream import case_rows  # noqa: E402
from combine_lab.planning.planner import plan  # noqa: E402
from combine_lab.run import build as build_mod  # noqa: E402
from combine_lab import harness  # noqa: E402
from combine_lab.run import launch, runner  # noqa: E402
from combine_lab.run.capabilities import detect  # noqa: E402
from combine_lab.run.launch import LaunchError  # noqa: E402

SMALL = dict(pes=2, bs=64, h=8192, topk=2, expert_per_pe=2, routing_model="hot-expert", skew=0.5, warmup=0, loops=1,
             repeats=1)


def listed(app) -> dict[int, list[int]]:
    t = app.sdma_table
    return {pe: t.loc[t["pe"] == pe, "segment"].tolist() for pe in range(app.spec.pes)}


def planner_says(app, floor) -> dict[int, list[int]]:
    p = plan(make_case(app.spec), "doubleplane", min_sdma_bytes=floor)
    return {pe: p.sdma_segments(pe).tolist() for pe in range(app.spec.pes)}


@pytest.fixture
def nothing_launches(monkeypatch):
    """Any build, compare or PE launch fails the test."""
    def refuse(*a, **k):
        raise AssertionError("launched although nothing should run")
    monkeypatch.setattr(harness, "compare", refuse)
    monkeypatch.setattr(build_mod, "build", refuse)
    monkeypatch.setattr(launch, "launch_pes", refuse)
    monkeypatch.setattr(runner, "launch_pes", refuse)


def test_changing_a_widget_replans_without_running(nothing_launches):
    app = TuningApp(targets=["cpu"], **SMALL)
    assert app.message == "" and app.plan is not None
    assert listed(app) == planner_says(app, int(app.controls["min_sdma_bytes"].value))
    assert sum(map(len, listed(app).values())) > 0
    before, figures = app.replans, app.plan_figures.value
    assert figures.count("<svg") == 2 and "cl-segment-map" in figures and "cl-plane-bytes" in figures
    app.controls["h"].value = "16384"  # bytes change, routing reused (a number box holds the text typed)
    assert app.replans == before + 1 and app.spec.h == 16384
    assert listed(app) == planner_says(app, int(app.controls["min_sdma_bytes"].value))
    # both plan figures arrive in one update, for the new h
    assert app.plan_figures.value != figures and "data-h='16384'" in app.plan_figures.value
    assert app.plan_figures.value.count("<svg") == 2
    app.controls["min_sdma_bytes"].value = "0"  # floor off: more segments qualify
    assert listed(app) == planner_says(app, 0)
    app.controls["min_sdma_bytes"].value = str(1 << 40)
    assert app.sdma_table.empty and "none: every segment goes by MTE" in app.sdma_html.value
    app.controls["routing_model"].value = "zipf"  # new routing, skew reset to the model's default
    assert app.spec.routing == "zipf:1.2"
    assert app.controls["trace"].disabled and not app.controls["skew"].disabled
    app.set(routing_model="trace", pes=4, expert_per_pe=2, trace="mixtral/arxiv/15", min_sdma_bytes=0)
    assert app.spec.routing == "trace:mixtral/arxiv/15" and app.controls["skew"].disabled
    assert listed(app) == planner_says(app, 0)
    assert "MTE would carry" in app.plan_summary.value
    assert app.history.empty


def test_plan_path_never_draws_x(monkeypatch):
    def no_x(self):
        raise AssertionError("the plan path drew x")
    monkeypatch.setattr(Case, "x", property(no_x))
    monkeypatch.setattr("combine_lab.case.routing.draw_x", lambda spec: no_x(None))
    app = TuningApp(targets=["cpu"], pes=16, bs=512, h=7168, topk=8, expert_per_pe=8, routing_model="deepseek")
    assert app.plan is not None and app.message == ""
    app.set(h=4096, dtype="float16_t")
    assert app.plan is not None
    # uniform draws x with its routing (the reference recipe): refused above the limit, with a reason
    app.set(routing_model="uniform", pes=64, bs=4096)
    assert app.plan is None and "draws x" in app.message and "Nothing was run" in app.message


@pytest.mark.parametrize("values, fragment", [
    (dict(topk=9), "topk=9: must be <= moe_expert_num=4"),
    (dict(pes=0), "pes=0"),
    (dict(h=-8), "h=-8"),
    (dict(routing_model="hot-expert", skew=0.9), "F=0.9 must be <= 1/topk"),
    (dict(min_sdma_bytes=-1), "min_sdma_bytes=-1"),
    (dict(loops=0), "loops=0"),
    (dict(routing_model="trace", trace="olmoe/github/7"), "must equal the trace's expert count"),
])
def test_bad_value_shows_message_and_launches_nothing(values, fragment, nothing_launches, no_leaks):
    app = TuningApp(targets=["cpu"], pes=2, bs=8, h=64, topk=2, expert_per_pe=2, routing_model="zipf", skew=1.0)
    app.set(**values)
    assert fragment in app.message and "Nothing was run" in app.message
    assert fragment in html.unescape(app.message_html.value)
    assert app.plan is None and app.spec is None and app.run_button.disabled
    app.run_button.click()  # even a click on the disabled button launches nothing
    assert app.run() is None
    assert app.history.empty and app.last_runs is None
    assert not host_processes()


def test_unknown_target_shows_message():
    app = TuningApp(targets=["cpu"], pes=2, bs=8, h=64, topk=2, expert_per_pe=2)
    app.set(target="npu")
    assert "target='npu': not offered here" in app.message


def test_run_on_twin_compares_both_variants(no_leaks):
    app = TuningApp(targets=["cpu"], **SMALL)
    runs = app.run()
    assert runs is not None, app.message
    assert set(runs) == {"classic", "doubleplane"}
    assert all(r.ok for r in runs.values())
    assert runs["doubleplane"].plane_bytes()["sdma_bytes"].sum() == app.plan.totals["sdma_bytes"].sum() > 0
    assert app.progress.value == app.progress.max and app.status.value == "done"
    assert app.verdict_html.value.count("PASS on every PE") == 2
    assert "sdma_bytes" in app.counters_html.value
    assert "<svg" in app.compare_html.value and "Measured on cpu" in app.compare_html.value
    assert "<svg" in app.history_plot_html.value and "measured on cpu" in app.history_plot_html.value
    h = app.history
    assert list(h["run"]) == [1] and list(h["check"]) == ["PASS"] and bool(h["counters_ok"].iloc[0])
    # one convention everywhere: speed-up = classic / doubleplane (above 1: doubleplane faster)
    assert not [c for c in h.columns if "ratio" in c]
    assert h["comm_only_speedup"].iloc[0] == pytest.approx(
        h["comm_only_classic_us"].iloc[0] / h["comm_only_doubleplane_us"].iloc[0])
    assert h["full_op_speedup"].iloc[0] == pytest.approx(
        h["full_op_classic_us"].iloc[0] / h["full_op_doubleplane_us"].iloc[0])
    assert 0 < h["sdma_share"].iloc[0] < 1
    # both PEs profiled: per-PE bars
    assert sorted(runs["classic"].perf["ProfPe"].unique()) == [0, 1]
    app.set(min_sdma_bytes=1 << 40)
    assert app.run() is not None
    assert list(app.history["run"]) == [1, 2] and app.history["sdma_share"].iloc[1] == 0


def test_run_too_large_or_failing_shows_message(monkeypatch, no_leaks):
    app = TuningApp(targets=["cpu"], max_run_bytes=1 << 20, **SMALL)
    monkeypatch.setattr(harness, "compare", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    assert app.run() is None and "Not run" in app.message and "Nothing was launched" in app.message
    app.max_run_bytes = 1 << 40

    def dies(*a, **k):
        raise LaunchError("PE 1 exited with status 3")
    monkeypatch.setattr(harness, "compare", dies)
    assert app.run() is None
    assert app.message == "Run failed: LaunchError: PE 1 exited with status 3"
    assert app.status.value == "failed" and not app.run_button.disabled and app.history.empty
    assert "Run failed" in app.run_note.value and "PE 1 exited with status 3" in app.run_note.value


def test_target_selector_follows_capabilities(monkeypatch):
    assert TuningApp(pes=2, bs=8, h=64, topk=2, expert_per_pe=2).controls["target"].options == \
        tuple(detect().targets())
    class NpuHere:
        def targets(self):
            return ["cpu", "npu"]
    monkeypatch.setattr(app_mod, "detect", NpuHere)
    assert TuningApp(pes=2, bs=8, h=64, topk=2, expert_per_pe=2).controls["target"].options == ("cpu", "npu")


def test_routing_string_and_widget():
    assert routing_string("zipf", 1.5) == "zipf:1.5"
    assert routing_string("deepseek", 3.0) == "deepseek"
    assert routing_string("trace", None, "olmoe/github/7") == "trace:olmoe/github/7"
    with pytest.raises(SpecError, match="routing model='nope'"):
        routing_string("nope")
    with pytest.raises(SpecError, match="pick a trace"):
        routing_string("trace")
    app = TuningApp(targets=["cpu"], pes=2, bs=8, h=64, topk=2, expert_per_pe=2)
    assert type(app.widget).__name__ == "VBox"
    with pytest.raises(ParameterError, match="unknown controls"):
        app.set(colour="red")


# ---- issue 9 item 3: what no longer describes the current inputs is cleared or marked stale, never saved ----

def test_failed_plan_and_failed_run_leave_no_stale_view_shown_or_saved(tmp_path, monkeypatch, no_leaks):
    app = TuningApp(targets=["cpu"], **SMALL)
    assert app.run() is not None, app.message
    assert set(app.figures) == {"segment_map", "plane_bytes", "modelled", "compare", "history"} and app.stale_views == []
    assert app.verdict_html.value.count("PASS on every PE") == 2 and "Stale" not in app.verdict_html.value

    # the field report: topk set to an invalid value showed "cannot plan" beside the old segment map
    app.set(topk=app.spec.moe_expert_num + 1)
    assert app.plan is None and "Cannot plan this case" in app.message
    assert app.plan_figures.value == "" and app.modelled == {} and "no plan" in app.modelled_html.value
    assert set(app.figures) == {"history"}
    assert app.stale_views == ["verdict", "counters", "compare"]
    assert "<b>Stale</b>: the verdict, counters and comparison below are from run 1; the inputs cannot be planned" \
        in app.verdict_html.value
    saved = sorted(p.name for p in app.save_figures(tmp_path, prefix="02_"))
    assert saved == ["02_history.png"] and sorted(p.name for p in tmp_path.iterdir()) == saved

    app.set(topk=SMALL["topk"])  # back to the inputs of run 1: its views are current again
    assert app.stale_views == [] and set(app.figures) == {"segment_map", "plane_bytes", "modelled", "compare", "history"}
    assert app.verdict_html.value.count("PASS on every PE") == 2 and "Stale" not in app.verdict_html.value
    app.set(h=2 * SMALL["h"])  # a valid change: the plan is redrawn, the run views are stale
    assert app.plan is not None and "compare" not in app.figures and "segment_map" in app.figures
    assert "changed since: h. Press Run" in app.verdict_html.value
    app.set(h=SMALL["h"])
    assert app.save_figures(tmp_path, prefix="02_") and (tmp_path / "02_compare.png").is_file()

    # the field report: after "Run failed: LaunchError ..." the verdict still read "PASS on every PE"
    def dies(*a, **k):
        raise LaunchError("PE 1 exited with status 3")
    monkeypatch.setattr(harness, "compare", dies)
    assert app.run() is None and app.message == "Run failed: LaunchError: PE 1 exited with status 3"
    assert "PASS" not in app.verdict_html.value and "Run failed" in app.verdict_html.value
    assert app.compare_html.value == "" and app.counters_html.value == ""
    assert set(app.figures) == {"segment_map", "plane_bytes", "modelled", "history"}
    app.save_figures(tmp_path, prefix="02_")
    assert not (tmp_path / "02_compare.png").exists()  # the earlier save of it is gone with it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["02_history.png", "02_modelled.png", "02_plane_bytes.png",
                                                           "02_segment_map.png"]


# ---- issue 14 item 2: one run per request, Run disabled until its results are shown ----

class _Runs:
    """What the quick_runs fixture saw: ``calls`` (the Run button's disabled state at each compare)
    and the ``app`` under test (set by the test)."""

    def __init__(self):
        self.calls: list[bool] = []
        self.app = None


@pytest.fixture(scope="module")
def small_pair(twin_binary):
    """One real pair of runs of SMALL (both variants on the twin), made once for this module's tests:
    what an app's Run gets back is the same whichever test clicks."""
    app = TuningApp(targets=["cpu"], **SMALL)
    return harness.compare(Case(app.spec, app.state.case.expert_ids, app.state.case.expert_scales), warmup=0, loops=1)


@pytest.fixture
def quick_runs(monkeypatch, small_pair):
    """harness.compare answering with :func:`small_pair`'s real pair of runs of SMALL, counting calls,
    and noting whether the Run button was disabled while each ran."""
    real = small_pair
    seen = _Runs()

    def fake(*a, **k):
        seen.calls.append(seen.app.run_button.disabled)
        return real
    monkeypatch.setattr(harness, "compare", fake)
    return seen


def test_run_button_stays_disabled_until_the_results_are_shown(quick_runs, monkeypatch, no_leaks):
    app = quick_runs.app = TuningApp(targets=["cpu"], **SMALL)
    seen = {}
    finish = app.state.finish_run

    def watching(request, runs):
        finish(request, runs)
        seen["disabled"] = app.run_button.disabled  # the results are in the state, the button still off
    monkeypatch.setattr(app.state, "finish_run", watching)
    assert app.run() is not None
    assert quick_runs.calls == [True] and seen["disabled"] is True
    assert app.verdict_html.value.count("PASS on every PE</span>; counters = plan") == 2
    assert "<td>1</td>" in app.history_html.value
    assert not app.run_button.disabled and app.status.value == "done"
    assert "Run 1 done: x_out classic PASS, doubleplane PASS" in app.run_note.value


def test_a_double_click_runs_once_and_a_later_click_runs_again(quick_runs, no_leaks):
    import time
    app = quick_runs.app = TuningApp(targets=["cpu"], click_guard_s=0.4, **SMALL)
    clicked = time.monotonic()
    app.run_button.click()
    app.run_button.click()  # the second click of a double-click: the Run goes on, or has just shown its results
    assert app.wait(60)
    assert len(app.history) == 1 and app.ignored_clicks == 1 and len(quick_runs.calls) == 1
    # a person who saw the button come back and pressed it again, once the guard of the first click is over
    time.sleep(max(0.0, clicked + 0.45 - time.monotonic()))
    app.run_button.click()
    assert app.wait(60)
    assert len(app.history) == 2 and app.ignored_clicks == 1


def test_a_keyboard_run_right_after_a_short_run_and_a_change_runs(quick_runs, monkeypatch, no_leaks):
    """Issue 27: a Run of 1.1 s, then h typed and Enter on Run 0.37 s after its results: the guard,
    timed from the results, dropped the click without a word. A double-click is two clicks close
    together, so the guard is timed from the click before."""
    import time
    app = quick_runs.app = TuningApp(targets=["cpu"], click_guard_s=0.15, **SMALL)
    fake = harness.compare

    def short(*a, **k):
        time.sleep(0.2)  # longer than the guard: the next click is not the rest of a double-click
        return fake(*a, **k)
    monkeypatch.setattr(harness, "compare", short)
    app.run_button.click()
    assert app.wait(60) and len(app.history) == 1
    app.controls["h"].value = "4096"  # planned before the click is handled, as the page sends them
    app.run_button.click()  # at once: well within the guard of the results, not of the click before
    assert app.wait(60)
    assert len(app.history) == 2 and app.ignored_clicks == 0 and len(quick_runs.calls) == 2
    assert [e[2]["h"] for e in app.events if e[1] == "start"] == [8192, 4096]


def test_a_failed_pe_is_said_whole_beside_the_button(quick_runs, monkeypatch, no_leaks):
    """Issue 29 item 4: a PE's failure (the twin's reason, then its log) was one line, or nothing: the
    Run's variant was left out of the rows. Now the Run fails with the whole reason: the first line
    beside the button, the rest below it."""
    app = quick_runs.app = TuningApp(targets=["cpu"], **SMALL)
    fake = harness.compare
    reason = ("PE 0 exited with status 3: twin: PE 0 core 1: status slot 1 on PE 1 was written by SDMA (inside "
              "aclshmemx_sdma_put_nbi called at kernels/combine_kernel.cpp:216)\n  twin: PE 0: stopping <&>")

    def failing(*a, **k):
        runs = fake(*a, **k)
        return harness.Comparison({"classic": runs["classic"]}, {}, {"doubleplane": reason}, runs.outcomes)
    monkeypatch.setattr(harness, "compare", failing)
    assert app.run() is None and app.history.empty
    first, rest = reason.split("\n", 1)
    assert app.message == f"Run failed: LaunchError: doubleplane: {first}"
    note = app.run_note.value
    assert f"<b>Run failed</b>: LaunchError: doubleplane: {html.escape(first)}. Nothing of it is kept." in note
    assert f"<pre class='cl-run-log'>{html.escape(rest)}</pre>" in note and "&lt;&amp;&gt;" in note


def test_a_click_while_a_run_goes_on_is_said_beside_the_button(monkeypatch, quick_runs, no_leaks):
    import threading
    app = quick_runs.app = TuningApp(targets=["cpu"], click_guard_s=0.0, **SMALL)
    fake, go, inside = harness.compare, threading.Event(), threading.Event()

    def held(*a, **k):
        inside.set()
        assert go.wait(60)
        return fake(*a, **k)
    monkeypatch.setattr(harness, "compare", held)
    app.run_button.click()
    assert inside.wait(60)
    app.run_button.click()  # the page sent it before it saw the button disabled
    note = html.unescape(app.run_note.value)
    assert "Run was pressed again while this Run goes on: not queued (press it once this one ends)." in note
    assert app.ignored_clicks == 1 and [e[2]["why"] for e in app.events if e[1] == "ignored"] == ["running"]
    go.set()
    assert app.wait(60) and len(app.history) == 1
    assert "not queued" not in app.run_note.value and "Run 1 done" in app.run_note.value


def test_the_plan_marks_and_stale_marking_follow_changes_made_during_a_run(quick_runs, monkeypatch, no_leaks):
    """Issue 19 item 4: during a Run the kernel was busy, so h typed 1.7 s into it was planned 8.7 s
    later and a bad value got its error 8 s late. The Run now goes on a thread of its own."""
    import threading
    app = quick_runs.app = TuningApp(targets=["cpu"], **SMALL)
    fake, go, inside = harness.compare, threading.Event(), threading.Event()

    def slow(*a, **k):
        inside.set()
        assert go.wait(60)
        for pe in range(4):  # the launches the bar counts
            k["on_launch"](pe % 2)
        return fake(*a, **k)
    monkeypatch.setattr(harness, "compare", slow)
    seen = []
    app.progress.observe(lambda c: seen.append((c["new"], app.progress.max)), names="value")
    assert app.start_run() and inside.wait(60)
    assert app.running and app.run_button.disabled
    before = app.replans
    app.controls["h"].value = "4096"  # planned at once, while the Run goes on
    assert app.replans == before + 1 and app.spec.h == 4096 and "data-h='4096'" in app.plan_figures.value
    assert "changed since: h" in app.run_note.value and "cl-pending" in app.run_note.value
    app.controls["loops"].value = "0"  # a bad value: marked at once
    assert "cl-bad" in app.controls["loops"]._dom_classes and "loops=0: must be an int >= 1" in app.message
    app.controls["loops"].value = str(SMALL["loops"])
    go.set()
    assert app.wait(60) and len(app.history) == 1
    assert seen == [(v, 6) for v in range(1, 7)], seen  # build, 4 launches, check
    assert app.stale_views == ["verdict", "counters", "compare"] and "changed since: h" in app.verdict_html.value
    assert not app.run_button.disabled  # the current inputs may be run


def test_a_run_that_would_be_refused_is_refused_before_the_click(nothing_launches):
    """Issue 19 item 2: pes 64, bs 1024, h 16384 (about 24 GiB) said so only under the controls,
    after a click, while the button looked ready."""
    app = TuningApp(targets=["cpu"], **SMALL)
    assert not app.run_button.disabled and "Run is off" not in app.run_note.value
    app.set(pes=64, bs=1024, h=16384, topk=2, expert_per_pe=2)
    assert app.plan is not None and app.run_button.disabled
    note = html.unescape(app.run_note.value)
    assert "Run is off" in note and "24.01 GiB" in note and "over the app's limit of 2.00 GiB" in note
    assert app.run() is None and app.history.empty
    app.set(pes=2, bs=64, h=8192)
    assert not app.run_button.disabled and "Run is off" not in app.run_note.value


def test_a_click_during_a_run_starts_nothing(monkeypatch, quick_runs, no_leaks):
    app = quick_runs.app = TuningApp(targets=["cpu"], **SMALL)
    fake = harness.compare

    def clicking(*a, **k):
        app.run_button.click()  # as if the kernel handled a click in the middle of the run
        assert app.run() is None
        return fake(*a, **k)
    monkeypatch.setattr(harness, "compare", clicking)
    app.run_button.click()
    assert app.wait(60)
    assert len(app.history) == 1 and app.ignored_clicks == 1


def test_layout_wraps_controls_and_shows_the_history_columns_that_matter(quick_runs, no_leaks):
    app = quick_runs.app = TuningApp(targets=["cpu"], **SMALL)
    root = app.widget
    assert "cl-app" in root._dom_classes
    controls = root.children[1]
    # grouped (issue 32 item 5): case, routing, kernel (the floor in bytes, then in MiB), timing; every control once
    assert "cl-controls" in controls._dom_classes
    groups = {[c for c in g._dom_classes if c.startswith("cl-group-")][0]: g.children for g in controls.children}
    assert list(groups) == ["cl-group-case", "cl-group-routing", "cl-group-kernel", "cl-group-timing"]
    assert [w for g in groups.values() for w in g if w in app.controls.values()] == \
        [app.controls[n] for _, names in app_mod.CONTROL_GROUPS.values() for n in names]
    assert sorted(n for _, names in app_mod.CONTROL_GROUPS.values() for n in names) == sorted(app.controls)
    kernel = list(groups["cl-group-kernel"])
    assert kernel[1:5] == [app.controls["min_sdma_bytes"], app.floor_bytes, app.floor_mib, app.floor_slider]
    assert type(app.controls["h"]).__name__ == "Text" and not app.controls["h"].continuous_update
    assert app.run() is not None
    shown = app.history_html.value
    for heading in app_mod.HISTORY_SHOWN.values():
        assert f"<th>{html.escape(heading)}</th>" in shown
    assert shown.count("<th>") == len(app_mod.HISTORY_SHOWN) <= 11
    assert "full_op_speedup" not in shown and "full_op_speedup" in app.history_all_html.value
    assert app.history_all_html.value.count("<th>") == len(app_mod.HISTORY_COLUMNS)


def test_every_bad_value_is_marked_at_its_control_all_at_once_never_changed(nothing_launches):
    """Issue 19 item 5: h -64 became 64 and 99999 became 16384 (the slider clamped them), h 100.5
    would be read as 100, and floor -1 with loops 0 showed only the floor's error."""
    app = TuningApp(targets=["cpu"], **SMALL)
    app.controls["h"].value = "99999"
    assert app.spec.h == 99999 and app.controls["h"].value == "99999"
    for typed, shown in (("-64", "h=-64: must be >= 1"), ("100.5", "h=100.5: must be an integer"),
                         ("8k", "h='8k': must be an integer")):
        app.controls["h"].value = typed
        assert app.controls["h"].value == typed and app.state.values()["h"] == app_mod.parse_number(typed)
        assert app.plan is None and shown in app.message, app.message
        assert "cl-bad" in app.controls["h"]._dom_classes and app.controls["h"].tooltip.startswith("must be")
    app.controls["min_sdma_bytes"].value = "-1"
    app.controls["loops"].value = "0"
    marked = {n for n, w in app.controls.items() if "cl-bad" in w._dom_classes}
    assert marked == {"h", "min_sdma_bytes", "loops"}
    for fragment in ("h='8k'", "min_sdma_bytes=-1: must be an int >= 0", "loops=0: must be an int >= 1"):
        assert fragment in app.message and fragment in html.unescape(app.run_note.value)
    assert app.run_button.disabled and "Run is off" in app.run_note.value and "3 values" in app.run_note.value
    app.set(h=4096, min_sdma_bytes=0, loops=1)
    assert app.spec.h == 4096 and app.controls["h"].value == "4096" and app.message == ""
    assert not [n for n, w in app.controls.items() if "cl-bad" in w._dom_classes] and not app.run_button.disabled
    app.controls["h"].value = "100"  # off a multiple of 64 is a valid h: planned as typed
    assert app.spec.h == 100 and app.plan is not None


def test_the_app_shows_the_drawings_it_saves(nothing_launches, tmp_path):
    """One drawing per view: the SVG in the page is the figure the notebook shows and the PNG saved."""
    from combine_lab.lab.svg import SvgFigure
    app = TuningApp(targets=["cpu"], **SMALL)
    assert set(app.figures) == {"segment_map", "plane_bytes", "modelled"}
    figs = [app.figures[n] for n in ("segment_map", "plane_bytes", "modelled")]
    assert all(isinstance(f, SvgFigure) for f in figs)
    assert app.plan_figures.value == figs[0].svg + figs[1].svg and figs[2].svg in app.modelled_html.value
    saved = app.save_figures(tmp_path, prefix="t_")
    assert [p.name for p in saved] == ["t_segment_map.png", "t_plane_bytes.png", "t_modelled.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in saved)


# ---- issue 11 item 5 (the app): modelled comm_only over floors, the current floor marked, Suggest ----

def _model_truth(app, floor, model_name="a3"):
    from combine_lab.model.machines import load_model
    from combine_lab.model.replay import replay
    from combine_lab.model.stream import case_rows
    model = load_model(model_name)
    rows = case_rows(make_case(app.spec), model.soc)
    t = {v: replay(rows, rows.sdma(v, floor), model).core_max("comm_only").max() for v in ("classic", "doubleplane")}
    return model, rows, t


def test_modelled_panel_follows_the_inputs_and_says_modelled(nothing_launches):
    app = TuningApp(targets=["cpu"], **SMALL)
    floor = int(app.controls["min_sdma_bytes"].value)
    model, rows, truth = _model_truth(app, floor)
    m = app.modelled
    assert m["model"] == "a3" and m["floor"] == floor
    assert m["classic_us"] == pytest.approx(truth["classic"], rel=1e-12)
    assert m["doubleplane_us"] == pytest.approx(truth["doubleplane"], rel=1e-12)
    assert m["classic_us"] != m["doubleplane_us"]  # SMALL sends a segment by SDMA at 2 MiB
    panel = html.unescape(app.modelled_html.value)
    assert "modelled on a3 (Atlas A3" in panel and "modelled, not measured" in panel and "measured on" not in panel
    # the assumed parameters listed once in the panel (in the figure's caption), and in the table
    import re
    counts = {n: len(re.findall(rf"(?<![a-z_]){n}(?![a-z_])", panel)) for n in model.assumed}
    assert set(counts.values()) == {1}, counts
    assert f"data-floor='{floor}'" in app.modelled_html.value and "cl-current" in panel
    assert all(name in html.unescape(app.assumed_html.value) for name in model.assumed)
    # a small case: the curve over every floor is there at once, and its point at this floor is the marker
    s = app.suggestion
    assert m["curve"] and s is not None and "cl-curve" in panel
    at = s.curve[s.curve["threshold_bytes"] >= floor].iloc[-1]
    assert at["modelled_us"] == pytest.approx(m["doubleplane_us"], rel=1e-9)
    # the floor moves the marker; h changes every time; the machine changes the caption
    app.set(min_sdma_bytes=0)
    assert app.modelled["doubleplane_us"] == pytest.approx(_model_truth(app, 0)[2]["doubleplane"], rel=1e-12)
    app.set(h=2 * SMALL["h"])
    assert app.modelled["classic_us"] == pytest.approx(_model_truth(app, 0)[2]["classic"], rel=1e-12)
    app.model_select.value = "a2"
    a2, _, truth2 = _model_truth(app, 0, "a2")
    assert app.modelled["model"] == "a2" and "modelled on a2 (" in html.unescape(app.modelled_html.value)
    assert app.modelled["doubleplane_us"] == pytest.approx(truth2["doubleplane"], rel=1e-12)


def test_suggest_names_the_best_floor_and_sets_it(nothing_launches, monkeypatch):
    monkeypatch.setattr(tuning_model, "AUTO_SUGGEST_SEGMENTS", 0)  # as for a large case: only the button computes it
    app = TuningApp(targets=["cpu"], model="a2", **{**SMALL, "min_sdma_bytes": 0})  # a2: the floor matters
    assert app.suggestion is None and app.use_button.disabled and "press <b>Suggest</b>" in app.modelled_html.value
    seen = []
    real = tuning_model.model_suggest

    def watched(*a, **k):
        seen.append((app.suggest_button.disabled, app.use_button.disabled, "Computing" in app.suggest_status.value))
        return real(*a, **k)
    monkeypatch.setattr(tuning_model, "model_suggest", watched)
    s = app.suggest()
    assert seen == [(True, True, True)] and not app.suggest_button.disabled and not app.use_button.disabled
    model, rows, _ = _model_truth(app, 0, "a2")
    from combine_lab.model.suggest import suggest
    want = suggest(rows, model)
    assert s.curve.equals(want.curve) and s.best.equals(want.best)
    # issue 19 item 11: an interval of floors that reach the best, not one knife-edge value
    c = app.state.floor_choice()
    assert not c.never and c.lo <= int(want.best["threshold_bytes"]) == c.hi
    status = html.unescape(app.suggest_status.value)
    assert f"a floor from {c.lo:,} B to {c.hi:,} B</b> ({tuning.format_bytes(c.lo)} to {tuning.format_bytes(c.hi)})" \
        in status
    assert "modelled, not measured" in status and "cl-best" in app.modelled_html.value
    floor = app.use_suggestion()
    assert c.lo <= floor <= c.hi and app.use_button.description == f"Use it: floor {floor:,} B"
    assert app.controls["min_sdma_bytes"].value == str(floor) and app.plan.min_sdma_bytes == floor
    assert app.modelled["doubleplane_us"] == pytest.approx(float(want.best["modelled_us"]), rel=1e-9)
    assert app.suggestion is s  # the floor changed, not the case: the curve still holds
    app.set(h=2 * SMALL["h"])   # the bytes changed: the curve is gone until asked for again
    assert app.suggestion is None and app.use_button.disabled and app.use_suggestion() is None


def test_a_tie_with_never_sdma_is_called_a_tie(nothing_launches):
    """Issue 20: on a3 every floor ties with never-SDMA, yet a "best floor" was printed; and "Use it:
    never SDMA" set 16,777,217 B without a word (issue 19 item 11)."""
    # one expert per PE: every floor ties exactly on a3 (with SMALL's two it did until the copy rate
    # was priced per leg: its SDMA floors now cost 30 % more there)
    app = TuningApp(targets=["cpu"], model="a3", **{**SMALL, "min_sdma_bytes": 0, "expert_per_pe": 1})
    s = app.suggest()
    assert len(set(s.curve["modelled_us"].round(9))) == 1  # the premise: one time at every floor
    c = app.state.floor_choice()
    assert c.never and c.all_tie
    status = html.unescape(app.suggest_status.value)
    assert "no floor is suggested" in status and "every floor ties with never SDMA" in status
    assert "Suggested floor" not in status and "best floor" not in status
    largest = c.largest_segment
    assert f"{largest + 1:,} B: one byte above the largest segment the rule could pick" in status
    assert app.use_button.description == "Use it: never SDMA"
    assert "never SDMA ties for best: no floor is faster" in html.unescape(app.modelled_html.value)
    assert app.use_suggestion() == largest + 1 and app.sdma_table.empty
    assert "a tie" in html.unescape(app.modelled_html.value)


def _sentences(text: str) -> list[str]:
    return [x.strip() for x in re.split(r"(?<=[.;:])\s+", text) if len(x.strip()) > 12]


def test_suggest_and_the_engine_line_say_one_thing_in_one_format(nothing_launches):
    """Issue 32 item 4: with deepseek at 16 PEs the engine line said "pays only if 32 or more run at
    once" while Suggest said that no unknown changes it; Suggest said "no floor beats MTE-only under
    these assumptions" twice and wrote its floor as 4,521,985 B and as 4521984 in one message."""
    app = TuningApp(targets=["cpu"], model="a3", pes=16, routing_model="deepseek")
    app.suggest()
    status = html.unescape(re.sub("<[^>]+>", "", app.suggest_status.value))
    panel = html.unescape(re.sub("<[^>]+>", "", app.modelled_html.value.split("<svg")[0]))
    u = app.state.unknowns()
    assert u.suggested and u.floor == 1_966_080 and not u.beats
    # one source: the panel's engine sentence is the one Suggest's message gives
    assert u.engines == ("doubleplane at floor 1,966,080 B: 1.3x slower with 1, 1.1x faster with 2, 1.1x faster with 4, "
                         "1.1x faster with 8, 1.1x faster with 16, 1.1x faster with 32, 1.1x faster with 48 SDMA "
                         "engines, the rest nominal: it pays only if 2 or more run at once")
    assert f"SDMA engines alone: {u.engines}." in status and f"Over the unknown SDMA engine count: {u.engines} (" in panel
    assert "(the floor Suggest names; this one is 2,097,152 B)" in panel and "At floor 2,097,152 B:" in panel
    assert status.count("no floor beats MTE-only everywhere in the unknowns' box") == 1
    said = _sentences(status)
    assert len(said) == len(set(said)), [x for x in said if said.count(x) > 1]
    # every byte count in exact bytes with thousands separators: no bare 1966080
    assert re.findall(r"\d{5,}", status + panel) == [], re.findall(r"\d{5,}", status + panel)
    assert "a floor from 0 B to 1,966,080 B (0 B to 1.88 MiB)" in status
    app.use_suggestion()  # at that floor the panel speaks of it alone
    panel = html.unescape(re.sub("<[^>]+>", "", app.modelled_html.value.split("<svg")[0]))
    assert f"Over the unknown SDMA engine count: {u.engines} (modelled;" in panel and "Suggest names" not in panel


def test_the_parameters_table_writes_values_as_the_model_does(nothing_launches):
    """Issue 32 item 4: "8.000 engines": a count is written 8, a rate 0.2, as in the model's file."""
    app = TuningApp(targets=["cpu"], model="a3", **SMALL)
    cells = re.findall(r"<tr><td>([a-z_A-Z]+)</td><td>([^<]*)</td><td>([^<]*)</td>", app.assumed_html.value)
    got = {name: (value, unit) for name, value, unit in cells}
    assert got["sdma_engines"] == ("8", "engines") and got["egress_GBps"] == ("142", "GB/s")
    assert got["mte_put_us"][0] == "0.2" or "." in got["mte_put_us"][0] or got["mte_put_us"][0].isdigit()
    assert not [v for v, _ in got.values() if v.endswith(".000")]


def test_suggest_without_a_plan_says_so(nothing_launches):
    app = TuningApp(targets=["cpu"], **SMALL)
    app.set(topk=99)
    assert app.suggest() is None and "Cannot suggest" in app.message


# ---- issue 24 item 4: kernel settings controls ----

def test_settings_controls_mark_bad_values_and_a_run_uses_them(monkeypatch, no_leaks):
    monkeypatch.delenv("COMBINE_TWIN_SOC", raising=False)
    app = TuningApp(["cpu"], pes=2, bs=16, h=64, topk=2, expert_per_pe=2, routing_model="hot-expert", skew=0.5,
                    warmup=0, loops=1, repeats=1, min_sdma_bytes=0)
    seg, cores = app.controls["segment"], app.controls["cores_per_rank"]
    assert type(seg).__name__ == "Checkbox" and seg.value is False and cores.value == "1"
    assert "22 SDMA calls" in app.plan_summary.value and "kernel settings <code>reference</code>" in app.plan_summary.value
    cores.value = "41"
    assert "cl-bad" in cores._dom_classes and app.run_button.disabled and app.plan is None
    assert cores.tooltip == "must be <= 40 cores (the 40 AIV cores of Ascend910B3; at most 48 cores issue SDMA)"
    assert app.message == ("Cannot plan this case: cores per rank=41: must be <= 40 cores (the 40 AIV cores of "
                           "Ascend910B3; at most 48 cores issue SDMA). Nothing was run.")
    cores.value = "4"
    seg.value = True
    assert "cl-bad" not in cores._dom_classes and not app.run_button.disabled
    assert "8 SDMA calls" in app.plan_summary.value and "kernel settings <code>segment-c4</code>" in \
        app.plan_summary.value
    # modelled under the settings, against the group's own classic, named so; the engine line likewise
    m = app.state.modelled
    assert m["settings"] == "segment-c4" and m["labels"] == {"classic": "classic-c4",
                                                              "doubleplane": "doubleplane-segment-c4"}
    rows = case_rows(app.state.case, app.state.model().soc)
    dual = replay(rows.with_settings("segment-c4"), rows.sdma("doubleplane", 0), app.state.model())
    classic = replay(rows.with_settings("c4"), rows.sdma("classic", 0), app.state.model())
    assert m["doubleplane_us"] == pytest.approx(float(dual.core_max("comm_only").max()), rel=1e-12)
    assert m["classic_us"] == pytest.approx(float(classic.core_max("comm_only").max()), rel=1e-12)
    shown = html.unescape(app.modelled_html.value)
    assert f"{m['doubleplane_us']:,.1f} us</b> with doubleplane-segment-c4, {m['classic_us']:,.1f} us with classic-c4" in shown
    # the engine line is Suggest's (one source: its verdict at the floor it names), against the group's classic
    assert "Over the unknown SDMA engine count: doubleplane-segment-c4 at floor 4,096 B: 1.6x slower with 1" in shown
    assert "SDMA engines than classic-c4, the rest nominal" in shown and "this one is 0 B" in shown
    assert app.run() is not None
    assert list(app.rows["variant"]) == ["classic-c4", "doubleplane-segment-c4"]
    assert "<td>16_64_2_4_2, segment-c4</td>" in app.history_html.value
    assert "kernel settings segment-c4 (run 1)" in app.verdict_html.value
    assert "<b>doubleplane (MTE + SDMA), segment-c4</b>: x_out" in app.verdict_html.value
    seg.value = False
    assert "changed since: segment layout" in app.verdict_html.value


@pytest.mark.slow  # a dask cluster started; the quick suite's cluster is tests/cluster test_cluster_local_needs_no_address
def test_the_apps_sweep_runs_the_case_over_lists_here_and_on_a_cluster(twin_binary, no_leaks):
    """Issue 33: the app's Sweep (the case over lists of PEs and tokens per PE), here or as dask tasks."""
    app = TuningApp(targets=["cpu"], **{**SMALL, "h": 256})
    sw = app.sweep
    sw.pes_list.value, sw.bs_list.value = "2", "8, 1e3"
    assert not sw.start() and sw.error.startswith("Not run: bs list") and "1e3" in sw.error  # refused, said
    sw.bs_list.value, sw.cluster.value = "8,16", "tcp://nowhere"
    assert not sw.start() and sw.error == ("Not run: --cluster='tcp://nowhere': must be local, local:N (N >= 1 "
                                           "workers here) or tcp://HOST:PORT (a dask scheduler's address)")
    sw.cluster.value = ""
    assert sw.start() and sw.wait(300), sw.error
    assert sw.error == "" and list(sw.result["case_id"]) == ["shape_8_256_2_4_2", "shape_16_256_2_4_2"]
    assert sw.result["check_ok"].all() and sw.result["counters_ok"].all()
    assert "Sweep done: 2 cases" in sw.status.value and "shape_16_256_2_4_2" in sw.table_html.value
    here = sw.result
    pytest.importorskip("distributed")
    sw.cluster.value = "local:1"
    assert sw.start() and sw.wait(300), sw.error
    cols = ["case_id", "check_ok", "counters_ok", "sdma_bytes", "sdma_share"]
    assert sw.result[cols].equals(here[cols])  # the same cases and checks as dask tasks
    app.set(h=-64)
    assert not sw.start() and "the app's values cannot be used" in sw.error


# ---- issue 32 item 5: the floor in MiB, with a log slider and the exact bytes beside it ----

def test_the_floor_in_mib_and_on_a_log_slider_sets_whole_bytes(nothing_launches):
    app = TuningApp(targets=["cpu"], **SMALL)
    assert app.controls["min_sdma_bytes"].value == "2097152" and app.floor_mib.value == "2"
    assert app.floor_slider.value == 2.0 and "= <b>2,097,152 B</b>" in app.floor_bytes.value
    app.floor_mib.value = "1.84375"  # typed in MiB: the byte box, the plan and the slider follow, exactly
    assert app.state.values()["min_sdma_bytes"] == 1_933_312 and app.plan.min_sdma_bytes == 1_933_312
    assert app.controls["min_sdma_bytes"].value == "1933312" and "= <b>1,933,312 B</b>" in app.floor_bytes.value
    assert app.floor_slider.value == pytest.approx(1.84375, rel=1e-12)
    app.floor_slider.value = 2 ** -1.5  # a quarter step of the log slider: rounded to whole bytes
    assert app.state.values()["min_sdma_bytes"] == round(2 ** -1.5 * 2 ** 20) == 370_728
    assert app.floor_mib.value == app_form.floor_mib_text(370_728) == f"{370_728 / 2 ** 20:.12g}"
    app.controls["min_sdma_bytes"].value = "0"  # the byte box takes any floor; the slider rests at its low end
    assert app.floor_mib.value == "0" and app.floor_slider.value == 2 ** -10
    assert "= <b>0 B</b> (every segment over its PE's average)" in app.floor_bytes.value
    app.controls["min_sdma_bytes"].value = "-1"  # a bad floor: marked at the byte box; MiB and slider keep theirs
    assert "cl-bad" in app.controls["min_sdma_bytes"]._dom_classes and app.floor_mib.value == "0"
    assert "no floor: see the byte box" in app.floor_bytes.value
    app.floor_mib.value = "lots"  # no number: handed on as typed, named at the byte box
    assert app.state.values()["min_sdma_bytes"] == "lots" and "cl-bad" in app.controls["min_sdma_bytes"]._dom_classes
    app.floor_mib.value = "4"
    assert app.state.values()["min_sdma_bytes"] == 4 * 2 ** 20 and app.plan is not None


# ---- issue 32 item 5: the history sortable, filterable, exportable, two runs compared ----

def test_the_history_panel_sorts_filters_exports_and_compares(nothing_launches, tmp_path):
    import base64
    import io

    import pandas as pd
    from test_lab_history import HISTORY

    app = TuningApp(targets=["cpu"], **SMALL)
    app.state.restore({"values": app.state.values(), "history": HISTORY.to_dict("records")})
    app._render_history()
    body = app.history_html.value
    assert [int(x) for x in re.findall(r"<tr><td>(\d+)</td>", body)] == [1, 2, 3]
    assert "<th>algbw classic / doubleplane (GB/s)</th>" in body and "<td>10.00 / 11.11</td>" in body
    assert "<td>1,933,312 B</td>" in body  # the floor in exact bytes, as everywhere
    app.history_sort.value = "speed-up"
    app.history_descending.value = True
    assert [int(x) for x in re.findall(r"<tr><td>(\d+)</td>", app.history_html.value)] == [2, 1, 3]
    app.history_filter.value = "zipf"
    assert [int(x) for x in re.findall(r"<tr><td>(\d+)</td>", app.history_html.value)] == [2, 1]
    assert "2 of 3 runs shown" in app.history_html.value
    # the CSV of what is shown: in the page as a download, and to a file
    link = re.search(r"download='tuning_history.csv' href='data:text/csv;base64,([^']+)'>Export CSV \(2 runs\)",
                     app.history_csv_html.value)
    shown = pd.read_csv(io.StringIO(base64.b64decode(link.group(1)).decode()))
    assert list(shown["run"]) == [2, 1] and list(shown.columns) == app_mod.HISTORY_COLUMNS
    path = app.export_history(tmp_path / "h.csv")
    assert path.read_text() == base64.b64decode(link.group(1)).decode()
    # two runs compared as combine-lab diff compares them: the last two by default
    assert (app.compare_a.value, app.compare_b.value) == (2, 3) and list(app.compare_a.options) == [1, 2, 3]
    app.compare_a.value, app.compare_b.value = 1, 2
    text = html.unescape(app.history_compare_html.value)
    assert "Run 2 against run 1" in text and "Inputs: min_sdma_bytes 2,097,152 -> 1,933,312; settings reference -> " \
        "segment-c4" in text
    assert "<td>doubleplane</td><td>comm_only/us</td><td>90.000</td><td>88.000-92.000</td><td>70.000</td>" in text
    assert "B faster, beyond noise" in text and "within noise" in text
    app.compare_b.value = 1
    assert "Pick two runs" in app.history_compare_html.value
    more = HISTORY.assign(run=HISTORY["run"] + 3)  # new Runs: the last two compared, the newest as B
    app.state.restore({"values": app.state.values(), "history": pd.concat([HISTORY, more]).to_dict("records")})
    app._render_history()
    assert (app.compare_a.value, app.compare_b.value) == (5, 6) and list(app.compare_b.options) == [1, 2, 3, 4, 5, 6]


def test_the_headline_numbers_come_first(quick_runs, no_leaks):
    """Issue 32 item 5: the speed-up and its range before any prose, measured and modelled."""
    app = quick_runs.app = TuningApp(targets=["cpu"], **SMALL)
    m = app.modelled
    assert app.modelled_html.value.startswith(f"<div class='cl-headline cl-modelled-headline'><span "
                                              f"class='cl-headline-number'>{m['speedup']:.3f}x</span> ")
    assert "modelled on a3</span>" in app.modelled_html.value.split("cl-modelled-line")[0]
    assert app.run() is not None
    h = app.history.iloc[-1]
    v = app.verdict_html.value
    assert v.startswith(f"<div class='cl-headline' role='status'><span class='cl-headline-number'>"
                        f"{h['comm_only_speedup']:.3f}x</span> <span class='cl-headline-verdict'>"
                        f"{html.escape(str(h['comm_only_verdict']))}</span> <span class='cl-measured-tag'>measured")
    assert "of 1 paired repeat;" in v and "cl-headline-range" not in v  # one repeat: no range to give
    alg = (h["comm_only_classic_algbw_GBps"], h["comm_only_doubleplane_algbw_GBps"])
    assert np.isfinite(alg).all() and f"algbw {alg[0]:,.2f} / {alg[1]:,.2f} GB/s" in v
    assert v.index("cl-headline") < v.index("x_out")


def test_the_modelled_headline_carries_the_band_over_the_unknowns(nothing_launches):
    app = TuningApp(targets=["cpu"], model="a3", pes=16, routing_model="deepseek")
    app.suggest()
    assert "over the unknowns]" not in app.modelled_html.value  # the band is of Suggest's floor, not this one
    app.use_suggestion()
    u = app.state.unknowns()
    assert f"<span class='cl-headline-range'>[{u.low:.2f}-{u.high:.2f} over the unknowns]</span>" in \
        app.modelled_html.value and (round(u.low, 2), round(u.high, 2)) == (0.66, 1.09)


# ---- issue 32: the app's Trace button writes what compare --trace writes ----

def test_the_trace_button_writes_the_perfetto_json_of_both_variants(tmp_path, twin_binary, no_leaks):
    import json

    app = TuningApp(targets=["cpu"], **SMALL)
    app.trace_dir = tmp_path
    app.trace_button.click()
    app._trace_thread.join(120)
    path = tmp_path / f"trace_{app.spec.case_id}_twin.json"
    assert app.trace_path == path and f"Trace written: {path} (measured on the CPU twin;" in \
        html.unescape(app.trace_note.value)
    doc = json.loads(path.read_text())
    ev = doc["traceEvents"]
    procs = sorted(e["args"]["name"] for e in ev if e.get("name") == "process_name")
    assert procs == sorted(f"{v} PE {pe} (measured on the CPU twin)" for v in ("classic", "doubleplane")
                           for pe in range(SMALL["pes"])), procs
    threads = {e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert {"host: launch", "AIV core 0"} <= threads and any(t.startswith("SDMA queue") for t in threads)
    assert doc["metadata"]["title"] == f"{app.spec.case_id} ({app.spec.routing}), 2 PEs, measured on the CPU twin"
    # modelled on the panel's model: the same tracks, in modelled time; nothing of a Run is kept
    got = app.trace(tmp_path / "m.json", clock="model")
    assert got == tmp_path / "m.json" and "modelled on a3" in json.loads(got.read_text())["metadata"]["clocks"][0]
    assert len(app.history) == 0 and not app.running
    app.set(topk=99)  # values that cannot be used: nothing traced, and said beside the button
    assert app.trace(tmp_path / "x.json") is None and not (tmp_path / "x.json").exists()
    assert "not traced: Cannot plan this case: topk=99" in html.unescape(app.trace_note.value)


def test_no_run_while_a_trace_goes_on_and_no_trace_while_a_run_does(monkeypatch):
    import threading

    from combine_lab.run import build as build_mod

    go = threading.Event()
    monkeypatch.setattr(build_mod, "build", lambda *a, **k: None)
    monkeypatch.setattr(harness, "execute", lambda runs, **k: (go.wait(30), [])[1])
    app = TuningApp(targets=["cpu"], **SMALL)
    assert app.start_trace(clock="twin") and app.tracing and app.trace_button.disabled
    assert app.start_run() is False and "Not run: a Trace goes on" in app.run_note.value
    assert app.start_trace() is False and "a Run or a Trace goes on" in app.trace_note.value
    go.set()
    app._trace_thread.join(30)
    assert not app.tracing and not app.trace_button.disabled
    assert "Trace: no variant ran, nothing written" in app.trace_note.value and app.trace_path is None
    assert len(app.history) == 0


# ---- issue 32 items 4 and 5: the figure faults of plots.py / svg.py ----

def _legend_over_ticks(fig) -> list[str]:
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends, "the figure has no legend"
    ticks = []  # drawn tick labels only: a tick past the view limits keeps a stale, undrawn label
    for ax in fig.axes:
        for axis, (lo, hi) in ((ax.xaxis, sorted(ax.get_xlim())), (ax.yaxis, sorted(ax.get_ylim()))):
            ticks += [t.label1 for t in axis.get_major_ticks()
                      if t.label1.get_text() and t.label1.get_visible() and lo <= t.get_loc() <= hi]
    return [t.get_text() for leg in legends for t in ticks
            if leg.get_window_extent(r).overlaps(t.get_window_extent(r))]


def test_in_the_app_no_legend_covers_a_tick(quick_runs, no_leaks):
    """The comparison drawn to the app's width (1225 px at 1280): its legends clear the tick labels."""
    app = quick_runs.app = TuningApp(targets=["cpu"], **SMALL)
    app.run()
    fig = app.state.compare_figure
    w, h = fig.get_size_inches()
    fig.set_size_inches(1225 / 96, h)
    try:
        assert _legend_over_ticks(fig) == []
    finally:
        fig.set_size_inches(w, h)


@pytest.mark.slow  # renders the saved figures; the app's own is test_in_the_app_no_legend_covers_a_tick
def test_the_saved_comparison_has_no_legend_over_a_tick(twin_binary):
    from combine_lab.lab import plots
    app = TuningApp(targets=["cpu"], **{**SMALL, "pes": 4, "repeats": 2})
    runs = harness.compare(Case(app.spec, app.state.case.expert_ids, app.state.case.expert_scales), warmup=0,
                           loops=1, repeats=2, prof_pe="all")
    assert _legend_over_ticks(plots.compare_per_pe(runs)) == []


def test_the_heat_maps_unit_clears_its_top_tick(nothing_launches):
    """The segment map of 64 PEs (stacked view): the colour bar's "(MiB)" line against its top tick's text."""
    app = TuningApp(targets=["cpu"], pes=64, bs=64, h=8192, topk=2, expert_per_pe=2, routing_model="zipf")
    svg = app.state.figures["segment_map"].svg
    texts = [(float(x), float(y), float(fs), t) for x, y, fs, t in
             re.findall(r"<text x='([\d.]+)' y='([\d.]+)' font-size='([\d.]+)'[^>]*>([^<]*)</text>", svg)]
    for lx, ly, lfs, label in [t for t in texts if t[3].startswith("(MiB)")]:
        ticks = [t for t in texts if abs(t[0] - lx - 20) < 30 and 0 < t[1] - ly < 30]
        tick_top = min(t[1] - 0.75 * t[2] for t in ticks)  # a digit's height above its baseline
        assert ly + 0.25 * lfs + 2 <= tick_top, (label, ly, ticks)  # the label's descent, then 2 px clear


def test_each_segment_map_cell_says_what_it_holds_on_hover(nothing_launches):
    app = TuningApp(targets=["cpu"], **{**SMALL, "pes": 4})
    svg = app.state.figures["segment_map"].svg
    cells = re.findall(r"<rect[^>]*class='cl-cell'[^>]*data-pe='(\d+)'[^>]*data-le='(\d+)'[^>]*data-src='(\d+)'"
                       r"[^>]*><title>([^<]*)</title></rect>", svg)
    assert len(cells) == 4 * SMALL["expert_per_pe"] * 4
    rows = app.plan.segments.set_index(["pe", "local_expert", "src_rank"])["token_count"]
    for d, le, s, title in cells:
        assert f"{int(rows.loc[(int(d), int(le), int(s))]):,} rows" in title, title


def test_the_segment_lookup_says_why_a_segment_took_its_plane(nothing_launches):
    from combine_lab.lab.segments import segment_text
    app = TuningApp(targets=["cpu"], **{**SMALL, "pes": 4})
    assert [len(app.segment_pick[n].options) for n in ("pe", "local_expert", "src_rank")] == [4, 2, 4]
    pe, s = next((int(r.pe), int(r.src_rank)) for r in app.sdma_table.itertuples())  # an SDMA segment of the plan
    le = int(app.sdma_table.iloc[0]["local_expert"])
    app.segment_pick["pe"].value, app.segment_pick["local_expert"].value = pe, le
    app.segment_pick["src_rank"].value = s
    assert html.unescape(app.segment_html.value).endswith(segment_text(app.plan, pe, le, s) + "</div>")
    assert " by SDMA: at or above the floor" in html.unescape(app.segment_html.value)
    app.set(pes=2)  # fewer PEs: the pickers follow, the text is of the new plan
    assert list(app.segment_pick["pe"].options) == [0, 1] and app.segment_pick["src_rank"].value < 2
    app.set(topk=99)  # no plan: no text
    assert app.segment_html.value == ""
