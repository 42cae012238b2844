"""The tuning app's history without widgets (combine_lab/lab/history.py, issue 32 item 5): sorted
and filtered, exported as CSV, two Runs compared with ``combine-lab diff``'s verdicts."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from combine_lab.errors import ParameterError
from combine_lab.lab.history import (HISTORY_COLUMNS, compare_history_runs, history_csv, history_view,
                                     run_inputs_changed)
from combine_lab.results.diff import BEYOND_FASTER, BEYOND_SLOWER, ONE_REPEAT, WITHIN_NOISE

NAN = float("nan")


def _run(n, floor, classic, dual, *, spread=(0.0, 0.0), repeats=3, routing="zipf:1.2", settings="reference",
         verdict="faster"):
    """A history row: comm_only and full_op times (us) of both variants with the given -/+ spread."""
    row = {c: NAN for c in HISTORY_COLUMNS}
    lo, hi = spread
    row.update(run=n, case_id="shape_64_8192_2_4_4", routing=routing, dtype="int32_t", target="cpu",
               min_sdma_bytes=floor, settings=settings, warmup=1, loops=3, repeats=repeats, sdma_share=0.4,
               check="PASS", counters_ok=True, reason="", comm_only_verdict=verdict, full_op_verdict=verdict)
    for m, k in (("comm_only", 1.0), ("full_op", 2.0)):
        for v, t in (("classic", classic), ("doubleplane", dual)):
            row[f"{m}_{v}_us"] = k * t
            row[f"{m}_{v}_lo_us"], row[f"{m}_{v}_hi_us"] = k * t - lo, k * t + hi
        row[f"{m}_speedup"] = classic / dual
        row[f"{m}_speedup_lo"] = (classic - lo) / (dual + hi)
        row[f"{m}_speedup_hi"] = (classic + hi) / (dual - lo)
    row["comm_only_classic_algbw_GBps"], row["comm_only_doubleplane_algbw_GBps"] = 10.0, 10.0 * classic / dual
    return row


HISTORY = pd.DataFrame([_run(1, 2_097_152, 100.0, 90.0, spread=(2.0, 2.0)),
                        _run(2, 1_933_312, 100.0, 70.0, spread=(2.0, 2.0), settings="segment-c4"),
                        _run(3, 0, 100.0, 120.0, spread=(30.0, 30.0), routing="hot-expert:0.5", verdict="slower")],
                       columns=HISTORY_COLUMNS)


def test_the_view_sorts_and_filters_by_every_word():
    assert list(history_view(HISTORY)["run"]) == [1, 2, 3]
    assert list(history_view(HISTORY, "comm_only_speedup", descending=True)["run"]) == [2, 1, 3]
    assert list(history_view(HISTORY, "min_sdma_bytes")["run"]) == [3, 2, 1]
    assert list(history_view(HISTORY, filter_text="ZIPF")["run"]) == [1, 2]
    assert list(history_view(HISTORY, filter_text="zipf segment-c4")["run"]) == [2]  # every word
    assert list(history_view(HISTORY, filter_text="slower")["run"]) == [3]
    assert list(history_view(HISTORY, filter_text="run=2")["run"]) == [2]
    assert history_view(HISTORY, filter_text="nowhere").empty
    with pytest.raises(ParameterError, match=r"sort_by='h': must be one of run, case_id") as e:
        history_view(HISTORY, "h")
    assert e.value.parameter == "sort_by"


def test_the_csv_holds_every_column_exactly():
    text = history_csv(history_view(HISTORY, "run", descending=True))
    back = pd.read_csv(io.StringIO(text))
    assert list(back.columns) == HISTORY_COLUMNS and list(back["run"]) == [3, 2, 1]
    assert text.splitlines()[0].startswith("run,case_id,routing,dtype,target,min_sdma_bytes,settings,")
    assert back.loc[1, "min_sdma_bytes"] == 1_933_312 and back.loc[1, "comm_only_speedup"] == 100.0 / 70.0
    assert back.loc[2, "comm_only_doubleplane_algbw_GBps"] == pytest.approx(10.0 * 100.0 / 90.0, rel=1e-15)
    assert back["comm_only_classic_busbw_GBps"].isna().all()  # NaN written empty, read back NaN


def test_two_runs_compared_with_diffs_verdicts():
    d = compare_history_runs(HISTORY, 1, 2)
    assert list(d.columns) == ["variant", "metric", "a", "a_spread", "b", "b_spread", "b_over_a", "verdict"]
    got = {(r.variant, r.metric): (r.a, r.b, r.verdict) for r in d.itertuples()}
    # doubleplane 90 +-2 against 70 +-2: the spreads do not overlap, B faster beyond noise; classic the same
    assert got[("doubleplane", "comm_only/us")] == (90.0, 70.0, BEYOND_FASTER)
    assert got[("classic", "comm_only/us")] == (100.0, 100.0, WITHIN_NOISE)
    assert got[("speed-up", "comm_only")][2] == BEYOND_FASTER  # the speed-up gained, higher is better
    assert d.loc[d["metric"] == "comm_only/us", "b_over_a"].tolist() == [1.0, 70.0 / 90.0]
    assert d.loc[0, "a_spread"] == "98.000-102.000"
    d3 = compare_history_runs(HISTORY, 2, 3)  # 70 +-2 against 120 +-30: slower beyond noise
    assert {(r.variant, r.metric): r.verdict for r in d3.itertuples()}[("doubleplane", "comm_only/us")] == BEYOND_SLOWER
    one = pd.DataFrame([_run(1, 0, 100.0, 90.0, repeats=1), _run(2, 0, 100.0, 80.0, repeats=1)], columns=HISTORY_COLUMNS)
    assert set(compare_history_runs(one, 1, 2)["verdict"]) == {ONE_REPEAT}  # no spread: never beyond noise
    with pytest.raises(ParameterError, match=r"b=7: no such run in the history \(runs: 1, 2, 3\)") as e:
        compare_history_runs(HISTORY, 1, 7)
    assert e.value.parameter == "b"


def test_what_differs_between_two_runs_inputs():
    rows = {int(r["run"]): r for _, r in HISTORY.iterrows()}
    assert run_inputs_changed(rows[1], rows[2]) == ["min_sdma_bytes 2,097,152 -> 1,933,312",
                                                    "settings reference -> segment-c4"]
    assert run_inputs_changed(rows[1], rows[1]) == []
