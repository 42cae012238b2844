"""The twin's protocol checker: a status flag put before its payload is complete is caught on every
run, chaos or not (happens-before, docs/hardware-rules.md#14-happens-before), naming both calls'
file:line, in deliberately broken kernels built only here; the real kernel passes the same cases
under 20 seeds for both variants."""

from __future__ import annotations

import re

import pytest

from combine_lab import cli
from combine_lab.run import broken
from combine_lab.run.runner import run_case
from combine_lab.run.selftest import BROKEN_KERNELS, REFSTYLE_BUGS, try_refstyle_bug
from combine_lab.run.selftest import CHECKER_SPEC as SPEC
from conftest import build_cache

#: The broken kernel whose flags go before each plane's quiet (kernels/broken/<name>.patch).
BROKEN_OF = {"MTE": "mte_flag_before_quiet", "SDMA": "sdma_flag_before_sdma_quiet"}


def site_of(name: str, text: str) -> str:
    """``<name>/combine_kernel.cpp:<line>``: the line holding ``text`` (once) in broken kernel ``name``'s
    copy of the kernel (its patch applied), as the twin's reports name it."""
    (line,) = [i for i, ln in enumerate(broken.patched(name)["combine_kernel.cpp"].splitlines(), 1) if text in ln]
    return f"{name}/combine_kernel.cpp:{line}"


FLAG_PUT = "aclshmemx_mte_put_nbi<int32_t>(SlotStatus(RowSlot(row)), block, kStatusWords, dst_pe, kMteSyncId)"
MTE_PUT = "aclshmemx_mte_put_nbi<U>(dst, src, ub_at<U>(StageOff(buf)), kUbMteStageBytes, n, dst_pe,"
SDMA_PUT = "aclshmemx_sdma_put_nbi<T>(DstPayload(s.seg, row), expand_x_ + uint64_t(row) * h_, sdma_ub,"


def violation(plane: str) -> re.Pattern:
    name = BROKEN_OF[plane]
    payload = (f"aclshmemx_mte_put_nbi at {site_of(name, MTE_PUT)}" if plane == "MTE"
               else f"aclshmemx_sdma_put_nbi at {site_of(name, SDMA_PUT)}")
    quiet = (r"aclshmem_quiet \(or aclshmem_fence, PipeBarrier<PIPE_ALL>\)" if plane == "MTE"
             else r"aclshmemx_sdma_quiet \(an MTE quiet does not complete SDMA\)")
    return re.compile(rf"^PE \d core \d: status put \(aclshmemx_mte_put_nbi at {re.escape(site_of(name, FLAG_PUT))}\) "
                      rf"makes slot \d+ on PE \d ready before its payload is delivered: the {plane} payload put "
                      rf"\({re.escape(payload)}\) is not complete: no {quiet} on this core comes between them; on the "
                      r"NPU the flag can land first, whatever the schedule \(docs/hardware-rules.md#14-happens-before\)$")


@pytest.fixture
def mte_broken(broken_kernels):
    return broken_kernels["mte_flag_before_quiet"]


@pytest.fixture
def sdma_broken(broken_kernels):
    return broken_kernels["sdma_flag_before_sdma_quiet"]


def test_mte_flag_before_quiet_is_caught_on_every_run_whatever_the_schedule(mte_broken, no_leaks):
    counts = set()
    for seed in (None, 1, 2):
        res = run_case(SPEC, "classic", chaos_seed=seed, binary=mte_broken)
        assert not res.ok and res.violation_count > 0
        assert all(violation("MTE").match(v) for v in res.violations), res.violations
        counts.add(res.violation_count)
    # The flags of a segment's last rows, whose legs no MTE3->MTE2 flag of a later put orders before
    # them (a staging buffer's flag does order the earlier rows' legs), in both launches: the same
    # puts whatever the schedule.
    assert counts == {66}


@pytest.mark.parametrize("seed", [None, 1])
def test_sdma_flag_before_sdma_quiet_is_caught_on_every_run(sdma_broken, seed, no_leaks):
    res = run_case(SPEC, "doubleplane", min_sdma_bytes=0, chaos_seed=seed, binary=sdma_broken)
    assert int(res.plan.totals["sdma_rows"].sum()) > 0
    # Every SDMA row's flag goes before the SDMA quiet that completes its payload, in both launches.
    assert res.violation_count == 2 * int(res.plan.totals["sdma_rows"].sum())
    assert all(violation("SDMA").match(v) for v in res.violations), res.violations
    assert not res.ok


