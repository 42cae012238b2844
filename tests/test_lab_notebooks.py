"""The lab notebooks run headless (``combine-lab notebooks``, papermill) on the twin with small
parameters, and what they record is right; the committed notebooks carry no outputs and
match their jupytext sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import host_processes, twin_segments

from combine_lab import cli, cli_lab, labio
from combine_lab.sweep import TIDY_COLUMNS, read_sweep_csv

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
NAMES = ["01_walkthrough", "02_tuning", "03_sweep"]

#: Small parameters: shared keys go to every notebook that declares them.
PARAMS = """\
warmup: 0
loops: 1
walkthrough:
  skew_h: 8192
02_tuning:
  pes: 2
  bs: 64
  h: 8192
  routing_model: hot-expert
  skew: 0.5
03_sweep:
  pes_list: [2]
  bs_list: "[16, 64]"
  h_list: 8192
  routings: [uniform, "hot-expert:0.5"]
"""


@pytest.fixture(scope="module")
def lab_out(tmp_path_factory, twin_binary):
    """Runs all three notebooks once through the CLI; fails if a PE or segment is left behind.

    The module-scoped run cannot use the function-scoped ``no_leaks``; it makes the same
    checks (conftest's helpers see only this test run's PEs and segments: the kernels and
    their PEs inherit the run's COMBINE_LAB_SESSION_TAG)."""
    out = tmp_path_factory.mktemp("lab")
    params = out / "params.yaml"
    params.write_text(PARAMS)
    before = twin_segments()
    code = cli.main(["notebooks", "--params", str(params), "--out", str(out)])
    assert code == 0, [p.name for p in out.iterdir()]
    assert not twin_segments() - before, "shared-memory segments left behind"
    assert not host_processes(), "combine_host processes left running"
    return out


def test_cli_leaves_executed_copies_figures_and_records(lab_out, capsys):
    for name in NAMES:
        nb = nbformat.read(lab_out / f"{name}.ipynb", as_version=4)
        assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), name
        injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert injected and str(lab_out) in injected[0].source
        assert (lab_out / f"{name}{labio.RECORD_SUFFIX}").is_file()
    pngs = {p.name for p in lab_out.glob("*.png")}
    assert {"01_segment_map_tiny.png", "01_segment_map_skewed.png", "01_compare_skewed.png", "02_segment_map.png",
            "02_compare.png", "02_history.png", "03_comm_only_ratio_heatmaps.png",
            "03_sdma_share_vs_speedup.png"} <= pngs
    assert all((lab_out / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


def test_walkthrough_exercises_and_checks_pass(lab_out):
    r = labio.read_record(lab_out, "01_walkthrough")
    assert r["exercises"]["all_ok"] and len(r["exercises"]) == 6 and all(r["exercises"].values())
    for part in ("tiny", "skewed"):
        for variant in ("classic", "doubleplane"):
            assert r[part][variant]["check_ok"] and r[part][variant]["counters_ok"], (part, variant)
    assert r["tiny"]["doubleplane"]["sdma_bytes"] > 0 and r["skewed"]["doubleplane"]["sdma_bytes"] > 0
    assert r["skewed"]["classic"]["sdma_bytes"] == 0
    busiest = r["skewed_busiest_core_mte_bytes"]
    assert busiest["doubleplane"] < busiest["classic"]


def test_tuning_notebook_ran_the_app_twice(lab_out):
    r = labio.read_record(lab_out, "02_tuning")
    assert r["runs"] == 2 and r["checks"] == ["PASS", "PASS"] and r["counters_ok"] == [True, True]
    assert r["sdma_segments"] > 0


def test_sweep_csv_has_every_case_and_passing_checks(lab_out):
    r = labio.read_record(lab_out, "03_sweep")
    tidy = read_sweep_csv(lab_out / "sweep.csv")
    assert list(tidy.columns) == TIDY_COLUMNS
    assert r["cases"] == 4 and r["rows"] == len(tidy) == 4 * 2 * 2  # cases x variants x metrics
    assert (tidy["check"] == "PASS").all() and tidy["counters_ok"].all() and r["all_pass"]
    assert sorted(set(tidy["BS"])) == [16, 64] and set(tidy["H"]) == {8192} and set(tidy["Loops"]) == {1}
    assert set(tidy["routing"]) == {"uniform", "hot-expert:0.5"}
    assert set(zip(tidy["variant"], tidy["Metric"])) == {(v, m) for v in ("classic", "doubleplane")
                                                         for m in ("full_op", "comm_only")}
    dual_hot = tidy[(tidy["variant"] == "doubleplane") & (tidy["routing"] == "hot-expert:0.5") & (tidy["BS"] == 64)]
    assert (dual_hot["sdma_bytes"] > 0).all()


def test_papermill_cli_with_a_string_list(tmp_path, no_leaks):
    """As papermill users expect: -p passes '[8,16]' as a string; the notebook reads it as a list."""
    out_nb = tmp_path / "out.ipynb"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOKS / "03_sweep.ipynb"), str(out_nb), "-p", "bs_list",
           "[8,16]", "-p", "h_list", "64", "-p", "routings", "uniform", "-p", "loops", "1", "-p", "warmup", "0",
           "-p", "output_dir", str(tmp_path), "-k", cli_lab.KERNEL_NAME, "--no-progress-bar"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tidy = read_sweep_csv(tmp_path / "sweep.csv")
    assert sorted(set(tidy["BS"])) == [8, 16] and len(tidy) == 2 * 2 * 2 and (tidy["check"] == "PASS").all()


def test_notebooks_declare_parameters():
    import papermill
    declared = papermill.inspect_notebook(str(NOTEBOOKS / "03_sweep.ipynb"))
    assert {"pes_list", "bs_list", "h_list", "topk_list", "expert_per_pe_list", "routings", "dtype", "warmup",
            "loops", "target", "output_dir"} <= set(declared)
    for name in NAMES:
        assert "output_dir" in papermill.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))


