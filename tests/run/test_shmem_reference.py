"""SHMEM's own combine examples, unchanged, on the twin (docs/own-kernel.md#6-the-reference-as-the-worked-example):
run when ``COMBINE_LAB_SHMEM_SOURCE`` names a SHMEM checkout (hicann/shmem, with examples/combine),
skipped, saying so, otherwise. No SHMEM code is in this repository: these tests read the checkout.

- both reference kernels through the lab's driver: bit-exact against golden, 0 protocol
  violations, the twin's counted plane bytes equal to the planner's (doubleplane at 8 PEs in
  float16, both kernels in both dtypes at 2 and 4 PEs, and a case that sends by SDMA);
- the reference's own driver and run script (a copy of its examples, so the checkout stays as it
  is): run.sh runs end to end on the twin, and its times are within 2x of the lab driver's;
- a masked case: the reference waits for every slot, so it hangs; the lab reports the kernel's
  hang naming the slot, exit 1, nothing left behind;
- its modelled price comes from the stream it records.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import pytest

from combine_lab.cli import main

SOURCE = os.environ.get("COMBINE_LAB_SHMEM_SOURCE", "")
ROOT = Path(SOURCE).expanduser() if SOURCE else None
if ROOT is None or not (ROOT / "examples" / "combine" / "combine_doubleplane" / "combine_kernel.h").is_file():
    pytestmark = pytest.mark.skip(
        reason="needs a SHMEM checkout: set COMBINE_LAB_SHMEM_SOURCE to a hicann/shmem folder with examples/combine "
               f"({'unset' if not SOURCE else SOURCE + ' has no examples/combine/combine_doubleplane'})")
else:
    pytestmark = pytest.mark.slow
    DOUBLEPLANE = ROOT / "examples" / "combine" / "combine_doubleplane"
    CLASSIC = ROOT / "examples" / "combine" / "combine_classic"


def examples_hash() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in (DOUBLEPLANE, CLASSIC) for p in sorted(d.rglob("*")) if p.is_file()}


def table(out: str) -> list[list[str]]:
    """The run table's rows (not the speed-up table's): case, routing, variant, check, ..., MTE bytes,
    SDMA bytes, planned SDMA, counters=plan, violations."""
    rows = (ln.split() for ln in out.splitlines() if ln.startswith("shape_"))
    return [r for r in rows if r[3] in ("PASS", "FAIL", "ERROR", "MODEL", "REFUSED")]


@pytest.fixture(scope="module")
def unchanged():
    before = examples_hash()
    yield
    assert examples_hash() == before, "the SHMEM checkout's example files changed"


def test_doubleplane_at_8_pes_in_float16_passes_with_the_planned_bytes(unchanged, capsys, no_leaks):
    status = main(["compare", "--kernel-source", str(DOUBLEPLANE), "-pes", "8", "-bs", "64", "-h", "7168", "-topk",
                   "8", "-expertPerPe", "8", "-type", "float16_t"])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = table(out)
    assert [r[2] for r in rows] == ["classic", "doubleplane", "reference:doubleplane"]
    lab, ref = rows[1], rows[2]
    assert ref[3] == "PASS" and ref[-2] == "yes" and ref[-1] == "0", out   # bit-exact, counters = plan, 0 violations
    assert ref[-5:-2] == lab[-5:-2]  # MTE, SDMA and planned SDMA bytes: the lab's kernel's, the plan's


@pytest.mark.parametrize("dtype", ["int32_t", "float16_t"])
def test_both_reference_kernels_at_2_and_4_pes(dtype, unchanged, capsys, no_leaks):
    status = main(["compare", "--kernel-source", str(DOUBLEPLANE), "--kernel-source", str(CLASSIC), "--pes-list", "2",
                   "4", "-bs", "64", "-h", "7168", "-topk", "8", "-expertPerPe", "8", "-type", dtype])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = table(out)
    assert [r[2] for r in rows] == ["classic", "doubleplane", "reference:doubleplane", "reference:classic"] * 2
    assert all(r[3] == "PASS" and r[-2] == "yes" and r[-1] == "0" for r in rows), out


def test_the_planes_bytes_equal_the_plan_where_the_rule_sends_by_sdma(unchanged, capsys, no_leaks):
    status = main(["compare", "--kernel-source", str(DOUBLEPLANE), "-pes", "4", "-bs", "256", "-h", "7168", "-topk",
                   "2", "-expertPerPe", "1", "--routing", "hot-rank:0.5", "--chaos", "7"])
    out = capsys.readouterr().out
    assert status == 0, out
    lab, ref = table(out)[1:]
    assert int(ref[-4]) > 0 and ref[-5:-2] == lab[-5:-2] and ref[-2] == "yes" and ref[-1] == "0", out


def test_a_masked_case_reports_the_reference_kernels_hang(unchanged, capsys, no_leaks, short_twin_timeout):
    cases = lambda: set(Path(tempfile.gettempdir()).glob(f"combine_lab_case_p{os.getpid()}_*"))  # noqa: E731
    before = cases()
    status = main(["compare", "--kernel-source", str(DOUBLEPLANE), "-pes", "2", "-bs", "8", "-h", "64", "-topk", "4",
                   "-expertPerPe", "2", "--masked-fraction", "0.2", "--timeout", "6"])
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert [r[3] for r in table(out)] == ["PASS", "PASS", "ERROR"]
    assert re.search(r"reference:doubleplane \(.*\) hung: PE \d core \d waited [\d.]+ s for status slot \d+ \(token "
                     r"\d+, k \d: expert -1, masked: no PE sends a masked slot, and this kernel waits for it\)", err), err
    assert cases() <= before


def test_its_modelled_price_comes_from_its_recorded_stream(unchanged, tmp_path, capsys, no_leaks):
    status = main(["compare", "--kernel-source", str(DOUBLEPLANE), "-pes", "4", "-bs", "64", "-h", "7168", "-topk",
                   "8", "-expertPerPe", "8", "-type", "float16_t", "--clock", "model:a3", "--perf", "--output-dir",
                   str(tmp_path / "perf")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "reference:doubleplane: priced from the operation stream it recorded in one launch on the twin" in out
    rows = {r[2]: r for r in table(out)}
    assert rows["reference:doubleplane"][3] == "MODEL"
    # a put, a quiet, a status put and a quiet per row: slower than the lab's pipelined segments
    assert float(rows["reference:doubleplane"][4]) > 1.5 * float(rows["doubleplane"][4])


def _full_op_us(folder: Path) -> float:
    """The median full_op CoreMaxTime/us of PE 0's perf CSV in ``folder`` (its rows: one per repeat)."""
    with open(next(folder.glob("*_perf_rank0.csv"))) as f:
        return statistics.median(float(r["CoreMaxTime/us"]) for r in csv.DictReader(f) if r["Metric"] == "full_op")


