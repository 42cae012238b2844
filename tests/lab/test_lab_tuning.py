"""The tuning app's state (combine_lab.lab.tuning.TuningState), driven with ipywidgets and IPython
hidden: values, plan, every problem at once, the modelled panel, Suggest, a Run on the twin, the
history and what goes stale. Nothing here needs the lab extra but resvg-py for the PNGs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import host_processes

from combine_lab import harness
from combine_lab.case.case import make_case
from combine_lab.errors import ParameterError
from combine_lab.lab import tuning, tuning_model
from combine_lab.lab.svg import SvgFigure
from combine_lab.lab.tuning import FIELDS, RUN_VIEWS, Field, Problem, TuningState
from combine_lab.model.machines import load_model
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows
from combine_lab.model.suggest import suggest
from combine_lab.model.unknowns import engines_curve, engines_line
from combine_lab.planning.planner import plan
from combine_lab.planning.settings import KernelSettings
from combine_lab.run import build as build_mod
from combine_lab.run.launch import LaunchError

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(pes=2, bs=64, h=8192, topk=2, expert_per_pe=2, routing_model="hot-expert", skew=0.5, warmup=0, loops=1,
             repeats=1)
WIDGETS = ("ipywidgets", "IPython")
#: What the lab extra installs (pyproject's ``lab``), by module: none of it is needed to plan and draw
LAB_MODULES = ("ipywidgets", "IPython", "ipykernel", "jupyterlab", "traitlets", "papermill", "nbclient", "nbformat",
               "jupytext", "yaml", "jupyter_client", "voila", "resvg_py")
#: resvg-py (the lab extra) renders the PNGs; without it the rest still runs
PNG = importlib.util.find_spec("resvg_py") is not None


@pytest.fixture(autouse=True)
def no_widgets(monkeypatch):
    """ipywidgets and IPython cannot be imported during each test (None in sys.modules makes
    ``import`` raise ImportError), so that a widget or kernel import anywhere on the state's
    paths fails the test."""
    for name in WIDGETS:
        monkeypatch.setitem(sys.modules, name, None)
        for sub in [m for m in sys.modules if m.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, sub, None)
    yield
    for name in WIDGETS:
        with pytest.raises(ImportError):
            __import__(name)


@pytest.fixture
def nothing_launches(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched although nothing should run")
    monkeypatch.setattr(harness, "compare", refuse)
    monkeypatch.setattr(build_mod, "build", refuse)


def listed(state) -> dict[int, list[int]]:
    t = state.sdma_table
    return {pe: t.loc[t["pe"] == pe, "segment"].tolist() for pe in range(state.spec.pes)}


def planner_says(state, floor) -> dict[int, list[int]]:
    p = plan(make_case(state.spec), "doubleplane", min_sdma_bytes=floor)
    return {pe: p.sdma_segments(pe).tolist() for pe in range(state.spec.pes)}


@pytest.mark.slow  # a Python process started without the lab extra on its path
def test_the_state_module_imports_and_plans_without_the_lab_extra(tmp_path):
    """As after ``pip install -e .[test]`` without the lab extra: a fresh interpreter in which an
    import hook refuses every module of the lab extra (ipywidgets and IPython among them) imports
    the state, plans, models, suggests and draws."""
    code = textwrap.dedent(f"""
        import sys, importlib.abc
        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {LAB_MODULES!r}:
                    raise ImportError(f"{{name}} is hidden for this test")
        sys.meta_path.insert(0, Refuse())
        from combine_lab.lab.tuning import TuningState
        s = TuningState(targets=["cpu"], **{SMALL!r})
        assert s.plan is not None and s.message == "", s.message
        assert s.suggest() is not None and s.use_suggestion() is not None
        s.set(topk=9, loops=0)
        assert [p.name for p in s.problems] == ["loops", "topk"], s.problems
        s.set(topk=2, loops=1)
        svg = s.figures["segment_map"].svg
        assert svg.startswith("<svg") and "cl-segment-map" in svg
        hidden = [m for m in sys.modules if m.split(".")[0] in {LAB_MODULES!r}]
        assert not hidden, hidden
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_set_values_plans_without_running(nothing_launches):
    s = TuningState(targets=["cpu"], **SMALL)
    assert s.message == "" and s.problems == [] and s.plan is not None and s.replans == 1
    assert listed(s) == planner_says(s, s.values()["min_sdma_bytes"])
    assert sum(map(len, listed(s).values())) > 0
    case = s.case
    assert s.set(h=16384) is s.plan and s.spec.h == 16384 and s.replans == 2
    assert s.case is case  # only bytes per row changed: the drawn routing is reused
    assert listed(s) == planner_says(s, s.values()["min_sdma_bytes"])
    s.set(min_sdma_bytes=0)
    assert listed(s) == planner_says(s, 0)
    s.set(min_sdma_bytes=1 << 40)
    assert s.sdma_table.empty
    s.set(routing_model="zipf")  # a new model: its default skew, unless one is given with it
    assert s.values()["skew"] == 1.2 and s.spec.routing == "zipf:1.2" and s.skew_name() == "S"
    s.set(routing_model="hot-rank", skew=0.3)
    assert s.spec.routing == "hot-rank:0.3"
    s.set(routing_model="trace", pes=4, trace="mixtral/arxiv/15", min_sdma_bytes=0)
    assert s.spec.routing == "trace:mixtral/arxiv/15" and s.skew_name() is None
    assert listed(s) == planner_says(s, 0)
    assert s.history.empty and s.last_runs is None and s.stale_views == []
    with pytest.raises(ParameterError, match="unknown values"):
        s.set(colour="red")


