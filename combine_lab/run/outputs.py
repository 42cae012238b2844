"""Reading what a run leaves behind: perf CSVs (combine-facts section 8) and twin counters.

Perf rows: two per profiled PE and case, Metric ``full_op`` (whole combine) and
``comm_only`` (stage 1 with its status protocol). Times are microseconds, bandwidths GiB/s.
Twin counters: per PE and plane (MTE, SDMA) the payload puts and bytes, quiets and status
writes of the last launch and of all launches.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterable

import pandas as pd

PERF_COLUMNS = [
    "DataSize/B", "Npus", "Blocks", "UBsize/KB", "Bandwidth/GB/s", "CoreMaxTime/us", "Metric",
    "GlobalDataSize/B", "PerPeBandwidth/GB/s", "BS", "H", "TopK", "ExpertPerPe", "Dtype", "Warmup", "Loops",
    "ProfPe", "CaseId",
]
CORE_COLUMN = "SingleCoreTime/us"
_INT_COLUMNS = ["DataSize/B", "Npus", "Blocks", "UBsize/KB", "GlobalDataSize/B", "BS", "H", "TopK", "ExpertPerPe",
                "Warmup", "Loops", "ProfPe"]
_FLOAT_COLUMNS = ["Bandwidth/GB/s", "CoreMaxTime/us", "PerPeBandwidth/GB/s"]
COUNTER_FIELDS = ["puts", "bytes", "quiets", "status_writes", "status_bytes"]


class ResultFileError(ValueError):
    """A perf CSV or counters file is missing or not in the expected format (message names the file)."""


def perf_csv_name(name: str, rank: int) -> str:
    """``<name>_perf_rank<r>.csv`` (combine-facts section 8)."""
    return f"{name}_perf_rank{rank}.csv"


def counters_name(name: str, rank: int) -> str:
    """``<name>_counters_rank<r>.json``: the twin's counters beside ``perf_csv_name(name, r)``
    (host/combine_host.cpp derives it from the CSV path the same way)."""
    return f"{name}_counters_rank{rank}.json"


def read_perf_csv(path: str | Path) -> pd.DataFrame:
    """Read one perf CSV into a DataFrame.

    Returns:
        The 18 fixed columns of combine-facts section 8 (ints, floats, ``Metric`` and
        ``CaseId`` strings) plus ``core_times_us``: a tuple with one ``SingleCoreTime/us``
        value (us) per core, since the number of cores differs between cases.

    Raises:
        ResultFileError: missing file, header not as in section 8, or a row of the wrong width.
    """
    path = Path(path)
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise ResultFileError(f"{path}: cannot read perf CSV ({e.strerror})") from None
    records = []
    header: list[str] | None = None
    for i, row in enumerate(rows):
        if not row:
            continue
        if row[0] == PERF_COLUMNS[0]:  # header (repeated when files were concatenated)
            if row[:len(PERF_COLUMNS)] != PERF_COLUMNS or any(c != CORE_COLUMN for c in row[len(PERF_COLUMNS):]):
                raise ResultFileError(f"{path}: line {i + 1}: header is not the combine-facts section 8 header")
            header = row
            continue
        if header is None:
            raise ResultFileError(f"{path}: line {i + 1}: data before the header")
        if len(row) < len(PERF_COLUMNS):
            raise ResultFileError(f"{path}: line {i + 1}: {len(row)} fields, expected at least {len(PERF_COLUMNS)}")
        rec = dict(zip(PERF_COLUMNS, row[:len(PERF_COLUMNS)]))
        rec["core_times_us"] = tuple(float(v) for v in row[len(PERF_COLUMNS):] if v != "")
        records.append(rec)
    df = pd.DataFrame.from_records(records, columns=PERF_COLUMNS + ["core_times_us"])
    for c in _INT_COLUMNS:
        df[c] = df[c].astype("int64")
    for c in _FLOAT_COLUMNS:
        df[c] = df[c].astype("float64")
    return df


def write_perf_csv(df: pd.DataFrame, path: str | Path) -> Path:
    """Write rows of :func:`read_perf_csv` form back in the section 8 format.

    Rows with fewer cores than the widest row leave the trailing core columns empty.
    """
    path = Path(path)
    width = max((len(t) for t in df["core_times_us"]), default=0)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(PERF_COLUMNS + [CORE_COLUMN] * width)
        for _, r in df.iterrows():
            fixed = [r[c] for c in PERF_COLUMNS]
            cores = [f"{v:.6f}" for v in r["core_times_us"]]
            w.writerow(fixed + cores + [""] * (width - len(cores)))
    return path


def write_summary_csv(paths: Iterable[str | Path], out: str | Path) -> pd.DataFrame:
    """Collect the rows of several per-rank perf CSVs into one summary CSV at ``out``.

    Returns the combined DataFrame (ordered by CaseId, ProfPe, Metric as read).
    """
    frames = [read_perf_csv(p) for p in paths]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=PERF_COLUMNS + ["core_times_us"])
    write_perf_csv(df, out)
    return df


def read_counters(path: str | Path) -> dict:
    """Read one twin counters file (``<name>_counters_rank<r>.json``).

    Returns:
        ``{"pe": int, "launches": int, "last": {"MTE": {...}, "SDMA": {...}}, "total": {...}}``
        where each plane holds ``puts``, ``bytes`` (payload, bytes), ``quiets``,
        ``status_writes`` and ``status_bytes``.

    Raises:
        ResultFileError: missing or malformed file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        for which in ("last", "total"):
            for plane in ("MTE", "SDMA"):
                for field in COUNTER_FIELDS:
                    int(data[which][plane][field])
        return data
    except OSError as e:
        raise ResultFileError(f"{path}: cannot read twin counters ({e.strerror})") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ResultFileError(f"{path}: not a twin counters file ({e!r})") from None


def counters_frame(counters: list[dict], which: str = "last") -> pd.DataFrame:
    """One row per (pe, plane) with the :data:`COUNTER_FIELDS` of ``which`` ("last" or "total")."""
    rows = []
    for c in counters:
        for plane in ("MTE", "SDMA"):
            rows.append({"pe": c["pe"], "plane": plane, **{k: int(c[which][plane][k]) for k in COUNTER_FIELDS}})
    return pd.DataFrame(rows, columns=["pe", "plane", *COUNTER_FIELDS])
