"""The model's form fits something real: a ``host`` model calibrated on this machine's own twin
runs (wall-clock, each case the median of 5 repeats) predicts held-out twin cases' comm_only
with a median error under 30% (issue 11 item 4b).

A benchmark, not a test: it times the twin by the wall clock, and on a 2-CPU machine shared with
another job (a second pytest worker, a build) the held-out errors went from a median of 14 % to
39 % with the load alone. Run it on a machine left alone:

    python3 benchmarks/host_model_check.py [--repeats 5]

It prints each held-out error and the median, and exits 1 when the median is 30 % or more.

The twin is a real machine with cores (threads) and a copy engine (a thread), but on a small
host those threads share a few CPUs. So the cases use 2 PEs (2 processes of 2 core threads and
an SDMA thread each: the least oversubscription that still has remote segments for SDMA), each
measurement is the profiled PE's CoreMaxTime (``calibrate(..., cores="max")``), and the repeats
are interleaved across cases (round robin) so that a burst of load from elsewhere on the machine
lands on every case alike instead of on one case's five repeats."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from combine_lab import CaseSpec, make_case, run_case
from combine_lab.model.calibrate import Measurement, calibrate
from combine_lab.model.machines import load_model
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows

# (bs, h, topk, expert_per_pe, routing) at pes 2: 12 cases to fit the assumed parameters, 3 held out.
CALIBRATE = [(64, 1024, 2, 2, "zipf:1.2"), (256, 2048, 2, 1, "uniform"), (128, 4096, 4, 2, "zipf:1.5"),
             (32, 8192, 2, 1, "uniform"), (512, 512, 2, 2, "zipf:1.0"), (64, 16384, 2, 1, "zipf:2.0"),
             (160, 2560, 2, 2, "zipf:1.8"), (48, 12288, 2, 2, "uniform"), (320, 1024, 2, 1, "zipf:1.2"),
             (96, 5120, 2, 2, "zipf:1.0"), (224, 3584, 2, 1, "zipf:1.5"), (128, 7168, 4, 2, "uniform")]
HELD_OUT = [(192, 3072, 2, 2, "zipf:1.2"), (96, 6144, 4, 2, "uniform"), (384, 1536, 2, 2, "zipf:1.5")]
VARIANTS = (("classic", 2 << 20), ("doubleplane", 0))
REPEATS = 5


def measure(shapes, repeats: int = REPEATS) -> dict[tuple, Measurement]:
    """comm_only of PE 0 per (shape, variant): the per-core median of ``repeats`` runs, the
    runs interleaved round robin over every shape and variant."""
    cases = {s: make_case(CaseSpec(pes=2, bs=s[0], h=s[1], topk=s[2], expert_per_pe=s[3], routing=s[4]))
             for s in shapes}
    runs: dict[tuple, list[np.ndarray]] = {(s, v): [] for s in shapes for v, _ in VARIANTS}
    for _ in range(repeats):
        for s, case in cases.items():
            for variant, floor in VARIANTS:
                res = run_case(case, variant, min_sdma_bytes=floor, warmup=1, loops=5, perf=True, prof_pe=0)
                if not res.ok:
                    raise SystemExit(f"{s} {variant}: {res.checks} {res.counter_mismatches()}")
                row = res.perf[res.perf["Metric"] == "comm_only"].iloc[0]
                runs[s, variant].append(np.asarray(row["core_times_us"], dtype=np.float64))
    floors = dict(VARIANTS)
    return {(s, v): Measurement(cases[s], v, "comm_only", 0, np.median(np.array(r), axis=0), floors[v])
            for (s, v), r in runs.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=REPEATS, help="interleaved runs per case and variant (>= 1)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats={args.repeats}: must be >= 1")
    meas = measure(CALIBRATE + HELD_OUT, args.repeats)
    fit = calibrate(load_model("host"), [meas[s, v] for s in CALIBRATE for v, _ in VARIANTS], cores="max")
    errors = []
    for s, v in ((s, v) for s in HELD_OUT for v, _ in VARIANTS):
        m = meas[s, v]
        rows = case_rows(m.case, fit.model.soc)
        predicted = replay(rows, rows.sdma(m.variant, m.min_sdma_bytes), fit.model).time_us("comm_only", 0)
        errors.append(abs(predicted - m.times_us.max()) / m.times_us.max())
        print(f"held out {s} {v}: measured {m.times_us.max():.1f} us, predicted {predicted:.1f} us, "
              f"error {errors[-1]:.1%}")
    print(fit.report())
    median = float(np.median(errors))
    print(f"median held-out error: {median:.1%} (target < 30 %)")
    return 0 if median < 0.30 else 1


if __name__ == "__main__":
    sys.exit(main())
