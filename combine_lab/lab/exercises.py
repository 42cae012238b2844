"""Check functions for the walkthrough's exercises: each takes the reader's answer and says whether it holds.

Every check returns an :class:`ExerciseResult` (truthy when right) whose message gives
a hint, never the answer, when it is wrong, and asks for one when the answer is still
``None``. The truth comes from the same package functions the notebook shows (case,
planner, explain), so a check cannot drift from the tables the reader looked at.
Sources: docs/protocol.md#2-dispatch-layout, docs/decision-rule.md#1-the-rule and docs/protocol.md#5-kernel-protocol.

The notebook starts every answer at ``None`` for the reader to fill in, and keeps the tables
that would give an answer away off the screen until the answer is right (:func:`may_show`);
with its parameter ``reveal_answers=True`` (headless runs: ``combine-lab notebooks`` sets it,
a person opening the notebook gets False) it takes ours from :data:`OUR_ANSWERS`, written
down by hand, not computed, so that a headless run still tests that the case, planner and
checks agree with what we worked out. An answer of the wrong type is said to be one
("your answer 2 is an int: expected a list of segment indices").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import CLASSIC, DOUBLEPLANE
from ..case.case import Case
from ..planning.explain import core_load, decision_table, dispatch_table, segment_table
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, plan

__all__ = ["ExerciseResult", "STATUS_CHOICES", "OUR_ANSWERS", "check_segment_rows", "check_row_source",
           "check_window_slot", "check_sdma_segments", "check_status_order", "check_core_rows", "summary",
           "may_show", "score_text"]

#: Our answers to 01_walkthrough's exercises 1-6 for its default parameters (seed 42; the
#: skewed case of section 7: pes 2, bs 64, topk 2, expert_per_pe 2, hot-expert:0.5, any h).
#: The notebook uses them only when ``reveal_answers`` is True.
OUR_ANSWERS = {1: 4, 2: (1, 3, 1), 3: 3, 4: [2], 5: "b", 6: (85, 21)}


@dataclass(frozen=True)
class ExerciseResult:
    """Outcome of one check: ``name`` (exercise id), ``ok``, ``message`` (what was checked; a hint if wrong)."""

    name: str
    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return f"{self.name}: {'correct' if self.ok else 'not yet'} - {self.message}"

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.ok else "#b35900"
        mark = "&#10004; correct" if self.ok else "&#10008; not yet"
        return (f"<div style='border-left:4px solid {colour};padding:4px 8px'><b>{self.name}</b>: "
                f"<span style='color:{colour}'>{mark}</span> &mdash; {self.message}</div>")


def _no_answer(name: str, number: int) -> ExerciseResult:
    return ExerciseResult(name, False, f"no answer yet: put yours in answer_{number} and run the cell again "
                          "(or set reveal_answers = True in the parameters cell to see ours)")


def _kind(v) -> str:
    """How an answer's type is named to the reader: 'an int', 'a str', 'a list', ..."""
    name = type(v).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _wrong_type(name: str, answer, expected: str) -> ExerciseResult:
    return ExerciseResult(name, False, f"your answer {answer!r} is {_kind(answer)}: expected {expected}")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _int_sequence(answer, length: int | None) -> tuple[int, ...] | None:
    """``answer`` as a tuple of ints when it is a list or tuple (of ``length`` items, if given) of
    ints, else None."""
    if not isinstance(answer, (list, tuple, np.ndarray)) or isinstance(answer, str):
        return None
    items = list(answer)
    if (length is not None and len(items) != length) or not all(_is_int(v) for v in items):
        return None
    return tuple(int(v) for v in items)


def may_show(result: "ExerciseResult", reveal_answers: bool) -> bool:
    """Whether the notebook may show what answers the exercise (a table with the answer in it): when
    answers are revealed, or once the reader's own answer is right."""
    return bool(reveal_answers) or bool(result)


