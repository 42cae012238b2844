"""Your own kernel (docs/own-kernel.md): a folder with a combine kernel written as SHMEM's examples
are, built unchanged and run by the lab's driver with every check the lab's kernel gets. The folder
is tests/kernels/combine_refstyle, written for these tests in the reference's style (raw UB integer
addresses, <<<>>>, ACLSHMEM_DEVICE, the profiling header, op::fp16_t in its host driver, SHMEM's
soft core barrier); tests/run/test_shmem_reference.py runs SHMEM's own when a checkout is named."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from combine_lab import CaseSpec, make_case, run_case, write_case
from combine_lab.cli import main
from combine_lab.harness import compare
from combine_lab.run import build as build_mod
from combine_lab.run.kernel_source import ENTRY_CONTRACT, KernelSourceError, kernel_source
from combine_lab.run.launch import free_port
from combine_lab.errors import ParameterError
from combine_lab.run.runner import KernelFailed

from conftest import build_cache

ROOT = Path(__file__).resolve().parents[2]
REFSTYLE = ROOT / "tests" / "kernels" / "combine_refstyle"


def folder_hash(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (names, bytes, modes): what "unchanged" means."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_entry_contract_is_checked_before_building_and_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(build_mod, "_run", lambda *a, **k: pytest.fail("built a folder that breaks the contract"))
    ks = kernel_source(REFSTYLE)
    assert (ks.label, ks.rule, ks.rule_from, [p.name for p in ks.sources]) == (
        "user:refstyle", "classic", "combine_kernel.h:4", ["combine_refstyle_kernel.cpp"])  # its declared rule
    assert kernel_source(REFSTYLE, name="mine:v2", rule="classic").label == "mine:v2"

    def broken(edit: str, old: str = "", new: str = "") -> str:
        d = tmp_path / edit
        shutil.copytree(REFSTYLE, d)
        if edit == "no_header":
            (d / "combine_kernel.h").unlink()
        else:
            f = d / ("combine_kernel.h" if edit == "params" else "combine_refstyle_kernel.cpp")
            f.write_text(f.read_text().replace(old, new))
        with pytest.raises(KernelSourceError) as e:
            build_mod.build("cpu", kernel=d)
        assert e.value.parameter == "kernel_source" and ENTRY_CONTRACT in str(e.value)
        return str(e.value)

    assert "missing combine_kernel.h (it declares combine_demo)" in broken("no_header")
    assert "combine_demo's 20 parameters in combine_kernel.h (it declares 19 parameters)" in \
        broken("params", ", int loop_count = 1", "")
    assert "the instance combine_demo<op::fp16_t>" in broken("no_fp16", "template void combine_demo<op::fp16_t>",
                                                             "// no float16 instance")
    said = broken("no_launch", "<<<", "/* launch */ (")
    assert "a kernel launch, `K<<<block_dim, nullptr, stream>>>(...)`" in said
    with pytest.raises(KernelSourceError, match="no such folder"):
        kernel_source(tmp_path / "nowhere")
    # a folder with no kernel in it at all (a fresh user gave /tmp): said as such, not as a list of what is missing
    other = tmp_path / "other"
    other.mkdir()
    for name in ("a.cpp", "b.cpp", "c.cpp", "d.cpp"):
        (other / name).write_text("int x;\n")
    with pytest.raises(KernelSourceError) as e:
        kernel_source(other)
    assert str(e.value) == (f"kernel_source='{other}': holds no combine kernel: no combine_kernel.h, and none of its 4 "
                            "kernel sources defines combine_demo or launches a kernel; give the folder of a kernel "
                            "written to the entry contract (docs/own-kernel.md#2-the-entry-contract)")
    (other / "combine_kernel.h").write_text((REFSTYLE / "combine_kernel.h").read_text())
    with pytest.raises(KernelSourceError, match=r"missing a definition of combine_demo \(none in a.cpp, b.cpp, c.cpp "
                                                r"and 1 more\);"):
        kernel_source(other)


def test_your_kernel_runs_unchanged_with_every_check(tmp_path, no_leaks):
    """Built from the folder as it is (hashed before and after), launched by the lab's driver:
    x_out against golden on every PE (masked slots included), the twin's counters against the plan
    of its rule, the protocol checker under chaos, perf rows at the SoC's cycle rate, the sidecar
    naming the kernel, and the build log showing each launch the twin's copy rewrote."""
    before = folder_hash(REFSTYLE)
    spec = CaseSpec(pes=3, bs=16, h=100, topk=2, expert_per_pe=2, routing="zipf:1.2", masked_fraction=0.2,
                    dtype="float16_t")
    res = run_case(spec, "classic", kernel_source=REFSTYLE, warmup=1, loops=2, chaos_seed=3,
                   output_dir=tmp_path / "out")
    assert res.label == "user:refstyle" and res.variant == "classic"
    assert res.ok and res.check_ok and not res.counter_mismatches() and res.violation_count == 0
    assert set(res.perf["Metric"]) == {"full_op", "comm_only"}
    assert set(res.perf["Blocks"]) == {3} and set(res.perf["UBsize/KB"]) == {190}  # block_dim = PEs, as the reference
    sidecar = json.loads((tmp_path / "out" / f"combine_counters_{spec.case_id}.json").read_text())
    assert sidecar["kernel"] == {"name": "user:refstyle", "source": str(REFSTYLE)}
    bdir = build_mod.build("cpu", kernel=REFSTYLE).parent
    src = (REFSTYLE / "combine_refstyle_kernel.cpp").read_text().splitlines()
    line = next(i for i, ln in enumerate(src, 1) if "RefstyleCombine_int32_t<<<" in ln)
    # the copy compiled: the launch rewritten on the source's own line (#line 1 after two lines), nothing else
    (copy,) = bdir.glob("twin_src/*/combine_refstyle_kernel.cpp")
    body = copy.read_text().splitlines()
    assert body[:2] == ['#include "twin_launch.h"', f'#line 1 "{REFSTYLE / "combine_refstyle_kernel.cpp"}"']
    fp16 = next(i for i, ln in enumerate(src, 1) if "RefstyleCombine_float16_t<<<" in ln)
    # (the float16 launch's configuration runs over two lines, kept as two)
    assert [i for i, (a, b) in enumerate(zip(src, body[2:]), 1) if a != b] == [line, fp16, fp16 + 1]
    assert len(body) == len(src) + 2
    assert "::twin::kernel_launch(RefstyleCombine_int32_t, block_dim, nullptr, stream)" in body[line + 1]
    # and the build log says so whenever the copy is made (the copy step's own line; a cached copy is not remade)
    copy.unlink()
    log = (build_mod.build("cpu", kernel=REFSTYLE, force=True).parent / build_mod.BUILD_LOG).read_text()
    assert f"twin launch: {REFSTYLE}/combine_refstyle_kernel.cpp:{line}: RefstyleCombine_int32_t<<<block_dim, " \
           "nullptr, stream>>>  ->  ::twin::kernel_launch(RefstyleCombine_int32_t, block_dim, nullptr, stream)" in log
    # its declared rule (classic, in its combine_kernel.h) is what it does; doubleplane's plan has SDMA and this
    # kernel sends everything by MTE: compared with that rule it differs, and that fails the run
    skewed = CaseSpec(pes=3, bs=256, h=4096, topk=1, expert_per_pe=1, routing="hot-rank:0.8")
    mine = run_case(skewed, kernel_source=REFSTYLE, perf=False)
    assert mine.variant == "classic" and mine.ok and not mine.counter_mismatches()
    dual = run_case(skewed, "doubleplane", kernel_source=REFSTYLE, perf=False)
    assert dual.variant == "doubleplane" and dual.check_ok and not dual.ok
    assert any("sdma_bytes counted 0, planned" in m for m in dual.counter_mismatches())
    assert folder_hash(REFSTYLE) == before


