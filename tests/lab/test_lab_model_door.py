"""The model's one door (combine_lab/model/facade.py, issue 30 item 2): the facade's prices are the
model's own, settings are converted in one place and refused as NotModelled, and the sweep's
modelled grid gives the numbers the harness's model clock gives for the same cases."""

from __future__ import annotations

import re
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from combine_lab.case.case import make_case
from combine_lab.errors import ParameterError
from combine_lab.harness import Run, execute
from combine_lab.kernels import CLASSIC, DOUBLEPLANE
from combine_lab.lab import sweep
from combine_lab.model import facade
from combine_lab.model.machines import load_model
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows
from combine_lab.model.suggest import suggest
from combine_lab.model.unknowns import engines_curve, verdict
from combine_lab.planning.planner import VARIANTS
from combine_lab.planning.settings import group_variants
from combine_lab.results.tables import SUMMARY_COLUMNS, TIDY_COLUMNS, summarize, tidy_rows

A2 = load_model("a2")
GRID = sweep.make_grid([2, 4], [64], [8192], [2], [2], ["uniform", "hot-expert:0.5"])
ROWS = case_rows(make_case(GRID.specs[1]), A2.soc)  # hot-expert on 2 PEs: SDMA traffic at every floor
MASK = ROWS.sdma(DOUBLEPLANE, 0)
#: model_grid's columns that are no summary's: the what-if of one SDMA call per segment and the machine.
MODEL_ONLY = {"segment_sdma_comm_only_us", "what_if_saving_us", "what_if_saving_pct", "model", "caption"}
#: comm_only's range: over the model's unknowns in model_grid (NaN with band=False), over repeats in a summary.
BAND = {"comm_only_speedup_lo", "comm_only_speedup_hi"}


def test_the_facade_prices_as_the_model_does():
    """Each facade call is the model function it stands for, settings given by ``settings=``."""
    seg = ROWS.with_settings("segment-c2")
    assert facade.rows_of(make_case(GRID.specs[1]), A2).counts.tolist() == ROWS.counts.tolist()
    assert facade.times(ROWS, MASK, A2).full_op.tolist() == replay(ROWS, MASK, A2).full_op.tolist()
    assert facade.times(ROWS, MASK, A2, settings="segment-c2").comm_only.tolist() == \
        replay(seg, MASK, A2).comm_only.tolist()
    assert facade.times(ROWS, MASK, A2, what_if="segment").comm_only.tolist() == \
        replay(ROWS, MASK, A2, sdma_mode="segment").comm_only.tolist()
    # stage 1 alone is the whole launch's comm_only
    assert facade.comm_only_us(ROWS, MASK, A2) == float(replay(ROWS, MASK, A2).core_max("comm_only").max())
    assert facade.comm_only_us(ROWS, MASK, A2, settings="segment-c2") == \
        float(replay(seg, MASK, A2).core_max("comm_only").max())
    assert facade.floor_curve(ROWS, A2, settings="c2").curve.equals(suggest(ROWS, A2, settings="c2").curve)
    v, want = facade.unknowns(ROWS, A2, 0, settings="c2", baseline="c2"), verdict(ROWS.with_settings("c2"), A2, 0,
                                                                                  baseline="c2")
    assert (v.low, v.nominal, v.high, v.label, v.against) == (want.low, want.nominal, want.high, "doubleplane-c2",
                                                              "classic-c2")
    pd.testing.assert_frame_equal(facade.engine_curve(ROWS, A2, 0, settings="c2", baseline="c2"),
                                  engines_curve(ROWS.with_settings("c2"), A2, 0, baseline="c2"))


def test_settings_the_model_refuses_are_not_modelled_and_bad_labels_are_errors():
    why = "cores_per_rank=41: must be an int in [1, 40] (the 40 AIV cores of Ascend910B3; at most 48 cores issue SDMA)"
    for call in (lambda: facade.times(ROWS, MASK, A2, settings="c41"),
                 lambda: facade.comm_only_us(ROWS, MASK, A2, settings="c41"),
                 lambda: facade.rows_of(make_case(GRID.specs[1]), A2, "c41"),
                 lambda: facade.engine_curve(ROWS, A2, 0, settings="c41")):
        with pytest.raises(facade.NotModelled, match="^" + re.escape(f"settings='c41': not modelled for c41 yet ({why})")
                           + "$") as e:
            call()
        assert (e.value.parameter, e.value.value, e.value.label, e.value.why) == ("settings", "c41", "c41", why)
    with pytest.raises(ParameterError, match=r"^settings='c0': N must be >= 1") as e:
        facade.times(ROWS, MASK, A2, settings="c0")
    assert not isinstance(e.value, facade.NotModelled)
    # the reference's refusals are the caller's mistake, never "not modelled"
    with pytest.raises(ParameterError, match=r"^metric='x': one of comm_only, full_op$") as e:
        facade.floor_curve(ROWS, A2, "x")
    assert not isinstance(e.value, facade.NotModelled)


