"""The kernel's settings beyond the reference on the twin (docs/variants.md): the segment layout
and cores per source rank, bit-exact against golden and x_out identical to classic's, the twin's
counters equal to the plan's (SDMA calls, SQEs, control writes), no violation, in chaos mode too.
The full list (pes 2..64, both dtypes, both routings, 5 seeds) is benchmarks/variants_check.py."""

from __future__ import annotations

import numpy as np
import pytest

from combine_lab.case.spec import CaseSpec
from combine_lab.errors import ParameterError
from combine_lab.run.runner import run_case

SPECS = [CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=2, routing="zipf:1.2", dtype="float16_t"),
         CaseSpec(pes=5, bs=6, h=40, topk=3, expert_per_pe=2, routing="uniform", dtype="int32_t", masked_fraction=0.2),
         CaseSpec(pes=8, bs=4, h=33, topk=2, expert_per_pe=1, routing="zipf:1.2", dtype="int32_t")]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.case_id}-{s.dtype}")
def test_settings_bit_exact_and_counted_as_planned(spec):
    classic = run_case(spec, "classic", perf=False)
    assert classic.ok
    for variant, settings, seed in (("doubleplane", "segment", None), ("doubleplane", "segment-c3", 2),
                                    ("classic", "c2", 1), ("doubleplane", "c3", None)):
        res = run_case(spec, variant, settings=settings, min_sdma_bytes=0, chaos_seed=seed, perf=False)
        assert res.check_ok and res.violation_count == 0, (settings, res.violations)
        assert res.counter_mismatches() == [], settings
        assert all(np.array_equal(a, b) for a, b in zip(res.x_out, classic.x_out))
        pb, want = res.plane_bytes(), res.plan.totals
        assert pb["sdma_puts"].tolist() == want["sdma_calls"].tolist()
        assert pb["control_writes"].tolist() == want["control_writes"].tolist()
        if settings.startswith("segment"):
            assert pb["control_writes"].tolist() == [2 * spec.pes] * spec.pes
            if spec.row_bytes % 32 == 0 and want["sdma_rows"].sum() > 0:  # rows back to back: fewer calls than rows
                assert want["sdma_calls"].sum() < want["sdma_rows"].sum()
        assert res.label == ("doubleplane" if variant == "doubleplane" else "classic") + "-" + settings


def test_settings_refused_before_anything_runs():
    spec = SPECS[0]
    with pytest.raises(ParameterError, match=r"^cores_per_rank=41: must be an int in \[1, 40\]"):
        run_case(spec, "classic", settings="c41")
    with pytest.raises(ParameterError, match=r"^segment with variant='classic'"):
        run_case(spec, "classic", settings="segment")


def test_the_model_prices_settings_and_refuses_what_its_soc_cannot_run():
    from combine_lab.harness import Run, execute
    from combine_lab.model.machines import load_model

    a3 = load_model("a3")  # Ascend910_93: 48 AIV cores per die
    run = Run(SPECS[0], "doubleplane", clock=a3, settings="segment-c6")
    assert run.label == "doubleplane-segment-c6" and run.group == "segment-c6"
    run.check()
    with pytest.raises(ParameterError, match=r"^cores_per_rank=49: must be an int in \[1, 48\]"):
        Run(SPECS[0], "classic", clock=a3, settings="c49").check()
    with pytest.raises(ParameterError, match=r"^segment with variant='classic'"):
        Run(SPECS[0], "classic", clock=a3, settings="segment").check()
    out = list(execute([run, Run(SPECS[0], "classic", clock=a3, settings="c6")]))
    priced = out[0].result
    assert priced.times.block_dim == 12 and priced.settings.label == "segment-c6"  # 2 ranks x 6 cores
    assert (out[0].row.variant, out[0].row.check, out[0].row.settings, out[0].row.cores_per_rank) == \
        ("doubleplane-segment-c6", "MODEL", "segment-c6", 6)
    assert out[1].row.variant == "classic-c6" and out[1].result.plan.totals["sdma_calls"].sum() == 0