def check_segment_rows(case: Case, pe: int, local_expert: int, src_rank: int, answer) -> ExerciseResult:
    """Exercise 1: how many expand_x rows does destination PE ``pe`` hold for (local_expert, src_rank)?

    ``answer``: an int. Right when it equals ep_recv_count[s] - ep_recv_count[s-1] with
    s = local_expert*pes + src_rank (docs/protocol.md#2-dispatch-layout).
    """
    name = "exercise 1 (segment rows)"
    if answer is None:
        return _no_answer(name, 1)
    if not _is_int(answer):
        return _wrong_type(name, answer, "an int (a number of rows)")
    seg = local_expert * case.spec.pes + src_rank
    truth = int(segment_table(case, pe)["rows"].iloc[seg])
    got = int(answer)
    if got == truth:
        return ExerciseResult(name, True, f"segment {seg} of PE {pe} spans {truth} rows")
    return ExerciseResult(name, False, f"your answer {answer!r}: segments are numbered local_expert first, then "
                          "src_rank (index = local_expert * pes + src_rank); ep_recv_count is cumulative, so a "
                          "segment's rows are its entry minus the entry before it")


def check_row_source(case: Case, pe: int, row: int, answer) -> ExerciseResult:
    """Exercise 2: which (src_rank, token_id, topk_id) produced expand_x row ``row`` of PE ``pe``?

    ``answer``: a 3-sequence of ints; right when it equals assist_info_for_combine[row].
    """
    name = "exercise 2 (row source)"
    if answer is None:
        return _no_answer(name, 2)
    got = _int_sequence(answer, 3)
    if got is None:
        return _wrong_type(name, answer, "a tuple of three ints (src_rank, token_id, topk_id)")
    t = dispatch_table(case, pe).iloc[row]
    truth = (int(t["src_rank"]), int(t["token_id"]), int(t["topk_id"]))
    if got == truth:
        return ExerciseResult(name, True, f"row {row} of PE {pe} is token {truth[1]} of PE {truth[0]}, "
                              f"its choice {truth[2]}")
    return ExerciseResult(name, False, f"your answer {answer!r}: list the routing table's choices whose expert "
                          f"lives on PE {pe}, then put them in dispatch order (local_expert, then src_rank, "
                          f"then token_id, then topk_id) and count to row {row} from 0")


def check_window_slot(case: Case, pe: int, row: int, answer) -> ExerciseResult:
    """Exercise 3: into which slot of the source PE's window does row ``row`` of PE ``pe`` land?

    ``answer``: an int; right when it equals token_id*topk + topk_id of that row
    (docs/protocol.md#5-kernel-protocol).
    """
    name = "exercise 3 (window slot)"
    if answer is None:
        return _no_answer(name, 3)
    if not _is_int(answer):
        return _wrong_type(name, answer, "an int (a slot number)")
    t = dispatch_table(case, pe).iloc[row]
    truth = int(t["window_slot"])
    if int(answer) == truth:
        return ExerciseResult(name, True, f"slot {truth} of PE {int(t['src_rank'])}'s window, payload at byte "
                              f"{int(t['payload_offset'])}, flag at byte {int(t['status_offset'])}")
    return ExerciseResult(name, False, f"your answer {answer!r}: the slot depends only on the row's token_id and "
                          "topk_id and on topk, not on the destination PE or the row number")


def check_sdma_segments(case: Case, pe: int, min_sdma_bytes: int, answer) -> ExerciseResult:
    """Exercise 4: which segments of PE ``pe`` go by SDMA with floor ``min_sdma_bytes``?

    ``answer``: an iterable of segment indices (order free); right when it equals the set
    the decision rule (docs/decision-rule.md#1-the-rule) picks.
    """
    name = "exercise 4 (decision rule)"
    if answer is None:
        return _no_answer(name, 4)
    seq = _int_sequence(answer, None) if not isinstance(answer, (set, frozenset)) else _int_sequence(list(answer), None)
    if seq is None:
        return _wrong_type(name, answer, "a list of segment indices ([] when none)")
    d = decision_table(case, pe, min_sdma_bytes)
    truth = set(d.loc[d["plane"] == "SDMA", "segment"].astype(int))
    got = set(seq)
    if got == truth:
        return ExerciseResult(name, True, f"PE {pe} sends segments {sorted(truth)} by SDMA "
                              f"(remote average {d.attrs['remote_avg_bytes']:.1f} B)")
    hint = ("check each segment: remote? non-empty? at least the floor? strictly above the remote average "
            "(compare segment_bytes * threshold_den with threshold_num, in integers)?")
    return ExerciseResult(name, False, f"your answer {answer!r}: {hint}")


