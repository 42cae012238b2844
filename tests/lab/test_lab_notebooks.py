"""The lab notebooks run headless (``combine-lab notebooks``, papermill) on the twin with small
parameters, and what they record is right; the committed notebooks carry no outputs and
match their jupytext sources."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LAB_EXTRA, host_processes, require, twin_segments

require("nbformat", "papermill", "jupytext", "ipykernel", "ipywidgets", "yaml", reason=LAB_EXTRA)
import nbformat  # noqa: E402

from combine_lab import cli  # noqa: E402
from combine_lab.lab import notebooks, records, sweep  # noqa: E402
from combine_lab.planning.planner import DEFAULT_MIN_SDMA_BYTES  # noqa: E402
from combine_lab.results import rows  # noqa: E402
from combine_lab.results.tables import SUMMARY_COLUMNS, TIDY_COLUMNS, read_sweep_csv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NAMES = ["01_walkthrough", "02_tuning", "03_sweep"]

#: Small parameters: shared keys go to every notebook that declares them.
PARAMS = """\
warmup: 0
loops: 1
walkthrough:
  skew_h: 8192
  skew_repeats: 2
02_tuning:
  pes: 2
  bs: 64
  h: 8192
  routing_model: hot-expert
  skew: 0.5
  repeats: 2
03_sweep:
  pes_list: [2]
  bs_list: "[16, 64]"
  h_list: 8192
  routings: [uniform, "hot-expert:0.5"]
  repeats: 2
"""


#: The tests that read ``lab_out`` run all three notebooks once (slow); the fast set still executes
#: 03_sweep headless through papermill, and checks the walkthrough's exercises and answers
#: without a kernel (test_explain_and_exercises.py).
@pytest.fixture(scope="session")  # session: its xdist group may interleave with other modules
def lab_out(tmp_path_factory, twin_binary):
    """Runs all three notebooks once through the CLI; fails if a PE or segment is left behind.

    The session-scoped run cannot use the function-scoped ``no_leaks``; it makes the same
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


def test_the_notebook_libraries_load_without_the_iri_grammar():
    """nbformat validates with jsonschema, imported here as the lab imports it (combine_lab/lab/nb_imports.py):
    rfc3987-syntax's grammar not built (its package still installed and importable later), the
    schema checks nbformat needs still there."""
    import importlib.util

    import jsonschema
    assert "jsonschema" in sys.modules and "rfc3987_syntax" not in sys.modules  # not imported, no marker left
    assert importlib.util.find_spec("rfc3987_syntax") is not None, "installed with jupyter-events' jsonschema extra"
    checks = jsonschema.FormatChecker().checkers
    assert "iri" not in checks and "date" in checks
    nbformat.validate(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]))
    with pytest.raises(nbformat.ValidationError, match="'cell_type' is a required property|not valid under"):
        nbformat.validate({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"id": "a", "source": ""}]})


