"""Sweeps: grid validation, papermill-style parameters, the tidy CSV, summaries and losses."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from combine_lab import labio, sweep
from combine_lab.errors import SpecError
from combine_lab.results import PERF_COLUMNS


@pytest.mark.parametrize("value, kind, want", [
    ([8, 16], int, [8, 16]), ("[8,16]", int, [8, 16]), ("8,16", int, [8, 16]), ("8 16", int, [8, 16]),
    (8, int, [8]), ("[\"uniform\", \"zipf:1.2\"]", str, ["uniform", "zipf:1.2"]), ("uniform,zipf:1.2", str,
                                                                              ["uniform", "zipf:1.2"]),
    ("['uniform', 'hot-rank:0.5']", str, ["uniform", "hot-rank:0.5"]), ("int32_t", str, ["int32_t"]),
    ((4.0,), int, [4]),
])
def test_as_list_reads_papermill_values(value, kind, want):
    assert labio.as_list(value, kind, "x") == want


@pytest.mark.parametrize("value, kind, fragment", [("[8, x]", int, "'x' is not a valid int"), ("", int, "at least one"),
                                                   ([2.5], int, "2.5 is not an integer")])
def test_as_list_refuses_with_the_parameter_name(value, kind, fragment):
    with pytest.raises(SpecError, match="bs_list="):
        labio.as_list(value, kind, "bs_list")
    with pytest.raises(SpecError, match=fragment):
        labio.as_list(value, kind, "bs_list")


def test_make_grid_validates_every_case_first():
    g = sweep.make_grid([2], "[8,16]", "64", [2], [1, 2], "uniform,zipf:1.2")
    assert len(g) == 2 * 2 * 2 and not g.skipped
    assert [s.routing for s in g.specs[:4]] == ["uniform"] * 4
    assert [(s.bs, s.expert_per_pe) for s in g.specs[:4]] == [(8, 1), (8, 2), (16, 1), (16, 2)]
    with pytest.raises(SpecError, match=r"1 of 2 sweep cases are invalid: .*topk=3: must be <= moe_expert_num=2"):
        sweep.make_grid([2], [8], [64], [3], [1, 2], ["zipf:1.2"])
    g = sweep.make_grid([2], [8], [64], [3], [1, 2], ["zipf:1.2"], skip_invalid=True)
    assert len(g) == 1 and len(g.skipped) == 1 and g.skipped[0][0]["expert_per_pe"] == 1


def test_run_sweep_writes_a_tidy_csv(tmp_path, no_leaks):
    g = sweep.make_grid([2], [64], [8192], [2], [2], ["uniform", "hot-expert:0.5"])
    path = tmp_path / "out" / "sweep.csv"
    tidy = sweep.run_sweep(g, warmup=0, loops=1, csv_path=path, progress=False)
    assert list(tidy.columns) == sweep.TIDY_COLUMNS
    assert len(tidy) == 2 * 2 * 2  # cases x variants x metrics (one profiled PE)
    assert (tidy["check"] == "PASS").all() and tidy["counters_ok"].all() and (tidy["error"] == "").all()
    assert set(tidy["variant"]) == {"classic", "doubleplane"}
    assert (tidy.loc[tidy["variant"] == "classic", "sdma_bytes"] == 0).all()
    hot_dual = tidy[(tidy["routing"] == "hot-expert:0.5") & (tidy["variant"] == "doubleplane")]
    assert (hot_dual["sdma_bytes"] == hot_dual["planned_sdma_bytes"]).all() and (hot_dual["sdma_bytes"] > 0).all()
    assert np.allclose(tidy["sdma_share"], tidy["sdma_bytes"] / tidy["payload_bytes"])
    back = sweep.read_sweep_csv(path)
    assert list(back.columns) == sweep.TIDY_COLUMNS and len(back) == len(tidy)
    assert (back["CoreMaxTime/us"].to_numpy() == pytest.approx(tidy["CoreMaxTime/us"].to_numpy()))
    assert all(len(s.split(";")) == 2 for s in back["core_times_us"])  # block_dim = pes cores
    s = sweep.summarize(back)
    assert len(s) == 2 and s["check_ok"].all() and s["counters_ok"].all()
    assert s.loc[s["routing"] == "uniform", "sdma_share"].iloc[0] == 0
    assert s.loc[s["routing"] == "hot-expert:0.5", "sdma_share"].iloc[0] > 0


def test_run_sweep_refuses_bad_loops_before_anything_runs(monkeypatch):
    monkeypatch.setattr(sweep.runner, "compare", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SpecError, match="loops=0"):
        sweep.run_sweep(sweep.make_grid([2], [8], [64], [2], [2], ["uniform"]), loops=0)


def test_failed_case_is_recorded_and_the_sweep_goes_on(monkeypatch, no_leaks):
    from combine_lab.launch import LaunchError
    real = sweep.runner.compare
    calls = []

    def flaky(spec, **kw):
        calls.append(spec)
        if len(calls) == 1:
            raise LaunchError("PE 0 exited with status 3\nlog tail")
        return real(spec, **kw)
    monkeypatch.setattr(sweep.runner, "compare", flaky)
    tidy = sweep.run_sweep(sweep.make_grid([2], [8, 16], [64], [2], [2], ["uniform"]), loops=1, progress=False)
    err = tidy[tidy["check"] == "ERROR"]
    assert len(err) == 4 and (err["error"] == "PE 0 exited with status 3").all() and (err["BS"] == 8).all()
    assert (tidy.loc[tidy["check"] != "ERROR", "check"] == "PASS").all() and len(tidy) == 8
    assert not sweep.summarize(tidy).set_index("bs").loc[8, "check_ok"]


def _fake_tidy(rows):
    out = []
    for case, routing, bs, h, classic, dual, share in rows:
        for variant, t in (("classic", classic), ("doubleplane", dual)):
            for metric, f in (("full_op", 2.0), ("comm_only", 1.0)):
                r = {c: 0 for c in PERF_COLUMNS}
                r.update({"CoreMaxTime/us": t * f, "Metric": metric, "CaseId": case, "BS": bs, "H": h, "Npus": 2,
                          "TopK": 2, "ExpertPerPe": 2, "Dtype": "int32_t", "core_times_us": "", "variant": variant,
                          "policy": "", "routing": routing, "seed": 42, "target": "cpu", "min_sdma_bytes": 1,
                          "mte_bytes": 1, "sdma_bytes": 0, "planned_sdma_bytes": 0, "payload_bytes": 1,
                          "sdma_share": share if variant == "doubleplane" else 0.0, "check": "PASS",
                          "max_abs_err": 0.0, "counters_ok": True, "error": ""})
                out.append(r)
    return pd.DataFrame(out, columns=sweep.TIDY_COLUMNS)


def test_summarize_and_losses():
    tidy = _fake_tidy([("a", "uniform", 8, 64, 10.0, 20.0, 0.0), ("b", "zipf:1", 8, 64, 10.0, 5.0, 0.5),
                       ("c", "zipf:1", 16, 64, 10.0, 12.0, 0.2)])
    s = sweep.summarize(tidy)
    assert list(s["comm_only_ratio"]) == [2.0, 0.5, 1.2]
    assert list(s["comm_only_speedup"]) == [0.5, 2.0, pytest.approx(1 / 1.2)]
    assert list(s["full_op_classic_us"]) == [20.0, 20.0, 20.0]
    lost = sweep.losses(s)
    assert list(lost["case_id"]) == ["a", "c"]  # worst first
    assert list(sweep.losses(s, "full_op")["case_id"]) == ["a", "c"]
    with pytest.raises(SpecError, match="metric='x'"):
        sweep.losses(s, "x")
    assert sweep.summarize(tidy.iloc[0:0]).empty