@pytest.mark.parametrize("text, suffix, fragment", [
    ("nope: 1", ".yaml", "'nope' is not a parameter of any notebook"),
    ("{bad json", ".json", "not valid JSON"),
    ("- 1\n- 2", ".yaml", "must hold a mapping"),
    ("03_sweep: 5", ".yml", "must be a mapping"),
])
def test_cli_refuses_bad_params_before_running(tmp_path, capsys, text, suffix, fragment):
    p = tmp_path / f"params{suffix}"
    p.write_text(text)
    assert cli.main(["notebooks", "--params", str(p), "--out", str(tmp_path / "o")]) == 2
    assert fragment in capsys.readouterr().err
    assert not list(tmp_path.glob("o/*.ipynb"))


def test_cli_refuses_unknown_notebook_and_missing_params(tmp_path, capsys):
    assert cli.main(["notebooks", "--only", "04_nothing", "--out", str(tmp_path / "o")]) == 2
    assert "no such notebook" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert cli.main(["notebooks", "--params", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_split_params_routes_keys():
    nbs = cli_lab.find_notebooks()
    assert [p.stem for p in nbs] == NAMES
    per = cli_lab.split_params({"loops": 2, "sweep": {"bs_list": [8]}, "01_walkthrough": {"seed": 1}}, nbs)
    assert per["03_sweep"] == {"bs_list": [8], "loops": 2}
    assert per["01_walkthrough"] == {"seed": 1, "loops": 2} and per["02_tuning"] == {"loops": 2}
    assert [p.stem for p in cli_lab.find_notebooks(only=["sweep", "01_walkthrough"])] == ["01_walkthrough", "03_sweep"]


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_no_outputs_and_matches_its_source(name):
    import jupytext
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: strip outputs"
    assert nb.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    src = jupytext.read(NOTEBOOKS / f"{name}.py")
    pairs = list(zip([(c.cell_type, c.source) for c in nb.cells], [(c.cell_type, c.source) for c in src.cells]))
    assert len(nb.cells) == len(src.cells) and all(a == b for a, b in pairs), \
        f"{name}.ipynb and {name}.py differ: run `jupytext --sync notebooks/{name}.py`"
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert sum("parameters" in t for t in tags) == 1
    # never build with a shell cell: the notebooks call combine_lab
    assert not any(line.lstrip().startswith(("!", "%%bash", "%%sh")) for c in nb.cells if c.cell_type == "code"
                   for line in c.source.splitlines())


def test_every_tracked_notebook_is_stripped():
    tracked = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert tracked, "no notebooks tracked"
    for rel in tracked:
        data = json.loads((ROOT / rel).read_text())
        assert all(not c.get("outputs") for c in data["cells"] if c["cell_type"] == "code"), rel
