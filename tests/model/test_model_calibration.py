"""Calibration finds the parameters behind measured times: perf CSVs synthesised by the model
from known a3 values plus 5% noise give back every fitted value within 5%, and the CSV path
reads files in the reference's format; the twin check (a host model calibrated on the twin's
own wall-clock runs predicts held-out cases) is benchmarks/host_model_check.py (wall-clock times belong to benchmarks)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from combine_lab import CaseSpec, make_case
from combine_lab.errors import ParameterError
from combine_lab.model.calibrate import Measurement, calibrate, measurements_from_csvs
from combine_lab.model.machines import load_model
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows
from combine_lab.formats.perf_csv import PERF_COLUMNS, write_perf_csv

A3 = load_model("a3")

# Cases that between them exercise every fitted parameter: tiny ones (the fixed costs: quiet,
# flag latency, barrier), wide rows (the bandwidths), skewed ones with SDMA, long stage 2s.
DESIGN = [(8, b, h, k, e, r, "int32_t", s) for s, (b, h, k, e, r) in enumerate(
    [(1, 8, 1, 1, "uniform"), (2, 8, 2, 1, "uniform"), (4, 64, 2, 2, "zipf:1.2"), (8, 8, 4, 2, "zipf:2.0"),
     (2, 512, 1, 1, "uniform"), (16, 128, 2, 1, "zipf:1.5"), (4, 2048, 8, 1, "uniform"), (32, 32, 4, 4, "zipf:1.2"),
     (8, 4096, 2, 2, "zipf:2.0"), (64, 64, 8, 1, "uniform"), (16, 1024, 4, 2, "zipf:1.0"), (2, 16, 8, 2, "zipf:1.5")])] + [
    (4, 64, 512, 2, 2, "zipf:1.2", "int32_t", 0), (4, 256, 4096, 2, 1, "uniform", "float16_t", 0),
    (8, 128, 7168, 4, 2, "zipf:1.5", "float16_t", 0), (8, 32, 16384, 8, 1, "uniform", "int32_t", 0),
    (2, 1024, 8192, 8, 1, "uniform", "int32_t", 0), (8, 512, 1024, 4, 4, "zipf:1.0", "float16_t", 0),
    (16, 64, 7168, 8, 1, "deepseek", "float16_t", 0), (4, 1024, 8192, 2, 1, "zipf:2.0", "float16_t", 0),
    (8, 1024, 8192, 8, 2, "uniform", "float16_t", 1), (8, 512, 16384, 8, 1, "zipf:1.0", "float16_t", 2),
    (8, 2048, 4096, 8, 2, "uniform", "float16_t", 3), (8, 256, 32768, 4, 1, "uniform", "float16_t", 4),
    (32, 2, 64, 2, 1, "uniform", "int32_t", 5), (32, 4, 8, 1, 1, "uniform", "int32_t", 6),
    (16, 8, 256, 4, 2, "zipf:1.2", "int32_t", 7), (32, 1, 1024, 1, 1, "uniform", "float16_t", 8)]


SMALL = [d for d in DESIGN if d[0] <= 4][:8]


def synthetic(model, noise: float, seed: int = 0, design=DESIGN) -> list[Measurement]:
    """Every PE's per-core times of each ``design`` case and variant, modelled, times exp(N(0, noise))."""
    rng = np.random.default_rng(seed)
    out = []
    for p, b, h, k, e, r, dt, s in design:
        case = make_case(CaseSpec(pes=p, bs=b, h=h, topk=k, expert_per_pe=e, routing=r, dtype=dt, seed=s))
        rows = case_rows(case, model.soc)
        for variant, floor in (("classic", 2 << 20), ("doubleplane", 0)):
            t = replay(rows, rows.sdma(variant, floor), model)
            for pe in range(p):
                for metric in ("comm_only", "full_op"):
                    x = getattr(t, metric)[pe]
                    out.append(Measurement(case, variant, metric, pe, x * np.exp(rng.normal(0, noise, len(x))), floor))
    return out


@pytest.mark.slow
def test_synthetic_noisy_times_give_back_every_fitted_parameter_within_5_percent():
    meas = synthetic(A3, 0.05)
    # Start far from the truth: alternately 0.6x and 1.6x, kept within each range.
    start = A3.with_values(**{f: min(max(A3[f] * (1.6 if i % 2 else 0.6), A3.params[f].range[0]),
                                     A3.params[f].range[1]) for i, f in enumerate(A3.fittable)})
    cal = calibrate(start, meas)
    assert list(cal.params["name"]) == A3.fittable
    for _, p in cal.params.iterrows():
        assert p["value"] == pytest.approx(A3[p["name"]], rel=0.05), p.to_dict()
        assert np.isfinite(p["std_err_pct"]) and p["std_err_pct"] < 5, p.to_dict()
    assert len(cal.cases) == len(meas)
    assert cal.cases["rms_core_error_pct"].median() == pytest.approx(5.0, abs=1.5)  # the noise, not the model


