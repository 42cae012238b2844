"""The real kernel on the CPU twin, both variants, checked against golden, with the
twin's per-plane counters equal to the plan (issue 2's list of cases)."""

from __future__ import annotations

import numpy as np
import pytest

from combine_lab.case.case import make_case
from combine_lab.harness import compare
from combine_lab.run.runner import run_case
from combine_lab.case.spec import CaseSpec

MiB = 1024 * 1024


def expected_quiets(plan) -> dict[int, dict[str, int]]:
    """Quiets the kernel must issue per PE (docs/protocol.md#5-kernel-protocol as kernels/ implements it):
    per core, one MTE quiet per non-empty MTE segment, one more after the last MTE flags,
    one after the SDMA flags; SDMA quiet every 256 SDMA rows and once before the SDMA flags."""
    out = {}
    seg = plan.segments
    for pe in range(plan.pes):
        mte_q = sdma_q = 0
        for src in range(plan.pes):
            s = seg[(seg.pe == pe) & (seg.src_rank == src)]
            n_sdma = int(s[s.plane == "SDMA"].token_count.sum())
            n_mte_segs = int(((s.plane == "MTE") & (s.token_count > 0)).sum())
            mte_q += n_mte_segs + (n_mte_segs > 0) + (n_sdma > 0)
            sdma_q += n_sdma // 256 + (n_sdma > 0)
        out[pe] = {"MTE": mte_q, "SDMA": sdma_q}
    return out


def assert_run_matches(res, spec: CaseSpec):
    assert res.check_ok, [str(c) for c in res.checks]
    assert res.counter_mismatches() == []
    # Every valid (rank, token, topk) slot is one row sent exactly once, over both planes.
    ids = make_case(spec).expert_ids
    valid = int(((ids >= 0) & (ids < spec.moe_expert_num)).sum())
    pb = res.plane_bytes()
    assert int(pb["mte_puts"].sum() + pb["sdma_puts"].sum()) == valid
    assert int(pb["mte_bytes"].sum() + pb["sdma_bytes"].sum()) == valid * spec.row_bytes
    assert int(pb["status_writes"].sum()) == valid
    q = expected_quiets(res.plan)
    c = res.counters.set_index(["pe", "plane"])
    for pe, want in q.items():
        assert int(c.loc[(pe, "MTE"), "quiets"]) == want["MTE"], pe
        assert int(c.loc[(pe, "SDMA"), "quiets"]) == want["SDMA"], pe
        assert int(c.loc[(pe, "SDMA"), "status_writes"]) == 0  # flags only ever by MTE
    if res.variant == "classic":
        assert int(pb["sdma_bytes"].sum()) == 0


CASES = {
    "example-2pe": (CaseSpec(pes=2, bs=8, h=16, topk=2, expert_per_pe=2), MiB * 2),
    "example-2pe-fp16": (CaseSpec(pes=2, bs=8, h=16, topk=2, expert_per_pe=2, dtype="float16_t"), MiB * 2),
    "example-8pe": (CaseSpec(pes=8, bs=8, h=16, topk=2, expert_per_pe=8), MiB * 2),
    "example-8pe-fp16": (CaseSpec(pes=8, bs=8, h=16, topk=2, expert_per_pe=8, dtype="float16_t"), MiB * 2),
    # Skewed, small threshold: some segments go by SDMA, others by MTE on the same PE.
    "zipf-sdma": (CaseSpec(pes=4, bs=32, h=24, topk=2, expert_per_pe=2, routing="zipf:1.2",
                           dtype="float16_t"), 256),
    # Odd row sizes: 26 B and 28 B rows (not multiples of the 32 B slot alignment).
    "h13-fp16": (CaseSpec(pes=2, bs=6, h=13, topk=3, expert_per_pe=2, dtype="float16_t"), 0),
    "h7-int32": (CaseSpec(pes=3, bs=5, h=7, topk=2, expert_per_pe=1), 0),
    "masked": (CaseSpec(pes=4, bs=8, h=16, topk=3, expert_per_pe=2, masked_fraction=0.3, dtype="float16_t"), 64),
    # Every choice goes to one (seeded) PE's experts: the other three receive nothing.
    "pe-receives-nothing": (CaseSpec(pes=4, bs=6, h=16, topk=2, expert_per_pe=2, routing="hot-rank:1.0"), 0),
}


@pytest.mark.parametrize("variant", ["classic", "doubleplane"])
@pytest.mark.parametrize("name", list(CASES))
def test_twin_matches_golden_and_plan(name, variant, no_leaks):
    spec, min_sdma = CASES[name]
    res = run_case(spec, variant, min_sdma_bytes=min_sdma, warmup=0, loops=1)
    assert_run_matches(res, spec)
    if variant == "doubleplane" and name in ("zipf-sdma", "masked"):
        assert int(res.plane_bytes()["sdma_bytes"].sum()) > 0
        assert int(res.plane_bytes()["mte_bytes"].sum()) > 0


