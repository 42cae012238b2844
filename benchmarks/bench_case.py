"""Benchmark case making: vectorised combine_lab.case.case vs the naive loop, and write_case memory.

Case: pes 8, bs 256, h 7168, topk 8, expert_per_pe 8, int32, uniform routing, seed 42.
Both paths start from the same drawn x / expert_ids / expert_scales (drawing is timed
apart) and must produce the same bytes for every rank; they are compared rank by
rank so only one rank's arrays of each path are alive at a time.

Run: python benchmarks/bench_case.py [--skip-write]
Prints plain "name: value" lines. One run, no repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # naive_case lives with the tests

from combine_lab.case import routing  # noqa: E402
from combine_lab.case.case import Case, make_case  # noqa: E402
from combine_lab.formats.casefiles import write_case  # noqa: E402
from combine_lab.case.routing import draw_routing, draw_x  # noqa: E402
from combine_lab.case.spec import CaseSpec  # noqa: E402
from naive_case import naive_rank_inputs  # noqa: E402

FIELDS = ("expand_x", "assist_info_for_combine", "ep_recv_count", "expert_ids", "expert_scales", "golden_x_out")


def compare_paths(spec, x, ids, scales, case_of):
    """Time the vectorised path (case_of() + rank_inputs) and the naive loop, rank by rank;
    return (vectorised_s, naive_s) after checking identical bytes."""
    t = time.perf_counter()
    case = case_of()
    vec_s = time.perf_counter() - t
    naive_s = 0.0
    for r in range(spec.pes):
        t = time.perf_counter()
        fast = case.rank_inputs(r)
        vec_s += time.perf_counter() - t
        t = time.perf_counter()
        slow = naive_rank_inputs(spec, x, ids, scales, r)
        naive_s += time.perf_counter() - t
        for f in FIELDS:
            if getattr(fast, f).tobytes() != slow[f].tobytes():
                raise SystemExit(f"MISMATCH rank {r} {f}")
        del fast, slow
    return vec_s, naive_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-write", action="store_true", help="skip the write_case memory measurement")
    args = ap.parse_args()
    spec = CaseSpec(pes=8, bs=256, h=7168, topk=8, expert_per_pe=8, dtype="int32_t")
    print(f"case: {spec.case_id} dtype {spec.dtype} routing {spec.routing} seed {spec.seed}")

    t = time.perf_counter()
    ids, scales = draw_routing(spec)  # uniform: draws x too (cached)
    x = draw_x(spec)
    print(f"draw x+routing (recipe) s: {time.perf_counter() - t:.3f}")

    # warm-up, untimed: the first touch of freshly mapped memory costs either path ~0.2 s once
    make_case(spec).rank_inputs(0)
    naive_rank_inputs(spec, x, ids, scales, 0)
    vec_s, naive_s = compare_paths(spec, x, ids, scales, lambda: make_case(spec))
    print("bytes identical (all ranks, all six arrays): yes")
    print(f"vectorised s: {vec_s:.3f}")
    print(f"naive loop s: {naive_s:.3f}")
    print(f"ratio naive/vectorised: {naive_s / vec_s:.1f}")

    # Same loops without the payload: h = 1, so the time is bookkeeping, not byte moving.
    small = dataclasses.replace(spec, h=1)
    small_case = Case(small, ids, scales)
    small_x = small_case.x  # drawn here, untimed
    v1, n1 = compare_paths(small, small_x, ids, scales, lambda: Case(small, ids, scales))
    print(f"h=1 (bookkeeping only) vectorised s: {v1:.4f}")
    print(f"h=1 (bookkeeping only) naive loop s: {n1:.3f}")
    print(f"h=1 ratio naive/vectorised: {n1 / v1:.1f}")
    routing.clear_cache()  # the write below draws x again, inside the measurement

    if args.skip_write:
        return
    with tempfile.TemporaryDirectory() as tmp:
        tracemalloc.start()
        t = time.perf_counter()
        case_dir = write_case(make_case(spec), tmp)  # includes drawing x (cache cleared above)
        write_s = time.perf_counter() - t
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        sizes = [p.stat().st_size for p in case_dir.rglob("*") if p.is_file()]
        rank0 = sum(p.stat().st_size for p in (case_dir / "rank_0").iterdir())
        written = sum(sizes)
        print(f"write_case s: {write_s:.2f} ({len(sizes)} files)")
        print(f"bytes written: {written}")
        print(f"bytes written per rank: {rank0}")
        print(f"x bytes (held by the case): {spec.pes * spec.bs * spec.row_bytes}")
        print(f"peak traced memory during write_case: {peak}")
        print(f"peak / bytes written: {peak / written:.3f}")
        print(f"peak / (one rank's bytes + x): {peak / (rank0 + spec.pes * spec.bs * spec.row_bytes):.3f}")


if __name__ == "__main__":
    main()
