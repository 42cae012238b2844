"""One result row per run: the same RunResult gives the same values in the CLI table, the sweep CSV
and the tuning app; a refused variant is a row with its reason everywhere (the app included)."""

from __future__ import annotations

import math
import warnings

import pytest
from conftest import LAB_EXTRA, run_table, speedup_table

from combine_lab import cli
from combine_lab.case.spec import CaseSpec
from combine_lab.errors import ParameterError
from combine_lab.formats.perf_csv import gib_per_s
from combine_lab.lab import sweep
from combine_lab.results import tables
from combine_lab.results.rows import (COMPARISON_COLUMNS, ERROR, FAIL, NO_SDMA, PASS, REFUSED, ROW_COLUMNS, NotRun,
                                      ResultRow, compare_rows, modelled_verdict, result_row, speedup, spread,
                                      verdict)
from combine_lab.run import runner
from combine_lab import harness
from combine_lab.harness import Comparison
from combine_lab.run.runner import run_case

#: A small case with SDMA segments at floor 0 (zipf skew puts some above the remote average).
SPEC = CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=2, routing="zipf:1.2")
FLAGS = ["-pes", "2", "-bs", "8", "-h", "64", "-topk", "2", "-expertPerPe", "2", "--routing", "zipf:1.2",
         "--min-sdma-bytes", "0", "--warmup", "0", "--loops", "1"]
REFUSED_WHY = ("variant=doubleplane on target=npu: refused: the dual-plane combine needs SDMA, which needs CANN "
               "9.0.0 or later (found CANN 8.3.RC1 at {}/cann); the classic variant still runs")


