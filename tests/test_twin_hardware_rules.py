"""The twin refuses what the NPU would get wrong (combine-facts section 10): every broken
kernel of the self-test, built from the kernel's own fault-injection switches, is caught
the way BROKEN_KERNELS says, with the PE, core, operation and UB range named; the real
kernel keeps those rules at 64 PEs on 40- and 48-core SoCs with counters = plan."""

from __future__ import annotations

import re

import pytest

from combine_lab import CaseSpec, make_case, run_case
from combine_lab.errors import ParameterError
from combine_lab.planning.cores import aiv_cores, launch_block_dim
from combine_lab.run.selftest import BROKEN_KERNELS, CHECKER_SPEC, try_broken_kernel


@pytest.mark.parametrize("name", list(BROKEN_KERNELS))
def test_each_broken_kernel_is_caught(broken_kernels, name, no_leaks):
    caught, seen = try_broken_kernel(name, broken_kernels[name])
    assert caught, seen
    assert BROKEN_KERNELS[name].evidence in seen


UB_REUSE = re.compile(r"^PE \d core \d: UB reuse: aclshmemx_mte_put_nbi \(GM -> UB -> GM\) copies GM -> UB \[1024, 1088\) "
                      r"while the UB -> GM leg of aclshmemx_mte_put_nbi \(GM -> UB -> GM\) from UB \[1024, 1088\) to "
                      r"PE \d is still in flight \(no quiet or MTE3->MTE2 flag between them\)$")


def test_ub_reuse_is_reported_always_and_corrupts_x_out_under_chaos(broken_kernels, no_leaks):
    binary = broken_kernels["ub_reuse"]
    calm = run_case(CHECKER_SPEC, "classic", binary=binary)
    assert calm.violation_count > 0 and all(UB_REUSE.match(v) for v in calm.violations), calm.violations
    assert calm.check_ok  # outside chaos mode every leg lands at once: the data happen to be right
    late = run_case(CHECKER_SPEC, "classic", chaos_seed=3, binary=binary)
    assert late.violation_count == calm.violation_count  # the same puts race, whatever the schedule
    assert not late.check_ok  # the legs land late, from a staging buffer the next put overwrote


def test_sdma_from_core_48_does_nothing_and_says_so(broken_kernels, no_leaks):
    case = BROKEN_KERNELS["sdma_from_core_48"].case()
    res = run_case(case, "doubleplane", min_sdma_bytes=0, binary=broken_kernels["sdma_from_core_48"],
                   env={"COMBINE_TWIN_SOC": "Ascend910B2"})
    dropped = ("PE 0 core 48: SDMA put of 32 bytes to PE 48 did nothing: SHMEM creates SDMA streams for AIV blocks "
               "0..47 only (block_dim must stay within min(AIV cores, 48))")
    assert res.violations == [dropped, dropped,
                              "PE 0 core 48: SDMA quiet from a block with no SDMA stream (blocks 0..47 have one)",
                              *[f"PE 0 core 48: status slot {s} on PE 48 became ready (MTE status put) with no payload "
                                "put issued for it in this launch" for s in (0, 1)]]
    assert [r for r, c in enumerate(res.checks) if not c.ok] == [48]
    assert not res.x_out[48].any()  # PE 48's tokens never got their payload: the window's zeros
    assert int(res.plane_bytes().loc[0, "sdma_bytes"]) == 0 and int(res.plane_bytes().loc[0, "sdma_puts"]) == 0
    assert int(res.plan.totals.loc[0, "sdma_bytes"]) == 2 * 8 * 4  # what the plan sent by SDMA


def test_the_real_kernel_serves_several_ranks_per_core_at_64_pes(no_leaks):
    spec = CaseSpec(pes=64, bs=4, h=4096, topk=8, expert_per_pe=1, routing="hot-expert:0.125")
    case = make_case(spec)
    for soc, blocks in (("Ascend910B3", 40), ("Ascend910B2", 48)):
        assert launch_block_dim(64, soc) == blocks == aiv_cores(soc)
        res = run_case(case, "doubleplane", min_sdma_bytes=16384, env={"COMBINE_TWIN_SOC": soc}, chaos_seed=5)
        assert res.ok, (res.checks, res.counter_mismatches(), res.violations)
        assert res.violation_count == 0 and res.counter_mismatches() == []
        assert int(res.plane_bytes()["sdma_bytes"].sum()) == 28819456  # the plan's SDMA bytes, all landed
        assert set(res.perf["Blocks"]) == {blocks}  # the CSV's Blocks is the launch's block_dim
        assert {len(t) for t in res.perf["core_times_us"]} == {blocks}  # every block recorded both frames


def test_an_unknown_twin_soc_is_refused_before_launch(no_leaks):
    with pytest.raises(ParameterError) as e:
        run_case(CaseSpec(pes=2, bs=2, h=8, topk=1, expert_per_pe=1), "classic", env={"COMBINE_TWIN_SOC": "Ascend310P3"})
    assert str(e.value) == ("COMBINE_TWIN_SOC='Ascend310P3': the twin models Ascend910B2 (48 AIV), Ascend910B3 and "
                            "Ascend910B4 (40 AIV) and Ascend910_93xx (48 AIV per die)")
