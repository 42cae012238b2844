"""Tables made of result rows: the sweep's tidy table (and its CSV), its per-case summary over
repeats, the cases where doubleplane loses, and a view of them to read.

The tidy table has one row per (case, repeat, variant, profiled PE, metric): the perf columns
of docs/formats.md#3-perf-csv (times in us, bandwidths in GiB/s), the per-core times, the repeat
and the case seed, then the run's :class:`~combine_lab.results.rows.ResultRow` (variant, check,
plane bytes, SDMA share, whether the twin's counters equal the plan, the reason a variant did
not run). A variant that did not run (refused, or a failed run) gets two rows, one per metric,
with empty perf columns.

One convention for comparing the variants, everywhere (summary columns, figures, the losses
table, the tuning app's history): the speed-up (:data:`~combine_lab.results.rows.SPEEDUP`) is
classic time / doubleplane time, above 1 when doubleplane is faster. A case whose doubleplane
run sends nothing by SDMA (SDMA share 0) sends exactly the bytes of classic: its speed-up is
timing noise, and :func:`summarize` says so in its verdict.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..kernels import CLASSIC, DOUBLEPLANE
from ..case.spec import CaseSpec
from ..errors import ParameterError, ResultFileError
from ..formats.files import write_atomic
from ..formats.perf_csv import PERF_COLUMNS, fixed4
from ..planning.planner import VARIANTS
from ..model.modelled import MODELLED
from .bandwidth import algbw_gbps, busbw_factor
from .rows import (FAIL, FASTER, METRICS, PASS, REFUSED, ROW_COLUMNS, SLOWER, ResultRow, compare_rows, first_line,
                   fold_repeats, speedup, verdict)

__all__ = ["TIDY_COLUMNS", "SUMMARY_COLUMNS", "CASE_KEYS", "tidy_rows", "write_sweep_csv", "read_sweep_csv",
           "summarize", "noise_band", "judged", "inside_noise", "losses", "readable", "compare_over_repeats"]

#: Every column of the tidy table, in order: the perf columns, ``core_times_us`` (the per-core
#: times, us with 4 decimals as in the perf CSV, joined by ';'), the sweep's ``repeat`` (0, 1, ...)
#: and case ``seed``, then the row's.
TIDY_COLUMNS = PERF_COLUMNS + ["core_times_us", "repeat", "seed"] + ROW_COLUMNS
#: What makes two tidy rows one case (with the settings group): CaseId alone names the shape, not the
#: routing, dtype, seed or floor of a sweep's cases (the summary's and the speed-ups' one key).
CASE_KEYS = ["CaseId", "routing", "Dtype", "seed", "target", "min_sdma_bytes", "settings"]
#: Row columns a sweep CSV written before kernel settings lacks (read as the reference's).
_SETTINGS_COLUMNS = {"settings": "reference", "cores_per_rank": 1, "sdma_calls": np.nan}


def tidy_rows(row: ResultRow, spec: CaseSpec, perf: pd.DataFrame | None = None, repeat: int = 0) -> list[dict]:
    """The tidy rows of one run: one per perf row (``perf`` as :func:`combine_lab.formats.perf_csv.read_perf_csv`
    reads it: a profiled PE and a metric each) with ``row``'s values beside it; without perf rows
    (a variant that did not run), one per metric with the perf columns empty but the case's
    (Npus, BS, H, TopK, ExpertPerPe, Dtype, CaseId). Keys: :data:`TIDY_COLUMNS`. ``reason`` is the
    first line of the row's (a failed PE's whole reason stays in the row, docs/cli.md#6-exit-status)."""
    extra = {"repeat": repeat, "seed": spec.seed, **row.as_dict()}
    extra["reason"] = first_line(extra.get("reason"))
    if perf is not None and len(perf):
        out = []
        for _, r in perf.iterrows():
            fixed = {c: r[c] for c in PERF_COLUMNS}
            out.append({**fixed, "core_times_us": ";".join(fixed4(v) for v in r["core_times_us"]), **extra})
        return out
    base = {c: np.nan for c in PERF_COLUMNS}
    base.update({"Npus": spec.pes, "BS": spec.bs, "H": spec.h, "TopK": spec.topk, "ExpertPerPe": spec.expert_per_pe,
                 "Dtype": spec.dtype, "CaseId": spec.case_id, "core_times_us": ""})
    return [{**base, "Metric": m, **extra} for m in ("full_op", "comm_only")]


