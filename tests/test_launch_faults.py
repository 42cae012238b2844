"""Bad case files, hangs and interrupts: a clear message naming file or PE, and nothing
left behind (no combine_host process, no /dev/shm segment)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from pathlib import Path

import numpy as np
import pytest

from combine_lab.errors import CaseFileError
from combine_lab.run.launch import LaunchError, launch_pes
from combine_lab.run.runner import prepare_case, run_case
from combine_lab.case.spec import CaseSpec

SPEC = CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2)


@pytest.fixture
def prepared(tmp_path, short_stop_grace):
    """The case files of SPEC; a PE that refuses them fails at once while the others wait for it."""
    return prepare_case(SPEC, tmp_path)


def test_missing_file_refused_by_driver(prepared, no_leaks):
    path = prepared.case_dir / "rank_1" / "expand_x.bin"
    path.unlink()
    with pytest.raises(LaunchError) as e:
        run_case(prepared, "doubleplane")
    assert e.value.pe == 1 and e.value.returncode == 1
    assert f"{path}: cannot open (No such file or directory)" in str(e.value)


def test_truncated_file_refused_by_driver(prepared, no_leaks):
    path = prepared.case_dir / "rank_0" / "expert_ids.bin"
    os.truncate(path, 12)
    with pytest.raises(LaunchError) as e:
        run_case(prepared, "classic")
    assert e.value.pe == 0
    assert f"{path}: 12 bytes, expected 32 for this shape" in str(e.value)


def test_truncated_file_refused_before_launch_when_read(prepared, no_leaks):
    path = prepared.case_dir / "rank_0" / "golden_x_out.bin"
    os.truncate(path, 100)
    with pytest.raises(CaseFileError, match="golden_x_out.bin"):
        run_case(prepared.case_dir, "classic")


def test_decreasing_count_refused_by_driver(prepared, no_leaks):
    path = prepared.case_dir / "rank_0" / "ep_recv_count.bin"
    counts = np.fromfile(path, dtype=np.int32)
    counts[1] = counts[0] - 1 if counts[0] > 0 else -1
    counts.tofile(path)
    with pytest.raises(LaunchError) as e:
        run_case(prepared, "doubleplane")
    assert f"{path}: index 1 is {counts[1]}" in str(e.value)
    assert "must be cumulative (non-decreasing)" in str(e.value)


def test_expert_id_out_of_range_refused_by_driver(prepared, no_leaks):
    path = prepared.case_dir / "rank_1" / "expert_ids.bin"
    ids = np.fromfile(path, dtype=np.int32)
    ids[3] = 4  # E = 4
    ids.tofile(path)
    with pytest.raises(LaunchError) as e:
        run_case(prepared, "doubleplane")
    assert f"{path}: index 3 (token 1, topk 1) is 4: must be < 4 experts" in str(e.value)


def drop_row_for_slot(case_dir, pes: int, src_rank: int, token: int, k: int) -> None:
    """Remove, from whichever destination PE holds it, the row that feeds (src_rank, token, k)."""
    for d in range(pes):
        a_path = case_dir / f"rank_{d}" / "assist_info.bin"
        c_path = case_dir / f"rank_{d}" / "ep_recv_count.bin"
        assist = np.fromfile(a_path, dtype=np.int32).reshape(-1, 3)
        cnt = np.fromfile(c_path, dtype=np.int32)
        used = int(cnt[-1])
        hit = np.nonzero((assist[:used] == (src_rank, token, k)).all(axis=1))[0]
        if len(hit):
            row = int(hit[0])
            assist[row:used - 1] = assist[row + 1:used].copy()
            assist[used - 1] = 0
            cnt[np.searchsorted(cnt, row, side="right"):] -= 1
            assist.tofile(a_path)
            cnt.tofile(c_path)
            return
    raise AssertionError("no row feeds that slot")


def test_slot_nobody_sends_times_out_naming_pe_core_slot(prepared, short_twin_timeout, no_leaks):
    drop_row_for_slot(prepared.case_dir, SPEC.pes, src_rank=0, token=0, k=0)
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as e:
        run_case(prepared, "classic", timeout_s=20)
    assert time.monotonic() - t0 < 15
    assert e.value.pe == 0
    assert "twin: PE 0 core 0: timed out after 2.0 s waiting for status slot 0 to become 1 (it is 0)" in str(e.value)


def test_pe_that_never_starts_ends_within_timeout(twin_binary, tmp_path, no_leaks):
    """Only PE 0 is started (the launcher is told pes=1, the driver pe_size=2): it times out
    waiting for PE 1 to attach, and says so."""
    prepared = prepare_case(SPEC, tmp_path)
    args = lambda r: [2, 0, "tcp://127.0.0.1:1", 2, 0, 0, "int32_t", 4, 16, 2, 2, 0, 0, 1,  # noqa: E731
                      tmp_path / "x_perf_rank0.csv", SPEC.case_id, "dual_plane", 2097152, prepared.case_root]
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as e:
        launch_pes(twin_binary, 1, args, cwd=tmp_path, log_dir=tmp_path / "logs", timeout_s=30,
                   env={"COMBINE_TWIN_TIMEOUT_S": "1.5"})
    assert time.monotonic() - t0 < 10
    assert "PE 0 exited with status 3" in str(e.value)
    assert "waiting for all PEs to attach (1 of 2)" in str(e.value)


def test_killed_pe_is_reported_and_others_stopped(twin_binary, tmp_path, short_stop_grace, no_leaks):
    prepared = prepare_case(SPEC, tmp_path)
    # PE 1 is "sleep": it never attaches, and is killed by a signal after 0.5 s.
    script = tmp_path / "fake_pe.sh"
    script.write_text(f'#!/bin/sh\nif [ "$2" = 1 ]; then sleep 0.5; kill -9 $$; fi\nexec {twin_binary} "$@"\n')
    script.chmod(0o755)
    args = lambda r: [2, r, "tcp://127.0.0.1:1", 2, 0, 0, "int32_t", 4, 16, 2, 2, 0, 0, 1,  # noqa: E731
                      tmp_path / f"x_perf_rank{r}.csv", SPEC.case_id, "dual_plane", 2097152, prepared.case_root]
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as e:
        launch_pes(script, 2, args, cwd=tmp_path, log_dir=tmp_path / "logs", timeout_s=30)
    assert time.monotonic() - t0 < 10
    assert str(e.value).startswith("PE 1 killed by signal 9")
    assert e.value.pe == 1


def test_whole_run_timeout_names_running_pes(twin_binary, tmp_path, no_leaks):
    script = tmp_path / "stuck.sh"
    script.write_text("#!/bin/sh\necho waiting >&2\nexec sleep 30\n")
    script.chmod(0o755)
    with pytest.raises(LaunchError) as e:
        launch_pes(script, 2, lambda r: [r], cwd=tmp_path, log_dir=tmp_path / "logs", timeout_s=1.0)
    assert str(e.value).startswith("timed out after 1.0 s: PEs [0, 1] still running")
    assert "--- PE 1 stderr:\nwaiting" in str(e.value)


def test_ctrl_c_stops_every_pe(tmp_path, no_leaks):
    """SIGINT while the PEs hang: KeyboardInterrupt reaches the caller after every PE is gone."""
    env = dict(os.environ, COMBINE_TWIN_TIMEOUT_S="60", PYTHONPATH=str(Path(__file__).parent))
    code = f"""