def test_every_problem_is_reported_at_once_and_no_value_is_changed(nothing_launches):
    s = TuningState(targets=["cpu"], **SMALL)
    s.set(h=-8, topk=9, loops=0, min_sdma_bytes=-1, warmup="1", target="npu", dtype="float32_t")
    assert s.plan is None and s.spec is None and s.case is None
    by_name = {p.name: p for p in s.problems}
    assert set(by_name) == {"h", "topk", "loops", "min_sdma_bytes", "warmup", "target", "dtype"}, s.problems
    assert str(by_name["h"]) == "h=-8: must be >= 1 elements"
    assert str(by_name["loops"]) == "loops=0: must be an int >= 1"
    assert str(by_name["warmup"]) == "warmup='1': must be an int >= 0"
    assert str(by_name["min_sdma_bytes"]) == "min_sdma_bytes=-1: must be an int >= 0"
    assert str(by_name["target"]) == "target='npu': not offered here (offered: 'cpu')"
    assert str(by_name["dtype"]).startswith("dtype='float32_t': not offered here")
    # the routing's own limit, said although h and dtype are wrong too (they play no part in it)
    assert str(by_name["topk"]).startswith("topk=9: must be <= moe_expert_num=4")
    assert s.message.startswith("Cannot plan this case: ") and s.message.endswith(". Nothing was run.")
    assert all(str(p) in s.message for p in s.problems)
    # never silently changed: the values are the ones given
    v = s.values()
    assert (v["h"], v["topk"], v["loops"], v["min_sdma_bytes"], v["warmup"], v["target"]) == (-8, 9, 0, -1, "1", "npu")
    assert s.modelled == {} and s.suggestion is None and list(s.figures) == []
    assert s.prepare_run() is None and s.run() is None and s.suggest() is None and "Cannot suggest" in s.message
    # a skew the routing cannot take, a non-number skew, a trace of another expert count
    s.set(h=8192, topk=2, loops=1, min_sdma_bytes=0, warmup=0, target="cpu", dtype="int32_t", skew=0.9)
    assert [str(p) for p in s.problems] == ["skew=0.9: F=0.9 must be <= 1/topk=0.5 (topk=2): a token picks each "
                                            "expert at most once"]
    s.set(skew="lots")
    assert [str(p) for p in s.problems] == ["skew='lots': must be a finite number"]
    s.set(routing_model="deepseek", skew="lots")  # a model without a skew: the box is not read
    assert s.problems == [] and s.plan is not None
    s.set(routing_model="trace", trace="olmoe/github/7")
    assert [p.name for p in s.problems] == ["trace"] and "must equal the trace's expert count" in s.message
    # uniform draws x to plan: a size limit of the whole case
    s.set(routing_model="uniform", pes=64, bs=4096, h=7168, topk=2, expert_per_pe=2)
    assert [p.name for p in s.problems] == ["case"] and "draws x" in s.message
    # nothing is marked at a control, so the note beside Run does not say "marked above" (issue 32)
    assert s.run_refusal().startswith("the case cannot be planned here: routing 'uniform' follows the reference")
    s.set(loops=0)
    assert s.run_refusal().startswith("1 value cannot be used (marked above): loops=0: must be an int >= 1; "
                                      "the case cannot be planned here: routing 'uniform'"), s.run_refusal()