@pytest.mark.slow  # the three notebooks through the CLI (~20 s); the fast set runs 03 below
def test_cli_leaves_executed_copies_figures_and_records(lab_out, capsys):
    for name in NAMES:
        nb = nbformat.read(lab_out / f"{name}.ipynb", as_version=4)
        assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), name
        injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert injected and str(lab_out) in injected[0].source
        assert (lab_out / f"{name}{records.RECORD_SUFFIX}").is_file()
    pngs = {p.name for p in lab_out.glob("*.png")}
    assert {"01_segment_map_tiny.png", "01_segment_map_skewed.png", "01_compare_skewed.png", "02_segment_map.png",
            "02_compare.png", "02_history.png", "03_comm_only_speedup_heatmaps.png",
            "03_sdma_share_vs_speedup.png"} <= pngs
    assert all((lab_out / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


@pytest.mark.slow  # the three notebooks through the CLI (~20 s); the fast set runs 03 below
def test_walkthrough_exercises_and_checks_pass(lab_out):
    r = records.read_record(lab_out, "01_walkthrough")
    assert r["reveal_answers"] is True  # headless: our answers, which must all hold
    assert r["exercises"]["all_ok"] and len(r["exercises"]) == 7 and all(r["exercises"].values())
    assert "exercise 6 (rows SDMA takes off a remote core)" in r["exercises"]
    for part in ("tiny", "skewed"):
        for variant in ("classic", "doubleplane"):
            assert r[part][variant]["check_ok"] and r[part][variant]["counters_ok"], (part, variant)
    assert r["tiny"]["doubleplane"]["sdma_bytes"] > 0 and r["skewed"]["doubleplane"]["sdma_bytes"] > 0
    assert r["skewed"]["classic"]["sdma_bytes"] == 0
    busiest = r["skewed_busiest_core_mte_bytes"]
    assert busiest["doubleplane"] < busiest["classic"]
    timing = r["skewed_speedup"]  # times with their spread; speed-up classic / doubleplane
    assert timing["speedup_lo"] <= timing["speedup"] <= timing["speedup_hi"]
    # the verdict is the one its spread gives (the twin's times are noise-dominated: any of the three)
    expected = "faster" if timing["speedup_lo"] > 1.0 else "slower" if timing["speedup_hi"] < 1.0 else "within noise"
    assert timing["verdict"] == expected, timing


@pytest.mark.slow  # the three notebooks through the CLI (~20 s); the fast set runs 03 below
def test_tuning_notebook_ran_the_app_twice(lab_out):
    r = records.read_record(lab_out, "02_tuning")
    assert r["runs"] == 2 and r["checks"] == ["PASS", "PASS"] and r["counters_ok"] == [True, True]
    assert r["repeats"] == [2, 2]  # each Run's speed-up: median within its min-max, and the verdict it gives
    for (lo, mid, hi), word in zip(r["speedup_spread"], r["verdicts"]):
        assert lo <= mid <= hi and word == ("faster" if lo > 1 else "slower" if hi < 1 else "within noise")
    assert r["sdma_segments"] > 0


@pytest.mark.slow  # the three notebooks through the CLI (~20 s); the fast set runs 03 below
def test_sweep_csv_has_every_case_and_passing_checks(lab_out):
    r = records.read_record(lab_out, "03_sweep")
    tidy = read_sweep_csv(lab_out / "sweep.csv")
    assert list(tidy.columns) == TIDY_COLUMNS
    # cases x repeats x variants x profiled PEs (prof_pe "all") x metrics
    assert r["cases"] == 4 and r["repeats"] == 2 and r["rows"] == len(tidy) == 4 * 2 * 2 * 2 * 2
    assert (tidy["check"] == "PASS").all() and tidy["counters_ok"].all() and r["all_pass"]
    assert sorted(set(tidy["BS"])) == [16, 64] and set(tidy["H"]) == {8192} and set(tidy["Loops"]) == {1}
    assert set(tidy["routing"]) == {"uniform", "hot-expert:0.5"} and set(tidy["repeat"]) == {0, 1}
    assert set(tidy["ProfPe"]) == {0, 1}
    assert set(zip(tidy["variant"], tidy["Metric"])) == {(v, m) for v in ("classic", "doubleplane")
                                                         for m in ("full_op", "comm_only")}
    dual_hot = tidy[(tidy["variant"] == "doubleplane") & (tidy["routing"] == "hot-expert:0.5") & (tidy["BS"] == 64)]
    assert (dual_hot["sdma_bytes"] > 0).all()
    # the summary CSV: one speed-up convention, times with their spread, no-SDMA cases marked
    summary = __import__("pandas").read_csv(lab_out / "sweep_summary.csv")
    assert list(summary.columns) == SUMMARY_COLUMNS and not [c for c in summary.columns if "ratio" in c]
    assert r["cases_with_sdma"] == int((summary["sdma_share"] > 0).sum()) == 1
    assert (summary.loc[summary["sdma_share"] == 0, "comm_only_verdict"] == rows.NO_SDMA).all()
    assert r["speedup"] == rows.SPEEDUP
    # every kernel's speed-up (the notebook's pairs table) is the summary's, case by case (routings apart)
    from combine_lab.results.pairs import pair_speedups
    from combine_lab.results.tables import summarize
    cols = ["case_id", "routing", "comm_only_speedup", "comm_only_verdict"]
    assert pair_speedups(tidy)[cols].values.tolist() == summarize(tidy)[cols].values.tolist()


def _sweep_defaults() -> dict:
    import papermill
    declared = papermill.inspect_notebook(str(NOTEBOOKS / "03_sweep.ipynb"))
    return {k: eval(v["default"], {"__builtins__": {}}) for k, v in declared.items()}  # noqa: S307 - our own cell


def _planned(params: dict):
    grid = sweep.make_grid(params["pes_list"], params["bs_list"], params["h_list"], params["topk_list"],
                           params["expert_per_pe_list"], params["routings"], dtype=params["dtype"],
                           seed=int(params["seed"]), skip_invalid=True)
    return sweep.planned_shares(grid, int(params["min_sdma_bytes"]))


def test_default_sweep_compares_cases_with_sdma_traffic():
    """With its default parameters 03_sweep measures mostly cases that send by SDMA, at the
    real 2 MiB floor, with enough loops and repeats for a spread (on the twin the spread over repeats
    is scheduling noise, alike at 5 loops and at 10: the notebook says so and why 5 suffice)."""
    d = _sweep_defaults()
    assert d["min_sdma_bytes"] == DEFAULT_MIN_SDMA_BYTES and d["repeats"] >= 3 and d["loops"] >= 5
    assert d["warmup"] >= 1
    assert d["prof_pe"] == "all"
    shares = _planned(d)
    with_sdma = shares[shares["sdma_share"] > 0]
    assert len(with_sdma) >= 6 and len(with_sdma) >= 0.75 * len(shares), shares
    assert with_sdma["sdma_share"].min() >= 0.1
    assert {"uniform"} < set(with_sdma["routing"])  # skewed routings too


def test_docs_papermill_example_is_not_degenerate_and_writes_under_output():
    """The papermill line of docs/lab.md: output notebook under output/ (ignored by git), and -p
    values that give cases with SDMA traffic; the 03_sweep notebook shows the same line."""
    page = (ROOT / "docs" / "lab.md").read_text()
    lines = [ln.strip() for ln in page.splitlines() if ln.strip().startswith("papermill notebooks/03_sweep.ipynb")]
    assert len(lines) == 1, lines
    argv = shlex.split(lines[0])
    out_nb = Path(argv[2])
    assert out_nb.parts[0] == "output" and out_nb.suffix == ".ipynb"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(out_nb)], cwd=ROOT)
    assert ignored.returncode == 0, f"{out_nb} is not ignored by git"
    assert f"mkdir -p {out_nb.parent}" in page  # papermill does not create it
    assert lines[0] in (NOTEBOOKS / "03_sweep.py").read_text()
    params = _sweep_defaults()
    args = argv[3:]
    for flag, name, value in zip(args[::3], args[1::3], args[2::3]):
        assert flag == "-p" and name in params
        params[name] = value  # as papermill passes it: a string
    shares = _planned(params)
    assert (shares["sdma_share"] > 0).sum() >= len(shares) // 2, shares


