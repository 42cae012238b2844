"""One segment of a plan and why the rule sent it by its plane (docs/decision-rule.md#1-the-rule):
what the app's segment lookup says, and what a segment map cell's hover says (a ``<title>`` per
cell in the panels; in the stacked map, :func:`segment_cells_data` on its image and the bridge's
JavaScript writing the same sentence). Pure: a :class:`~combine_lab.planning.planner.Plan` in,
numbers and a sentence out (no widgets, no figures)."""

from __future__ import annotations

import base64

import numpy as np

from ..errors import ParameterError
from ..kernels import DOUBLEPLANE

__all__ = ["segment_details", "segment_text", "segment_texts", "segment_cells_data"]


def segment_details(plan, pe: int, local_expert: int, src_rank: int) -> dict:
    """Segment (``local_expert``, ``src_rank``) of destination PE ``pe`` in ``plan``: ``rows``,
    ``bytes`` (rows * h * sizeof(T)), ``plane`` ("MTE" or "SDMA", the plan's), and the rule's terms
    in integers as docs/decision-rule.md#1-the-rule writes them: ``local`` (src_rank == pe),
    ``floor`` (min_sdma_bytes), ``threshold_num`` (the PE's remote rows * row bytes),
    ``threshold_den`` (max(pes - 1, 1) * expert_per_pe), ``above_average`` (bytes * den > num) and
    ``why`` (the reason its plane was chosen). Raises ParameterError naming the index out of range."""
    for name, v, n in (("pe", pe, plan.pes), ("local_expert", local_expert, plan.expert_per_pe),
                       ("src_rank", src_rank, plan.pes)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
            raise ParameterError(f"{name}={v!r}: must be an int in [0, {n})", parameter=name, value=v)
    seg = plan.segments
    mine = seg[seg["pe"] == pe]
    row = mine[(mine["local_expert"] == local_expert) & (mine["src_rank"] == src_rank)].iloc[0]
    row_bytes = plan.h * plan.itemsize
    rows, nbytes = int(row["token_count"]), int(row["bytes"])
    remote_rows = int(mine.loc[mine["src_rank"] != pe, "token_count"].sum())
    num, den = remote_rows * row_bytes, max(plan.pes - 1, 1) * plan.expert_per_pe
    local, above, floor = src_rank == pe, nbytes * den > num, int(plan.min_sdma_bytes)
    if plan.variant != DOUBLEPLANE:
        why = "classic sends every segment by MTE"
    elif local:
        why = "the PE's own segment (local): always MTE"
    elif rows == 0:
        why = "empty: nothing to send"
    elif nbytes < floor:
        why = f"below the floor ({nbytes:,} B < {floor:,} B)"
    elif not above:
        why = f"at or below PE {pe}'s average remote segment ({nbytes:,} B * {den} <= {num:,})"
    else:
        why = (f"at or above the floor ({nbytes:,} B >= {floor:,} B) and above PE {pe}'s average remote segment "
               f"({nbytes:,} B * {den} > {num:,})")
    return {"pe": pe, "local_expert": local_expert, "src_rank": src_rank, "rows": rows, "bytes": nbytes,
            "plane": str(row["plane"]), "local": local, "floor": floor, "threshold_num": num, "threshold_den": den,
            "above_average": bool(above), "why": why}


def segment_text(plan, pe: int, local_expert: int, src_rank: int) -> str:
    """:func:`segment_details` as one sentence: "PE 2 sends 102 rows (3,342,336 B) of local_expert 0
    back to src_rank 0 by SDMA: at or above the floor ... (docs/decision-rule.md#1-the-rule)"."""
    d = segment_details(plan, pe, local_expert, src_rank)
    return (f"PE {pe} sends {d['rows']:,} row{'s' if d['rows'] != 1 else ''} ({d['bytes']:,} B) of local_expert "
            f"{local_expert} back to src_rank {src_rank} by {d['plane']}: {d['why']} (docs/decision-rule.md#1-the-rule)")


def segment_texts(plan) -> np.ndarray:
    """:func:`segment_text` of every segment at once (object array of str, [pes, expert_per_pe, pes] =
    [pe, local_expert, src_rank]): the segment map's cells in one pass (a hover title per cell), the
    rule's terms computed per PE, not per segment (a 64-cell panel in about a millisecond)."""
    pes, epp = plan.pes, plan.expert_per_pe
    seg = plan.segments
    shape = (pes, epp, pes)
    rows = seg["token_count"].to_numpy(dtype=np.int64).reshape(shape)
    nbytes = seg["bytes"].to_numpy(dtype=np.int64).reshape(shape)
    plane = seg["plane"].to_numpy().reshape(shape)
    pe_of = np.arange(pes)[:, None, None]
    src_of = np.arange(pes)[None, None, :]
    local = np.broadcast_to(pe_of == src_of, shape)
    remote_rows = np.where(local, 0, rows).sum(axis=(1, 2))
    num = remote_rows * (plan.h * plan.itemsize)
    den = max(pes - 1, 1) * epp
    floor = int(plan.min_sdma_bytes)
    out = np.empty(shape, dtype=object)
    for d in range(pes):
        for le in range(epp):
            for s in range(pes):
                r, b = int(rows[d, le, s]), int(nbytes[d, le, s])
                if plan.variant != DOUBLEPLANE:
                    why = "classic sends every segment by MTE"
                elif s == d:
                    why = "the PE's own segment (local): always MTE"
                elif r == 0:
                    why = "empty: nothing to send"
                elif b < floor:
                    why = f"below the floor ({b:,} B < {floor:,} B)"
                elif not b * den > int(num[d]):
                    why = f"at or below PE {d}'s average remote segment ({b:,} B * {den} <= {int(num[d]):,})"
                else:
                    why = (f"at or above the floor ({b:,} B >= {floor:,} B) and above PE {d}'s average remote "
                           f"segment ({b:,} B * {den} > {int(num[d]):,})")
                out[d, le, s] = (f"PE {d} sends {r:,} row{'s' if r != 1 else ''} ({b:,} B) of local_expert {le} "
                                 f"back to src_rank {s} by {plane[d, le, s]}: {why} (docs/decision-rule.md#1-the-rule)")
    return out


def segment_cells_data(plan) -> dict | None:
    """What the stacked segment map's image carries for its hover (``data-*`` attributes, name ->
    str): each cell's :func:`segment_text` is rebuilt in the browser (combine_lab/lab/static/bridge.js)
    from these, not sent as 32,768 sentences. ``pes``, ``epp`` (expert_per_pe), ``variant``,
    ``floor`` (min_sdma_bytes), ``row-bytes`` (h * sizeof(T)); ``rows``: base64 of every segment's
    token_count, little-endian unsigned of ``rows-bits`` (8, 16 or 32: the fewest that hold the
    largest), in [pe, local_expert, src_rank] order (image row pe * epp + local_expert, column
    src_rank); ``sdma``: base64 of the plan's SDMA mask in that order, 8 segments a byte, first
    segment in the high bit (numpy's packbits). At pes 64, epp 8 (32,768 segments): 43,692
    characters of counts in uint8, 87,384 in uint16 (deepseek at bs 4096), 5,464 of mask; encoded
    in 0.4 ms. None when a count does not fit 32 bits (no hover then: the lookup under the map
    still says each segment). docs/lab.md section 4."""
    seg = plan.segments
    rows = seg["token_count"].to_numpy(dtype=np.int64)
    top = int(rows.max(initial=0))
    bits = next((b for b in (8, 16, 32) if top < 2 ** b), None)
    if bits is None or int(rows.min(initial=0)) < 0:
        return None
    packed = rows.astype(f"<u{bits // 8}").tobytes()
    mask = np.packbits((seg["plane"].to_numpy() == "SDMA").astype(np.uint8)).tobytes()
    return {"pes": str(plan.pes), "epp": str(plan.expert_per_pe), "variant": str(plan.variant),
            "floor": str(int(plan.min_sdma_bytes)), "row-bytes": str(plan.h * plan.itemsize),
            "rows-bits": str(bits), "rows": base64.b64encode(packed).decode(),
            "sdma": base64.b64encode(mask).decode()}
