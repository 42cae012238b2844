"""Benchmark the timing model against the tuning view it must keep up with.

On pes 64, bs 4096, h 7168, topk 8, expert_per_pe 8, float16, routing deepseek (the issue's
case), measured side by side in one run (the machine is shared and noisy):

1. the plan-view redraw (plan_counts + the segment map and plane bytes as the app's SVG), the
   unit of "live";
2. modelled comm_only and full_op from the plan (one replay of both variants on ``a3``);
3. ``suggest`` over every floor where the plan changes (comm_only), with the verdict over the
   model's unknowns it prints (combine_lab/model/unknowns.py: the SDMA engine count 1-48, each
   assumed parameter at its range's ends, the corners; at the best floor and at 2 MiB).

Targets: a replay under 300 ms (so the app shows it live), suggest under 3 s; both printed as
ratios to the plan-view redraw, which is what the targets mean on another machine.

Run: python benchmarks/bench_model.py [--repeats 5]
Prints plain "name: value" lines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("MPLBACKEND", "Agg")

from combine_lab import CaseSpec, make_case  # noqa: E402
from combine_lab.lab import plots  # noqa: E402
from combine_lab.model.machines import load_model  # noqa: E402
from combine_lab.model.replay import replay  # noqa: E402
from combine_lab.model.stream import case_rows  # noqa: E402
from combine_lab.model.suggest import suggest  # noqa: E402
from combine_lab.planning.planner import plan_counts  # noqa: E402

SHAPE = dict(pes=64, bs=4096, h=7168, topk=8, expert_per_pe=8, dtype="float16_t", routing="deepseek")
REPLAY_TARGET_S, SUGGEST_TARGET_S = 0.300, 3.0


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    spec = CaseSpec(**SHAPE)
    case = make_case(spec)
    model = load_model("a3")
    t = time.perf_counter()
    rows = case_rows(case, model.soc)
    print(f"case: {spec.case_id} routing {spec.routing}; model rows (once per case): {time.perf_counter() - t:.3f} s")
    def redraw_once():
        p = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, "doubleplane")
        return plots.segment_map(p, dtype=spec.dtype).svg + plots.plane_bytes_plot(p).svg
    redraw = median_time(redraw_once, a.repeats)
    masks = {v: rows.sdma(v, 2 << 20) for v in ("classic", "doubleplane")}
    one = median_time(lambda: [replay(rows, m, model) for m in masks.values()], a.repeats) / 2
    sug = median_time(lambda: suggest(rows, model), max(1, a.repeats // 2))
    print(f"plan-view redraw: {redraw * 1e3:.1f} ms")
    print(f"modelled comm_only+full_op (one replay): {one * 1e3:.1f} ms = {one / redraw:.2f} x redraw "
          f"(target {REPLAY_TARGET_S * 1e3:.0f} ms: {'met' if one < REPLAY_TARGET_S else 'NOT met'})")
    print(f"suggest over every floor: {sug:.2f} s = {sug / redraw:.1f} x redraw "
          f"(target {SUGGEST_TARGET_S:.0f} s: {'met' if sug < SUGGEST_TARGET_S else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
