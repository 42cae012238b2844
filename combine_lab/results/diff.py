"""Two runs compared case by case (``combine-lab diff A B``): which differences are beyond noise.

Each run is its summary (:mod:`combine_lab.formats.summaries`): per case and variant the median
time of its repeats and their spread (min-max). A difference is beyond noise only when the two
spreads do not overlap (every repeat of B faster than every repeat of A, or slower); otherwise it
is within noise, whatever the medians say. A run of one repeat has no spread: its difference is
reported as a difference of single measurements, never called beyond noise.

The speed-up (classic / doubleplane) is compared per settings group (``compare --settings``:
``speedup_by_settings`` of the summary, docs/formats.md#11-run-summary); a summary written before
the groups were kept holds one ``speedup``, read as the reference group's. A case, variant or
settings group in one run only is said so ("only in A" / "only in B"). The speed-ups of other pairs
(your kernels against their baseline, ``compare --baseline NAME``: ``speedup_pairs``) are compared
the same way, as ``speed-up <kernel> / <baseline>``.

Two modelled runs (``clock`` ``model:...``) are points without spread: a difference within the
model's resolution (5 %, docs/timing-model.md#8-choosing-the-floor) is a tie, else B is faster or
slower "(modelled points)". A modelled run and a measured one are never compared: their rows keep
both values and say so.
"""

from __future__ import annotations

import math

import pandas as pd

from ..kernels import CLASSIC, rule_of

__all__ = ["DIFF_COLUMNS", "diff_runs", "speedup_groups", "BEYOND_FASTER", "BEYOND_SLOWER", "WITHIN_NOISE",
           "ONE_REPEAT", "ONLY_IN_A", "ONLY_IN_B", "MODELLED_TIE", "NOT_COMPARED", "extra_pairs"]

#: Columns of :func:`diff_runs`.
DIFF_COLUMNS = ["case_id", "routing", "variant", "metric", "a", "a_spread", "b", "b_spread", "b_over_a", "verdict"]
BEYOND_FASTER, BEYOND_SLOWER = "B faster, beyond noise", "B slower, beyond noise"
WITHIN_NOISE = "within noise"
ONE_REPEAT = "1 repeat: no spread to judge"
ONLY_IN_A, ONLY_IN_B = "only in A", "only in B"
MODELLED_TIE = "tie: within the model's resolution (5 %)"
NOT_COMPARED = "not compared: one run modelled, the other measured"


def _spread_text(d: dict) -> str:
    if d.get("min") is None or d.get("max") is None or d["min"] == d["max"]:
        return "-"
    return f"{d['min']:.3f}-{d['max']:.3f}"


def _compare(a: dict, b: dict, lower_is_better: bool, clocks: str = "measured") -> tuple[float, str]:
    """(b median / a median, verdict) of two {median, min, max} records (times: lower is better;
    speed-ups: higher is better). ``clocks``: ``measured`` (both), ``modelled`` (both: points,
    the model's tie rule) or ``mixed`` (never compared)."""
    am, bm = a.get("median"), b.get("median")
    if am is None or bm is None or not am:
        return math.nan, "not timed in both"
    if clocks == "mixed":
        return math.nan, NOT_COMPARED
    ratio = bm / am
    if clocks == "modelled":
        from ..model.unknowns import RESOLUTION
        if abs(ratio - 1) <= RESOLUTION:
            return ratio, MODELLED_TIE
        return ratio, ("B faster" if (ratio < 1) == lower_is_better else "B slower") + " (modelled points)"
    if a.get("min") == a.get("max") or b.get("min") == b.get("max"):
        return ratio, ONE_REPEAT
    if b["max"] < a["min"]:
        return ratio, BEYOND_FASTER if lower_is_better else BEYOND_SLOWER
    if b["min"] > a["max"]:
        return ratio, BEYOND_SLOWER if lower_is_better else BEYOND_FASTER
    return ratio, WITHIN_NOISE


def speedup_groups(case: dict) -> dict:
    """settings group -> {metric: {median, min, max, verdict}} of one case of a run summary:
    its ``speedup_by_settings``, else (an older summary) its one ``speedup`` as the reference
    group's; {} when it has none."""
    groups = case.get("speedup_by_settings")
    if groups:
        return groups
    return {"reference": case["speedup"]} if case.get("speedup") else {}


def _row(k: tuple, variant: str, metric: str, p: dict | None, q: dict | None, ratio: float, word: str) -> dict:
    return {"case_id": k[0], "routing": k[1], "variant": variant, "metric": metric,
            "a": p["median"] if p else None, "a_spread": _spread_text(p) if p else "-",
            "b": q["median"] if q else None, "b_spread": _spread_text(q) if q else "-", "b_over_a": ratio,
            "verdict": word}