def write_sweep_csv(tidy: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write the tidy table as CSV (header = :data:`TIDY_COLUMNS`); folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, tidy.to_csv(index=False, columns=TIDY_COLUMNS))
    return path


def read_sweep_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a tidy sweep CSV. Raises ResultFileError when the header is not :data:`TIDY_COLUMNS`."""
    df = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"reason": str, "core_times_us": str,
                                                                          "kernel": str})
    n = len(_SETTINGS_COLUMNS)
    if list(df.columns) == TIDY_COLUMNS[:-1 - n]:  # written before rows named their kernel: the lab's
        df["kernel"] = ""
    if list(df.columns) == TIDY_COLUMNS[:-n]:  # written before kernel settings: the reference's
        for k, v in _SETTINGS_COLUMNS.items():
            df[k] = v
    if list(df.columns) != TIDY_COLUMNS:
        raise ResultFileError(f"{path}: not a sweep CSV (columns {list(df.columns)[:5]}...)",
                              parameter="path", value=path)
    df["reason"] = df["reason"].fillna("")
    df["kernel"] = df["kernel"].fillna("")
    return df


def _summary_columns() -> list[str]:
    cols = ["case_id", "routing", "dtype", "pes", "bs", "h", "topk", "expert_per_pe", "seed", "target",
            "min_sdma_bytes", "repeats"]
    for m in METRICS:
        for v in VARIANTS:
            cols += [f"{m}_{v}_us", f"{m}_{v}_lo_us", f"{m}_{v}_hi_us"]
        cols += [f"{m}_speedup", f"{m}_speedup_lo", f"{m}_speedup_hi", f"{m}_verdict"]
    cols += ["sdma_share", "sdma_bytes", "check_ok", "counters_ok", "settings"]
    # nccl-tests' bandwidths of comm_only, the slowest profiled PE's (docs/formats.md#14-bandwidths)
    return cols + [f"comm_only_{v}_{b}_GBps" for v in VARIANTS for b in ("algbw", "busbw")]


#: Columns of :func:`summarize`, in order.
SUMMARY_COLUMNS = _summary_columns()


def summarize(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per case: both variants' times with their spread, the speed-up, the SDMA share, the verdicts.

    Per repeat, a variant's time is CoreMaxTime/us of the slowest profiled PE (the
    combine ends when every PE has; with one profiled PE, that PE's). Over the repeats:

    * ``<metric>_<variant>_us``: the median; ``..._lo_us`` / ``..._hi_us``: min and max, the
      spread (:func:`~combine_lab.results.rows.spread`; metric comm_only or full_op, variant
      classic or doubleplane);
    * ``<metric>_speedup``: median over repeats of :func:`~combine_lab.results.rows.speedup`
      (classic time / doubleplane time of the same repeat: above 1, doubleplane faster);
      ``..._speedup_lo`` / ``..._speedup_hi``: its min and max over the repeats;
    * ``<metric>_verdict``: :func:`~combine_lab.results.rows.verdict`: NO_SDMA when the
      doubleplane run sent nothing by SDMA (its speed-up is noise), else "faster" / "slower"
      when every repeat agrees, "within noise" when the spread covers 1.0.

    Also repeats (paired repeats of comm_only), sdma_share (doubleplane run, in [0, 1]),
    sdma_bytes (doubleplane), check_ok (no run failed: every variant that ran PASS, none
    ERROR; a refused variant is not a failure), counters_ok (every run that ran). Columns:
    :data:`SUMMARY_COLUMNS`. Variants that did not run (check REFUSED or ERROR) are left out
    of the times. Rows of your own kernels (a non-empty ``kernel``) are the tidy table's, not the
    summary's: it compares the lab's two variants. Cases are grouped by kernel settings too
    (``settings``, docs/variants.md): one summary row per case and settings group, comparing the
    group's classic and doubleplane runs (``classic-c6`` and ``doubleplane-segment-c6`` in group
    ``segment-c6``).
    """
    if "kernel" in tidy.columns:
        tidy = tidy[tidy["kernel"].isna() | (tidy["kernel"].astype(str) == "")]
    if tidy.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    if "settings" not in tidy.columns:
        tidy = tidy.assign(settings="reference")
    # the group's runs by their combine: a variant label's first word (doubleplane-segment-c6)
    tidy = tidy.assign(variant=tidy["variant"].astype(str).str.split("-").str[0])
    out = []
    for key, g in tidy.groupby(CASE_KEYS, sort=False, dropna=False):
        first = g.iloc[0]
        row = dict(zip(["case_id", "routing", "dtype", "seed", "target", "min_sdma_bytes", "settings"], key))
        row.update(pes=int(first["Npus"]), bs=int(first["BS"]), h=int(first["H"]), topk=int(first["TopK"]),
                   expert_per_pe=int(first["ExpertPerPe"]))
        ran = g[g["check"].isin([PASS, FAIL, MODELLED])]  # a priced run has times too
        dual = ran[ran["variant"] == DOUBLEPLANE]
        row["sdma_share"] = float(dual["sdma_share"].iloc[0]) if len(dual) else float("nan")
        row["sdma_bytes"] = dual["sdma_bytes"].iloc[0] if len(dual) else float("nan")
        for metric in METRICS:
            sel = ran[ran["Metric"] == metric]
            per = sel.groupby(["variant", "repeat"])["CoreMaxTime/us"].max()  # slowest profiled PE
            times = {}
            for v in VARIANTS:
                t = per[v] if v in per.index.get_level_values(0) else pd.Series(dtype=float)
                times[v] = t
                row[f"{metric}_{v}_us"], row[f"{metric}_{v}_lo_us"], row[f"{metric}_{v}_hi_us"] = \
                    fold_repeats(t.to_numpy(dtype=float))
            both = pd.concat({CLASSIC: times[CLASSIC], DOUBLEPLANE: times[DOUBLEPLANE]}, axis=1).dropna()
            paired = speedup(both[CLASSIC], both[DOUBLEPLANE])  # same repeat's pair
            paired = paired[~np.isnan(paired)]
            row[f"{metric}_speedup"], row[f"{metric}_speedup_lo"], row[f"{metric}_speedup_hi"] = fold_repeats(paired)
            row[f"{metric}_verdict"] = verdict(paired, row["sdma_bytes"])
            if metric == "comm_only":
                row["repeats"] = int(paired.size)
                data = sel.groupby(["variant", "repeat"])["DataSize/B"].first()
                for v in VARIANTS:  # per repeat: the bytes a PE receives over the slowest PE's time
                    alg = [algbw_gbps(float(data[v, r]), float(t)) for r, t in times[v].items()] if len(times[v]) else []
                    row[f"comm_only_{v}_algbw_GBps"] = float(np.median(alg)) if alg else float("nan")
                    row[f"comm_only_{v}_busbw_GBps"] = row[f"comm_only_{v}_algbw_GBps"] * busbw_factor(row["pes"])
        row["check_ok"] = bool(g.loc[g["check"] != REFUSED, "check"].isin([PASS, MODELLED]).all())
        row["counters_ok"] = bool(len(ran)) and bool(ran["counters_ok"].astype(bool).all())
        out.append(row)
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ParameterError(f"metric={metric!r}: must be 'comm_only' or 'full_op'",
                             parameter="metric", value=metric, allowed="comm_only or full_op")
    return metric


