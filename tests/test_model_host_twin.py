"""The model's form fits something real: a ``host`` model calibrated on this machine's own twin
runs (wall-clock, each case the median of 5 repeats) predicts held-out twin cases' comm_only
with a median error under 30%. The twin is a real machine with cores (threads) and a copy
engine (a thread); on a small host the threads share a few CPUs, so each measurement is the
profiled PE's CoreMaxTime, not every core's time (calibrate(..., cores="max"))."""

from __future__ import annotations

import numpy as np
import pytest

from combine_lab import CaseSpec, make_case, run_case
from combine_lab.model.calibrate import Measurement, calibrate
from combine_lab.model.params import load_model
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows

CALIBRATE = [(4, 64, 1024, 2, 2, "zipf:1.2"), (4, 256, 2048, 2, 1, "uniform"), (4, 128, 4096, 4, 2, "zipf:1.5"),
             (4, 32, 8192, 2, 1, "uniform"), (4, 512, 512, 2, 2, "zipf:1.0"), (4, 64, 16384, 2, 1, "zipf:2.0")]
HELD_OUT = [(4, 192, 3072, 2, 2, "zipf:1.2"), (4, 96, 6144, 4, 1, "uniform"), (4, 384, 1536, 2, 2, "zipf:1.5")]
VARIANTS = (("classic", 2 << 20), ("doubleplane", 0))


def measured(shape, repeats: int = 5) -> list[Measurement]:
    """comm_only of PE 0 per variant: the median of ``repeats`` runs' per-core times."""
    p, b, h, k, e, r = shape
    case = make_case(CaseSpec(pes=p, bs=b, h=h, topk=k, expert_per_pe=e, routing=r))
    out = []
    for variant, floor in VARIANTS:
        runs = []
        for _ in range(repeats):
            res = run_case(case, variant, min_sdma_bytes=floor, warmup=1, loops=5, perf=True, prof_pe=0)
            assert res.ok, (res.checks, res.counter_mismatches())
            row = res.perf[res.perf["Metric"] == "comm_only"].iloc[0]
            runs.append(np.asarray(row["core_times_us"], dtype=np.float64))
        out.append(Measurement(case, variant, "comm_only", 0, np.median(np.array(runs), axis=0), floor))
    return out


@pytest.mark.slow
def test_a_host_model_calibrated_on_the_twin_predicts_held_out_twin_cases(no_leaks):
    fit = calibrate(load_model("host"), [m for s in CALIBRATE for m in measured(s)], cores="max")
    errors = []
    for m in (m for s in HELD_OUT for m in measured(s)):
        rows = case_rows(m.case, fit.model.soc)
        predicted = replay(rows, rows.sdma(m.variant, m.min_sdma_bytes), fit.model).time_us("comm_only", 0)
        errors.append(abs(predicted - m.times_us.max()) / m.times_us.max())
    assert len(errors) == 6
    assert np.median(errors) < 0.30, (errors, fit.report())
