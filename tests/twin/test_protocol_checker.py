"""The twin's protocol checker: under chaos mode a status flag that becomes ready before
its payload is caught, in a deliberately broken kernel built only here; the real kernel
passes the same cases under 20 seeds for both variants."""

from __future__ import annotations

import re
import pytest

from combine_lab import cli
from combine_lab.run.runner import run_case
from combine_lab.run.selftest import BROKEN_KERNELS
from combine_lab.run.selftest import CHECKER_SPEC as SPEC

VIOLATION = re.compile(r"^PE \d core \d: status slot \d+ on PE \d became ready \(MTE status put\) before its payload "
                       r"was complete \((MTE|SDMA) payload put issued, not yet landed\)$")


@pytest.fixture
def mte_broken(broken_kernels):
    return broken_kernels["mte_flag_before_quiet"]


@pytest.fixture
def sdma_broken(broken_kernels):
    return broken_kernels["sdma_flag_before_sdma_quiet"]


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
    sdma_puts = None
    for seed in range(20):
        res = run_case(SPEC, variant, min_sdma_bytes=min_sdma, chaos_seed=seed, warmup=1, loops=1)
        assert res.ok and res.violation_count == 0, (seed, res.violations, res.checks)
        sdma_puts = int(res.plane_bytes()["sdma_puts"].sum())
    if variant == "doubleplane":
        assert sdma_puts > 0


def test_chaos_seed_is_recorded_and_validated(no_leaks):
    res = run_case(SPEC, "classic", chaos_seed=7)
    assert res.ok
    with pytest.raises(ValueError, match=r"chaos_seed=-1: must be an int >= 0, on target cpu \(the twin\)"):
        run_case(SPEC, "classic", chaos_seed=-1)


@pytest.mark.slow  # the whole command: every broken kernel again (each also has its own test)
def test_selftest_reports_healthy(broken_kernels, capsys, no_leaks):
    """Reuses the broken kernels the fixtures built (same folders), so it builds nothing."""
    assert cli.main(["selftest", "--seeds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "combine-lab selftest (CPU twin)"
    assert lines[1] == "  checker      broken kernels caught: 22/22"
    assert [ln.split()[0] for ln in lines[2:24]] == [
        "mte_flag_before_quiet", "sdma_flag_before_sdma_quiet", "ub_reuse", "sdma_from_core_48", "shared_sync_id",
        "shared_mte_sync_id", "shared_cache_line", "partial_status_wait", "ub_overlap", "ub_past_end",
        "device_barrier", "blocks_over_aiv", "no_mte2_v_wait", "no_v_mte2_wait", "no_pipe_v_barrier",
        "no_v_mte3_wait", "no_mte3_v_wait", "datacopy_unaligned", "no_init_soc_state",
        "segment_flag_before_sdma_quiet", "no_bases_wait", "other_group_flag"]
    assert lines[4] == "    ub_reuse                        one MTE staging buffer refilled while its last UB -> GM leg is in flight"
    assert lines[7] == ("    shared_mte_sync_id              both MTE staging buffers' puts on one sync_id: MTE2 may set its "
                        "bit again before MTE3 waited")
    assert lines[14] == ("    no_mte2_v_wait                  stage 2 casts an input tile without waiting (MTE2_V) for its "
                         "DataCopy")
    assert lines[24] == ("  real kernel  3 cases x 4 variants (classic, doubleplane, doubleplane-segment-c2, classic-c3) "
                         "x 1 chaos seeds: 0 violations or mismatches")
    assert len({ln.index(BROKEN_KERNELS[ln.split()[0]].rule) for ln in lines[2:24]}) == 1  # the rules in one column
    assert lines[25] == "  faults       masked slots, repeated calls, a slot nobody sends: 3/3 as expected"
    assert lines[26] == "  leaks        shared-memory segments 0, PE processes 0, open files 0"
    assert lines[27] == "cases tried: 37, violations: 0, mismatches: 0, hangs: 0, leaks: 0 -- healthy"
