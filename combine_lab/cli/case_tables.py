"""The result table and the run summary of ``run`` and ``compare``: one row per case and variant
(repeats folded into medians and spreads), the speed-up table, and ``combine_lab_summary.json``
(docs/formats.md#11-run-summary, docs/cli.md#9-repeats-spread-and-verdicts)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..formats import summaries
from ..harness import Outcome
from ..results.bandwidth import case_bandwidth
from ..formats.perf_csv import gib_per_s
from ..planning.planner import VARIANTS
from ..results.pairs import pair_speedups, pair_table
from ..results.rows import FAIL, METRICS, ResultRow, fold_repeats, modelled_verdict
from ..results.tables import summarize, tidy_rows


#: The run table: column title -> field of :class:`RepeatedRow`.
TABLE_COLUMNS = {"case": "case_id", "routing": "routing", "variant": "variant", "check": "check",
                 "comm_only/us": "comm_only_us", "comm_only spread": "comm_only_spread", "full_op/us": "full_op_us",
                 "full_op spread": "full_op_spread", "comm_only GB/s": "comm_only_gbps", "algbw GB/s": "algbw",
                 "busbw GB/s": "busbw", "MTE bytes": "mte_bytes",
                 "SDMA bytes": "sdma_bytes", "planned SDMA": "planned_sdma_bytes", "counters=plan": "counters_ok",
                 "violations": "violations"}
#: What the algbw and busbw columns are, printed under the table.
BANDWIDTH_NOTE = ("algbw = bytes a PE receives (bs*topk*h*sizeof(T)) / its comm_only time, decimal GB/s, the slowest "
                  "PE's (of those timed; a model times every PE); busbw = algbw * (n-1)/n, nccl-tests' alltoall; "
                  "comm_only GB/s = the reference perf CSV's Bandwidth: all PEs' bytes / the profiled PE's time, in "
                  "2^30 B/s (docs/formats.md#14-bandwidths)")
_INT_FIELDS = ("mte_bytes", "sdma_bytes", "planned_sdma_bytes", "violations")
#: The speed-up table: one row per case with both variants timed.
SPEEDUP_COLUMNS = {"case": "case_id", "routing": "routing", "repeats": "repeats",
                   **{f"{m} speed-up": f"{m}_speedup" for m in ("comm_only",)},
                   "comm_only spread": "comm_only_speedup_spread", "comm_only verdict": "comm_only_verdict",
                   "full_op speed-up": "full_op_speedup", "full_op spread": "full_op_speedup_spread",
                   "full_op verdict": "full_op_verdict"}


@dataclass
class RepeatedRow:
    """One case and variant over its repeats: the first repeat's :class:`ResultRow` fields (bytes,
    plan and counters are the same in every repeat), its check and violations over all of them
    (FAIL if any repeat failed; violations summed), and per metric the median time (us; the
    profiled PE, with ``--prof-pe all`` the slowest: the combine ends when every PE has) with its
    spread over the repeats (``"min-max"``, '-' for one repeat), and the comm_only bandwidth of the
    median time as the reference's perf summary defines it (GlobalDataSize / CoreMaxTime, GiB/s)."""

    row: ResultRow
    repeats: int
    times: dict  # metric -> (median, min, max), us
    gbps: float
    bandwidth: dict = dataclasses.field(default_factory=dict)  # nccl-tests' algbw/busbw (results/bandwidth.py)

    def __getattr__(self, name):
        if name in ("algbw", "busbw"):  # the slowest PE's, decimal GB/s (docs/formats.md#14-bandwidths)
            return self.__dict__.get("bandwidth", {}).get(f"{name}_GBps_slowest", math.nan)
        if name.endswith("_spread"):
            med, lo, hi = self.times.get(name.removesuffix("_spread"), (math.nan,) * 3)
            return "-" if self.repeats < 2 or not math.isfinite(med) else f"{lo:.3f}-{hi:.3f}"
        if name in ("comm_only_us", "full_op_us"):
            return self.times.get(name.removesuffix("_us"), (getattr(self.row, name),))[0]
        if name == "comm_only_gbps":
            return self.gbps
        return getattr(self.row, name)