@pytest.mark.parametrize("name", list(REFSTYLE_BUGS))
def test_each_refstyle_bug_is_caught_on_a_default_run_at_its_line(name, no_leaks):
    bug = REFSTYLE_BUGS[name]
    # one folder per bug in the build cache: a kernel folder's build is reused while its files'
    # bytes are unchanged (the build is keyed by its path), as waitall's in test_kernel_source
    folder = build_cache() / "kernels" / f"refstyle_bug_{name}" / "combine_refstyle"
    folder.mkdir(parents=True, exist_ok=True)
    caught, seen = try_refstyle_bug(name, folder)
    assert caught, seen
    assert f"combine_refstyle/combine_refstyle_kernel.cpp:{bug.line()}" in seen
    expected = {"dropped_quiet": 63, "never_reset": 82, "sdma_status": 64, "stale_flag": 82, "wrong_slot_wait": 82}
    assert bug.line() == expected[name]  # the refstyle source as it is (tests/kernels/combine_refstyle)


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
    out, err = capsys.readouterr()
    lines = out.splitlines()
    from combine_lab.run.selftest import BROKEN_KERNELS, REFSTYLE_BUGS
    assert err.splitlines()[0] == (  # said before the half minute of work, the report after it
        f"combine-lab selftest: {len(BROKEN_KERNELS)} broken kernels (built on the first run), {len(REFSTYLE_BUGS)} bugs "
        "in a SHMEM-style kernel, the real kernel under 1 chaos seeds per case and variant, and the fault cases; about "
        "half a minute on 2 cores once built...")
    assert lines[0] == "combine-lab selftest (CPU twin)"
    assert lines[1] == "  checker      broken kernels caught: 24/24"
    assert [ln.split()[0] for ln in lines[2:26]] == [
        "mte_flag_before_quiet", "sdma_flag_before_sdma_quiet", "sdma_ring_overrun", "ub_reuse", "sdma_from_core_48",
        "shared_sync_id",
        "shared_mte_sync_id", "shared_cache_line", "partial_status_wait", "ub_overlap", "ub_past_end",
        "device_barrier", "blocks_over_aiv", "no_mte2_v_wait", "no_v_mte2_wait", "no_pipe_v_barrier",
        "no_v_mte3_wait", "no_mte3_v_wait", "datacopy_unaligned", "no_init_soc_state", "payload_before_flag",
        "segment_flag_before_sdma_quiet", "no_bases_wait", "other_group_flag"]
    assert lines[5] == "    ub_reuse                        one MTE staging buffer refilled while its last UB -> GM leg is in flight"
    assert lines[8] == ("    shared_mte_sync_id              both MTE staging buffers' puts on one sync_id: MTE2 may set its "
                        "bit again before MTE3 waited")
    assert lines[15] == ("    no_mte2_v_wait                  stage 2 casts an input tile without waiting (MTE2_V) for its "
                         "DataCopy")
    assert lines[26] == "  your kernel  refstyle bugs caught on a default run: 5/5"
    assert lines[27:32] == [
        "    dropped_quiet    the quiet between a row's payload put and its status put removed",
        "    never_reset      status slots never reset after their wait: launch 1's flags release launch 2's waits",
        "    sdma_status      the status block sent by SDMA instead of MTE",
        "    stale_flag       only the first of a token's k status slots reset: the others stay ready into the next "
        "launch",
        "    wrong_slot_wait  stage 2 waits on the token's first status slot for each of its k slots, then reads slot "
        "j's payload row without its flag"]
    assert lines[32] == ("  real kernel  3 cases x 4 variants (classic, doubleplane, doubleplane-segment-c2, classic-c3) "
                         "x 1 chaos seeds: 0 violations or mismatches")
    assert len({ln.index(BROKEN_KERNELS[ln.split()[0]].rule) for ln in lines[2:26]}) == 1  # the rules in one column
    assert lines[33] == "  faults       masked slots, repeated calls, a slot nobody sends: 3/3 as expected"
    assert lines[34] == "  leaks        shared-memory segments 0, PE processes 0, open files 0"
    assert lines[35] == "cases tried: 44, violations: 0, mismatches: 0, hangs: 0, leaks: 0 -- healthy"
