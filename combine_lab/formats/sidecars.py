"""The lab's own files beside the perf CSVs: the twin's counters the driver writes per PE, the
sidecar of each case (docs/formats.md), and the one writer of a run's files.

A sidecar, ``<prefix>_counters_<case_id>.json`` (:func:`combine_lab.formats.perf_csv.counters_name`),
holds what the perf CSV has no column for: variant, routing, seed, target, the SDMA floor, the
check, planned and counted plane bytes, the twin's counters and protocol violations.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ResultFileError
from .files import write_atomic
from .perf_csv import append_perf_rows, counters_name, perf_csv_name

#: The counters of each plane in the twin's counters files (host/twin/twin_engines.cpp dump_counters).
COUNTER_FIELDS = ["puts", "bytes", "quiets", "status_writes", "status_bytes", "control_writes", "control_bytes", "sqes"]
#: The fields every counters file has; the later ones (control writes of the segment variant, SDMA
#: SQEs) read as 0 from a file written before they were counted.
_REQUIRED_COUNTER_FIELDS = COUNTER_FIELDS[:5]


def read_counters(path: str | Path) -> dict:
    """Read one twin counters file the driver wrote for one PE (:func:`driver_counters_name`).

    Returns:
        ``{"pe": int, "launches": int, "last": {"MTE": {...}, "SDMA": {...}}, "total": {...}}``
        where each plane holds ``puts``, ``bytes`` (payload, bytes), ``quiets``,
        ``status_writes`` and ``status_bytes``, ``control_writes`` and ``control_bytes`` (the segment
        variant's bases and their flags), ``sqes`` (SDMA descriptors); also ``violations`` and
        ``violation_examples``.

    Raises:
        ResultFileError: missing or malformed file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        for which in ("last", "total"):
            for plane in ("MTE", "SDMA"):
                for field in _REQUIRED_COUNTER_FIELDS:
                    int(data[which][plane][field])
        return data
    except OSError as e:
        raise ResultFileError(f"{path}: cannot read twin counters ({e.strerror})", parameter="path",
                              value=path) from None
    except (ValueError, KeyError, TypeError) as e:
        raise ResultFileError(f"{path}: not a twin counters file ({e!r})", parameter="path", value=path) from None


def counters_frame(counters: list[dict], which: str = "last") -> pd.DataFrame:
    """One row per (pe, plane) with the :data:`COUNTER_FIELDS` of ``which`` ("last" or "total")."""
    rows = []
    for c in counters:
        for plane in ("MTE", "SDMA"):
            rows.append({"pe": c["pe"], "plane": plane, **{k: int(c[which][plane].get(k, 0)) for k in COUNTER_FIELDS}})
    return pd.DataFrame(rows, columns=["pe", "plane", *COUNTER_FIELDS])


def kinds_of_violations(counters: list[dict]) -> list[tuple[int, str]]:
    """(how many, the first report) of each kind of protocol violation in the twin's counters files of a
    run's PEs (their ``violation_kinds``: a report's text with its numbers but source lines made '#',
    host/twin/twin_reports.cpp), a kind's counts added over the PEs, in the order the kinds first
    appear (PE 0's first). Empty for files written before kinds were counted."""
    kinds: dict[str, list] = {}
    for c in counters:
        for k in c.get("violation_kinds", []):
            got = kinds.setdefault(str(k["key"]), [0, str(k["example"])])
            got[0] += int(k["count"])
    return [(n, example) for n, example in kinds.values()]


def plane_bytes(counters: pd.DataFrame) -> pd.DataFrame:
    """Per PE (index ``pe``) what each plane carried, from a :func:`counters_frame`: payload ``mte_bytes``,
    ``sdma_bytes`` (bytes), payload ``mte_puts``, ``sdma_puts`` (one put per row), ``status_writes``
    (both planes; all must be MTE's), ``sdma_sqes``, ``control_writes`` and ``control_bytes`` (both
    planes), int64. Empty (those columns) without counters (NPU).

    Raises:
        KeyError: a PE without a row of one plane (named).
    """
    if counters.empty:
        return pd.DataFrame(columns=["mte_bytes", "sdma_bytes", "mte_puts", "sdma_puts", "status_writes",
                                     "sdma_sqes", "control_writes", "control_bytes"])
    # the rows of each plane picked by position (a sweep asks this of every run several times:
    # pandas' index lookups cost milliseconds a call)
    c = counters
    at = {(int(pe), plane): i for i, (pe, plane) in enumerate(zip(c["pe"].to_numpy(), c["plane"].to_numpy()))}
    pes = sorted({pe for pe, _ in at})
    missing = [f"PE {pe} {plane}" for pe in pes for plane in ("MTE", "SDMA") if (pe, plane) not in at]
    if missing:
        raise KeyError(f"counters without a row for {', '.join(missing)}")
    mte, sdma = ([at[(pe, plane)] for pe in pes] for plane in ("MTE", "SDMA"))

    def col(field: str, rows: list[int]) -> np.ndarray:
        return c[field].to_numpy()[rows].astype("int64")

    def both(field: str) -> np.ndarray:
        return col(field, mte) + col(field, sdma)

    return pd.DataFrame({
        "mte_bytes": col("bytes", mte), "sdma_bytes": col("bytes", sdma),
        "mte_puts": col("puts", mte), "sdma_puts": col("puts", sdma),
        "status_writes": both("status_writes"), "sdma_sqes": col("sqes", sdma),
        "control_writes": both("control_writes"), "control_bytes": both("control_bytes"),
    }, index=pd.Index(pes, name="pe"))


def counter_mismatches(counters: pd.DataFrame, totals: pd.DataFrame) -> list[str]:
    """Differences between the twin's ``counters`` (:func:`counters_frame`) and a plan's ``totals``
    (:class:`combine_lab.planning.planner.Plan`), one line each, PE by PE in the fields' order:
    MTE and SDMA payload bytes equal the plan's, MTE puts its rows (one put per row), SDMA puts and
    SQEs its sdma_calls and sdma_sqes, control writes and bytes its own; every row one status write,
    none by SDMA. Empty without counters (NPU target)."""
    if counters.empty:
        return []
    got = plane_bytes(counters)
    rows = totals.index.get_indexer(got.index)
    if (rows < 0).any():
        raise KeyError(f"the plan has no PE {got.index[rows < 0].tolist()}")
    w = {k: totals[k].to_numpy()[rows] for k in ("mte_bytes", "sdma_bytes", "mte_rows", "sdma_calls", "sdma_rows",
                                               "sdma_sqes", "control_writes", "control_bytes")}
    planned = {"mte_bytes": w["mte_bytes"], "sdma_bytes": w["sdma_bytes"], "mte_puts": w["mte_rows"],
               "sdma_puts": w["sdma_calls"], "status_writes": w["mte_rows"] + w["sdma_rows"],
               "sdma_sqes": w["sdma_sqes"], "control_writes": w["control_writes"],
               "control_bytes": w["control_bytes"]}
    # whole columns compared at once (pandas' per-field lookups cost a millisecond a run); the
    # lines follow PE by PE, field by field
    counted = {k: got[k].to_numpy() for k in planned}
    on_sdma = counters["plane"].to_numpy() == "SDMA"
    by_pe = dict(zip(counters["pe"].to_numpy()[on_sdma].tolist(),
                     counters["status_writes"].to_numpy()[on_sdma].tolist()))
    out = []
    for i, pe in enumerate(got.index.tolist()):
        for k, v in planned.items():
            if counted[k][i] != v[i]:
                out.append(f"PE {pe}: {k} counted {int(counted[k][i])}, planned {int(v[i])}")
        if by_pe[pe]:
            out.append(f"PE {pe}: {int(by_pe[pe])} status writes went by SDMA; they must go by MTE")
    return out


#: Keys of a sidecar (:func:`write_sidecar`), in order.
SIDECAR_KEYS = ["case_id", "variant", "routing", "dtype", "seed", "target", "min_sdma_bytes", "warmup", "loops",
                "launches", "prof_pes", "check", "counters_ok", "counter_mismatches", "violations",
                "violation_examples", "planned", "counted", "ranks", "kernel", "settings"]


def plane_records(df: pd.DataFrame, columns: list[str]) -> list[dict]:
    """``columns`` of a per-PE frame (index ``pe``) as JSON-ready dicts, ``pe`` first, Python ints."""
    return [{"pe": int(pe), **{k: int(row[k]) for k in columns}} for pe, row in df.iterrows()]


def sidecar_record(*, spec, variant: str, target: str, min_sdma_bytes: int, warmup: int, loops: int, launches: int,
                   prof_pes: list[int], check: str, plan_totals: pd.DataFrame,
                   counter_mismatches: list[str] | None = None,
                   violations: int = 0, violation_examples: list[str] | None = None,
                   counted: pd.DataFrame | None = None, ranks: list[dict] | None = None,
                   kernel: str = "lab", kernel_source: str | None = None, settings: str = "reference",
                   cores_per_rank: int = 1, soc: str = "") -> dict:
    """The sidecar of one run (:data:`SIDECAR_KEYS`), for :func:`write_sidecar`: the case (``spec``: a
    CaseSpec) and how it ran, the verdicts, the planned bytes per PE (``plan_totals``: a Plan's
    totals) and, where something counted them, the counted bytes and the twin's counters
    (``counted``: a RunResult's plane_bytes; ``ranks``: its counters files). A run nothing counted
    (NPU, or a timing model) has ``counters_ok`` None when ``counter_mismatches`` is None. ``kernel``:
    which kernel ran, ``{"name": "lab"}`` for the lab's own, else your kernel's label and folder
    (``{"name": "reference:doubleplane", "source": "/.../combine_doubleplane"}``; docs/own-kernel.md).
    ``settings``: the lab kernel's settings label and cores per source rank (docs/variants.md),
    ``{"label": "segment-c6", "cores_per_rank": 6}``. ``soc``: the SoC it ran on (or was modelled
    on), where known: calibrate refuses data of another SoC than the model's."""
    return {"case_id": spec.case_id, "variant": variant, "routing": spec.routing, "dtype": spec.dtype,
            "seed": int(spec.seed), "target": target, "min_sdma_bytes": int(min_sdma_bytes), "warmup": int(warmup),
            "loops": int(loops), "launches": int(launches), "prof_pes": [int(p) for p in prof_pes], "check": check,
            "counters_ok": None if counter_mismatches is None else not counter_mismatches,
            "counter_mismatches": list(counter_mismatches or []), "violations": int(violations),
            "violation_examples": list(violation_examples or []),
            "planned": plane_records(plan_totals, ["mte_rows", "mte_bytes", "sdma_rows", "sdma_bytes"]),
            "counted": [] if counted is None else plane_records(counted, ["mte_bytes", "sdma_bytes", "mte_puts",
                                                                            "sdma_puts", "status_writes"]),
            "ranks": list(ranks or []),
            "kernel": {"name": kernel} if kernel_source is None else {"name": kernel, "source": str(kernel_source)},
            "settings": {"label": settings, "cores_per_rank": int(cores_per_rank)}, "soc": str(soc)}


def write_run_files(folder: str | Path, result, perf: pd.DataFrame | None) -> list[Path]:
    """The files one run leaves in ``folder``, once every launch of it succeeded: the rows of each
    profiled PE appended to its per-rank CSV (``perf``, :func:`read_perf_csv` form; None: nothing was
    timed, no CSV), then the case's sidecar (``result.sidecar()``: a RunResult or a ModelledResult).
    The one writer of run files (the CLI, the sweep, run_case(output_dir=...)). Returns the paths."""
    folder = Path(folder)
    paths = []
    name = getattr(result, "variant_label", result.variant)  # files per variant label (docs/variants.md)
    if perf is not None and len(perf):
        for pe, rows in perf.groupby("ProfPe", sort=False):
            paths.append(append_perf_rows(rows, folder / perf_csv_name(name, int(pe))))
    data = result.sidecar()
    paths.append(write_sidecar(folder / counters_name(name, data["case_id"]), data))
    return paths


def write_sidecar(path: str | Path, data: dict) -> Path:
    """Write the lab's sidecar of one case (:func:`counters_name`): what the perf CSV has no column
    for. ``data`` holds :data:`SIDECAR_KEYS`: the case and how it ran (case_id, variant, routing,
    dtype, seed, target, min_sdma_bytes in bytes, warmup, loops, launches, prof_pes), the verdicts
    (check PASS/FAIL, counters_ok, counter_mismatches, violations with examples), per PE the planned
    and counted plane bytes (``planned``/``counted``: lists of dicts with ``pe``), and ``ranks``: the
    twin's counters file of every PE as the driver wrote it (empty on an NPU). Whole or not at all
    (:func:`combine_lab.formats.files.write_atomic`)."""
    missing = [k for k in SIDECAR_KEYS if k not in data]
    if missing:
        raise ResultFileError(f"{path}: sidecar without {', '.join(missing)}", parameter="path", value=path)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, json.dumps({k: data[k] for k in SIDECAR_KEYS}, indent=1) + "\n")


def read_sidecar(path: str | Path) -> dict:
    """Read a sidecar written by :func:`write_sidecar`. Raises ResultFileError when it is missing,
    not JSON, or lacks one of :data:`SIDECAR_KEYS`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ResultFileError(f"{path}: cannot read sidecar ({e.strerror})", parameter="path", value=path) from None
    except ValueError as e:
        raise ResultFileError(f"{path}: not JSON ({e})", parameter="path", value=path) from None
    if isinstance(data, dict):
        data.setdefault("kernel", {"name": "lab"})  # written before kernels were named: the lab's
        data.setdefault("settings", {"label": "reference", "cores_per_rank": 1})  # before settings: the reference's
    missing = [k for k in SIDECAR_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        raise ResultFileError(f"{path}: not a combine-lab sidecar (no {', '.join(missing)})", parameter="path",
                              value=path)
    return data
