"""The twin refuses what the NPU would get wrong (docs/hardware-rules.md#1-how-the-twin-enforces-rules): every broken
kernel of the self-test, built from its patch of the kernel (kernels/broken/<name>.patch), is caught
the way BROKEN_KERNELS says, with the PE, core, operation and UB range named; the real
kernel keeps those rules at 64 PEs on 40- and 48-core SoCs with counters = plan."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from combine_lab import CaseSpec, make_case, run_case
from combine_lab.errors import ParameterError
from combine_lab.planning.cores import TWIN_DEFAULT_SOC, TWIN_SOCS, aiv_cores, launch_block_dim, twin_soc, twin_socs
from combine_lab.run import broken
from combine_lab.run.build import build, twin_cxx
from combine_lab.run.selftest import BROKEN_KERNELS, CHECKER_SPEC, try_broken_kernel

ROOT = Path(__file__).resolve().parents[2]


def broken_site(name: str, text: str) -> str:
    """``<name>/combine_kernel.cpp:<line>``: where the twin's report puts the line holding ``text`` in
    broken kernel ``name``'s copy of the kernel (kernels/broken/<name>.patch applied: its own lines)."""
    src = broken.patched(name)["combine_kernel.cpp"].splitlines()
    return f"{name}/combine_kernel.cpp:{next(i for i, ln in enumerate(src, 1) if text in ln)}"


#: The kernel's status put (PutFlags), whose line the twin's reports name.
FLAG_PUT = "aclshmemx_mte_put_nbi<int32_t>(SlotStatus(RowSlot(row))"


@pytest.mark.parametrize("name", list(BROKEN_KERNELS))
def test_each_broken_kernel_is_caught(broken_kernels, name, no_leaks):
    caught, seen = try_broken_kernel(name, broken_kernels[name])
    assert caught, seen
    assert BROKEN_KERNELS[name].seen_in(seen)


def test_a_core_barrier_every_core_waits_in_before_a_later_wave_is_a_deadlock_said_at_once(broken_kernels, no_leaks):
    """41 blocks on 40 cores with a core barrier: the 40 blocks of the first wave hold their cores in the
    barrier, so block 40 never starts. The twin says so when the 40th arrives (a deadlock, as the NPU
    would hang), not after its bounded wait (which would read "timed out after ...")."""
    from combine_lab.run.launch import LaunchError

    k = BROKEN_KERNELS["blocks_over_aiv"]
    with pytest.raises(LaunchError) as e:
        run_case(k.case, k.variant, min_sdma_bytes=k.min_sdma_bytes, binary=broken_kernels["blocks_over_aiv"],
                 env={**k.env, "COMBINE_TWIN_TIMEOUT_S": "60"}, timeout_s=120)
    said = re.findall(r"twin: PE (\d+) core (\d+): (deadlock in .*)", str(e.value))
    assert said, str(e.value)
    assert all(int(core) < 40 for _, core, _ in said)
    assert {text for _, _, text in said} == {
        "deadlock in aclshmemi_barrier_core_soft: all 40 cores wait in it for block 40, which starts only when one "
        "of them ends (the NPU hangs here) [block_dim 41 exceeds the 40 AIV cores of Ascend910B3: blocks 40.. run "
        "in a later wave, after blocks of this one end, so a block that waits for them waits forever]"}
    assert "timed out" not in str(e.value)


# A missing flag or buffer also leaves later event bits unordered: the pipes may then set a bit
# again before its wait has run (twin_pipes.cpp, flag_set), reported beside the main hazard.
BIT_SET_TWICE = (r"SetFlag<HardEvent::\w+>\(\d\) (at|inside) .* may run on \w+ before WaitFlag<HardEvent::\w+>\(\d\) "
                 r"(at|inside) .* has run on \w+: nothing orders that wait before this set, .*")
UB_REUSE = re.compile(r"^PE \d core \d: UB reuse: aclshmemx_mte_put_nbi \(GM -> UB -> GM\) copies GM -> UB \[1024, 1088\) "
                      r"while the UB -> GM leg of aclshmemx_mte_put_nbi \(GM -> UB -> GM\) from UB \[1024, 1088\) to "
                      r"PE \d is still in flight \(no quiet or MTE3->MTE2 flag between them\)$")


