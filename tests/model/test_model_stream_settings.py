"""The model's stream under the kernel's settings beyond the reference (docs/variants.md): the
operation stream derived from the plan (combine_lab/model/stream.py) equals the stream the twin
records (COMBINE_TWIN_OPS) for the segment layout, several cores per source rank and both together,
core by core, and its SDMA calls, SQEs and control puts are the twin's counters."""

from __future__ import annotations

import dataclasses

import pytest

from combine_lab import CaseSpec, make_case, run_case
from combine_lab.model.stream import Run, case_rows, core_runs, recorded_runs, sdma_sqes, without_segments
from combine_lab.planning.settings import parse_settings

CASES = [
    # rows of 256 B, back to back: one SDMA call per chunk; two cores per rank
    (CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=2, routing="zipf:1.2"), "doubleplane", "segment-c2"),
    (CaseSpec(pes=4, bs=16, h=40, topk=3, expert_per_pe=2, routing="zipf:1.2", masked_fraction=0.2),
     "doubleplane", "segment"),
    # rows of 66 B: not back to back, one call per row into the layout rows
    (CaseSpec(pes=4, bs=12, h=33, topk=2, expert_per_pe=2, routing="zipf:2.0", dtype="float16_t"),
     "doubleplane", "segment-c3"),
    # 6 groups of 6 cores for 8 ranks: groups 0 and 1 serve two ranks each
    (CaseSpec(pes=8, bs=6, h=16, topk=2, expert_per_pe=1, routing="hot-expert:0.5"), "doubleplane", "c6"),
    (CaseSpec(pes=8, bs=6, h=16, topk=2, expert_per_pe=1, routing="zipf:1.2", dtype="float16_t"), "classic", "c4"),
    # rows of 32 KiB: PE 0's SDMA segment of 42 rows (1.3 MiB) is one call of two SQEs
    (CaseSpec(pes=2, bs=96, h=8192, topk=1, expert_per_pe=2, routing="zipf:1.2"), "doubleplane", "segment"),
]


@pytest.mark.parametrize("spec, variant, settings", CASES, ids=[f"{c[0].case_id}-{c[1]}-{c[2]}" for c in CASES])
def test_the_derived_stream_is_the_recorded_stream_under_settings(spec, variant, settings, tmp_path, no_leaks):
    case = make_case(spec)
    res = run_case(case, variant, settings=settings, min_sdma_bytes=0, perf=False,
                   env={"COMBINE_TWIN_OPS": str(tmp_path)})
    assert res.ok
    rows = case_rows(case, "Ascend910B3", settings)  # the twin's default SoC
    assert rows.settings == parse_settings(settings)
    sdma = rows.sdma(variant, 0)
    counted = res.plane_bytes()
    kinds, sqes = set(), {}
    for pe in range(spec.pes):
        recorded = recorded_runs(tmp_path, pe, rows)
        assert sorted(recorded) == list(range(rows.block_dim))
        derived = {c: core_runs(rows, sdma, pe, c) for c in range(rows.block_dim)}
        for core in range(rows.block_dim):
            assert without_segments(derived[core]) == recorded[core], (pe, core)
            kinds |= {r.kind for r in derived[core]}
        runs = [r for c in derived.values() for r in c]
        total = lambda kind, field="n": sum(getattr(r, field) * (r.n if field == "nbytes" else 1)  # noqa: E731
                                            for r in runs if r.kind == kind)
        assert total("sdma_put") == counted.loc[pe, "sdma_puts"] == res.plan.totals.loc[pe, "sdma_calls"]
        assert sdma_sqes(runs) == counted.loc[pe, "sdma_sqes"] == res.plan.totals.loc[pe, "sdma_sqes"]
        assert total("sdma_put", "nbytes") == counted.loc[pe, "sdma_bytes"]
        assert total("mte_put", "nbytes") == counted.loc[pe, "mte_bytes"]
        assert total("control") == counted.loc[pe, "control_writes"]
        assert total("control", "nbytes") == counted.loc[pe, "control_bytes"]
        sqes[pe] = sdma_sqes(runs)
    assert kinds >= {"mte_put", "quiet", "flag", "wait", "reduce", "barrier"}
    if variant == "doubleplane":
        assert {"sdma_put", "sdma_quiet"} <= kinds
    if spec.h == 8192:
        assert sqes == {0: 2, 1: 1}  # 42 rows of 32 KiB in one call: 2 SQEs; PE 1's 26 rows: 1


