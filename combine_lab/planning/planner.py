"""Plan the MTE/SDMA plane of every segment: the dual-plane decision rule (docs/decision-rule.md#1-the-rule).

Per destination PE and segment, in integers (no division)::

    segment_bytes = token_count * h * itemsize
    threshold_num = (rows of all remote segments on this PE) * h * itemsize
    threshold_den = max(pes - 1, 1) * expert_per_pe
    use_sdma = src_rank != pe and token_count > 0 and segment_bytes >= min_sdma_bytes
               and segment_bytes * threshold_den > threshold_num        # strict

Everything else goes by MTE. Two variants (the reference's names): ``doubleplane`` applies
the rule, ``classic`` sends everything by MTE. Kernel settings (:mod:`.settings`,
docs/variants.md) change how the rows are sent, never which plane: the plan's totals say how many
SDMA calls and SQEs, and how many control writes (the segment variant's published bases), the
twin must count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import DOUBLEPLANE, RULES
from ..errors import ParameterError
from .cores import chunk_bounds, kernel_constant
from .settings import REFERENCE, KernelSettings, check_kernel_settings, parse_settings

__all__ = ["VARIANTS", "DEFAULT_MIN_SDMA_BYTES", "SDMA_SQE_BYTES", "Plan", "plan", "plan_counts", "sdma_calls"]

#: The two combines, by the reference's names: MTE only, and MTE + SDMA by the decision rule.
VARIANTS = RULES  # the rules the planner knows (combine_lab.kernels)
#: The default SDMA floor: 2 MiB (docs/decision-rule.md#6-the-floor).
DEFAULT_MIN_SDMA_BYTES = 2 * 1024 * 1024
#: SHMEM cuts one aclshmemx_sdma_put_nbi into SQEs of at most 1 MiB (the twin does the same).
SDMA_SQE_BYTES = 1 << 20
#: The ready block of a status or inbox flag, bytes (kernels/combine_kernel.h kStatusWords x int32).
_FLAG_BYTES = 4 * kernel_constant("kStatusWords")


@dataclass(frozen=True)
class Plan:
    """Planes chosen for every (pe, segment).

    ``segments``: DataFrame, one row per (pe, segment), sorted by pe then segment,
    columns pe, segment, local_expert, src_rank, token_count, bytes (int64), plane
    ('MTE' or 'SDMA'). ``totals``: DataFrame indexed by pe with mte_rows, mte_bytes,
    sdma_rows, sdma_bytes, remote_rows (int64) and remote_avg_segment_bytes (float,
    threshold_num / threshold_den), sdma_calls and sdma_sqes (aclshmemx_sdma_put_nbi calls and
    the 1 MiB SQEs they become), control_writes and control_bytes (the segment variant's
    published bases and their ready flags; 0 otherwise). Also pes, expert_per_pe, h, itemsize,
    variant (classic or doubleplane), min_sdma_bytes and settings (KernelSettings).
    """

    segments: pd.DataFrame
    totals: pd.DataFrame
    pes: int
    expert_per_pe: int
    h: int
    itemsize: int
    variant: str
    min_sdma_bytes: int
    settings: KernelSettings = REFERENCE

    def sdma_segments(self, pe: int) -> np.ndarray:
        """int64 [n]: segment indices (local_expert*pes + src_rank) of PE ``pe`` sent by SDMA, ascending.

        Raises ParameterError if pe is not in [0, pes).
        """
        if not 0 <= pe < self.pes:
            raise ParameterError(f"pe={pe}: must be in [0, pes={self.pes})", parameter="pe", value=pe)
        seg = self.segments
        start = pe * self.pes * self.expert_per_pe
        block = seg.iloc[start:start + self.pes * self.expert_per_pe]
        return block["segment"].to_numpy()[block["plane"].to_numpy() == "SDMA"]


def _check_int(name: str, value, minimum: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or value < minimum:
        raise ParameterError(f"{name}={value!r}: must be an int >= {minimum}", parameter=name, value=value)
    return int(value)


def sdma_mask(counts: np.ndarray, row_bytes: int, min_sdma_bytes: int) -> np.ndarray:
    """The decision rule of docs/decision-rule.md#1-the-rule, on every segment of every PE at once.

    ``counts``: int [pes, expert_per_pe*pes] rows per segment (non-cumulative; int64, or object
    for exact Python ints); ``row_bytes``: h*sizeof(T); ``min_sdma_bytes``: the floor (2 MiB by
    default, docs/decision-rule.md#6-the-floor). Returns bool [pes, expert_per_pe*pes]: True where the segment goes by SDMA
    (remote, non-empty, >= the floor and strictly above the PE's average remote segment,
    compared as ``segment_bytes * den > num`` in integers, so ties stay on MTE).
    """
    pes, S = counts.shape
    epp = S // pes
    src = np.arange(S) % pes
    remote = src[None, :] != np.arange(pes)[:, None]
    seg_bytes = counts * row_bytes
    num = (counts * remote).sum(axis=1) * row_bytes
    den = max(pes - 1, 1) * epp
    return np.asarray(remote & (counts > 0) & (seg_bytes >= min_sdma_bytes) & (seg_bytes * den > num[:, None]),
                      dtype=bool)


def sdma_calls(counts: np.ndarray, sdma: np.ndarray, row_bytes: int, settings: KernelSettings) -> tuple:
    """SDMA calls and SQEs per PE, as the kernel issues them (kernels/combine_kernel.cpp SendSegments).

    ``counts``: int [pes, S] rows per segment; ``sdma``: bool [pes, S] (the rule's choice). One
    call per row, except in the segment variant with rows that are back to back in the window
    (``row_bytes`` a multiple of 32): one call per non-empty chunk of a segment (its rows split over
    ``cores_per_rank`` cores). Each call is cut into ceil(bytes / 1 MiB) SQEs. Returns (calls, sqes),
    int64 [pes] each.
    """
    pes = counts.shape[0]
    calls, sqes = np.zeros(pes, dtype=np.int64), np.zeros(pes, dtype=np.int64)
    per_row = -(-row_bytes // SDMA_SQE_BYTES)
    one_call = settings.segment and row_bytes % 32 == 0
    for d, s in zip(*np.nonzero(sdma)):
        n = int(counts[d, s])
        if not one_call:
            calls[d] += n
            sqes[d] += n * per_row
            continue
        for b, e in chunk_bounds(0, n, settings.cores_per_rank):
            if e > b:
                calls[d] += 1
                sqes[d] += -(-(e - b) * row_bytes // SDMA_SQE_BYTES)
    return calls, sqes


def plan_counts(ep_recv_count: np.ndarray, h: int, itemsize: int, variant: str = DOUBLEPLANE,
                min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES, settings: KernelSettings | str | None = None) -> Plan:
    """Plan from cumulative receive counts.

    ``ep_recv_count``: int [pes, expert_per_pe*pes], row d = PE d's cumulative counts
    (docs/protocol.md#2-dispatch-layout); ``h``: elements per row; ``itemsize``: bytes per element;
    ``variant``: doubleplane (the rule of docs/decision-rule.md#1-the-rule) or classic (all MTE); ``min_sdma_bytes``:
    SDMA floor in bytes (2 MiB by default, docs/decision-rule.md#6-the-floor); ``settings``: the kernel's
    settings (KernelSettings or a settings label, docs/variants.md; default the reference's).

    Returns a Plan. Raises ParameterError for a variant not in VARIANTS, h/itemsize < 1,
    min_sdma_bytes < 0, an array that is not 2-D integer with a column count divisible
    by pes, or counts that are negative or decreasing. Arithmetic is int64 (checked
    not to overflow), else Python ints.
    """
    if variant not in VARIANTS:
        raise ParameterError(f"variant={variant!r}: must be one of {', '.join(map(repr, VARIANTS))}",
                             parameter="variant", value=variant)
    settings = parse_settings(settings)
    if settings.segment and variant != DOUBLEPLANE:
        check_kernel_settings(settings, variant)  # raises: segment is a doubleplane setting
    h = _check_int("h", h, 1)
    itemsize = _check_int("itemsize", itemsize, 1)
    min_sdma_bytes = _check_int("min_sdma_bytes", min_sdma_bytes, 0)
    c = np.asarray(ep_recv_count)
    if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] % c.shape[0] or c.shape[1] == 0 \
            or not np.issubdtype(c.dtype, np.integer):
        raise ParameterError(f"ep_recv_count shape={list(c.shape)} dtype={c.dtype.name}: must be an integer array "
                        "[pes, expert_per_pe*pes] with expert_per_pe >= 1",
                        parameter="ep_recv_count", value=list(c.shape))
    pes, S = c.shape
    epp = S // pes
    counts = np.diff(c.astype(np.int64), axis=1, prepend=0)
    if (counts < 0).any():
        d, s = (int(v) for v in np.argwhere(counts < 0)[0])
        raise ParameterError(f"ep_recv_count[{d}, {s}]={c[d, s]}: must be >= the previous count "
                        f"({c[d, s - 1] if s else 0}); counts are cumulative",
                        parameter="ep_recv_count", value=int(c[d, s]))
    segment = np.arange(S)
    src = segment % pes
    remote = src[None, :] != np.arange(pes)[:, None]
    row_bytes = h * itemsize
    remote_rows = (counts * remote).sum(axis=1)
    den = max(pes - 1, 1) * epp
    max_product = int(counts.max(initial=0)) * row_bytes * den
    wide = max(max_product, int(remote_rows.max(initial=0)) * row_bytes) >= 2 ** 62
    if wide:  # Python ints: exact for any size
        counts, remote_rows = counts.astype(object), remote_rows.astype(object)
    seg_bytes = counts * row_bytes
    num = remote_rows * row_bytes
    if variant == DOUBLEPLANE:
        sdma = sdma_mask(counts, row_bytes, min_sdma_bytes)
    else:
        sdma = np.zeros((pes, S), dtype=bool)
    import pandas as pd  # here, not at the top: the CLI's flags read this module's constants (0.14 s)
    seg_df = pd.DataFrame({
        "pe": np.repeat(np.arange(pes, dtype=np.int64), S),
        "segment": np.tile(segment.astype(np.int64), pes),
        "local_expert": np.tile((segment // pes).astype(np.int64), pes),
        "src_rank": np.tile(src.astype(np.int64), pes),
        "token_count": counts.ravel(),
        "bytes": seg_bytes.ravel(),
        "plane": np.where(sdma.ravel(), "SDMA", "MTE"),
    })
    sdma_rows = (counts * sdma).sum(axis=1)
    all_rows = counts.sum(axis=1)
    calls, sqes = sdma_calls(counts, sdma, row_bytes, settings)
    # The segment variant: every PE publishes to every PE its bases (epp int32) and a ready flag.
    control_writes = 2 * pes if settings.segment else 0
    control_bytes = pes * (4 * epp + _FLAG_BYTES) if settings.segment else 0
    totals = pd.DataFrame({
        "mte_rows": all_rows - sdma_rows,
        "mte_bytes": (all_rows - sdma_rows) * row_bytes,
        "sdma_rows": sdma_rows,
        "sdma_bytes": sdma_rows * row_bytes,
        "remote_rows": remote_rows,
        "remote_avg_segment_bytes": np.asarray(num, dtype=np.float64) / den,
        "sdma_calls": calls,
        "sdma_sqes": sqes,
        "control_writes": np.full(pes, control_writes, dtype=np.int64),
        "control_bytes": np.full(pes, control_bytes, dtype=np.int64),
    }, index=pd.Index(np.arange(pes), name="pe"))
    return Plan(seg_df, totals, pes, epp, h, itemsize, variant, min_sdma_bytes, settings)


def plan(case, variant: str = DOUBLEPLANE, min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES,
         settings: KernelSettings | str | None = None) -> Plan:
    """Plan the planes of a Case (docs/decision-rule.md#1-the-rule) for ``variant`` (doubleplane or
    classic) with the kernel's ``settings`` (docs/variants.md): ``plan_counts(case.ep_recv_count,
    case.spec.h, case.spec.itemsize, variant, min_sdma_bytes, settings)``. Same errors."""
    return plan_counts(case.ep_recv_count, case.spec.h, case.spec.itemsize, variant, min_sdma_bytes, settings)