def test_ub_reuse_is_reported_always_and_corrupts_x_out_under_chaos(broken_kernels, no_leaks):
    binary = broken_kernels["ub_reuse"]
    calm = run_case(CHECKER_SPEC, "classic", binary=binary)
    bit = re.compile(r"^PE \d core \d: " + BIT_SET_TWICE + "$")
    assert calm.violation_count > 0 and any(UB_REUSE.match(v) for v in calm.violations), calm.violations
    assert all(UB_REUSE.match(v) or bit.match(v) for v in calm.violations), calm.violations
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
    launch = [dropped, dropped, "PE 0 core 48: SDMA quiet from a block with no SDMA stream (blocks 0..47 have one)",
              *[f"PE 0 core 48: status slot {s} on PE 48 became ready (MTE status put) with no payload "
                f"put issued for it in this launch (inside aclshmemx_mte_put_nbi called at "
                f"{broken_site('sdma_from_core_48', FLAG_PUT)})" for s in (0, 1)]]
    assert res.launches == 2 and res.violation_count == 2 * len(launch)  # every twin run launches twice
    assert res.violations == (launch * 2)[:8]  # the first 8 of a PE are kept
    assert [r for r, c in enumerate(res.checks) if not c.ok] == [48]
    assert not res.x_out[48].any()  # PE 48's tokens never got their payload: the window's zeros
    assert int(res.plane_bytes().loc[0, "sdma_bytes"]) == 0 and int(res.plane_bytes().loc[0, "sdma_puts"]) == 0
    assert int(res.plan.totals.loc[0, "sdma_bytes"]) == 2 * 8 * 4  # what the plan sent by SDMA


def test_more_sdma_sqes_than_the_ring_holds_are_reported_and_the_real_kernel_quiets_first(broken_kernels, no_leaks):
    """300 one-row SDMA puts from core 1 of PE 0: the real kernel quiets after 256 SQEs; without
    those quiets the 257th SQE overruns the ring depth assumed (docs/hardware-rules.md#6-sdma)."""
    case = BROKEN_KERNELS["sdma_ring_overrun"].case()
    real = run_case(case, "doubleplane", min_sdma_bytes=0, perf=False)
    assert real.check_ok and real.violation_count == 0 and real.counter_mismatches() == []
    assert real.plane_bytes()["sdma_puts"].tolist() == [300, 0, 0]
    put = broken_site("sdma_ring_overrun", "aclshmemx_sdma_put_nbi<T>(DstPayload(s.seg, row)")
    res = run_case(case, "doubleplane", min_sdma_bytes=0, perf=False, binary=broken_kernels["sdma_ring_overrun"])
    overrun = ("PE 0 core 1: 257 SDMA SQEs (1 MiB each at most) outstanding since its last SDMA quiet, more than the "
               "256 its ring is assumed to hold: SHMEM writes them with no fullness check (inside "
               f"aclshmemx_sdma_put_nbi called at {put}; docs/hardware-rules.md#6-sdma)")
    assert res.violations == [overrun, overrun]  # once per launch, two launches


# 64 PEs launched per SoC (1.7 s each): the 40-core SoC in the quick suite, the 48-core one in the whole
# suite (.ci/run; the same path with another core count)
@pytest.mark.parametrize("soc, blocks", [("Ascend910B3", 40), pytest.param("Ascend910B2", 48, marks=pytest.mark.slow)])
def test_the_real_kernel_serves_several_ranks_per_core_at_64_pes(soc, blocks, no_leaks):
    spec = CaseSpec(pes=64, bs=4, h=4096, topk=8, expert_per_pe=1, routing="hot-expert:0.125")
    case = make_case(spec)
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


SOC_PROBE = """#include <cstdio>
#include <unistd.h>
#include "acl/acl.h"
#include "kernel_operator.h"
int main() {
    int64_t aiv = 0, ub = 0;
    aclrtGetDeviceInfo(0, ACL_DEV_ATTR_VECTOR_CORE_NUM, &aiv);
    aclrtGetDeviceInfo(0, ACL_DEV_ATTR_UBUF_PER_VECTOR_CORE, &ub);
    const int64_t c0 = AscendC::GetSystemCycle();
    usleep(20000);
    const int64_t cycles = AscendC::GetSystemCycle() - c0;
    printf("%lld %lld %s %lld\\n", (long long)aiv, (long long)ub, aclrtGetSocName(), (long long)cycles);
}
"""