def test_a_field_reports_each_reason():
    f = Field("h", "int", 64, minimum=64, maximum=16384, step=64, unit="elements")
    assert f.check(128) == []
    assert [p.reason for p in f.check(100)] == ["must be a multiple of 64"]
    assert [p.reason for p in f.check(32768 + 32)] == ["must be <= 16384 elements", "must be a multiple of 64"]
    assert [p.reason for p in f.check(True)] == ["must be an integer"]
    assert Problem("case", None, "too big").__str__() == "too big"
    assert list(FIELDS)[:5] == ["pes", "bs", "h", "topk", "expert_per_pe"] and list(FIELDS)[-1] == "model"


def _truth(state, floor, model_name="a3"):
    model = load_model(model_name)
    rows = case_rows(make_case(state.spec), model.soc)
    return model, rows, {v: replay(rows, rows.sdma(v, floor), model).core_max("comm_only").max()
                         for v in ("classic", "doubleplane")}


def test_modelled_panel_and_suggest(nothing_launches, monkeypatch):
    s = TuningState(targets=["cpu"], **{**SMALL, "min_sdma_bytes": 0})
    model, rows, truth = _truth(s, 0)
    m = s.modelled
    assert m["model"] == "a3" and m["floor"] == 0 and m["caption"] == model.caption() and m["curve"]
    assert m["classic_us"] == pytest.approx(truth["classic"], rel=1e-12)
    assert m["doubleplane_us"] == pytest.approx(truth["doubleplane"], rel=1e-12)
    assert m["speedup"] == pytest.approx(m["classic_us"] / m["doubleplane_us"])
    fig = s.figures["modelled"]
    assert isinstance(fig, SvgFigure) and "data-floor='0'" in fig.svg and "cl-curve" in fig.svg
    s.set(model="a2")  # the machine: another caption and time, the same plan
    a2, _, truth2 = _truth(s, 0, "a2")
    assert s.modelled["model"] == "a2" and s.modelled["caption"] == a2.caption()
    assert s.modelled["doubleplane_us"] == pytest.approx(truth2["doubleplane"], rel=1e-12)
    assert s.run_inputs().keys() == set(FIELDS) - {"model"}
    # a large case: the curve waits for suggest()
    monkeypatch.setattr(tuning_model, "AUTO_SUGGEST_SEGMENTS", 0)
    s.set(model="a3", h=4096)
    assert s.suggestion is None and not s.modelled["curve"] and s.suggested_floor() is None
    assert s.use_suggestion() is None and s.suggest_size() == (2, 8)
    got = s.suggest()
    want = suggest(case_rows(make_case(s.spec), model.soc), model)
    assert got.curve.equals(want.curve) and got.best.equals(want.best) and s.modelled["curve"]
    assert s.suggest_seconds > 0 and "cl-best" in s.figures["modelled"].svg
    floor = s.use_suggestion()
    assert s.values()["min_sdma_bytes"] == floor == s.plan.min_sdma_bytes
    assert s.modelled["doubleplane_us"] == pytest.approx(float(want.best["modelled_us"]), rel=1e-9)
    assert s.suggestion is got  # the floor changed, not the case: the curve still holds
    s.set(h=8192)  # the bytes changed: the curve is gone until asked for again
    assert s.suggestion is None and s.use_suggestion() is None


