"""Naive reference for the case layout and golden: plain Python loops, one
(destination PE, local expert, source rank, token, topk) at a time, straight from
docs/protocol.md#1-the-combine-problem, docs/protocol.md#2-dispatch-layout and docs/formats.md#1-case-files. Used by the tests and benchmarks/bench_case.py to check
combine_lab.case, never by library code.
"""

import numpy as np


def naive_rank_inputs(spec, x, expert_ids, expert_scales, d):
    """PE d's arrays as a dict keyed like RankInputs fields, built by loops."""
    pes, bs, topk, epp, h = spec.pes, spec.bs, spec.topk, spec.expert_per_pe, spec.h
    E = pes * epp
    cap = pes * bs * topk
    expand_x = np.zeros((cap, h), dtype=spec.np_dtype)
    assist = np.zeros((cap, 3), dtype=np.int32)
    ep_recv_count = np.zeros(epp * pes, dtype=np.int32)
    row = 0
    for e in range(epp):
        for r in range(pes):
            for t in range(bs):
                for k in range(topk):
                    if expert_ids[r, t, k] == d * epp + e:
                        expand_x[row] = x[r, t]
                        assist[row] = (r, t, k)
                        row += 1
            ep_recv_count[e * pes + r] = row
    golden = np.zeros((bs, h), dtype=spec.np_dtype)
    for t in range(bs):
        acc = np.zeros(h, dtype=np.float32)
        for k in range(topk):
            if 0 <= expert_ids[d, t, k] < E:
                acc = acc + x[d, t].astype(np.float32) * np.float32(expert_scales[d, t, k])
        golden[t] = acc.astype(spec.np_dtype)
    return {
        "expand_x": expand_x,
        "assist_info_for_combine": assist,
        "ep_recv_count": ep_recv_count,
        "expert_ids": expert_ids[d].copy(),
        "expert_scales": expert_scales[d].copy(),
        "golden_x_out": golden,
    }


def make_case_naive(spec):
    """Every PE's arrays for ``spec``: a list of dicts (see naive_rank_inputs). x and the
    routing come from combine_lab.case.routing (tested against the recipe on their own)."""
    from combine_lab.case.routing import draw_routing, draw_x

    x = draw_x(spec)
    expert_ids, expert_scales = draw_routing(spec)
    return [naive_rank_inputs(spec, x, expert_ids, expert_scales, d) for d in range(spec.pes)]