def test_exact_times_give_back_the_parameters():
    truth = A3.with_values(sdma_engines=1.0)  # one engine: its descriptor cost shows in the times
    meas = synthetic(truth, 0.0, design=SMALL)
    start = truth.with_values(**{"die_pair.sdma_sqe_us": 2.0, "mte_put_us": 0.5, "quiet_us": 2.0})
    cal = calibrate(start, meas, free=["die_pair.sdma_sqe_us", "mte_put_us", "quiet_us"])
    for name in ("die_pair.sdma_sqe_us", "mte_put_us", "quiet_us"):
        assert cal.model[name] == pytest.approx(truth[name], rel=1e-4)
    assert cal.cases["error_pct"].abs().max() < 1e-3


def test_a_parameter_the_data_cannot_see_is_reported_so():
    a2 = load_model("a2")  # its link (20.28 GB/s) caps both mte_remote_GBps and sdma_GBps
    meas = synthetic(a2, 0.0, design=SMALL[:3])
    cal = calibrate(a2, meas, free=["mte_remote_GBps", "mte_put_us"])
    row = cal.params.set_index("name").loc["mte_remote_GBps"]
    assert row["note"] == "no effect on these measurements: kept at its start value"
    assert not np.isfinite(row["std_err_pct"]) and "n/a" in cal.report()
    # the written model carries the start value, not one the optimiser wandered to
    assert row["value"] == row["start"] == a2["mte_remote_GBps"] == cal.model["mte_remote_GBps"]


def test_fewer_times_than_free_parameters_is_said_and_gives_no_confidence():
    meas = synthetic(A3, 0.0, design=SMALL[:1])[:1]  # one measurement: PE 0 classic comm_only
    cal = calibrate(A3, meas, free=["mte_put_us", "flag_latency_us", "quiet_us"], cores="max")
    assert cal.warnings == ("underdetermined: 1 measured time(s) for 3 free parameters; the standard errors mean "
                            "nothing. Calibrate from more cases (tiny, wide and skewed shapes) or fit fewer "
                            "parameters (--free).",)
    assert "WARNING: underdetermined: 1 measured time(s) for 3 free parameters" in cal.report()
    assert not np.isfinite(cal.params["std_err_pct"]).any()
    assert calibrate(A3, synthetic(A3, 0.0, design=SMALL[:3]), free=["mte_put_us"]).warnings == ()


def test_the_routing_comes_from_the_runs_sidecar_and_a_contradiction_is_refused(tmp_path, capsys):
    """The field report: calibrate remade a deepseek run's cases as uniform. A priced (or measured)
    run leaves a sidecar naming its routing, seed and floor beside the CSVs; calibrate reads it."""
    from combine_lab import cli

    assert cli.main(["run", "-pes", "4", "-bs", "16", "-h", "256", "-topk", "2", "-expertPerPe", "2",
                     "--routing", "zipf:1.5", "--seed", "7", "--min-sdma-bytes", "0", "--clock", "model:a3",
                     "--perf", "--output-dir", str(tmp_path / "perf")]) == 0
    folder = tmp_path / "perf-model-a3"
    csv = folder / "combine_doubleplane_perf_rank0.csv"
    meas = measurements_from_csvs([csv])
    assert {(m.case.spec.routing, m.case.spec.seed, m.min_sdma_bytes) for m in meas} == {("zipf:1.5", 7, 0)}
    want = make_case(CaseSpec(pes=4, bs=16, h=256, topk=2, expert_per_pe=2, routing="zipf:1.5", seed=7))
    assert np.array_equal(meas[0].case.expert_ids, want.expert_ids)
    side = folder / "combine_doubleplane_counters_shape_16_256_2_8_4.json"
    with pytest.raises(ParameterError) as e:
        measurements_from_csvs([csv], routing="uniform")
    assert str(e.value) == (f"routing='uniform', but {side} says this run used routing='zipf:1.5': leave routing "
                            "out (the sidecar is read) or give 'zipf:1.5'")
    assert measurements_from_csvs([csv], routing="zipf:1.5", seed=7)[0].case.spec.routing == "zipf:1.5"
    side.unlink()  # the reference's run script writes no sidecar: the recipe, or what is given
    assert {m.case.spec.routing for m in measurements_from_csvs([csv])} == {"uniform"}
    assert {m.min_sdma_bytes for m in measurements_from_csvs([csv])} == {2 << 20}


