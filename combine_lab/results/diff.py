"""Two runs compared case by case (``combine-lab diff A B``): which differences are beyond noise.

Each run is its summary (:mod:`combine_lab.formats.summaries`): per case and variant the median
time of its repeats and their spread (min-max). A difference is beyond noise only when the two
spreads do not overlap (every repeat of B faster than every repeat of A, or slower); otherwise it
is within noise, whatever the medians say. A run of one repeat has no spread: its difference is
reported as a difference of single measurements, never called beyond noise.
"""

from __future__ import annotations

import math

import pandas as pd

__all__ = ["DIFF_COLUMNS", "diff_runs", "BEYOND_FASTER", "BEYOND_SLOWER", "WITHIN_NOISE", "ONE_REPEAT"]

#: Columns of :func:`diff_runs`.
DIFF_COLUMNS = ["case_id", "routing", "variant", "metric", "a", "a_spread", "b", "b_spread", "b_over_a", "verdict"]
BEYOND_FASTER, BEYOND_SLOWER = "B faster, beyond noise", "B slower, beyond noise"
WITHIN_NOISE = "within noise"
ONE_REPEAT = "1 repeat: no spread to judge"


def _spread_text(d: dict) -> str:
    if d.get("min") is None or d.get("max") is None or d["min"] == d["max"]:
        return "-"
    return f"{d['min']:.3f}-{d['max']:.3f}"


def _compare(a: dict, b: dict, lower_is_better: bool) -> tuple[float, str]:
    """(b median / a median, verdict) of two {median, min, max} records (times: lower is better;
    speed-ups: higher is better)."""
    am, bm = a.get("median"), b.get("median")
    if am is None or bm is None or not am:
        return math.nan, "not timed in both"
    ratio = bm / am
    if a.get("min") == a.get("max") or b.get("min") == b.get("max"):
        return ratio, ONE_REPEAT
    if b["max"] < a["min"]:
        return ratio, BEYOND_FASTER if lower_is_better else BEYOND_SLOWER
    if b["min"] > a["max"]:
        return ratio, BEYOND_SLOWER if lower_is_better else BEYOND_FASTER
    return ratio, WITHIN_NOISE


def diff_runs(a: dict, b: dict) -> pd.DataFrame:
    """Case by case, the runs ``a`` and ``b`` (run summaries): per variant and metric (comm_only,
    full_op) both medians (us) with their spreads, B / A, and the verdict (:data:`BEYOND_FASTER`,
    :data:`BEYOND_SLOWER`, :data:`WITHIN_NOISE`, :data:`ONE_REPEAT`); per case also the speed-up
    (classic / doubleplane: higher is better, "B faster" meaning doubleplane gained on classic).
    Cases in one run only get one row with verdict "only in A" / "only in B". Columns: :data:`DIFF_COLUMNS`."""
    key = lambda c: (c["case_id"], c.get("routing"), c.get("dtype"))  # noqa: E731
    ca, cb = {key(c): c for c in a["cases"]}, {key(c): c for c in b["cases"]}
    rows = []
    for k in [*ca, *(k for k in cb if k not in ca)]:
        if k not in ca or k not in cb:
            rows.append(dict(zip(DIFF_COLUMNS, [k[0], k[1], "-", "-", None, "-", None, "-", math.nan,
                                                "only in B" if k not in ca else "only in A"])))
            continue
        x, y = ca[k], cb[k]
        for v in [v for v in x["variants"] if v in y["variants"]]:
            for m in ("comm_only", "full_op"):
                p, q = x["variants"][v][f"{m}_us"], y["variants"][v][f"{m}_us"]
                ratio, word = _compare(p, q, lower_is_better=True)
                rows.append({"case_id": k[0], "routing": k[1], "variant": v, "metric": f"{m}/us", "a": p["median"],
                             "a_spread": _spread_text(p), "b": q["median"], "b_spread": _spread_text(q),
                             "b_over_a": ratio, "verdict": word})
        for m in ("comm_only", "full_op"):
            p, q = x.get("speedup", {}).get(m), y.get("speedup", {}).get(m)
            if p and q:
                ratio, word = _compare(p, q, lower_is_better=False)
                rows.append({"case_id": k[0], "routing": k[1], "variant": "speed-up", "metric": m, "a": p["median"],
                             "a_spread": _spread_text(p), "b": q["median"], "b_spread": _spread_text(q),
                             "b_over_a": ratio, "verdict": word})
    return pd.DataFrame(rows, columns=DIFF_COLUMNS)