def test_the_twin_and_python_read_one_soc_table(tmp_path):
    """host/twin/twin_socs.h is the one SoC table: the twin's device info and its refusal of an
    unknown SoC say what combine_lab.planning.cores reads from that header; aclrtGetSocName names
    the SoC modelled and AscendC::GetSystemCycle runs at its rate."""
    lib = build("cpu").parent / "libcombine_twin.a"
    (tmp_path / "soc_probe.cpp").write_text(SOC_PROBE)
    subprocess.run([twin_cxx(), "-std=c++17", "-DCOMBINE_TARGET_TWIN=1",
                    f"-I{ROOT / 'host/twin/include'}", f"-I{ROOT / 'host/twin'}", str(tmp_path / "soc_probe.cpp"),
                    str(lib), "-lpthread", "-lrt", "-o", str(tmp_path / "soc_probe")], check=True)

    def probe(soc):
        env = {k: v for k, v in os.environ.items() if k != "COMBINE_TWIN_SOC"}
        env.update({"COMBINE_TWIN_SOC": soc} if soc else {})
        return subprocess.run([str(tmp_path / "soc_probe")], capture_output=True, text=True, timeout=30, env=env)

    rows = twin_socs()
    assert [s.name for s in rows] == ["Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910_93"]
    for soc in ("Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910_9391", None):
        p = probe(soc)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        want = twin_soc(soc or TWIN_DEFAULT_SOC)
        aiv, ub, name, cycles = p.stdout.split()
        assert [aiv, ub] == [str(want.aiv), str(want.ub_bytes)] == [str(aiv_cores(soc or TWIN_DEFAULT_SOC)),
                                                                    str(192 * 1024)]
        # aclrtGetSocName says the SoC it models, and its system counter runs at that SoC's 50 cycles per us
        # (a driver written for the NPU then prints microseconds)
        assert name == (soc or TWIN_DEFAULT_SOC)
        assert 0.9 * 50 * 20000 <= int(cycles) <= 3 * 50 * 20000
    p = probe("Ascend310P3")
    assert (p.returncode, p.stdout) == (1, "")
    assert p.stderr == f"twin: COMBINE_TWIN_SOC=Ascend310P3: {TWIN_SOCS}\n"


# Stage 2's pipes (twin_pipes.cpp). Each missing flag is reported with both instructions, the
# UB range they share and the flag, whatever the schedule; outside chaos mode every instruction
# runs at issue, so x_out happens to be right; in chaos mode the pair runs the wrong way round.
HAZARDS = {
    "no_mte2_v_wait": r"Cast \(half -> float\) reads UB \[(132096, 132136|140288, 140328)\) before DataCopyPad "
                      r"\(GM -> UB\) has written it \(no SetFlag/WaitFlag<HardEvent::MTE2_V> between them\)",
    "no_v_mte2_wait": r"DataCopyPad \(GM -> UB\) writes UB \[(132096, 132136|140288, 140328)\) while Cast \(half -> "
                      r"float\) may still read it \(no SetFlag/WaitFlag<HardEvent::V_MTE2> between them\)",
    "no_pipe_v_barrier": r"Add \(float\) reads UB \[148480, 148560\) before Muls \(float\) has written it "
                         r"\(no PipeBarrier<PIPE_V> between them\)",
    "no_v_mte3_wait": r"DataCopyPad \(UB -> GM\) reads UB \[(164864, 164904|173056, 173096)\) before Cast \(float -> "
                      r"half\) has written it \(no SetFlag/WaitFlag<HardEvent::V_MTE3> between them\)",
    "no_mte3_v_wait": r"Cast \(float -> half\) writes UB \[(164864, 164904|173056, 173096)\) while DataCopyPad \(UB -> "
                      r"GM\) may still read it \(no SetFlag/WaitFlag<HardEvent::MTE3_V> between them\)",
}


# Without MTE2_V, nothing orders one DataCopyPad into a tile before the next one into it either
# (asc-devkit: DataCopy into overlapping UB needs PipeBarrier<PIPE_MTE2> unless flags order them).
ALSO = {"no_mte2_v_wait": r"DataCopyPad \(GM -> UB\) writes UB \[(132096, 132160|140288, 140352)\) while DataCopyPad "
                          r"\(GM -> UB\) may still write it \(no PipeBarrier<PIPE_MTE2> between them\)"}