@pytest.mark.parametrize("floor,group", [(0, "reference"), (2 << 20, "reference"), (0, "segment-c2")])
def test_model_grid_gives_the_harness_model_clock_numbers(floor, group):
    """The sweep's modelled grid and the harness's model clock (Run(clock=model), every PE profiled)
    price the same cases to the same floats: times, speed-ups, SDMA bytes and share."""
    grid = sweep.model_grid(GRID, A2, floor, settings=group, band=False)
    st = {v: s for v, s, _ in group_variants(list(VARIANTS), [group]).values()}
    runs = [Run(spec, v, clock=A2, prof_pe="all", min_sdma_bytes=floor, settings=st[v], group=group)
            for spec in GRID.specs for v in (CLASSIC, DOUBLEPLANE)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcomes = list(execute(runs))
    rows = [o.row for o in outcomes]
    for i, (c, d) in enumerate(zip(rows[::2], rows[1::2])):
        got = grid.iloc[i]
        assert (c.case_id, d.settings) == (got["case_id"], group)
        for metric in ("comm_only", "full_op"):
            assert got[f"{metric}_classic_us"] == c.time_us(metric)
            assert got[f"{metric}_doubleplane_us"] == d.time_us(metric)
            assert got[f"{metric}_speedup"] == c.time_us(metric) / d.time_us(metric)
        assert (got["sdma_bytes"], got["sdma_share"]) == (d.sdma_bytes, d.sdma_share)
    assert np.isfinite(grid["comm_only_doubleplane_us"]).all() and (grid["sdma_share"] > 0).any()
    # its columns are the summaries' where they share a name (results/tables.py), and mean the same
    tidy = pd.DataFrame([t for o in outcomes for t in tidy_rows(o.row, o.spec, o.perf, o.repeat)], columns=TIDY_COLUMNS)
    summary = summarize(tidy)
    shared = [c for c in sweep.MODELLED_COLUMNS if c in SUMMARY_COLUMNS and c not in BAND]
    assert set(sweep.MODELLED_COLUMNS) - set(SUMMARY_COLUMNS) == MODEL_ONLY
    pd.testing.assert_frame_equal(grid[shared], summary[shared], check_dtype=False)


def test_a_curve_and_a_verdict_asked_again_are_remembered_by_content_and_copied(monkeypatch):
    """facade.remembered: the same case's rows (another object, drawn again), machine and options give
    the curve over floors and the verdict without pricing again, each caller its own copy; another
    machine value, bytes per row or option prices anew; a refusal is not kept."""
    import combine_lab.model.facade as door
    calls = []
    monkeypatch.setattr(door, "suggest", lambda *a, **k: calls.append("suggest") or suggest(*a, **k))
    monkeypatch.setattr(door, "verdict", lambda *a, **k: calls.append("verdict") or verdict(*a, **k))
    monkeypatch.setattr(door, "_memo", type(door._memo)())
    again = case_rows(make_case(GRID.specs[1]), A2.soc)
    assert again is not ROWS and door.rows_fingerprint(again) == door.rows_fingerprint(ROWS)
    first = facade.floor_curve(ROWS, A2)
    first.curve["modelled_us"] = -1.0  # the caller's own copy: what is remembered stays as priced
    second = facade.floor_curve(again, A2)
    assert calls == ["suggest"] and (second.curve["modelled_us"] > 0).all()
    pd.testing.assert_frame_equal(second.curve, suggest(ROWS, A2).curve)
    assert second.verdict.low == suggest(ROWS, A2).verdict.low
    calls.clear()
    facade.floor_curve(ROWS, A2.with_values(sdma_engines=4.0))       # another machine value
    facade.floor_curve(replace(ROWS, h=ROWS.h * 2), A2)               # other bytes per row
    facade.floor_curve(ROWS, A2, unknowns=False)                      # another option
    facade.floor_curve(ROWS, A2, "full_op")                           # another metric
    assert calls == ["suggest"] * 4
    calls.clear()
    v1, v2 = facade.unknowns(ROWS, A2, 0), facade.unknowns(again, A2, 0)
    assert calls == ["verdict"] and v1 is not v2 and (v1.low, v1.high) == (v2.low, v2.high)
    calls.clear()
    facade.remembered("kind", ROWS, A2, (["a list"],), lambda: calls.append("unhashable"))  # priced, not kept
    facade.remembered("kind", ROWS, A2, (["a list"],), lambda: calls.append("unhashable"))
    assert calls == ["unhashable", "unhashable"]
    calls.clear()
    for _ in range(2):
        with pytest.raises(facade.NotModelled):
            facade.floor_curve(ROWS, A2, settings="c41")
    assert calls == ["suggest", "suggest"]  # the model refused it each time: a refusal is not kept
