"""The twin's float16 path runs at int32 speed or better (issue 13: it was 8-35x slower when
every element went through a software half conversion). A ratio of two runs of the same
case, measured side by side, never an absolute time; benchmarks/bench_stage2.py prints the
full comparison, with stage 2 against this host's memcpy rate."""

from __future__ import annotations

import statistics

from combine_lab import CaseSpec
from combine_lab.run.runner import prepare_case, run_case


def test_float16_full_op_is_within_twice_int32(tmp_path, no_leaks):
    # the two dtypes alternate, so load from another test (the suite runs on both cores) hits both alike
    prepared = {d: prepare_case(CaseSpec(pes=2, bs=512, h=4096, topk=2, expert_per_pe=1, dtype=d), tmp_path / d)
                for d in ("int32_t", "float16_t")}
    times = {d: [] for d in prepared}
    for _ in range(3):
        for d, case in prepared.items():
            res = run_case(case, "classic", warmup=1, loops=5, min_sdma_bytes=2 << 20)
            assert res.ok
            times[d].append(res.time_us("full_op"))
    int32_us, float16_us = (statistics.median(times[d]) for d in ("int32_t", "float16_t"))
    assert float16_us <= 2 * int32_us, times
