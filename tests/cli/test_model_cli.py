"""The model from the command line: run/compare --clock model:NAME price cases without launching
anything and say "modelled on"; their perf files are the reference's format under a folder that
says modelled; suggest prints the curve and the best floor; calibrate fits a model file to CSVs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import run_table

from combine_lab import CaseSpec, cli, make_case
from combine_lab.model.modelled import model_case
from combine_lab.model.machines import load_model
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows
from combine_lab.model.suggest import suggest
from combine_lab.formats.perf_csv import read_perf_csv
from combine_lab.formats.summaries import read_run_summary

CASE = ["-pes", "4", "-bs", "64", "-h", "2048", "-topk", "2", "-expertPerPe", "2", "--routing", "zipf:1.5"]


def run_cli(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_on_a_model_prices_both_variants_and_launches_nothing(tmp_path, capsys, no_leaks, monkeypatch):
    monkeypatch.setattr("combine_lab.run.runner.run_case", lambda *a, **k: pytest.fail("nothing may be launched"))
    code, out, err = run_cli(["compare", *CASE, "--min-sdma-bytes", "0", "--clock", "model:a3", "--perf",
                              "--prof-pe", "all", "--output-dir", str(tmp_path / "perf"), "-a", "plot"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == load_model("a3").caption()
    spec = CaseSpec(pes=4, bs=64, h=2048, topk=2, expert_per_pe=2, routing="zipf:1.5")
    case = make_case(spec)
    priced = {}
    for variant, fields in zip(("classic", "doubleplane"), run_table(out)):
        res = priced[variant] = model_case(case, variant, load_model("a3"), 0, "all")
        assert fields[:4] == [spec.case_id, "zipf:1.5", variant, "MODEL"]
        assert float(fields[4]) == pytest.approx(res.time_us("comm_only"), abs=1e-3)
        assert fields[-2:] == ["-", "-"]  # counters and violations: nothing ran
        folder = tmp_path / "perf-model-a3" / variant
        prefix = "combine" if variant == "classic" else "combine_doubleplane"
        df = read_perf_csv(folder / f"{prefix}_perf_rank2.csv")
        assert list(df["Metric"]) == ["full_op", "comm_only"] and set(df["ProfPe"]) == {2}
        assert np.allclose(df.iloc[1]["core_times_us"], res.times.comm_only[2], atol=5e-5)
        assert (folder / f"{prefix}_perf_summary.csv").is_file()
        assert (folder / f"{prefix}_perf_comm_only.png").stat().st_size > 10_000
    assert not (tmp_path / "perf").exists()  # measured results stay apart from modelled ones
    # one point per case: the model is deterministic, its uncertainty is its unknown parameters
    at = lines.index("speed-up = classic time / doubleplane time (above 1: doubleplane faster), modelled on a3: a "
                     "point, no spread; how it moves over the unknown parameters: combine-lab suggest")
    assert lines[at + 1].split() == ["case", "routing", "comm_only", "speed-up", "comm_only", "verdict", "full_op",
                                     "speed-up", "full_op", "verdict"]
    sp = priced["classic"].time_us("comm_only") / priced["doubleplane"].time_us("comm_only")
    row = lines[at + 2].split()
    assert row[:2] == [spec.case_id, "zipf:1.5"] and float(row[2]) == round(sp, 3)
    # the model's tie rule: within its resolution (5 %) of 1 a tie, never "faster" or "slower"
    want = "tie (modelled point, within 5 %)" if abs(sp - 1) <= 0.05 else \
        "faster (modelled point)" if sp > 1 else "slower (modelled point)"
    assert " ".join(row[3:3 + len(want.split())]) == want
    # the summary says modelled, with the model's verdict, nothing measured
    summary = read_run_summary(tmp_path / "perf-model-a3")
    assert summary["clock"] == "model:a3" and summary["measured"] == load_model("a3").caption()
    assert summary["cases"][0]["speedup"]["comm_only"]["verdict"] == want
    assert list(summary["cases"][0]["speedup_by_settings"]) == ["reference"]


def test_compare_on_a_model_prints_times_without_perf_for_the_slowest_pe(capsys):
    """The README tour's `compare --clock model:a3` printed "-": a model times every launch."""
    from combine_lab.model.modelled import model_case

    code, out, err = run_cli(["compare", *CASE, "--clock", "model:a3"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert "times: CoreMaxTime/us of the slowest PE (every PE priced, as suggest does), modelled, not measured" in lines
    spec = CaseSpec(pes=4, bs=64, h=2048, topk=2, expert_per_pe=2, routing="zipf:1.5")
    for variant in ("classic", "doubleplane"):
        row = next(ln.split() for ln in lines if ln.startswith(spec.case_id) and f" {variant} " in ln)
        slowest = model_case(make_case(spec), variant, load_model("a3"), prof_pe="all").time_us("comm_only")
        assert float(row[4]) == pytest.approx(slowest, abs=5e-4)


def test_a_modelled_speedup_of_exactly_one_is_a_tie_in_the_table_and_the_summary(tmp_path, capsys):
    # on PE 0 classic and doubleplane both take 194.077 us comm_only on a3: the SDMA share is off its
    # critical path (the model profiles the slowest PE by default; --prof-pe 0 asks for PE 0)
    code, out, err = run_cli(["compare", "-pes", "16", "-bs", "256", "-h", "7168", "-topk", "8", "-expertPerPe", "8",
                              "-type", "float16_t", "--routing", "zipf:1.2", "--settings", "reference,segment-c6",
                              "--clock", "model:a3", "--perf", "--prof-pe", "0", "--output-dir", str(tmp_path / "p")],
                             capsys)
    assert code == 0, err
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["case", "settings"])
    assert [ln.split()[1:4] + [" ".join(ln.split()[4:-4])] for ln in lines[at + 1:at + 3]] == [
        ["reference", "zipf:1.2", "1.000", "tie (modelled point, within 5 %)"],
        ["segment-c6", "zipf:1.2", "0.860", "slower (modelled point)"]]
    [case] = read_run_summary(tmp_path / "p-model-a3")["cases"]
    assert case["variants"]["classic"]["comm_only_us"]["median"] == pytest.approx(194.077, abs=5e-4)
    assert case["variants"]["doubleplane"]["comm_only_us"]["median"] == pytest.approx(194.077, abs=5e-4)
    groups = case["speedup_by_settings"]
    assert list(groups) == ["reference", "segment-c6"] and case["speedup"] == groups["reference"]
    assert {g: (round(r["comm_only"]["median"], 3), r["comm_only"]["verdict"], r["full_op"]["verdict"])
            for g, r in groups.items()} == {
        "reference": (1.0, "tie (modelled point, within 5 %)", "slower (modelled point)"),
        "segment-c6": (0.86, "slower (modelled point)", "slower (modelled point)")}


@pytest.mark.parametrize("argv, message", [
    (["--clock", "model"], "--clock='model': wall or model:NAME (NAME: a2, a3, host, or a .toml file)"),
    (["--clock", "model:a9"], "--clock='model:a9': model='a9': one of a2, a3, host, or a .toml file"),
    (["--clock", "model:a2", "--chaos", "3"], "--chaos: runs the kernel; --clock model:a2 prices it without running"),
])
def test_bad_clocks_are_refused_before_anything_runs(argv, message, capsys, tmp_path):
    code, out, err = run_cli(["run", *CASE, "--output-dir", str(tmp_path / "p"), *argv], capsys)
    assert code == 2 and err.strip() == f"combine-lab: error: {message}"
    assert out == ""


def test_suggest_names_the_model_flag_it_refuses(capsys):
    """A fresh user's find: every refusal but this one named its flag."""
    code, out, err = run_cli(["suggest", *CASE, "--model", "zz"], capsys)
    assert code == 2 and out == ""
    assert err.strip() == "combine-lab: error: --model: model='zz': one of a2, a3, host, or a .toml file"


def test_suggest_prints_the_curve_and_the_best_floor(tmp_path, capsys):
    code, out, err = run_cli(["suggest", *CASE, "--model", "a2", "--what-if", "segment-sdma",
                              "--csv", str(tmp_path / "curve.csv")], capsys)
    assert code == 0, err
    curve = pd.read_csv(tmp_path / "curve.csv")
    case = make_case(CaseSpec(pes=4, bs=64, h=2048, topk=2, expert_per_pe=2, routing="zipf:1.5"))
    rows = case_rows(case, load_model("a2").soc)
    for _, r in curve.iterrows():  # each floor's time is the model's at that plan
        mask = rows.sdma("classic", 0) if r["threshold_bytes"] == -1 else rows.sdma("doubleplane", int(r["threshold_bytes"]))
        t = replay(rows, mask, load_model("a2"))
        assert r["modelled_us"] == pytest.approx(t.core_max("comm_only").max(), rel=1e-12)
        assert r["sdma_segments"] == int(mask.sum())
    floors = list(curve["threshold_bytes"])
    assert floors[-1] == -1 and 2097152 in floors and floors[:-1] == sorted(floors[:-1], reverse=True)
    # the verdict over the unknowns at the best SDMA floor: each engine count is the model's speed-up there
    a2 = load_model("a2")
    s = suggest(rows, a2)
    v = s.verdict
    sdma_floors = curve[(curve["threshold_bytes"] != -1) & (curve["sdma_segments"] > 0)]
    assert v.floor == int(sdma_floors.loc[sdma_floors["modelled_us"].idxmin(), "threshold_bytes"])
    for e, sp in zip(v.engines["engines"], v.engines["speedup"]):
        m = a2.with_values(sdma_engines=float(e))
        classic = replay(rows, rows.sdma("classic", 0), m).core_max("comm_only").max()
        dual = replay(rows, rows.sdma("doubleplane", v.floor), m).core_max("comm_only").max()
        assert sp == pytest.approx(classic / dual, rel=1e-12)
    assert v.engines_line() in out and "what moves the verdict most, jointly (measure first; " in out
    assert out.splitlines()[-2] == s.pick_text()
    assert s.pick_text().startswith("best: " if v.low > 1.05 else "no floor beats MTE-only everywhere in the unknowns' box")
    assert out.splitlines()[1] == load_model("a2").caption()


def test_calibrate_fits_a_model_file_to_modelled_csvs(tmp_path, capsys):
    truth = load_model("a3").with_values(sdma_engines=1.0)  # one engine: its descriptor cost shows in the times
    truth_file = truth.to_toml(tmp_path / "truth.toml")
    code, _, err = run_cli(["compare", *CASE, "--min-sdma-bytes", "0", "--clock", f"model:{truth_file}", "--perf",
                            "--prof-pe", "all", "--output-dir", str(tmp_path / "p")], capsys)
    assert code == 0, err
    start = truth.with_values(**{"die_pair.sdma_sqe_us": 3.0, "mte_put_us": 0.3}).to_toml(tmp_path / "start.toml")
    csvs = sorted(str(p) for p in (tmp_path / "p-model-a3").rglob("*_perf_rank*.csv"))
    assert len(csvs) == 8
    code, out, err = run_cli(["calibrate", *csvs, "--model", str(start), "--routing", "zipf:1.5",
                              "--min-sdma-bytes", "0", "--free", "die_pair.sdma_sqe_us", "mte_put_us",
                              "--out", str(tmp_path / "fit.toml")], capsys)
    assert code == 0, err
    fit = load_model(tmp_path / "fit.toml")
    assert fit["die_pair.sdma_sqe_us"] == pytest.approx(0.967, rel=1e-4) and fit["mte_put_us"] == pytest.approx(1.0, rel=1e-4)
    assert "fitted parameters:" in out and f"model: {tmp_path / 'fit.toml'}" in out


def test_a_long_curve_is_thinned_on_screen_and_whole_with_all(capsys):
    """The field report: suggest on the 64-PE deepseek case printed about 520 rows."""
    from combine_lab.model.suggest import suggest

    case = make_case(CaseSpec(pes=16, bs=256, h=2048, topk=4, expert_per_pe=2, routing="zipf:1.2"))
    s = suggest(case_rows(case, load_model("a3").soc), load_model("a3"))
    n = len(s.curve)
    assert n > 40
    short = s.text(40).splitlines()
    tail = len(s.verdict.text().splitlines()) + 3 * (s.at_default is not None) + 1  # the verdicts, then the pick
    table = short[3:-1 - tail]  # caption, metric, header ... note, verdict, pick
    assert len(table) <= 40 and short[-1 - tail] == f"({len(table)} of {n} floors shown: the best, 2 MiB, never SDMA and an even spread; --all or --csv for every one)"
    firsts = [ln.split()[0] for ln in table]
    assert firsts[-1] == "never" and "2097152" in firsts and firsts[0] == str(int(s.curve["threshold_bytes"].iloc[0]))
    best = s.best["threshold_bytes"]
    assert ("never" if best == -1 else str(int(best))) in firsts
    assert len(s.text(None).splitlines()) == 3 + n + tail
    code, out, err = run_cli(["suggest", "-pes", "16", "-bs", "256", "-h", "2048", "-topk", "4", "-expertPerPe", "2",
                              "--routing", "zipf:1.2", "--model", "a3", "--all"], capsys)
    assert code == 0, err
    assert len(out.splitlines()) == 1 + 3 + n + tail  # the case line, then the whole curve and the verdict


def test_calibrate_refuses_a_fit_it_cannot_identify_and_exits_1(tmp_path, capsys):
    code, _, err = run_cli(["compare", *CASE, "--min-sdma-bytes", "0", "--clock", "model:a3", "--perf",
                            "--prof-pe", "all", "--output-dir", str(tmp_path / "p")], capsys)
    assert code == 0, err
    csvs = sorted(str(p) for p in (tmp_path / "p-model-a3").rglob("*_perf_rank*.csv"))
    code, out, err = run_cli(["calibrate", *csvs, "--model", "a3", "--routing", "zipf:1.5", "--min-sdma-bytes", "0",
                              "--free", "server.sdma_GBps", "mte_put_us", "--out", str(tmp_path / "fit.toml")], capsys)
    assert code == 1, err
    assert ("NOT USABLE:\n  - server.sdma_GBps: not identified (no effect on these measurements); would be by probe: "
            "SDMA puts of 1-2 MiB to one peer of this link class; or doubleplane with wide rows") in out
    assert out.splitlines()[-1] == f"model: not written to {tmp_path / 'fit.toml'}: the fit is not usable"
    assert not (tmp_path / "fit.toml").exists() and "use --clock" not in out


def test_calibrate_of_a_missing_csv_says_no_such_file(tmp_path, capsys):
    """Not "not a perf CSV name": a probe CSV may have any name, the file is what is missing."""
    missing = tmp_path / "nowhere" / "combine_probe.csv"
    code, out, err = run_cli(["calibrate", str(missing), "--model", "host"], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (
        f"combine-lab: error: csv='{missing}': no such file (a probe CSV, or perf CSVs: combine_perf_rank<r>.csv, "
        "combine_doubleplane_perf_rank<r>.csv)")
