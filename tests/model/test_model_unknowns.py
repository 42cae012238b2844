"""The verdict over the model's unknowns (combine_lab/model/unknowns.py): the speed-up at every
SDMA engine count is the model's there; more engines never make doubleplane slower; the range
over the unknowns holds every one-at-a-time value; the ranking is by how far each unknown moves
the speed-up; and a floor is "best" only above the model's resolution over the whole range: a
tie is a tie."""

from __future__ import annotations

import math

import numpy as np
import pytest

from combine_lab import CaseSpec, make_case
from combine_lab.case.case import case_from_arrays
from combine_lab.model.machines import load_model
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows
from combine_lab.model.suggest import suggest
from combine_lab.model.unknowns import ENGINES, RESOLUTION, verdict, word

A3 = load_model("a3")
CASE = make_case(CaseSpec(pes=8, bs=128, h=7168, topk=4, expert_per_pe=2, dtype="float16_t", routing="zipf:1.5"))
ROWS = case_rows(CASE, A3.soc)


def speedup(model, floor):
    c = replay(ROWS, ROWS.sdma("classic", 0), model).core_max("comm_only").max()
    return c / replay(ROWS, ROWS.sdma("doubleplane", floor), model).core_max("comm_only").max()


def test_the_verdict_over_the_engines_and_the_ranking():
    v = verdict(ROWS, A3, 0)
    assert list(v.engines["engines"]) == list(ENGINES)
    for e, sp in zip(ENGINES, v.engines["speedup"]):
        assert sp == pytest.approx(speedup(A3.with_values(sdma_engines=float(e)), 0), rel=1e-12)
    assert (np.diff(v.engines["speedup"]) >= -1e-12).all()  # more engines never slow doubleplane
    assert v.nominal == pytest.approx(speedup(A3, 0), rel=1e-12)
    s = v.sensitivity
    assert list(s["spread"]) == sorted(s["spread"], reverse=True)
    assert set(s["parameter"]) | set(v.no_effect) == set(A3.assumed)
    assert v.no_effect == ("flag_latency_us", "vec_elems_per_us", "wait_us", "barrier_us")
    for r in s.itertuples():
        if r.parameter != "sdma_engines":
            assert r.speedup_at_low == pytest.approx(speedup(A3.with_values(**{r.parameter: r.low}), 0), rel=1e-12)
        assert r.spread == pytest.approx(abs(math.log(r.speedup_at_low / r.speedup_at_high)))
        assert v.low - 1e-12 <= min(r.speedup_at_low, r.speedup_at_high) <= max(r.speedup_at_low, r.speedup_at_high) <= v.high + 1e-12
    pays = [e for e, sp in zip(ENGINES, v.engines["speedup"]) if sp > 1 + RESOLUTION]
    assert v.pays_from == (pays[0] if pays else None)
    assert v.engines_line().startswith(f"doubleplane at floor 0 B: {word(v.engines['speedup'][0])} with 1, ")


def test_words_call_a_tie_a_tie():
    assert word(1.04) == "parity" and word(0.96) == "parity" and word(1.6) == "1.6x faster"
    assert word(0.1) == "10.0x slower"


def test_a_floor_is_best_only_above_the_resolution_over_the_whole_range():
    s = suggest(ROWS, A3)
    v = s.verdict
    assert s.beats == (v.low > 1 + RESOLUTION)
    if not s.beats:
        assert s.pick_text().startswith("no floor beats MTE-only under these assumptions: the best, "
                                        f"min_sdma_bytes={v.floor}, is ")
    # one remote segment of 40 rows of 256 KiB, and an engine that costs next to nothing per call:
    # SDMA wins at every corner of the range (the core's issue, at most 2 us a row, against MTE's 6 us)
    ids = np.full((3, 40, 1), -1, dtype=np.int32)
    ids[1, :40, 0], ids[2, :2, 0] = 0, 0
    spec = CaseSpec(pes=3, bs=40, h=65536, topk=1, expert_per_pe=1, routing="external", dtype="int32_t")
    rows = case_rows(case_from_arrays(spec, np.ones((3, 40, 65536), dtype=np.float32), ids, np.ones((3, 40, 1))),
                     A3.soc)
    quick = A3.with_values(**{f"{c}.{p}": v for c in ("die_pair", "card") for p, v in
                              (("sdma_sqe_us", 0.01), ("sdma_GBps", 5000.0), ("link_GBps", 5000.0))},
                           egress_GBps=20000.0)
    s2 = suggest(rows, quick)
    assert s2.verdict.low > 1 + RESOLUTION and s2.beats
    assert s2.pick_text().startswith(f"best: min_sdma_bytes={s2.verdict.floor}: ")