def same(a, b) -> bool:
    """Equal, NaN equal to NaN (how a row says "not measured")."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def assert_same_row(got: dict, want: dict, where: str) -> None:
    diff = {k: (got[k], want[k]) for k in ROW_COLUMNS if not same(got[k], want[k])}
    assert not diff, f"{where}: {diff}"


@pytest.fixture(scope="module")
def two_runs(twin_binary):
    """One real RunResult per variant on the twin (profiled, counted)."""
    return {v: run_case(SPEC, v, min_sdma_bytes=0, warmup=0, loops=1) for v in ("classic", "doubleplane")}


def test_the_same_run_gives_identical_values_in_cli_sweep_and_app(two_runs, monkeypatch, capsys, tmp_path, no_leaks):
    pytest.importorskip("ipywidgets", reason=LAB_EXTRA)
    from combine_lab.lab.app import TuningApp

    want = {v: result_row(res).as_dict() for v, res in two_runs.items()}
    assert want["doubleplane"]["sdma_bytes"] > 0 and want["classic"]["sdma_bytes"] == 0
    fake_run = lambda prepared, variant, **kw: two_runs[variant]  # noqa: E731

    # the CLI table: every printed value is the row's, as the table formats it; three repeats of the same
    # run: the median is the row's time and the spread is that time to itself
    monkeypatch.setattr(runner, "run_case", fake_run)
    assert cli.main(["compare", *FLAGS, "--perf", "--repeats", "3", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for line, variant in zip(run_table(out), ("classic", "doubleplane")):
        w = want[variant]
        assert line[:4] == [w["case_id"], w["routing"], variant, w["check"]], variant
        co, fo = round(w["comm_only_us"], 3), round(w["full_op_us"], 3)
        assert [float(line[4]), line[5], float(line[6]), line[7]] == [
            co, f"{w['comm_only_us']:.3f}-{w['comm_only_us']:.3f}", fo, f"{w['full_op_us']:.3f}-{w['full_op_us']:.3f}"]
        # the reference's Bandwidth: GlobalDataSize (pes * bs * topk * h * 4 B) / CoreMaxTime
        assert float(line[8]) == round(gib_per_s(2 * 8 * 2 * 64 * 4, w["comm_only_us"]), 3), variant
        # nccl-tests' algbw (bs * topk * h * 4 B a PE receives / its time, decimal GB/s) and busbw (* (n-1)/n)
        alg = 8 * 2 * 64 * 4 / w["comm_only_us"] / 1e3
        assert [float(line[9]), float(line[10])] == [round(alg, 3), round(alg / 2, 3)], variant
        assert line[11:] == [str(w["mte_bytes"]), str(w["sdma_bytes"]), str(w["planned_sdma_bytes"]), "yes",
                             str(w["violations"])], variant
    sp = speedup(want["classic"]["comm_only_us"], want["doubleplane"]["comm_only_us"])
    [line] = speedup_table(out)
    assert line[:3] == [SPEC.case_id, "zipf:1.2", "3"] and float(line[3]) == round(sp, 3)
    assert line[4] == f"{sp:.3f}-{sp:.3f}" and line[5] == ("faster" if sp > 1 else "slower")

    # the sweep CSV: every tidy row of a run carries the run's row
    monkeypatch.setattr(sweep.runner, "run_case", fake_run)
    tidy = sweep.run_sweep([SPEC], loops=1, repeats=1, min_sdma_bytes=0, progress=False)
    for variant in ("classic", "doubleplane"):
        mine = tidy[tidy["variant"] == variant]
        assert len(mine) == 2  # one profiled PE x two metrics
        for _, r in mine.iterrows():
            assert_same_row({k: (v.item() if hasattr(v, "item") else v) for k, v in r[ROW_COLUMNS].items()},
                            want[variant], f"sweep {variant}")

    # the tuning app: its rows are the same rows, its history compares them once
    monkeypatch.setattr(harness, "compare", lambda *a, **k: Comparison(two_runs))
    app = TuningApp(targets=["cpu"], pes=2, bs=8, h=64, topk=2, expert_per_pe=2, routing_model="zipf", skew=1.2,
                    min_sdma_bytes=0, warmup=0, loops=1)
    assert app.run() is not None, app.message
    for variant in ("classic", "doubleplane"):
        r = app.rows[app.rows["variant"] == variant].iloc[0]
        assert_same_row(r.to_dict(), want[variant], f"app {variant}")
    history = app.history.iloc[0]
    cmp = compare_rows([result_row(res) for res in two_runs.values()])
    assert all(same(history[k], cmp[k]) for k in COMPARISON_COLUMNS)
    assert history["comm_only_speedup"] == want["classic"]["comm_only_us"] / want["doubleplane"]["comm_only_us"]
    # the sweep's summary computes the same speed-up (one repeat, one profiled PE)
    summary = tables.summarize(tidy).iloc[0]
    assert summary["comm_only_speedup"] == history["comm_only_speedup"]
    assert summary["full_op_speedup"] == history["full_op_speedup"]
    # the one fold over repeats the app's history is (results.tables.compare_over_repeats): this
    # Comparison has no outcomes (nothing over repeats: no spread, "no run"), the sweep's tidy has one
    over = tables.compare_over_repeats([result_row(res) for res in two_runs.values()], None)
    diff = {k: (over[k], history[k]) for k in [*COMPARISON_COLUMNS, "comm_only_speedup_lo", "comm_only_verdict"]
            if not same(over[k], history[k])}
    assert diff == {}
    over = tables.compare_over_repeats([result_row(res) for res in two_runs.values()], tidy)
    assert (over["comm_only_speedup"], over["comm_only_speedup_lo"], over["comm_only_speedup_hi"]) == (
        summary["comm_only_speedup"], summary["comm_only_speedup"], summary["comm_only_speedup"])


def test_one_fold_of_repeats():
    """Median, min and max of the repeats, NaN left out: the run table, summaries and pairs fold with it."""
    from combine_lab.results.rows import fold_repeats
    assert fold_repeats([3.0, float("nan"), 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert fold_repeats([4.0, 1.0]) == (2.5, 1.0, 4.0)
    assert all(math.isnan(v) for v in fold_repeats([float("nan")]))


def test_a_refused_doubleplane_is_a_row_with_its_reason_in_the_app(old_cann_npu, tmp_path, no_leaks):
    """On an NPU whose CANN has no SDMA the app runs classic and shows doubleplane as REFUSED, with
    the reason, instead of failing on the missing result."""
    pytest.importorskip("ipywidgets", reason=LAB_EXTRA)
    from combine_lab.lab.app import TuningApp

    why = REFUSED_WHY.format(tmp_path)
    app = TuningApp(targets=["cpu", "npu"], pes=2, bs=8, h=64, topk=2, expert_per_pe=2, routing_model="zipf",
                    skew=1.2, min_sdma_bytes=0, warmup=0, loops=1, target="npu")
    runs = app.run()
    assert runs is not None and app.message == "", app.message
    assert list(runs) == ["classic"] and runs.refused == {"doubleplane": why}
    rows = app.rows.set_index("variant")
    assert rows.loc["classic", "check"] == PASS and rows.loc["classic", "target"] == "npu"
    assert rows.loc["doubleplane", "check"] == REFUSED and rows.loc["doubleplane", "reason"] == why
    assert math.isnan(rows.loc["doubleplane", "comm_only_us"])
    h = app.history.iloc[0]
    assert h["check"] == PASS and h["reason"] == f"doubleplane: {why}"
    assert h["comm_only_classic_us"] > 0 and math.isnan(h["comm_only_doubleplane_us"])
    assert math.isnan(h["comm_only_speedup"]) and math.isnan(h["sdma_share"])
    assert "REFUSED" in app.verdict_html.value and "PASS on every PE" in app.verdict_html.value
    assert "<svg" in app.compare_html.value and "<svg" in app.history_plot_html.value
    assert set(old_cann_npu) == {"npu"}


def test_a_refused_doubleplane_is_a_row_with_its_reason_in_the_sweep(old_cann_npu, tmp_path, no_leaks):
    why = REFUSED_WHY.format(tmp_path)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tidy = sweep.run_sweep([SPEC], target="npu", loops=1, repeats=2, min_sdma_bytes=0, progress=False)
    assert [str(x.message) for x in w] == [why]
    refused = tidy[tidy["variant"] == "doubleplane"]
    assert len(refused) == 2 and (refused["check"] == REFUSED).all() and (refused["reason"] == why).all()
    ran = tidy[tidy["variant"] == "classic"]
    assert len(ran) == 2 * 2 and (ran["check"] == PASS).all()  # repeats x metrics
    s = tables.summarize(tidy).iloc[0]
    assert s["check_ok"] and s["comm_only_verdict"] == "no run" and s["repeats"] == 0


def test_row_of_a_variant_that_did_not_run():
    row = result_row(NotRun.of(SPEC, "doubleplane", "npu", REFUSED, "no SDMA here", 0))
    d = row.as_dict()
    assert list(d) == ROW_COLUMNS
    assert (row.case_id, row.routing, row.dtype, row.target, row.variant, row.check, row.reason) == (
        SPEC.case_id, "zipf:1.2", "int32_t", "npu", "doubleplane", REFUSED, "no SDMA here")
    assert row.mte_bytes is None and row.counters_ok is None and math.isnan(row.comm_only_us)
    assert not row.ran and not row.ok
    with pytest.raises(ParameterError, match="check='PASS'"):
        NotRun.of(SPEC, "classic", "cpu", PASS, "")
    with pytest.raises(ParameterError, match="outcome=dict"):
        result_row({})
    with pytest.raises(ParameterError, match="metric='x'"):
        row.time_us("x")


def test_speedup_and_verdict_are_computed_in_one_place():
    assert speedup(10.0, 5.0) == 2.0 and math.isnan(speedup(10.0, 0.0)) and math.isnan(speedup(float("nan"), 5.0))
    assert speedup([10.0, 12.0], [5.0, 0.0])[0] == 2.0
    assert verdict([2.0, 1.5], 100) == "faster" and verdict([0.9, 0.5], 100) == "slower"
    assert verdict([2.0, 0.5, float("nan")], 100) == "within noise"  # the spread 0.5-2.0 covers 1
    assert verdict([1.0, 1.2], 100) == "within noise"  # a repeat at exactly 1 is not faster
    assert spread([3.0, float("nan"), 1.0, 2.0]) == (1.0, 3.0) and all(map(math.isnan, spread([])))
    assert verdict([2.0], 0) == NO_SDMA and verdict([], 100) == "no run" and verdict([0.5], 1) == \
        "slower (1 repeat: no spread)"
    assert verdict([1.0], 1) == "tie (1 repeat: no spread)"  # one repeat at exactly 1 is neither way
    # a timing model's point: within the model's resolution (5 %) of 1 it is a tie (the model's "parity")
    assert [modelled_verdict(x, 1) for x in (1.0, 1.049, 0.951, 1.06, 0.94)] == [
        "tie (modelled point, within 5 %)"] * 3 + ["faster (modelled point)", "slower (modelled point)"]
    assert modelled_verdict(2.0, 0) == NO_SDMA and modelled_verdict(float("nan"), 1) == "no run"


def test_compare_rows_of_a_failed_and_an_errored_run():
    nan = float("nan")
    base = dict(case_id="c", routing="u", dtype="int32_t", target="cpu", min_sdma_bytes=0, mte_bytes=1,
                sdma_bytes=1, payload_bytes=2, planned_sdma_bytes=1, sdma_share=0.5, counters_ok=True,
                violations=0, max_abs_err=0.0)
    classic = ResultRow(variant="classic", check=FAIL, comm_only_us=4.0, full_op_us=8.0, **base)
    dual = result_row(NotRun("c", "u", "int32_t", "cpu", "doubleplane", ERROR, "PE 1 exited with status 3"))
    out = compare_rows([classic, dual])
    assert out["check"] == FAIL and out["comm_only_classic_us"] == 4.0 and math.isnan(out["comm_only_speedup"])
    assert out["reason"] == "doubleplane: PE 1 exited with status 3" and math.isnan(out["sdma_share"]) is True
    assert compare_rows([ResultRow(variant="doubleplane", check=PASS, comm_only_us=2.0, full_op_us=nan, **base),
                         classic])["comm_only_speedup"] == 2.0