def test_receiving_nothing_pes_send_nothing(no_leaks):
    spec, _ = CASES["pe-receives-nothing"]
    res = run_case(spec, "doubleplane", min_sdma_bytes=0)
    pb = res.plane_bytes()
    hot = int(pb["mte_puts"].add(pb["sdma_puts"]).idxmax())
    cold = [pe for pe in range(4) if pe != hot]
    # The cold PEs hold no expert rows, so they send nothing; their x_out is still produced.
    assert pb.loc[cold, ["mte_puts", "sdma_puts"]].to_numpy().sum() == 0
    assert pb.loc[hot, "mte_puts"] + pb.loc[hot, "sdma_puts"] == 4 * 6 * 2
    assert (res.plan.totals.loc[cold, ["mte_rows", "sdma_rows"]].to_numpy() == 0).all()
    assert res.check_ok


def test_real_threshold_segment_over_256_sdma_rows(no_leaks):
    """At the real 2 MiB threshold: 600 rows of 4 KiB (2.34 MiB) from PE 1 to PE 0's hot expert."""
    spec = CaseSpec(pes=2, bs=600, h=1024, topk=1, expert_per_pe=2, routing="hot-expert:1.0")
    results = compare(spec, warmup=0, loops=1)
    dual, classic = results["doubleplane"], results["classic"]
    assert_run_matches(dual, spec)
    assert_run_matches(classic, spec)
    seg = dual.plan.segments
    sdma = seg[seg.plane == "SDMA"]
    assert len(sdma) == 1 and int(sdma.token_count.iloc[0]) == 600
    assert int(sdma.bytes.iloc[0]) == 600 * 4096 >= 2 * MiB
    hot_pe = int(sdma.pe.iloc[0])
    assert int(dual.plane_bytes().loc[hot_pe, "sdma_bytes"]) == 600 * 4096
    # 600 SDMA rows: quiet at 256 and 512, then once before the flags.
    c = dual.counters.set_index(["pe", "plane"])
    assert int(c.loc[(hot_pe, "SDMA"), "quiets"]) == 3
    for r in range(2):
        np.testing.assert_array_equal(dual.x_out[r], classic.x_out[r])


def test_loops_accumulate_counters_and_profile(no_leaks):
    spec = CaseSpec(pes=2, bs=8, h=32, topk=2, expert_per_pe=2, dtype="float16_t", routing="zipf:1.0")
    res = run_case(spec, "doubleplane", min_sdma_bytes=64, warmup=2, loops=3, prof_pe=1)
    assert_run_matches(res, spec)
    assert res.launches == 5
    last = res.counters.set_index(["pe", "plane"])
    total = res.counters_total.set_index(["pe", "plane"])
    for key in last.index:
        for f in ("puts", "bytes", "quiets", "status_writes"):
            assert int(total.loc[key, f]) == 5 * int(last.loc[key, f])
    assert list(res.perf["Metric"]) == ["full_op", "comm_only"]
    assert list(res.perf["ProfPe"]) == [1, 1]
    assert list(res.perf["Loops"]) == [3, 3] and list(res.perf["Warmup"]) == [2, 2]


def test_classic_and_doubleplane_outputs_identical(no_leaks):
    spec = CaseSpec(pes=4, bs=16, h=40, topk=4, expert_per_pe=2, dtype="float16_t", routing="zipf:1.5",
                    masked_fraction=0.1)
    results = compare(spec, min_sdma_bytes=80, warmup=0, loops=1)
    assert int(results["doubleplane"].plane_bytes()["sdma_bytes"].sum()) > 0
    for r in range(4):
        np.testing.assert_array_equal(results["classic"].x_out[r], results["doubleplane"].x_out[r])


def test_counter_mismatches_name_the_pe_the_field_and_both_numbers():
    """What the twin counted against the plan, one line per PE and field that differ (PE by PE, in
    the fields' order), and a status write by SDMA said as such; a PE without a plane's row is an
    error naming it, never a silent zero."""
    from dataclasses import replace

    res = run_case(CaseSpec(pes=2, bs=8, h=16, topk=2, expert_per_pe=2, routing="hot-expert:0.5"), "doubleplane",
                   min_sdma_bytes=64)
    assert res.counter_mismatches() == [] and res.plane_bytes()["sdma_bytes"].sum() > 0
    c = res.counters.copy()
    at = {(pe, plane): i for i, (pe, plane) in enumerate(zip(c["pe"], c["plane"]))}
    c.loc[at[(1, "MTE")], "bytes"] += 32
    c.loc[at[(0, "SDMA")], "status_writes"] = 2
    tot = res.plan.totals
    assert replace(res, counters=c).counter_mismatches() == [
        f"PE 0: status_writes counted {int(tot.loc[0, 'mte_rows'] + tot.loc[0, 'sdma_rows']) + 2}, "
        f"planned {int(tot.loc[0, 'mte_rows'] + tot.loc[0, 'sdma_rows'])}",
        "PE 0: 2 status writes went by SDMA; they must go by MTE",
        f"PE 1: mte_bytes counted {int(tot.loc[1, 'mte_bytes']) + 32}, planned {int(tot.loc[1, 'mte_bytes'])}"]
    with pytest.raises(KeyError, match="counters without a row for PE 1 SDMA"):
        replace(res, counters=c.drop(index=at[(1, "SDMA")])).plane_bytes()