@pytest.mark.slow  # a Jupyter kernel started by the papermill CLI: seconds each
def test_papermill_cli_with_a_string_list(tmp_path, no_leaks):
    """As papermill users expect: -p passes '[8,16]' as a string; the notebook reads it as a list."""
    out_nb = tmp_path / "out.ipynb"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOKS / "03_sweep.ipynb"), str(out_nb), "-p", "bs_list",
           "[8,16]", "-p", "h_list", "64", "-p", "routings", "uniform", "-p", "loops", "1", "-p", "warmup", "0",
           "-p", "repeats", "1", "-p", "prof_pe", "0", "-p", "output_dir", str(tmp_path),
           "-k", notebooks.KERNEL_NAME, "--no-progress-bar"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tidy = read_sweep_csv(tmp_path / "sweep.csv")
    assert sorted(set(tidy["BS"])) == [8, 16] and len(tidy) == 2 * 2 * 2 and (tidy["check"] == "PASS").all()
    # tiny rows: nothing reaches the floor; the notebook says so, and so does the figure
    assert records.read_record(tmp_path, "03_sweep")["cases_with_sdma"] == 0
    assert (tmp_path / "03_speedup_vs_sdma_engines.png").read_bytes()[:4] == b"\x89PNG"  # the modelled engines figure
    text = "".join(o.get("text", "") for c in nbformat.read(out_nb, as_version=4).cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "WARNING: no case sends anything by SDMA" in text
    assert (tmp_path / "03_sdma_share_vs_speedup.png").is_file()
    # the saved notebook shows the finished bar (a widget bar saved its first state: "sweep: 0%| | 0/2")
    nb = nbformat.read(out_nb, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "run_sweep(" in c.source)
    assert all(o.output_type == "stream" for o in cell.outputs[:2]), [o.output_type for o in cell.outputs]
    shown = "".join(o.text for o in cell.outputs if o.output_type == "stream").split("\n")[0].split("\r")[-1]
    assert shown.startswith("sweep: 100%|") and " 2/2 [" in shown, shown


@pytest.mark.slow  # two Jupyter kernels started by the papermill CLI: seconds each
def test_papermill_sweep_over_kernel_settings(tmp_path, no_leaks):
    """-p settings '["reference","segment-c4"]': classic and doubleplane under each group, the tables
    and record grouped by it, the modelled section saying what the model does not price yet; a bad
    label stops the notebook before anything is built or run, naming settings and the allowed form."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    base = [sys.executable, "-m", "papermill", str(NOTEBOOKS / "03_sweep.ipynb"), str(tmp_path / "out.ipynb"),
            "-p", "bs_list", "[8]", "-p", "h_list", "64", "-p", "routings", "hot-expert:0.5", "-p", "loops", "1",
            "-p", "warmup", "0", "-p", "repeats", "1", "-p", "prof_pe", "0", "-p", "min_sdma_bytes", "0",
            "-p", "model_pes", "0", "-p", "output_dir", str(tmp_path), "-k", notebooks.KERNEL_NAME,
            "--no-progress-bar"]
    proc = subprocess.run(base + ["-p", "settings", '["reference","segment-c4"]'], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tidy = read_sweep_csv(tmp_path / "sweep.csv")
    comm = tidy[tidy["Metric"] == "comm_only"]
    assert list(zip(comm["variant"], comm["settings"], comm["cores_per_rank"])) == [
        ("classic", "reference", 1), ("doubleplane", "reference", 1), ("classic-c4", "segment-c4", 4),
        ("doubleplane-segment-c4", "segment-c4", 4)]
    assert (tidy["check"] == "PASS").all() and tidy["counters_ok"].all()
    r = records.read_record(tmp_path, "03_sweep")
    assert r["settings"] == ["reference", "segment-c4"] and r["rows"] == 8 and r["all_pass"]
    assert [len(v) for v in r["speedup_by_settings"].values()] == [1, 1]
    assert r["not_modelled"] == {}  # the model prices both groups (a3: 48 AIV cores a die)
    assert r["modelled"]["cases"]["settings"] == ["reference", "segment-c4"]
    assert (tmp_path / "03_comm_only_per_settings.png").is_file()
    (tmp_path / "sweep.csv").unlink()
    bad = subprocess.run(base + ["-p", "settings", '["reference","segmnt"]'], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=180)
    assert bad.returncode != 0
    assert ("ParameterError: settings=['reference', 'segmnt']: 'segmnt' is not a settings label; each must be "
            "'reference', 'segment', 'c<N>' or 'segment-c<N>' (N: cores per source rank)") in bad.stderr + bad.stdout
    assert not (tmp_path / "sweep.csv").exists()


@pytest.mark.slow  # a Jupyter kernel started by the papermill CLI
def test_papermill_sweep_with_your_kernel_in_the_one_speedup_table(tmp_path, no_leaks):
    """-p kernel_source DIR: your kernel runs beside the lab's on the same case files, and the notebook's
    speed-up table holds it and the lab's doubleplane, each against classic (docs/own-kernel.md)."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "-m", "papermill", str(NOTEBOOKS / "03_sweep.ipynb"), str(tmp_path / "out.ipynb"),
         "-p", "bs_list", "[8]", "-p", "h_list", "64", "-p", "routings", "hot-expert:0.5", "-p", "loops", "1",
         "-p", "warmup", "0", "-p", "repeats", "1", "-p", "prof_pe", "0", "-p", "min_sdma_bytes", "0",
         "-p", "model_pes", "0", "-p", "output_dir", str(tmp_path), "-k", notebooks.KERNEL_NAME,
         "-p", "kernel_source", str(ROOT / "tests" / "kernels" / "combine_refstyle"), "--no-progress-bar"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tidy = read_sweep_csv(tmp_path / "sweep.csv")
    assert list(tidy.loc[tidy["Metric"] == "comm_only", "variant"]) == ["classic", "doubleplane", "user:refstyle"]
    book = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    [cell] = [c for c in book.cells if c.cell_type == "code" and "pair_speedups(tidy)" in c.source]
    from combine_lab.results.pairs import pair_speedups
    pairs = pair_speedups(tidy)
    assert pairs[["kernel", "baseline", "repeats"]].values.tolist() == [["doubleplane", "classic", 1],
                                                                        ["user:refstyle", "classic", 1]]
    shown = cell.outputs[0]["data"]["text/html"]
    assert shown.count("<td>classic</td>") == 2 and "<td>user:refstyle</td>" in shown


def test_notebooks_declare_parameters():
    import papermill
    declared = papermill.inspect_notebook(str(NOTEBOOKS / "03_sweep.ipynb"))
    assert {"pes_list", "bs_list", "h_list", "topk_list", "expert_per_pe_list", "routings", "dtype", "warmup",
            "loops", "repeats", "target", "min_sdma_bytes", "prof_pe", "output_dir", "settings"} <= set(declared)
    assert "reveal_answers" in papermill.inspect_notebook(str(NOTEBOOKS / "01_walkthrough.ipynb"))
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


def test_cli_refuses_a_misspelt_notebook_parameter_before_running(tmp_path, capsys, monkeypatch):
    """papermill would only warn "Passed unknown parameter" and run with the defaults."""
    import papermill
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("ran a notebook"))
    p = tmp_path / "params.yaml"
    p.write_text("loops: 2\n03_sweep:\n  bs_lst: [8, 16]\n")
    assert cli.main(["notebooks", "--params", str(p), "--out", str(tmp_path / "o")]) == 2
    allowed = notebooks.declared_parameters(NOTEBOOKS / "03_sweep.ipynb")
    assert allowed[:3] == ["output_dir", "pes_list", "bs_list"]
    assert capsys.readouterr().err == (
        "combine-lab: error: params: 'bs_lst' is not a parameter of notebook 03_sweep (did you mean 'bs_list'?); "
        f"its parameters: {', '.join(allowed)}\n")
    assert not (tmp_path / "o").exists()
    p.write_text("walkthrough:\n  zzz: 1\n")
    assert cli.main(["notebooks", "--params", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "params: 'zzz' is not a parameter of notebook 01_walkthrough; its parameters: output_dir, " in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # a subprocess, a kernel and the whole walkthrough (~7 s)
def test_cli_reader_mode_and_a_quiet_kernel(tmp_path):
    """reveal_answers False: the exercises wait for the reader's answers and the notebook
    still runs to the end; the kernel runs over IPC, so no TCP-encryption warning on stderr."""
    before = sorted(p.name for p in NOTEBOOKS.iterdir())
    params = tmp_path / "params.yaml"
    params.write_text("warmup: 0\nloops: 1\nwalkthrough:\n  reveal_answers: false\n  skew_h: 8192\n"
                      "  skew_repeats: 1\n")
    out = tmp_path / "o"
    proc = subprocess.run([sys.executable, "-m", "combine_lab", "notebooks", "--only", "walkthrough", "--params",
                           str(params), "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "without encryption" not in proc.stderr and "IPKernelApp" not in proc.stderr, proc.stderr
    r = records.read_record(out, "01_walkthrough")
    assert r["reveal_answers"] is False and r["exercises"]["all_ok"] is False
    assert len(r["exercises"]) == 7 and not any(r["exercises"].values())
    text = "".join(o.get("text", "") for c in nbformat.read(out / "01_walkthrough.ipynb", as_version=4).cells
                   if c.cell_type == "code" for o in c.get("outputs", []))
    assert "0 of 6 exercises right" in text and "no answer yet: put yours in answer_6" in text
    # no answer on screen: the tables that hold them wait for the reader's right answer
    book = nbformat.read(out / "01_walkthrough.ipynb", as_version=4)
    shown = json.dumps([o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])])
    for hidden in ("window_slot", "payload_offset", "x_head",  # exercises 2 and 3's columns
                   "classic: MTE bytes"):  # exercise 6's table (issue 20: it was shown right after the exercise)
        assert hidden not in shown, hidden
    for waiting in ("(the segment bounds appear here once your answer is right)",
                    "(every row's slot and byte offsets appear here once your answer is right)",
                    "(PE 1's decision table and the segment map of both PEs appear here once your answer is right)",
                    "(the busiest remote cores' bytes appear here once your answer to exercise 6 is right)"):
        assert waiting in text, waiting
    assert not (out / "01_segment_map_tiny.png").exists()  # the map outlines exercise 4's SDMA segments
    assert sorted(p.name for p in NOTEBOOKS.iterdir()) == before  # no kernel sockets left beside the notebooks


def test_cli_refuses_unknown_notebook_and_missing_params(tmp_path, capsys):
    assert cli.main(["notebooks", "--only", "04_nothing", "--out", str(tmp_path / "o")]) == 2
    assert "no such notebook" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert cli.main(["notebooks", "--params", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_split_params_routes_keys():
    nbs = notebooks.find_notebooks()
    assert [p.stem for p in nbs] == NAMES
    per = notebooks.split_params({"loops": 2, "sweep": {"bs_list": [8]}, "01_walkthrough": {"seed": 1}}, nbs)
    assert per["03_sweep"] == {"bs_list": [8], "loops": 2}
    assert per["01_walkthrough"] == {"seed": 1, "loops": 2} and per["02_tuning"] == {"loops": 2}
    only = notebooks.find_notebooks(only=["sweep", "01_walkthrough"])
    assert [p.stem for p in only] == ["01_walkthrough", "03_sweep"]


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


# ---- issue 9 item 2: parameters given as text are converted by their declared type, or refused ----

def test_every_notebook_parameter_declares_its_type():
    """The parameters cells annotate every parameter (int, float, bool, str, list of int or str,
    Optional[str]), so that papermill, the CLI and the notebook's own first cell know it."""
    allowed = {"int", "float", "bool", "str", "list[int]", "list[str]", "Optional[str]"}
    for name in NAMES:
        types = notebooks.declared_types(NOTEBOOKS / f"{name}.ipynb")
        assert types and set(types.values()) <= allowed, (name, types)
    assert notebooks.declared_types(NOTEBOOKS / "02_tuning.ipynb")["h"] == "int"
    assert notebooks.declared_types(NOTEBOOKS / "01_walkthrough.ipynb")["reveal_answers"] == "bool"
    assert notebooks.declared_types(NOTEBOOKS / "03_sweep.ipynb")["routings"] == "list[str]"


def test_cli_converts_text_params_to_the_declared_types(tmp_path, monkeypatch, capsys):
    """The field report: {02_tuning: {pes: "2", bs: "16", h: "4096"}} ran with h the string "4096",
    so the notebook's "double h" step planned h = 40964096."""
    import papermill
    ran = {}
    monkeypatch.setattr(papermill, "execute_notebook",
                        lambda nb, out, parameters, **k: ran.setdefault(Path(nb).stem, parameters))
    p = tmp_path / "params.yaml"
    p.write_text('02_tuning: {pes: "2", bs: "16", h: "4096", skew: "0.5"}\nwalkthrough: {reveal_answers: "False"}\n')
    assert cli.main(["notebooks", "--params", str(p), "--out", str(tmp_path / "o")]) == 0
    assert ran["02_tuning"] == {"output_dir": str(tmp_path / "o"), "pes": 2, "bs": 16, "h": 4096, "skew": 0.5}
    assert ran["01_walkthrough"]["reveal_answers"] is False
    assert 2 * ran["02_tuning"]["h"] == 8192


def test_cli_refuses_a_value_of_the_wrong_type_before_running(tmp_path, monkeypatch, capsys):
    import papermill
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("ran a notebook"))
    p = tmp_path / "params.yaml"
    p.write_text('03_sweep: {bs_list: "16, 6x"}\n02_tuning: {h: "40x"}\n')
    assert cli.main(["notebooks", "--params", str(p), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == "combine-lab: error: params: notebook 02_tuning: parameter h='40x': expected int\n"
    assert not (tmp_path / "o").exists()
    p.write_text('walkthrough: {reveal_answers: "maybe"}\n')
    assert cli.main(["notebooks", "--params", str(p), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == ("combine-lab: error: params: notebook 01_walkthrough: parameter "
                                       "reveal_answers='maybe': expected bool (True/False)\n")


def _first_cells(name: str, tmp_path: Path) -> Path:
    """A copy of notebook ``name`` cut after its first code cell past the parameter check: the
    parameters, the check, and the cell that starts using them."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    params_at = next(i for i in code if "parameters" in nb.cells[i].metadata.get("tags", []))
    keep = [i for i in code if i > params_at][1]
    nb.cells = nb.cells[:keep + 1]
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _papermill(nb: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "papermill", str(nb), str(out), *args, "-p", "output_dir", str(out.parent),
           "--no-progress-bar"]
    return subprocess.run(cmd, cwd=ROOT, env={**os.environ, "MPLBACKEND": "Agg"}, capture_output=True, text=True,
                          timeout=120)


def _text(nb_path: Path) -> str:
    return "".join(o.get("text", "") for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "code"
                   for o in c.get("outputs", []))


@pytest.mark.slow  # a Jupyter kernel started by the papermill CLI: seconds each
def test_plain_papermill_raw_false_is_false(tmp_path):
    """The field report: `papermill 01_walkthrough.ipynb out.ipynb -r reveal_answers False` filled in
    our answers anyway (the string "False" is true). The notebook's first cells convert it."""
    nb = _first_cells("01_walkthrough", tmp_path)
    proc = _papermill(nb, tmp_path / "out.ipynb", "-r", "reveal_answers", "False", "-r", "seed", "42")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "exercises: yours to fill in" in _text(tmp_path / "out.ipynb")


@pytest.mark.slow  # a Jupyter kernel started by the papermill CLI: seconds each
def test_plain_papermill_refuses_a_value_of_the_wrong_type_before_anything_runs(tmp_path):
    nb = _first_cells("02_tuning", tmp_path)
    proc = _papermill(nb, tmp_path / "out.ipynb", "-r", "h", "40x", "-p", "bs", "16")
    assert proc.returncode != 0
    assert "ParameterError: parameter h='40x': expected int" in proc.stderr
    assert "targets here" not in _text(tmp_path / "out.ipynb")  # the next cell never ran


# ---- issue 14 item 4: the walkthrough teaches each part of the design, and its checks run ----

WALKTHROUGH_SECTIONS = ["Glossary", "1 · Case", "2 · The dispatch layout", "3 · Where each row lands",
                        "4 · Plan: the decision rule", "Why `segment_bytes * den > num`, in integers",
                        "The remote average counts empty segments", "pes 2 with expert_per_pe 1 never uses SDMA",
                        "5 · The protocol", "6 · What `comm_only` and `full_op` time", "7 · Run",
                        "8 · Masked slots and the weights", "9 · A skewed case", "10 · Modelled NPU time",
                        "One segment alone, by formula", "The skewed case", "11 · Beyond the reference",
                        "Your exercises"]


def _walkthrough_cells():
    import jupytext
    return jupytext.read(NOTEBOOKS / "01_walkthrough.py").cells


def test_walkthrough_has_every_section_in_order():
    heads = [ln.lstrip("# ").strip() for c in _walkthrough_cells() if c.cell_type == "markdown"
             for ln in c.source.splitlines() if ln.startswith("## ") or ln.startswith("### ")]
    found = [next((i for i, h in enumerate(heads) if h.startswith(s)), None) for s in WALKTHROUGH_SECTIONS]
    assert None not in found, [s for s, i in zip(WALKTHROUGH_SECTIONS, found) if i is None]
    assert found == sorted(found)


def test_walkthrough_defines_source_and_destination_pe_once_in_a_glossary():
    cells = _walkthrough_cells()
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    glossary = next(c.source for c in cells if c.cell_type == "markdown" and c.source.startswith("## Glossary"))
    for term in ("**source PE**", "**destination PE**"):
        assert text.count(term) == 1 and term in glossary, term
    assert "In combine it is the **receiver**" in glossary and "In combine it is the **sender**" in glossary


def test_walkthrough_shows_the_kernel_from_its_file_never_pasted():
    cells = _walkthrough_cells()
    everything = "\n".join(c.source for c in cells)
    for pasted in ("__aicore__", "aclshmem", "SHMEMI_PROF_START(", "threshold_den_ >"):
        assert pasted not in everything, pasted
    shown = re.findall(r'teach\.kernel_source\("(\w+)"\)', everything)
    assert {"SegBegin", "SegEnd", "RowSlot", "SlotPayload", "SlotStatus", "UseSdma", "SendSegments", "PutFlags",
            "Process", "SlotValid", "WaitSlot"} <= set(shown)


def test_walkthrough_says_what_a_twin_time_is_before_printing_one():
    cells = _walkthrough_cells()
    caveat = next(i for i, c in enumerate(cells) if "Before the first time: what a twin time is" in c.source)
    first_time = next(i for i, c in enumerate(cells) if c.cell_type == "code" and "time_us(" in c.source)
    assert caveat < first_time


def test_walkthrough_protocol_steps_are_the_kernels_and_core_programs():
    """Section 5 numbers stage 1's phases as SendSegments' comments do, and core_program's phase
    column counts the same phases."""
    from combine_lab.case.case import make_case
    from combine_lab.case.spec import CaseSpec
    from combine_lab.lab import teach
    from combine_lab.planning import explain
    from combine_lab.planning.planner import plan
    cell = next(c.source for c in _walkthrough_cells() if c.source.startswith("## 5 · The protocol"))
    prose = [int(m) for m in re.findall(r"^(\d)\. ", cell, flags=re.M)]
    kernel = [int(m) for m in re.findall(r"^\s*// (\d)\. ", teach.kernel_source("SendSegments").text, flags=re.M)]
    case = make_case(CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, seed=42))
    program = explain.core_program(case, plan(case, "doubleplane", min_sdma_bytes=0), pe=0, core=1)
    assert prose == kernel == sorted(program["phase"].unique()) == [1, 2, 3]


def test_reveal_answers_is_false_for_a_reader_and_true_headless():
    import jupytext
    nb = jupytext.read(NOTEBOOKS / "01_walkthrough.py")
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert re.search(r"^reveal_answers: bool = False\b", cell.source, flags=re.M)
    assert notebooks.headless_defaults(NOTEBOOKS / "01_walkthrough.ipynb") == {"reveal_answers": True}
    assert notebooks.headless_defaults(NOTEBOOKS / "03_sweep.ipynb") == {}


@pytest.mark.slow  # the three notebooks through the CLI (~20 s); the fast set runs 03 below
def test_walkthrough_sections_ran_their_checks(lab_out):
    r = records.read_record(lab_out, "01_walkthrough")
    assert r["sections"] == ["case", "dispatch layout", "window", "rule", "protocol", "frames", "run", "masked",
                             "skewed", "modelled", "settings"]
    # the integer rule: a tie stays on MTE; a float32 average would have sent it by SDMA
    assert r["rule"]["integer_above"] is False and r["rule"]["float32_above"] is True
    assert r["rule"]["small_tie_above"] is False and r["rule"]["tie_rows"][1] == 56 * r["rule"]["tie_rows"][0]
    assert r["empty_segments_counted"] == {"den": 2, "nonempty": 1}
    assert r["pes2_epp1_sdma_segments"] == 0
    # one core's timeline: stage 1 (SDMA first, MTE, quiets, flags), then stage 2, then the barrier
    ops = r["frames"]["stage1_ops"]
    assert ops[0] == "sdma_put" and {"mte_put", "quiet", "flag", "sdma_quiet"} <= set(ops)
    assert r["frames"]["ends_with"] == "barrier"
    # the masked slot: the all-zero row, the weights, and the hang a wait for it would cause
    assert r["masked"]["zero_row"] and r["masked"]["weighted_row_by_hand"]
    assert "PE 0 core 0: timed out after 2" in r["masked"]["hang"] and "status slot 3" in r["masked"]["hang"]
    m = r["modelled"]
    assert m["caption"].startswith("modelled on a2") and "assumed" in m["caption"]
    assert m["segment_formula_equals_replay"] and set(m["speedup_at_2MiB"]) == {"a2", "a3"}
    # what the section's prose says of its case: on both machines classic's slowest core is a remote
    # one and SDMA shortens it; on a3 until the local core is, on a2 (one slow link) not that far
    assert m["slowest_core"] == {"a2 classic": "remote", "a2 doubleplane": "remote", "a3 classic": "remote",
                                 "a3 doubleplane": "local"}
    assert m["speedup_at_2MiB"]["a2"] > 1 and m["speedup_at_2MiB"]["a3"] > 1  # SDMA pays on both at 2 MiB
    assert (lab_out / "01_core_timeline.png").is_file() and (lab_out / "01_segment_crossover.png").is_file()
    # section 11: each setting bit-identical to classic and counted as planned; the segment layout sends
    # the skewed case's one SDMA segment (64 rows of 32 KiB) in one call, one per core's chunk with c2;
    # its layout step: a bases put and a ready block from each PE to each PE (2 * pes * pes)
    st = r["settings"]
    assert st["labels"] == ["reference", "segment", "c2", "segment-c2"] and st["x_out_equal"] and st["counters_ok"]
    assert st["sdma_calls"] == {"reference": 64, "segment": 1, "c2": 64, "segment-c2": 2}
    assert st["control_writes"] == {"reference": 0, "segment": 8, "c2": 0, "segment-c2": 8}
    # what its prose says: 6 cores per rank pay over every unknown's range on both machines
    assert {name: t["classic-c6"]["verdict"] for name, t in st["modelled"].items()} == {"a2": "faster", "a3": "faster"}
    for t in st["modelled"].values():
        assert all(v["low"] <= v["speedup"] <= v["high"] for v in t.values())


def test_a_bad_headless_value_is_refused_naming_the_parameter(tmp_path):
    import jupytext
    from combine_lab.errors import LabError
    nb = jupytext.read(NOTEBOOKS / "01_walkthrough.py")
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = cell.source.replace("# headless: True", "# headless: maybe")
    path = tmp_path / "01_walkthrough.ipynb"
    jupytext.write(nb, path)
    with pytest.raises(LabError, match=r"01_walkthrough.ipynb: parameter reveal_answers: '# headless: maybe' is not "
                                       r"a Python literal of its declared type bool"):
        notebooks.headless_defaults(path)


@pytest.mark.slow  # a Jupyter kernel started by the papermill CLI: seconds
def test_papermill_p_loops_1e3_is_refused_before_anything_runs(tmp_path, no_leaks):
    """Field fault (issue 34): papermill's -p loops 1e3 ran the sweep with 1000 loops. It arrives as
    the float 1000.0 and the notebook's first cell refuses it, as --params "1e3" is refused: nothing
    is written."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOKS / "03_sweep.ipynb"), str(tmp_path / "out.ipynb"),
           "-p", "loops", "1e3", "-p", "output_dir", str(tmp_path / "o"), "-k", notebooks.KERNEL_NAME,
           "--no-progress-bar"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode != 0
    assert ("ParameterError: parameter loops=1000.0: expected int (1000.0 is a float, never taken for an int: "
            "write 1000)") in proc.stderr + proc.stdout
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


# ---- issue 33: several parameter sets of one notebook, one run each ----

def test_param_sets_names_checks_and_converts_each_set():
    nbs = notebooks.find_notebooks()
    sets = notebooks.param_sets({"loops": 2, "sweep": [{"set_name": "small", "bs_list": "8"}, {"bs_list": [64]}],
                                 "01_walkthrough": {"seed": 1}}, nbs)
    assert [(s.notebook.stem, s.set, s.params) for s in sets] == [
        ("01_walkthrough", "", {"seed": 1, "loops": 2}), ("02_tuning", "", {"loops": 2}),
        ("03_sweep", "small", {"bs_list": [8], "loops": 2}), ("03_sweep", "set2", {"bs_list": [64], "loops": 2})]
    out = Path("/o")
    assert [s.folder(out) for s in sets] == [out, out, out / "03_sweep.small", out / "03_sweep.set2"]
    # one mapping: the same as split_params
    one = notebooks.param_sets({"sweep": {"bs_list": [8]}}, nbs)
    assert [s.params for s in one] == list(notebooks.split_params({"sweep": {"bs_list": [8]}}, nbs).values())
    assert {s.set for s in one} == {""}


@pytest.mark.parametrize("params, message", [
    ({"sweep": []}, "params['sweep']: an empty list of parameter sets; give at least one mapping"),
    ({"sweep": [{"bs_list": [8]}, 3]}, "params['sweep'][1]: a parameter set must be a mapping, not a int"),
    ({"sweep": [{"set_name": "a b"}]}, "params['sweep'][0]: set_name 'a b': must be letters, digits, '_' or '-'"),
    ({"sweep": [{"set_name": "x"}, {"set_name": "x"}]},
     "params['sweep'][1]: set_name 'x' is used twice; each set needs its own"),
    ({"sweep": [{}], "03_sweep": {"loops": 1}},
     "params: notebook 03_sweep is given twice ('sweep' and its other name); give it once"),
    ({"sweep": [{"bs_list": "[8, x]"}]}, "params: notebook 03_sweep: "),
    ({"sweep": [{"bs_lst": [8]}]}, "params: 'bs_lst' is not a parameter of notebook 03_sweep (did you mean 'bs_list'?)"),
])
def test_param_sets_refuse_bad_sets(params, message):
    with pytest.raises(notebooks.LabError) as e:
        notebooks.param_sets(params, notebooks.find_notebooks())
    assert str(e.value).startswith(message)


def test_each_parameter_set_runs_into_its_own_folder(tmp_path, monkeypatch, capsys):
    """Serial: one papermill run per set, each with its own output_dir, so the same file names
    (the executed copy, the record, a figure) never collide; the CLI reports each by set."""
    import papermill
    calls = []

    def fake(src, dst, parameters, **kw):
        calls.append((Path(src).name, parameters["output_dir"], parameters["bs_list"]))
        here = Path(parameters["output_dir"])
        (here / "03_sweep.record.json").write_text(json.dumps({"bs": parameters["bs_list"]}))
        (here / "fig.png").write_bytes(b"png" + bytes(parameters["bs_list"]))
        Path(dst).write_text("{}")

    monkeypatch.setattr(papermill, "execute_notebook", fake)
    p = tmp_path / "params.yaml"
    p.write_text("03_sweep:\n  - {set_name: small, bs_list: [8]}\n  - {bs_list: [16]}\n")
    out = tmp_path / "o"
    assert cli.main(["notebooks", "--params", str(p), "--out", str(out), "--only", "sweep"]) == 0
    assert calls == [("03_sweep.ipynb", str(out / "03_sweep.small"), [8]),
                     ("03_sweep.ipynb", str(out / "03_sweep.set2"), [16])]
    for name, bs in (("small", 8), ("set2", 16)):
        here = out / f"03_sweep.{name}"
        assert sorted(q.name for q in here.iterdir()) == ["03_sweep.ipynb", "03_sweep.record.json", "fig.png"]
        assert json.loads((here / "03_sweep.record.json").read_text()) == {"bs": [bs]}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("03_sweep[small]: ok in ") and lines[0].endswith(f"-> {out / '03_sweep.small' / '03_sweep.ipynb'}")
    assert lines[1].startswith("03_sweep[set2]: ok in ")
    assert lines[2] == f"executed notebooks, 2 figures (PNG) and records in {out}"
    runs = notebooks.run_notebooks(tmp_path / "o2", {"sweep": [{"bs_list": [8]}]}, ["sweep"])
    assert [(r.label, r.output, r.record) for r in runs] == [
        ("03_sweep[set1]", tmp_path / "o2" / "03_sweep.set1" / "03_sweep.ipynb", {"bs": [8]})]
    assert runs[0].figures == [tmp_path / "o2" / "03_sweep.set1" / "fig.png"]


def test_notebooks_write_into_the_current_folder_by_default(tmp_path, monkeypatch):
    """``combine-lab notebooks`` without --out: the current folder's output/lab (or $COMBINE_LAB_OUTPUT),
    as every command writes (docs/cli.md#1-commands); never the checkout's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COMBINE_LAB_OUTPUT", raising=False)
    assert records.command_output_dir() == tmp_path / "output" / "lab"
    monkeypatch.setenv("COMBINE_LAB_OUTPUT", str(tmp_path / "elsewhere"))
    assert records.command_output_dir() == tmp_path / "elsewhere"
