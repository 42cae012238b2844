"""The speed-up of any pair of kernels on the same case: the lab's variants and your kernels
(``--kernel-source``) in one table (docs/cli.md#9-repeats-spread-and-verdicts).

A kernel's speed-up is baseline time / its time of the same repeat (above 1: the kernel is
faster), folded over the repeats as every median is (:func:`~combine_lab.results.rows.fold_repeats`).
By default each kernel is measured against its same-settings classic
(:attr:`combine_lab.kernels.Kernel.baseline`: ``doubleplane-segment-c6`` against ``classic-c6``, your
kernel against ``classic``); ``compare --baseline NAME`` measures every other kernel against NAME
(your kernel against the lab's ``doubleplane``, say).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..kernels import CLASSIC
from ..planning.settings import lab_kernel
from ..model.modelled import MODELLED
from .rows import FAIL, METRICS, PASS, fold_repeats, modelled_verdict, speedup, verdict
from .tables import CASE_KEYS

__all__ = ["PAIR_KEYS", "PAIR_COLUMNS", "default_baseline", "pair_speedups", "pair_table", "varying_keys"]

#: The tidy table's case keys (:data:`~combine_lab.results.tables.CASE_KEYS`) as :func:`pair_speedups` names them.
PAIR_KEYS = {"CaseId": "case_id", "routing": "routing", "Dtype": "dtype", "seed": "seed", "target": "target",
             "min_sdma_bytes": "min_sdma_bytes"}
#: Columns of :func:`pair_speedups`, in order.
PAIR_COLUMNS = [*PAIR_KEYS.values(), "settings", "kernel", "baseline", "repeats"] + [
    c for m in METRICS for c in (f"{m}_speedup", f"{m}_speedup_lo", f"{m}_speedup_hi", f"{m}_verdict")]


def default_baseline(name: str, is_lab: bool) -> str:
    """The kernel ``name`` is measured against by default: for the lab's (a variant label) its
    same-settings classic (``classic-c6``; '' for a classic, the baseline itself), for your kernel the
    lab's ``classic``."""
    return lab_kernel(name).baseline if is_lab else CLASSIC


