"""Sweeps: grid validation, the tidy CSV, summaries over repeats, losses."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from combine_lab.errors import ParameterError, SpecError
from combine_lab.lab import sweep
from combine_lab.results import rows, tables
from combine_lab.formats.perf_csv import PERF_COLUMNS


def test_make_grid_validates_every_case_first():
    g = sweep.make_grid([2], "[8,16]", "64", [2], [1, 2], "uniform,zipf:1.2")
    assert len(g) == 2 * 2 * 2 and not g.skipped
    assert [s.routing for s in g.specs[:4]] == ["uniform"] * 4
    assert [(s.bs, s.expert_per_pe) for s in g.specs[:4]] == [(8, 1), (8, 2), (16, 1), (16, 2)]
    with pytest.raises(SpecError, match=r"1 of 2 sweep cases are invalid: .*topk=3: must be <= moe_expert_num=2"):
        sweep.make_grid([2], [8], [64], [3], [1, 2], ["zipf:1.2"])
    g = sweep.make_grid([2], [8], [64], [3], [1, 2], ["zipf:1.2"], skip_invalid=True)
    assert len(g) == 1 and len(g.skipped) == 1 and g.skipped[0][0]["expert_per_pe"] == 1


def test_planned_shares_say_which_cases_send_by_sdma():
    g = sweep.make_grid([2], [64], [8192, 16384], [2], [2], ["uniform", "hot-expert:0.5"])
    shares = sweep.planned_shares(g)
    assert list(shares["case_id"]) == [s.case_id for s in g.specs]
    by = shares.set_index(["routing", "h"])["sdma_share"]
    assert by[("uniform", 8192)] == 0 and by[("hot-expert:0.5", 8192)] == 0.25
    assert (shares["payload_bytes"] == [64 * 2 * 2 * h * 4 for h in (8192, 16384)] * 2).all()
    # the floor decides: nothing reaches an enormous one, a low one lets more through
    assert (sweep.planned_shares(g, 1 << 40)["sdma_share"] == 0).all()
    assert sweep.planned_shares(g, 0)["sdma_share"].min() > 0


def test_run_sweep_writes_a_tidy_csv(tmp_path, no_leaks):
    g = sweep.make_grid([2], [64], [8192], [2], [2], ["uniform", "hot-expert:0.5"])
    path = tmp_path / "out" / "sweep.csv"
    tidy = sweep.run_sweep(g, warmup=0, loops=1, repeats=2, csv_path=path, progress=False)
    assert list(tidy.columns) == tables.TIDY_COLUMNS
    assert len(tidy) == 2 * 2 * 2 * 2  # cases x repeats x variants x metrics (one profiled PE)
    assert sorted(set(tidy["repeat"])) == [0, 1]
    assert (tidy["check"] == "PASS").all() and tidy["counters_ok"].all() and (tidy["reason"] == "").all()
    assert set(tidy["variant"]) == {"classic", "doubleplane"}
    assert (tidy.loc[tidy["variant"] == "classic", "sdma_bytes"] == 0).all()
    hot_dual = tidy[(tidy["routing"] == "hot-expert:0.5") & (tidy["variant"] == "doubleplane")]
    assert (hot_dual["sdma_bytes"] == hot_dual["planned_sdma_bytes"]).all() and (hot_dual["sdma_bytes"] > 0).all()
    assert np.allclose(tidy["sdma_share"], tidy["sdma_bytes"] / tidy["payload_bytes"])
    back = tables.read_sweep_csv(path)
    assert list(back.columns) == tables.TIDY_COLUMNS and len(back) == len(tidy)
    assert (back["CoreMaxTime/us"].to_numpy() == pytest.approx(tidy["CoreMaxTime/us"].to_numpy()))
    assert all(len(s.split(";")) == 2 for s in back["core_times_us"])  # block_dim = pes cores
    s = tables.summarize(back)
    assert list(s.columns) == tables.SUMMARY_COLUMNS and not [c for c in s.columns if "ratio" in c]
    assert len(s) == 2 and s["check_ok"].all() and s["counters_ok"].all() and (s["repeats"] == 2).all()
    uni, hot = s.set_index("routing").loc["uniform"], s.set_index("routing").loc["hot-expert:0.5"]
    assert uni["sdma_share"] == 0 and uni["comm_only_verdict"] == rows.NO_SDMA
    assert hot["sdma_share"] > 0 and hot["comm_only_verdict"] != rows.NO_SDMA
    assert hot["comm_only_speedup_lo"] <= hot["comm_only_speedup"] <= hot["comm_only_speedup_hi"]


def test_run_sweep_repeats_alternate_the_order_and_profile_every_pe(monkeypatch, tmp_path):
    """Each repeat runs both variants on the same case files, the first alternating; with
    prof_pe='all' the summary takes the slowest PE of each run."""
    calls = []
    real = sweep.runner.run_case

    def spy(prepared, variant, **kw):
        calls.append((id(prepared), variant, kw["prof_pe"]))
        return real(prepared, variant, **kw)
    monkeypatch.setattr(sweep.runner, "run_case", spy)
    tidy = sweep.run_sweep(sweep.make_grid([2], [8], [64], [2], [2], ["uniform"]), loops=1, repeats=3,
                           prof_pe="all", progress=False)
    assert [v for _, v, _ in calls] == ["classic", "doubleplane", "doubleplane", "classic", "classic", "doubleplane"]
    assert len({p for p, _, _ in calls}) == 1 and {pp for _, _, pp in calls} == {"all"}
    assert len(tidy) == 3 * 2 * 2 * 2  # repeats x variants x PEs x metrics
    s = tables.summarize(tidy)
    slowest = tidy[(tidy["Metric"] == "comm_only") & (tidy["variant"] == "classic")].groupby("repeat")[
        "CoreMaxTime/us"].max()
    assert s["comm_only_classic_us"].iloc[0] == pytest.approx(float(np.median(slowest)))
    assert s["repeats"].iloc[0] == 3


def test_run_sweep_refuses_bad_loops_before_anything_runs(monkeypatch):
    monkeypatch.setattr(sweep.runner, "run_case", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(ParameterError, match="loops=0"):
        sweep.run_sweep(sweep.make_grid([2], [8], [64], [2], [2], ["uniform"]), loops=0)
    with pytest.raises(ParameterError, match="repeats=0: must be an int >= 1"):
        sweep.run_sweep(sweep.make_grid([2], [8], [64], [2], [2], ["uniform"]), repeats=0)


def test_failed_case_is_recorded_and_the_sweep_goes_on(monkeypatch, no_leaks):
    from combine_lab.run.launch import LaunchError
    real = sweep.runner.run_case
    calls = []

    def flaky(prepared, variant, **kw):
        calls.append(prepared.case.spec)
        if len(calls) == 1:
            raise LaunchError("PE 0 exited with status 3\nlog tail")
        return real(prepared, variant, **kw)
    monkeypatch.setattr(sweep.runner, "run_case", flaky)
    tidy = sweep.run_sweep(sweep.make_grid([2], [8, 16], [64], [2], [2], ["uniform"]), loops=1, repeats=2,
                           progress=False)
    err = tidy[tidy["check"] == "ERROR"]
    assert len(err) == 4 and (err["reason"] == "PE 0 exited with status 3").all() and (err["BS"] == 8).all()
    assert (err["repeat"] == 0).all()  # the failing case stops at its first repeat
    assert (tidy.loc[tidy["check"] != "ERROR", "check"] == "PASS").all() and len(tidy) == 4 + 2 * 2 * 2
    s = tables.summarize(tidy).set_index("bs")
    assert not s.loc[8, "check_ok"] and s.loc[8, "comm_only_verdict"] == "no run" and s.loc[16, "check_ok"]


def _fake_tidy(rows):
    """rows: (case, routing, bs, h, classic times per repeat, dual times per repeat, sdma share)."""
    out = []
    for case, routing, bs, h, classic, dual, share in rows:
        for variant, times in (("classic", classic), ("doubleplane", dual)):
            for rep, t in enumerate(times):
                for metric, f in (("full_op", 2.0), ("comm_only", 1.0)):
                    r = {c: 0 for c in PERF_COLUMNS}
                    sdma = share if variant == "doubleplane" else 0.0
                    r.update({"CoreMaxTime/us": t * f, "Metric": metric, "CaseId": case, "BS": bs, "H": h,
                              "Npus": 2, "TopK": 2, "ExpertPerPe": 2, "Dtype": "int32_t", "core_times_us": "",
                              "variant": variant, "repeat": rep, "routing": routing, "seed": 42, "case_id": case,
                              "dtype": "int32_t", "comm_only_us": t, "full_op_us": 2 * t, "violations": 0,
                              "target": "cpu", "min_sdma_bytes": 1, "mte_bytes": 100 - 100 * sdma,
                              "sdma_bytes": 100 * sdma, "planned_sdma_bytes": 100 * sdma, "payload_bytes": 100,
                              "sdma_share": sdma, "check": "PASS", "max_abs_err": 0.0, "counters_ok": True,
                              "reason": ""})
                    out.append(r)
    return pd.DataFrame(out, columns=tables.TIDY_COLUMNS)


def test_a_verdict_inside_the_noise_band_of_identical_traffic_is_counted():
    """Tryout: 03_sweep said "a point inside the band is not a result" while calling such points
    "slower". The band (the no-SDMA cases' speed-ups over their repeats: identical traffic) and the
    verdicts whose repeats agreed but whose median lies inside it are the notebook's to print."""
    tidy = _fake_tidy([
        ("a", "uniform", 8, 64, [10.0, 10.0], [16.0, 8.0], 0.0),     # identical traffic: 0.625 and 1.25
        ("b", "zipf:1", 8, 64, [10.0, 10.0], [12.5, 11.0], 0.5),     # slower every time, 0.80-0.91: inside
        ("c", "zipf:1", 16, 64, [10.0, 10.0], [40.0, 20.0], 0.2),    # slower every time, 0.25-0.5: outside
        ("d", "zipf:1", 32, 64, [10.0, 10.0], [8.0, 12.5], 0.3),     # within noise: no verdict to count
    ])
    s = tables.summarize(tidy)
    assert tables.noise_band(s) == (0.625, 1.25)
    inside = tables.inside_noise(s)
    assert inside["case_id"].tolist() == ["b"] and inside["comm_only_verdict"].tolist() == [rows.SLOWER]
    assert tables.judged(s)["case_id"].tolist() == ["b", "c"]  # "a" sends nothing by SDMA, "d" is within noise
    assert tables.noise_band(s[s["case_id"] != "a"]) is None and tables.inside_noise(s[s["case_id"] != "a"]).empty


def test_summarize_speedup_spread_verdicts_and_losses():
    tidy = _fake_tidy([
        ("a", "uniform", 8, 64, [10.0, 10.0, 10.0], [20.0, 5.0, 12.5], 0.0),    # no SDMA: noise only
        ("b", "zipf:1", 8, 64, [10.0, 10.0, 10.0], [5.0, 4.0, 8.0], 0.5),       # faster every time
        ("c", "zipf:1", 16, 64, [10.0, 12.0, 10.0], [12.5, 10.0, 20.0], 0.2),   # mixed
        ("d", "zipf:1", 32, 64, [10.0, 10.0, 10.0], [20.0, 40.0, 12.5], 0.3),   # slower every time
    ])
    s = tables.summarize(tidy).set_index("case_id")
    assert list(s.columns) == tables.SUMMARY_COLUMNS[1:]
    # speed-up = classic / doubleplane of the same repeat (2.0, 2.5, 1.25), median and spread (min-max)
    assert s.loc["b", "comm_only_speedup"] == 2.0
    assert (s.loc["b", "comm_only_speedup_lo"], s.loc["b", "comm_only_speedup_hi"]) == (1.25, 2.5)
    assert s.loc["c", "comm_only_speedup"] == pytest.approx(0.8)  # 0.8, 1.2, 0.5
    assert s.loc["b", "comm_only_doubleplane_us"] == 5.0 and s.loc["b", "comm_only_doubleplane_lo_us"] == 4.0
    assert s.loc["b", "comm_only_doubleplane_hi_us"] == 8.0
    assert s.loc["b", "full_op_classic_us"] == 20.0 and s.loc["b", "full_op_speedup"] == 2.0
    assert s.loc["a", "comm_only_verdict"] == rows.NO_SDMA == "no SDMA: identical traffic"
    assert s.loc["b", "comm_only_verdict"] == rows.FASTER == "faster"
    assert s.loc["c", "comm_only_verdict"] == rows.WITHIN_NOISE == "within noise"  # 0.5-1.2 covers 1
    assert s.loc["d", "comm_only_verdict"] == rows.SLOWER == "slower"
    lost = tables.losses(s.reset_index())
    assert list(lost["case_id"]) == ["d", "c"]  # worst first; "a" (no SDMA) is no loss, only noise
    assert (lost["comm_only_speedup"] < 1).all() and "comm_only_verdict" in lost.columns
    assert list(tables.losses(s.reset_index(), "full_op")["case_id"]) == ["d", "c"]
    with pytest.raises(ParameterError, match="metric='x'"):
        tables.losses(s.reset_index(), "x")
    table = tables.readable(s.reset_index()).set_index("case")
    assert table.loc["b", "speed-up classic/doubleplane (1)"] == "2.00 [1.25-2.50]"
    assert table.loc["b", "comm_only doubleplane (us)"] == "5 [4-8]"
    assert table.loc["a", "verdict"] == rows.NO_SDMA and table.loc["b", "SDMA share (%)"] == "50.0"
    assert list(tables.readable(lost)["case"]) == ["d", "c"]
    # the losses' table shows the bandwidths the summary has (tryout: "- / -" in every cell)
    assert tables.readable(lost)["algbw classic / doubleplane (GB/s)"].tolist() == \
        tables.readable(s.reset_index()).set_index("case").loc[["d", "c"], "algbw classic / doubleplane (GB/s)"].tolist()
    assert "-" not in tables.readable(lost)["algbw classic / doubleplane (GB/s)"].iloc[0]
    assert tables.summarize(tidy.iloc[0:0]).empty
    one = tables.summarize(_fake_tidy([("e", "zipf:1", 8, 64, [10.0], [20.0], 0.5)]))
    assert one["comm_only_verdict"].iloc[0] == "slower (1 repeat: no spread)"
    assert tables.readable(one)["speed-up classic/doubleplane (1)"].iloc[0] == "0.50"
    assert "settings" not in tables.readable(s.reset_index()).columns  # the reference's only: no column for it
    two = s.reset_index()
    two["settings"] = ["reference", "segment-c2", "reference", "segment-c2"]
    table = tables.readable(two)
    assert list(table.columns[:3]) == ["case", "routing", "settings"]  # two rows of one case told apart
    assert list(table["settings"]) == ["reference", "segment-c2", "reference", "segment-c2"]


# ---- issue 11 items 5 and 7: the sweep's cases priced on the model, and the segment-sdma what-if ----

def test_model_grid_prices_every_case_and_the_segment_sdma_what_if():
    from combine_lab.model.machines import load_model
    from combine_lab.model.suggest import suggest
    from combine_lab.case.case import make_case
    from combine_lab.model.stream import case_rows
    grid = sweep.make_grid([2, 4], [64], [8192], [2], [2], ["uniform", "hot-expert:0.5"])
    model = load_model("a2").with_values(sdma_engines=1.0)  # one engine: one call per row is what costs
    m = sweep.model_grid(grid, model)
    assert list(m.columns) == sweep.MODELLED_COLUMNS and len(m) == len(grid.specs) == 4
    assert list(m["case_id"]) == [s.case_id for s in grid.specs]
    assert (m["model"] == "a2").all() and m["caption"].iloc[0] == model.caption()
    assert m["caption"].iloc[0].startswith("modelled on a2") and "assumed" in m["caption"].iloc[0]
    for metric in ("comm_only", "full_op"):
        ratio = m[f"{metric}_classic_us"] / m[f"{metric}_doubleplane_us"]
        assert np.allclose(m[f"{metric}_speedup"], ratio)
    assert (m["full_op_speedup_lo"] == m["full_op_speedup"]).all()  # full_op: a point
    none = m[m["sdma_share"] == 0]
    some = m[m["sdma_share"] > 0]
    # comm_only with SDMA traffic: its range over the unknowns (the verdict's), a point without
    from combine_lab.model.unknowns import verdict
    for _, r in some.iterrows():
        spec = next(sp for sp in grid.specs if sp.case_id == r["case_id"] and sp.routing == r["routing"])
        v = verdict(case_rows(make_case(spec), model.soc), model, 2 << 20)
        assert (r["comm_only_speedup_lo"], r["comm_only_speedup_hi"]) == (v.low, v.high)
        assert v.low <= r["comm_only_speedup"] <= v.high
    assert (none["comm_only_speedup_lo"] == none["comm_only_speedup"]).all()
    assert len(none) and len(some)  # uniform sends nothing by SDMA at 2 MiB; hot-expert does
    # no SDMA segment: the two variants are the same stream, and the what-if has nothing to save
    assert (none["comm_only_speedup"] == 1.0).all() and (none["what_if_saving_us"] == 0).all()
    assert (some["what_if_saving_us"] >= 0).all() and (some["what_if_saving_us"] > 0).any()
    assert np.allclose(some["what_if_saving_pct"], 100 * some["what_if_saving_us"] / some["comm_only_doubleplane_us"])
    # the same numbers as `combine-lab suggest` at the 2 MiB floor
    spec = some.iloc[0]
    s = [g for g in grid.specs if g.case_id == spec["case_id"] and g.routing == spec["routing"]][0]
    curve = suggest(case_rows(make_case(s), model.soc), model, what_if="segment").curve
    at = curve[curve["threshold_bytes"] == 2 * 1024 * 1024].iloc[0]
    assert at["modelled_us"] == pytest.approx(spec["comm_only_doubleplane_us"])
    assert at["segment_us"] == pytest.approx(spec["segment_sdma_comm_only_us"])
    # deterministic: the same grid prices the same
    pd.testing.assert_frame_equal(m, sweep.model_grid(grid.specs, model))
    # band=False: the same rows, the comm_only range over the unknowns not searched (NaN)
    quick = sweep.model_grid(grid, model, band=False)
    band = ["comm_only_speedup_lo", "comm_only_speedup_hi"]
    assert quick[band].isna().all().all()
    pd.testing.assert_frame_equal(quick.drop(columns=band), m.drop(columns=band))


# ---- issue 24 item 4: kernel settings as one more grid dimension ----

def test_run_sweep_runs_both_variants_under_each_settings_group(monkeypatch, no_leaks):
    """settings=[reference, segment, c2]: classic runs once for reference and segment (classic has no
    segment layout) and its rows count in both groups; each run's counters equal its plan's (22 SDMA
    rows of 256 B: 22 calls per row, 2 with one call per segment); the summary has one row per group."""
    calls = []
    real = sweep.runner.run_case

    def spy(prepared, variant, **kw):
        calls.append((variant, kw["settings"].label))
        return real(prepared, variant, **kw)
    monkeypatch.setattr(sweep.runner, "run_case", spy)
    g = sweep.make_grid([2], [16], [64], [2], [2], ["hot-expert:0.5"])
    tidy = sweep.run_sweep(g, loops=1, repeats=1, progress=False, settings=["reference", "segment", "c2"],
                           min_sdma_bytes=0)
    assert calls == [("classic", "reference"), ("doubleplane", "reference"), ("doubleplane", "segment"),
                     ("classic", "c2"), ("doubleplane", "c2")]
    assert list(tidy.columns) == tables.TIDY_COLUMNS and len(tidy) == 6 * 2  # 6 (run, group) pairs x 2 metrics
    assert (tidy["check"] == "PASS").all() and tidy["counters_ok"].all()
    comm = tidy[tidy["Metric"] == "comm_only"]
    got = [(r.variant, r.settings, r.cores_per_rank, r.sdma_bytes, r.sdma_calls) for r in comm.itertuples()]
    assert got == [("classic", "reference", 1, 0, 0), ("classic", "segment", 1, 0, 0),
                   ("doubleplane", "reference", 1, 5632, 22), ("doubleplane-segment", "segment", 1, 5632, 2),
                   ("classic-c2", "c2", 2, 0, 0), ("doubleplane-c2", "c2", 2, 5632, 22)]
    assert [len(s.split(";")) for s in comm["core_times_us"]] == [2, 2, 2, 2, 4, 4]  # block_dim = pes * cores
    s = tables.summarize(tidy)
    assert list(s["settings"]) == ["reference", "segment", "c2"]
    assert (s["sdma_bytes"] == 5632).all() and s["check_ok"].all() and (s["repeats"] == 1).all()
    # classic serves reference and segment: the same time in both groups
    assert s["comm_only_classic_us"].iloc[0] == s["comm_only_classic_us"].iloc[1]


def test_sweep_settings_are_checked_before_anything_is_built(monkeypatch):
    monkeypatch.setattr(sweep.build_mod, "build", lambda *a, **k: pytest.fail("built"))
    g = sweep.make_grid([2], [8], [64], [2], [2], ["uniform"])
    allowed = "'reference', 'segment', 'c<N>' or 'segment-c<N>' (N: cores per source rank)"
    with pytest.raises(ParameterError, match=r"^settings=\['reference', 'segmnt'\]: 'segmnt' is not a settings "
                                             r"label; each must be " + re.escape(allowed) + "$") as e:
        sweep.run_sweep(g, settings=["reference", "segmnt"])
    assert e.value.parameter == "settings"
    with pytest.raises(ParameterError, match=r"^settings='c0': 'c0' is not a settings label"):
        sweep.run_sweep(g, settings="c0")
    monkeypatch.delenv("COMBINE_TWIN_SOC", raising=False)
    with pytest.raises(ParameterError, match=re.escape(
            "settings='segment-c41': 'segment-c41': cores_per_rank=41: must be an int in [1, 40] (the 40 AIV "
            "cores of Ascend910B3; at most 48 cores issue SDMA)")):
        sweep.run_sweep(g, settings="segment-c41")
    assert sweep.check_settings('["reference", "segment-c4", "reference"]') == ["reference", "segment-c4"]
    assert sweep.check_settings("SEGMENT-c1") == ["segment"]
    monkeypatch.setenv("COMBINE_TWIN_SOC", "Ascend910B2")
    assert sweep.check_settings("c48") == ["c48"]


def test_model_grid_prices_other_settings_only_where_the_model_takes_them():
    """The reference's settings price as before, in group 'reference'; a group's classic runs without
    the segment layout and its doubleplane with it, both priced on the model under those settings
    (the model's own replay of rows with those settings), the band over the unknowns against the
    group's own classic; settings the model's SoC cannot run are NotModelled, said with its reason."""
    from combine_lab.lab import pricing
    from combine_lab.model.machines import load_model
    from combine_lab.model.replay import replay
    from combine_lab.model.stream import case_rows
    from combine_lab.model.unknowns import verdict
    grid = sweep.make_grid([2], [64], [8192], [2], [2], ["hot-expert:0.5"])
    model = load_model("a2")
    ref = sweep.model_grid(grid, model)
    assert list(ref["settings"]) == ["reference"]
    pd.testing.assert_frame_equal(ref, sweep.model_grid(grid, model, settings="reference"))
    m = sweep.model_grid(grid, model, settings="segment-c4")
    rows = case_rows(sweep.make_case(grid.specs[0]), model.soc)
    classic = float(replay(rows.with_settings("c4"), rows.sdma("classic", 0), model).core_max("comm_only").max())
    dual = float(replay(rows.with_settings("segment-c4"), rows.sdma("doubleplane", 2 << 20), model)
                 .core_max("comm_only").max())
    assert list(m["settings"]) == ["segment-c4"]
    assert m["comm_only_classic_us"].iloc[0] == pytest.approx(classic, rel=1e-12)
    assert m["comm_only_doubleplane_us"].iloc[0] == pytest.approx(dual, rel=1e-12)
    assert m["comm_only_speedup"].iloc[0] == pytest.approx(classic / dual, rel=1e-12)
    band = verdict(rows.with_settings("segment-c4"), model, 2 << 20, baseline="c4")
    assert (m["comm_only_speedup_lo"].iloc[0], m["comm_only_speedup_hi"].iloc[0]) == (band.low, band.high)
    assert band.low <= classic / dual <= band.high and band.nominal == pytest.approx(classic / dual, rel=1e-12)
    assert np.isnan(m["segment_sdma_comm_only_us"].iloc[0])  # the what-if is the reference's, not a group's
    with pytest.raises(pricing.NotModelled, match=r"^settings='c41': not modelled for c41 yet \(cores_per_rank=41: "
                                                  r"must be an int in \[1, 40\] \(the 40 AIV cores of Ascend910B3") as e:
        sweep.model_grid(grid, model, settings="c41")
    assert e.value.parameter == "settings" and e.value.label == "c41"
    with pytest.raises(ParameterError, match="settings=\\['c0'\\]: 'c0' is not a settings label"):
        sweep.model_grid(grid, model, settings="c0")


def test_priced_says_why_a_model_refuses_settings():
    from combine_lab.lab.pricing import NotModelled, not_modelled_text, priced

    def model_fn(x, settings=None):
        if settings is not None and settings.segment:
            raise ParameterError(f"settings={settings.label!r}: the segment layout is not priced", parameter="settings")
        return (x, settings.label if settings else None)
    assert priced(model_fn, "reference", 3) == (3, None)  # the reference's: called as the model has it
    assert priced(model_fn, "c6", 3) == (3, "c6")
    with pytest.raises(NotModelled, match=re.escape("settings='segment': not modelled for segment yet "
                                                    "(settings='segment': the segment layout is not priced)")):
        priced(model_fn, "segment", 3)
    assert not_modelled_text("c4") == "not modelled for c4 yet"


def test_sweep_figures_group_by_settings():
    """Two settings groups: one row of heatmap panels each, titled by routing and group; the share
    plot labels each (routing, group); the times figure has one row per case and group, in us."""
    from combine_lab.lab import plots
    ref = _fake_tidy([("b", "zipf:1", 8, 64, [10.0, 10.0], [5.0, 4.0], 0.5)])
    c4 = _fake_tidy([("b", "zipf:1", 8, 64, [8.0, 8.0], [2.0, 2.0], 0.5)])
    c4["variant"] = c4["variant"] + "-c4"
    tidy = pd.concat([ref.assign(settings="reference"), c4.assign(settings="c4")], ignore_index=True)
    s = tables.summarize(tidy)
    assert list(s["settings"]) == ["reference", "c4"] and list(s["comm_only_speedup"]) == [2.25, 4.0]
    fig = plots.sweep_heatmaps(s, where="measured on cpu (the twin)")
    titles = [a.get_title() for a in fig.axes if a.get_title()]
    assert titles == ["zipf:1, settings reference", "zipf:1, settings c4"]
    assert "per kernel settings group (reference, c4: classic and doubleplane under the same settings)" in \
        fig._suptitle.get_text().replace("\n", " ")
    assert [a.get_title() for a in plots.sweep_heatmaps(s.iloc[:1]).axes if a.get_title()] == ["zipf:1"]
    share = plots.sdma_share_plot(s).axes[0]
    assert [t.get_text() for t in share.get_legend().get_texts()][-2:] == ["zipf:1, settings reference",
                                                                          "zipf:1, settings c4"]
    ax = plots.settings_times(s, where="measured on cpu (the twin)").axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["zipf:1 b\nsettings reference", "zipf:1 b\nsettings c4"]
    assert ax.get_xlabel() == "comm_only time, CoreMaxTime of the slowest PE (us)"
    widths = sorted(round(p.get_width(), 3) for p in ax.patches)
    assert widths == [2.0, 4.5, 8.0, 10.0]  # medians: c4 doubleplane, reference doubleplane, c4 classic, classic


def test_model_settings_prices_the_reference_and_says_which_settings_are_not_modelled():
    from combine_lab.model.machines import load_model
    grid = sweep.make_grid([2], [64], [8192], [2], [2], ["hot-expert:0.5"])
    model = load_model("a2")
    m, refused = sweep.model_settings(grid, model, settings=["segment-c4", "reference", "c2", "c41"])
    assert list(m["settings"]) == ["reference", "segment-c4", "c2"]  # the reference's first, always
    pd.testing.assert_frame_equal(m[m["settings"] == "reference"], sweep.model_grid(grid, model))
    pd.testing.assert_frame_equal(m[m["settings"] == "c2"].reset_index(drop=True),
                                  sweep.model_grid(grid, model, settings="c2"))
    assert refused == {"c41": "not modelled for c41 yet (cores_per_rank=41: must be an int in [1, 40] (the 40 AIV "
                              "cores of Ascend910B3; at most 48 cores issue SDMA))"}
    with pytest.raises(ParameterError, match="'segmnt' is not a settings label"):
        sweep.model_settings(grid, model, settings="segmnt")
