"""The probe's CSV (``combine-lab probe``, docs/probe.md#3-the-csv): one row per measurement, every
repeat kept, written whole or not at all; ``combine-lab calibrate`` knows it by its header.

Columns (:data:`PROBE_HEADER`): ``kind`` (sdma, sdma_issue, mte_put, flag, flag_rtt, quiet,
sdma_quiet, wait), ``pes`` (PEs of the run), ``src`` (the PE that timed it), ``dst`` (its first
destination PE, empty where nothing is sent), ``peers`` (destinations in turn), ``cores`` (AIV cores
issuing at once), ``puts`` (operations per core per launch: puts, quiets, polls or round trips),
``bytes`` (per put; the row of a round trip), ``buffering`` (mte_put: single or double), ``time_us``
(median over the repeats of one launch's time: the PE's last core end minus its first core start),
``repeats``, ``spread_us`` (max - min), ``times_us`` (each repeat, ``;``-separated), ``GBps``
(cores * puts * bytes / time_us / 1e3 for sdma and mte_put, else empty), ``target`` (cpu = the
twin, npu), ``soc``, ``build`` (``sdma``: SHMEM's SDMA calls are real in the build that timed
it; ``mte-only``: a build without SDMA, CANN < 9.0.0 or Ascend950, whose SDMA calls are empty
stand-ins), ``link_class`` (the link class of the pair PE src -> dst in the rank map of the
model the probe was planned on, ``probe --model a2|a3``: ``die_pair``, ``card``, ``server`` on
a3; classes joined by ``+`` where the peers span several; empty for a row that sends nothing or a
probe planned without a model), ``note`` (what the times are). A file of the older header (without
``link_class``) is read with that column empty.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ParameterError, ResultFileError
from .files import write_atomic

PROBE_HEADER = ("kind", "pes", "src", "dst", "peers", "cores", "puts", "bytes", "buffering", "time_us", "repeats",
                "spread_us", "times_us", "GBps", "target", "soc", "build", "link_class", "note")
#: The header before ``link_class`` (its files still read, the column empty).
OLD_PROBE_HEADER = tuple(c for c in PROBE_HEADER if c != "link_class")
#: What each kind times, in the order a probe runs them (kernels/probe_kernel.h ``Kind``).
PROBE_KINDS = ("sdma", "sdma_issue", "mte_put", "flag", "flag_rtt", "quiet", "sdma_quiet", "wait")
#: Kinds that time SHMEM's SDMA calls (empty stand-ins in an MTE-only build).
SDMA_KINDS = ("sdma", "sdma_issue", "sdma_quiet")
#: The build column's values: SDMA real, or stand-ins (kernels/combine_platform.h).
BUILDS = ("sdma", "mte-only")
#: Kinds whose GBps column is filled (payload moved).
BANDWIDTH_KINDS = ("sdma", "mte_put")


@dataclass
class ProbeRow:
    """One measurement: what ran (``kind``, ``pes``, ``src``, ``dst``, ``peers``, ``cores``, ``puts``,
    ``bytes``, ``buffering``) and ``times_us`` float64 [repeats], one launch each, microseconds;
    ``build``: one of :data:`BUILDS`; ``link_class``: the pair's class ('' where none was planned)."""

    kind: str
    pes: int
    src: int
    dst: int | None
    peers: int
    cores: int
    puts: int
    bytes: int
    buffering: str
    times_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    target: str = "cpu"
    soc: str = ""
    note: str = ""
    build: str = "sdma"
    link_class: str = ""

    @property
    def time_us(self) -> float:
        """The median of the repeats, us."""
        return float(np.median(self.times_us))

    @property
    def spread_us(self) -> float:
        return float(np.max(self.times_us) - np.min(self.times_us))

    @property
    def gbps(self) -> float | None:
        if self.kind not in BANDWIDTH_KINDS:
            return None
        return self.cores * self.puts * self.bytes / self.time_us / 1e3

    def label(self) -> str:
        """'sdma cores=2 puts=8 bytes=14336 peers=1' -- how the fit names a row; ' dst=2' added where
        the first destination is not PE 1 (a farther link class's row)."""
        extra = f" {self.buffering}" if self.buffering else ""
        extra += f" dst={self.dst}" if self.dst not in (None, 1) else ""
        return f"{self.kind} cores={self.cores} puts={self.puts} bytes={self.bytes} peers={self.peers}{extra}"


def _fmt(v: float) -> str:
    return f"{v:.4f}"