def repeated_rows(outcomes: list[Outcome], summary: pd.DataFrame) -> list[RepeatedRow]:
    """The outcomes of one run folded per (case, variant), in the order they first appear, with the
    medians and spreads of :func:`combine_lab.results.tables.summarize` (``summary``) for the two
    variants of the lab's kernel and the rows' own times for the rest (the baseline)."""
    groups: dict[tuple, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.row.case_id, o.row.variant), []).append(o)
    by_case = _summary_by_case(summary)
    out = []
    for (case_id, variant), os_ in groups.items():
        first = os_[0].row
        ran = [o.row for o in os_ if o.row.ran]
        check = FAIL if any(r.check == FAIL for r in ran) else first.check
        violations = sum(r.violations or 0 for r in ran) if first.violations is not None else None
        row = dataclasses.replace(first, check=check, violations=violations,
                                  counters_ok=None if first.counters_ok is None else all(r.counters_ok for r in ran))
        s = by_case.get((case_id, first.settings))
        base = variant.split("-")[0]  # a variant label's combine (doubleplane-segment-c6)
        times = {}
        if s is not None and base in VARIANTS and not first.kernel:
            for m in ("comm_only", "full_op"):
                times[m] = (float(s[f"{m}_{base}_us"]), float(s[f"{m}_{base}_lo_us"]),
                            float(s[f"{m}_{base}_hi_us"]))
        elif first.kernel and ran:  # your kernel: the median and spread of its own repeats
            for m in ("comm_only", "full_op"):
                t = [r.time_us(m) for r in ran if math.isfinite(r.time_us(m))]
                if t:
                    times[m] = fold_repeats(t)
        med = times.get("comm_only", (first.comm_only_us,))[0]
        spec_bytes = next((o.spec for o in os_), None)
        data = spec_bytes.bs * spec_bytes.topk * spec_bytes.h * spec_bytes.itemsize * spec_bytes.pes \
            if spec_bytes is not None else 0
        out.append(RepeatedRow(row, len(ran), times, gib_per_s(data, med) if math.isfinite(med) else math.nan,
                               case_bandwidth(os_, spec_bytes) if spec_bytes is not None else {}))
    return out


def fold_outcomes(outcomes: list[Outcome], entries: dict, timed: bool, perf: bool, modelled: bool) -> tuple:
    """A run's outcomes as (tidy table, summary, table rows): a run shared by several settings groups
    (``entries``: label -> (variant, settings, groups); classic in reference and segment) counts in
    each; the summary (:func:`combine_lab.results.tables.summarize`) only when something was ``timed``,
    judged by the model's tie rule when ``modelled`` (one deterministic point per case); the rows
    folded per case and variant (:func:`repeated_rows`) whenever something was timed (your kernel
    alone has no summary row, but its repeats fold all the same), else one per outcome."""
    tidy = pd.DataFrame([t for o in outcomes for g in entries.get(o.row.variant, (0, 0, [o.row.settings]))[2]
                         for t in tidy_rows(dataclasses.replace(o.row, settings=g), o.spec,
                                            o.perf if o.result is not None else None, o.repeat)])
    summary = summarize(tidy) if timed else pd.DataFrame()
    if modelled and len(summary):
        for m in METRICS:
            summary[f"{m}_verdict"] = [modelled_verdict(x, b) for x, b in
                                       zip(summary[f"{m}_speedup"], summary["sdma_bytes"])]
    rows = repeated_rows(outcomes, summary) if len(summary) or perf else [o.row for o in outcomes]
    return tidy, summary, rows