def noise_band(summary: pd.DataFrame, metric: str = "comm_only") -> tuple[float, float] | None:
    """(lowest, highest) ``metric`` speed-up over the repeats of the summary's cases with no SDMA traffic
    (identical bytes by both variants: how far two runs of the same traffic drift apart on this machine,
    the yardstick of the others); None without such a case."""
    col = f"{_check_metric(metric)}_speedup"
    zero = summary[(summary["sdma_share"].fillna(0.0) <= 0) & summary[col].notna()]
    if zero.empty:
        return None
    return float(zero.get(f"{col}_lo", zero[col]).min()), float(zero.get(f"{col}_hi", zero[col]).max())


def judged(summary: pd.DataFrame, metric: str = "comm_only") -> pd.DataFrame:
    """The cases with SDMA traffic whose ``metric`` verdict is "faster" or "slower" (every repeat agreed)."""
    metric = _check_metric(metric)
    return summary[(summary["sdma_share"].fillna(0.0) > 0) & summary[f"{metric}_verdict"].isin([FASTER, SLOWER])]


def inside_noise(summary: pd.DataFrame, metric: str = "comm_only") -> pd.DataFrame:
    """The :func:`judged` cases whose median speed-up lies inside :func:`noise_band`: a difference their repeats agree on, no
    larger than identical traffic shows between cases here, so no result beyond this machine's noise.
    Empty without a band."""
    band, col = noise_band(summary, metric), f"{_check_metric(metric)}_speedup"
    if band is None:
        return summary.iloc[0:0]
    sure = judged(summary, metric)
    return sure[sure[col].between(*band)]