def test_compare_puts_your_kernel_beside_the_labs_on_the_same_case_files(tmp_path, capsys, no_leaks):
    before = folder_hash(REFSTYLE)
    status = main(["compare", "--kernel-source", str(REFSTYLE), "-pes", "2", "-bs", "8", "-h", "64", "-topk", "2",
                   "-expertPerPe", "2", "-type", "int32_t", "--perf", "--warmup", "0", "--loops", "2",
                   "--output-dir", str(tmp_path / "perf")])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = [r for r in (ln.split() for ln in out.splitlines() if ln.startswith("shape_8_64_2_4_2")) if r[3] == "PASS"]
    assert [r[2] for r in rows] == ["classic", "doubleplane", "user:refstyle"]
    assert all(r[3] == "PASS" and r[-2] == "yes" and r[-1] == "0" for r in rows), out
    assert sorted(p.name for p in (tmp_path / "perf").iterdir() if p.is_dir()) == ["classic", "doubleplane",
                                                                                   "user-refstyle"]
    assert (tmp_path / "perf" / "user-refstyle" / "combine_perf_rank0.csv").is_file()  # named as its rule's (classic)
    runs = compare(CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=2), kernel_source=[REFSTYLE], perf=False)
    assert list(runs) == ["classic", "doubleplane", "user:refstyle"] and all(r.ok for r in runs.values())
    assert folder_hash(REFSTYLE) == before