def print_speedups(summary: pd.DataFrame, tidy: pd.DataFrame, *, several: bool, pairs: bool, against: str | None,
                   model, repeats: int) -> pd.DataFrame:
    """Print the run's speed-up table, what it is above it, and return the pairs (empty when none).

    With ``pairs`` (your kernels ran, or ``--baseline NAME``, and something was timed): one table of every
    kernel against its baseline (:func:`combine_lab.results.pairs.pair_table`); else, with ``several``
    of the lab's variants, the summary's classic / doubleplane table (:func:`speedup_table`). ``model``:
    the NpuModel of a modelled run (a point per case: no spread columns), else None."""
    found = pair_speedups(tidy, against, modelled=model is not None) if pairs else pd.DataFrame()
    points = ["repeats", "comm_only spread", "full_op spread"]  # a model's point has no spread
    if len(found):
        print("speed-up = baseline time / kernel time (above 1: the kernel faster)"
              + (f", modelled on {model.name}: a point, no spread" if model is not None else
                 f", the median of {repeats} paired repeat{'s' if repeats > 1 else ''} and its spread (min-max); "
                 "within noise: the spread covers 1")
              + ("" if against else "; each kernel against its same-settings classic (--baseline NAME for another)"))
        shown = pair_table(found)
        print((shown.drop(columns=points) if model is not None else shown).to_string(index=False))
        return found
    speedups = speedup_table(summary) if len(summary) and several else pd.DataFrame()
    if len(speedups) and model is not None:  # one point per case: its uncertainty is the unknown parameters
        print(f"speed-up = classic time / doubleplane time (above 1: doubleplane faster), modelled on {model.name}: "
              "a point, no spread; how it moves over the unknown parameters: combine-lab suggest")
        print(speedups.drop(columns=points).to_string(index=False))
    elif len(speedups):
        print(f"speed-up = classic time / doubleplane time (above 1: doubleplane faster), the median of "
              f"{repeats} paired repeat{'s' if repeats > 1 else ''} and its spread (min-max); within noise: the "
              "spread covers 1")
        print(speedups.to_string(index=False))
    return found


def _summary_by_case(summary: pd.DataFrame) -> dict:
    """(case_id, settings group) -> the summary row."""
    if not len(summary):
        return {}
    return {(r["case_id"], r.get("settings", "reference")): r for _, r in summary.iterrows()}


def table(rows: list) -> pd.DataFrame:
    """The rows (:class:`RepeatedRow`, or ResultRows: one repeat each) as the run table shows them
    (:data:`TABLE_COLUMNS`): times rounded to 3 decimals (us; NaN when not timed), bytes and
    violations as integers, counters=plan 'yes' or 'NO' ('differs' for your kernel: compared with its
    rule's plan, not required); a value a row does not have (a refused variant, the baseline) is '-'."""
    rows = [r if isinstance(r, RepeatedRow) else RepeatedRow(r, 1 if r.ran else 0, {}, math.nan) for r in rows]
    columns = dict(TABLE_COLUMNS)
    if any(r.settings != "reference" for r in rows):  # kernel settings ran (docs/variants.md): what changed
        columns.update({"cores/rank": "cores_per_rank", "SDMA calls": "sdma_calls"})
    data = {}
    for title, name in columns.items():
        values = [getattr(r, name) for r in rows]
        if name in ("comm_only_us", "full_op_us"):
            data[title] = [round(v, 3) if not math.isnan(v) else float("nan") for v in values]
        elif name in ("comm_only_gbps", "algbw", "busbw"):
            data[title] = [round(v, 3) if math.isfinite(v) else float("nan") for v in values]
        elif name == "counters_ok":  # your kernel's are compared with its rule's plan, not required
            data[title] = ["-" if v is None else ("yes" if v else "differs" if r.kernel else "NO")
                           for v, r in zip(values, rows)]
        elif name in _INT_FIELDS + ("cores_per_rank", "sdma_calls") and any(v is None for v in values):
            data[title] = pd.Series(["-" if v is None else int(v) for v in values], dtype=object)
        else:
            data[title] = values
    return pd.DataFrame(data, columns=list(columns))