#: Exercise 5: why are status flags written by MTE, after the payload is complete?
#: The four options are of about one length, so that the right one does not stand out by being the
#: only long one (a test holds them within 25 % of each other).
STATUS_CHOICES = {
    "a": "SDMA is slower than MTE for every segment size, so a flag sent by SDMA would reach the waiting PE "
         "later than one sent by MTE",
    "b": "SDMA and MTE are separate engines with no order between them, so the flag may go only once quiet "
         "has completed its payload, and by the core's own MTE",
    "c": "the status slots live in another kind of memory than the payload slots, one that only the core's "
         "MTE can reach on a remote PE",
    "d": "stage 2 reads the expert scales out of the status flags, so each flag must be written by the engine "
         "that wrote its scaled rows",
}
_STATUS_RIGHT = "b"


def check_status_order(answer) -> ExerciseResult:
    """Exercise 5: multiple choice over :data:`STATUS_CHOICES`; ``answer`` is a letter."""
    name = "exercise 5 (status by MTE after payload)"
    if answer is None:
        return _no_answer(name, 5)
    if not isinstance(answer, str):
        return _wrong_type(name, answer, f"a letter, one of {sorted(STATUS_CHOICES)}")
    got = answer.strip().lower()[:1]
    if got == _STATUS_RIGHT:
        return ExerciseResult(name, True, "a flag may only become visible after its payload; "
                              "quiet the payload's engine, then write the flag by MTE")
    if got not in STATUS_CHOICES:
        return ExerciseResult(name, False, f"your answer {answer!r}: pick one of {sorted(STATUS_CHOICES)}")
    return ExerciseResult(name, False, f"your answer {answer!r}: think about what the PE waiting in stage 2 "
                          "may assume once it sees the flag, and what orders two different engines")


def check_core_rows(case: Case, pe: int, core: int, answer,
                    min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES) -> ExerciseResult:
    """Exercise 6: how many rows does core ``core`` of PE ``pe`` put by MTE itself, with
    classic and with doubleplane (floor ``min_sdma_bytes``)?

    ``answer``: ``(classic_rows, doubleplane_rows)``. Core c of a PE serves the segments
    whose src_rank is c (docs/protocol.md#5-kernel-protocol); with doubleplane, the rows of its SDMA
    segments are moved by the copy engine, not by the core's MTE puts. Right when both
    numbers equal :func:`combine_lab.planning.explain.core_load` of the two plans.
    """
    name = "exercise 6 (rows SDMA takes off a remote core)"
    if answer is None:
        return _no_answer(name, 6)
    got = _int_sequence(answer, 2)
    if got is None:
        return _wrong_type(name, answer, "a pair of ints (classic_rows, doubleplane_rows)")
    loads = {}
    for variant in (CLASSIC, DOUBLEPLANE):
        load = core_load(plan(case, variant, min_sdma_bytes=min_sdma_bytes)).set_index(["pe", "core"])
        loads[variant] = load.loc[(pe, core)]
    truth = (int(loads[CLASSIC]["mte_rows"]), int(loads[DOUBLEPLANE]["mte_rows"]))
    if got == truth:
        mib = 2 ** 20
        return ExerciseResult(name, True, f"core {core} of PE {pe} puts {truth[0]} rows "
                              f"({loads[CLASSIC]['mte_bytes'] / mib:.2f} MiB) by MTE with classic and "
                              f"{truth[1]} rows ({loads[DOUBLEPLANE]['mte_bytes'] / mib:.2f} MiB) with doubleplane; "
                              f"the copy engine moves the other {int(loads[DOUBLEPLANE]['sdma_rows'])} rows")
    return ExerciseResult(name, False, f"your answer {answer!r}: core {core} serves the segments whose src_rank is "
                          f"{core} (one per local_expert); add up their rows, then leave out the rows of the SDMA "
                          "segments (outlined in red) for doubleplane. Two numbers: (classic, doubleplane)")


def summary(results) -> dict:
    """``{name: ok}`` for a list (or the values of a dict) of ExerciseResult, plus ``"all_ok"``; the
    last result of each exercise counts (a cell run again is a new attempt, not a new exercise)."""
    results = list(results.values()) if isinstance(results, dict) else list(results)
    out = {r.name: bool(r.ok) for r in results}
    out["all_ok"] = bool(results) and all(out.values())
    return out


def score_text(results) -> str:
    """"3 of 6 exercises right": each exercise counted once (its last attempt), out of the
    walkthrough's exercises (:data:`OUR_ANSWERS`), however often a cell was run."""
    s = summary(results)
    right = sum(v for k, v in s.items() if k != "all_ok")
    return f"{right} of {len(OUR_ANSWERS)} exercises right"