def test_a_kernel_that_waits_for_a_masked_slot_is_reported_as_its_hang(tmp_path, capsys, no_leaks,
                                                                       short_twin_timeout, monkeypatch):
    """A kernel that waits for every slot, masked ones too (the reference does), hangs on a case with
    masked slots: the twin's bounded wait names the slot, the lab says it is the kernel's hang (that
    slot is masked: no PE ever sends it), every PE is stopped and nothing is left behind; the lab's
    own variants still run (exit 1: a kernel failed)."""
    waits_all = build_cache() / "kernels" / "combine_waitall"  # one place: its build is reused run after run
    waits_all.mkdir(parents=True, exist_ok=True)
    for f in REFSTYLE.iterdir():
        text = ("#define REFSTYLE_WAIT_ALL 1\n" if f.name == "combine_refstyle_kernel.cpp" else "") + f.read_text()
        if not (waits_all / f.name).is_file() or (waits_all / f.name).read_text() != text:
            (waits_all / f.name).write_text(text)
    case_dirs = lambda: set(Path(tempfile.gettempdir()).glob(f"combine_lab_case_p{os.getpid()}_*"))  # noqa: E731
    cases_before = case_dirs()
    spec = ["-pes", "2", "-bs", "8", "-h", "64", "-topk", "4", "-expertPerPe", "2", "--masked-fraction", "0.2",
            "--timeout", "6"]
    status = main(["compare", "--kernel-source", str(waits_all), *spec])
    out, err = capsys.readouterr()
    assert status == 1, out + err
    rows = {r[2]: r[3] for r in (ln.split() for ln in out.splitlines() if ln.startswith("shape_"))
            if r[3] in ("PASS", "FAIL", "ERROR")}
    assert rows == {"classic": "PASS", "doubleplane": "PASS", "user:waitall": "ERROR"}
    assert err.rstrip().splitlines()[-1].startswith("combine-lab: FAILED user:waitall shape_8_64_4_4_2: ")
    m = re.search(r"user:waitall \(.*\) hung: PE (\d) core (\d) waited [\d.]+ s for status slot (\d+) \(token (\d+), "
                  r"k (\d): expert -1, masked: no PE sends a masked slot, and this kernel waits for it\)", err)
    assert m, err
    pe, slot, token, k = int(m[1]), int(m[3]), int(m[4]), int(m[5])
    assert slot == token * 4 + k and make_case(CaseSpec(pes=2, bs=8, h=64, topk=4, expert_per_pe=2,
                                                        masked_fraction=0.2)).expert_ids[pe, token, k] == -1
    assert case_dirs() <= cases_before  # no case files left behind
    monkeypatch.setenv("COMBINE_TWIN_TIMEOUT_S", "1")  # the same hang through the API: only its kind is asserted
    with pytest.raises(KernelFailed, match=r"hung: PE \d core \d waited"):
        run_case(CaseSpec(pes=2, bs=8, h=64, topk=4, expert_per_pe=2, masked_fraction=0.2), kernel_source=waits_all,
                 timeout_s=6)


