"""The combine-lab CLI (flags of combine-facts section 9) and the perf CSV it writes (section 8)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from combine_lab import cli
from combine_lab.results import PERF_COLUMNS, read_perf_csv

SMALL = ["-pes", "2", "-bs", "8", "-h", "16", "-topk", "2", "-expertPerPe", "2", "--warmup", "1", "--loops", "2"]


def run_cli(args, capsys):
    code = cli.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_writes_perf_csv_with_section8_values(tmp_path, capsys, no_leaks):
    code, out, err = run_cli(["run", *SMALL, "-type", "float16_t", "--perf", "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    path = tmp_path / "combine_doubleplane_perf_rank0.csv"
    header = path.read_text().splitlines()[0].split(",")
    assert header == PERF_COLUMNS + ["SingleCoreTime/us"] * 2
    df = read_perf_csv(path)
    assert list(df["Metric"]) == ["full_op", "comm_only"]
    row = df.iloc[0]
    assert row["DataSize/B"] == 8 * 2 * 16 * 2
    assert row["GlobalDataSize/B"] == 8 * 2 * 16 * 2 * 2
    assert (row["Npus"], row["Blocks"], row["UBsize/KB"]) == (2, 2, 64)  # one MTE staging buffer (kernels/combine_kernel.h)
    assert (row["BS"], row["H"], row["TopK"], row["ExpertPerPe"], row["Dtype"]) == (8, 16, 2, 2, "float16_t")
    assert (row["Warmup"], row["Loops"], row["ProfPe"], row["CaseId"]) == (1, 2, 0, "shape_8_16_2_4_2")
    for _, r in df.iterrows():
        assert r["CoreMaxTime/us"] == pytest.approx(max(r["core_times_us"]), abs=1e-6)
        assert r["CoreMaxTime/us"] > 0
        assert r["Bandwidth/GB/s"] == pytest.approx(r["GlobalDataSize/B"] / r["CoreMaxTime/us"] * 1e6 / 2**30,
                                                    rel=1e-4)
        assert r["PerPeBandwidth/GB/s"] == pytest.approx(r["DataSize/B"] / r["CoreMaxTime/us"] * 1e6 / 2**30,
                                                         rel=1e-4)
    assert "shape_8_16_2_4_2" in out and "PASS" in out
    # the twin's counters go beside the perf CSV
    counters = json.loads((tmp_path / "combine_doubleplane_counters_rank1.json").read_text())
    assert counters["pe"] == 1 and counters["launches"] == 3 and counters["violations"] == 0


def test_prof_pe_all_and_sweep_write_rank_files_and_summary(tmp_path, capsys, no_leaks):
    code, out, err = run_cli(["run", *SMALL, "--bs-list", "4,8", "--prof-pe", "all", "--perf", "--variant", "classic",
                              "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    for r in range(2):
        df = read_perf_csv(tmp_path / f"combine_classic_perf_rank{r}.csv")
        assert list(df["CaseId"]) == ["shape_4_16_2_4_2"] * 2 + ["shape_8_16_2_4_2"] * 2
        assert set(df["ProfPe"]) == {r}
    summary = read_perf_csv(tmp_path / "combine_classic_perf_summary.csv")
    assert len(summary) == 8
    assert sorted(summary["ProfPe"].tolist()) == [0] * 4 + [1] * 4
    table = [line.split() for line in out.splitlines()[1:3]]
    assert [(t[0], t[2], t[3]) for t in table] == [("shape_4_16_2_4_2", "classic", "PASS"),
                                                   ("shape_8_16_2_4_2", "classic", "PASS")]


def test_compare_prints_both_variants_with_planned_sdma(capsys, no_leaks):
    code, out, err = run_cli(["compare", "-pes", "2", "-bs", "600", "-h", "1024", "-topk", "1", "-expertPerPe", "2",
                              "--routing", "hot-expert:1.0", "--warmup", "0", "--loops", "1"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["case", "routing", "variant", "check", "comm_only/us"]
    classic = lines[1].split()
    dual = lines[2].split()
    assert classic[2] == "classic" and dual[2] == "doubleplane"
    # SDMA bytes and planned SDMA: 600 rows x 4096 B on the hot expert's PE.
    assert dual[-4:] == ["2457600", "2457600", "yes", "0"]
    assert classic[-4:] == ["0", "0", "yes", "0"]


@pytest.mark.parametrize("args, message", [
    (["-type", "bfloat16_t"], "dtype='bfloat16_t': refused, the CANN 9.0 beta backend lacks the scalar bf16 cast"),
    (["-type", "int8_t"], "dtype='int8_t': must be one of 'int32_t', 'float16_t'"),
    (["-pes", "0"], "pes=0: must be an int >= 1"),
    (["-gnpus", "4"], "-gnpus=4: must equal -pes=2 (one node)"),
    (["--bs-list", "4,x"], "--bs-list='4,x': must be integers"),
    (["--prof-pe", "7"], "prof_pe=7: must be 'all' or a PE in [0, 1]"),
    (["--loops", "0"], "loops=0: must be an int >= 1"),
    (["-topk", "9", "--routing", "zipf:1.0"], "topk=9"),
])
def test_bad_input_is_refused_before_launch(args, message, capsys, no_leaks):
    code, out, err = run_cli(["run", *SMALL, *args], capsys)
    assert code == 2
    assert err.startswith("combine-lab: error: ")
    assert message in err


def test_console_script_help_lists_reference_flags():
    out = subprocess.run([sys.executable, "-m", "combine_lab.cli", "run", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for flag in ["-pes", "-bs", "-h H", "-topk", "-expertPerPe", "-type", "-fnpu", "-ipport", "--perf", "--warmup",
                 "--loops", "--pes-list", "--bs-list", "--h-list", "--topk-list", "--expert-per-pe-list",
                 "--prof-pe", "--output-dir", "--variant", "--routing", "--target", "--min-sdma-bytes"]:
        assert flag in out.stdout, flag


def test_dash_h_alone_points_to_help(capsys):
    code, out, err = run_cli(["run", "-pes", "2", "-h"], capsys)
    assert code == 2
    assert err == "combine-lab: -h is the hidden size (-h 7168); for help use --help\n"


def test_sweep_that_does_not_fit_is_refused_before_the_first_case(capsys, no_leaks):
    code, out, err = run_cli(["run", "-pes", "8", "-h", "65536", "-topk", "8", "-expertPerPe", "4",
                              "--bs-list", "8", "65536"], capsys)
    assert code == 2
    assert out == ""  # not even the small case ran
    assert err.startswith("combine-lab: error: shape_65536_65536_8_32_8: making the case needs x of 137438953472 "
                          "bytes (128.00 GiB: pes*bs*h*4) in memory, ")