def test_run_on_twin_rows_history_and_staleness(tmp_path, no_leaks):
    s = TuningState(targets=["cpu"], **SMALL)
    s.set(repeats=2)
    steps = []
    runs = s.run(progress=lambda done, total, text: steps.append((done, total)))
    assert runs is not None, s.message
    # the bar counts the launches of all PEs: build, 2 repeats x 2 variants x 2 profiled PEs, check
    assert steps == [(v, 10) for v in range(10)] + [(9, 10)] and not s.running and s.message == ""
    assert [(o.run.variant, o.repeat) for o in runs.outcomes] == [
        ("classic", 0), ("doubleplane", 0), ("doubleplane", 1), ("classic", 1)]  # interleaved, the order flipped
    assert set(runs) == {"classic", "doubleplane"} and all(r.ok for r in runs.values())
    assert runs["doubleplane"].plane_bytes()["sdma_bytes"].sum() == s.plan.totals["sdma_bytes"].sum() > 0
    h = s.history
    assert list(h["run"]) == [1] and list(h["check"]) == ["PASS"] and bool(h["counters_ok"].iloc[0])
    # the history's numbers are the summary over repeats, as the CLI and 03_sweep give them: per
    # repeat the slowest profiled PE's comm_only; the speed-up of each repeat's own pair
    per = {(o.run.variant, o.repeat): o.perf.loc[o.perf["Metric"] == "comm_only", "CoreMaxTime/us"].max()
           for o in runs.outcomes}
    ratios = [per[("classic", k)] / per[("doubleplane", k)] for k in (0, 1)]
    assert h["repeats"].iloc[0] == 2
    assert h["comm_only_classic_us"].iloc[0] == pytest.approx(np.median([per[("classic", k)] for k in (0, 1)]))
    assert h["comm_only_speedup"].iloc[0] == pytest.approx(np.median(ratios))
    assert (h["comm_only_speedup_lo"].iloc[0], h["comm_only_speedup_hi"].iloc[0]) == pytest.approx(
        (min(ratios), max(ratios)))
    assert h["comm_only_verdict"].iloc[0] == ("faster" if min(ratios) > 1 else "slower" if max(ratios) < 1
                                              else "within noise")
    assert list(s.rows["run"]) == [1, 1] and list(s.rows["variant"]) == ["classic", "doubleplane"]
    v = s.verdict()
    assert v["run"] == 1 and v["target"] == "cpu" and v["case_id"] == s.spec.case_id
    assert [(x["check"], x["bad_pes"], x["mismatches"]) for x in v["variants"]] == [("PASS", [], [])] * 2
    c = s.counters()
    assert sorted(c["variant"].unique()) == ["classic", "doubleplane"] and c["sdma_bytes"].sum() > 0
    assert list(s.figures) == ["segment_map", "plane_bytes", "modelled", "compare", "history"]
    assert s.stale_views == [] and s.stale_reason() == ""

    s.set(h=4096)  # a valid change: the run views no longer describe the inputs
    assert s.stale_views == list(RUN_VIEWS) and s.changed_since_run() == ["h"]
    assert s.stale_reason() == "changed since: h" and "compare" not in s.figures
    assert s.verdict()["run"] == 1 and s.compare_figure is not None  # still there, to show dimmed
    s.set(model="a2")  # the model only prices the plan: nothing more goes stale
    assert s.changed_since_run() == ["h"]
    s.set(topk=99)
    assert s.stale_reason() == "the inputs cannot be planned"
    assert list(s.figures) == ["history"]
    if PNG:
        assert sorted(p.name for p in s.save_figures(tmp_path, prefix="t_")) == ["t_history.png"]
    s.set(topk=2, h=8192)  # the inputs of run 1 again: its views are current
    assert s.stale_views == [] and "compare" in s.figures
    if PNG:
        assert sorted(p.name for p in s.save_figures(tmp_path, prefix="t_")) == \
            ["t_compare.png", "t_history.png", "t_modelled.png", "t_plane_bytes.png", "t_segment_map.png"]

    s.set(min_sdma_bytes=1 << 40)
    assert s.run() is not None
    assert list(s.history["run"]) == [1, 2] and s.history["sdma_share"].iloc[1] == 0 and len(s.rows) == 4
    assert not host_processes()


