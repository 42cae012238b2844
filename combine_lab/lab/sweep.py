"""Sweeps: run every case of a grid for both variants, repeatedly, and collect one tidy table.

    grid = make_grid(pes=[2], bs=[64, 128], h=[8192, 16384], topk=[2], expert_per_pe=[2],
                     routings=["uniform", "hot-expert:0.5"])
    planned_shares(grid)                       # which cases send anything by SDMA, before running
    tidy = run_sweep(grid, warmup=2, loops=20, repeats=5, prof_pe="all", csv_path="out/sweep.csv")
    summary = summarize(tidy); losses(summary)

The tidy table has one row per (case, repeat, variant, profiled PE, metric): the perf
columns of combine-facts section 8 (times in us, bandwidths in GiB/s) plus what the perf
CSV does not say: variant, repeat, routing, plane bytes, the x_out verdict and whether
the twin's counters equal the plan.

One convention for comparing the variants, everywhere (summary columns, figures, the
losses table, the tuning app's history): the **speed-up** of dual-plane is MTE-only
time / dual-plane time, above 1 when dual-plane is faster. A case whose dual-plane run
sends nothing by SDMA (SDMA share 0) sends exactly the bytes of MTE-only: its speed-up
is timing noise, and :func:`summarize` says so in its verdict.
"""

from __future__ import annotations

import itertools
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..run import build as build_mod
from ..run import runner
from ..errors import SpecError
from ..case.case import make_case
from .records import as_list
from ..run.launch import LaunchError
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, plan
from ..run.outputs import PERF_COLUMNS
from ..case.spec import CaseSpec

__all__ = ["Grid", "make_grid", "planned_shares", "run_sweep", "TIDY_COLUMNS", "EXTRA_COLUMNS", "SUMMARY_COLUMNS",
           "SPEEDUP", "NO_SDMA", "write_sweep_csv", "read_sweep_csv", "summarize", "losses", "readable"]

#: What a speed-up is, wherever the lab shows one: above 1 when dual-plane is faster.
SPEEDUP = "speed-up = MTE-only time / dual-plane time (above 1: dual-plane faster)"
#: Verdict of a case whose dual-plane run sent nothing by SDMA: both variants sent the same bytes.
NO_SDMA = "no SDMA: identical traffic"

#: Columns the tidy table adds to the perf columns (combine-facts section 8).
EXTRA_COLUMNS = [
    "variant",            # classic | doubleplane
    "repeat",             # 0, 1, ...: the run_sweep repeat this row comes from
    "policy",             # mte_only | dual_plane
    "routing",            # routing string of the case
    "seed",               # case seed
    "target",             # cpu | npu
    "min_sdma_bytes",     # SDMA floor, bytes
    "mte_bytes",          # payload bytes by MTE, summed over PEs (counted on the twin, else planned)
    "sdma_bytes",         # payload bytes by SDMA, summed over PEs
    "planned_sdma_bytes", # what the planner said for this variant, bytes
    "payload_bytes",      # mte_bytes + sdma_bytes
    "sdma_share",         # sdma_bytes / payload_bytes, in [0, 1]
    "check",              # PASS | FAIL (x_out against golden on every PE) | ERROR (the run failed)
    "max_abs_err",        # largest |x_out - golden| over PEs
    "counters_ok",        # True when the twin's counters equal the plan (True on NPU: nothing to compare)
    "error",              # message of a failed run, else empty
]
#: Every column of the tidy table, in order; ``core_times_us`` holds the per-core times joined by ';'.
TIDY_COLUMNS = PERF_COLUMNS + ["core_times_us"] + EXTRA_COLUMNS
_CASE_KEYS = ["CaseId", "routing", "Dtype", "seed", "target", "min_sdma_bytes"]


