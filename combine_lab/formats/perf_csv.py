"""The files a run leaves, named, written and read in this one place.

Perf CSVs (docs/formats.md#3-perf-csv, the reference's format, so that its tools read ours):

- one per profiled rank, ``combine_perf_rank<r>.csv`` (classic) or
  ``combine_doubleplane_perf_rank<r>.csv`` (doubleplane), written by the host driver
  (host/perf_csv.cpp) and appended here run after run (:func:`append_perf_csv`);
- the summary of a ``--prof-pe all`` run, ``combine_perf_summary.csv`` /
  ``combine_doubleplane_perf_summary.csv`` (:func:`write_summary_csv`).

Header: the 19 names of :data:`PERF_HEADER`, once. A row: 18 fixed fields, then one time per
core that recorded the frame, in core order (the first under ``SingleCoreTime/us``, the rest
unnamed). Integers as integers, every float with 4 decimals. Two rows per case and profiled PE,
Metric ``full_op`` and ``comm_only``. Times are microseconds; "GB/s" is 2^30 bytes per second.

The lab's own information never goes into these CSVs: variant, routing, planned and counted
plane bytes, the twin's counters and protocol violations of a case go to a sidecar beside them,
``<prefix>_counters_<case_id>.json`` (:func:`counters_name`). ``-a plot`` and ``-a md`` add
``<prefix>_perf_<metric>.png`` and ``<prefix>_perf_report.md`` (:func:`figure_name`,
:func:`report_name`). ``<prefix>`` is :data:`FILE_PREFIX` of the variant.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pandas as pd

from ..kernels import CLASSIC
from ..kernels import FILE_PREFIX as KERNEL_FILE_PREFIX
from ..errors import ResultFileError
from .files import STAGING_PREFIX, write_atomic

#: The file-name prefix of each variant, as the reference names its two drivers' files.
FILE_PREFIX = KERNEL_FILE_PREFIX  # the descriptor's (combine_lab.kernels)

#: The 18 fixed fields of a perf row (docs/formats.md#3-perf-csv), in order.
PERF_COLUMNS = [
    "DataSize/B", "Npus", "Blocks", "UBsize/KB", "Bandwidth/GB/s", "CoreMaxTime/us", "Metric",
    "GlobalDataSize/B", "PerPeBandwidth/GB/s", "BS", "H", "TopK", "ExpertPerPe", "Dtype", "Warmup", "Loops",
    "ProfPe", "CaseId",
]
#: The name over the first per-core time; the other cores' times follow it unnamed.
CORE_COLUMN = "SingleCoreTime/us"
#: The header line of every perf CSV and summary: exactly these 19 names.
PERF_HEADER = PERF_COLUMNS + [CORE_COLUMN]
#: The fields a summary groups rows by (docs/formats.md#4-summary-csv); per group the slowest row wins.
SUMMARY_KEYS = ["Metric", "DataSize/B", "GlobalDataSize/B", "Npus", "Blocks", "UBsize/KB", "BS", "H", "TopK",
                "ExpertPerPe", "Dtype", "Warmup", "Loops", "CaseId"]
#: ProfPe of a summary row: the slowest profiled PE of its group.
SUMMARY_PROF_PE = "max"
#: The two metrics of a perf CSV, in the order each case writes them.
PERF_METRICS = ("full_op", "comm_only")

_INT_COLUMNS = ["DataSize/B", "Npus", "Blocks", "UBsize/KB", "GlobalDataSize/B", "BS", "H", "TopK", "ExpertPerPe",
                "Warmup", "Loops"]
_FLOAT_COLUMNS = ["Bandwidth/GB/s", "CoreMaxTime/us", "PerPeBandwidth/GB/s"]



# ----------------------------------------------------------------------------------------- names

def file_prefix(variant: str) -> str:
    """``combine`` (classic) or ``combine_doubleplane``: the start of every file name of ``variant``;
    a variant label with kernel settings (docs/variants.md) adds them, ``-`` as ``_``:
    ``doubleplane-segment-c6`` -> ``combine_doubleplane_segment_c6``, ``classic-c4`` -> ``combine_c4``.

    Raises:
        ResultFileError: ``variant`` is neither a variant nor a label of one with kernel settings.
    """
    if variant in FILE_PREFIX:
        return FILE_PREFIX[variant]
    # the labels of combine_lab.planning.settings.variant_label, read here without the planner
    m = _LABEL.match(str(variant))
    if not m or (m[1] == CLASSIC and m[2]) or not (m[2] or m[3]):
        raise ResultFileError(f"variant={variant!r}: must be one of {', '.join(map(repr, FILE_PREFIX))}, or one "
                              "with kernel settings such as 'doubleplane-segment-c6'", parameter="variant",
                              value=variant)
    return FILE_PREFIX[m[1]] + "".join(f"_{x[1:]}" for x in (m[2], m[3]) if x)


_LABEL = re.compile(r"^(classic|doubleplane)(-segment)?(-c[1-9]\d*)?$")


def perf_csv_name(variant: str, rank: int) -> str:
    """``combine_perf_rank<r>.csv`` / ``combine_doubleplane_perf_rank<r>.csv`` (docs/formats.md#3-perf-csv)."""
    return f"{file_prefix(variant)}_perf_rank{int(rank)}.csv"


def perf_summary_name(variant: str) -> str:
    """``combine_perf_summary.csv`` / ``combine_doubleplane_perf_summary.csv`` (docs/formats.md#4-summary-csv)."""
    return f"{file_prefix(variant)}_perf_summary.csv"


def counters_name(variant: str, case_id: str) -> str:
    """``<prefix>_counters_<case_id>.json``: the lab's sidecar of one case (one per case of a sweep)."""
    return f"{file_prefix(variant)}_counters_{case_id}.json"


def figure_name(variant: str, metric: str) -> str:
    """``<prefix>_perf_<metric>.png``: the ``-a plot`` figure of one metric."""
    return f"{file_prefix(variant)}_perf_{metric}.png"


def comparison_figure_name(metric: str) -> str:
    """``combine_compare_<metric>.png``: the ``-a plot`` figure of every variant of a run, in its output folder."""
    return f"combine_compare_{metric}.png"


def speedup_figure_name(metric: str) -> str:
    """``combine_speedup_<metric>.png``: the ``-a plot`` figure of every kernel's speed-up against its
    baseline (your kernels and the lab's: docs/cli.md#9-repeats-spread-and-verdicts), in the run's output folder."""
    return f"combine_speedup_{metric}.png"


def report_name(variant: str) -> str:
    """``<prefix>_perf_report.md``: the ``-a md`` tables."""
    return f"{file_prefix(variant)}_perf_report.md"


def driver_counters_name(csv_name: str) -> str:
    """The twin's per-rank counters file the driver writes beside its CSV in the run's own folder:
    ``..._perf_rank<r>.csv`` -> ``..._counters_rank<r>.json`` (host/combine_host.cpp derives it
    the same way). Internal to one run; the output folder gets :func:`counters_name` instead."""
    return csv_name.replace("_perf_rank", "_counters_rank").removesuffix(".csv") + ".json"


def variant_dir(output_dir: str | Path, variant: str, separate: bool) -> Path:
    """Where ``variant``'s files go: ``output_dir`` itself, or ``output_dir/<variant>`` when
    several variants share it (``compare``), so that a summariser reading one folder with a
    pattern such as ``*_perf_rank*.csv`` never mixes the variants' rows."""
    return Path(output_dir) / variant if separate else Path(output_dir)


def _rank_pattern(variant: str) -> re.Pattern:
    return re.compile(rf"{re.escape(file_prefix(variant))}_perf_rank(\d+)\.csv")


def rank_files(folder: str | Path, variant: str) -> list[Path]:
    """The per-rank perf CSVs of ``variant`` in ``folder``, in name order (rank10 before rank2,
    as a sorted glob lists them: the order a summariser reads them in)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    pat = _rank_pattern(variant)
    return sorted((p for p in folder.iterdir() if pat.fullmatch(p.name)), key=lambda p: p.name)


def clear_outputs(folder: str | Path, variant: str, keep: Iterable[str] = ()) -> list[Path]:
    """Remove what an earlier run of ``variant`` left in ``folder``: its per-rank perf CSVs, summary,
    counters sidecars, figures and report (only files with those exact names; the other variant's
    and anything else stay, and so do the names in ``keep``: this run's). Returns the removed paths.
    One run's folder then holds that run.

    Raises:
        ResultFileError: a file that cannot be removed (the message names it)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    prefix = re.escape(file_prefix(variant))
    metric = "|".join(PERF_METRICS)
    pat = re.compile(rf"{prefix}_(perf_rank\d+\.csv|perf_summary\.csv|counters_shape_[0-9_]+\.json|"
                     rf"perf_({metric})\.png|perf_report\.md)")
    removed = []
    keep = set(keep)
    for p in sorted(folder.iterdir()):
        if p.is_file() and pat.fullmatch(p.name) and p.name not in keep:
            try:
                p.unlink()
            except OSError as e:
                raise ResultFileError(f"{p}: cannot remove the file of an earlier run ({e.strerror})",
                                      parameter="folder", value=p) from None
            removed.append(p)
    return removed


@contextlib.contextmanager
def staged_outputs(folders: Mapping[str, str | Path], removed: dict | None = None,
                   rules: Mapping[str, str] | None = None) -> Iterator[dict[str, Path]]:
    """A staging folder per variant (``<folder>/.staging-<pid>``) for a run to write its files in;
    when the block ends without error each variant's folder takes the new files (each renamed into
    place, replacing the file of the same name) and only then loses what an earlier run of that
    variant left there and this run did not replace (:func:`clear_outputs`); on any error (a failed
    launch, a full disk, Ctrl-C) the staging folders are removed and the folders keep what they
    held. A failed run never leaves a folder emptier than before, nor half of this run's files.

    ``folders``: variant -> its output folder (existing); ``removed``, if given, gets variant -> the
    earlier run's files removed at the end. Yields variant -> staging folder. ``rules``: for a key
    that is your kernel's label (``reference:doubleplane``), the variant whose file names it writes.

    Raises:
        ResultFileError: a file that cannot be moved into place or removed (named).
    """
    stage = {v: Path(f) / f"{STAGING_PREFIX}{os.getpid()}" for v, f in folders.items()}
    try:
        for st in stage.values():
            shutil.rmtree(st, ignore_errors=True)
            st.mkdir(parents=True)
        yield stage
        for v, folder in folders.items():
            folder, st = Path(folder), stage[v]
            new = sorted(st.iterdir())
            for f in new:
                try:
                    os.replace(f, folder / f.name)
                except OSError as e:
                    raise ResultFileError(f"{folder / f.name}: cannot put this run's file in place ({e.strerror})",
                                          parameter="folders", value=folder / f.name)
            gone = clear_outputs(folder, (rules or {}).get(v, v), keep={f.name for f in new})
            if removed is not None:
                removed[v] = gone
    finally:
        for st in stage.values():
            shutil.rmtree(st, ignore_errors=True)


# ---------------------------------------------------------------------------------- number format

def fixed4(value: float) -> str:
    """A float as every perf CSV writes it: fixed-point, exactly 4 decimals (``%.4f``)."""
    return f"{value:.4f}"


def gib_per_s(nbytes: float, us: float) -> float:
    """Bandwidth of ``nbytes`` moved in ``us`` microseconds: bytes/us * 1e6 / 2^30 ("GB/s" in the
    CSV header); 0 when the time is not positive."""
    return nbytes / us * 1e6 / 2**30 if us > 0 else 0.0


# ------------------------------------------------------------------------------------ reading CSVs

def read_perf_rows(path: str | Path) -> list[list[str]]:
    """The data rows of one perf CSV (per-rank or summary) as the strings written, each with at
    least the 18 fixed fields; the fields after ``CaseId`` are the per-core times.

    Raises:
        ResultFileError: missing file, a header other than :data:`PERF_HEADER` (e.g. one that
            repeats ``SingleCoreTime/us``), or a row with fewer than 18 fields.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ResultFileError(f"{path}: cannot read perf CSV ({e.strerror})", parameter="path", value=path) from None
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows or rows[0] != PERF_HEADER:
        got = ",".join(rows[0]) if rows else "nothing"
        raise ResultFileError(f"{path}: line 1: header is {got[:120]!r}; a perf CSV starts with the 19 names of "
                              f"docs/formats.md#3-perf-csv ({','.join(PERF_HEADER[:3])},...,{CORE_COLUMN}), once",
                              parameter="path", value=path)
    out = []
    for i, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if row == PERF_HEADER:
            raise ResultFileError(f"{path}: line {i}: a second header; a perf CSV has one", parameter="path",
                                  value=path)
        if len(row) < len(PERF_COLUMNS):
            raise ResultFileError(f"{path}: line {i}: {len(row)} fields, expected at least {len(PERF_COLUMNS)}",
                                  parameter="path", value=path)
        out.append(row)
    return out


def read_perf_csv(path: str | Path) -> pd.DataFrame:
    """Read one perf CSV (per-rank or summary) into a DataFrame.

    Returns:
        The 18 fixed columns of docs/formats.md#3-perf-csv (ints; bandwidths GiB/s and
        CoreMaxTime/us as floats; ``Metric``, ``Dtype``, ``CaseId`` strings; ``ProfPe`` an int,
        or ``"max"`` in a summary) plus ``core_times_us``: a tuple of the row's per-core times (us),
        one per core that recorded the frame (a summary keeps the first core's only).

    Raises:
        ResultFileError: as :func:`read_perf_rows`, or a number that does not parse.
    """
    records = []
    for row in read_perf_rows(path):
        rec = dict(zip(PERF_COLUMNS, row[:len(PERF_COLUMNS)]))
        try:
            for c in _INT_COLUMNS:
                rec[c] = int(rec[c])
            for c in _FLOAT_COLUMNS:
                rec[c] = float(rec[c])
            rec["ProfPe"] = rec["ProfPe"] if rec["ProfPe"] == SUMMARY_PROF_PE else int(rec["ProfPe"])
            rec["core_times_us"] = tuple(float(v) for v in row[len(PERF_COLUMNS):] if v != "")
        except ValueError as e:
            raise ResultFileError(f"{path}: {rec.get('CaseId', '?')} {rec.get('Metric', '?')}: {e}", parameter="path",
                                  value=path) from None
        records.append(rec)
    df = pd.DataFrame.from_records(records, columns=PERF_COLUMNS + ["core_times_us"])
    for c in _INT_COLUMNS:
        df[c] = df[c].astype("int64")
    for c in _FLOAT_COLUMNS:
        df[c] = df[c].astype("float64")
    if len(df) and all(isinstance(v, int) for v in df["ProfPe"]):
        df["ProfPe"] = df["ProfPe"].astype("int64")
    return df


# ------------------------------------------------------------------------------------ writing CSVs

def perf_row_fields(row) -> list[str]:
    """One row of :func:`read_perf_csv` form (a dict or Series with :data:`PERF_COLUMNS` and
    ``core_times_us``) as the driver writes it: integers as integers, floats ``%.4f``, then one
    field per core time."""
    out = []
    for c in PERF_COLUMNS:
        v = row[c]
        out.append(fixed4(float(v)) if c in _FLOAT_COLUMNS else str(int(v)) if c in _INT_COLUMNS else str(v))
    return out + [fixed4(float(t)) for t in row["core_times_us"]]


def _csv_text(rows: Iterable[list[str]], lineterminator: str = "\n") -> str:
    buf = io.StringIO(newline="")
    csv.writer(buf, lineterminator=lineterminator).writerows(rows)
    return buf.getvalue()


def write_perf_csv(df: pd.DataFrame, path: str | Path) -> Path:
    """Write rows of :func:`read_perf_csv` form to ``path`` (replacing it, whole or not at all:
    :func:`combine_lab.formats.files.write_atomic`) in the per-rank format: the header once, each
    row by :func:`perf_row_fields`, lines ending in ``\n`` as the driver's.
    ``read_perf_csv(write_perf_csv(read_perf_csv(p), q))`` gives the same rows, and ``q`` the bytes of ``p``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, _csv_text([PERF_HEADER] + [perf_row_fields(r) for _, r in df.iterrows()]))


def _existing_rows_text(dst: Path) -> str:
    """``dst``'s text when it is a perf CSV ('' when it is new or empty). Raises ResultFileError for
    another file (its header is not the 19 names)."""
    if not dst.is_file() or not dst.stat().st_size:
        return ""
    text = dst.read_text(encoding="utf-8")
    first = text.split("\n", 1)[0].rstrip("\r")
    if first != ",".join(PERF_HEADER):
        raise ResultFileError(f"{dst}: not a docs/formats.md#3-perf-csv perf CSV (header {first[:80]!r}); "
                              f"remove it or choose another output folder", parameter="dst", value=dst)
    return text


def append_perf_rows(rows: pd.DataFrame, dst: str | Path) -> Path:
    """Append ``rows`` (:func:`read_perf_csv` form) to the per-rank CSV ``dst`` as the reference's
    driver appends: the header first when ``dst`` is new or empty, then each row by
    :func:`perf_row_fields` (the driver's own bytes for rows read from its file). The file is
    replaced whole (the old rows and the new in a temporary file, then renamed): a failed write
    leaves the old file as it was. Folders are created.

    Raises:
        ResultFileError: ``dst`` exists with another header (a file of another format: remove it or
            write elsewhere), or the write failed (the file, bytes and errno named).
    """
    dst = Path(dst)
    old = _existing_rows_text(dst)
    new = _csv_text(([] if old else [PERF_HEADER]) + [perf_row_fields(r) for _, r in rows.iterrows()])
    dst.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(dst, old + new)


def append_perf_csv(src: str | Path, dst: str | Path) -> Path:
    """Append the rows of ``src`` (a per-rank CSV the driver wrote in one run's folder) to ``dst``
    byte for byte, writing the header first when ``dst`` is new or empty, as the reference's
    driver appends; ``dst`` is replaced whole (:func:`append_perf_rows`). Folders are created.

    Raises:
        ResultFileError: ``src`` is not a perf CSV, or ``dst`` exists with another header (a file
            of another format: remove it or write elsewhere), or the write failed.
    """
    src, dst = Path(src), Path(dst)
    read_perf_rows(src)  # validates the header and every row
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    old = _existing_rows_text(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(dst, old + "".join(lines[1:] if old else lines))


def summary_rows(paths: Iterable[str | Path]) -> list[list[str]]:
    """The summary of per-rank perf CSVs by the rules of docs/formats.md#4-summary-csv.

    Rows of ``paths`` (read in the order given) are grouped by :data:`SUMMARY_KEYS`; per group
    the row with the largest CoreMaxTime/us wins (the first one read on a tie); its Bandwidth and
    PerPeBandwidth are recomputed from that CoreMaxTime as written (4 decimals) and its ProfPe
    becomes ``max``. Groups are sorted by (Metric, Npus, DataSize/B, CaseId), stably. A summary
    row has the 19 fields of the header: the per-core times beyond the first are not named by
    the header and are left out (so the reference's summariser writes the same row), and a
    row with no core time gets an empty ``SingleCoreTime/us``.
    """
    groups: dict[tuple, list[str]] = {}
    for path in paths:
        for row in read_perf_rows(path):
            named = (row + [""])[:len(PERF_HEADER)]  # the fields the header names
            rec = dict(zip(PERF_HEADER, named))
            key = tuple(rec[k] for k in SUMMARY_KEYS)
            best = groups.get(key)
            if best is None or float(rec["CoreMaxTime/us"]) > float(best[PERF_HEADER.index("CoreMaxTime/us")]):
                groups[key] = named
    out = []
    col = {name: i for i, name in enumerate(PERF_HEADER)}
    for row in groups.values():
        row = list(row)
        us = float(row[col["CoreMaxTime/us"]])
        row[col["Bandwidth/GB/s"]] = fixed4(gib_per_s(float(row[col["GlobalDataSize/B"]]), us))
        row[col["PerPeBandwidth/GB/s"]] = fixed4(gib_per_s(float(row[col["DataSize/B"]]), us))
        row[col["ProfPe"]] = SUMMARY_PROF_PE
        out.append(row)
    out.sort(key=lambda r: (r[col["Metric"]], int(float(r[col["Npus"]])), int(float(r[col["DataSize/B"]])),
                            r[col["CaseId"]]))
    return out


def write_summary_csv(paths: Iterable[str | Path], out: str | Path) -> pd.DataFrame:
    """Write :func:`summary_rows` of ``paths`` to ``out``, whole or not at all (header
    :data:`PERF_HEADER`; lines end in ``\r\n``, as Python's csv writer ends them in the
    reference's summary) and return it as :func:`read_perf_csv` reads it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, _csv_text([PERF_HEADER] + summary_rows(paths), lineterminator="\r\n"))
    return read_perf_csv(out)
