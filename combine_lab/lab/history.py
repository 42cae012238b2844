"""The tuning app's history of Runs: its columns (one row per completed Run; one result row per
variant of every Run), as :class:`combine_lab.lab.tuning.TuningState` keeps them, and what the app
does with it, without widgets: a sorted and filtered view (:func:`history_view`), the CSV of it
(:func:`history_csv`), and two Runs compared with ``combine-lab diff``'s verdicts
(:func:`compare_history_runs`: :func:`combine_lab.results.diff.diff_runs`, spreads that do not
overlap are beyond noise, docs/formats.md#11-run-summary)."""

from __future__ import annotations

import math

import pandas as pd

from ..errors import ParameterError
from ..results.diff import DIFF_COLUMNS, diff_runs
from ..results.rows import COMPARISON_COLUMNS, METRICS, ROW_COLUMNS
from ..kernels import CLASSIC, DOUBLEPLANE

__all__ = ["HISTORY_COLUMNS", "ROWS_COLUMNS", "SORTABLE", "history_view", "history_csv", "compare_history_runs",
           "run_inputs_changed"]

_VARIANTS = (CLASSIC, DOUBLEPLANE)

#: Columns of ``TuningState.history``, one row per Run: the case, its run values and its kernel
#: ``settings`` label (docs/variants.md: ``reference``, ``segment-c4``, ...), then the Run's
#: repeats summarized as the CLI and 03_sweep summarize them (:func:`combine_lab.results.tables.summarize`):
#: times in us, the median over repeats of the slowest profiled PE's CoreMaxTime, with its min and
#: max (``<metric>_<variant>_lo_us`` / ``_hi_us``: what two Runs are compared by);
#: ``<metric>_speedup`` the median of each repeat's classic / doubleplane (above 1: doubleplane
#: faster), ``..._speedup_lo`` / ``..._hi`` its min and max, ``..._verdict`` faster / slower /
#: within noise; sdma_share, check (FAIL when any repeat failed), counters_ok (every repeat), the
#: reason of a variant that did not run, and nccl-tests' comm_only algbw and busbw of the slowest
#: profiled PE per variant (decimal GB/s, docs/formats.md#14-bandwidths).
HISTORY_COLUMNS = ["run", "case_id", "routing", "dtype", "target", "min_sdma_bytes", "settings", "warmup", "loops",
                   "repeats",
                   *COMPARISON_COLUMNS, *[f"{m}_{k}" for m in METRICS for k in ("speedup_lo", "speedup_hi", "verdict")],
                   *[f"{m}_{v}_{k}_us" for m in METRICS for v in _VARIANTS for k in ("lo", "hi")],
                   *[f"comm_only_{v}_{b}_GBps" for v in _VARIANTS for b in ("algbw", "busbw")]]
#: Columns of ``TuningState.rows``: the Run number, then one :class:`~combine_lab.results.rows.ResultRow`
#: per variant (the schema of the CLI table and the sweep CSV).
ROWS_COLUMNS = ["run", *ROW_COLUMNS]
#: The columns the history may be sorted by (the app's sort selector offers these).
SORTABLE = ("run", "case_id", "routing", "min_sdma_bytes", "settings", "comm_only_classic_us",
            "comm_only_doubleplane_us", "comm_only_speedup", "comm_only_verdict", "sdma_share", "check",
            "comm_only_doubleplane_algbw_GBps")
#: The columns a filter's words are looked for in.
_FILTERED = ("case_id", "routing", "dtype", "target", "settings", "comm_only_verdict", "check", "reason")


def history_view(history: pd.DataFrame, sort_by: str = "run", descending: bool = False,
                 filter_text: str = "") -> pd.DataFrame:
    """The history as the app's table shows it: the rows whose text (case, routing, dtype, target,
    settings, verdict, check, reason; case-insensitive) holds every word of ``filter_text`` (a word
    ``run=N`` keeps run N only), sorted by ``sort_by`` (one of :data:`SORTABLE`; ties keep run order;
    NaN last), ``descending`` or not. Raises ParameterError (``parameter="sort_by"``) for another column."""
    if sort_by not in SORTABLE:
        raise ParameterError(f"sort_by={sort_by!r}: must be one of {', '.join(SORTABLE)}", parameter="sort_by",
                             value=sort_by)
    out = history
    for word in str(filter_text or "").lower().split():
        if word.startswith("run=") and word[4:].isdigit():
            out = out[out["run"].astype(int) == int(word[4:])]
            continue
        text = out[list(_FILTERED)].astype(str).agg(" ".join, axis=1).str.lower() if len(out) else \
            pd.Series(dtype=str)
        out = out[text.str.contains(word, regex=False)] if len(out) else out
    return out.sort_values(sort_by, ascending=not descending, kind="stable", na_position="last")


