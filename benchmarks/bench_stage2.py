"""Benchmark the twin's stage 2 (the Ascend C vector reduction, kernels/combine_kernel.cpp)
against this host's memory speed, and float16 against int32, in one run (issue 13).

Case: pes 2, bs 1024, h 4096, topk 2, expert_per_pe 1, uniform routing, seed 42, variant
classic (MTE only), on the CPU twin, both dtypes with the same routing; each runs
``--repeats`` times (``--warmup`` + ``--loops`` launches); times are the profiled PE's
``CoreMaxTime/us`` (perf CSV, docs/formats.md#3-perf-csv), the median over repeats.

Printed, side by side:
- ``full_op float16 / int32``: the ratio of full_op times (target: <= 2);
- per dtype, ``stage 2 / memory bound``: stage 2 = full_op - comm_only (us); memory bound =
  (bytes stage 2 reads + writes per PE) / (this host's memcpy rate: bytes a memcpy copies per
  second, on a 64 MiB buffer, out of cache, sampled beside every run of this benchmark, the
  median sample); the value is memory bound
  / stage 2 (target: >= 0.3). Stage 2 reads every valid slot's row (bs*topk*h*sizeof(T)) and
  writes x_out (bs*h*sizeof(T)). At pes 2, stage 2 includes waiting for the other PE's status
  flags, and the PEs' four core threads share this host's CPUs; the same case at pes 1 (one
  core, all rows local) times the reduction alone, printed beside it. Counting a memcpy's
  read and write both as traffic would halve every memory-bound figure: that is printed too.

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

from combine_lab import CaseSpec
from combine_lab.run.runner import prepare_case, run_case

SHAPE = dict(pes=2, bs=1024, h=4096, topk=2, expert_per_pe=1)
FP16_OVER_INT32_TARGET = 2.0
MEMORY_BOUND_TARGET = 0.3


class MemcpyRate:
    """Bytes per second a memcpy of ``nbytes`` copies (each byte read once and written once),
    sampled beside every run of the twin so that both see the same load on this machine; the
    rate is the median sample."""

    def __init__(self, nbytes: int = 64 << 20):
        self.src = np.ones(nbytes, dtype=np.uint8)
        self.dst = np.empty_like(self.src)
        np.copyto(self.dst, self.src)  # first touch
        self.samples: list[float] = []

    def sample(self, count: int = 3) -> None:
        for _ in range(count):
            t = time.perf_counter()
            np.copyto(self.dst, self.src)
            self.samples.append(self.src.nbytes / (time.perf_counter() - t))

    @property
    def rate(self) -> float:
        return statistics.median(self.samples)


def stage2_bytes(spec: CaseSpec, expert_ids: np.ndarray) -> int:
    """Bytes stage 2 of PE 0 reads (valid slots' rows) and writes (x_out)."""
    valid = int(np.count_nonzero((expert_ids[0] >= 0) & (expert_ids[0] < spec.moe_expert_num)))
    return (valid + spec.bs) * spec.row_bytes


def time_dtype(dtype: str, repeats: int, warmup: int, loops: int, memcpy: MemcpyRate, pes: int = 2) -> dict:
    """Median full_op, comm_only and stage 2 (us) over ``repeats`` runs, and stage 2's bytes;
    samples ``memcpy`` before each run."""
    spec = CaseSpec(**{**SHAPE, "pes": pes}, dtype=dtype)
    full, comm = [], []
    with tempfile.TemporaryDirectory(prefix="bench_stage2_") as tmp:
        prepared = prepare_case(spec, tmp)
        for _ in range(repeats):
            memcpy.sample()
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
    memcpy = MemcpyRate()
    dtypes = ("int32_t", "float16_t")
    results = {dt: time_dtype(dt, args.repeats, args.warmup, args.loops, memcpy) for dt in dtypes}
    alone = {dt: time_dtype(dt, args.repeats, args.warmup, args.loops, memcpy, pes=1) for dt in dtypes}
    memcpy.sample()
    rate = memcpy.rate
    print(f"memcpy rate (bytes copied per second, median of {len(memcpy.samples)} samples beside the runs) GB/s: "
          f"{rate / 1e9:.2f}")
    for dt, r in results.items():
        bound_us = r["bytes"] / rate * 1e6
        for res in (r, alone[dt]):
            res["fraction"] = bound_us / res["stage2"] if res["stage2"] > 0 else float("inf")
        print(f"{dt}: full_op us {r['full_op']:.1f}, comm_only us {r['comm_only']:.1f}, stage 2 us {r['stage2']:.1f} "
              f"(pes 1: {alone[dt]['stage2']:.1f}), stage 2 bytes {r['bytes']}, memory bound us {bound_us:.1f}")
    ratio = results["float16_t"]["full_op"] / results["int32_t"]["full_op"]
    print(f"full_op float16 / int32: {ratio:.2f} (target <= {FP16_OVER_INT32_TARGET})")
    for dt in dtypes:
        print(f"stage 2 / memory bound, {dt}: {results[dt]['fraction']:.2f} at pes 2, "
              f"{alone[dt]['fraction']:.2f} at pes 1 (the reduction alone) (target >= {MEMORY_BOUND_TARGET}; "
              f"read + write as traffic: {results[dt]['fraction'] / 2:.2f}, {alone[dt]['fraction'] / 2:.2f})")


if __name__ == "__main__":
    main()
