"""The twin's float16 path runs at int32 speed or better (issue 13: it was 8-35x slower when
every element went through a software half conversion). A ratio of two runs of the same
case, measured side by side, never an absolute time; benchmarks/bench_stage2.py prints the
full comparison, with stage 2 against this host's memcpy rate."""

from __future__ import annotations

import statistics

from combine_lab import CaseSpec
from combine_lab.run.runner import prepare_case, run_case


def _full_op_us(dtype: str, tmp_path) -> float:
    spec = CaseSpec(pes=2, bs=512, h=4096, topk=2, expert_per_pe=1, dtype=dtype)
    prepared = prepare_case(spec, tmp_path / dtype)
    times = []
    for _ in range(3):
        res = run_case(prepared, "classic", warmup=1, loops=5, min_sdma_bytes=2 << 20)
        assert res.ok
        times.append(res.time_us("full_op"))
    return statistics.median(times)


def test_float16_full_op_is_within_twice_int32(tmp_path, no_leaks):
    int32_us = _full_op_us("int32_t", tmp_path)
    float16_us = _full_op_us("float16_t", tmp_path)
    assert float16_us <= 2 * int32_us, (float16_us, int32_us)