def test_run_goes_through_execute_once_and_failures_clear_the_run_views(monkeypatch, tmp_path):
    s = TuningState(targets=["cpu"], max_run_bytes=1 << 20, **SMALL)
    calls = []
    monkeypatch.setattr(build_mod, "build", lambda target: calls.append(("build", target)))

    def fake(case, **kw):
        calls.append(("compare", kw))
        raise LaunchError("PE 1 exited with status 3")
    monkeypatch.setattr(harness, "compare", fake)
    assert s.run() is None and s.message.startswith("Not run: ") and "Nothing was launched" in s.message
    assert calls == []
    s.max_run_bytes = 1 << 40
    assert s.run() is None and s.message == "Run failed: LaunchError: PE 1 exited with status 3"
    assert s.run_error == "LaunchError: PE 1 exited with status 3" and not s.running
    assert calls == [("build", "cpu"), ("compare", {"warmup": 0, "loops": 1, "target": "cpu",
                                                    "min_sdma_bytes": 2 << 20, "prof_pe": "all", "repeats": 1,
                                                    "timeout_s": s.timeout_s, "on_launch": calls[1][1]["on_launch"],
                                                    "settings": KernelSettings()})]
    assert s.history.empty and s.verdict() is None and s.counters() is None and "compare" not in s.figures
    # the harness is one method: another one is swapped in there
    request = s.prepare_run()
    assert request.values == s.run_inputs() and request.prof_pe == "all" and request.launches == 2 * 2 * 1
    assert request.case.spec == s.spec
    # the progress says what a start of the PEs is, and what the count multiplies (issue 32)
    said = []
    s.set(repeats=3)
    monkeypatch.setattr(harness, "compare", lambda case, **kw: [kw["on_launch"](0) for _ in range(12)] and None)
    s.execute(s.prepare_run(), lambda done, total, text: said.append((done, total, text)))
    each = f"all 2 PEs, {SMALL['warmup'] + SMALL['loops']} kernel launches each"
    assert said[1] == (1, 14, f"start 1 of 12 of the PEs (2 variants x 3 repeats x 2 profiled PEs; {each})...")
    assert said[-3][2].startswith("start 12 of 12 of the PEs") and said[-1] == (13, 14, "checking x_out and counters...")


def test_the_modelled_panel_gives_the_verdict_over_engines_and_refuses_a_machine_too_small(nothing_launches):
    from combine_lab.model.unknowns import engines_curve, engines_line

    s = TuningState(targets=["cpu"], **{**SMALL, "min_sdma_bytes": 0})
    model, rows, _ = _truth(s, 0)
    assert s.modelled["engines_line"] == engines_line(0, engines_curve(rows, model, 0))
    assert s.modelled["engines_line"].startswith("doubleplane at floor 0 B: ")
    assert s.suggestion.verdict is not None  # small: the curve and its verdict at each replan
    s.set(model="a2", pes=16)  # one A2 server has 8 NPUs: the model says so and prices nothing
    assert s.plan is not None and s.modelled == {
        "model": "a2", "caption": load_model("a2").caption(),
        "refused": "pes=16: a2 models at most 8 PEs (one A2 server: 8 cards in an HCCS full mesh; between A2 "
                   "servers (RoCE) no one-stream table is published, so the model stops at 8 PEs (a3 models more))"}
    assert s.suggest() is None and s.message.startswith("Cannot suggest a floor on a2: pes=16: a2 models at most 8")
    assert "modelled" not in s.figures
    s.set(model="a3")
    assert s.modelled["model"] == "a3" and "refused" not in s.modelled