@dataclass
class Grid:
    """The cases of a sweep: ``specs`` (valid CaseSpecs, in product order) and ``skipped``
    (``(parameters, reason)`` for each invalid combination when skipping was asked for)."""

    specs: list[CaseSpec]
    skipped: list[tuple[dict, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.specs)


def make_grid(pes, bs, h, topk, expert_per_pe, routings, dtype="int32_t", seed: int = 42,
              masked_fraction: float = 0.0, skip_invalid: bool = False) -> Grid:
    """The product of the axes as CaseSpecs, every one validated before anything runs.

    Each axis is a list, a single value, or a string as papermill ``-p`` passes it
    (``"[8, 16]"``, ``"8,16"``); ``routings`` and ``dtype`` likewise hold strings.
    Order: routing, dtype, pes, bs, h, topk, expert_per_pe (the last varies fastest).

    Raises SpecError naming every invalid combination (for example topk > E with a
    distinct routing), unless ``skip_invalid``: then they are listed in ``Grid.skipped``.
    """
    axes = {"routing": as_list(routings, str, "routings"), "dtype": as_list(dtype, str, "dtype"),
            "pes": as_list(pes, int, "pes"), "bs": as_list(bs, int, "bs"), "h": as_list(h, int, "h"),
            "topk": as_list(topk, int, "topk"), "expert_per_pe": as_list(expert_per_pe, int, "expert_per_pe")}
    specs, skipped = [], []
    for values in itertools.product(*axes.values()):
        params = dict(zip(axes, values))
        try:
            specs.append(CaseSpec(seed=seed, masked_fraction=masked_fraction, **params))
        except SpecError as e:
            skipped.append((params, str(e)))
    if skipped and not skip_invalid:
        lines = "; ".join(f"{p}: {why}" for p, why in skipped[:5])
        more = f" (and {len(skipped) - 5} more)" if len(skipped) > 5 else ""
        raise SpecError(f"{len(skipped)} of {len(skipped) + len(specs)} sweep cases are invalid: {lines}{more}")
    return Grid(specs, skipped)


def planned_shares(specs, min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES) -> pd.DataFrame:
    """What the planner would send by SDMA in each case, before anything runs.

    ``specs``: CaseSpecs or a :class:`Grid`. One row per case: case_id, routing, pes, bs,
    h, topk, expert_per_pe, payload_bytes, sdma_bytes (dual-plane plan, summed over PEs)
    and sdma_share in [0, 1]. A case with sdma_share 0 sends exactly the same bytes with
    both variants: a sweep learns nothing about dual-plane from it but the timing noise.
    Draws the routing only (never the activations x), so it is quick.
    """
    if isinstance(specs, Grid):
        specs = specs.specs
    rows = []
    for spec in specs:
        t = plan(make_case(spec), "dual_plane", min_sdma_bytes=int(min_sdma_bytes)).totals
        sdma, total = int(t["sdma_bytes"].sum()), int((t["mte_bytes"] + t["sdma_bytes"]).sum())
        rows.append({"case_id": spec.case_id, "routing": spec.routing, "pes": spec.pes, "bs": spec.bs, "h": spec.h,
                     "topk": spec.topk, "expert_per_pe": spec.expert_per_pe, "payload_bytes": total,
                     "sdma_bytes": sdma, "sdma_share": sdma / total if total else 0.0})
    return pd.DataFrame(rows, columns=["case_id", "routing", "pes", "bs", "h", "topk", "expert_per_pe",
                                       "payload_bytes", "sdma_bytes", "sdma_share"])


def _rows_of(res: runner.RunResult, spec: CaseSpec, target: str, seed: int, repeat: int) -> list[dict]:
    mte, sdma = res.sent_bytes()
    extra = {
        "variant": res.variant, "repeat": repeat, "policy": res.policy, "routing": res.routing, "seed": seed,
        "target": target, "min_sdma_bytes": res.min_sdma_bytes, "mte_bytes": mte, "sdma_bytes": sdma,
        "planned_sdma_bytes": int(res.plan.totals["sdma_bytes"].sum()), "payload_bytes": mte + sdma,
        "sdma_share": res.sdma_share(),
        "check": "PASS" if res.check_ok else "FAIL",
        "max_abs_err": max((c.max_abs_err for c in res.checks), default=float("nan")),
        "counters_ok": not res.counter_mismatches(), "error": "",
    }
    rows = []
    for _, r in res.perf.iterrows():
        row = {c: r[c] for c in PERF_COLUMNS}
        row["core_times_us"] = ";".join(f"{v:.6f}" for v in r["core_times_us"])
        rows.append({**row, **extra})
    return rows


def _error_rows(spec: CaseSpec, variant: str, target: str, min_sdma_bytes: int, message: str,
                repeat: int) -> list[dict]:
    base = {c: np.nan for c in PERF_COLUMNS}
    base.update({"Npus": spec.pes, "BS": spec.bs, "H": spec.h, "TopK": spec.topk, "ExpertPerPe": spec.expert_per_pe,
                 "Dtype": spec.dtype, "CaseId": spec.case_id, "core_times_us": ""})
    extra = {"variant": variant, "repeat": repeat, "policy": runner.VARIANTS[variant], "routing": spec.routing,
             "seed": spec.seed, "target": target, "min_sdma_bytes": min_sdma_bytes, "mte_bytes": np.nan,
             "sdma_bytes": np.nan, "planned_sdma_bytes": np.nan, "payload_bytes": np.nan, "sdma_share": np.nan,
             "check": "ERROR", "max_abs_err": np.nan, "counters_ok": False, "error": message}
    return [{**base, "Metric": m, **extra} for m in ("full_op", "comm_only")]


def run_sweep(specs, *, warmup: int = 0, loops: int = 2, repeats: int = 1, target: str = "cpu",
              min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES, prof_pe: int | str = 0, timeout_s: float = 120.0,
              csv_path: str | os.PathLike | None = None, progress: bool = True) -> pd.DataFrame:
    """Run classic and dual-plane on every spec, ``repeats`` times, and tidy the results.

    Each case's files are written once; each repeat launches both variants on them
    (:func:`combine_lab.run.runner.run_case`), the order alternating between repeats
    (classic first, then dual-plane first, ...) so that neither always runs second.
    The spread over repeats (quartiles) is what :func:`summarize` reports with every time;
    every repeat's times stay in the tidy table.

    Args:
        specs: CaseSpecs (e.g. ``make_grid(...).specs``) or a :class:`Grid`.
        warmup, loops: launches before and during profiling, per run (loops >= 1).
        repeats: runs of both variants per case (>= 1; 3 or more for a spread worth reading).
        target: ``cpu`` (twin) or ``npu``; built once before the first case.
        min_sdma_bytes: SDMA floor, bytes.
        prof_pe: the PE profiled, or ``"all"`` (one launch per PE: pes times slower;
            :func:`summarize` then takes the slowest PE, which ends the combine).
        timeout_s: limit per launch of all PEs, seconds.
        csv_path: if given, the tidy table is written there (:func:`write_sweep_csv`).
        progress: show a tqdm progress bar (one step per case).

    Returns:
        The tidy DataFrame (:data:`TIDY_COLUMNS`), one row per (case, repeat, variant,
        profiled PE, metric). A case whose run fails gets rows with check ``ERROR`` for
        that repeat and the message in ``error``, and no further repeats; the sweep goes on.
        A variant this target refuses (dual-plane on an NPU with CANN < 9.0.0) is left out
        with a warning.

    Raises:
        SpecError: bad warmup/loops/repeats/prof_pe (before anything runs).
        build.BuildError / TargetUnavailable: the target cannot be built.
    """
    if isinstance(specs, Grid):
        specs = specs.specs
    for label, v, lo in (("warmup", warmup, 0), ("loops", loops, 1), ("repeats", repeats, 1)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
            raise SpecError(f"{label}={v!r}: must be an int >= {lo}")
    build_mod.build(target)
    from tqdm.auto import tqdm
    rows: list[dict] = []
    refused: set[str] = set()
    kw = dict(warmup=int(warmup), loops=int(loops), target=target, min_sdma_bytes=int(min_sdma_bytes),
              prof_pe=prof_pe, timeout_s=timeout_s)
    for spec in tqdm(specs, desc="sweep", unit="case", disable=not progress):
        prepared = None
        try:
            prepared = runner.prepare_case(spec)
            for rep in range(int(repeats)):
                order = list(runner.VARIANTS) if rep % 2 == 0 else list(runner.VARIANTS)[::-1]
                done: list[dict] = []
                try:
                    for variant in order:
                        if variant in refused:
                            continue
                        try:
                            res = runner.run_case(prepared, variant, **kw)
                        except build_mod.VariantRefused as e:
                            refused.add(variant)
                            warnings.warn(str(e), stacklevel=2)
                            continue
                        done += _rows_of(res, spec, target, spec.seed, rep)
                except (LaunchError, OSError) as e:
                    for variant in runner.VARIANTS:
                        rows += _error_rows(spec, variant, target, int(min_sdma_bytes), str(e).splitlines()[0], rep)
                    break
                rows += done
        except OSError as e:  # the case files could not be written
            for variant in runner.VARIANTS:
                rows += _error_rows(spec, variant, target, int(min_sdma_bytes), str(e).splitlines()[0], 0)
        finally:
            if prepared is not None:
                prepared.cleanup()
    tidy = pd.DataFrame(rows, columns=TIDY_COLUMNS)
    if csv_path is not None:
        write_sweep_csv(tidy, csv_path)
    return tidy


def write_sweep_csv(tidy: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write the tidy table as CSV (header = :data:`TIDY_COLUMNS`); folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tidy.to_csv(path, index=False, columns=TIDY_COLUMNS)
    return path


def read_sweep_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a tidy sweep CSV. Raises SpecError when the header is not :data:`TIDY_COLUMNS`."""
    df = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"error": str, "core_times_us": str})
    if list(df.columns) != TIDY_COLUMNS:
        raise SpecError(f"{path}: not a sweep CSV (columns {list(df.columns)[:5]}...)")
    df["error"] = df["error"].fillna("")
    return df


_METRICS = ("comm_only", "full_op")


def _summary_columns() -> list[str]:
    cols = ["case_id", "routing", "dtype", "pes", "bs", "h", "topk", "expert_per_pe", "seed", "target",
            "min_sdma_bytes", "repeats"]
    for m in _METRICS:
        for v in runner.VARIANTS:
            cols += [f"{m}_{v}_us", f"{m}_{v}_lo_us", f"{m}_{v}_hi_us"]
        cols += [f"{m}_speedup", f"{m}_speedup_lo", f"{m}_speedup_hi", f"{m}_verdict"]
    return cols + ["sdma_share", "sdma_bytes", "check_ok", "counters_ok"]


#: Columns of :func:`summarize`, in order.
SUMMARY_COLUMNS = _summary_columns()


def _quartiles(values: np.ndarray) -> tuple[float, float]:
    """First and third quartile (the spread the lab reports: one stray run does not stretch it)."""
    if not values.size:
        return float("nan"), float("nan")
    q1, q3 = np.percentile(values, [25, 75])
    return float(q1), float(q3)


def _verdict(speedups: np.ndarray, sdma_bytes: float) -> str:
    if not speedups.size:
        return "no run"
    if sdma_bytes == 0:
        return NO_SDMA
    n, faster = speedups.size, int((speedups > 1.0).sum())
    if n == 1:
        return f"{'faster' if faster else 'slower'} (1 repeat: no spread)"
    if faster == n:
        return f"faster in all {n} repeats"
    if faster == 0:
        return f"slower in all {n} repeats"
    return f"mixed: faster in {faster} of {n} repeats"


def summarize(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per case: both variants' times with their spread, the speed-up, the SDMA share, the verdicts.

    Per repeat, a variant's time is CoreMaxTime/us of the slowest profiled PE (the
    combine ends when every PE has; with one profiled PE, that PE's). Over the repeats:

    * ``<metric>_<variant>_us``: the median; ``..._lo_us`` / ``..._hi_us``: first and third
      quartile, the spread (metric comm_only or full_op, variant classic or doubleplane);
    * ``<metric>_speedup``: median over repeats of MTE-only time / dual-plane time of the
      same repeat (:data:`SPEEDUP`: above 1, dual-plane faster); ``..._speedup_lo`` /
      ``..._speedup_hi``: its first and third quartile;
    * ``<metric>_verdict``: :data:`NO_SDMA` when the dual-plane run sent nothing by SDMA
      (its speed-up is noise), else how many repeats were faster
      ("faster in all 5 repeats", "slower in all 5 repeats", "mixed: faster in 2 of 5 repeats").

    Also repeats (paired repeats of comm_only), sdma_share (dual-plane run, in [0, 1]),
    sdma_bytes (dual-plane), check_ok (every run PASS), counters_ok (every run). Columns:
    :data:`SUMMARY_COLUMNS`. Failed runs (check ERROR) are left out of the times.
    """
    if tidy.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    out = []
    for key, g in tidy.groupby(_CASE_KEYS, sort=False, dropna=False):
        first = g.iloc[0]
        row = dict(zip(["case_id", "routing", "dtype", "seed", "target", "min_sdma_bytes"], key))
        row.update(pes=int(first["Npus"]), bs=int(first["BS"]), h=int(first["H"]), topk=int(first["TopK"]),
                   expert_per_pe=int(first["ExpertPerPe"]))
        ran = g[g["check"] != "ERROR"]
        dual = ran[ran["variant"] == "doubleplane"]
        row["sdma_share"] = float(dual["sdma_share"].iloc[0]) if len(dual) else float("nan")
        row["sdma_bytes"] = dual["sdma_bytes"].iloc[0] if len(dual) else float("nan")
        for metric in _METRICS:
            sel = ran[ran["Metric"] == metric]
            per = sel.groupby(["variant", "repeat"])["CoreMaxTime/us"].max()  # slowest profiled PE
            times = {}
            for v in runner.VARIANTS:
                t = per[v] if v in per.index.get_level_values(0) else pd.Series(dtype=float)
                times[v] = t
                vals = t.to_numpy(dtype=float)
                row[f"{metric}_{v}_us"] = float(np.median(vals)) if vals.size else float("nan")
                row[f"{metric}_{v}_lo_us"], row[f"{metric}_{v}_hi_us"] = _quartiles(vals)
            paired = (times["classic"] / times["doubleplane"]).dropna().to_numpy(dtype=float)
            row[f"{metric}_speedup"] = float(np.median(paired)) if paired.size else float("nan")
            row[f"{metric}_speedup_lo"], row[f"{metric}_speedup_hi"] = _quartiles(paired)
            row[f"{metric}_verdict"] = _verdict(paired, row["sdma_bytes"])
            if metric == "comm_only":
                row["repeats"] = int(paired.size)
        row["check_ok"] = bool((g["check"] == "PASS").all())
        row["counters_ok"] = bool(g["counters_ok"].astype(bool).all())
        out.append(row)
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


def _check_metric(metric: str) -> str:
    if metric not in _METRICS:
        raise SpecError(f"metric={metric!r}: must be 'comm_only' or 'full_op'")
    return metric


def losses(summary: pd.DataFrame, metric: str = "comm_only") -> pd.DataFrame:
    """The cases where dual-plane loses on ``metric`` ('comm_only' or 'full_op'): median
    speed-up below 1 among the cases that sent anything by SDMA (an SDMA share of 0 means
    identical traffic: no loss to speak of), worst first. Columns: the case, sdma_share,
    both variants' times with their spread (quartiles), the speed-up likewise and the verdict
    (which says whether every repeat agreed), check_ok."""
    metric = _check_metric(metric)
    col = f"{metric}_speedup"
    keep = ["case_id", "routing", "dtype", "pes", "bs", "h", "topk", "expert_per_pe", "sdma_share"]
    for v in runner.VARIANTS:
        keep += [f"{metric}_{v}_us", f"{metric}_{v}_lo_us", f"{metric}_{v}_hi_us"]
    keep += [col, f"{col}_lo", f"{col}_hi", f"{metric}_verdict", "check_ok"]
    lost = summary[(summary["sdma_bytes"] > 0) & (summary[col] < 1.0)]
    return lost.sort_values(col, ascending=True)[keep].reset_index(drop=True)


def _spread(mid: float, lo: float, hi: float, fmt: str) -> str:
    if not np.isfinite(mid):
        return "-"
    if lo == hi:
        return format(mid, fmt)
    return f"{format(mid, fmt)} [{format(lo, fmt)}-{format(hi, fmt)}]"


def readable(summary: pd.DataFrame, metric: str = "comm_only") -> pd.DataFrame:
    """:func:`summarize` (or :func:`losses`) rows as a table to read: per case the SDMA
    share (%), both variants' times "median [q1-q3]" (us, over repeats: median and the
    quartiles around it), the speed-up likewise (MTE-only / dual-plane, above 1: dual-plane
    faster) and the verdict."""
    metric = _check_metric(metric)
    rows = []
    for _, r in summary.iterrows():
        rows.append({
            "case": r["case_id"], "routing": r["routing"], "SDMA share (%)": f"{100 * r['sdma_share']:.1f}",
            f"{metric} MTE-only (us)": _spread(r[f"{metric}_classic_us"], r[f"{metric}_classic_lo_us"],
                                              r[f"{metric}_classic_hi_us"], ".0f"),
            f"{metric} dual-plane (us)": _spread(r[f"{metric}_doubleplane_us"], r[f"{metric}_doubleplane_lo_us"],
                                                r[f"{metric}_doubleplane_hi_us"], ".0f"),
            "speed-up MTE-only/dual (1)": _spread(r[f"{metric}_speedup"], r[f"{metric}_speedup_lo"],
                                                  r[f"{metric}_speedup_hi"], ".2f"),
            "verdict": r[f"{metric}_verdict"],
        })
    return pd.DataFrame(rows, columns=["case", "routing", "SDMA share (%)", f"{metric} MTE-only (us)",
                                       f"{metric} dual-plane (us)", "speed-up MTE-only/dual (1)", "verdict"])
