"""compare repeats each case with the variants interleaved and reports medians, spreads (min-max),
speed-ups and a verdict; a --perf run leaves a summary that ``combine-lab diff`` compares with
another run's (docs/cli.md#9-repeats-spread-and-verdicts)."""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest
from conftest import run_table, speedup_table

from combine_lab import cli
from combine_lab.formats.perf_csv import gib_per_s, read_perf_csv
from combine_lab.formats.summaries import SUMMARY_FORMAT, SUMMARY_NAME, read_run_summary
from combine_lab.results import diff as diff_mod
from combine_lab.results.rows import verdict
from combine_lab.run import runner

#: A case whose doubleplane run sends rows by SDMA at floor 0 (the hot expert's PE).
CASE = ["-pes", "2", "-bs", "64", "-h", "256", "-topk", "1", "-expertPerPe", "2", "--routing", "hot-expert:1.0",
        "--min-sdma-bytes", "0", "--warmup", "0", "--loops", "2"]


def run_cli(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def three_repeats(tmp_path_factory, twin_binary):
    """compare --perf --repeats 3 on the twin: (stdout, output folder, variants in launch order)."""
    out = tmp_path_factory.mktemp("repeats") / "perf"
    order = []
    real = runner.run_case
    mp = pytest.MonkeyPatch()
    mp.setattr(runner, "run_case", lambda prepared, variant, **kw: order.append(variant) or real(prepared, variant,
                                                                                                  **kw))
    buf = io.StringIO()
    try:
        with redirect_stdout(buf):
            code = cli.main(["compare", *CASE, "--perf", "--repeats", "3", "--output-dir", str(out)])
    finally:
        mp.undo()
    assert code == 0
    return buf.getvalue(), out, order


def test_repeats_interleave_the_variants_and_every_repeat_stays_in_the_csvs(three_repeats):
    out, folder, order = three_repeats
    # classic first, then doubleplane first, ...: a burst of load lands on both alike
    assert order == ["classic", "doubleplane", "doubleplane", "classic", "classic", "doubleplane"]
    for variant, prefix in (("classic", "combine"), ("doubleplane", "combine_doubleplane")):
        df = read_perf_csv(folder / variant / f"{prefix}_perf_rank0.csv")
        assert list(df["Metric"]) == ["full_op", "comm_only"] * 3


def test_the_table_the_speedups_and_the_summary_are_the_csvs_numbers(three_repeats):
    out, folder, _ = three_repeats
    assert out.splitlines()[0].startswith("measured on the CPU twin: CPU threads copying memory on this machine (")
    assert ("not an NPU's time; times are CoreMaxTime/us of the profiled PE (with --prof-pe all the slowest), the "
            "median of 3 repeats of 0 + 2 launches, spread min-max") in out.splitlines()[0]
    each = {}
    for variant, prefix in (("classic", "combine"), ("doubleplane", "combine_doubleplane")):
        df = read_perf_csv(folder / variant / f"{prefix}_perf_rank0.csv")
        each[variant] = {m: df[df["Metric"] == m]["CoreMaxTime/us"].to_numpy(float) for m in ("comm_only", "full_op")}
    summary = read_run_summary(folder)
    assert summary["format"] == SUMMARY_FORMAT and summary["repeats"] == 3 and summary["target"] == "cpu"
    [case] = summary["cases"]
    assert case["case_id"] == "shape_64_256_1_4_2" and case["routing"] == "hot-expert:1.0"
    table = {row[2]: row for row in run_table(out)}
    for variant in ("classic", "doubleplane"):
        rec = case["variants"][variant]
        assert rec["check"] == "PASS" and rec["repeats"] == 3 and rec["counters_ok"] and rec["violations"] == 0
        for m, col in (("comm_only", 4), ("full_op", 6)):
            t = each[variant][m]
            # the CSV holds 6 decimals; the summary the times as read back
            assert rec[f"{m}_us"]["each"] == pytest.approx(list(t), abs=1e-6)
            assert rec[f"{m}_us"]["median"] == pytest.approx(float(np.median(t)), abs=1e-6)
            assert (rec[f"{m}_us"]["min"], rec[f"{m}_us"]["max"]) == pytest.approx((t.min(), t.max()), abs=1e-6)
            assert float(table[variant][col]) == round(rec[f"{m}_us"]["median"], 3)
            assert table[variant][col + 1] == f"{t.min():.3f}-{t.max():.3f}"
        # the reference's Bandwidth of the median comm_only time: 2 PEs x 64 tokens x 1 x 256 x 4 B
        assert float(table[variant][8]) == round(gib_per_s(2 * 64 * 256 * 4, rec["comm_only_us"]["median"]), 3)
    assert case["variants"]["doubleplane"]["sdma_bytes"] == 64 * 256 * 4 > 0  # the hot PE's remote rows
    [row] = speedup_table(out)
    assert row[:3] == ["shape_64_256_1_4_2", "hot-expert:1.0", "3"]
    for m, col in (("comm_only", 3), ("full_op", 6)):
        paired = each["classic"][m] / each["doubleplane"][m]  # same repeat's pair
        sp = case["speedup"][m]
        assert case["speedup_by_settings"] == {"reference": case["speedup"]}  # one settings group
        assert sp["median"] == pytest.approx(float(np.median(paired)), rel=1e-9)
        assert (sp["min"], sp["max"]) == pytest.approx((paired.min(), paired.max()), rel=1e-9)
        assert sp["verdict"] == verdict(paired, 1) in ("faster", "slower", "within noise")
        assert float(row[col]) == round(sp["median"], 3)
        assert row[col + 1] == f"{paired.min():.3f}-{paired.max():.3f}"
        assert row[col + 2] == sp["verdict"]
    assert f"run summary: {folder / SUMMARY_NAME}" in out


def _summary(times: dict, speedup: dict | None = None, case_id="shape_8_16_2_4_2") -> dict:
    """A run summary of one case: ``times`` {variant: [comm_only of each repeat]} (full_op twice those)."""
    variants = {}
    for v, t in times.items():
        rec = {"check": "PASS", "repeats": len(t)}
        for m, f in (("comm_only", 1.0), ("full_op", 2.0)):
            vals = [x * f for x in t]
            rec[f"{m}_us"] = {"median": float(np.median(vals)), "min": min(vals), "max": max(vals), "each": vals}
        variants[v] = rec
    case = {"case_id": case_id, "routing": "uniform", "dtype": "int32_t", "variants": variants,
            "speedup": speedup or {}}
    return {"format": SUMMARY_FORMAT, "command": "x", "measured": "m", "cases": [case]}


def test_diff_calls_a_difference_beyond_noise_only_when_the_spreads_do_not_overlap():
    a = _summary({"classic": [10.0, 11.0, 12.0], "doubleplane": [8.0, 9.0, 10.0]},
                 {"comm_only": {"median": 1.2, "min": 1.1, "max": 1.3, "verdict": "faster"}})
    b = _summary({"classic": [5.0, 6.0, 7.0], "doubleplane": [9.5, 12.0, 13.0]},
                 {"comm_only": {"median": 0.5, "min": 0.4, "max": 0.6, "verdict": "slower"}})
    d = diff_mod.diff_runs(a, b)
    assert list(d.columns) == diff_mod.DIFF_COLUMNS
    got = {(r.variant, r.metric): (r.a, r.b, round(r.b_over_a, 4), r.verdict) for r in d.itertuples()}
    assert got == {
        ("classic", "comm_only/us"): (11.0, 6.0, round(6 / 11, 4), "B faster, beyond noise"),  # 5-7 below 10-12
        ("classic", "full_op/us"): (22.0, 12.0, round(12 / 22, 4), "B faster, beyond noise"),
        ("doubleplane", "comm_only/us"): (9.0, 12.0, round(12 / 9, 4), "within noise"),  # 9.5-13 meets 8-10
        ("doubleplane", "full_op/us"): (18.0, 24.0, round(24 / 18, 4), "within noise"),
        ("speed-up", "comm_only"): (1.2, 0.5, round(0.5 / 1.2, 4), "B slower, beyond noise"),  # higher is better
    }
    assert d[d["variant"] == "classic"]["a_spread"].tolist() == ["10.000-12.000", "20.000-24.000"]
    one = _summary({"classic": [5.0]})
    d = diff_mod.diff_runs(a, one)
    assert [(r.variant, r.metric, r.verdict) for r in d.itertuples()] == [
        ("classic", "comm_only/us", "1 repeat: no spread to judge"), ("classic", "full_op/us",
                                                                       "1 repeat: no spread to judge"),
        ("doubleplane", "-", "only in A"), ("speed-up", "comm_only", "only in A")]  # what B lacks is said so
    other = _summary({"classic": [1.0, 2.0]}, case_id="shape_4_16_2_4_2")
    d = diff_mod.diff_runs(a, other)
    assert [(r.case_id, r.verdict) for r in d.itertuples()] == [("shape_8_16_2_4_2", "only in A"),
                                                                 ("shape_4_16_2_4_2", "only in B")]


def test_diff_compares_and_labels_each_settings_groups_speedup():
    times = {"classic": [10.0, 11.0, 12.0], "doubleplane": [8.0, 9.0, 10.0], "classic-c2": [9.0, 9.5, 10.0],
             "doubleplane-segment-c2": [20.0, 30.0, 40.0]}
    fast = {"comm_only": {"median": 1.2, "min": 1.1, "max": 1.3, "verdict": "faster"}}
    slow = {"comm_only": {"median": 0.3, "min": 0.25, "max": 0.35, "verdict": "slower"}}
    a = _summary(times)
    a["cases"][0].update(speedup=fast, speedup_by_settings={"reference": fast, "segment-c2": slow})
    b = _summary({v: times[v] for v in ("classic", "doubleplane")}, fast)  # an older summary: `speedup` only
    shown = lambda x: None if x != x else x  # noqa: E731  (a value the run does not have is NaN)
    got = [(r.variant, r.metric, shown(r.a), shown(r.b), r.verdict) for r in diff_mod.diff_runs(a, b).itertuples()
           if r.metric in ("-", "comm_only")]
    assert got == [("classic-c2", "-", None, None, "only in A"),
                   ("doubleplane-segment-c2", "-", None, None, "only in A"),
                   ("speed-up reference", "comm_only", 1.2, 1.2, "within noise"),
                   ("speed-up segment-c2", "comm_only", 0.3, None, "only in A")]
    b["cases"][0]["speedup_by_settings"] = {"reference": fast, "segment-c2": fast}
    got = {r.variant: (r.a, r.b, round(r.b_over_a, 4), r.verdict) for r in diff_mod.diff_runs(a, b).itertuples()
           if r.variant.startswith("speed-up")}
    assert got == {"speed-up reference": (1.2, 1.2, 1.0, "within noise"),
                   "speed-up segment-c2": (0.3, 1.2, 4.0, "B faster, beyond noise")}  # 1.1-1.3 above 0.25-0.35
    assert diff_mod.speedup_groups(_summary(times)["cases"][0]) == {}


def test_diff_of_modelled_runs_uses_the_models_tie_rule_and_never_mixes_clocks():
    a = _summary({"classic": [10.0], "doubleplane": [8.0]})
    b = _summary({"classic": [10.3], "doubleplane": [9.6]})
    a["clock"] = b["clock"] = "model:a3"
    got = {(r.variant, r.metric): (round(r.b_over_a, 4), r.verdict) for r in diff_mod.diff_runs(a, b).itertuples()}
    assert got[("classic", "comm_only/us")] == (1.03, "tie: within the model's resolution (5 %)")  # 3 % apart
    assert got[("doubleplane", "comm_only/us")] == (1.2, "B slower (modelled points)")
    b["clock"] = "wall"  # one modelled, one measured: both values kept, never a verdict between them
    d = diff_mod.diff_runs(a, b)
    assert set(d["verdict"]) == {diff_mod.NOT_COMPARED} and d["b_over_a"].isna().all()
    assert list(d["a"][:2]) == [10.0, 20.0] and list(d["b"][:2]) == [10.3, 20.6]


def test_diff_on_two_runs_folders(three_repeats, tmp_path, capsys):
    _, folder, _ = three_repeats
    # the same run against itself is within noise everywhere; a copy slower everywhere by more than the
    # widest spread (max / min of any time's repeats: on a loaded twin it was once above 1000x) is beyond it
    slower = copy.deepcopy(read_run_summary(folder))
    times = [v[m] for v in slower["cases"][0]["variants"].values() for m in ("comm_only_us", "full_op_us")]
    factor = 2 * max(max(t["each"]) / min(t["each"]) for t in times) + 1000
    for v in slower["cases"][0]["variants"].values():
        for m in ("comm_only_us", "full_op_us"):
            v[m] = {k: (x * factor if k != "each" else [y * factor for y in x]) for k, x in v[m].items()}
    (tmp_path / SUMMARY_NAME).write_text(json.dumps(slower))
    code, out, err = run_cli(["diff", str(folder), str(folder)], capsys)
    assert code == 0, err
    assert out.splitlines()[-1] == "0 of 6 differences beyond noise"
    code, out, err = run_cli(["diff", str(folder), str(tmp_path / SUMMARY_NAME)], capsys)
    assert code == 0, err
    assert out.splitlines()[-1] == "4 of 6 differences beyond noise"  # the times; the speed-ups stay as they were
    assert sum("B slower, beyond noise" in ln for ln in out.splitlines()) == 4


def test_diff_footer_does_not_count_rows_it_did_not_compare(tmp_path, capsys):
    """Field fault (issue 34): a modelled run against a measured one, every row "not compared", and
    the footer said "0 of 6 differences beyond noise"."""
    a = _summary({"classic": [10.0], "doubleplane": [8.0]})
    b = _summary({"classic": [10.3], "doubleplane": [9.6]})
    a["clock"], b["clock"] = "model:a3", "wall"
    for name, s in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(s))
    code, out, err = run_cli(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")], capsys)
    assert code == 0, err
    rows = len(diff_mod.diff_runs(a, b))
    assert out.splitlines()[-1] == f"no difference compared: one run modelled, the other measured ({rows} rows)"


def test_diff_refuses_what_is_not_a_run_summary(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"format": "other"}')
    code, out, err = run_cli(["diff", str(tmp_path / "x.json"), str(tmp_path)], capsys)
    assert code == 2 and out == ""
    assert err.strip() == (f"combine-lab: error: {tmp_path / 'x.json'}: not a combine_lab run summary (format "
                           f"'other', expected '{SUMMARY_FORMAT}')")
    code, out, err = run_cli(["diff", str(tmp_path), str(tmp_path)], capsys)
    assert code == 2 and err.strip().startswith(f"combine-lab: error: {tmp_path / SUMMARY_NAME}: cannot read the run "
                                                "summary (No such file or directory); a run with --perf writes ")


def test_repeats_below_1_are_refused_and_without_perf_noted(tmp_path, capsys, no_leaks):
    code, out, err = run_cli(["compare", *CASE, "--perf", "--repeats", "0", "--output-dir", str(tmp_path)], capsys)
    assert code == 2 and out == "" and err.strip() == "combine-lab: error: --repeats=0: must be an int >= 1"
    assert list(tmp_path.iterdir()) == []
    code, out, err = run_cli(["compare", *CASE, "--repeats", "3"], capsys)
    assert code == 0, err
    assert err.startswith("combine-lab: note: --repeats=3 has no effect without --perf (nothing is timed: one run "
                          "per case)\n")
    assert [r[2:4] for r in run_table(out)] == [["classic", "PASS"], ["doubleplane", "PASS"]]
    # nothing timed, nothing to compare: no table, and the caption says why
    assert "speed-up =" not in out and out.splitlines()[0].endswith("; no speed-up table (it compares timed runs: --perf)")
