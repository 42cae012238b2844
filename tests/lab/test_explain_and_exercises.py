"""The walkthrough's tables (combine_lab.planning.explain) and exercise checks
(combine_lab.lab.exercises) agree with the case, the planner and the kernel as the twin counts it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from combine_lab.lab import exercises
from combine_lab.planning import explain
from combine_lab.case.case import make_case
from combine_lab.errors import ParameterError
from combine_lab.planning.planner import plan
from combine_lab.run.runner import run_case
from combine_lab.case.spec import CaseSpec

SPECS = [
    CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2),
    CaseSpec(pes=3, bs=16, h=24, topk=3, expert_per_pe=2, routing="zipf:1.5", masked_fraction=0.1),
    CaseSpec(pes=4, bs=32, h=8, topk=2, expert_per_pe=1, routing="hot-rank:0.5", dtype="float16_t"),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.case_id}-{s.routing}")
@pytest.mark.parametrize("floor", [0, 64, 10**9])
def test_decision_table_equals_planner(spec, floor):
    case = make_case(spec)
    p = plan(case, "doubleplane", min_sdma_bytes=floor)
    for pe in range(spec.pes):
        d = explain.decision_table(case, pe, floor)
        assert list(d["plane"]) == list(p.segments.query("pe == @pe")["plane"])
        assert d.attrs["remote_avg_bytes"] == pytest.approx(p.totals.loc[pe, "remote_avg_segment_bytes"])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.case_id}-{s.routing}")
def test_dispatch_and_segment_tables_match_rank_inputs(spec):
    case = make_case(spec)
    geo = explain.window_geometry(spec)
    for pe in range(spec.pes):
        inputs = case.rank_inputs(pe)
        n = int(inputs.ep_recv_count[-1])
        t = explain.dispatch_table(case, pe, values=2)
        assert len(t) == n
        assert (t[["src_rank", "token_id", "topk_id"]].to_numpy() == inputs.assist_info_for_combine[:n]).all()
        assert (t["window_slot"] == t["token_id"] * spec.topk + t["topk_id"]).all()
        assert (t["payload_offset"] == t["window_slot"] * geo["slot_stride"]).all()
        assert (t["status_offset"] == geo["status_offset"] + 64 * t["window_slot"]).all()
        assert [tuple(v) for v in inputs.expand_x[:n, :2].tolist()] == list(t["x_head"])
        seg = explain.segment_table(case, pe)
        assert (seg["end"] == inputs.ep_recv_count).all()
        for _, s in seg.iterrows():  # rows [start, end) are that segment's rows
            rows = t.iloc[s["start"]:s["end"]]
            assert (rows["segment"] == s["segment"]).all() and (rows["src_rank"] == s["src_rank"]).all()


def test_window_geometry_aligns_stride_to_32_bytes():
    g = explain.window_geometry(CaseSpec(pes=2, bs=3, h=9, topk=2, expert_per_pe=1, dtype="float16_t"))
    assert (g["row_bytes"], g["slot_stride"], g["slots"]) == (18, 32, 6)
    # 6 x 32 = 192 B of payload, status from 192 (a 64 B line) in slots of 64 B with 32 B flags
    assert (g["status_offset"], g["status_slot_bytes"], g["status_flag_bytes"]) == (192, 64, 32)
    assert g["window_bytes"] == 6 * 32 + 6 * 64


def test_window_geometry_puts_the_status_slots_on_their_own_cache_lines():
    g = explain.window_geometry(CaseSpec(pes=2, bs=3, h=9, topk=1, expert_per_pe=1, dtype="float16_t"))
    assert g["payload_bytes"] == 96 and g["status_offset"] == 128  # 96 rounded up to a 64 B line
    assert g["window_bytes"] == 128 + 3 * 64


def test_routing_table_masks_and_destinations():
    spec = CaseSpec(pes=2, bs=8, h=8, topk=2, expert_per_pe=2, masked_fraction=0.25)
    t = explain.routing_table(make_case(spec))
    assert len(t) == 2 * 8 * 2 and t["masked"].sum() == 8
    valid = t[~t["masked"]]
    assert (valid["dest_pe"] * 2 + valid["local_expert"] == valid["expert_id"]).all()
    assert (t.loc[t["masked"], "segment"] == -1).all()
    assert len(explain.routing_table(make_case(spec), src_rank=1)) == 16
    with pytest.raises(ParameterError, match="src_rank=5"):
        explain.routing_table(make_case(spec), src_rank=5)


def test_core_load_sums_to_plan_totals():
    case = make_case(SPECS[1])
    p = plan(case, min_sdma_bytes=0)
    load = explain.core_load(p)
    per_pe = load.groupby("pe")[["mte_bytes", "sdma_bytes"]].sum()
    assert (per_pe["mte_bytes"].to_numpy() == p.totals["mte_bytes"].to_numpy()).all()
    assert (per_pe["sdma_bytes"].to_numpy() == p.totals["sdma_bytes"].to_numpy()).all()
    assert (load.loc[~load["remote"], "sdma_bytes"] == 0).all()  # local rows never go by SDMA


def test_core_programs_match_what_the_twin_counts(no_leaks):
    """The step lists of every core add up to the puts, status writes and quiets the real
    kernel issued on the twin; every flag step comes after the quiet of its payload's engine."""
    spec = CaseSpec(pes=3, bs=200, h=8, topk=2, expert_per_pe=2, routing="hot-expert:0.5")
    case = make_case(spec)
    p = plan(case, "doubleplane", min_sdma_bytes=0)
    res = run_case(case, "doubleplane", min_sdma_bytes=0, warmup=0, loops=1)
    assert res.ok
    counted = res.counters.set_index(["pe", "plane"])
    for pe in range(spec.pes):
        steps = [explain.core_program(case, p, pe, core) for core in range(spec.pes)]
        want = {"MTE": {"puts": 0, "quiets": 0, "status_writes": 0}, "SDMA": {"puts": 0, "quiets": 0}}
        for prog in steps:
            # the kernel's three phases (its comments in SendSegments), in order; only SDMA puts before MTE
            assert prog["phase"].is_monotonic_increasing and set(prog["phase"]) <= {1, 2, 3}
            assert (prog.loc[prog["phase"] == 1, "engine"] == "SDMA").all()
            quiet = prog["action"].str.startswith("quiet")
            flags = prog["action"].str.contains("status flags")
            for engine in ("MTE", "SDMA"):
                e = prog["engine"] == engine
                want[engine]["puts"] += int(prog.loc[e & ~quiet & ~flags, "rows"].sum())
                want[engine]["quiets"] += int((e & quiet).sum())
            want["MTE"]["status_writes"] += int(prog.loc[flags, "rows"].sum())
            assert (prog.loc[flags, "engine"] == "MTE").all()
            for i in np.flatnonzero(flags.to_numpy()):
                before = prog.iloc[:i]
                seg = prog.iloc[i]["segment"]
                engine = "SDMA" if seg == -1 else "MTE"
                assert ((before["engine"] == engine) & before["action"].str.startswith("quiet")).any()
        for engine in ("MTE", "SDMA"):
            for k, v in want[engine].items():
                assert int(counted.loc[(pe, engine), k]) == v, (pe, engine, k)
    assert int(counted.xs("SDMA", level="plane")["quiets"].sum()) > 0