@pytest.mark.slow  # it waits the default budget (10 s) by design; the quick suite's masked-slot hang is the test above
def test_a_masked_slot_hang_is_reported_within_30_s_by_default(capsys, no_leaks):
    """With the default limits (no short timeout), the twin's status wait gives up once nothing has landed for the
    wait budget sized from the case (10 s here), printed before the run, naming the wait's line. Slow: the 10 s
    wait is what it tests (the test above has the same hang with a 1 s budget, in the quick suite)."""
    waits_all = build_cache() / "kernels" / "combine_waitall"  # the previous test's copy (made again if missing)
    waits_all.mkdir(parents=True, exist_ok=True)
    for f in REFSTYLE.iterdir():
        text = ("#define REFSTYLE_WAIT_ALL 1\n" if f.name == "combine_refstyle_kernel.cpp" else "") + f.read_text()
        if not (waits_all / f.name).is_file() or (waits_all / f.name).read_text() != text:
            (waits_all / f.name).write_text(text)
    build_mod.build("cpu", kernel=waits_all)  # the build is not what is timed
    src = (REFSTYLE / "combine_refstyle_kernel.cpp").read_text().splitlines()
    wait_line = 1 + next(i for i, ln in enumerate(src, 1) if "aclshmem_signal_wait_until(" in ln)  # +1: the #define
    t0 = time.monotonic()
    status = main(["run", "--kernel-source", str(waits_all), "-pes", "2", "-bs", "8", "-h", "64", "-topk", "4",
                   "-expertPerPe", "2", "--masked-fraction", "0.2"])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert status == 1 and took < 30, (took, err)
    assert "twin wait budget: 10 s (a status wait gives up once nothing has landed on any PE for that long; sized " \
           "from the case, docs/twin.md#2-sessions-and-cleanup)" in err
    assert re.search(r"hung: PE \d core \d waited 10\.\d s for status slot \d+ \(token \d+, k \d: expert -1, masked", err)
    assert (f"nothing landed on any PE for 10.0 s (the wait budget, COMBINE_TWIN_WAIT_S, sized from the case) "
            f"(inside aclshmem_signal_wait_until called at {waits_all}/combine_refstyle_kernel.cpp:{wait_line})") in err