def diff_runs(a: dict, b: dict) -> pd.DataFrame:
    """Case by case, the runs ``a`` and ``b`` (run summaries): per variant and metric (comm_only,
    full_op) both medians (us) with their spreads, B / A, and the verdict (:data:`BEYOND_FASTER`,
    :data:`BEYOND_SLOWER`, :data:`WITHIN_NOISE`, :data:`ONE_REPEAT`); per case and settings group
    (:func:`speedup_groups`) also the speed-up (classic / doubleplane: higher is better, "B faster"
    meaning doubleplane gained on classic), variant ``speed-up`` when both runs have the reference
    group only, else ``speed-up <group>`` (``speed-up segment-c2``). Cases in one run only get one
    row with verdict :data:`ONLY_IN_A` / :data:`ONLY_IN_B`; a variant in one run only likewise
    (metric '-'); a settings group's speed-up in one run only one row per metric with that run's
    value. Columns: :data:`DIFF_COLUMNS`."""
    key = lambda c: (c["case_id"], c.get("routing"), c.get("dtype"))  # noqa: E731
    modelled = [str(r.get("clock", "wall")).startswith("model") for r in (a, b)]
    clocks = "modelled" if all(modelled) else "mixed" if any(modelled) else "measured"
    ca, cb = {key(c): c for c in a["cases"]}, {key(c): c for c in b["cases"]}
    rows = []
    for k in [*ca, *(k for k in cb if k not in ca)]:
        if k not in ca or k not in cb:
            rows.append(_row(k, "-", "-", None, None, math.nan, ONLY_IN_B if k not in ca else ONLY_IN_A))
            continue
        x, y = ca[k], cb[k]
        for v in [*x["variants"], *(v for v in y["variants"] if v not in x["variants"])]:
            if v not in x["variants"] or v not in y["variants"]:
                rows.append(_row(k, v, "-", None, None, math.nan, ONLY_IN_B if v not in x["variants"] else ONLY_IN_A))
                continue
            for m in ("comm_only", "full_op"):
                p, q = x["variants"][v][f"{m}_us"], y["variants"][v][f"{m}_us"]
                ratio, word = _compare(p, q, lower_is_better=True, clocks=clocks)
                rows.append(_row(k, v, f"{m}/us", p, q, ratio, word))
        gx, gy = speedup_groups(x), speedup_groups(y)
        labelled = set(gx) | set(gy) != {"reference"}
        for g in [*gx, *(g for g in gy if g not in gx)]:
            label = f"speed-up {g}" if labelled else "speed-up"
            rows += _speedup_rows(k, label, gx.get(g, {}), gy.get(g, {}), clocks)
        px, py = extra_pairs(x), extra_pairs(y)
        for pair in [*px, *(p for p in py if p not in px)]:
            label = f"speed-up {pair[0]} / {pair[1]}" + ("" if pair[2] == "reference" else f" {pair[2]}")
            rows += _speedup_rows(k, label, px.get(pair, {}), py.get(pair, {}), clocks)
    return pd.DataFrame(rows, columns=DIFF_COLUMNS)


def extra_pairs(case: dict) -> dict:
    """(kernel, baseline, settings) -> {metric: {median, min, max, verdict}} of one case's
    ``speedup_pairs`` (your kernels, ``compare --baseline NAME``; docs/formats.md#11-run-summary)
    that its settings groups do not already hold: a pair whose kernel or baseline is not the lab's
    (a label with ':'), or whose baseline is not a classic (the groups' speed-up is against classic)."""
    out = {}
    for p in case.get("speedup_pairs") or []:
        if ":" in p["kernel"] or ":" in p["baseline"] or rule_of(p["baseline"]) != CLASSIC:
            out[(p["kernel"], p["baseline"], p.get("settings", "reference"))] = p
    return out


def _speedup_rows(k, label: str, a: dict, b: dict, clocks) -> list:
    """One diff row per metric of a speed-up in run A (``a``: metric -> its record) and run B: the
    two compared (higher is better), or said to be in one run only."""
    rows = []
    for m in ("comm_only", "full_op"):
        p, q = a.get(m), b.get(m)
        if p and q:
            ratio, word = _compare(p, q, lower_is_better=False, clocks=clocks)
            rows.append(_row(k, label, m, p, q, ratio, word))
        elif p or q:
            rows.append(_row(k, label, m, p, q, math.nan, ONLY_IN_A if p else ONLY_IN_B))
    return rows
