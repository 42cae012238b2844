"""Tables that explain a case: routing, dispatch layout, window slots, the decision rule, core programs.

Used by the walkthrough notebook; each function returns a pandas DataFrame with one
documented row per item so that a reader can follow the combine by hand. Sources:
docs/protocol.md#2-dispatch-layout, docs/decision-rule.md#1-the-rule, docs/protocol.md#4-the-symmetric-window and docs/protocol.md#5-kernel-protocol.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..case.case import Case
from ..errors import ParameterError
from .cores import TWIN_DEFAULT_SOC, launch_block_dim
from .capacity import STATUS_FLAG_BYTES, STATUS_SLOT_BYTES, window_geometry
from .planner import Plan

__all__ = ["STATUS_SLOT_BYTES", "STATUS_FLAG_BYTES", "SDMA_QUIET_EVERY", "window_geometry", "routing_table", "segment_table",
           "dispatch_table", "decision_table", "core_load", "core_program"]

#: The kernel SDMA-quiets after this many outstanding SDMA issues (docs/protocol.md#5-kernel-protocol).
SDMA_QUIET_EVERY = 256


def _check_pe(case: Case, pe: int) -> int:
    if not isinstance(pe, (int, np.integer)) or not 0 <= pe < case.spec.pes:
        raise ParameterError(f"pe={pe!r}: must be in [0, pes={case.spec.pes})", parameter="pe", value=pe)
    return int(pe)


def routing_table(case: Case, src_rank: int | None = None) -> pd.DataFrame:
    """One row per (src_rank, token_id, topk_id) slot of the routing (docs/protocol.md#1-the-combine-problem).

    Columns: src_rank, token_id, topk_id, expert_id (int32 as drawn; -1 = masked),
    scale (float32 expert_scales), masked (bool: id outside [0, E)), dest_pe
    (= expert_id // expert_per_pe, -1 when masked), local_expert (= expert_id %
    expert_per_pe, -1 when masked), segment (local_expert*pes + src_rank on dest_pe, -1
    when masked). ``src_rank`` limits the table to one source PE.
    """
    s = case.spec
    ids = case.expert_ids.astype(np.int64)
    src, tok, k = np.meshgrid(np.arange(s.pes), np.arange(s.bs), np.arange(s.topk), indexing="ij")
    masked = (ids < 0) | (ids >= s.moe_expert_num)
    df = pd.DataFrame({
        "src_rank": src.ravel(), "token_id": tok.ravel(), "topk_id": k.ravel(), "expert_id": ids.ravel(),
        "scale": case.expert_scales.ravel(), "masked": masked.ravel(),
        "dest_pe": np.where(masked, -1, ids // s.expert_per_pe).ravel(),
        "local_expert": np.where(masked, -1, ids % s.expert_per_pe).ravel(),
    })
    df["segment"] = np.where(df["masked"], -1, df["local_expert"] * s.pes + df["src_rank"])
    if src_rank is not None:
        if not 0 <= src_rank < s.pes:
            raise ParameterError(f"src_rank={src_rank!r}: must be in [0, pes={s.pes})",
                                 parameter="src_rank", value=src_rank)
        df = df[df["src_rank"] == src_rank].reset_index(drop=True)
    return df


def segment_table(case: Case, pe: int) -> pd.DataFrame:
    """The segments of destination PE ``pe`` as ep_recv_count bounds them (docs/protocol.md#2-dispatch-layout).

    Columns: segment (= local_expert*pes + src_rank), local_expert, src_rank,
    ep_recv_count (the cumulative count stored for it), start (= previous count, 0 for
    segment 0), end (= ep_recv_count), rows (= end - start): segment s spans expand_x
    rows [start, end).
    """
    pe = _check_pe(case, pe)
    pes = case.spec.pes
    c = case.ep_recv_count[pe].astype(np.int64)
    seg = np.arange(c.size)
    start = np.concatenate([[0], c[:-1]])
    return pd.DataFrame({"segment": seg, "local_expert": seg // pes, "src_rank": seg % pes,
                         "ep_recv_count": c, "start": start, "end": c, "rows": c - start})


def dispatch_table(case: Case, pe: int, plan: Plan | None = None, values: int = 0) -> pd.DataFrame:
    """The receive rows of destination PE ``pe``: expand_x and assist_info_for_combine row by row.

    Columns: row (expand_x row), segment, local_expert, expert_id, src_rank, token_id,
    topk_id (the three assist_info_for_combine fields), window_slot (= token_id*topk +
    topk_id: where the row lands in src_rank's window), payload_offset and status_offset
    (bytes into src_rank's window, see :func:`window_geometry`); ``plane`` when a plan is
    given; with ``values=n > 0``, ``x_head``: the first n elements of the row (identity
    experts: x[src_rank, token_id]; this draws x, so keep it for small cases).
    Only the ep_recv_count[-1] used rows are listed (the rest is zero padding).
    """
    pe = _check_pe(case, pe)
    s = case.spec
    rows = case.rank_rows(pe).astype(np.int64)
    n = rows.shape[0]
    seg = np.searchsorted(case.ep_recv_count[pe], np.arange(n), side="right")
    geo = window_geometry(s)
    slot = rows[:, 1] * s.topk + rows[:, 2]
    df = pd.DataFrame({
        "row": np.arange(n), "segment": seg, "local_expert": seg // s.pes,
        "expert_id": pe * s.expert_per_pe + seg // s.pes,
        "src_rank": rows[:, 0], "token_id": rows[:, 1], "topk_id": rows[:, 2], "window_slot": slot,
        "payload_offset": slot * geo["slot_stride"], "status_offset": geo["status_offset"] + slot * STATUS_SLOT_BYTES,
    })
    if plan is not None:
        planes = plan.segments["plane"].to_numpy().reshape(s.pes, -1)[pe]
        df["plane"] = planes[seg]
    if values > 0:
        x = case.x
        df["x_head"] = [tuple(x[r, t, :values].tolist()) for r, t in zip(rows[:, 0], rows[:, 1])]
    return df


def decision_table(case: Case, pe: int, min_sdma_bytes: int) -> pd.DataFrame:
    """The dual-plane rule (docs/decision-rule.md#1-the-rule) worked out for every segment of PE ``pe``.

    Written out segment by segment (not vectorised) so that each step can be read.
    Columns: segment, local_expert, src_rank, remote (src_rank != pe), token_count,
    segment_bytes (= token_count*h*sizeof(T)), over_floor (segment_bytes >=
    min_sdma_bytes), lhs (= segment_bytes * threshold_den), threshold_num, above_average
    (lhs > threshold_num), plane ('SDMA' when remote, non-empty, over_floor and
    above_average, else 'MTE'). ``df.attrs`` holds threshold_num (bytes of all remote rows),
    threshold_den (max(pes-1, 1)*expert_per_pe) and remote_avg_bytes (their quotient).
    """
    pe = _check_pe(case, pe)
    s = case.spec
    counts = np.diff(case.ep_recv_count[pe].astype(np.int64), prepend=0)
    src = np.arange(counts.size) % s.pes
    remote_rows = int(counts[src != pe].sum())
    num = remote_rows * s.row_bytes
    den = max(s.pes - 1, 1) * s.expert_per_pe
    out = []
    for seg, n in enumerate(counts.tolist()):
        seg_bytes = n * s.row_bytes
        remote = int(src[seg]) != pe
        over = seg_bytes >= min_sdma_bytes
        above = seg_bytes * den > num
        out.append({"segment": seg, "local_expert": seg // s.pes, "src_rank": int(src[seg]), "remote": remote,
                    "token_count": n, "segment_bytes": seg_bytes, "over_floor": over, "lhs": seg_bytes * den,
                    "threshold_num": num, "above_average": above,
                    "plane": "SDMA" if remote and n > 0 and over and above else "MTE"})
    df = pd.DataFrame(out)
    df.attrs.update(threshold_num=num, threshold_den=den, remote_avg_bytes=num / den, min_sdma_bytes=min_sdma_bytes)
    return df


def core_load(plan: Plan, soc: str = TWIN_DEFAULT_SOC) -> pd.DataFrame:
    """What each AIV core of each PE sends in stage 1, by plane (docs/protocol.md#5-kernel-protocol).

    A launch has ``block_dim = min(pes, AIV cores of soc, 48)`` cores
    (:func:`combine_lab.planning.cores.launch_block_dim`); core c of PE d serves the segments whose
    src_rank is c, c + block_dim, ... Returns one row per (pe, core) with mte_rows, mte_bytes,
    sdma_rows, sdma_bytes (int64) and remote (bool: the core serves a source rank other than
    its own PE, so its rows cross to another PE; rows a PE sends to itself stay in its own
    memory and never go by SDMA). The largest mte_bytes of the remote cores is the cross-PE
    work of the busiest one: what SDMA takes off the cores when the copy engine runs beside them.
    """
    seg = plan.segments
    pes = plan.pes
    blocks = launch_block_dim(pes, soc)
    is_sdma = seg["plane"].to_numpy() == "SDMA"
    df = pd.DataFrame({"pe": seg["pe"], "core": seg["src_rank"] % blocks,
                       "mte_rows": np.where(is_sdma, 0, seg["token_count"]),
                       "mte_bytes": np.where(is_sdma, 0, seg["bytes"]),
                       "sdma_rows": np.where(is_sdma, seg["token_count"], 0),
                       "sdma_bytes": np.where(is_sdma, seg["bytes"], 0)})
    out = df.groupby(["pe", "core"], as_index=False).sum().astype("int64")
    serves_one = (out["core"] + blocks >= pes)  # the only rank core c serves is c itself
    out["remote"] = ~((out["pe"] == out["core"]) & serves_one)
    return out


def _slots_text(slots: np.ndarray, limit: int = 8) -> str:
    head = ", ".join(str(int(v)) for v in slots[:limit])
    return head + (f", ... ({len(slots)} slots)" if len(slots) > limit else "")


def core_program(case: Case, plan: Plan, pe: int, core: int, soc: str = TWIN_DEFAULT_SOC) -> pd.DataFrame:
    """Stage 1 of core ``core`` on PE ``pe``, step by step (docs/protocol.md#5-kernel-protocol).

    The core serves the segments whose src_rank is ``core``, ``core + block_dim``, ...
    (``block_dim = launch_block_dim(pes, soc)``): their rows go back to that source rank's
    window. Three phases, numbered as the kernel's comments in ``SendSegments`` number them:
    (1) SDMA puts of every row of its SDMA segments (an SDMA quiet after every 256 issues);
    (2) per MTE segment: MTE puts, quiet, then the segment's status flags by MTE; and one more
    quiet after the last segment's flags; (3) SDMA quiet, then the status flags of the SDMA rows
    by MTE, then quiet. Columns: phase (1, 2, 3), step, engine ('SDMA' or 'MTE'), action,
    segment (-1 when not one segment), rows, bytes (payload bytes; status flags count 32 B
    each), slots (window slots of PE ``core``, abbreviated).
    """
    pe = _check_pe(case, pe)
    blocks = launch_block_dim(case.spec.pes, soc)
    if not 0 <= core < blocks:
        raise ParameterError(f"core={core!r}: must be in [0, block_dim={blocks}) (min(pes, AIV cores of {soc}, 48))",
                             parameter="core", value=core)
    s = case.spec
    table = dispatch_table(case, pe, plan)
    mine = table[table["src_rank"] % blocks == core].sort_values(["src_rank", "segment"], kind="stable")
    steps = []

    def add(phase, engine, action, segment, rows, nbytes, slots):
        steps.append({"phase": phase, "step": len(steps) + 1, "engine": engine, "action": action,
                      "segment": segment, "rows": rows, "bytes": nbytes, "slots": slots})

    sdma_rows = mine[mine["plane"] == "SDMA"]
    issued = 0
    for (rank, seg), grp in sdma_rows.groupby(["src_rank", "segment"], sort=True):
        add(1, "SDMA", f"put {len(grp)} rows -> PE {rank} window (no wait)", int(seg), len(grp),
            len(grp) * s.row_bytes, _slots_text(grp["window_slot"].to_numpy()))
        issued += len(grp)
        while issued >= SDMA_QUIET_EVERY:
            add(1, "SDMA", f"quiet after {SDMA_QUIET_EVERY} outstanding issues", -1, 0, 0, "")
            issued -= SDMA_QUIET_EVERY
    mte_rows = mine[mine["plane"] == "MTE"]
    for (rank, seg), grp in mte_rows.groupby(["src_rank", "segment"], sort=True):
        slots = _slots_text(grp["window_slot"].to_numpy())
        add(2, "MTE", f"put {len(grp)} rows -> PE {rank} window", int(seg), len(grp), len(grp) * s.row_bytes, slots)
        add(2, "MTE", "quiet: those rows have landed", int(seg), 0, 0, "")
        add(2, "MTE", f"write {len(grp)} status flags (ready = 1)", int(seg), len(grp), len(grp) * STATUS_FLAG_BYTES,
            slots)
    if len(mte_rows):
        add(2, "MTE", "quiet: the last flags have landed", -1, 0, 0, "")
    if len(sdma_rows):
        add(3, "SDMA", "quiet: every SDMA row has landed", -1, 0, 0, "")
        add(3, "MTE", f"write {len(sdma_rows)} status flags of the SDMA rows (ready = 1)", -1, len(sdma_rows),
            len(sdma_rows) * STATUS_FLAG_BYTES, _slots_text(sdma_rows["window_slot"].to_numpy()))
        add(3, "MTE", "quiet: flags have landed", -1, 0, 0, "")
    return pd.DataFrame(steps, columns=["phase", "step", "engine", "action", "segment", "rows", "bytes", "slots"])
