"""The tuning app's history of Runs: its columns (one row per completed Run; one result row per
variant of every Run), as :class:`combine_lab.lab.tuning.TuningState` keeps them; no widgets."""

from __future__ import annotations

from ..results.rows import COMPARISON_COLUMNS, METRICS, ROW_COLUMNS

__all__ = ["HISTORY_COLUMNS", "ROWS_COLUMNS"]

#: Columns of ``TuningState.history``, one row per Run: the case, its run values and its kernel
#: ``settings`` label (docs/variants.md: ``reference``, ``segment-c4``, ...), then the Run's
#: repeats summarized as the CLI and 03_sweep summarize them (:func:`combine_lab.results.tables.summarize`):
#: times in us, the median over repeats of the slowest profiled PE's CoreMaxTime;
#: ``<metric>_speedup`` the median of each repeat's classic / doubleplane (above 1: doubleplane
#: faster), ``..._speedup_lo`` / ``..._hi`` its min and max, ``..._verdict`` faster / slower /
#: within noise; sdma_share, check (FAIL when any repeat failed), counters_ok (every repeat) and
#: the reason of a variant that did not run.
HISTORY_COLUMNS = ["run", "case_id", "routing", "dtype", "target", "min_sdma_bytes", "settings", "warmup", "loops",
                   "repeats",
                   *COMPARISON_COLUMNS, *[f"{m}_{k}" for m in METRICS for k in ("speedup_lo", "speedup_hi", "verdict")]]
#: Columns of ``TuningState.rows``: the Run number, then one :class:`~combine_lab.results.rows.ResultRow`
#: per variant (the schema of the CLI table and the sweep CSV).
ROWS_COLUMNS = ["run", *ROW_COLUMNS]
