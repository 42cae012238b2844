"""Benchmark a modelled grid of 10,000 cases priced in process (issue 33, item 4).

The grid: routings uniform, zipf:1.2, deepseek, hot-expert:0.1, hot-rank:0.5 x pes 2-16 x bs 8-512 x
h 1024-16384 x topk 1-8 x expert_per_pe 1-16, float16, the invalid combinations skipped; its first
10,000 cases priced on ``a3`` by :func:`combine_lab.lab.sweep.model_grid` with ``band=False`` (no box
search over the model's unknowns), wall and CPU seconds against the budget of 60 s. Then, on a
sample, the cost per case with the band searched (the default), and the uniform routing's draw
against drawing the reference recipe's x as it did before (the ratio old/new).

Every time here is of pricing on a model, not of a kernel. The machine is shared: the CPU time is
printed beside the wall time.

Run: python benchmarks/bench_model_grid.py [--cases 10000] [--sample 200]
Prints plain "name: value" lines.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from combine_lab import CaseSpec
from combine_lab.case import routing
from combine_lab.lab.sweep import make_grid, model_grid
from combine_lab.model.machines import load_model

BUDGET_S = 60.0
AXES = dict(pes=[2, 4, 8, 16], bs=[8, 32, 128, 512], h=[1024, 2048, 4096, 7168, 8192, 16384],
            topk=[1, 2, 4, 6, 8], expert_per_pe=[1, 2, 4, 8, 16],
            routings=["uniform", "zipf:1.2", "deepseek", "hot-expert:0.1", "hot-rank:0.5"], dtype="float16_t")


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def old_uniform(spec: CaseSpec):
    """The uniform routing as drawn before: the whole x, then the ids and scales."""
    rng = np.random.default_rng(spec.seed)
    routing._draw_x_from(rng, spec.pes, spec.bs, spec.h, spec.np_dtype)
    return rng.integers(0, spec.moe_expert_num, size=(spec.pes, spec.bs, spec.topk), dtype=np.int32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--sample", type=int, default=200)
    a = ap.parse_args()
    model = load_model("a3")
    specs = make_grid(skip_invalid=True, **AXES).specs[:a.cases]
    df, wall, cpu = timed(lambda: model_grid(specs, model, band=False))
    print(f"cases: {len(df)} (band=False)")
    print(f"wall s: {wall:.1f}  cpu s: {cpu:.1f}  budget s: {BUDGET_S:.0f}  within: {'yes' if wall <= BUDGET_S else 'no'}")
    print(f"per case ms: {1000 * wall / len(df):.2f}; cases with SDMA traffic: {int((df.sdma_bytes > 0).sum())}")
    sample = random.Random(0).sample(specs, min(a.sample, len(specs)))
    banded, wall_b, _ = timed(lambda: model_grid(sample, model))
    sdma = int((banded.sdma_bytes > 0).sum())
    print(f"band searched (default), sample of {len(sample)}: per case ms {1000 * wall_b / len(sample):.1f} "
          f"({sdma} with SDMA traffic, each searched)")
    big = CaseSpec(pes=16, bs=512, h=16384, topk=8, expert_per_pe=16, dtype="float16_t")
    routing.clear_cache()
    _, new_s, _ = timed(lambda: routing.draw_routing(big))
    _, old_s, _ = timed(lambda: old_uniform(big))
    print(f"uniform routing {big.case_id}: new ms {1000 * new_s:.2f}, old (x drawn) ms {1000 * old_s:.1f}, "
          f"ratio old/new {old_s / new_s:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
