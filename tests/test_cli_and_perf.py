"""The combine-lab CLI (flags of combine-facts section 9) and the perf CSV it writes (section 8)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from combine_lab import cli
from combine_lab.run.outputs import PERF_COLUMNS, read_perf_csv

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
    assert (row["Npus"], row["Blocks"], row["UBsize/KB"]) == (2, 2, 80)  # one MTE staging buffer (kernels/combine_kernel.h)
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
    (["--bs-list", "4,x"], "--bs-list='4,x': 'x' is not a valid int"),
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
    out = subprocess.run([sys.executable, "-m", "combine_lab", "run", "--help"], capture_output=True, text=True)
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
        assert code == 2 and err == f"combine-lab: error: --output-dir {ro}/perf: cannot create it (Permission denied)\n"
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
