"""Reference case files (docs/formats.md#1-case-files): write, read and validate, check x_out.

Layout, raw little-endian arrays with the shapes of docs/protocol.md#2-dispatch-layout::

    <root>/golden/shape_{bs}_{h}_{topk}_{E}_{pes}/meta.json
    <root>/golden/shape_.../rank_{r}/expand_x.bin, assist_info.bin, ep_recv_count.bin,
        expert_ids.bin, expert_scales.bin, golden_x_out.bin
    <root>/output/x_out_{r}.bin                         (what a run writes)

Every path of that layout is made here (:func:`case_dir_of`, :func:`rank_file`,
:func:`x_out_path`), and every array is read here (:func:`read_rank_file`, :func:`read_x_out`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CaseFileError, ParameterError, SpecError
from ..case.case import Case, RankInputs
from ..case.spec import DTYPES, DTYPES_TEXT, CaseSpec
from .files import atomic_write, write_atomic

__all__ = ["CaseFileError", "REFERENCE_KEYS", "write_case", "read_case", "read_meta", "FileCase", "CheckResult",
           "check_x_out", "rank_file_layout", "case_dir_of", "rank_dir", "rank_file", "x_out_path", "read_rank_file",
           "read_x_out"]

#: Seconds of writing after which :func:`write_case` shows a progress line (one step per PE, on
#: stderr): a case of thousands of PEs takes minutes; a small one says nothing.
PROGRESS_AFTER_S = 2.0

#: Keys meta.json must hold (docs/formats.md#1-case-files).
REFERENCE_KEYS = ("pe_size", "bs", "h", "topk", "expert_per_pe", "moe_expert_num", "dtype", "expert_compute")

# RankInputs field -> file name.
_FILE_OF = {
    "expand_x": "expand_x.bin",
    "assist_info_for_combine": "assist_info.bin",
    "ep_recv_count": "ep_recv_count.bin",
    "expert_ids": "expert_ids.bin",
    "expert_scales": "expert_scales.bin",
    "golden_x_out": "golden_x_out.bin",
}


def rank_file_layout(spec: CaseSpec) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """File name -> (shape, little-endian dtype) of one rank directory (docs/protocol.md#2-dispatch-layout
    and docs/formats.md#1-case-files)."""
    t = np.dtype(spec.np_dtype).newbyteorder("<")
    i4, f4 = np.dtype("<i4"), np.dtype("<f4")
    cap, S = spec.capacity_rows, spec.expert_per_pe * spec.pes
    return {
        "expand_x.bin": ((cap, spec.h), t),
        "assist_info.bin": ((cap, 3), i4),
        "ep_recv_count.bin": ((S,), i4),
        "expert_ids.bin": ((spec.bs, spec.topk), i4),
        "expert_scales.bin": ((spec.bs, spec.topk), f4),
        "golden_x_out.bin": ((spec.bs, spec.h), t),
    }


def case_dir_of(root: str | Path, case_id: str) -> Path:
    """``<root>/golden/<case_id>``: where a case's files sit under a case root."""
    return Path(root) / "golden" / case_id


def rank_dir(case_dir: str | Path, rank: int) -> Path:
    """``<case_dir>/rank_<rank>``: the folder of one rank's arrays."""
    return Path(case_dir) / f"rank_{rank}"


def rank_file(case_dir: str | Path, rank: int, name: str) -> Path:
    """``<case_dir>/rank_<rank>/<name>``, ``name`` one of :func:`rank_file_layout`'s file names."""
    return rank_dir(case_dir, rank) / name


def x_out_path(root: str | Path, rank: int) -> Path:
    """``<root>/output/x_out_<rank>.bin``: where PE ``rank`` writes its combine output (T [bs, h])."""
    return Path(root) / "output" / f"x_out_{rank}.bin"


def read_rank_file(case_dir: str | Path, spec: CaseSpec, rank: int, name: str, rows: int | None = None) -> np.ndarray:
    """One rank's array ``name`` (e.g. ``"golden_x_out.bin"``) with the shape and little-endian dtype
    of :func:`rank_file_layout`; ``rows``: read only the first ``rows`` rows (e.g. the used rows of
    expand_x, ``ep_recv_count[-1]``). Sizes are not validated here (:func:`read_case` does that)."""
    shape, dtype = rank_file_layout(spec)[name]
    if rows is not None:
        shape = (rows, *shape[1:])
    count = int(np.prod(shape, dtype=np.int64))
    return np.fromfile(rank_file(case_dir, rank, name), dtype=dtype, count=count).reshape(shape)


def read_x_out(root: str | Path, spec: CaseSpec, rank: int) -> np.ndarray:
    """PE ``rank``'s x_out as written under ``root`` (:func:`x_out_path`): T [bs, h] (T = spec.np_dtype)."""
    return np.fromfile(x_out_path(root, rank), dtype=spec.np_dtype).reshape(spec.bs, spec.h)


def _expected_bytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def write_case(case: Case, root: str | Path) -> Path:
    """Write ``case`` as reference case files under ``root``; return the case directory.

    Writes root/golden/<case_id>/meta.json (``case.meta()``, JSON, indent 2) and, rank by
    rank, the six rank_{r}/*.bin files as raw little-endian arrays; existing files are
    overwritten. Peak memory is about one rank's arrays (capacity_rows*row_bytes for
    expand_x) plus the case's x. A write that lasts more than :data:`PROGRESS_AFTER_S` seconds
    shows a tqdm line on stderr (``case files shape_...: 37%|... | 1523/4096 PE``), gone when done.
    Source: docs/formats.md#1-case-files.
    """
    from tqdm.std import tqdm

    spec = case.spec
    case_dir = case_dir_of(root, spec.case_id)
    case_dir.mkdir(parents=True, exist_ok=True)
    # not fsynced: case files are remade from (spec, seed), a power loss costs a rerun, not a result
    write_atomic(case_dir / "meta.json", json.dumps(case.meta(), indent=2) + "\n", sync=False)
    layout = rank_file_layout(spec)
    ranks = tqdm(range(spec.pes), desc=f"case files {spec.case_id}", unit="PE", file=sys.stderr,
                 delay=PROGRESS_AFTER_S, leave=False)
    for r in ranks:  # one rank's arrays alive at a time
        rank_dir(case_dir, r).mkdir(exist_ok=True)
        inputs = case.rank_inputs(r)
        used = int(inputs.ep_recv_count[-1]) if len(inputs.ep_recv_count) else 0
        for field, name in _FILE_OF.items():
            arr = getattr(inputs, field).astype(layout[name][1], copy=False)
            if field == "expand_x":
                _write_with_zero_tail(arr, used, rank_file(case_dir, r, name))
            else:
                write_atomic(rank_file(case_dir, r, name), arr.tobytes(), sync=False)
        del inputs
    return case_dir


def _write_with_zero_tail(arr: np.ndarray, used_rows: int, path: Path) -> None:
    """Write ``arr`` [rows, h] whose rows from ``used_rows`` on are zero padding: the used
    rows are written and the file is extended to full size, so the padding reads back as
    zeros (byte-identical) without being written (a sparse tail where the filesystem allows)."""
    with atomic_write(path, "wb", size=lambda: arr.nbytes, sync=False) as f:
        # bytes by write(), not ndarray.tofile: a full disk then says its errno (tofile's OSError has none)
        f.write(np.ascontiguousarray(arr[:used_rows]).reshape(-1).view(np.uint8).data)
        f.truncate(arr.nbytes)


class FileCase(Case):
    """A Case read from reference case files (see :func:`read_case`).

    Same attributes as Case (spec, expert_ids, expert_scales, segment_counts,
    ep_recv_count); ``rank_inputs(r)`` and ``golden(r)`` read the rank's files with
    np.fromfile; ``x`` is not available (raises CaseFileError); ``meta()`` returns the
    meta.json dict as read, ``case_dir`` the directory.
    """

    def __init__(self, spec, expert_ids, expert_scales, case_dir: Path, meta: dict):
        super().__init__(spec, expert_ids, expert_scales)
        self.case_dir = case_dir
        self._meta = meta

    def meta(self) -> dict:
        return dict(self._meta)

    @property
    def x(self):
        raise CaseFileError(f"{self.case_dir}: x is not stored in case files; use rank_inputs(r)", parameter="case_dir",
                            value=self.case_dir)

    def golden(self, r: int) -> np.ndarray:
        return read_rank_file(self.case_dir, self.spec, r, "golden_x_out.bin")

    def rank_inputs(self, r: int) -> RankInputs:
        if not 0 <= r < self.spec.pes:
            raise IndexError(f"r={r}: must be in [0, pes={self.spec.pes})")
        return RankInputs(**{field: read_rank_file(self.case_dir, self.spec, r, name)
                             for field, name in _FILE_OF.items()})


def _spec_from_meta(meta_path: Path, meta) -> CaseSpec:
    if not isinstance(meta, dict):
        raise CaseFileError(f"{meta_path}: found a JSON {type(meta).__name__}, expected an object",
                            parameter="case_dir", value=meta_path)
    missing = [k for k in REFERENCE_KEYS if k not in meta]
    if missing:
        raise CaseFileError(f"{meta_path}: missing keys {missing}; expected all of {list(REFERENCE_KEYS)}",
                            parameter="case_dir", value=meta_path)
    try:
        spec = CaseSpec(pes=meta["pe_size"], bs=meta["bs"], h=meta["h"], topk=meta["topk"],
                        expert_per_pe=meta["expert_per_pe"], dtype=meta["dtype"],
                        seed=meta.get("seed", 42), routing=meta.get("routing", "external"),
                        masked_fraction=meta.get("masked_fraction", 0.0))
    except SpecError as e:
        raise CaseFileError(f"{meta_path}: {e}", parameter="case_dir", value=meta_path) from None
    if meta["moe_expert_num"] != spec.moe_expert_num:
        raise CaseFileError(
            f"{meta_path}: moe_expert_num={meta['moe_expert_num']!r}, expected pe_size*expert_per_pe="
            f"{spec.pes}*{spec.expert_per_pe}={spec.moe_expert_num}", parameter="case_dir", value=meta_path)
    if not isinstance(meta["expert_compute"], str):
        raise CaseFileError(f"{meta_path}: expert_compute={meta['expert_compute']!r}, expected a string ('identity')",
                            parameter="case_dir", value=meta_path)
    return spec


def _check_sizes(case_dir: Path, spec: CaseSpec) -> None:
    for r in range(spec.pes):
        for name, (shape, dtype) in rank_file_layout(spec).items():
            path = rank_file(case_dir, r, name)
            want = _expected_bytes(shape, dtype)
            if not path.is_file():
                raise CaseFileError(f"{path}: missing file; expected {want} bytes "
                                    f"({dtype.name} {list(shape)}) for {spec.case_id}", parameter="case_dir",
                                    value=path)
            got = path.stat().st_size
            if got != want:
                raise CaseFileError(f"{path}: {got} bytes found, expected {want} bytes "
                                    f"({dtype.name} {list(shape)}) for {spec.case_id}", parameter="case_dir",
                                    value=path)


def _check_counts(path: Path, c: np.ndarray, capacity: int) -> None:
    if c[0] < 0:
        raise CaseFileError(f"{path}: ep_recv_count[0]={c[0]} is negative; counts are cumulative row counts >= 0",
                            parameter="case_dir", value=path)
    down = np.flatnonzero(np.diff(c) < 0)
    if down.size:
        i = int(down[0]) + 1
        raise CaseFileError(f"{path}: ep_recv_count[{i}]={c[i]} < ep_recv_count[{i - 1}]={c[i - 1]}; "
                            "expected non-decreasing cumulative counts", parameter="case_dir", value=path)
    over = np.flatnonzero(c > capacity)
    if over.size:
        i = int(over[0])
        raise CaseFileError(f"{path}: ep_recv_count[{i}]={c[i]} exceeds capacity pes*bs*topk={capacity}",
                            parameter="case_dir", value=path)


def _check_assist(path: Path, rows: np.ndarray, d: int, counts: np.ndarray, spec: CaseSpec,
                  expert_ids: np.ndarray) -> None:
    """rows: int32 [n, 3] of PE d; counts: its cumulative ep_recv_count."""
    limits = np.array([spec.pes, spec.bs, spec.topk])
    bad = (rows < 0) | (rows >= limits)
    if bad.any():
        i, col = (int(v) for v in np.argwhere(bad)[0])
        name = ("src_rank", "token_id", "topk_id")[col]
        raise CaseFileError(f"{path}: row {i} = {rows[i].tolist()} (src_rank, token_id, topk_id): "
                            f"{name}={rows[i, col]} out of range [0, {limits[col]})", parameter="case_dir", value=path)
    seg = np.repeat(np.arange(counts.size), np.diff(counts, prepend=0))
    want_src = seg % spec.pes
    want_expert = d * spec.expert_per_pe + seg // spec.pes
    got_expert = expert_ids[rows[:, 0], rows[:, 1], rows[:, 2]]
    bad = np.flatnonzero((rows[:, 0] != want_src) | (got_expert != want_expert))
    if bad.size:
        i = int(bad[0])
        raise CaseFileError(
            f"{path}: row {i} = {rows[i].tolist()} lies in segment {seg[i]} (local_expert "
            f"{seg[i] // spec.pes}, src_rank {want_src[i]}) but rank {rows[i, 0]}'s expert_ids"
            f"[{rows[i, 1]}, {rows[i, 2]}]={got_expert[i]}; expected src_rank {want_src[i]} "
            f"and expert {want_expert[i]}", parameter="case_dir", value=path)
    key = rows[:, 1].astype(np.int64) * spec.topk + rows[:, 2]
    step = np.flatnonzero((np.diff(key) <= 0) & (np.diff(seg) == 0))
    if step.size:
        i = int(step[0]) + 1
        raise CaseFileError(f"{path}: rows {i - 1} and {i} ({rows[i - 1].tolist()}, {rows[i].tolist()}) are not in "
                            "increasing (token_id, topk_id) order within their segment", parameter="case_dir",
                            value=path)


def read_meta(case_dir: str | Path) -> tuple[dict, CaseSpec]:
    """``(meta, spec)`` of a case directory: meta.json as read, and the CaseSpec it describes
    (routing 'external' unless meta.json names one). Checks meta.json only (present, JSON, the
    reference keys, a valid CaseSpec, moe_expert_num); :func:`read_case` checks every file.

    Raises CaseFileError naming meta.json, what was found and what was expected.
    """
    meta_path = Path(case_dir) / "meta.json"
    if not meta_path.is_file():
        raise CaseFileError(f"{meta_path}: missing file; expected the case's meta.json (docs/formats.md#1-case-files)",
                            parameter="case_dir", value=meta_path)
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CaseFileError(f"{meta_path}: not valid JSON ({e})", parameter="case_dir", value=meta_path) from None
    return meta, _spec_from_meta(meta_path, meta)


def read_case(case_dir: str | Path) -> FileCase:
    """Read and validate a reference case directory (docs/formats.md#1-case-files).

    Only meta.json's reference keys (REFERENCE_KEYS) are required; seed, routing
    (default 'external') and masked_fraction (default: the share of masked slots
    found) are optional. Checks, in order: meta.json present, valid JSON, keys, a valid
    CaseSpec, moe_expert_num = pe_size*expert_per_pe, directory name = case id (when it
    starts with 'shape_'); every rank file present with the exact byte size; each
    ep_recv_count non-negative, non-decreasing, <= capacity; per-segment counts equal to
    what all ranks' expert_ids route; assist rows in range, in the segment and expert their
    routing says, in order. An expert id outside [0, E) (-1, or E as padding) is a masked
    slot (docs/protocol.md#1-the-combine-problem), as in the golden, the planner and the driver.

    Returns a FileCase. Raises CaseFileError naming the file, what was found and what
    was expected.
    """
    case_dir = Path(case_dir)
    meta, spec = read_meta(case_dir)
    if case_dir.name.startswith("shape_") and case_dir.name != spec.case_id:
        raise CaseFileError(f"{case_dir}: directory name {case_dir.name!r} does not match meta.json's case id "
                            f"{spec.case_id!r}", parameter="case_dir", value=case_dir)
    _check_sizes(case_dir, spec)
    layout = rank_file_layout(spec)
    E = spec.moe_expert_num

    def load(r, name, count=-1):
        return np.fromfile(rank_file(case_dir, r, name), dtype=layout[name][1], count=count)

    ids = np.stack([load(r, "expert_ids.bin").reshape(spec.bs, spec.topk) for r in range(spec.pes)])
    counts = np.stack([load(r, "ep_recv_count.bin") for r in range(spec.pes)])
    for r in range(spec.pes):
        _check_counts(rank_file(case_dir, r, "ep_recv_count.bin"), counts[r], spec.capacity_rows)
    scales = np.stack([load(r, "expert_scales.bin").reshape(spec.bs, spec.topk) for r in range(spec.pes)])
    if "masked_fraction" not in meta:
        spec = dataclasses.replace(spec, masked_fraction=float(np.mean((ids < 0) | (ids >= E))))
    case = FileCase(spec, ids, scales, case_dir, meta)
    found = np.diff(counts, axis=1, prepend=0)
    for d in range(spec.pes):
        diff = np.flatnonzero(found[d] != case.segment_counts[d])
        if diff.size:
            s = int(diff[0])
            raise CaseFileError(
                f"{rank_file(case_dir, d, 'ep_recv_count.bin')}: segment {s} (local_expert {s // spec.pes}, "
                f"src_rank {s % spec.pes}) has {found[d, s]} rows, but the expert_ids of all ranks route "
                f"{case.segment_counts[d, s]} slots there", parameter="case_dir",
                value=rank_file(case_dir, d, "ep_recv_count.bin"))
    for d in range(spec.pes):
        n = int(counts[d, -1])
        rows = load(d, "assist_info.bin", count=3 * n).reshape(n, 3)
        _check_assist(rank_file(case_dir, d, "assist_info.bin"), rows, d, counts[d], spec, ids)
    return case


@dataclass(frozen=True)
class CheckResult:
    """Outcome of :func:`check_x_out`: ``ok``; ``max_abs_err`` (float, max |x_out - golden|,
    NaN-ignoring); ``mismatches`` (elements that differ from golden); ``first_bad_index``
    (tuple index of the first bad element in C order, or None)."""

    ok: bool
    max_abs_err: float
    mismatches: int
    first_bad_index: tuple[int, ...] | None


def check_x_out(x_out: np.ndarray, golden: np.ndarray, dtype: str) -> CheckResult:
    """Compare a combine output with its golden, bit for bit (docs/protocol.md#1-the-combine-problem and
    docs/protocol.md#3-reference-data-and-the-check).

    ``x_out``, ``golden``: arrays of the same shape (e.g. [bs, h]) with dtype T; ``dtype``:
    'int32_t', 'float16_t' or 'bfloat16_t'. Both must be identical: the kernel and the golden both reduce
    in float32 in topk order and cast once, so any difference is a bug (a float16
    accumulator, another order, a lost tile). A NaN never passes. ``max_abs_err`` is
    computed in float64 (int64 for int32). The reference tools keep their own tolerance:
    their check reads our output/x_out_{r}.bin with rtol = atol = 1e-2
    (docs/protocol.md#3-reference-data-and-the-check), which bit-exact files pass; nothing here uses it.
    Raises SpecError for an unknown dtype (a case field); ParameterError for arrays of
    different shapes or not of dtype T.
    """
    if dtype not in DTYPES:
        raise SpecError(f"dtype={dtype!r}: must be one of {DTYPES_TEXT}", parameter="dtype", value=dtype)
    x, g = np.asarray(x_out), np.asarray(golden)
    if x.shape != g.shape:
        raise ParameterError(f"x_out shape={list(x.shape)}: must equal golden shape {list(g.shape)}", parameter="x_out",
                             value=list(x.shape), allowed=f"golden shape {list(g.shape)}")
    for name, a in (("x_out", x), ("golden", g)):
        if a.dtype != DTYPES[dtype]:
            raise ParameterError(f"{name} dtype={a.dtype.name}: must be {np.dtype(DTYPES[dtype]).name} for {dtype!r}",
                                 parameter=name, value=a.dtype.name, allowed=np.dtype(DTYPES[dtype]).name)
    same = x.view(np.uint32) == g.view(np.uint32) if dtype == "int32_t" else x.view(np.uint16) == g.view(np.uint16)
    if same.all() and (dtype == "int32_t" or not np.isnan(x.astype(np.float32)).any()):
        # the common case, bit for bit: no error to measure (a sweep checks every PE of every run)
        return CheckResult(True, 0.0, 0, None)
    if dtype == "int32_t":
        err = np.abs(x.astype(np.int64) - g.astype(np.int64)).astype(np.float64)
        bad = x != g
    else:
        xf, gf = x.astype(np.float32).astype(np.float64), g.astype(np.float32).astype(np.float64)
        with np.errstate(invalid="ignore"):
            err = np.abs(xf - gf)
        bad = (x.view(np.uint16) != g.view(np.uint16)) | np.isnan(xf)
    n_bad = int(np.count_nonzero(bad))
    first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape)) if n_bad else None
    finite = err[~np.isnan(err)]
    max_err = float(finite.max()) if finite.size else (float("nan") if err.size else 0.0)
    return CheckResult(n_bad == 0, max_err, n_bad, first)
