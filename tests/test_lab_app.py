"""The tuning app, driven without a browser: live plan, Run on the twin, bad values launch nothing."""

from __future__ import annotations

import html

import pytest
from conftest import LAB_EXTRA, host_processes, require

require("ipywidgets", "IPython", reason=LAB_EXTRA)

from combine_lab.case.case import Case, make_case  # noqa: E402
from combine_lab.errors import ParameterError, SpecError  # noqa: E402
from combine_lab.lab import app as app_mod  # noqa: E402
from combine_lab.lab.app import TuningApp, routing_string  # noqa: E402
from combine_lab.planning.planner import plan  # noqa: E402
from combine_lab.run import build as build_mod  # noqa: E402
from combine_lab.run import launch, runner  # noqa: E402
from combine_lab.run.capabilities import detect  # noqa: E402
from combine_lab.run.launch import LaunchError  # noqa: E402

SMALL = dict(pes=2, bs=64, h=8192, topk=2, expert_per_pe=2, routing_model="hot-expert", skew=0.5, warmup=0, loops=1)


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
    monkeypatch.setattr(runner, "compare", refuse)
    monkeypatch.setattr(build_mod, "build", refuse)
    monkeypatch.setattr(launch, "launch_pes", refuse)
    monkeypatch.setattr(runner, "launch_pes", refuse)


def test_changing_a_widget_replans_without_running(nothing_launches):
    app = TuningApp(targets=["cpu"], **SMALL)
    assert app.message == "" and app.plan is not None
    assert listed(app) == planner_says(app, app.controls["min_sdma_bytes"].value)
    assert sum(map(len, listed(app).values())) > 0
    before, image = app.replans, app.segment_image.value
    app.controls["h"].value = 16384  # bytes change, routing reused
    assert app.replans == before + 1 and app.spec.h == 16384
    assert listed(app) == planner_says(app, app.controls["min_sdma_bytes"].value)
    assert app.segment_image.value != image and app.segment_image.value[:4] == b"\x89PNG"
    app.controls["min_sdma_bytes"].value = 0  # floor off: more segments qualify
    assert listed(app) == planner_says(app, 0)
    app.controls["min_sdma_bytes"].value = 1 << 40
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
    assert app.compare_image.value[:4] == b"\x89PNG" and app.history_image.value[:4] == b"\x89PNG"
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
    monkeypatch.setattr(runner, "compare", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    assert app.run() is None and "Not run" in app.message and "Nothing was launched" in app.message
    app.max_run_bytes = 1 << 40

    def dies(*a, **k):
        raise LaunchError("PE 1 exited with status 3")
    monkeypatch.setattr(runner, "compare", dies)
    assert app.run() is None
    assert app.message == "Run failed: LaunchError: PE 1 exited with status 3"
    assert app.status.value == "failed" and not app.run_button.disabled and app.history.empty


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
