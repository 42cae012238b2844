"""Bad input and faults beyond the case files: capacity, sessions in use, two runs at once,
a soak of consecutive runs with nothing leaked."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import psutil
import pytest

from combine_lab.planning.capacity import CapacityError, twin_heap_bytes, window_bytes
from combine_lab.run.launch import LaunchError, launch_pes, shm_path
from combine_lab.run.runner import run_case
from combine_lab.case.spec import CaseSpec

from conftest import RUN_TAG, host_processes, twin_segments


def test_window_and_heap_bytes_match_the_driver():
    spec = CaseSpec(pes=2, bs=8, h=13, topk=2, expert_per_pe=2, dtype="float16_t")
    # 16 slots of align_up(26, 32) = 32 B, then (from a 64 B line) 16 status slots of 64 B: one
    # scalar cache line each (the 32 B ready values come from UB)
    assert window_bytes(spec) == 16 * 32 + 16 * 64
    assert twin_heap_bytes(spec) == 2 * 1024 * 1024 + (1024 * 1024 + 64 * 1024)


def test_shape_too_big_for_dev_shm_refused_before_writing(tmp_path, no_leaks):
    spec = CaseSpec(pes=8, bs=65536, h=7168, topk=8, expert_per_pe=8, routing="zipf:1.0")
    with pytest.raises(CapacityError) as e:
        run_case(spec, "doubleplane", work_dir=tmp_path)
    assert str(e.value).startswith(
        "shape_65536_7168_8_64_8: the twin's symmetric heaps need 180816973824 bytes (168.40 GiB: 8 PEs x "
        "22602121216 bytes) in /dev/shm, ")
    assert re.search(r"in /dev/shm, \d+ bytes \(\d+\.\d\d GiB\) available$", str(e.value))
    assert list(tmp_path.iterdir()) == []  # nothing written


def _room(free: int) -> dict:
    return {"limits": {"RLIMIT_NPROC": (free + 100, 100)}, "free": free}


def test_more_pes_than_the_twin_can_start_are_refused_before_writing(tmp_path, monkeypatch, capsys):
    """The twin starts one process per PE with 42 tasks each on its default SoC (main, 40 AIV block
    threads, SDMA): with room for 4,200 tasks, 100 PEs run and 101 are refused, by run_case and the
    command line (-pes named), nothing written; the timing model prices any PE count."""
    from combine_lab import cli
    from combine_lab.planning import capacity
    from combine_lab.run import runner

    assert (capacity.twin_tasks_per_pe(2), capacity.twin_tasks_per_pe(101)) == (4, 42)
    monkeypatch.setattr(capacity, "task_room", lambda: _room(4200))
    monkeypatch.setattr(capacity, "_fits_every_limit", lambda tasks: False)  # this machine's own room not asked
    tiny = dict(bs=1, h=16, topk=1, expert_per_pe=1)
    capacity.check_twin_pes(CaseSpec(pes=100, **tiny))
    with pytest.raises(CapacityError) as e:
        run_case(CaseSpec(pes=101, **tiny), "doubleplane", work_dir=tmp_path)
    text = ("pes=101: at most 100 PEs on the twin here (shape_1_16_1_101_101): the twin runs one process per PE "
            "with 42 tasks each (its main thread, 40 AIV block threads, the SDMA engine), 4,242 in all, and this "
            "machine lets 4,200 more start (the least of RLIMIT_NPROC 4,300 less 100 running); a timing-model "
            "clock launches nothing and has no such bound")
    assert (str(e.value), e.value.parameter, e.value.value, e.value.allowed) == (
        text, "pes", 101, "at most 100 PEs on the twin here")
    assert list(tmp_path.iterdir()) == []  # nothing written
    monkeypatch.setattr(runner, "prepare_case", lambda *a, **k: pytest.fail("case files written"))
    args = ["compare", "-pes", "101", "-bs", "1", "-h", "16", "-topk", "1", "--work-dir", str(tmp_path)]
    assert cli.main(args) == 2
    text = text.replace("shape_1_16_1_101_101", "shape_1_16_1_202_101")  # the command line's 2 experts per PE
    assert capsys.readouterr().err == (f"combine-lab: error: -pes: {text}; the timing model prices it without "
                                       f"running it: combine-lab {' '.join(args)} --clock model:a3\n")
    monkeypatch.setattr(capacity, "task_room", lambda: _room(0))
    assert cli.main(args + ["--clock", "model:a3"]) == 0
    assert "shape_1_16_1_202_101 uniform doubleplane MODEL" in capsys.readouterr().out


def test_the_room_for_tasks_comes_from_the_user_limit_and_the_kernels(monkeypatch):
    from combine_lab.planning import capacity

    monkeypatch.setattr(capacity.resource, "getrlimit", lambda which: (500, 1000))
    room = capacity.task_room()
    mine = room["limits"]["RLIMIT_NPROC"][1]
    assert room["limits"]["RLIMIT_NPROC"][0] == 500 and 1 <= mine < 500  # this test's own threads at least
    assert room["free"] == min(limit - n for limit, n in room["limits"].values()) <= 500 - mine
    monkeypatch.setattr(capacity.resource, "getrlimit", lambda which: (capacity.resource.RLIM_INFINITY,) * 2)
    assert "RLIMIT_NPROC" not in capacity.task_room()["limits"]


def test_the_cheap_answer_never_contradicts_the_room(monkeypatch):
    """Without walking the processes: all tasks running (/proc/loadavg) plus those asked for under
    every limit is a yes that task_room agrees with; past the user's soft limit, or any other, it is
    no answer (False) and the walk decides. (Limits far from the count: other processes come and go
    between two reads of it.)"""
    from combine_lab.planning import capacity

    monkeypatch.setattr(capacity.resource, "getrlimit", lambda which: (10**7, 10**7))
    assert capacity._fits_every_limit(10) and capacity.task_room()["free"] >= 10
    assert not capacity._fits_every_limit(10**9)  # past kernel.pid_max and threads-max
    monkeypatch.setattr(capacity.resource, "getrlimit", lambda which: (1, 1))
    assert not capacity._fits_every_limit(1)


def test_session_in_use_is_refused_and_left_alone(twin_binary, tmp_path, no_leaks):
    session = f"{RUN_TAG}in_use"
    other = shm_path(session)
    other.write_bytes(b"another run")
    try:
        with pytest.raises(LaunchError, match=f"session {session} is in use: {other} exists"):
            launch_pes(twin_binary, 2, lambda r: [r], cwd=tmp_path, log_dir=tmp_path / "logs", timeout_s=10,
                       session=session)
        assert other.read_bytes() == b"another run"  # not removed: it is not ours
        assert host_processes() == []
    finally:
        other.unlink()


@pytest.mark.slow  # two Python processes each launching PEs
def test_two_runs_at_once_from_two_processes(tmp_path, no_leaks):
    code = ("import sys; from combine_lab.case.spec import CaseSpec; from combine_lab.run.runner import run_case; "
            "r = run_case(CaseSpec(pes=4, bs=16, h=64, topk=2, expert_per_pe=2, routing='zipf:1.0', seed=int(sys.argv[1])), "
            "'doubleplane', min_sdma_bytes=0, warmup=3, loops=10); print(r.ok)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for seed in (1, 2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert [o[0].strip() for o in outs] == ["True", "True"]


def _open_fds() -> int:
    return psutil.Process().num_fds()


def _children() -> int:
    return len(psutil.Process().children())


@pytest.mark.slow
def test_soak_200_runs_leak_nothing(no_leaks):
    rng = np.random.default_rng(2026)
    fds, segs, kids = _open_fds(), twin_segments(), _children()
    for i in range(200):
        pes = int(rng.integers(1, 5))
        spec = CaseSpec(pes=pes, bs=int(rng.integers(1, 9)), h=int(rng.integers(1, 40)), topk=2,
                        expert_per_pe=int(rng.integers(1, 3)) if pes > 1 else 2,
                        dtype=["int32_t", "float16_t"][i % 2], seed=i, routing="uniform")
        res = run_case(spec, ["classic", "doubleplane"][i % 2], min_sdma_bytes=0)
        assert res.ok, (i, spec)
    assert (_open_fds(), twin_segments(), _children()) == (fds, segs, kids)