def losses(summary: pd.DataFrame, metric: str = "comm_only") -> pd.DataFrame:
    """The cases where doubleplane loses on ``metric`` ('comm_only' or 'full_op'): median
    speed-up below 1 among the cases that sent anything by SDMA (an SDMA share of 0 means
    identical traffic: no loss to speak of), worst first. Columns: the case, sdma_share,
    both variants' times with their spread (min-max), the speed-up likewise and the verdict
    (which says whether every repeat agreed), check_ok; the settings group and comm_only's algbw and
    busbw where the summary has them (the readable table shows them)."""
    metric = _check_metric(metric)
    col = f"{metric}_speedup"
    keep = ["case_id", "routing", "dtype", "pes", "bs", "h", "topk", "expert_per_pe", "sdma_share"]
    for v in VARIANTS:
        keep += [f"{metric}_{v}_us", f"{metric}_{v}_lo_us", f"{metric}_{v}_hi_us"]
    keep += [col, f"{col}_lo", f"{col}_hi", f"{metric}_verdict", "check_ok"]
    # what readable() shows beside them: the settings group and comm_only's bandwidths, where the summary has them
    keep += [c for c in ["settings", *(f"comm_only_{v}_{w}_GBps" for v in VARIANTS for w in ("algbw", "busbw"))]
             if c in summary.columns]
    lost = summary[(summary["sdma_bytes"] > 0) & (summary[col] < 1.0)]
    return lost.sort_values(col, ascending=True)[keep].reset_index(drop=True)


def _spread(mid: float, lo: float, hi: float, fmt: str) -> str:
    if not np.isfinite(mid):
        return "-"
    if lo == hi:
        return format(mid, fmt)
    return f"{format(mid, fmt)} [{format(lo, fmt)}-{format(hi, fmt)}]"


