"""Property tests over random small cases (hypothesis; its example database, in the build cache folder
(tests/conftest.py), keeps failures so that they replay)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from combine_lab.case.case import make_case
from combine_lab.errors import SpecError
from combine_lab.planning.planner import plan
from combine_lab.run.runner import run_case
from combine_lab.case.spec import CaseSpec


@st.composite
def specs(draw, max_h=300):
    pes = draw(st.integers(1, 8))
    epp = draw(st.integers(1, 4))
    E = pes * epp
    model = draw(st.sampled_from(["uniform", "zipf", "hot-expert", "hot-rank", "deepseek", "all-to-one"]))
    topk = draw(st.integers(1, min(8, E) if model != "uniform" else 8))
    if model == "zipf":
        routing = f"zipf:{draw(st.sampled_from([0.0, 0.6, 1.2, 2.5]))}"
    elif model == "hot-expert":
        routing = f"hot-expert:{draw(st.sampled_from([0.0, 0.5, 1.0])) / topk:.6f}"
    elif model == "hot-rank":
        lo = max(0.0, (topk - (E - epp)) / topk)
        hi = min(topk, epp) / topk
        routing = f"hot-rank:{draw(st.sampled_from([lo, hi, (lo + hi) / 2])):.6f}"
    elif model == "all-to-one":  # every choice of every token on one expert
        topk = 1
        routing = "hot-expert:1.0"
    else:
        routing = model
    try:
        return CaseSpec(pes=pes, bs=draw(st.integers(1, 32)), h=draw(st.integers(1, max_h)), topk=topk,
                        expert_per_pe=epp, dtype=draw(st.sampled_from(["int32_t", "float16_t"])),
                        seed=draw(st.integers(0, 2**16)), routing=routing,
                        masked_fraction=draw(st.sampled_from([0.0, 0.0, 0.25, 1.0])))
    except SpecError:
        # rounding made a hot fraction infeasible for this topk: fall back to zipf
        return CaseSpec(pes=pes, bs=4, h=8, topk=min(topk, E), expert_per_pe=epp, routing="zipf:1.0")


@settings(max_examples=150, deadline=None)
@given(spec=specs(), min_sdma=st.sampled_from([0, 64, 4096, 2 * 1024 * 1024]),
       variant=st.sampled_from(["classic", "doubleplane"]))
def test_planner_invariants(spec, min_sdma, variant):
    case = make_case(spec)
    p = plan(case, variant, min_sdma_bytes=min_sdma)
    seg = p.segments
    ids = case.expert_ids
    valid = (ids >= 0) & (ids < spec.moe_expert_num)
    # every valid slot is one row in exactly one segment and one plane
    assert int(seg.token_count.sum()) == int(valid.sum())
    assert len(seg) == spec.pes * spec.pes * spec.expert_per_pe
    assert set(seg.plane) <= {"MTE", "SDMA"}
    assert (seg.bytes == seg.token_count * spec.row_bytes).all()
    # local and empty segments never SDMA; nothing SDMA without the dual plane or under min_sdma_bytes
    sdma = seg[seg.plane == "SDMA"]
    assert (sdma.src_rank != sdma.pe).all() and (sdma.token_count > 0).all()
    assert (sdma.bytes >= min_sdma).all()
    if variant == "classic" or spec.pes == 1:
        assert sdma.empty
    # totals equal the case's bytes
    t = p.totals
    assert int((t.mte_bytes + t.sdma_bytes).sum()) == int(valid.sum()) * spec.row_bytes
    assert int((t.mte_rows + t.sdma_rows).sum()) == int(valid.sum())
    np.testing.assert_array_equal(seg.groupby("pe").token_count.sum().to_numpy(), case.ep_recv_count[:, -1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spec=specs(), min_sdma=st.sampled_from([0, 256, 2 * 1024 * 1024]),
       variant=st.sampled_from(["classic", "doubleplane"]))
def test_twin_equals_golden_and_plan(spec, min_sdma, variant, no_leaks):
    res = run_case(spec, variant, min_sdma_bytes=min_sdma, timeout_s=60)
    assert res.check_ok, [str(c) for c in res.checks]
    if spec.dtype == "int32_t":
        golden = [make_case(spec).golden(r) for r in range(spec.pes)]
        for r in range(spec.pes):
            np.testing.assert_array_equal(res.x_out[r], golden[r])  # bit-exact
    assert res.counter_mismatches() == []
    assert res.violation_count == 0
