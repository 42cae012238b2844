"""Field faults of issue 34, each as a user met it: a full disk under the output folder, a stopped
PE, text for an int, and the first contact with the command line."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from combine_lab import CaseSpec, cli, make_case, write_case
from combine_lab.errors import ResultFileError


def _mount_tmpfs(where: Path, size: str) -> None:
    if shutil.which("mount") is None:
        pytest.skip("no mount command here: the full-disk tests mount a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and a mount namespace that allows it): "
                    f"{(r.stderr or r.stdout).strip()}")


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs at tmp_path/disk, unmounted after the test."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    _mount_tmpfs(mnt, "64k")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30)


def _fill(mnt: Path) -> Path:
    """Fill ``mnt`` to the last byte with one file; returns it."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def _tree(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.mark.parametrize("folder", ["perf", "."])
def test_an_output_folder_on_a_full_disk_exits_2_naming_the_errno_and_leaves_nothing(tiny_tmpfs, capsys, folder):
    """Field fault: a traceback (OSError: [Errno 28] in folders.py), exit 1, and a 0-byte lock file
    left behind. Now: exit 2, the folder and the errno, and the disk as it was (a folder the check
    made is removed again)."""
    _fill(tiny_tmpfs)
    out = tiny_tmpfs / folder
    code = cli.main(["run", "-pes", "2", "-bs", "8", "-h", "16", "-topk", "2", "-expertPerPe", "2", "--perf",
                     "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"combine-lab: error: --output-dir {out}: cannot write in it: ENOSPC (No space left on "
                   "device)\n")
    assert _tree(tiny_tmpfs) == ["filler"]


def test_case_files_on_a_disk_that_fills_name_the_errno_and_leave_no_part_file(tiny_tmpfs):
    """Field fault: "cannot write 25165824 bytes: error (1605632 requested and 0 written)", no errno
    (numpy's tofile). Now the errno, and no temporary file left."""
    spec = CaseSpec(pes=2, bs=64, h=256, topk=2, expert_per_pe=2, seed=1)  # expand_x: 256 KiB a rank
    with pytest.raises(ResultFileError) as err:
        write_case(make_case(spec), tiny_tmpfs)
    assert str(err.value) == (f"{tiny_tmpfs}/golden/{spec.case_id}/rank_0/expand_x.bin: cannot write "
                              f"{spec.capacity_rows * spec.row_bytes} bytes: ENOSPC (No space left on device)")
    assert not [p for p in _tree(tiny_tmpfs) if ".part-" in p]


def test_the_lock_of_a_folder_on_a_full_disk_is_refused_whole(tiny_tmpfs):
    """own_folders on its own (a disk that filled after the folder was checked): a ParameterError
    naming the errno, not an OSError, and no 0-byte .combine-lab.lock.<pid> left."""
    from combine_lab.errors import ParameterError
    from combine_lab.folders import own_folders
    _fill(tiny_tmpfs)
    with pytest.raises(ParameterError) as err:
        with own_folders([tiny_tmpfs], "--work-dir"):
            pytest.fail("the folder was taken")
    assert str(err.value) == f"--work-dir {tiny_tmpfs}: cannot write in it: ENOSPC (No space left on device)"
    assert _tree(tiny_tmpfs) == ["filler"]


def test_a_kept_work_dir_keeps_the_case_files_and_no_folder_per_run(tmp_path, capsys, no_leaks):
    """Field fault (issue 34): a kept --work-dir collected a combine_doubleplane_<random>/ folder per
    run. Two runs leave the case files alone."""
    work = tmp_path / "work"
    for _ in range(2):
        assert cli.main(["run", "-pes", "2", "-bs", "4", "-h", "16", "-topk", "2", "-expertPerPe", "2",
                         "--work-dir", str(work)]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in work.iterdir()) == ["golden", "output"]
    assert sorted(p.name for p in (work / "golden").iterdir()) == ["shape_4_16_2_4_2"]


def test_a_work_dir_in_use_is_refused_naming_work_dir_also_with_perf(tmp_path, capsys):
    """Field fault (issue 34): with --perf, the refusal of a --work-dir in use said --output-dir."""
    import json
    import subprocess
    import sys
    import psutil
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        work = tmp_path / "work"
        work.mkdir()
        started = psutil.Process(holder.pid).create_time()
        (work / ".combine-lab.lock").write_text(json.dumps({"pid": holder.pid, "started": started, "command": "x"}))
        code = cli.main(["run", "-pes", "2", "-bs", "4", "-h", "16", "-topk", "2", "-expertPerPe", "2", "--perf",
                         "--output-dir", str(tmp_path / "perf"), "--work-dir", str(work)])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"combine-lab: error: --work-dir {work}: in use by another run: pid "
                                            f"{holder.pid}"), err
        assert not (tmp_path / "perf" / ".combine-lab.lock").exists()
    finally:
        holder.kill()
        holder.wait()


def test_build_main_names_the_driver_as_the_folders_run_sh_runs_it(tmp_path, capsys, monkeypatch):
    """Field fault (issue 34): for SHMEM's classic example `build --main` made build/bin/combine_classic,
    but its scripts/run.sh runs build/bin/combine (rc 127). The name comes from the run script (else
    the folder's CMakeLists.txt, else its name)."""
    from combine_lab.cli.build import main_name
    from combine_lab.run import build as build_mod
    root = Path(__file__).resolve().parents[2]
    folder = tmp_path / "combine_classic"
    shutil.copytree(root / "tests" / "kernels" / "combine_refstyle", folder)
    assert main_name(folder) == "combine_classic"
    (folder / "CMakeLists.txt").write_text("aclshmem_add_collective_example(combine_cm)\n")
    assert main_name(folder) == "combine_cm"
    (folder / "scripts").mkdir()
    (folder / "scripts" / "run.sh").write_text('#!/bin/bash\n${PROJECT_ROOT}/build/bin/combine "${pes}" "${idx}"\n')
    assert main_name(folder) == "combine"
    fake = tmp_path / "built" / "driver"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setattr(build_mod, "build", lambda *a, **k: fake)  # the naming, not the build
    assert cli.main(["build", "--kernel-source", str(folder), "--main", "--bin-dir", str(tmp_path / "bin")]) == 0
    out = capsys.readouterr().out
    assert f"driver: {tmp_path / 'bin' / 'combine'} (" in out and (tmp_path / "bin" / "combine").is_file()
    assert f"(its run.sh runs {tmp_path / 'bin' / 'combine'})" in out


@pytest.mark.parametrize("how", ["-m", "combine-lab", "import"])
def test_without_setup_a_command_says_run_ci_setup(how):
    """Field fault (issue 34): without setup, a raw `ModuleNotFoundError: No module named 'pandas'`.
    Now a command says which package and what to run (exit 2, no traceback); an import says the same."""
    import sys
    root = Path(__file__).resolve().parents[2]
    start = {"-m": "sys.argv = ['-m', 'doctor']; import runpy; runpy.run_module('combine_lab', run_name='__main__', "
                   "alter_sys=True)",
             "combine-lab": "sys.argv = ['/usr/local/bin/combine-lab', 'doctor']; from combine_lab.cli import main",
             "import": "import combine_lab"}[how]
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.modules['pandas'] = None; {start}"],
                          capture_output=True, text=True, timeout=60, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    said = (f"the Python package 'pandas' is missing from this Python ({sys.executable}): combine_lab is not set up "
            "here; run `bash .ci/setup` in the repository (`bash .ci/setup --test` for the tests too), or "
            "`pip install -e .`")
    if how == "import":
        assert proc.returncode == 1 and proc.stderr.rstrip().endswith(f"ModuleNotFoundError: {said}")
    else:
        assert (proc.returncode, proc.stderr) == (2, f"combine-lab: error: {said}\n")


@pytest.mark.parametrize("argv, said", [
    (["run", "--perff"], "combine-lab run: error: unrecognized arguments: --perff; did you mean --perf?"),
    (["compare", "--setings", "c2", "--perff"],
     "combine-lab compare: error: unrecognized arguments: --setings c2 --perff; did you mean --settings (for "
     "--setings), --perf (for --perff)?"),
    (["suggest", "--zzz"], "combine-lab suggest: error: unrecognized arguments: --zzz (see combine-lab suggest --help)"),
    (["compare", "--bogus"], "combine-lab compare: error: unrecognized arguments: --bogus (see combine-lab compare --help)"),
    (["compare", "--kernel", "x"], "combine-lab compare: error: unrecognized arguments: --kernel x; did you mean "
                                   "--kernel-source?"),
    (["comapre"], "did you mean 'compare'?"),
    # an abbreviation is not taken for a longer flag: --pes 4 was --pes-list 4, -pe 4 was -pes (tryout)
    (["compare", "--pes", "4"], "combine-lab compare: error: unrecognized arguments: --pes 4; did you mean -pes?"),
    (["run", "--topk", "2"], "combine-lab run: error: unrecognized arguments: --topk 2; did you mean -topk?"),
])
def test_an_unknown_flag_or_command_gets_its_commands_usage_and_did_you_mean(argv, said, capsys):
    """Field fault (issue 34): an unknown flag got the top-level usage and no "did you mean"."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.rstrip().endswith(said), err
    if argv[0] != "comapre":
        assert err.startswith(f"usage: combine-lab {argv[0]} ")


@pytest.mark.parametrize("argv, said", [
    (["compare", "-pes", "2", "-h", "abc"], "combine-lab compare: error: -h: 'abc' is not an integer\n"),
    (["run", "--min-sdma-bytes", "1.5"], "combine-lab run: error: --min-sdma-bytes: '1.5' is not an integer\n"),
    (["run", "--masked-fraction", "x"], "combine-lab run: error: --masked-fraction: 'x' is not a number\n"),
])
def test_a_value_that_is_not_a_number_is_one_line_naming_the_flag(argv, said, capsys):
    """Tryout: `-h abc` printed the command's whole usage (24 lines) before argparse's own words;
    now one line, as the lab's own checks of a value say it."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and capsys.readouterr().err == said


@pytest.mark.parametrize("routing, near", [("zipff:1.2", "zipf:1.2"), ("hot_expert:0.5", "hot-expert:0.5"),
                                           ("uniforn", "uniform"), ("deepsek", "deepseek")])
def test_a_misspelt_routing_gets_did_you_mean(routing, near, capsys):
    assert cli.main(["run", "--routing", routing]) == 2
    assert capsys.readouterr().err == (
        f"combine-lab: error: --routing: routing={routing!r}: unknown model {routing.split(':')[0]!r}; allowed: "
        f"uniform, zipf:S, hot-expert:F, hot-rank:F, trace:MODEL/DOMAIN/LAYER, deepseek, external; did you mean "
        f"{near!r}?\n")


def test_clock_model_and_model_are_one_flag_in_every_command_that_prices(capsys, tmp_path):
    """Field fault (issue 34): `suggest --clock model:a3` was refused (suggest wanted --model a3)."""
    shape = ["-pes", "4", "-bs", "16", "-h", "1024", "-topk", "2", "-expertPerPe", "2", "--routing", "zipf:1.2"]
    outs = []
    for flags in (["--model", "a3"], ["--clock", "model:a3"]):
        assert cli.main(["suggest", *shape, *flags]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and "a3" in outs[0]
    outs = []
    for i, flags in enumerate((["--clock", "model:a3"], ["--model", "a3"])):
        assert cli.main(["run", *shape, "--perf", "--output-dir", str(tmp_path / f"o{i}"), *flags]) == 0
        outs.append([ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("shape_")])
    assert outs[0] == outs[1] and "MODEL" in outs[0][0]
    assert cli.build_parser().parse_args(["calibrate", "x.csv", "--clock", "model:a2"]).model == "a2"
    with pytest.raises(SystemExit):
        cli.main(["suggest", *shape, "--clock", "wall"])
    assert capsys.readouterr().err.endswith("error: argument --clock: 'wall': suggest prices on a timing model: "
                                            "model:NAME (a2, a3, host, or a .toml file), the same as --model NAME\n")


def test_a_shape_too_big_for_this_machine_is_refused_with_the_model_command(capsys):
    """Field fault (issue 34): a shape too big for the twin was refused without saying that
    --clock model:a3 prices it. The refusal now ends with that exact command (the rest as typed)."""
    shape = ["-pes", "64", "-bs", "65536", "-h", "65536", "-topk", "8", "-expertPerPe", "4", "--routing", "zipf:1.2"]
    assert cli.main(["compare", *shape, "--clock", "wall"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("combine-lab: error: shape_65536_65536_8_256_64: making the case needs x of "
                          "1099511627776 bytes (1024.00 GiB: pes*bs*h*4) in memory, ")
    assert err.endswith("; the timing model prices it without running it: combine-lab compare -pes 64 -bs 65536 -h "
                        "65536 -topk 8 -expertPerPe 4 --routing zipf:1.2 --clock model:a3\n")
    assert cli.build_parser().parse_args(["compare", *shape, "--clock", "model:a3"]).clock == "model:a3"
    # uniform draws x before the ids, on the model too: no such hint where x itself does not fit
    assert cli.main(["run", *shape[:-2]]) == 2
    assert "--clock model:a3" not in capsys.readouterr().err


def test_the_deepseek_examples_have_deepseek_v3s_256_experts_in_bf16():
    """Field fault (issue 34): the README's deepseek example had 512 experts (-pes 64 -expertPerPe 8);
    DeepSeek-V3 has 256 routed experts and combines in bf16. Every such example in the README and docs."""
    import re
    root = Path(__file__).resolve().parents[2]
    found = 0
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for line in page.read_text().splitlines():
            if "--routing deepseek" in line and "combine-lab " in line:
                pes = int(re.search(r"-pes (\d+)", line)[1])
                epp = int(re.search(r"-expertPerPe (\d+)", line)[1])
                assert pes * epp == 256 and "-type bfloat16_t" in line, f"{page.name}: {line.strip()}"
                found += 1
    assert found >= 3


def test_the_walkthrough_saved_without_outputs_points_to_combine_lab_docs_not_to_lines_above():
    """Field fault (issue 34): the walkthrough's text referred to "the lines above" in a notebook
    committed without outputs. Its text names no printed line it does not also point to
    `combine-lab docs` for, and says near the top how to see the outputs."""
    import nbformat
    root = Path(__file__).resolve().parents[2]
    nb = nbformat.read(root / "notebooks" / "01_walkthrough.ipynb", as_version=4)
    text = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert all(not c.outputs for c in nb.cells if c.cell_type == "code")
    assert "read the walkthrough executed, outputs and figures included, with\n`combine-lab docs`" in text[0]
    for src in text:
        for phrase in ("lines above", "line under", "lines under"):
            assert phrase not in src, src[:200]


def test_bfloat16_is_planned_and_modelled_at_2_bytes_an_element_and_the_app_offers_it():
    """bf16 (issue 34): the plan and the model see 2 bytes an element, as for float16 on the same
    routing (the decision rule and every byte count alike); the tuning app's state takes it."""
    from combine_lab import plan
    from combine_lab.lab.tuning import TuningState
    from combine_lab.model import load_model, model_case
    shape = dict(pes=4, bs=64, h=4096, topk=2, expert_per_pe=2, routing="hot-expert:0.5")
    bf, fp = (make_case(CaseSpec(**shape, dtype=d)) for d in ("bfloat16_t", "float16_t"))
    pb, pf = plan(bf, "doubleplane", min_sdma_bytes=0), plan(fp, "doubleplane", min_sdma_bytes=0)
    assert pb.itemsize == 2 and pb.segments.equals(pf.segments) and (pb.segments["plane"] == "SDMA").any()
    a3 = load_model("a3")
    mb, mf = (model_case(c, "doubleplane", a3, min_sdma_bytes=0) for c in (bf, fp))
    assert np.array_equal(mb.times.comm_only, mf.times.comm_only)
    s = TuningState(targets=["cpu"], pes=2, bs=8, h=64, topk=2, expert_per_pe=2)
    s.set(dtype="bfloat16_t")
    assert not s.problems and s.spec.dtype == "bfloat16_t" and s.plan.itemsize == 2


@pytest.mark.parametrize("perf, kept", [(True, "its sidecar keeps"), (False, "a --perf run's sidecar would keep")])
def test_the_violations_not_listed_are_said_where_they_are_kept(perf, kept, capsys):
    """Tryout: a run without --perf said "its sidecar keeps each PE's first reports", and wrote none (a
    sidecar is a --perf run's file, docs/formats.md)."""
    from dataclasses import replace
    from types import SimpleNamespace

    from combine_lab.cli.run_cases import SHOWN_VIOLATIONS, _report
    from combine_lab.run.runner import run_case

    res = run_case(CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2), "classic", perf=False)
    said = [f"PE 0 core 0: report {i}" for i in range(SHOWN_VIOLATIONS + 2)]
    res = replace(res, violations=said, violation_count=20)
    row = SimpleNamespace(variant="classic", case_id=res.case_id, check="PASS")
    _report(SimpleNamespace(result=res, baseline=None, row=row, repeat=0,
                            run=SimpleNamespace(perf=perf, repeats=1, kernel=None)), set())
    err = capsys.readouterr().err.splitlines()
    assert err == [f"protocol violation: {s}" for s in said[:SHOWN_VIOLATIONS]] + [
        f"protocol violation: ... and {20 - SHOWN_VIOLATIONS} more of 20 in this run; {kept} each PE's first reports"]


def test_your_kernels_files_are_named_whole_in_what_the_lab_prints(tmp_path):
    """Tryout: the twin names a file by its last two parts (``mybug/kernel.cpp:187``), which does not
    open from where the command ran; the lab prints your kernel's files whole."""
    from combine_lab.cli.run_cases import openable

    folder = tmp_path / "mybug"
    said = ("status put (aclshmemx_mte_put_nbi at mybug/kernel.cpp:187) before the payload put (at mybug/k_2.h:9); "
            "not /x/mybug/kernel.cpp:1, xmybug/kernel.cpp:2, kernels/combine_kernel.cpp:3 or mybug/notes")
    assert openable(said, folder) == said.replace("at mybug/kernel.cpp:187", f"at {folder}/kernel.cpp:187").replace(
        "at mybug/k_2.h:9", f"at {folder}/k_2.h:9")
    assert openable(said, None) == said