def probe_csv_text(rows: list[ProbeRow]) -> str:
    """The CSV of ``rows``: the header, then one line per row."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(PROBE_HEADER)
    for r in rows:
        g = r.gbps
        w.writerow([r.kind, r.pes, r.src, "" if r.dst is None else r.dst, r.peers, r.cores, r.puts, r.bytes,
                    r.buffering, _fmt(r.time_us), len(r.times_us), _fmt(r.spread_us),
                    ";".join(_fmt(t) for t in r.times_us), "" if g is None else _fmt(g), r.target, r.soc, r.build,
                    r.link_class, r.note])
    return out.getvalue()


def write_probe_csv(path: str | os.PathLike, rows: list[ProbeRow]) -> Path:
    """Write ``rows`` to ``path`` whole or not at all. Raises ResultFileError (the file, the bytes,
    the errno) when it cannot be written."""
    return write_atomic(Path(path), probe_csv_text(rows))


def is_probe_csv(path: str | os.PathLike) -> bool:
    """True when the file's first line is :data:`PROBE_HEADER` or :data:`OLD_PROBE_HEADER` (how
    calibrate tells a probe CSV from a perf CSV); False for any other file, or one that cannot be read."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return tuple(next(csv.reader([first]), [])) in (PROBE_HEADER, OLD_PROBE_HEADER)


def read_probe_csv(path: str | os.PathLike) -> list[ProbeRow]:
    """The rows of a probe CSV.

    Raises:
        ResultFileError: the file cannot be read, its header is not :data:`PROBE_HEADER`, or a
            row is malformed (the message names the file, the line and the column).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ResultFileError(f"{path}: cannot read it ({e})", parameter="path", value=path) from None
    reader = csv.reader(io.StringIO(text))
    header = tuple(next(reader, []))
    if header not in (PROBE_HEADER, OLD_PROBE_HEADER):
        raise ResultFileError(f"{path}: not a probe CSV: its header is {','.join(header)!r}, a probe CSV's is "
                              f"{','.join(PROBE_HEADER)!r} (docs/probe.md#3-the-csv)", parameter="path", value=path)
    rows = []
    for line, cells in enumerate(reader, start=2):
        if not cells:
            continue
        rec = {"link_class": "", **dict(zip(header, cells))}
        col = "?"
        try:
            if len(cells) != len(header):
                raise ValueError(f"{len(cells)} columns, not {len(header)}")
            col = "kind"
            if rec["kind"] not in PROBE_KINDS:
                raise ValueError(f"{rec['kind']!r} is not one of {', '.join(PROBE_KINDS)}")
            ints = {}
            for col in ("pes", "src", "peers", "cores", "puts", "bytes", "repeats"):
                ints[col] = int(rec[col])
            col = "dst"
            dst = int(rec["dst"]) if rec["dst"] else None
            col = "build"
            if rec["build"] not in BUILDS:
                raise ValueError(f"{rec['build']!r} is not one of {', '.join(BUILDS)}")
            col = "times_us"
            times = np.array([float(t) for t in rec["times_us"].split(";")], dtype=np.float64)
            if len(times) != ints["repeats"] or not np.all(np.isfinite(times)) or np.any(times <= 0):
                raise ValueError(f"{len(times)} times, not {ints['repeats']} (repeats), or one not > 0")
        except ValueError as e:
            raise ResultFileError(f"{path}: line {line}, column {col}: {e}", parameter="path", value=path) from None
        rows.append(ProbeRow(rec["kind"], ints["pes"], ints["src"], dst, ints["peers"], ints["cores"], ints["puts"],
                             ints["bytes"], rec["buffering"], times, rec["target"], rec["soc"], rec["note"],
                             rec["build"], rec["link_class"]))
    if not rows:
        raise ResultFileError(f"{path}: a probe CSV without a measurement", parameter="path", value=path)
    return rows


def build_refusal(rows: list[ProbeRow], path: str | os.PathLike) -> str:
    """Why ``rows`` cannot be fitted because their build lacked what they time ('' when they can):
    SDMA rows (:data:`SDMA_KINDS`) timed by an ``mte-only`` build timed empty stand-ins."""
    empty = sorted({r.kind for r in rows if r.kind in SDMA_KINDS and r.build != "sdma"}, key=SDMA_KINDS.index)
    if not empty:
        return ""
    return (f"{path}: its {', '.join(empty)} rows were timed by a build without SDMA (build mte-only: CANN older "
            f"than 9.0.0 or Ascend950), whose SDMA calls are empty stand-ins; probe again on a build with SDMA")


def require_probe_csv(path: str | os.PathLike) -> Path:
    """``path`` if it exists; ParameterError naming it otherwise (before anything is read)."""
    p = Path(path)
    if not p.is_file():
        raise ParameterError(f"{p}: no such file (a probe CSV from combine-lab probe)", parameter="csv", value=str(p))
    return p
