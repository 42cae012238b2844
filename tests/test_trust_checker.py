"""The twin's protocol checker: under chaos mode a status flag that becomes ready before
its payload is caught, in a deliberately broken kernel built only here; the real kernel
passes the same cases under 20 seeds for both variants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from combine_lab.build import build, source_root
from combine_lab.runner import run_case
from combine_lab.spec import CaseSpec

# Small, with SDMA segments when min_sdma_bytes=0 (zipf skew puts some segments above average).
SPEC = CaseSpec(pes=3, bs=12, h=20, topk=3, expert_per_pe=2, routing="zipf:1.2", dtype="float16_t")

MTE_QUIET = """            aclshmem_quiet();
            PutFlags(begin, end, dst_pe);
"""
MTE_BROKEN = """            PutFlags(begin, end, dst_pe);  // BROKEN: flags before the payload's quiet
            aclshmem_quiet();
"""
SDMA_QUIET = """            aclshmemx_sdma_quiet<T>(sdma_ub, kUbSdmaBytes, 0);
            for (uint32_t e = 0; e < epp_; ++e) {
                const uint32_t seg = e * uint32_t(pes_) + src_rank;
                if (UseSdma(seg, threshold_num, threshold_den)) PutFlags(SegBegin(seg), SegEnd(seg), dst_pe);
            }
"""
SDMA_BROKEN = """            for (uint32_t e = 0; e < epp_; ++e) {
                const uint32_t seg = e * uint32_t(pes_) + src_rank;
                if (UseSdma(seg, threshold_num, threshold_den)) PutFlags(SegBegin(seg), SegEnd(seg), dst_pe);
            }
            aclshmem_quiet();  // BROKEN: SDMA flags land before the SDMA payload's quiet
            aclshmemx_sdma_quiet<T>(sdma_ub, kUbSdmaBytes, 0);
"""
VIOLATION = re.compile(r"^PE \d core \d: status slot \d+ on PE \d became ready \(MTE status put\) before its payload "
                       r"was complete \((MTE|SDMA) payload put issued, not yet landed\)$")


def broken_binary(tmp_path_factory, name: str, good: str, bad: str) -> Path:
    src = (source_root() / "kernels" / "combine_kernel.cpp").read_text()
    assert src.count(good) == 1, f"kernel source changed: update the {name} mutation"
    folder = tmp_path_factory.mktemp(name)
    kernel = folder / "combine_kernel.cpp"
    # Keep the kernel's includes resolving: the mutated copy includes the real headers by path.
    kernel.write_text(src.replace(good, bad).replace('#include "combine_kernel.h"',
                                                     f'#include "{source_root() / "kernels" / "combine_kernel.h"}"'))
    return build("cpu", build_dir=folder / "build", kernel_source=kernel)


@pytest.fixture(scope="module")
def mte_broken(tmp_path_factory):
    return broken_binary(tmp_path_factory, "mte_flag_before_quiet", MTE_QUIET, MTE_BROKEN)


@pytest.fixture(scope="module")
def sdma_broken(tmp_path_factory):
    return broken_binary(tmp_path_factory, "sdma_flag_before_quiet", SDMA_QUIET, SDMA_BROKEN)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mte_flag_before_quiet_is_caught(mte_broken, seed, no_leaks):
    res = run_case(SPEC, "classic", chaos_seed=seed, binary=mte_broken)
    assert res.violation_count > 0
    assert not res.ok
    assert all(VIOLATION.match(v) for v in res.violations), res.violations
    assert any("(MTE payload put issued, not yet landed)" in v for v in res.violations)


@pytest.mark.parametrize("seed", [1, 2])
def test_sdma_flag_before_sdma_quiet_is_caught(sdma_broken, seed, no_leaks):
    res = run_case(SPEC, "doubleplane", min_sdma_bytes=0, chaos_seed=seed, binary=sdma_broken)
    assert int(res.plan.totals["sdma_rows"].sum()) > 0
    # Every SDMA row's flag lands at the MTE quiet, before the SDMA quiet lands its payload.
    assert res.violation_count == int(res.plan.totals["sdma_rows"].sum())
    assert all("(SDMA payload put issued, not yet landed)" in v for v in res.violations)
    assert not res.ok


@pytest.mark.parametrize("variant,min_sdma", [("classic", 2 * 1024 * 1024), ("doubleplane", 0)])
def test_real_kernel_passes_20_chaos_seeds(variant, min_sdma, no_leaks):
    sdma_rows = None
    for seed in range(20):
        res = run_case(SPEC, variant, min_sdma_bytes=min_sdma, chaos_seed=seed, warmup=1, loops=1)
        assert res.ok and res.violation_count == 0, (seed, res.violations, res.checks)
        sdma_rows = int(res.plane_bytes()["sdma_rows"].sum())
    if variant == "doubleplane":
        assert sdma_rows > 0


def test_chaos_seed_is_recorded_and_validated(no_leaks):
    res = run_case(SPEC, "classic", chaos_seed=7)
    assert res.ok
    with pytest.raises(ValueError, match=r"chaos_seed=-1: must be an int >= 0, on target cpu \(the twin\)"):
        run_case(SPEC, "classic", chaos_seed=-1)