@pytest.mark.slow
def test_the_folders_own_driver_builds_against_the_twin_and_prints_microseconds(tmp_path, capsys):
    """`combine-lab build --kernel-source DIR --main`: the folder's own main.cpp and kernel against the
    twin. Its PEs, started by hand as a run script starts them, compute the combine; the frames it
    converts with the cycle rate of the SoC the twin names (50 per us) are microseconds: never more
    than the launch's wall time, and not 20 times less."""
    before = folder_hash(REFSTYLE)
    assert main(["build", "--kernel-source", str(REFSTYLE), "--main", "--bin-dir", str(tmp_path / "bin")]) == 0
    exe = tmp_path / "bin" / "combine_refstyle"
    assert f"driver: {exe}" in capsys.readouterr().out and exe.is_file()
    spec = CaseSpec(pes=2, bs=64, h=2048, topk=4, expert_per_pe=2, dtype="float16_t")
    write_case(make_case(spec), tmp_path / "case")
    port = f"tcp://127.0.0.1:{free_port()}"
    env = {**os.environ, "SHMEM_CYCLE_PROF_PE": "0"}  # SHMEM's frames record on the PE it names
    procs = [subprocess.Popen([str(exe), "2", str(pe), port, spec.dtype, "64", "2048", "4", "2", str(tmp_path / "case"),
                               "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for pe in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for pe, (out, _) in enumerate(outs):
        m = re.search(rf"pe {pe}: x_out correct; comm_only ([\d.]+) us, full_op ([\d.]+) us \(frames\); wall ([\d.]+) "
                      r"us per launch", out)
        assert m, out
        full, wall = float(m[2]), float(m[3])
        assert (0.05 * wall < full <= wall) if pe == 0 else full == 0.0, out
    x = np.fromfile(tmp_path / "case" / "output" / "x_out_0.bin", dtype=np.float16)
    assert x.size == 64 * 2048 and np.isfinite(x).all()
    assert folder_hash(REFSTYLE) == before


def test_a_bfloat16_case_is_refused_for_your_kernel_before_anything_is_written(tmp_path):
    """Your kernel's entry contract has int32_t and op::fp16_t instances only (issue 34): a bf16 case
    is refused with the reason, naming the kernel, before a case file or a build exists."""
    spec = CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2, dtype="bfloat16_t")
    with pytest.raises(ParameterError) as err:
        run_case(spec, kernel_source=REFSTYLE, work_dir=tmp_path / "work")
    assert str(err.value) == ("dtype='bfloat16_t': refused for your kernel (user:refstyle): the entry contract "
                              "instantiates combine_demo for int32_t and op::fp16_t only; the lab's kernel runs "
                              "bfloat16_t (docs/own-kernel.md#2-the-entry-contract)")
    assert not (tmp_path / "work").exists()


def test_run_your_kernel_with_repeats_folds_them_into_one_row(tmp_path, capsys, no_leaks):
    """Field fault (issue 34): `run --kernel-source DIR --perf --repeats 3` printed one row per repeat
    and wrote "repeats": 1 with median = min = max = the last repeat. Now one row, and the summary
    holds the 3 repeats, their median, min and max."""
    out = tmp_path / "perf"
    code = main(["run", "--kernel-source", str(REFSTYLE), "-pes", "2", "-bs", "4", "-h", "16", "-topk", "2",
                 "-expertPerPe", "2", "--perf", "--repeats", "3", "--warmup", "0", "--loops", "1",
                 "--output-dir", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert [ln.split()[2] for ln in printed.splitlines() if ln.startswith("shape_4_16_2_4_2")] == ["user:refstyle"]
    summary = json.loads((out / "combine_lab_summary.json").read_text())
    v = summary["cases"][0]["variants"]["user:refstyle"]
    assert summary["repeats"] == 3 and v["repeats"] == 3
    for m in ("comm_only_us", "full_op_us"):
        each = v[m]["each"]
        assert len(each) == 3
        assert (v[m]["median"], v[m]["min"], v[m]["max"]) == (sorted(each)[1], min(each), max(each))


def test_your_kernels_rule_is_declared_and_counters_that_differ_fail(tmp_path, capsys, no_leaks):
    """--rule, or a 'combine-lab rule:' line of the folder, or SHMEM's folder names: the rule whose plan the
    counters must equal; a kernel whose counters differ from it fails (exit 1) unless --counters-may-differ."""
    flags = ["--kernel-source", str(REFSTYLE), "-pes", "3", "-bs", "12", "-h", "20", "-topk", "3", "-expertPerPe",
             "2", "--routing", "zipf:1.2", "-type", "float16_t", "--min-sdma-bytes", "0"]
    assert main(["run", *flags]) == 0  # its declared classic: what it does
    assert "user:refstyle: rule classic (from combine_kernel.h:4; --rule declares it)" in capsys.readouterr().err
    assert main(["run", *flags, "--rule", "doubleplane"]) == 1  # doubleplane's plan sends some rows by SDMA
    err = capsys.readouterr().err
    assert ("user:refstyle: counters=plan differs from its rule doubleplane (rule=): a failure (exit 1); --rule "
            "declares the rule it follows, --counters-may-differ shows it without failing") in err
    assert err.rstrip().splitlines()[-1] == ("combine-lab: FAILED user:refstyle shape_12_20_3_6_3: counters differ "
                                             "from the plan of its rule")  # the last word, under a PASS of x_out
    assert main(["run", *flags, "--rule", "doubleplane", "--counters-may-differ"]) == 0
    mine = tmp_path / "combine_mine"
    shutil.copytree(REFSTYLE, mine)
    (mine / "combine_kernel.h").write_text((mine / "combine_kernel.h").read_text().replace("classic (every",
                                                                                           "doubleplane (every"))
    assert (kernel_source(mine).rule, kernel_source(mine).rule_from) == ("doubleplane", "combine_kernel.h:4")
    (mine / "CMakeLists.txt").write_text("# combine-lab rule: mte_only\n")
    with pytest.raises(KernelSourceError, match=r"CMakeLists.txt:1: combine-lab rule: 'mte_only': the rule is one of "
                                                r"'classic', 'doubleplane'"):
        kernel_source(mine)
    (mine / "CMakeLists.txt").unlink()
    (mine / "combine_kernel.h").write_text((mine / "combine_kernel.h").read_text().replace("combine-lab rule:", ""))
    assert (kernel_source(mine).rule, kernel_source(mine).rule_from) == ("doubleplane", "a guess")