def test_measurements_come_from_reference_format_csvs(tmp_path):
    case = make_case(CaseSpec(pes=2, bs=8, h=16, topk=2, expert_per_pe=2))  # the reference recipe: uniform, 42
    rows = case_rows(case, A3.soc)
    t = replay(rows, rows.sdma("doubleplane", 0), A3)
    recs = []
    for metric in ("full_op", "comm_only"):
        times = getattr(t, metric)[0]
        recs.append({"DataSize/B": 1024, "Npus": 2, "Blocks": 2, "UBsize/KB": 80, "Bandwidth/GB/s": 1.0,
                     "CoreMaxTime/us": float(times.max()), "Metric": metric, "GlobalDataSize/B": 2048,
                     "PerPeBandwidth/GB/s": 0.5, "BS": 8, "H": 16, "TopK": 2, "ExpertPerPe": 2, "Dtype": "int32_t",
                     "Warmup": 5, "Loops": 50, "ProfPe": 0, "CaseId": case.spec.case_id,
                     "core_times_us": tuple(float(v) for v in times)})
    path = write_perf_csv(pd.DataFrame(recs, columns=PERF_COLUMNS + ["core_times_us"]),
                          tmp_path / "combine_doubleplane_perf_rank0.csv")
    meas = measurements_from_csvs([path], min_sdma_bytes=0)
    assert [(m.variant, m.metric, m.pe, m.case.spec.case_id) for m in meas] == [
        ("doubleplane", "full_op", 0, "shape_8_16_2_4_2"), ("doubleplane", "comm_only", 0, "shape_8_16_2_4_2")]
    assert np.array_equal(meas[0].case.expert_ids, case.expert_ids)
    assert np.allclose(meas[1].times_us, t.comm_only[0], atol=1e-4)


def test_bad_calibration_inputs_are_refused(tmp_path):
    with pytest.raises(ParameterError, match="no measurements to calibrate from"):
        calibrate(A3, [])
    meas = synthetic(A3, 0.0, design=SMALL[:1])
    with pytest.raises(ParameterError, match=r"free parameter\(s\) \['speed'\]"):
        calibrate(A3, meas, free=["speed"])
    with pytest.raises(ParameterError, match=r"notes.csv: not a perf CSV name"):
        measurements_from_csvs([tmp_path / "notes.csv"])


def test_a_fit_the_data_cannot_identify_is_refused_naming_the_parameters():
    """The field report: calibrate accepted 9 of 13 parameters on their bounds with rc 0. Cases of
    at most 4 PEs never cross servers: the server class's descriptor cost has no effect on them."""
    truth = A3.with_values(sdma_engines=1.0)
    meas = synthetic(truth, 0.0, design=SMALL[:4])
    cal = calibrate(truth.with_values(mte_put_us=0.5), meas, free=["mte_put_us", "server.sdma_sqe_us"])
    assert not cal.usable
    assert cal.problems == ("server.sdma_sqe_us: not identified (no effect on these measurements); would be by "
                            "probe: SDMA puts of 14 KiB by k = 1, 2, 8, 48 cores to one peer of this link class; or "
                            "doubleplane at floor 0 with small rows",)
    assert "NOT USABLE:\n  - server.sdma_sqe_us: not identified" in cal.report()
    assert cal.held_out_error_pct < 1e-6 and cal.cases["held_out"].sum() > 0
    good = calibrate(truth.with_values(mte_put_us=0.5), meas, free=["mte_put_us"])
    assert good.usable and good.report().endswith("the fit is usable")
    # held out, never fitted: every fifth case, here (four cases) the last
    held = good.cases[good.cases["held_out"]]
    assert set(held["case_id"]) == {meas[-1].case.spec.case_id} and len(held) == sum(
        m.case is meas[-1].case for m in meas)


def test_a_parameter_on_its_bound_and_a_bad_held_out_error_are_refused():
    truth = A3.with_values(sdma_engines=1.0, mte_put_us=2.9)
    meas = synthetic(truth, 0.0, design=SMALL[:4])
    narrow = A3.with_values(sdma_engines=1.0)
    narrow = type(narrow)(**{**narrow.__dict__, "params": {**narrow.params, "mte_put_us": type(
        narrow.params["mte_put_us"])(**{**narrow.params["mte_put_us"].__dict__, "range": (0.2, 1.5)})}})
    cal = calibrate(narrow, meas, free=["mte_put_us"])
    assert not cal.usable
    assert cal.problems[0].startswith("mte_put_us: not identified (ends on a bound of its range [0.2, 1.5])")
    assert any(q.startswith("the held-out measurements' median |error| is ") for q in cal.problems)
