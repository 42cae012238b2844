"""On a real Ascend NPU machine only (marked ``npu``; skipped elsewhere by tests/conftest.py):
the NPU build, classic and dual-plane against golden, the perf rows, and the HCCL baseline.

Run them there with (after `source <CANN>/set_env.sh` and setting SHMEM_HOME):

    python3 -m pytest -m npu tests/run/test_npu_hardware.py
"""

from __future__ import annotations

import pytest

from combine_lab.run.build import build, default_build_dir
from combine_lab.run.capabilities import detect
from combine_lab.harness import compare
from combine_lab.run.runner import prepare_case
from combine_lab.case.spec import CaseSpec

pytestmark = pytest.mark.npu


@pytest.fixture(scope="module")
def caps():
    c = detect()
    if c.npus is None or c.npus.count < 2:
        pytest.skip("needs 2 NPUs or more")
    return c


def test_npu_build_is_cached_per_soc(caps):
    binary = build("npu")
    assert binary == default_build_dir("npu", caps.soc) / "combine_host" and binary.is_file()
    assert build("npu") == binary


@pytest.mark.parametrize("dtype", ["int32_t", "float16_t"])
def test_classic_and_doubleplane_match_golden(caps, dtype):
    spec = CaseSpec(pes=2, bs=16, h=7168, topk=8, expert_per_pe=2, dtype=dtype)
    res = compare(spec, target="npu", warmup=2, loops=5, timeout_s=300)
    assert res["classic"].check_ok, res["classic"].checks
    if caps["sdma"].available:
        assert res["doubleplane"].check_ok, res["doubleplane"].checks
    else:
        assert list(res) == ["classic"]  # refused with the reason on CANN < 9.0.0
    for r in res.values():
        assert r.time_us("full_op") > 0, ("profiling frames are empty: point SHMEM_HOME at a SHMEM source build "
                                          "(src/device holds the SHMEMI_PROF_* macros)")


def test_doubleplane_with_sdma_segments(caps):
    if not caps["sdma"].available:
        pytest.skip(caps["sdma"].fix)
    spec = CaseSpec(pes=2, bs=512, h=4096, topk=2, expert_per_pe=1, routing="hot-rank:0.9")
    res = compare(spec, target="npu", warmup=2, loops=5, timeout_s=300)
    assert res["doubleplane"].plan.totals["sdma_bytes"].sum() > 0
    assert res["classic"].check_ok and res["doubleplane"].check_ok


def test_hccl_baseline_matches_golden(caps):
    if caps.baselines()["hccl"]:
        pytest.skip(caps.baselines()["hccl"])
    from combine_lab.run.baseline import run_baseline

    prepared = prepare_case(CaseSpec(pes=2, bs=16, h=7168, topk=8, expert_per_pe=2, dtype="float16_t"))
    try:
        res = run_baseline(prepared, target="npu", warmup=2, loops=5, timeout_s=300)
    finally:
        prepared.cleanup()
    assert res.backend == "hccl" and res.check_ok, res.checks
    assert res.time_us("full_op") > 0
