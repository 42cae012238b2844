"""Benchmark the twin's stage 2 (the Ascend C vector reduction, kernels/combine_kernel.cpp)
against this host's memory speed, and float16 against int32, in one run (issue 13).

Case: pes 2, bs 1024, h 4096, topk 2, expert_per_pe 1, uniform routing, seed 42, variant
classic (MTE only), on the CPU twin; both dtypes with the same routing. Each dtype runs
``--repeats`` times (``--warmup`` + ``--loops`` launches each); times are the profiled PE's
``CoreMaxTime/us`` (perf CSV, combine-facts section 8), the median over repeats.

Printed, side by side:
- ``full_op float16 / int32``: the ratio of full_op times (target: <= 2);
- per dtype, ``stage 2 / memory bound``: stage 2 time = full_op - comm_only; memory bound =
  (bytes stage 2 reads + writes per PE) / (this host's memcpy traffic rate), where a memcpy
  of n bytes moves 2n bytes (n read, n written) and the rate is measured here, in this run,
  on a 64 MiB buffer (out of cache); the value is memory bound / stage 2, so 1.0 means stage
  2 moves its bytes as fast as memcpy moves bytes (target: >= 0.3). Stage 2 reads every
  valid slot's row (bs*topk*h*sizeof(T)) and writes x_out (bs*h*sizeof(T)).

Times on a shared machine vary; the ratios are what to compare (tests assert ratios only,
never absolute times).

Run: python benchmarks/bench_stage2.py [--repeats 3] [--warmup 2] [--loops 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

from combine_lab.runner import prepare_case, run_case
from combine_lab.spec import CaseSpec

SHAPE = dict(pes=2, bs=1024, h=4096, topk=2, expert_per_pe=1)
FP16_OVER_INT32_TARGET = 2.0
MEMORY_BOUND_TARGET = 0.3


def memcpy_traffic_rate(nbytes: int = 64 << 20, repeats: int = 7) -> float:
    """Bytes read + written per second by a memcpy of ``nbytes`` (best of ``repeats``)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


def stage2_bytes(spec: CaseSpec, expert_ids: np.ndarray) -> int:
    """Bytes stage 2 of PE 0 reads (valid slots' rows) and writes (x_out)."""
    valid = int(np.count_nonzero((expert_ids[0] >= 0) & (expert_ids[0] < spec.moe_expert_num)))
    return (valid + spec.bs) * spec.row_bytes


def time_dtype(dtype: str, repeats: int, warmup: int, loops: int) -> dict:
    """Median full_op and comm_only (us) of ``repeats`` runs, and stage 2's bytes."""
    spec = CaseSpec(**SHAPE, dtype=dtype)
    full, comm = [], []
    with tempfile.TemporaryDirectory(prefix="bench_stage2_") as tmp:
        prepared = prepare_case(spec, tmp)
        for _ in range(repeats):
            res = run_case(prepared, "classic", warmup=warmup, loops=loops, min_sdma_bytes=2 << 20)
            if not res.ok:
                raise SystemExit(f"{spec.case_id} {dtype}: x_out or counters wrong: {res.checks}")
            full.append(res.time_us("full_op"))
            comm.append(res.time_us("comm_only"))
        nbytes = stage2_bytes(spec, prepared.case.expert_ids)
    return {"full_op": statistics.median(full), "comm_only": statistics.median(comm),
            "stage2": statistics.median(f - c for f, c in zip(full, comm)), "bytes": nbytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--loops", type=int, default=10)
    args = ap.parse_args()
    print("case: pes {pes} bs {bs} h {h} topk {topk} expert_per_pe {expert_per_pe}, classic, CPU twin".format(**SHAPE))
    rate = memcpy_traffic_rate()
    print(f"memcpy traffic rate (read + written) GB/s: {rate / 1e9:.2f}")
    results = {dt: time_dtype(dt, args.repeats, args.warmup, args.loops) for dt in ("int32_t", "float16_t")}
    for dt, r in results.items():
        bound_us = r["bytes"] / rate * 1e6
        r["fraction"] = bound_us / r["stage2"] if r["stage2"] > 0 else float("inf")
        print(f"{dt}: full_op us {r['full_op']:.1f}, comm_only us {r['comm_only']:.1f}, stage 2 us {r['stage2']:.1f}, "
              f"stage 2 bytes {r['bytes']}, memory bound us {bound_us:.1f}")
    ratio = results["float16_t"]["full_op"] / results["int32_t"]["full_op"]
    print(f"full_op float16 / int32: {ratio:.2f} (target <= {FP16_OVER_INT32_TARGET})")
    for dt in ("int32_t", "float16_t"):
        print(f"stage 2 / memory bound, {dt}: {results[dt]['fraction']:.2f} (target >= {MEMORY_BOUND_TARGET})")


if __name__ == "__main__":
    main()