@pytest.mark.parametrize("name", list(HAZARDS))
def test_a_missing_pipe_flag_is_reported_always_and_corrupts_x_out_under_chaos(broken_kernels, name, no_leaks):
    binary = broken_kernels[name]
    main = re.compile(r"^PE \d core \d: " + HAZARDS[name] + "$")
    also = re.compile(r"^PE \d core \d: (" + ALSO.get(name, "(?!)") + "|" + BIT_SET_TWICE + ")$")
    calm = run_case(CHECKER_SPEC, "classic", min_sdma_bytes=2 << 20, binary=binary)
    assert calm.violation_count > 0 and any(main.match(v) for v in calm.violations), calm.violations
    assert all(main.match(v) or also.match(v) for v in calm.violations), calm.violations
    assert calm.check_ok  # every instruction ran at issue: the data happen to be right
    late = run_case(CHECKER_SPEC, "classic", min_sdma_bytes=2 << 20, chaos_seed=2, binary=binary)
    assert late.violation_count == calm.violation_count  # the same pairs race, whatever the schedule
    assert not late.check_ok


def test_datacopy_of_a_length_not_a_multiple_of_32_bytes_moves_whole_blocks_only(broken_kernels, no_leaks):
    """h = 20 float16 = 40 B: DataCopy moves 32 B each way (asc-devkit: the count is rounded
    down to 32 B), so the last 4 elements of every x_out row are never written (the driver
    fills x_out with 0xFF first: NaN)."""
    res = run_case(CHECKER_SPEC, "classic", min_sdma_bytes=2 << 20, binary=broken_kernels["datacopy_unaligned"])
    into = re.compile(r"^PE \d core \d: DataCopy \(GM -> UB\) of 20 half \(40 B\) to UB \[(132096, 132160|140288, "
                      r"140352)\): DataCopy moves whole 32-byte blocks, so only 32 B arrive \(use DataCopyPad for "
                      r"lengths that are not a multiple of 32 B\)$")
    out_of = re.compile(r"^PE \d core \d: DataCopy \(UB -> GM\) of 20 half \(40 B\) from UB \[(164864, 164928|173056, "
                        r"173120)\): DataCopy moves whole 32-byte blocks, so only 32 B leave \(use DataCopyPad for "
                        r"lengths that are not a multiple of 32 B\)$")
    assert all(into.match(v) or out_of.match(v) for v in res.violations), res.violations
    # Per PE and launch (the twin launches twice) one copy in per slot (none masked here) and one copy out per token.
    spec = CHECKER_SPEC
    assert res.launches == 2 and res.violation_count == 2 * spec.pes * spec.bs * (spec.topk + 1) == 288
    for r in range(spec.pes):
        assert np.isnan(res.x_out[r][:, 16:].astype(np.float32)).all()  # never written
        assert not res.checks[r].ok and res.checks[r].mismatches >= spec.bs * 4


def test_vector_instructions_before_init_soc_state_are_reported_once_per_core_and_launch(broken_kernels, no_leaks):
    res = run_case(CHECKER_SPEC, "classic", min_sdma_bytes=2 << 20, binary=broken_kernels["no_init_soc_state"])
    msg = re.compile(r"^PE (\d) core (\d): DataCopyPad \(GM -> UB\) before AscendC::InitSocState\(\): a kernel with "
                     r"LocalTensors at fixed addresses \(no TPipe\) must set the core's mask mode and atomic state "
                     r"first \(asc-devkit static Tensor programming\), else its vector and DataCopy instructions run "
                     r"in whatever state the last kernel left$")
    assert all(msg.match(v) for v in res.violations), res.violations
    cores = {msg.match(v).groups() for v in res.violations}
    assert len(cores) == CHECKER_SPEC.pes * 3  # 3 cores per PE, each with tokens
    assert res.violation_count == res.launches * len(cores) == 2 * 9  # in each of the two launches
    assert res.check_ok


#: Stage 2's GM -> UB copy of a tile of 40 B (CHECKER_SPEC: h = 20 half), whose line the reports name.
TILE_COPY_IN = "AscendC::DataCopyPad(dst, src, params, AscendC::DataCopyPadExtParams<T>());"