def _truths(case, floor):
    t1 = int(explain.segment_table(case, 0)["rows"].iloc[1 * case.spec.pes + 0])
    row = explain.dispatch_table(case, 1).iloc[0]
    d = explain.decision_table(case, 1, floor)
    return t1, (int(row.src_rank), int(row.token_id), int(row.topk_id)), int(row.window_slot), \
        list(d.loc[d.plane == "SDMA", "segment"])


@pytest.mark.parametrize("spec", SPECS[:2], ids=lambda s: s.routing)
def test_exercise_checks_accept_the_truth_and_reject_the_rest(spec):
    case = make_case(spec)
    rows, source, slot, sdma = _truths(case, 0)
    good = [exercises.check_segment_rows(case, 0, 1, 0, rows), exercises.check_row_source(case, 1, 0, source),
            exercises.check_window_slot(case, 1, 0, slot), exercises.check_sdma_segments(case, 1, 0, sdma[::-1]),
            exercises.check_status_order("b")]
    assert all(good) and exercises.summary(good)["all_ok"]
    bad = [exercises.check_segment_rows(case, 0, 1, 0, rows + 1),
           exercises.check_segment_rows(case, 0, 1, 0, "many"),
           exercises.check_row_source(case, 1, 0, source[::-1] if source[0] != source[2] else (9, 9, 9)),
           exercises.check_row_source(case, 1, 0, 3),
           exercises.check_window_slot(case, 1, 0, slot + 1),
           exercises.check_sdma_segments(case, 1, 0, sdma + [99]),
           exercises.check_sdma_segments(case, 1, 0, None),
           exercises.check_status_order("a"), exercises.check_status_order("z")]
    assert not any(bad)
    assert not exercises.summary(bad)["all_ok"]
    for r in bad:  # hints, never the answer
        assert "hint" not in r.message and str(r).startswith(r.name)
        assert "not yet" in r._repr_html_()