def test_segment_chunks_and_groups_by_hand():
    """Exact runs of one small case: pes 2, PE 0 holds segments of 5, 6, 4 and 1 rows (zipf:1.2,
    seed 0): segment e*2 + src_rank, so rank 0's (local) are 5 and 4 rows, rank 1's 6 and 1. Only
    the 6-row one is above the PE's average remote segment (3.5 rows): SDMA at floor 0. With
    segment-c2 the 4 cores are 2 groups (group 0: rank 0, group 1: rank 1); core 3 (group 1, chunk 1)
    sends rows [3, 6) of the 6-row segment in one SDMA call of 768 B and row [0, 1) of the 1-row one
    by MTE, core 2 the 6-row segment's rows [0, 3) and nothing of the 1-row one (its chunk is empty);
    core 0 also publishes the layout: bases of 2 experts (8 B) and a 32 B ready block to each PE."""
    case = make_case(CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=2, routing="zipf:1.2"))
    assert case.segment_counts.tolist() == [[5, 6, 4, 1], [2, 2, 5, 7]]
    rows = case_rows(case, "Ascend910B3", "segment-c2")
    assert rows.block_dim == 4 and rows.one_call
    sdma = rows.sdma("doubleplane", 0)
    assert sdma[0].tolist() == [False, True, False, False]
    stage1 = {c: without_segments(core_runs(rows, sdma, 0, c, stage=1)) for c in range(4)}
    assert stage1[3] == [Run("barrier"), Run("sdma_put", 1, 1, 768), Run("mte_put", 1, 1, 256), Run("quiet"),
                         Run("flag", 1, 1, 32), Run("quiet"), Run("sdma_quiet"), Run("flag", 1, 3, 32), Run("quiet")]
    assert stage1[2] == [Run("barrier"), Run("sdma_put", 1, 1, 768), Run("sdma_quiet"), Run("flag", 1, 3, 32),
                         Run("quiet")]
    assert stage1[1] == [Run("barrier"), Run("mte_put", 0, 3, 256), Run("quiet"), Run("flag", 0, 3, 32),
                         Run("mte_put", 0, 2, 256), Run("quiet"), Run("flag", 0, 2, 32), Run("quiet")]
    assert stage1[0][:7] == [Run("control", 0, 1, 8), Run("control", 1, 1, 8), Run("quiet"), Run("control", 0, 1, 32),
                             Run("control", 1, 1, 32), Run("quiet"), Run("barrier")]
    # the reference: one core per rank, one call per row of the 6-row segment
    ref = case_rows(case, "Ascend910B3")
    assert ref.block_dim == 2
    assert without_segments(core_runs(ref, sdma, 0, 1, stage=1))[0] == Run("sdma_put", 1, 6, 256)


def test_sdma_quiets_bound_outstanding_sqes_not_calls():
    """The kernel quiets before a call whose SQEs would take the outstanding count past 256 (the
    ring depth assumed, docs/hardware-rules.md#6-sdma): the hand case's 6-row SDMA segment with rows
    of 100 MiB (100 SQEs a call) goes as 2 calls, a quiet, 2 calls, a quiet, 2 calls."""
    case = make_case(CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=2, routing="zipf:1.2"))
    rows = dataclasses.replace(case_rows(case, "Ascend910B3"), h=25 << 20)  # int32: 100 MiB rows, priced only
    sdma = rows.sdma("doubleplane", 0)
    big = 100 << 20
    runs = [r for r in without_segments(core_runs(rows, sdma, 0, 1, stage=1)) if r.kind.startswith("sdma")]
    assert runs == [Run("sdma_put", 1, 2, big), Run("sdma_quiet"), Run("sdma_put", 1, 2, big), Run("sdma_quiet"),
                    Run("sdma_put", 1, 2, big), Run("sdma_quiet")]
    rows = dataclasses.replace(rows, h=16)  # 64 B rows, one SQE each: the quiet every 256 calls, as before
    assert [r for r in without_segments(core_runs(rows, sdma, 0, 1, stage=1)) if r.kind.startswith("sdma")] == [
        Run("sdma_put", 1, 6, 64), Run("sdma_quiet")]


def test_settings_rows_refuse_what_the_soc_cannot_run():
    from combine_lab.errors import ParameterError

    case = make_case(CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=2))
    with pytest.raises(ParameterError, match=r"^cores_per_rank=41: must be an int in \[1, 40\]"):
        case_rows(case, "Ascend910B3", "c41")
    assert case_rows(case, "Ascend910_9392", "c24").block_dim == 48  # 2 groups of 24 on a 48-core die