def pair_speedups(tidy: pd.DataFrame, baseline: str | None = None, modelled: bool = False) -> pd.DataFrame:
    """One row per case (the summary's keys, :data:`~combine_lab.results.tables.CASE_KEYS`: a sweep's
    routings, dtypes, seeds and floors are cases of their own under one CaseId), settings group and
    kernel with a baseline that ran: the speed-up of the pair.

    ``tidy``: the tidy table (:func:`combine_lab.results.tables.tidy_rows` of every repeat: ``variant``
    names the run, ``kernel`` is your kernel's folder, '' for the lab's); ``baseline``: the name every
    other kernel is measured against (None: each against :func:`default_baseline`), looked up in the
    kernel's settings group first, then among every run of the case; ``modelled``: times from a
    timing model (one point per case, judged by :func:`~combine_lab.results.rows.modelled_verdict`).

    Per repeat a run's time is CoreMaxTime/us of its slowest profiled PE; per metric the speed-up of
    each repeat (baseline / kernel) folded into median, min and max, and the verdict: "no SDMA" only
    for the lab's kernel against its own classic when it sent nothing by SDMA (identical traffic), else
    by the spread; "not valid: <name> (x_out FAIL)", "(protocol violations)" or both when either run's
    x_out failed or the twin saw protocol violations in any repeat (its times time a broken kernel). Columns: :data:`PAIR_COLUMNS`.
    """
    if tidy is None or tidy.empty:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    tidy = tidy.assign(kernel=tidy["kernel"].fillna("").astype(str) if "kernel" in tidy.columns else "",
                       settings=tidy["settings"] if "settings" in tidy.columns else "reference")
    # one case: the summary's keys (a sweep's routings, dtypes, seeds and floors share a CaseId); a key a
    # row lacks is '-' (a NaN in a key would never find its pair)
    keys = [c for c in CASE_KEYS if c != "settings" and c in tidy.columns]
    tidy = tidy.assign(**{c: tidy[c].astype(object).where(tidy[c].notna(), "-") for c in keys})
    ran = tidy[tidy["check"].isin([PASS, FAIL, MODELLED])]
    # a run without perf rows (your kernel priced from its recorded stream) has its row's own times
    own = pd.Series(np.where(ran["Metric"] == "comm_only", ran["comm_only_us"], ran["full_op_us"]), index=ran.index)
    ran = ran.assign(time=ran["CoreMaxTime/us"].fillna(own))
    # (case..., variant, metric, repeat) -> the slowest profiled PE's time; a run shared by groups counts once
    per = ran.groupby([*keys, "variant", "Metric", "repeat"], dropna=False)["time"].max()
    runs = set(per.index.droplevel([-2, -1]))
    # a run whose x_out failed or whose flags raced its payload in any repeat: its times are not a result
    viol = pd.to_numeric(ran["violations"], errors="coerce").fillna(0) if "violations" in ran.columns else 0
    marks = ran.assign(fail=ran["check"] == FAIL, viol=viol > 0).groupby(
        [*keys, "variant"], dropna=False)[["fail", "viol"]].any()
    # (case..., variant) -> why its times are not a result, as the table's columns say it
    failed = {key: ", ".join(w for w, hit in (("x_out FAIL", r.fail), ("protocol violations", r.viol)) if hit)
              for key, r in marks.iterrows() if r.fail or r.viol}
    out = []
    for (*case, group), g in tidy.groupby([*keys, "settings"], sort=False, dropna=False):
        case = tuple(case)
        for name, k in g.groupby("variant", sort=False):
            is_lab = not str(k["kernel"].iloc[0])
            if is_lab and "a2a" in name:  # the all_to_all baseline is a row of its own, not a kernel
                continue
            base = baseline if baseline is not None else default_baseline(name, is_lab)
            if not base or base == name or (*case, base) not in runs:
                continue
            sdma = float(k["sdma_bytes"].iloc[0]) if is_lab and baseline is None else math.nan
            rec = {**{PAIR_KEYS[c]: v for c, v in zip(keys, case)}, "settings": group, "kernel": name,
                   "baseline": base}
            for m in METRICS:
                mine, theirs = (per.get((*case, n, m), pd.Series(dtype=float)) for n in (name, base))
                mine.index, theirs.index = mine.index.get_level_values(-1), theirs.index.get_level_values(-1)
                both = pd.concat({"b": theirs, "k": mine}, axis=1).dropna()
                paired = np.asarray(speedup(both["b"], both["k"]), dtype=float)
                paired = paired[~np.isnan(paired)]
                rec[f"{m}_speedup"], rec[f"{m}_speedup_lo"], rec[f"{m}_speedup_hi"] = fold_repeats(paired)
                rec[f"{m}_verdict"] = modelled_verdict(rec[f"{m}_speedup"], sdma) if modelled else verdict(paired, sdma)
                bad = [f"{n} ({failed[(*case, n)]})" for n in (name, base) if (*case, n) in failed]
                if bad:
                    rec[f"{m}_verdict"] = f"not valid: {' and '.join(bad)}"
                if m == METRICS[0]:
                    rec["repeats"] = int(paired.size)
            if rec["repeats"]:
                out.append(rec)
    return pd.DataFrame(out, columns=PAIR_COLUMNS)


def varying_keys(pairs: pd.DataFrame) -> list[str]:
    """The case keys of ``pairs`` besides case_id and routing that differ between its rows (dtype, seed,
    target, min_sdma_bytes): what a table or figure must show to tell its cases apart."""
    return [c for c in ("dtype", "seed", "target", "min_sdma_bytes") if c in pairs.columns and
            pairs[c].nunique(dropna=False) > 1]


def pair_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """:func:`pair_speedups` as the CLI prints it: case, settings (only where a group is not the
    reference's), routing, dtype, seed, target and floor (each only where it differs between rows),
    kernel, baseline, repeats, then per metric the speed-up (3 decimals), its spread
    ("min-max"; '-' for one repeat) and the verdict."""
    grouped = len(pairs) and set(pairs["settings"]) != {"reference"}
    varying = varying_keys(pairs)  # the other case keys where they tell rows apart (a sweep over dtypes or floors)
    rows = []
    for _, r in pairs.iterrows():
        rec = {"case": r["case_id"], **({"settings": r["settings"]} if grouped else {}), "routing": r["routing"],
               **{c: r[c] for c in varying}, "kernel": r["kernel"], "baseline": r["baseline"],
               "repeats": int(r["repeats"])}
        for m in METRICS:
            rec[f"{m} speed-up"] = f"{float(r[f'{m}_speedup']):.3f}"
            rec[f"{m} spread"] = "-" if r["repeats"] < 2 else f"{r[f'{m}_speedup_lo']:.3f}-{r[f'{m}_speedup_hi']:.3f}"
            rec[f"{m} verdict"] = r[f"{m}_verdict"]
        rows.append(rec)
    cols = ["case"] + (["settings"] if grouped else []) + ["routing", *varying, "kernel", "baseline", "repeats"] + [
        f"{m} {c}" for m in METRICS for c in ("speed-up", "spread", "verdict")]
    return pd.DataFrame(rows, columns=cols)
