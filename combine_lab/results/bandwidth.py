"""Bandwidths as nccl-tests define them (docs/formats.md#14-bandwidths): ``algbw = size / time``,
``busbw = algbw * factor``, decimal GB/s (1e9 bytes per second).

For the combine, ``size`` is the bytes a PE receives: the expert outputs of its ``bs * topk``
slots, ``bs * topk * h * sizeof(T)`` (the perf CSV's ``DataSize/B``; a masked slot counts as its
row, as nccl-tests counts the whole buffer), and ``time`` its ``comm_only`` CoreMaxTime. Every PE
receives from every PE, itself included: an all-to-all, whose factor is nccl-tests' alltoall's,
``(n - 1) / n``: of each PE's ``size``, the share ``1/n`` comes from itself and crosses no link.
The slowest PE (the longest time) bounds the combine; its algbw and busbw are the table's.

Today's ``comm_only GB/s`` column (``GlobalDataSize / CoreMaxTime`` in GiB/s, the reference's
perf summary) is kept beside these for the reference's CSV.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

__all__ = ["busbw_factor", "algbw_gbps", "pe_bandwidths", "by_link_class", "outcome_pe_times"]


def busbw_factor(pes: int) -> float:
    """nccl-tests' bus-bandwidth factor of an all-to-all of ``pes`` ranks: ``(pes - 1) / pes``."""
    return (pes - 1) / pes if pes > 0 else math.nan


def algbw_gbps(nbytes: float, time_us: float) -> float:
    """``nbytes`` in ``time_us`` microseconds as decimal GB/s (1e9 B/s); NaN when not timed."""
    return nbytes / time_us / 1e3 if time_us > 0 and math.isfinite(time_us) else math.nan


def pe_bandwidths(times_us: dict[int, float], data_bytes: int, pes: int) -> dict:
    """Per PE and for the slowest PE: ``times_us`` maps each timed PE to its comm_only time (us);
    ``data_bytes``: the bytes a PE receives. Returns ``{"algbw_GBps": {pe: GB/s}, "slowest_pe",
    "algbw_GBps_slowest", "busbw_GBps_slowest", "busbw_factor"}`` (NaN / None when nothing was timed)."""
    per = {int(pe): algbw_gbps(data_bytes, t) for pe, t in sorted(times_us.items())}
    timed = {pe: t for pe, t in times_us.items() if math.isfinite(t) and t > 0}
    slow = max(timed, key=lambda pe: timed[pe]) if timed else None
    alg = per[slow] if slow is not None else math.nan
    f = busbw_factor(pes)
    return {"algbw_GBps": per, "slowest_pe": slow, "algbw_GBps_slowest": alg, "busbw_GBps_slowest": alg * f,
            "busbw_factor": f}


def by_link_class(plan, model, pe: int, time_us: float) -> dict[str, float]:
    """The bytes PE ``pe`` receives over each of ``model``'s link classes (the plan's segments:
    rows the experts' owners send back to it, the rank map's class of each pair; its own rows as
    ``local``) in ``time_us``, decimal GB/s; summed over the classes, its actual bytes over its time."""
    seg = plan.segments
    mine = seg[seg["src_rank"] == pe]
    cls = model.pair_class(plan.pes)
    out = {c.name: 0.0 for c in model.links}
    out["local"] = 0.0
    for sender, nbytes in mine.groupby("pe")["bytes"].sum().items():
        name = "local" if int(sender) == pe else model.links[int(cls[int(sender), pe])].name
        out[name] += float(nbytes)
    return {k: algbw_gbps(v, time_us) for k, v in out.items()}


def outcome_pe_times(outcomes: list) -> dict[int, float]:
    """comm_only time per PE (us) of one case and variant's outcomes: a timing model's for every PE
    (deterministic); else each profiled PE's median over the repeats (its perf rows)."""
    from ..model.modelled import ModelledResult

    for o in outcomes:
        if isinstance(o.result, ModelledResult) and len(o.perf) and not o.result.kernel:
            return {pe: float(t) for pe, t in enumerate(o.result.times.core_max("comm_only"))}
    each: dict[int, list[float]] = {}
    for o in outcomes:
        if o.result is None or not len(o.perf):
            continue
        rows = o.perf[o.perf["Metric"] == "comm_only"]
        for pe, t in zip(rows["ProfPe"], rows["CoreMaxTime/us"]):
            each.setdefault(int(pe), []).append(float(t))
    return {pe: float(statistics.median(ts)) for pe, ts in each.items() if np.isfinite(ts).all()}


def case_bandwidth(outcomes: list, spec) -> dict:
    """:func:`pe_bandwidths` of one case and variant's ``outcomes`` (``spec``: its CaseSpec), and on a
    timing model ``by_link_class`` of the slowest PE (:func:`by_link_class`); ``{}`` when nothing
    was timed."""
    from ..model.modelled import ModelledResult

    times = outcome_pe_times(outcomes)
    if not times:
        return {}
    out = pe_bandwidths(times, spec.bs * spec.topk * spec.h * spec.itemsize, spec.pes)
    res = next((o.result for o in outcomes if isinstance(o.result, ModelledResult)), None)
    if res is not None and out["slowest_pe"] is not None:
        pe = out["slowest_pe"]
        out["by_link_class"] = by_link_class(res.plan, res.model, pe, times[pe])
    return out