def test_its_run_sh_runs_end_to_end_on_the_twin(unchanged, tmp_path, capsys, no_leaks):
    """`combine-lab build --kernel-source <shmem>/examples/combine/combine_doubleplane --main` builds the
    reference's main.cpp against the twin where its run.sh looks (<shmem>/build/bin), here in a copy
    of the checkout's examples; run.sh then generates, runs, checks and profiles unchanged, and its
    times are within 2x of the lab driver's for the same case."""
    tree = tmp_path / "shmem"
    shutil.copytree(ROOT / "examples", tree / "examples")
    shutil.copytree(ROOT / "include", tree / "include")
    example = tree / "examples" / "combine" / "combine_doubleplane"
    assert main(["build", "--kernel-source", str(example), "--main"]) == 0
    assert (tree / "build" / "bin" / "combine_doubleplane").is_file()
    case = ["-pes", "2", "-bs", "64", "-h", "7168", "-topk", "8", "-expertPerPe", "8", "-type", "int32_t"]
    timed = ["--perf", "--warmup", "1", "--loops", "5"]
    proc = subprocess.run(["bash", str(example / "scripts" / "run.sh"), *case, *timed], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COMBINE_TWIN_TIMEOUT_S": "60"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[Combine] check passed" in proc.stdout
    theirs = _full_op_us(example / "output" / "perf")
    capsys.readouterr()
    assert main(["run", "--kernel-source", str(DOUBLEPLANE), *case, *timed, "--repeats", "3", "--output-dir",
                 str(tmp_path / "lab")]) == 0
    ours = _full_op_us(tmp_path / "lab")
    assert 0.5 <= theirs / ours <= 2.0, (theirs, ours)