# ---- issue 24 item 4: kernel settings in the tuning app ----

def _settings_state(**kw):
    return TuningState(["cpu"], pes=2, bs=16, h=64, topk=2, expert_per_pe=2, routing_model="hot-expert", skew=0.5,
                       warmup=0, loops=1, repeats=1, min_sdma_bytes=0, **kw)


def test_settings_are_values_checked_like_the_others(monkeypatch):
    monkeypatch.delenv("COMBINE_TWIN_SOC", raising=False)
    s = _settings_state()
    assert s.settings == KernelSettings() and int(s.plan.totals["sdma_calls"].sum()) == 22  # one call per SDMA row
    assert s.modelled["settings"] == "reference" and s.modelled["classic_us"] > 0
    s.set(cores_per_rank=41, segment="on")
    assert s.plan is None and s.settings is None and s.run_refusal().startswith("2 values cannot be used")
    assert [str(p) for p in s.problems] == [
        "segment layout='on': not offered here (offered: False, True)",
        "cores per rank=41: must be <= 40 cores (the 40 AIV cores of Ascend910B3; at most 48 cores issue SDMA)"]
    s.set(cores_per_rank=0, segment=True)
    assert [str(p) for p in s.problems] == ["cores per rank=0: must be >= 1"]
    monkeypatch.setenv("COMBINE_TWIN_SOC", "Ascend910B2")
    s.set(cores_per_rank=48)
    assert s.problems == [] and s.settings == KernelSettings(True, 48) and s.cores_limit() == 48
    s.set(cores_per_rank=4)
    # the rule's planes stay; the calls are the segment variant's: one per non-empty chunk of each SDMA segment
    assert len(s.sdma_table) == 2 and int(s.plan.totals["sdma_calls"].sum()) == 8
    assert s.plan.settings.label == "segment-c4"
    assert s.modelled["settings"] == "segment-c4" and "modelled" in s.figures  # a3 prices them (48 AIV cores a die)
    # 48 cores per rank on a2's Ascend910B3 (40 AIV cores): the twin here can run it, a2 cannot; said, no number
    s.set(model="a2", cores_per_rank=48)
    assert s.problems == [] and s.plan is not None
    assert s.modelled["not_modelled"] == ("not modelled for segment-c48 yet (cores_per_rank=48: must be an int in "
                                          "[1, 40] (the 40 AIV cores of Ascend910B3; at most 48 cores issue SDMA))")
    assert "classic_us" not in s.modelled and "modelled" not in s.figures and s.suggestion is None
    assert s.suggest() is None and s.message == "Cannot suggest a floor on a2: " + s.modelled["not_modelled"]


