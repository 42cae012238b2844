"""Sweeps: run every case of a grid for both variants and collect one tidy table.

    grid = make_grid(pes=[2], bs=[8, 16], h=[1024, 4096], topk=[2], expert_per_pe=[2],
                     routings=["uniform", "zipf:1.2"])
    tidy = run_sweep(grid.specs, warmup=1, loops=3, csv_path="out/sweep.csv")
    summary = summarize(tidy); losses(summary)

The tidy table has one row per (case, variant, profiled PE, metric): the perf columns
of combine-facts section 8 (times in us, bandwidths in GiB/s) plus what the perf CSV
does not say: variant, routing, plane bytes, the x_out verdict and whether the twin's
counters equal the plan.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import build as build_mod
from . import runner
from .errors import SpecError
from .labio import as_list
from .launch import LaunchError
from .planner import DEFAULT_MIN_SDMA_BYTES
from .results import PERF_COLUMNS
from .spec import CaseSpec

__all__ = ["Grid", "make_grid", "run_sweep", "TIDY_COLUMNS", "EXTRA_COLUMNS", "write_sweep_csv", "read_sweep_csv",
           "summarize", "losses"]

#: Columns the tidy table adds to the perf columns (combine-facts section 8).
EXTRA_COLUMNS = [
    "variant",            # classic | doubleplane
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


def _rows_of(res: runner.RunResult, spec: CaseSpec, target: str, seed: int) -> list[dict]:
    pb = res.plane_bytes()
    if len(pb):
        mte, sdma = int(pb["mte_bytes"].sum()), int(pb["sdma_bytes"].sum())
    else:  # no counters (NPU): the plan is what was sent
        mte, sdma = int(res.plan.totals["mte_bytes"].sum()), int(res.plan.totals["sdma_bytes"].sum())
    extra = {
        "variant": res.variant, "policy": res.policy, "routing": res.routing, "seed": seed, "target": target,
        "min_sdma_bytes": res.min_sdma_bytes, "mte_bytes": mte, "sdma_bytes": sdma,
        "planned_sdma_bytes": int(res.plan.totals["sdma_bytes"].sum()), "payload_bytes": mte + sdma,
        "sdma_share": sdma / (mte + sdma) if mte + sdma else 0.0,
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


def _error_rows(spec: CaseSpec, variant: str, target: str, min_sdma_bytes: int, message: str) -> list[dict]:
    base = {c: np.nan for c in PERF_COLUMNS}
    base.update({"Npus": spec.pes, "BS": spec.bs, "H": spec.h, "TopK": spec.topk, "ExpertPerPe": spec.expert_per_pe,
                 "Dtype": spec.dtype, "CaseId": spec.case_id, "core_times_us": ""})
    extra = {"variant": variant, "policy": runner.VARIANTS[variant], "routing": spec.routing, "seed": spec.seed,
             "target": target, "min_sdma_bytes": min_sdma_bytes, "mte_bytes": np.nan, "sdma_bytes": np.nan,
             "planned_sdma_bytes": np.nan, "payload_bytes": np.nan, "sdma_share": np.nan, "check": "ERROR",
             "max_abs_err": np.nan, "counters_ok": False, "error": message}
    return [{**base, "Metric": m, **extra} for m in ("full_op", "comm_only")]


def run_sweep(specs, *, warmup: int = 0, loops: int = 2, target: str = "cpu",
              min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES, prof_pe: int | str = 0, timeout_s: float = 120.0,
              csv_path: str | os.PathLike | None = None, progress: bool = True) -> pd.DataFrame:
    """Run classic and dual-plane on every spec (:func:`combine_lab.runner.compare`) and tidy the results.

    Args:
        specs: CaseSpecs (e.g. ``make_grid(...).specs``) or a :class:`Grid`.
        warmup, loops: launches before and during profiling (loops >= 1).
        target: ``cpu`` (twin) or ``npu``; built once before the first case.
        min_sdma_bytes: SDMA floor, bytes.
        prof_pe: the PE profiled, or ``"all"`` (one run per PE: pes times slower).
        timeout_s: limit per launch of all PEs, seconds.
        csv_path: if given, the tidy table is written there (:func:`write_sweep_csv`).
        progress: show a tqdm progress bar (one step per case).

    Returns:
        The tidy DataFrame (:data:`TIDY_COLUMNS`), one row per (case, variant, profiled
        PE, metric). A case whose run fails gets rows with check ``ERROR`` and the message
        in ``error``; the sweep goes on.

    Raises:
        SpecError: bad warmup/loops/prof_pe (before anything runs).
        build.BuildError / TargetUnavailable: the target cannot be built.
    """
    if isinstance(specs, Grid):
        specs = specs.specs
    for label, v, lo in (("warmup", warmup, 0), ("loops", loops, 1)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
            raise SpecError(f"{label}={v!r}: must be an int >= {lo}")
    build_mod.build(target)
    from tqdm.auto import tqdm
    rows: list[dict] = []
    for spec in tqdm(specs, desc="sweep", unit="case", disable=not progress):
        try:
            runs = runner.compare(spec, warmup=int(warmup), loops=int(loops), target=target,
                                  min_sdma_bytes=int(min_sdma_bytes), prof_pe=prof_pe, timeout_s=timeout_s)
        except (LaunchError, OSError) as e:
            for variant in runner.VARIANTS:
                rows += _error_rows(spec, variant, target, int(min_sdma_bytes), str(e).splitlines()[0])
            continue
        for res in runs.values():
            rows += _rows_of(res, spec, target, spec.seed)
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


def summarize(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per case: times of both variants, their ratio, the SDMA share and the verdicts.

    Columns: case_id, routing, dtype, pes, bs, h, topk, expert_per_pe, seed, target,
    min_sdma_bytes, comm_only_classic_us, comm_only_doubleplane_us, full_op_classic_us,
    full_op_doubleplane_us (CoreMaxTime/us, mean over profiled PEs), comm_only_ratio and
    full_op_ratio (dual-plane / MTE-only: below 1 means dual-plane is faster),
    comm_only_speedup (MTE-only / dual-plane), sdma_share (of the dual-plane run, in [0, 1]),
    sdma_bytes (dual-plane), check_ok (both variants PASS), counters_ok (both).
    """
    cols = ["case_id", "routing", "dtype", "pes", "bs", "h", "topk", "expert_per_pe", "seed", "target",
            "min_sdma_bytes", "comm_only_classic_us", "comm_only_doubleplane_us", "full_op_classic_us",
            "full_op_doubleplane_us", "comm_only_ratio", "full_op_ratio", "comm_only_speedup", "sdma_share",
            "sdma_bytes", "check_ok", "counters_ok"]
    if tidy.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for key, g in tidy.groupby(_CASE_KEYS, sort=False, dropna=False):
        first = g.iloc[0]
        row = dict(zip(["case_id", "routing", "dtype", "seed", "target", "min_sdma_bytes"], key))
        row.update(pes=int(first["Npus"]), bs=int(first["BS"]), h=int(first["H"]), topk=int(first["TopK"]),
                   expert_per_pe=int(first["ExpertPerPe"]))
        for metric in ("comm_only", "full_op"):
            for v in runner.VARIANTS:
                sel = g[(g["Metric"] == metric) & (g["variant"] == v)]["CoreMaxTime/us"]
                row[f"{metric}_{v}_us"] = float(sel.mean()) if len(sel) else float("nan")
            row[f"{metric}_ratio"] = row[f"{metric}_doubleplane_us"] / row[f"{metric}_classic_us"]
        row["comm_only_speedup"] = 1.0 / row["comm_only_ratio"]
        dual = g[g["variant"] == "doubleplane"]
        row["sdma_share"] = float(dual["sdma_share"].iloc[0]) if len(dual) else float("nan")
        row["sdma_bytes"] = dual["sdma_bytes"].iloc[0] if len(dual) else float("nan")
        row["check_ok"] = bool((g["check"] == "PASS").all())
        row["counters_ok"] = bool(g["counters_ok"].astype(bool).all())
        out.append(row)
    return pd.DataFrame(out, columns=cols)


def losses(summary: pd.DataFrame, metric: str = "comm_only") -> pd.DataFrame:
    """The cases where dual-plane is slower than MTE-only on ``metric`` ('comm_only' or
    'full_op'): summary rows with ``<metric>_ratio > 1``, worst first."""
    if metric not in ("comm_only", "full_op"):
        raise SpecError(f"metric={metric!r}: must be 'comm_only' or 'full_op'")
    col = f"{metric}_ratio"
    keep = ["case_id", "routing", "dtype", "pes", "bs", "h", "topk", "expert_per_pe", f"{metric}_classic_us",
            f"{metric}_doubleplane_us", col, "sdma_share", "check_ok"]
    return summary[summary[col] > 1.0].sort_values(col, ascending=False)[keep].reset_index(drop=True)