from pathlib import Path
from combine_lab.run.runner import prepare_case, run_case
from combine_lab.case.spec import CaseSpec
from test_launch_faults import drop_row_for_slot, SPEC
prepared = prepare_case(SPEC, Path({str(tmp_path)!r}))
drop_row_for_slot(prepared.case_dir, SPEC.pes, 0, 0, 0)
print("launching", flush=True)
run_case(prepared, "classic", timeout_s=120)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "launching\n"
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGINT  # Python re-raises SIGINT after the cleanup
    assert err.rstrip().endswith("KeyboardInterrupt")


def test_count_past_capacity_refused_by_driver(prepared, no_leaks):
    path = prepared.case_dir / "rank_1" / "ep_recv_count.bin"
    counts = np.fromfile(path, dtype=np.int32)
    counts[-1] = SPEC.capacity_rows + 1  # 17 rows of a 16-row capacity
    counts.tofile(path)
    with pytest.raises(LaunchError) as e:
        run_case(prepared, "doubleplane")
    assert e.value.pe == 1
    assert f"{path}: index 3 is 17 after {counts[-2]}: counts must be cumulative (non-decreasing) and at most 16 rows" \
        in str(e.value)


def test_assist_row_out_of_range_refused_by_driver(prepared, no_leaks):
    path = prepared.case_dir / "rank_0" / "assist_info.bin"
    assist = np.fromfile(path, dtype=np.int32).reshape(-1, 3)
    counts = np.fromfile(prepared.case_dir / "rank_0" / "ep_recv_count.bin", dtype=np.int32)
    row = int(np.nonzero(np.diff(np.concatenate([[0], counts])))[0][0])  # first non-empty segment
    first = 0 if row == 0 else int(counts[row - 1])
    assist[first, 1] = SPEC.bs  # token id 4 of 4 tokens
    assist.tofile(path)
    with pytest.raises(LaunchError) as e:
        run_case(prepared, "classic")
    assert e.value.pe == 0
    assert (f"{path}: row {first} is (src_rank {assist[first, 0]}, token 4, topk {assist[first, 2]}): segment {row} "
            f"needs src_rank {row % SPEC.pes}, token in [0, 4), topk in [0, 2)") in str(e.value)
