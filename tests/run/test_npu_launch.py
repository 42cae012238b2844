"""The launcher on the NPU target, without NPUs: the driver's command line per PE (first NPU,
bootstrap address on a free 127.0.0.1 port, same as the twin otherwise), sessions and ports
that do not collide, and the same launch_pes that the twin uses (one process per PE)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from combine_lab.run import runner
from combine_lab.run.launch import bootstrap_ipport, host_argv, launch_pes, new_session
from combine_lab.run.runner import run_case
from combine_lab.case.spec import CaseSpec


def test_host_argv_is_the_drivers_usage_line():
    argv = host_argv(pe_size=4, pe_id=3, ipport="tcp://127.0.0.1:40123", g_npus=4, first_npu=4, dtype="float16_t",
                     bs=16, h=7168, topk=8, expert_per_pe=2, perf=True, warmup=5, loops=50,
                     csv=Path("/r/combine_doubleplane_perf_rank3.csv"), case_id="shape_16_7168_8_8_4",
                     variant="doubleplane", min_sdma_bytes=2097152, case_root=Path("/r"))
    # host/host_args.cpp: pe_size pe_id ipport g_npus first_pe first_npu dtype bs h topk expert_per_pe
    #                     perf warmup loops csv case_id policy min_sdma_bytes case_root
    # (the driver spells doubleplane dual_plane: launch.DRIVER_POLICY)
    assert argv == ["4", "3", "tcp://127.0.0.1:40123", "4", "0", "4", "float16_t", "16", "7168", "8", "2", "1", "5",
                    "50", "/r/combine_doubleplane_perf_rank3.csv", "shape_16_7168_8_8_4", "dual_plane", "2097152",
                    "/r"]


def test_sessions_and_ports_do_not_collide():
    ports = [bootstrap_ipport() for _ in range(8)]
    assert all(re.fullmatch(r"tcp://127\.0\.0\.1:\d+", p) for p in ports)
    assert len(set(ports)) > 1
    assert bootstrap_ipport(8767) == "tcp://127.0.0.1:8767"
    sessions = {new_session() for _ in range(100)}
    assert len(sessions) == 100 and all(re.fullmatch(r"\w+", s) for s in sessions)


def test_runner_passes_fnpu_and_a_fresh_ipport_on_npu(tmp_path, monkeypatch):
    """run_case(target='npu') hands launch_pes the driver's argv with -fnpu and one free port for all PEs."""
    seen = []

    class Stop(Exception):
        pass

    def fake_launch(binary, pes, argv_for_pe, **kw):
        seen.append((binary, pes, [argv_for_pe(r) for r in range(pes)], kw["env"], kw["timeout_s"]))
        raise Stop

    monkeypatch.setattr(runner, "launch_pes", fake_launch)
    spec = CaseSpec(pes=2, bs=4, h=32, topk=2, expert_per_pe=2)
    for _ in range(2):
        with pytest.raises(Stop):
            run_case(spec, "classic", target="npu", fnpu=6, binary=tmp_path / "combine_host", timeout_s=30,
                     work_dir=tmp_path / "case", warmup=2, loops=3)
    (binary, pes, argvs, env, timeout), second = seen
    assert (binary, pes, timeout, env["SHMEM_CYCLE_PROF_PE"]) == (tmp_path / "combine_host", 2, 30, "0")
    port = argvs[0][2]
    assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", port)
    root = tmp_path / "case"
    for r, argv in enumerate(argvs):
        csv = argv[14]
        assert csv.endswith(f"combine_perf_rank{r}.csv")  # classic: the reference's name
        assert argv == host_argv(pe_size=2, pe_id=r, ipport=port, g_npus=2, first_npu=6, dtype="int32_t", bs=4,
                                 h=32, topk=2, expert_per_pe=2, perf=True, warmup=2, loops=3, csv=csv,
                                 case_id="shape_4_32_2_4_2", variant="classic", min_sdma_bytes=2097152,
                                 case_root=root)
    assert second[2][0][2] != port  # each launch bootstraps on its own port


def test_launch_pes_runs_one_process_per_pe_with_those_argv(tmp_path, no_leaks):
    """The same launch_pes as the twin: a stand-in driver records its argv, one process per PE."""
    driver = tmp_path / "combine_host"
    driver.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$PWD/argv_$2.txt"\n')
    driver.chmod(0o755)
    port = bootstrap_ipport()

    def argv(r):
        return host_argv(pe_size=3, pe_id=r, ipport=port, g_npus=3, first_npu=2, dtype="int32_t", bs=4, h=32,
                         topk=2, expert_per_pe=1, perf=False, warmup=0, loops=1, csv=tmp_path / f"p{r}.csv",
                         case_id="shape_4_32_2_3_3", variant="classic", min_sdma_bytes=2097152,
                         case_root=tmp_path)

    outcomes = launch_pes(driver, 3, argv, cwd=tmp_path, log_dir=tmp_path / "logs", timeout_s=20)
    assert [o.returncode for o in outcomes] == [0, 0, 0]
    for r in range(3):
        assert (tmp_path / f"argv_{r}.txt").read_text().splitlines() == argv(r)