def table_text(rows: list) -> str:
    """:func:`table` as text, one row per line under a header; times not measured read '-'."""
    return table(rows).to_string(index=False, na_rep="-")


def speedup_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per case of ``summary`` (:func:`combine_lab.results.tables.summarize`) with both
    variants timed: per metric the median speed-up (classic / doubleplane of the same repeat; above
    1: doubleplane faster), its spread ("min-max" over the paired repeats) and the verdict (faster,
    slower, within noise, or no SDMA: identical traffic)."""
    rows = []
    grouped = "settings" in summary.columns and set(summary["settings"]) != {"reference"}
    for _, r in summary.iterrows():
        if not math.isfinite(r["comm_only_speedup"]):
            continue
        rec = {"case_id": r["case_id"], "routing": r["routing"], "repeats": int(r["repeats"]),
               "settings": r.get("settings", "reference")}
        for m in ("comm_only", "full_op"):
            rec[f"{m}_speedup"] = f"{float(r[f'{m}_speedup']):.3f}"
            rec[f"{m}_speedup_spread"] = "-" if r["repeats"] < 2 else \
                f"{r[f'{m}_speedup_lo']:.3f}-{r[f'{m}_speedup_hi']:.3f}"
            rec[f"{m}_verdict"] = r[f"{m}_verdict"]
        rows.append(rec)
    cols = dict(SPEEDUP_COLUMNS)
    if grouped:  # compare --settings: one row per case and settings group (docs/variants.md)
        cols = {"case": "case_id", "settings": "settings", **{k: v for k, v in cols.items() if k != "case"}}
    return pd.DataFrame([{t: rec[n] for t, n in cols.items()} for rec in rows], columns=list(cols))


def write_run_summary(folder: Path, a: argparse.Namespace, outcomes: list[Outcome], summary: pd.DataFrame,
                      rows: list, modelled: str | None = None, pairs: pd.DataFrame | None = None) -> Path:
    """The run's summary (:mod:`combine_lab.formats.summaries`, docs/formats.md#11-run-summary) in
    ``folder``: per case and variant the check, every repeat's times and their median and spread, the
    planned and counted bytes, and per case and settings group the speed-up with its spread and
    verdict (``speedup_by_settings``; ``speedup``: the reference group's, else the first group's);
    what ``combine-lab diff`` compares. ``modelled``: the model's caption ("modelled on ...") of a
    ``--clock model:NAME`` run, which then says so in ``measured``. ``pairs``
    (:func:`combine_lab.results.pairs.pair_speedups`: your kernels beside the lab's, or ``--baseline
    NAME``) adds ``speedup_pairs`` per case: kernel, baseline, settings and per metric the speed-up."""
    each: dict[tuple, dict[str, list[float]]] = {}
    for o in outcomes:
        if o.row.ran:
            t = each.setdefault((o.row.case_id, o.row.variant), {"comm_only": [], "full_op": []})
            for m in t:
                t[m].append(o.row.time_us(m))
    cases: dict[str, dict] = {}
    for r in rows:
        c = cases.setdefault(r.case_id, {"case_id": r.case_id, "routing": r.routing, "dtype": r.dtype,
                                         "variants": {}, "speedup": {}, "speedup_by_settings": {}})
        rec = {"check": r.check, "repeats": r.repeats if isinstance(r, RepeatedRow) else int(r.ran),
               "mte_bytes": r.mte_bytes, "sdma_bytes": r.sdma_bytes, "planned_sdma_bytes": r.planned_sdma_bytes,
               "counters_ok": r.counters_ok, "violations": r.violations, "reason": r.reason,
               "bandwidth": _bandwidth_json(r.bandwidth if isinstance(r, RepeatedRow) else {})}
        for m in METRICS:
            med, lo, hi = r.times[m] if isinstance(r, RepeatedRow) and m in r.times else (getattr(r, f"{m}_us"),) * 3
            rec[f"{m}_us"] = {"median": _num(med), "min": _num(lo), "max": _num(hi),
                              "each": [_num(v) for v in each.get((r.case_id, r.variant), {}).get(m, [])]}
        c["variants"][r.variant] = rec
    # one speed-up per case and settings group (compare --settings: docs/variants.md)
    for (case_id, group), srow in _summary_by_case(summary).items():
        c = cases.get(case_id)
        if c is None or not math.isfinite(srow["comm_only_speedup"]):
            continue
        c["speedup_by_settings"][group] = {
            m: {"median": _num(srow[f"{m}_speedup"]), "min": _num(srow[f"{m}_speedup_lo"]),
                "max": _num(srow[f"{m}_speedup_hi"]), "verdict": srow[f"{m}_verdict"]} for m in METRICS}
    for _, prow in (pairs if pairs is not None else pd.DataFrame()).iterrows():
        c = cases.get(prow["case_id"])
        if c is not None:
            c.setdefault("speedup_pairs", []).append({
                "kernel": prow["kernel"], "baseline": prow["baseline"], "settings": prow["settings"],
                **{m: {"median": _num(prow[f"{m}_speedup"]), "min": _num(prow[f"{m}_speedup_lo"]),
                       "max": _num(prow[f"{m}_speedup_hi"]), "verdict": prow[f"{m}_verdict"]} for m in METRICS}})
    for c in cases.values():
        groups = c["speedup_by_settings"]
        c["speedup"] = groups.get("reference", next(iter(groups.values()), {}))
    repeats = outcomes[0].run.repeats if outcomes else 1
    return summaries.write_run_summary(folder, {
        "command": " ".join(["combine-lab", *sys.argv[1:]]) if sys.argv else "combine-lab", "target": a.target,
        "clock": getattr(a, "clock", "wall"), "measured": modelled or _measured_caption(a, repeats),
        "repeats": repeats if outcomes else 0, "warmup": a.warmup, "loops": a.loops,
        "cases": list(cases.values())})


def _bandwidth_json(bw: dict) -> dict:
    """A row's bandwidths for the summary JSON (docs/formats.md#11-run-summary): NaN as null, PEs as keys."""
    out = {}
    for k, v in bw.items():
        out[k] = {str(pe): _num(x) for pe, x in v.items()} if isinstance(v, dict) else \
            v if v is None or isinstance(v, int) else _num(v)
    return out