def test_walkthrough_answers_hold_for_seed_42():
    """Our answers, which 01_walkthrough takes when reveal_answers is True (headless runs), are right."""
    ours = exercises.OUR_ANSWERS
    assert ours == {1: 4, 2: (1, 3, 1), 3: 3, 4: [2], 5: "b", 6: (85, 21)}  # written down, not computed
    case = make_case(CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, seed=42))
    assert exercises.check_segment_rows(case, 0, 1, 0, ours[1])
    assert exercises.check_row_source(case, 1, 2, ours[2])
    assert exercises.check_window_slot(case, 0, 6, ours[3])
    assert exercises.check_sdma_segments(case, 1, 0, ours[4])
    assert exercises.check_status_order(ours[5])
    for h in (8192, 16384):  # section 7: rows do not depend on h
        skewed = make_case(CaseSpec(pes=2, bs=64, h=h, topk=2, expert_per_pe=2, routing="hot-expert:0.5", seed=42))
        assert exercises.check_core_rows(skewed, 1, 0, ours[6])


def test_core_rows_check_counts_what_the_core_puts_by_mte():
    case = make_case(CaseSpec(pes=2, bs=64, h=16384, topk=2, expert_per_pe=2, routing="hot-expert:0.5", seed=42))
    right = exercises.check_core_rows(case, 1, 0, (85, 21))
    assert right and "85 rows (5.31 MiB)" in right.message and "21 rows (1.31 MiB)" in right.message
    assert "the copy engine moves the other 64 rows" in right.message
    for wrong in [(85, 85), (21, 85), (64, 21)]:
        r = exercises.check_core_rows(case, 1, 0, wrong)
        assert not r and "leave out the rows of the SDMA segments" in r.message and "(85, 21)" not in r.message
    for wrong, kind in [(85, "an int"), ("lots", "a str"), ((85, 21, 0), "a tuple")]:
        r = exercises.check_core_rows(case, 1, 0, wrong)
        assert not r and r.message == f"your answer {wrong!r} is {kind}: expected a pair of ints (classic_rows, " \
            "doubleplane_rows)"
    # a floor nothing reaches: doubleplane sends everything by MTE too
    assert exercises.check_core_rows(case, 1, 0, (85, 85), min_sdma_bytes=1 << 40)
    # the local core sends nothing across PEs, and nothing by SDMA
    assert exercises.check_core_rows(case, 1, 1, (87, 87))


def test_every_check_asks_for_a_missing_answer():
    case = make_case(CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, seed=42))
    results = [exercises.check_segment_rows(case, 0, 1, 0, None), exercises.check_row_source(case, 1, 2, None),
               exercises.check_window_slot(case, 0, 6, None), exercises.check_sdma_segments(case, 1, 0, None),
               exercises.check_status_order(None), exercises.check_core_rows(case, 1, 0, None)]
    for n, r in enumerate(results, 1):
        assert not r and r.name.startswith(f"exercise {n} ")
        assert r.message == (f"no answer yet: put yours in answer_{n} and run the cell again "
                             "(or set reveal_answers = True in the parameters cell to see ours)")
    assert exercises.summary(results) == {**{r.name: False for r in results}, "all_ok": False}


# ---- issue 19 item 8 / issue 20 item 5: exercises counted once, hints without answers, options alike ----

def test_the_summary_counts_exercises_not_attempts():
    """The field report: "1 of 8 exercises right" with 6 exercises (two cells run twice)."""
    case = make_case(CaseSpec(pes=2, bs=8, h=16, topk=2, expert_per_pe=2, seed=42))
    wrong = exercises.check_status_order("a")
    right = exercises.check_status_order("b")
    attempts = {5: wrong}
    attempts[5] = right  # the cell run again: the same exercise
    attempts[1] = exercises.check_segment_rows(case, 0, 1, 0, None)
    assert exercises.score_text(attempts) == "1 of 6 exercises right"
    assert exercises.summary([wrong, right]) == {wrong.name: True, "all_ok": True}  # the last attempt counts