def readable(summary: pd.DataFrame, metric: str = "comm_only") -> pd.DataFrame:
    """:func:`summarize` (or :func:`losses`) rows as a table to read: per case (and settings group,
    where any is not the reference's: docs/variants.md) the SDMA share (%), both variants' times
    "median [min-max]" (us, over repeats), the speed-up likewise (classic / doubleplane, above 1:
    doubleplane faster) and the verdict."""
    metric = _check_metric(metric)
    groups = "settings" in summary.columns and set(summary["settings"].dropna()) - {"reference"}
    rows = []
    for _, r in summary.iterrows():
        rows.append({
            "case": r["case_id"], "routing": r["routing"], **({"settings": r["settings"]} if groups else {}),
            "SDMA share (%)": f"{100 * r['sdma_share']:.1f}",
            f"{metric} classic (us)": _spread(r[f"{metric}_classic_us"], r[f"{metric}_classic_lo_us"],
                                             r[f"{metric}_classic_hi_us"], ".0f"),
            f"{metric} doubleplane (us)": _spread(r[f"{metric}_doubleplane_us"], r[f"{metric}_doubleplane_lo_us"],
                                                 r[f"{metric}_doubleplane_hi_us"], ".0f"),
            "speed-up classic/doubleplane (1)": _spread(r[f"{metric}_speedup"], r[f"{metric}_speedup_lo"],
                                                        r[f"{metric}_speedup_hi"], ".2f"),
            "verdict": r[f"{metric}_verdict"],
            **({"algbw classic / doubleplane (GB/s)": _pair(r, "algbw"),
                "busbw classic / doubleplane (GB/s)": _pair(r, "busbw")} if metric == "comm_only" else {}),
        })
    return pd.DataFrame(rows, columns=["case", "routing"] + (["settings"] if groups else []) + [
        "SDMA share (%)", f"{metric} classic (us)", f"{metric} doubleplane (us)", "speed-up classic/doubleplane (1)",
        "verdict"] + (["algbw classic / doubleplane (GB/s)", "busbw classic / doubleplane (GB/s)"]
                      if metric == "comm_only" else []))


def _pair(r, what: str) -> str:
    """Both variants' comm_only ``what`` (algbw or busbw), GB/s, "classic / doubleplane"; '-' where
    a summary has none (one written before them) or nothing was timed."""
    vals = [r.get(f"comm_only_{v}_{what}_GBps", np.nan) for v in VARIANTS]
    return " / ".join(f"{float(v):.1f}" if pd.notna(v) and np.isfinite(float(v)) else "-" for v in vals)


def compare_over_repeats(rows: list[ResultRow], tidy: pd.DataFrame | None) -> dict:
    """One comparison of a case's classic and doubleplane over every repeat (the tuning app's history
    row): :func:`~combine_lab.results.rows.compare_rows` of the last repeat's ``rows`` (the SDMA
    share, the reason of a variant that did not run), its times, speed-ups and verdicts replaced by
    :func:`summarize` of ``tidy`` (every repeat's tidy rows; None or empty: nothing timed, every spread
    and bandwidth NaN and the verdicts "no run"), its check FAIL and counters_ok False when any
    repeat's were. Keys: :data:`~combine_lab.results.rows.COMPARISON_COLUMNS`, per metric
    ``<metric>_speedup_lo``, ``_hi``, ``_verdict`` and each variant's ``<metric>_<variant>_lo_us`` /
    ``_hi_us``, and nccl-tests' ``comm_only_<variant>_algbw_GBps`` / ``_busbw_GBps`` (slowest profiled PE)."""
    out = compare_rows(rows)
    nan = float("nan")
    for m in METRICS:
        out.update({f"{m}_speedup_lo": nan, f"{m}_speedup_hi": nan, f"{m}_verdict": "no run"})
        out.update({f"{m}_{v}_{k}_us": nan for v in VARIANTS for k in ("lo", "hi")})
    out.update({f"comm_only_{v}_{b}_GBps": nan for v in VARIANTS for b in ("algbw", "busbw")})
    summary = summarize(tidy) if tidy is not None and len(tidy) else None
    if summary is None or not len(summary):
        return out
    s = summary.iloc[0]
    for m in METRICS:
        for k in ("speedup", "speedup_lo", "speedup_hi", "verdict",
                  *(f"{v}_{k}" for v in VARIANTS for k in ("us", "lo_us", "hi_us"))):
            out[f"{m}_{k}"] = s[f"{m}_{k}"]
    for v in VARIANTS:
        for b in ("algbw", "busbw"):
            out[f"comm_only_{v}_{b}_GBps"] = s.get(f"comm_only_{v}_{b}_GBps", nan)
    if out["check"] == PASS and not s["check_ok"]:
        out["check"] = FAIL
    out["counters_ok"] = bool(out["counters_ok"]) and bool(s["counters_ok"])
    return out