def _num(v) -> float | None:
    """A time for JSON: None where nothing was timed (NaN)."""
    v = float(v)
    return v if math.isfinite(v) else None


def _measured_caption(a: argparse.Namespace, repeats: int) -> str:
    """What the times are: where they were measured and how (the twin's are CPU threads copying
    memory on this machine, never an NPU's time), or that nothing was timed."""
    if not a.perf:
        # compare's speed-up table compares times: without them it is not printed, and says so here
        table = "; no speed-up table (it compares timed runs: --perf)" if getattr(a, "command", "") == "compare" else ""
        if a.target == "cpu":
            return ("not timed (no --perf): two launches per case and variant on the twin (a status flag the first "
                    f"leaves ready is caught in the second), the last checked against golden{table}")
        return f"not timed (no --perf): one launch per case and variant, checked against golden{table}"
    where = ("measured on the CPU twin: CPU threads copying memory on this machine "
             f"({os.cpu_count()} CPUs), not an NPU's time" if a.target == "cpu" else f"measured on target {a.target}")
    return (f"{where}; times are CoreMaxTime/us of the profiled PE (with --prof-pe all the slowest), the median of "
            f"{repeats} repeat{'s' if repeats > 1 else ''} of {a.warmup} + {a.loops} launches, spread min-max")