def test_exercise_1_hint_names_the_method_not_the_segment():
    case = make_case(CaseSpec(pes=2, bs=8, h=16, topk=2, expert_per_pe=2, seed=42))
    r = exercises.check_segment_rows(case, 0, 1, 0, 10 ** 6)
    seg = 1 * case.spec.pes + 0
    assert not r and "local_expert * pes + src_rank" in r.message and "cumulative" in r.message
    assert f"segment {seg}" not in r.message and not re.search(rf"\b{seg}\b", r.message.split(":", 1)[1])


def test_exercise_5_options_are_of_about_one_length():
    """The right option was the only long one (a give-away)."""
    lengths = {k: len(v) for k, v in exercises.STATUS_CHOICES.items()}
    assert max(lengths.values()) <= 1.25 * min(lengths.values()), lengths



# ---- issue 14 item 5: a wrong type is said as such, and a hint never gives the answer ----

def test_a_wrong_type_is_said_as_such():
    case = make_case(CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, seed=42))
    said = {
        "expected an int (a number of rows)": exercises.check_segment_rows(case, 0, 1, 0, "4 rows"),
        "expected a tuple of three ints (src_rank, token_id, topk_id)": exercises.check_row_source(case, 1, 2, 131),
        "expected an int (a slot number)": exercises.check_window_slot(case, 0, 6, [3]),
        "expected a list of segment indices ([] when none)": exercises.check_sdma_segments(case, 1, 0, 2),
        "expected a letter, one of ['a', 'b', 'c', 'd']": exercises.check_status_order(2),
    }
    for expected, r in said.items():
        assert not r and r.message.endswith(f": {expected}"), r.message
    assert said["expected a list of segment indices ([] when none)"].message.startswith("your answer 2 is an int")
    # the right values in another container still count: a tuple for the list, a list for the tuple
    assert exercises.check_sdma_segments(case, 1, 0, (2,)) and exercises.check_row_source(case, 1, 2, [1, 3, 1])
    assert exercises.check_sdma_segments(case, 1, 0, []).message.startswith("your answer []: check each segment")


def _answer_texts(truth) -> list[str]:
    if isinstance(truth, (tuple, list)):
        inner = ", ".join(str(v) for v in truth)
        return [f"({inner})", f"[{inner}]"]
    return [f" {truth} ", f" {truth}.", f"{truth} rows", f"slot {truth}"]


def test_hints_never_give_the_answer():
    """Every wrong answer, of the right type or not, gets a message without the answer in it."""
    case = make_case(CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, seed=42))
    skewed = make_case(CaseSpec(pes=2, bs=64, h=8192, topk=2, expert_per_pe=2, routing="hot-expert:0.5", seed=42))
    ours = exercises.OUR_ANSWERS
    checks = {1: lambda a: exercises.check_segment_rows(case, 0, 1, 0, a),
              2: lambda a: exercises.check_row_source(case, 1, 2, a),
              3: lambda a: exercises.check_window_slot(case, 0, 6, a),
              4: lambda a: exercises.check_sdma_segments(case, 1, 0, a),
              5: exercises.check_status_order,
              6: lambda a: exercises.check_core_rows(skewed, 1, 0, a)}
    wrong = {1: [0, 3, 5, 2, "x", [4]], 2: [(0, 0, 0), (1, 3, 0), (3, 1, 1), "1,3,1", (1, 3)],
             3: [0, 2, 4, 7, "3", None], 4: [[0], [1, 2], [3], 2, "2"], 5: ["a", "c", "d", "z", 1],
             6: [(85, 85), (21, 85), (0, 0), 85, (85,)]}
    for n, answers in wrong.items():
        assert checks[n](ours[n]), n  # ours holds
        for a in answers:
            r = checks[n](a)
            if a is None:
                continue
            assert not r, (n, a)
            text = f" {r.message} "
            for shown in _answer_texts(ours[n]):
                assert shown not in text.replace(f"{a!r}", ""), (n, a, r.message)