def test_a_run_uses_the_settings_and_history_carries_their_label(no_leaks):
    s = _settings_state(segment=True, cores_per_rank=4)
    runs = s.run()
    assert list(runs) == ["classic-c4", "doubleplane-segment-c4"]
    assert list(s.rows["variant"]) == ["classic-c4", "doubleplane-segment-c4"]
    assert list(s.rows["settings"]) == ["segment-c4"] * 2 and list(s.rows["cores_per_rank"]) == [4, 4]
    assert list(s.rows["sdma_calls"]) == [0, 8] and list(s.rows["sdma_bytes"]) == [0, 5632]
    h = s.history.iloc[-1]
    assert h["settings"] == "segment-c4" and h["check"] == "PASS" and h["counters_ok"]
    assert np.isfinite(h["comm_only_speedup"]) and h["sdma_share"] == pytest.approx(5632 / 16384)
    v = s.verdict()
    assert v["settings"] == "segment-c4"
    assert [(i["variant"], i["combine"], i["name"]) for i in v["variants"]] == [
        ("classic-c4", "classic", "classic (MTE only), c4"),
        ("doubleplane-segment-c4", "doubleplane", "doubleplane (MTE + SDMA), segment-c4")]
    c = s.counters()
    assert list(c["variant"]) == ["classic-c4"] * 2 + ["doubleplane-segment-c4"] * 2
    assert list(c["sdma_puts"]) == [0, 0, 4, 4]
    s.set(segment=False)
    assert s.stale_views == list(RUN_VIEWS) and s.stale_reason() == "changed since: segment layout"
    snap = s.snapshot()
    assert snap["values"]["segment"] is False and snap["values"]["cores_per_rank"] == 4
    assert snap["history"][0]["settings"] == "segment-c4"


def test_modelled_panel_prices_settings_against_their_own_classic():
    """Under settings c2 the panel's two numbers are the model's replay of classic-c2 and
    doubleplane-c2, its engine line against classic-c2, its curve suggest's under c2."""
    s = _settings_state(cores_per_rank=2)
    model = s.model()
    rows = case_rows(s.case, model.soc)
    classic = float(replay(rows.with_settings("c2"), rows.sdma("classic", 0), model).core_max("comm_only").max())
    dual = float(replay(rows.with_settings("c2"), rows.sdma("doubleplane", 0), model).core_max("comm_only").max())
    m = s.modelled
    assert m["settings"] == "c2" and m["labels"] == {"classic": "classic-c2", "doubleplane": "doubleplane-c2"}
    assert m["classic_us"] == pytest.approx(classic, rel=1e-12) and m["doubleplane_us"] == pytest.approx(dual, rel=1e-12)
    curve = engines_curve(rows.with_settings("c2"), model, 0, baseline="c2")
    assert m["engines_line"] == engines_line(0, curve, "doubleplane-c2")
    assert m["engines_line"].startswith("doubleplane-c2 at floor 0 B: ")
    expected = suggest(rows, model, "comm_only", settings="c2")
    pd.testing.assert_frame_equal(s.suggestion.curve, expected.curve)
    assert "modelled" in s.figures


def test_a_case_refusal_is_blamed_on_the_field_it_names_not_on_its_text(nothing_launches):
    """The form marks the field a SpecError names (``e.parameter``) with what it allows (``e.allowed``);
    a routing refusal marks the routing's own box (the skew of hot-expert); a SpecError naming no field of
    the form is the whole case's. A message that begins like another field's does not mislead it."""
    from combine_lab.errors import SpecError
    s = TuningState(targets=["cpu"], **SMALL)
    s.set(topk=9)
    assert [(p.name, p.value, p.reason) for p in s.problems] == [
        ("topk", 9, "must be <= moe_expert_num=4 when choices are distinct (routing 'hot-expert:0.5')")]
    s.set(topk=2, skew=0.9)
    assert [(p.name, p.value, str(p)) for p in s.problems] == [
        ("skew", 0.9, "skew=0.9: F=0.9 must be <= 1/topk=0.5 (topk=2): a token picks each expert at most once")]
    s.set(skew=0.5)
    misleading = SpecError("h=1: seems to be about h", parameter="topk", value=3, allowed="must be <= 2")
    assert s._blame(misleading) == ("topk", 2, "must be <= 2")
    assert s._blame(SpecError("routing='hot-expert:0.5': too hot", parameter="routing", value="hot-expert:0.5",
                              allowed="too hot")) == ("skew", 0.5, "too hot")
    assert s._blame(SpecError("pes=2: no reason given apart", parameter="pes", value=2)) == (
        "case", None, "pes=2: no reason given apart")
    assert s._blame(SpecError("x: of another kind", parameter="x", value=None, allowed="no")) == (
        "case", None, "x: of another kind")
