"""The combine-lab CLI: the flags of docs/cli.md#2-case-flags and the perf files it leaves
(section 8), read back as the reference's tools read them: by header."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from combine_lab import cli
from combine_lab.errors import ParameterError
from combine_lab.run import runner
from combine_lab.formats.perf_csv import CORE_COLUMN, PERF_HEADER, gib_per_s, read_perf_csv
from combine_lab.formats.summaries import SUMMARY_NAME
from conftest import run_table
from perf_facts import HEADER, ub_size_kb

SMALL = ["-pes", "2", "-bs", "8", "-h", "16", "-topk", "2", "-expertPerPe", "2", "--warmup", "1", "--loops", "2"]
FLOAT_FIELDS = ["Bandwidth/GB/s", "CoreMaxTime/us", "PerPeBandwidth/GB/s"]


def run_cli(args, capsys):
    code = cli.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def dict_rows(path: Path) -> list[dict]:
    """A perf CSV as a reader keyed by its header sees it (the reference's summariser reads it so)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cores(row: dict) -> list[str]:
    """Every core's time of a header-keyed row: the first under SingleCoreTime/us, the rest unnamed."""
    return ([row[CORE_COLUMN]] if row[CORE_COLUMN] is not None else []) + row.get(None, [])


def summary_by_the_rules(paths: list[Path]) -> list[list[str]]:
    """Section 8's summary, written here from the rules (not from combine_lab): group by the 14
    keys, keep the slowest row (first on a tie), bandwidths from its time, ProfPe max, sort."""
    keys = ["Metric", "DataSize/B", "GlobalDataSize/B", "Npus", "Blocks", "UBsize/KB", "BS", "H", "TopK",
            "ExpertPerPe", "Dtype", "Warmup", "Loops", "CaseId"]
    best: dict[tuple, dict] = {}
    for path in sorted(paths, key=lambda p: p.name):
        for row in dict_rows(path):
            k = tuple(row[f] for f in keys)
            if k not in best or float(row["CoreMaxTime/us"]) > float(best[k]["CoreMaxTime/us"]):
                best[k] = row
    out = []
    for row in best.values():
        us = float(row["CoreMaxTime/us"])
        row = {**row, "ProfPe": "max",
               "Bandwidth/GB/s": f"{int(row['GlobalDataSize/B']) / us * 1e6 / 2**30 if us > 0 else 0.0:.4f}",
               "PerPeBandwidth/GB/s": f"{int(row['DataSize/B']) / us * 1e6 / 2**30 if us > 0 else 0.0:.4f}"}
        out.append([row[h] or "" for h in PERF_HEADER])
    return sorted(out, key=lambda r: (r[6], int(r[1]), int(r[0]), r[17]))


def check_row_format(row: dict, blocks: int) -> None:
    """One row as section 8 writes it: 4-decimal floats, CoreMaxTime the largest core time,
    bandwidths from it, one time per core."""
    for field in FLOAT_FIELDS:
        assert re.fullmatch(r"\d+\.\d{4}", row[field]), (field, row[field])
    times = cores(row)
    assert len(times) == blocks and all(re.fullmatch(r"\d+\.\d{4}", t) for t in times)
    assert row["CoreMaxTime/us"] == max(times, key=float)
    us = float(row["CoreMaxTime/us"])
    # The driver divides by the unrounded time: its 4th decimal may differ by one from ours.
    assert float(row["Bandwidth/GB/s"]) == pytest.approx(gib_per_s(int(row["GlobalDataSize/B"]), us), abs=2e-4)
    assert float(row["PerPeBandwidth/GB/s"]) == pytest.approx(gib_per_s(int(row["DataSize/B"]), us), abs=2e-4)


def test_run_perf_writes_the_references_rank_file_and_a_sidecar(tmp_path, capsys, no_leaks):
    code, out, err = run_cli(["run", *SMALL, "-type", "float16_t", "--perf", "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    path = tmp_path / "combine_doubleplane_perf_rank0.csv"
    assert path.read_text().split("\n", 1)[0] == HEADER
    rows = dict_rows(path)
    assert [r["Metric"] for r in rows] == ["full_op", "comm_only"]
    for r in rows:
        check_row_format(r, blocks=2)  # block_dim = min(pes, AIV cores, 48) = 2: both cores timed
        assert {k: r[k] for k in ["DataSize/B", "Npus", "Blocks", "UBsize/KB", "GlobalDataSize/B", "BS", "H", "TopK",
                                  "ExpertPerPe", "Dtype", "Warmup", "Loops", "ProfPe", "CaseId"]} == {
            "DataSize/B": str(8 * 2 * 16 * 2), "Npus": "2", "Blocks": "2", "UBsize/KB": str(ub_size_kb()),
            "GlobalDataSize/B": str(8 * 2 * 16 * 2 * 2), "BS": "8", "H": "16", "TopK": "2", "ExpertPerPe": "2",
            "Dtype": "float16_t", "Warmup": "1", "Loops": "2", "ProfPe": "0", "CaseId": "shape_8_16_2_4_2"}
    df = read_perf_csv(path)
    assert [list(t) for t in df["core_times_us"]] == [[float(v) for v in cores(r)] for r in rows]
    # No summary without --prof-pe all; the lab's own information is in the sidecar only.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["combine_doubleplane_counters_shape_8_16_2_4_2.json",
                                                          "combine_doubleplane_perf_rank0.csv", SUMMARY_NAME]
    side = json.loads((tmp_path / "combine_doubleplane_counters_shape_8_16_2_4_2.json").read_text())
    assert {k: side[k] for k in ["case_id", "variant", "routing", "dtype", "target", "min_sdma_bytes", "warmup",
                                 "loops", "launches", "prof_pes", "check", "counters_ok", "violations"]} == {
        "case_id": "shape_8_16_2_4_2", "variant": "doubleplane", "routing": "uniform", "dtype": "float16_t",
        "target": "cpu", "min_sdma_bytes": 2097152, "warmup": 1, "loops": 2, "launches": 3, "prof_pes": [0],
        "check": "PASS", "counters_ok": True, "violations": 0}
    assert [r["pe"] for r in side["ranks"]] == [0, 1] and [r["launches"] for r in side["ranks"]] == [3, 3]
    assert side["counted"][0]["mte_bytes"] == side["planned"][0]["mte_bytes"] > 0
    assert "shape_8_16_2_4_2" in out and "PASS" in out
    assert f"perf CSV: {path}\n" in out


def test_compare_bfloat16_passes_and_perf_rows_count_two_bytes(tmp_path, capsys, no_leaks):
    """bf16 end to end (issue 34): the field's command passes bit for bit for both variants; a
    profiled run's rows say Dtype bfloat16_t and count 2 bytes per element; the model prices it."""
    code, out, err = run_cli(["compare", "-pes", "2", "-bs", "16", "-h", "256", "-topk", "2", "-expertPerPe", "2",
                              "-type", "bfloat16_t", "--routing", "zipf:1.2"], capsys)
    assert code == 0, err
    rows = {ln.split()[2]: ln.split()[3] for ln in out.splitlines() if ln.startswith("shape_16_256_2_4_2")}
    assert rows == {"classic": "PASS", "doubleplane": "PASS"}
    code, out, err = run_cli(["run", *SMALL, "-type", "bfloat16_t", "--perf", "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    for r in dict_rows(tmp_path / "combine_doubleplane_perf_rank0.csv"):
        assert (r["Dtype"], r["DataSize/B"], r["GlobalDataSize/B"]) == ("bfloat16_t", str(8 * 2 * 16 * 2),
                                                                       str(8 * 2 * 16 * 2 * 2))


def test_prof_pe_all_sweep_leaves_rank_files_summary_and_figures_in_output_perf(tmp_path, monkeypatch, capsys,
                                                                              no_leaks):
    """The issue's "done when": run ... --perf --prof-pe all -a plot, default --output-dir, a quoted list."""
    monkeypatch.chdir(tmp_path)
    args = ["run", *SMALL, "--bs-list", "4 8", "--prof-pe", "all", "--perf", "--variant", "classic", "-a", "plot"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    perf = tmp_path / "output" / "perf"
    assert sorted(p.name for p in perf.iterdir()) == sorted([
        "combine_counters_shape_4_16_2_4_2.json", "combine_counters_shape_8_16_2_4_2.json",
        "combine_perf_comm_only.png", "combine_perf_full_op.png", "combine_perf_rank0.csv", "combine_perf_rank1.csv",
        "combine_perf_summary.csv", SUMMARY_NAME])
    ranks = [perf / "combine_perf_rank0.csv", perf / "combine_perf_rank1.csv"]
    for r, path in enumerate(ranks):
        rows = dict_rows(path)
        assert [(x["CaseId"], x["Metric"], x["ProfPe"]) for x in rows] == [
            ("shape_4_16_2_4_2", "full_op", str(r)), ("shape_4_16_2_4_2", "comm_only", str(r)),
            ("shape_8_16_2_4_2", "full_op", str(r)), ("shape_8_16_2_4_2", "comm_only", str(r))]
        for x in rows:
            check_row_format(x, blocks=2)
    summary = perf / "combine_perf_summary.csv"
    with open(summary, newline="") as f:
        written = list(csv.reader(f))
    assert written[0] == PERF_HEADER
    assert written[1:] == summary_by_the_rules(ranks)
    assert [r[16] for r in written[1:]] == ["max"] * 4
    for png in ("combine_perf_comm_only.png", "combine_perf_full_op.png"):
        assert (perf / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"perf summary: {Path('output/perf/combine_perf_summary.csv')}\n" in out
    table = run_table(out)
    assert [(t[0], t[2], t[3]) for t in table] == [("shape_4_16_2_4_2", "classic", "PASS"),
                                                   ("shape_8_16_2_4_2", "classic", "PASS")]

    # A second run replaces the first: the same rows, not twice as many; an old case's sidecar goes.
    (perf / "combine_counters_shape_2_16_2_4_2.json").write_text("{}")
    (perf / "combine_doubleplane_perf_rank0.csv").write_text(HEADER + "\n")  # the other variant's: kept
    code, out, err = run_cli(args[:-2] + ["-a", "md"], capsys)
    assert code == 0, err
    # the earlier run's files go only once this run's are all written: its CSVs and sidecars are replaced by
    # name, the other four (its summary, figures, the old case's sidecar) removed then
    assert ("combine-lab: replaced an earlier classic run's files in output/perf (4 of its files, not this run's, "
            "removed)\n") in err
    assert [len(dict_rows(p)) for p in ranks] == [4, 4]
    assert sorted(p.name for p in perf.iterdir()) == sorted([
        "combine_counters_shape_4_16_2_4_2.json", "combine_counters_shape_8_16_2_4_2.json",
        "combine_doubleplane_perf_rank0.csv", "combine_perf_rank0.csv", "combine_perf_rank1.csv",
        "combine_perf_report.md", "combine_perf_summary.csv", SUMMARY_NAME])
    report = (perf / "combine_perf_report.md").read_text()
    first = dict_rows(ranks[0])[1]  # shape_4 comm_only of PE 0
    assert (f"| shape_4_16_2_4_2 | 0 | 2 | 2 | 512 | 1024 | {first['Bandwidth/GB/s']} | "
            f"{first['PerPeBandwidth/GB/s']} | {first['CoreMaxTime/us']} | 2 |") in report
    assert "## comm_only\n\n| CaseId | ProfPe | Npus | Blocks | DataSize/B | GlobalDataSize/B | Bandwidth/GB/s | " \
           "PerPeBandwidth/GB/s | CoreMaxTime/us | cores |\n" in report


def test_compare_keeps_each_variant_in_its_own_folder(tmp_path, capsys, no_leaks):
    code, out, err = run_cli(["compare", *SMALL, "--perf", "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["classic", "combine_lab_summary.json", "doubleplane"]
    assert sorted(p.name for p in (tmp_path / "classic").iterdir()) == [
        "combine_counters_shape_8_16_2_4_2.json", "combine_perf_rank0.csv"]
    assert sorted(p.name for p in (tmp_path / "doubleplane").iterdir()) == [
        "combine_doubleplane_counters_shape_8_16_2_4_2.json", "combine_doubleplane_perf_rank0.csv"]
    # A summariser reading one folder with any *_perf_rank*.csv pattern sees one variant.
    for folder in ("classic", "doubleplane"):
        assert len(list((tmp_path / folder).glob("*_perf_rank*.csv"))) == 1


def test_without_perf_one_launch_is_checked_and_nothing_written(tmp_path, capsys, monkeypatch, no_leaks):
    counted = []  # the twin's launch counts, read from the run's folder before the run removes it
    real = runner.launch_pes

    def spy(binary, pes, argv_for_pe, **kw):
        out = real(binary, pes, argv_for_pe, **kw)
        counted.extend(json.loads(p.read_text())["launches"]
                       for p in sorted(kw["log_dir"].parent.glob("combine_doubleplane_counters_rank*.json")))
        return out

    monkeypatch.setattr(runner, "launch_pes", spy)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "combine_doubleplane_perf_rank0.csv").write_text(HEADER + "\n")
    code, out, err = run_cli(["run", *SMALL, "--output-dir", str(tmp_path / "out"), "--work-dir", str(tmp_path / "w"),
                              "--prof-pe", "all"], capsys)
    assert code == 0, err
    assert err.startswith("combine-lab: note: --prof-pe has no effect without --perf (nothing is profiled)\n"
                          f"combine-lab: note: --output-dir {tmp_path / 'out'} has no effect without --perf (nothing "
                          "is written)\n")
    line = run_table(out)[0]
    assert line[:4] == ["shape_8_16_2_4_2", "uniform", "doubleplane", "PASS"] and line[4:6] == ["-", "-"]
    assert "perf CSV" not in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["combine_doubleplane_perf_rank0.csv"]
    # The twin counted two launches on every PE: an untimed one before the checked one, so that a flag the
    # first leaves ready is caught (docs/hardware-rules.md#15-launch-epochs); the kept --work-dir keeps the
    # case files, not the run's folder.
    assert counted == [2, 2]
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["golden", "output"]


def record_launches(monkeypatch) -> list[list[str]]:
    """Wrap the runner's launch_pes: the driver argv of PE 0 of every launch, in order."""
    seen = []
    real = runner.launch_pes

    def spy(binary, pes, argv_for_pe, **kw):
        seen.append(list(argv_for_pe(0)))
        return real(binary, pes, argv_for_pe, **kw)

    monkeypatch.setattr(runner, "launch_pes", spy)
    return seen


def test_ports_move_per_launch_on_127_0_0_1_and_fpe_reaches_the_driver(tmp_path, monkeypatch, capsys, no_leaks):
    seen = record_launches(monkeypatch)
    code, out, err = run_cli(["compare", *SMALL, "--bs-list", "4,8", "--perf", "--prof-pe", "all", "-fpe", "0",
                              "--repeats", "1", "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    # 2 cases x 2 variants x 2 profiled PEs: 8767 + launch index, as the reference's per-case port.
    assert [a[2] for a in seen] == [f"tcp://127.0.0.1:{8767 + i}" for i in range(8)]
    assert {a[4] for a in seen} == {"0"}  # first_pe
    seen.clear()
    code, out, err = run_cli(["run", *SMALL, "--bs-list", "4 8", "-ipport", "tcp://127.0.0.1:9100", "-fpe", "3"],
                             capsys)
    assert code == 0, err
    assert [(a[2], a[4], a[11], a[12], a[13]) for a in seen] == [  # no --perf: perf 0, loops 1, and on the twin
        ("tcp://127.0.0.1:9100", "3", "0", "1", "1"), ("tcp://127.0.0.1:9101", "3", "0", "1", "1")]  # warmup 1


def test_other_bootstrap_hosts_are_used_as_given():
    from combine_lab.cli.cases import bootstrap_addresses
    nxt = bootstrap_addresses("tcp://10.1.2.3:8767")
    assert [nxt(), nxt()] == ["tcp://10.1.2.3:8767"] * 2
    nxt = bootstrap_addresses("tcp://127.0.0.1:64536")
    assert [nxt() for _ in range(1001)][-2:] == ["tcp://127.0.0.1:65535", "tcp://127.0.0.1:64536"]


def test_gnpus_differing_is_set_to_pes_with_perf(tmp_path, capsys, no_leaks):
    code, out, err = run_cli(["run", *SMALL, "-gnpus", "4", "--perf", "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    assert "combine-lab: note: -gnpus=4 set to each case's -pes (one node)\n" in err
    assert dict_rows(tmp_path / "combine_doubleplane_perf_rank0.csv")[0]["Npus"] == "2"


def test_pes_and_gnpus_take_the_reference_run_scripts_order_and_int_is_int32(capsys, no_leaks):
    """The reference's run.sh sets GNPU_NUM with -pes: `-gnpus 4 -pes 2` is 2 NPUs (runs), `-pes 2 -gnpus 4`
    stays 4 (refused without --perf); its driver takes `-type int` as int32_t."""
    a = cli.build_parser().parse_args(["run", "-gnpus", "4", "-pes", "2"])
    assert (a.pes, a.gnpus) == (2, None)
    assert cli.build_parser().parse_args(["run", "-pes", "2", "-gnpus", "4"]).gnpus == 4
    code, out, err = run_cli(["run", "-gnpus", "4", *SMALL, "-type", "int"], capsys)
    assert code == 0, err
    assert run_table(out)[0][:4] == ["shape_8_16_2_4_2", "uniform", "doubleplane", "PASS"]
    assert cli.build_parser().parse_args(["run", "-type", "int"]).dtype == "int32_t"


def test_defaults_are_the_reference_run_scripts():
    a = cli.build_parser().parse_args(["run"])
    assert (a.pes, a.gnpus, a.fnpu, a.fpe, a.ipport, a.dtype, a.bs, a.h, a.topk, a.expert_per_pe) == (
        2, None, 0, 0, "tcp://127.0.0.1:8767", "int32_t", 8, 7168, 8, 2)
    assert (a.perf, a.warmup, a.loops, a.prof_pe, a.output_dir, a.analyse) == (
        False, 5, 50, None, "output/perf", None)
    a = cli.build_parser().parse_args(["compare", "-a", "md", "--analyse", "plot"])
    assert a.analyse == "plot"


@pytest.mark.parametrize("args, message", [
    (["-type", "int8_t"], "dtype='int8_t': must be one of 'int32_t', 'float16_t', 'bfloat16_t'"),
    (["-pes", "0"], "pes=0: must be an int >= 1"),
    (["-gnpus", "4"], "combine-lab: error: -gnpus=4: must equal -pes=2 (one node; with --perf it is set to each "
                      "case's -pes)\n"),
    (["--bs-list", "4,x"], "--bs-list='4,x': 'x' is not a valid int"),
    (["--perf", "--prof-pe", "7"], "combine-lab: error: --prof-pe=7: must be 'all' or a PE in [0, 1] "
                                   "(shape_8_16_2_4_2 has 2 PEs)\n"),
    (["--perf", "--pes-list", "4 2", "--prof-pe", "3"], "--prof-pe=3: must be 'all' or a PE in [0, 1] "
                                                        "(shape_8_16_2_4_2 has 2 PEs)"),
    (["--perf", "--prof-pe", "last"], "--prof-pe='last': must be a PE number or 'all'"),
    (["--perf", "--loops", "0"], "combine-lab: error: --loops=0: must be an int >= 1 (the reference's run script "
                                 "reads 0 or less as 1; here it is refused)\n"),
    (["--perf", "--warmup", "-1"], "--warmup=-1: must be an int >= 0 (the reference's run script reads a negative "
                                   "value as 0; here it is refused)"),
    (["-fpe", "-1"], "combine-lab: error: -fpe=-1: must be an int >= 0\n"),
    (["-fnpu", "-2"], "-fnpu=-2: must be an NPU id >= 0 (PE r runs on NPU fnpu + r)"),
    (["-a", "plot"], "combine-lab: error: -a/--analyse=plot: needs --perf (it draws the perf CSVs of this run)\n"),
    (["-ipport", "127.0.0.1:8767"], "-ipport='127.0.0.1:8767': must be tcp://HOST:PORT (e.g. tcp://127.0.0.1:8767), "
                                    "PORT in 1-65535, at most 63 characters"),
    (["-ipport", "tcp://127.0.0.1:65000"], "-ipport='tcp://127.0.0.1:65000': a 127.0.0.1 port must be in "
                                           "[1, 64536] (each launch takes the next of 1000 ports)"),
    (["-topk", "9", "--routing", "zipf:1.0"], "topk=9"),
])
def test_bad_input_is_refused_before_anything_runs_or_is_removed(args, message, tmp_path, capsys, no_leaks):
    old = tmp_path / "combine_doubleplane_perf_rank0.csv"
    old.write_text(HEADER + "\n")
    code, out, err = run_cli(["run", *SMALL, "--output-dir", str(tmp_path), *args], capsys)
    assert code == 2
    assert err.startswith("combine-lab: error: ")
    assert message in err
    assert out == "" and old.is_file()  # nothing ran, nothing was removed


def test_an_output_dir_that_cannot_be_made_is_refused_before_launch(tmp_path, capsys, no_leaks):
    (tmp_path / "file").write_text("x")
    code, out, err = run_cli(["run", *SMALL, "--perf", "--output-dir", str(tmp_path / "file" / "perf")], capsys)
    assert (code, out) == (2, "")
    assert err == (f"combine-lab: error: --output-dir {tmp_path}/file/perf: under {tmp_path}/file, which is a file, "
                   f"not a folder\n")


def test_analyse_takes_plot_or_md_only(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run", *SMALL, "--perf", "-a", "pdf"])
    assert e.value.code == 2
    assert "argument -a/--analyse: invalid choice: 'pdf' (choose from 'plot', 'md')" in capsys.readouterr().err


def test_console_script_help_lists_reference_flags_and_says_what_is_removed():
    out = subprocess.run([sys.executable, "-m", "combine_lab", "run", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for flag in ["-pes", "-gnpus", "-fnpu", "-fpe", "-ipport", "-bs", "-h H", "-topk", "-expertPerPe", "-type",
                 "--perf", "--warmup", "--loops", "--pes-list", "--bs-list", "--h-list", "--topk-list",
                 "--expert-per-pe-list", "--prof-pe", "--output-dir", "-a {plot,md}, --analyse {plot,md}",
                 "--variant", "--routing", "--target", "--min-sdma-bytes"]:
        assert flag in out.stdout, flag
    text = " ".join(out.stdout.split())
    assert "The variant's files of an earlier run there are removed first" in text
    assert "compare puts each variant in its own subfolder (<dir>/classic, <dir>/doubleplane)" in text
    assert "combine_perf_rank<r>.csv (classic) or combine_doubleplane_perf_rank<r>.csv" in text


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


def test_compare_prints_both_variants_with_planned_sdma(capsys, no_leaks):
    code, out, err = run_cli(["compare", "-pes", "2", "-bs", "600", "-h", "1024", "-topk", "1", "-expertPerPe", "2",
                              "--routing", "hot-expert:1.0", "--warmup", "0", "--loops", "1"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("not timed (no --perf): two launches per case and variant on the twin (a status flag the "
                        "first leaves ready is caught in the second), the last checked against golden; no speed-up "
                        "table (it compares timed runs: --perf)")
    assert lines[1].split()[:6] == ["case", "routing", "variant", "check", "comm_only/us", "comm_only"]
    classic, dual = run_table(out)
    assert classic[2] == "classic" and dual[2] == "doubleplane"
    # SDMA bytes and planned SDMA: 600 rows x 4096 B on the hot expert's PE.
    assert dual[-4:] == ["2457600", "2457600", "yes", "0"]
    assert classic[-4:] == ["0", "0", "yes", "0"]


def test_run_case_appends_rows_once_every_launch_succeeded_and_writes_the_sidecar(tmp_path, monkeypatch, no_leaks):
    from combine_lab import CaseSpec, run_case

    seen = record_launches(monkeypatch)
    ports = iter(["tcp://127.0.0.1:9301", "tcp://127.0.0.1:9302", "tcp://127.0.0.1:9303"])
    spec = CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2)
    run_case(spec, "classic", loops=2, prof_pe="all", output_dir=tmp_path, ipport=lambda: next(ports))
    res = run_case(spec, "classic", loops=2, output_dir=tmp_path, ipport=lambda: next(ports), fpe=2)
    assert [(a[2], a[4]) for a in seen] == [("tcp://127.0.0.1:9301", "0"), ("tcp://127.0.0.1:9302", "0"),
                                          ("tcp://127.0.0.1:9303", "2")]
    text = (tmp_path / "combine_perf_rank0.csv").read_text()
    assert text.count(HEADER) == 1 and len(text.splitlines()) == 5  # header + 2 runs x 2 metrics
    assert len(dict_rows(tmp_path / "combine_perf_rank1.csv")) == 2
    side = json.loads((tmp_path / "combine_counters_shape_4_16_2_4_2.json").read_text())
    assert (side["variant"], side["prof_pes"], side["launches"]) == ("classic", [0], res.launches)
    with pytest.raises(ParameterError, match=r"^fpe=-1: must be an int >= 0$"):
        run_case(spec, "classic", fpe=-1, output_dir=tmp_path)


def test_a_run_that_fails_on_a_later_profiled_pe_adds_no_rows(tmp_path, monkeypatch, no_leaks):
    from combine_lab import CaseSpec, run_case

    real, calls = runner.launch_pes, []

    def second_fails(binary, pes, argv_for_pe, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise runner.LaunchError("PE 1 failed (test)", pe=1)
        return real(binary, pes, argv_for_pe, **kw)

    monkeypatch.setattr(runner, "launch_pes", second_fails)
    with pytest.raises(runner.LaunchError, match=r"^PE 1 failed \(test\)$"):
        run_case(CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2), "doubleplane", prof_pe="all",
                 output_dir=tmp_path / "perf")
    assert len(calls) == 2 and list((tmp_path / "perf").iterdir()) == []  # checked usable, nothing written


# ---- issue 9 item 6: every output, work and notebook folder is checked before anything runs ----

from combine_lab.errors import ParameterError  # noqa: E402
from combine_lab.run import build as build_mod  # noqa: E402
from combine_lab.run import runner  # noqa: E402


@pytest.fixture
def nothing_runs(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("something ran although the folder was refused")
    for mod, name in ((build_mod, "build"), (runner, "launch_pes"), (runner, "make_case"), (runner, "write_case")):
        monkeypatch.setattr(mod, name, refuse)


@pytest.mark.parametrize("flag, folder, reason", [
    ("--output-dir", "{file}/perf", "under {file}, which is a file, not a folder"),
    ("--output-dir", "{file}", "is a file, not a folder"),
    ("--output-dir", "/proc/combine_lab_x", "under /proc, the kernel's proc file system, which holds no files; "
                                            "pick a folder on a disk"),
    ("--output-dir", "/sys/combine_lab_x", "under /sys, the kernel's sysfs file system, which holds no files; "
                                           "pick a folder on a disk"),
    ("--work-dir", "{file}/work", "under {file}, which is a file, not a folder"),
    ("--work-dir", "/proc/x", "under /proc, the kernel's proc file system, which holds no files; "
                              "pick a folder on a disk"),
])
def test_unusable_folder_refused_before_anything_runs(tmp_path, capsys, nothing_runs, flag, folder, reason):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    folder, reason = folder.format(file=a_file), reason.format(file=a_file)
    code, out, err = run_cli(["run", *SMALL, "--perf", flag, folder], capsys)
    assert code == 2
    assert err == f"combine-lab: error: {flag} {folder}: {reason}\n"
    assert out == "" and a_file.read_text() == "not a folder"


@pytest.mark.parametrize("argv, said", [
    (["compare", "-pes", "0"], "combine-lab: error: -pes: pes=0: must be an int >= 1\n"),
    (["compare", "-pes", "2", "--prof-pe", "9"],
     "combine-lab: error: --prof-pe=9: must be 'all' or a PE in [0, 1] (shape_8_7168_8_4_2 has 2 PEs)\n"),
    (["run", "-pes", "2", "--loops", "0"], None),
])
def test_a_refused_flag_after_the_folder_checks_leaves_no_empty_folder(tmp_path, capsys, nothing_runs, monkeypatch,
                                                                       argv, said):
    """A fresh user's find: the output and work folders were made by their check and left behind when a
    later flag was refused (an empty output/perf in the current folder)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli([*argv, "--perf", "--work-dir", str(tmp_path / "w" / "cases")], capsys)
    assert code == 2 and out == "" and (said is None or err == said), err
    assert sorted(tmp_path.iterdir()) == []


def test_unwritable_folder_is_refused_naming_the_reason(tmp_path, capsys, nothing_runs):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        probe = ro / "probe"
        try:
            probe.mkdir()
            probe.rmdir()
            pytest.skip("this user writes in read-only folders (root)")
        except PermissionError:
            pass
        code, _, err = run_cli(["run", *SMALL, "--perf", "--output-dir", str(ro / "perf")], capsys)
        assert code == 2 and err == f"combine-lab: error: --output-dir {ro}/perf: cannot create it: EACCES (Permission denied)\n"
    finally:
        ro.chmod(0o700)


def test_run_case_refuses_an_unusable_output_or_work_dir(tmp_path, nothing_runs):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    from combine_lab.case.spec import CaseSpec
    spec = CaseSpec(pes=2, bs=8, h=16, topk=2, expert_per_pe=2)
    with pytest.raises(ParameterError) as err:
        runner.run_case(spec, "classic", output_dir=a_file)
    assert str(err.value) == f"output_dir {a_file}: is a file, not a folder"
    with pytest.raises(ParameterError) as err:
        runner.run_case(spec, "classic", work_dir=a_file / "w")
    assert str(err.value) == f"work_dir {a_file}/w: under {a_file}, which is a file, not a folder"


def test_notebooks_out_under_proc_refused_before_anything_runs(capsys, monkeypatch):
    pytest.importorskip("papermill", reason="needs the lab extra: pip install -e '.[lab]'")
    import papermill
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("ran a notebook"))
    code, out, err = run_cli(["notebooks", "--only", "sweep", "--out", "/proc/lab"], capsys)
    assert code == 2
    assert err == ("combine-lab: error: --out /proc/lab: under /proc, the kernel's proc file system, which holds no "
                   "files; pick a folder on a disk\n")


def test_notebook_output_dir_is_checked(tmp_path):
    from combine_lab.lab import records
    (tmp_path / "f").write_text("")
    with pytest.raises(ParameterError) as err:
        records.output_dir(tmp_path / "f" / "lab")
    assert str(err.value) == f"output_dir {tmp_path}/f/lab: under {tmp_path}/f, which is a file, not a folder"
    assert records.output_dir(tmp_path / "new" / "lab") == (tmp_path / "new" / "lab").resolve()


# ---- issue 9 item 9: the smaller faults ----

import combine_lab  # noqa: E402
from combine_lab.run.launch import check_ipport  # noqa: E402


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    root = __import__("pathlib").Path(combine_lab.__file__).resolve().parent
    assert capsys.readouterr().out == f"combine-lab {combine_lab.__version__} ({root})\n"
    proc = subprocess.run([sys.executable, "-m", "combine_lab", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == f"combine-lab {combine_lab.__version__} ({root})\n"


@pytest.mark.parametrize("command", ["run", "compare"])
def test_target_npu_without_cann_refuses_every_variant_and_says_so(command, capsys, monkeypatch, nothing_runs):
    """The field report: `run --target npu` said "the classic variant still runs"; without CANN nothing runs."""
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        monkeypatch.delenv(var, raising=False)
    code, out, err = run_cli([command, *SMALL, "--target", "npu"], capsys)
    assert code == 2 and out == ""
    variant = "doubleplane" if command == "run" else "classic"
    assert err == (f"combine-lab: error: variant={variant} on target=npu: refused: no usable CANN here "
                   "(ASCEND_HOME_PATH is not set), and every variant needs it: install the CANN toolkit and run "
                   "`source <CANN>/set_env.sh` (it sets ASCEND_HOME_PATH)\n")
    assert "still runs" not in err


def test_negative_first_npu_refused_before_any_pe_starts(capsys, nothing_runs):
    code, _, err = run_cli(["run", *SMALL, "-fnpu", "-1"], capsys)
    assert code == 2 and err == "combine-lab: error: -fnpu=-1: must be an NPU id >= 0 (PE r runs on NPU fnpu + r)\n"


@pytest.mark.parametrize("ipport", ["127.0.0.1:8767", "tcp://127.0.0.1", "tcp://127.0.0.1:0", "tcp://127.0.0.1:70000",
                                    "udp://127.0.0.1:8767", "tcp://127.0.0.1:87a", "tcp://" + "h" * 54 + ":8767"])
def test_malformed_ipport_refused_before_any_pe_starts(ipport, capsys, nothing_runs):
    code, _, err = run_cli(["run", *SMALL, "-ipport", ipport], capsys)
    assert code == 2
    assert err == (f"combine-lab: error: -ipport={ipport!r}: must be tcp://HOST:PORT (e.g. tcp://127.0.0.1:8767), "
                   "PORT in 1-65535, at most 63 characters\n")


@pytest.mark.parametrize("ipport", ["tcp://127.0.0.1:8767", "tcp://localhost:1", "tcp6://[::1]:65535",
                                    "tcp://node-3.cluster:9000"])
def test_well_formed_ipport_accepted(ipport):
    assert check_ipport(ipport) == ipport


def test_run_case_refuses_bad_fnpu_and_ipport_before_launching(nothing_runs):
    from combine_lab.case.spec import CaseSpec
    spec = CaseSpec(pes=2, bs=8, h=16, topk=2, expert_per_pe=2)
    with pytest.raises(ParameterError, match=r"^fnpu=-1: must be an NPU id >= 0"):
        runner.run_case(spec, "classic", fnpu=-1)
    with pytest.raises(ParameterError, match=r"^ipport='tcp://x': must be tcp://HOST:PORT"):
        runner.run_case(spec, "classic", ipport="tcp://x")


def test_notebooks_only_counts_the_figures_it_made(tmp_path, capsys, monkeypatch):
    """The field report: `notebooks --only X` counted every PNG of the output folder, other notebooks' too."""
    pytest.importorskip("papermill", reason="needs the lab extra: pip install -e '.[lab]'")
    import papermill
    out = tmp_path / "lab"
    out.mkdir()
    for name in ("01_a", "01_b", "02_c", "03_comm_only_speedup_heatmaps"):
        (out / f"{name}.png").write_bytes(b"\x89PNG old")

    def fake_run(nb, target, parameters, **kw):
        (out / "03_comm_only_speedup_heatmaps.png").write_bytes(b"\x89PNG new figure")  # rewritten
        (out / "03_sdma_share_vs_speedup.png").write_bytes(b"\x89PNG new")  # made
        __import__("pathlib").Path(target).write_text("{}")
    monkeypatch.setattr(papermill, "execute_notebook", fake_run)
    code, stdout, err = run_cli(["notebooks", "--only", "sweep", "--out", str(out)], capsys)
    assert code == 0, err
    assert stdout.splitlines()[-1] == f"executed notebooks, 2 figures (PNG) and records in {out}"


@pytest.mark.parametrize("args, message", [
    (["-type", "float32"], "-type: dtype='float32': must be one of 'int32_t', 'float16_t', 'bfloat16_t'"),
    (["--timeout", "0"], "--timeout: timeout_s=0.0: must be > 0 seconds"),
    (["--masked-fraction", "2"], "--masked-fraction: masked_fraction=2.0: must be a number in [0, 1]"),
    (["--min-sdma-bytes", "-1"], "--min-sdma-bytes: min_sdma_bytes=-1: must be an int >= 0"),
    (["-pes", "0"], "-pes: pes=0: must be an int >= 1"),
])
def test_a_refusal_names_the_flag_the_user_typed(args, message, capsys):
    """The field report: errors named the Python parameter (dtype=...) of a flag typed as -type."""
    code = cli.main(["run", "-bs", "8", "-h", "64", *args])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"combine-lab: error: {message}"


def test_a_folder_removed_during_the_check_is_not_called_a_file(tmp_path, monkeypatch):
    """CI: with two workers in one checkout, one removed its ./output while the other's check ran
    (exists() true, then is_dir() false): "under .../output, which is a file, not a folder". One stat
    per path now: a folder that vanishes is missing, and the check creates it."""
    from combine_lab import folders
    gone = tmp_path / "output"
    gone.mkdir()
    real = folders._kind
    seen = []

    def racing(path):
        if path == gone.absolute() / "perf" and not seen:
            seen.append(path)
            gone.rmdir()  # the other worker removes it between the checks
        return real(path)
    monkeypatch.setattr(folders, "_kind", racing)
    assert folders.usable_folder(gone / "perf", "--output-dir") == gone / "perf" and (gone / "perf").is_dir()
    assert seen