def history_csv(history: pd.DataFrame) -> str:
    """The history (or a view of it) as CSV text: every column of :data:`HISTORY_COLUMNS`, a header
    line, one line per Run, numbers exact (Python's shortest repr; NaN empty)."""
    return history.reindex(columns=HISTORY_COLUMNS).to_csv(index=False, lineterminator="\n")


def _spread(row: pd.Series, median: str, lo: str, hi: str) -> dict:
    def num(c):
        v = row.get(c)
        return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)
    m = num(median)
    lo_v, hi_v = num(lo), num(hi)
    if m is None:
        return {}
    # one repeat: no spread (diff says so, never "beyond noise")
    return {"median": m, "min": lo_v if lo_v is not None else m, "max": hi_v if hi_v is not None else m}


def _summary(row: pd.Series, key: tuple) -> dict:
    """One history row as the run summary :func:`~combine_lab.results.diff.diff_runs` reads: one
    case under ``key`` (both Runs under one key, so that two floors or settings of one case, or two
    cases, are compared rather than called "only in A"), its two variants' times and its speed-up."""
    variants = {}
    for v in _VARIANTS:
        times = {f"{m}_us": _spread(row, f"{m}_{v}_us", f"{m}_{v}_lo_us", f"{m}_{v}_hi_us") for m in METRICS}
        if all(times.values()):
            variants[v] = times
    speedup = {m: _spread(row, f"{m}_speedup", f"{m}_speedup_lo", f"{m}_speedup_hi") for m in METRICS}
    case = {"case_id": key[0], "routing": key[1], "dtype": key[2], "variants": variants}
    if all(speedup.values()):
        case["speedup_by_settings"] = {"reference": speedup}
    return {"clock": "wall", "cases": [case]}


def run_inputs_changed(a: pd.Series, b: pd.Series) -> list[str]:
    """What differs between two history rows' inputs: "min_sdma_bytes 2,097,152 -> 1,933,312", ..."""
    out = []
    for c in ("case_id", "routing", "dtype", "target", "min_sdma_bytes", "settings", "warmup", "loops", "repeats"):
        x, y = a.get(c), b.get(c)
        if str(x) != str(y):
            fx, fy = (f"{int(x):,}", f"{int(y):,}") if c == "min_sdma_bytes" else (str(x), str(y))
            out.append(f"{c} {fx} -> {fy}")
    return out


def compare_history_runs(history: pd.DataFrame, a: int, b: int) -> pd.DataFrame:
    """Runs ``a`` and ``b`` of the history (their numbers) compared as ``combine-lab diff A B``
    compares two runs (:func:`combine_lab.results.diff.diff_runs`): per variant and metric both
    medians (us) with their spreads, B / A and the verdict (beyond noise only where the spreads do
    not overlap; a Run of one repeat has no spread to judge), then the speed-up's. Columns:
    :data:`~combine_lab.results.diff.DIFF_COLUMNS` less case_id and routing. Raises ParameterError
    (``parameter="a"`` or ``"b"``) for a number that is no Run of the history."""
    rows = {}
    for name, n in (("a", a), ("b", b)):
        hit = history[history["run"].astype(int) == int(n)] if len(history) else history
        if not len(hit):
            raise ParameterError(f"{name}={n!r}: no such run in the history (runs: "
                                 f"{', '.join(str(int(r)) for r in history['run']) or 'none'})", parameter=name,
                                 value=n)
        rows[name] = hit.iloc[0]
    ra, rb = rows["a"], rows["b"]
    key = (str(ra["case_id"]), str(ra["routing"]), str(ra["dtype"]))
    d = diff_runs(_summary(ra, key), _summary(rb, key))
    d["b_over_a"] = d["b_over_a"].astype(float)
    return d[[c for c in DIFF_COLUMNS if c not in ("case_id", "routing")]].reset_index(drop=True)
