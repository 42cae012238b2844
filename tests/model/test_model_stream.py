"""The model's input is what the kernel does: the operation stream derived from the plan
(combine_lab/model/stream.py) equals the stream the twin records while the real kernel runs
(COMBINE_TWIN_OPS), core by core, across routings, variants, masked slots, rows wider than a
reduction tile, and cores that serve several source ranks."""

from __future__ import annotations

import pytest

from combine_lab import CaseSpec, make_case, run_case
from combine_lab.model.stream import Run, case_rows, core_runs, recorded_runs, without_segments

CASES = [
    (CaseSpec(pes=3, bs=12, h=40, topk=3, expert_per_pe=2, routing="zipf:1.2"), "doubleplane", 0),
    (CaseSpec(pes=4, bs=16, h=2100, topk=2, expert_per_pe=2, routing="uniform", dtype="float16_t",
              masked_fraction=0.25), "doubleplane", 0),
    (CaseSpec(pes=4, bs=300, h=8, topk=2, expert_per_pe=1, routing="hot-expert:0.5"), "doubleplane", 0),
    (CaseSpec(pes=2, bs=8, h=64, topk=4, expert_per_pe=2, routing="zipf:2.0"), "classic", 2 << 20),
    (CaseSpec(pes=44, bs=2, h=8, topk=1, expert_per_pe=1, routing="uniform"), "doubleplane", 0),
]


@pytest.mark.parametrize("spec, variant, floor", CASES, ids=[f"{c[0].case_id}-{c[1]}" for c in CASES])
def test_the_derived_stream_is_the_recorded_stream(spec, variant, floor, tmp_path, no_leaks):
    case = make_case(spec)
    res = run_case(case, variant, min_sdma_bytes=floor, env={"COMBINE_TWIN_OPS": str(tmp_path)})
    assert res.ok
    rows = case_rows(case, "Ascend910B3")  # the twin's default SoC
    sdma = rows.sdma(variant, floor)
    kinds = set()
    for pe in range(spec.pes):
        recorded = recorded_runs(tmp_path, pe, rows)
        assert sorted(recorded) == list(range(rows.block_dim))
        for core in range(rows.block_dim):
            derived = without_segments(core_runs(rows, sdma, pe, core))
            assert derived == recorded[core], (pe, core)
            kinds |= {r.kind for r in derived}
    assert kinds >= {"mte_put", "quiet", "flag", "wait", "reduce", "barrier"}
    if variant == "doubleplane" and spec.routing != "uniform":
        assert {"sdma_put", "sdma_quiet"} <= kinds


def test_one_core_serves_several_ranks_past_the_socs_cores():
    case = make_case(CaseSpec(pes=44, bs=2, h=8, topk=1, expert_per_pe=1))
    rows = case_rows(case, "Ascend910B3")
    assert rows.block_dim == 40
    runs = core_runs(rows, rows.sdma("classic", 0), 0, 1, stage=1)
    assert {r.dst for r in runs if r.kind == "mte_put"} <= {1, 41}  # ranks 1 and 41
    assert Run("quiet") in runs