def test_payload_before_flag_names_each_read_with_its_row_and_slot(broken_kernels, no_leaks):
    """The last slot (k = 2) of every token is read unwaited, on every PE and in both launches:
    12 tokens x 3 PEs x 2 launches, the same count whatever the schedule (checked after the launch)."""
    site = broken_site("payload_before_flag", TILE_COPY_IN)
    read = re.compile(rf"^PE (\d) core (\d): DataCopyPad \(GM -> UB\) at {re.escape(site)} read payload row (\d+) "
                      rf"\(status slot (\d+)\) in launch ([12]) before any core of PE (\d) observed that slot ready "
                      r"in this launch: the NPU does not order the row's landing before a read that did not observe "
                      r"its flag \(wait for the slot first, docs/hardware-rules.md#17-payload-reads-after-their-flag\)$")
    for seed in (None, 2):
        res = run_case(CHECKER_SPEC, "classic", min_sdma_bytes=2 << 20, chaos_seed=seed,
                       binary=broken_kernels["payload_before_flag"])
        assert res.violation_count == 12 * 3 * 2
        matches = [read.match(v) for v in res.violations]
        assert all(matches), res.violations
        assert all(m[1] == m[6] and m[3] == m[4] and int(m[3]) % 3 == 2 for m in matches)
        assert res.check_ok  # the rows happen to have landed: the twin reports the order, not the data


#: The refstyle kernel's wait on each word of a token's slot, and the same wait as a kernel's own poll:
#: the 64 B line cleaned and invalidated, then a scalar load, until the word is 1 (scalar loads are
#: what the twin cannot see; the clean is).
REFSTYLE_WAIT = "aclshmem_signal_wait_until(status + (t * k + j) * kSlotInts + w, ACLSHMEM_CMP_EQ, 1);"
OWN_POLL = ("{ AscendC::GlobalTensor<int32_t> flag; flag.SetGlobalBuffer(status + (t * k + j) * kSlotInts + w, 1); "
            "do { AscendC::DataCacheCleanAndInvalid<int32_t, AscendC::CacheLine::SINGLE_CACHE_LINE, "
            "AscendC::DcciDst::CACHELINE_OUT>(flag); } "
            "while (*(volatile __gm__ int32_t*)(status + (t * k + j) * kSlotInts + w) != 1); }")


@pytest.mark.parametrize("wait, caught", [(OWN_POLL, False), ("(void)w;", True)], ids=["own_poll", "no_wait"])
def test_a_kernels_own_poll_of_a_flag_counts_as_observing_it(wait, caught, no_leaks):
    """Never stricter than the NPU: a kernel that polls its flags itself (clean and invalidate the
    line, then a scalar load, as Ascend C kernels do) observes them as a SHMEM wait does, and passes
    with no violation; with no wait at all every row it reads is reported. (A clean observes every
    slot of its 64 B line whose flag had landed: the twin does not see which word the core then
    loads, docs/hardware-rules.md#17-payload-reads-after-their-flag.)"""
    from combine_lab.run.selftest import REFSTYLE, REFSTYLE_SOURCE, REFSTYLE_SPEC
    from conftest import build_cache

    folder = build_cache() / "kernels" / f"refstyle_{'no_wait' if caught else 'own_poll'}"  # kept: its build reused
    folder.mkdir(parents=True, exist_ok=True)
    for f in REFSTYLE.iterdir():
        if f.is_file():
            text = f.read_text()
            if f.name == REFSTYLE_SOURCE:
                assert text.count(REFSTYLE_WAIT) == 1
                text = text.replace(REFSTYLE_WAIT, wait)
            if not (folder / f.name).is_file() or (folder / f.name).read_text() != text:
                (folder / f.name).write_text(text)
    res = run_case(REFSTYLE_SPEC, kernel_source=folder, timeout_s=60)
    if not caught:
        assert res.check_ok and res.violation_count == 0, res.violations
    else:  # every slot of both PEs (8 tokens x 2, none masked), in both launches
        assert res.violation_count == 2 * 8 * 2 * 2
        assert res.violations[0] == (
            "PE 0: status slot 0 (payload row 0) was made ready in launch 1 by PE 1's status put, but no core of PE 0 "
            "observed it ready in that launch (no core of this PE waited on a status slot in that launch): a read of "
            "the row (the twin does not see scalar loads) is not ordered after its landing (wait for the slot of "
            "every row read, docs/hardware-rules.md#17-payload-reads-after-their-flag)")
