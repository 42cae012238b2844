"""The kernel settings beyond the reference (docs/variants.md#5-what-the-twin-proves), checked on the twin
over the long list: pes 2, 8, 16 and 64, int32 and float16, zipf and uniform routing, 5 chaos seeds.

Per case: classic with the reference's settings first (its x_out is the yardstick), then
doubleplane-segment, classic-c<N> and doubleplane-segment-c<N> under each chaos seed, each required
to be bit-exact against golden with x_out identical to classic's, the twin's counters equal to the
plan's (payload bytes, MTE puts, SDMA calls and SQEs, control writes and bytes, status writes) and no
protocol violation. min_sdma_bytes 0, so that the skewed cases' large segments go by SDMA.

Run: python benchmarks/variants_check.py [--pes 2 8 16 64] [--seeds 5] [--cores 6]
Prints one line per case and a total; exit status 1 when anything failed. Not a timing: the twin
on a small machine takes minutes at pes 64 (64 processes of up to 40 threads each).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from combine_lab.case.spec import CaseSpec
from combine_lab.run.runner import run_case


def check_case(spec: CaseSpec, seeds: int, cores: int) -> list[str]:
    """The failures of one case, one line each (empty: all passed)."""
    yard = run_case(spec, "classic", perf=False, timeout_s=600)
    bad = [] if yard.ok else [f"classic reference: {yard.counter_mismatches()[:2]} {yard.violations[:1]}"]
    for variant, settings in (("doubleplane", "segment"), ("classic", f"c{cores}"),
                              ("doubleplane", f"segment-c{cores}")):
        for seed in range(seeds):
            res = run_case(spec, variant, settings=settings, min_sdma_bytes=0, chaos_seed=seed, perf=False,
                           timeout_s=600)
            what = f"{res.variant_label} seed {seed}"
            if not res.check_ok:
                bad.append(f"{what}: x_out differs from golden")
            if not all(np.array_equal(a, b) for a, b in zip(res.x_out, yard.x_out)):
                bad.append(f"{what}: x_out differs from classic's")
            bad += [f"{what}: {m}" for m in res.counter_mismatches()[:3]]
            if res.violation_count:
                bad.append(f"{what}: {res.violation_count} violations, first: {res.violations[0]}")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pes", type=int, nargs="+", default=[2, 8, 16, 64])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--cores", type=int, default=6, help="cores per source rank of the c<N> settings")
    a = ap.parse_args(argv)
    failures, runs, t0 = 0, 0, time.monotonic()
    for pes in a.pes:
        for dtype in ("int32_t", "float16_t"):
            for routing in ("zipf:1.2", "uniform"):
                spec = CaseSpec(pes=pes, bs=4, h=32, topk=2, expert_per_pe=2, routing=routing, dtype=dtype)
                t = time.monotonic()
                bad = check_case(spec, a.seeds, a.cores)
                runs += 1 + 3 * a.seeds
                failures += len(bad)
                print(f"{spec.case_id} {dtype} {routing}: {'ok' if not bad else 'FAILED'} "
                      f"({1 + 3 * a.seeds} runs, {time.monotonic() - t:.0f} s)", flush=True)
                for line in bad:
                    print(f"  {line}", flush=True)
    print(f"runs: {runs}, failures: {failures}, {time.monotonic() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
