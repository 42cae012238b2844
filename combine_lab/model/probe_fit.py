"""Fit the timing model's unknowns from a probe CSV (``combine-lab calibrate combine_probe.csv``;
docs/probe.md#4-the-fit). Each parameter comes from the rows that time it, in the model's own
terms (combine_lab/model/replay.py, docs/timing-model.md), and is *identified* only when those
rows are there, the estimate is positive, and its estimate from each repeat alone spreads at
most :data:`SPREAD_LIMIT` (inter-quartile range over the median); rows the fit did not use are
predicted with the fitted values and must fall within :data:`HELD_OUT_LIMIT`. A parameter that
fails says why and which probe rows would identify it; a fit with any such parameter among those
asked for is not usable (``calibrate`` exits 1 and writes nothing).

The estimates (times per launch t, n operations per core, bytes B; us and GB/s):

- quiet_us = t / n (quiet rows); sdma_quiet_us, wait_us (8 words polled per slot) likewise.
- flag_us = (t - quiet_us) / n (flag rows); sdma_issue_us = t / n (sdma_issue rows).
- MTE, single-buffered rows of one core: the row's time p = (t - quiet_us) / n = a + b with
  a = B / core_gm_GBps (the model's, not fitted) and b = mte_put_us + B / mte_remote_GBps, a
  straight line in B: two row sizes or more. Double-buffered rows are held out:
  a + b + (n - 1) max(a, b) + quiet_us.
- flag_latency_us: a round trip is 2 x (row + quiet + flag + latency + wait), the row's time p
  measured at the round trip's size: latency = t / (2 n) - p - quiet_us - flag_us - wait_us.
- SDMA: a core's n puts take t = sdma_issue_us + n w max(1, k / sdma_engines) + sdma_quiet_us
  with k cores issuing at once, w = ceil(B / 1 MiB) sdma_sqe_us + B / sdma_GBps: from one core to
  one peer at two sizes or more, sdma_sqe_us and sdma_GBps (least squares); sdma_engines = k w_1 / w_k
  at the largest k, identified only when fewer than 0.8 k ran at once (else it is only a lower
  bound). Rows to several peers, and k > 1 at the other sizes, are held out.
- Link classes (docs/probe.md#6-link-classes): the one-peer sdma rows fall into groups by their
  ``link_class`` (else by the model's class of their pair); the nearest group (PE 0 -> 1) is fitted
  as above, each other group alone for its class's sdma_sqe_us and sdma_GBps, in that class's SDMA
  cost form, with the nearest group's sdma_issue_us and sdma_quiet_us (:class:`ClassFit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..errors import ParameterError
from ..formats.probe_csv import ProbeRow, read_probe_csv
from . import costs
from .machines import LINK_PARAMETERS, NpuModel

#: The parameters a probe CSV can identify, in the order the fit reports them.
PROBE_PARAMETERS = ("quiet_us", "sdma_quiet_us", "wait_us", "flag_us", "sdma_issue_us", "mte_put_us",
                    "mte_remote_GBps", "flag_latency_us", "sdma_sqe_us", "sdma_GBps", "sdma_engines")
#: A parameter's per-repeat estimates may spread this much (IQR / median) before it counts as noise.
SPREAD_LIMIT = 0.5
#: A held-out row's prediction may be off this much (|predicted - measured| / measured).
HELD_OUT_LIMIT = 0.5
#: Engines count as saturated (identified) when at most this share of the k cores ran at once.
SATURATION = 0.8
SQE_BYTES = 1 << 20

#: Which probe rows identify each parameter (what a report asks for when one is missing).
NEEDS = {
    "quiet_us": "quiet rows",
    "sdma_quiet_us": "sdma_quiet rows",
    "wait_us": "wait rows",
    "flag_us": "flag rows, and quiet_us",
    "sdma_issue_us": "an sdma_issue row",
    "mte_put_us": "single-buffered mte_put rows of one core at two or more row sizes (--row-bytes), and quiet_us",
    "mte_remote_GBps": "single-buffered mte_put rows of one core at two or more row sizes (--row-bytes), and quiet_us",
    "flag_latency_us": "a flag_rtt row, a single-buffered mte_put row of its row size, and quiet_us, flag_us, wait_us",
    "sdma_sqe_us": "sdma rows of one core to one peer at two or more sizes (--sdma-bytes), sdma_issue_us, "
                   "sdma_quiet_us",
    "sdma_GBps": "sdma rows of one core to one peer at two or more sizes (--sdma-bytes), sdma_issue_us, sdma_quiet_us",
    "sdma_engines": "sdma rows to one peer from more cores than run at once (--cores, up to 48), and sdma_GBps, "
                    "sdma_sqe_us",
}


@dataclass
class FittedParam:
    """One parameter: ``value`` (None when not identified), ``iqr`` (low, high) of its per-repeat
    estimates, ``identified``, ``how`` (the rows it came from, or why it was not identified)."""

    name: str
    unit: str
    value: float | None = None
    iqr: tuple[float, float] | None = None
    identified: bool = False
    how: str = ""


@dataclass
class HeldOut:
    """A row the fit did not use: ``label``, ``measured`` and ``predicted`` us, the ``params`` its
    prediction rests on."""

    label: str
    measured: float
    predicted: float
    params: tuple[str, ...]

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


@dataclass
class ProbeFit:
    """The fit of a probe CSV: ``params`` by name (every one of :data:`PROBE_PARAMETERS`), the
    ``free`` ones asked for, the ``held_out`` checks, the ``model`` it started from, ``source``."""

    model: NpuModel
    params: dict[str, FittedParam]
    free: list[str]
    held_out: list[HeldOut] = field(default_factory=list)
    source: str = ""
    measured_on: str = ""
    #: the link class (index into ``model.links``) whose SDMA parameters the nearest one-peer rows fit
    cls: int = 0
    #: the farther link classes the probe reached, one fit each
    classes: list["ClassFit"] = field(default_factory=list)
    #: the model's link classes the probe's PEs did not reach, as (class, PEs needed)
    unreached: tuple[tuple[str, int], ...] = ()

    @property
    def unidentified(self) -> list[str]:
        """The free parameters the data cannot identify (or whose held-out rows fail); a farther
        class's written link parameter as ``<class>.<name>``."""
        return [n for n in self.free if not self.params[n].identified] + \
            [f"{c.label}.{n}" for c in self.classes if c.written for n in c.params if n in self.free
             and not c.params[n].identified]

    def values(self) -> dict[str, float]:
        """The values this fit writes, by the model's parameter names (``<class>.<name>`` for link
        ones): the free ones with a value, of the nearest class and every farther written one."""
        out = {model_key(self.model, n, self.cls): self.params[n].value for n in self.free
               if self.params[n].value is not None}
        for c in self.classes:
            if c.written:
                out.update({model_key(self.model, n, c.cls): f.value for n, f in c.params.items()
                            if n in self.free and f.value is not None})
        return out

    @property
    def usable(self) -> bool:
        return not self.unidentified

    def fitted_model(self) -> NpuModel:
        """The starting model with the free parameters' fitted values, each now sourced to the probe
        (``P: measured by combine-lab probe``), no longer assumed. Raises ParameterError when the fit
        is not usable."""
        if not self.usable:
            raise ParameterError(f"the probe fit cannot identify {', '.join(self.unidentified)}: not usable",
                                 parameter="free", value=list(self.unidentified))
        params = dict(self.model.params)
        fitted = [(n, self.params[n], self.cls) for n in self.free]
        fitted += [(n, f, c.cls) for c in self.classes if c.written for n, f in c.params.items() if n in self.free]
        for n, f, cls in fitted:
            lo, hi = f.iqr
            key = model_key(self.model, n, cls)
            params[key] = replace(params[key], value=float(f.value), assumed=False, fit=True,
                                source=f"P: measured by combine-lab probe ({self.source}; {self.measured_on}), "
                                       f"IQR of the repeats {lo:.4g}-{hi:.4g} {f.unit}; {f.how}")
        return replace(self.model, params=params, name=f"{self.model.name}-probe", path="")

    def report(self) -> str:
        """The fit as text: one line per parameter (value, IQR, identified or why not), the held-out
        rows, and the verdict: usable, or which parameters the data cannot identify and what would."""
        lines = [f"probe fit of {self.source}, starting from {self.model.name}; measured on {self.measured_on}",
                 f"identified: rows present, estimate > 0, per-repeat estimates within {SPREAD_LIMIT:.0%} "
                 f"(IQR / median), held-out rows within {HELD_OUT_LIMIT:.0%}"]
        w = max(len(n) for n in PROBE_PARAMETERS)
        for n in PROBE_PARAMETERS:
            lines.append(self._line(n, self.params[n], w))
        if self.model.links:
            c = self.model.links[self.cls]
            lines.append(f"  (sdma_sqe_us, sdma_GBps above: link class {c.name} of {self.model.name}, its "
                         f"{c.form} form)")
        for c in self.classes:
            mc = self.model.links[c.cls]
            lines.append(f"link class {c.label} (PE 0 -> {c.dst}; {self.model.name}'s {mc.name}, its {mc.form} form):")
            for n, f in c.params.items():
                lines.append(self._line(n, f, w))
            if not c.written:
                lines.append(f"  not written: {c.note}")
        for name, need in self.unreached:
            lines.append(f"link class {name}: not probed (PE 0 -> {need - 1}: a probe of -pes {need} or more "
                         f"reaches it); its link parameters stay {self.model.name}'s")
        if self.held_out:
            lines.append("held-out rows (not used by the fit), time of one launch:")
            for h in self.held_out:
                lines.append(f"  {h.label}: measured {h.measured:.4g} us, predicted {h.predicted:.4g} us "
                             f"({h.error:+.0%})")
        if self.usable:
            lines.append(f"usable: {', '.join(self.free)} identified from the probe")
        else:
            lines.append(f"NOT usable: the data cannot identify {', '.join(self.unidentified)}")
            for n in self.unidentified:
                lines.append(f"  {n}: identified by {NEEDS[n.split('.')[-1]]} (where it is noise: more repeats, a "
                             "quieter machine)")
            ok = [n for n in self.free if self.params[n].identified]
            if ok:
                lines.append(f"  (--free {','.join(ok)} fits only the identified ones)")
        return "\n".join(lines)

    def _line(self, n: str, f: "FittedParam", w: int) -> str:
        mark = "" if n in self.free else " (not asked for)"
        if f.identified:
            lo, hi = f.iqr
            return f"  {n:<{w}} {f.value:>10.4g} {f.unit:<5} IQR {lo:.4g}-{hi:.4g}  identified{mark}: {f.how}"
        val = "-" if f.value is None else f"{f.value:.4g}"
        return f"  {n:<{w}} {val:>10} {f.unit:<5} NOT identified{mark}: {f.how}"


@dataclass
class ClassFit:
    """The fit of one farther link class: ``label`` (the CSV's link_class), ``dst`` (its PE from PE
    0), ``cls`` (index into the model's links), ``params`` (sdma_sqe_us and sdma_GBps); ``written``:
    whether the fitted model takes them (not when the model prices this pair as a class already
    written, ``note`` says so)."""

    label: str
    dst: int
    cls: int
    params: dict[str, FittedParam]
    written: bool = True
    note: str = ""


def _model_class(model: NpuModel, label: str, r: ProbeRow) -> int:
    """The model's class (index into ``model.links``) of CSV class ``label`` (by name), else of row
    ``r``'s pair in the model's rank map."""
    names = [c.name for c in model.links]
    if label in names:
        return names.index(label)
    if len(model.links) <= 1:
        return 0
    return int(model.pair_class(max(r.pes, r.src + 1, r.dst + 1))[r.src, r.dst])


def _label(model: NpuModel, r: ProbeRow) -> str:
    if r.link_class:
        return r.link_class
    return model.links[_model_class(model, "", r)].name if model.links else ""


def link_groups(rows: list[ProbeRow], model: NpuModel) -> list[tuple[str, int, int]]:
    """(link class label, its PE from PE 0, the model's class index) of each group of one-peer sdma
    rows, nearest first (docs/probe.md#6-link-classes): a row's label is its CSV ``link_class``,
    else the model's class of its pair."""
    first: dict[str, ProbeRow] = {}
    for r in rows:
        if r.kind == "sdma" and r.peers == 1 and r.dst is not None:
            first.setdefault(_label(model, r), r)
    return [(lab, r.dst, _model_class(model, lab, r)) for lab, r in sorted(first.items(), key=lambda kv: kv[1].dst)]


def probed_class(rows: list[ProbeRow], model: NpuModel) -> int:
    """The link class (index into ``model.links``) of the nearest pair the one-peer SDMA rows
    measure (the probe sends from PE 0 to PE 1 first): the class whose ``sdma_sqe_us`` and
    ``sdma_GBps`` the main fit gives (docs/probe.md#4-the-fit); farther pairs are
    :func:`link_groups`' others."""
    groups = link_groups(rows, model)
    if groups:
        return groups[0][2]
    return int(model.pair_class(2)[0, 1]) if len(model.links) > 1 else 0


def model_key(model: NpuModel, name: str, cls: int) -> str:
    """The name of probe parameter ``name`` in ``model``: a link parameter as ``<class>.<name>`` of
    class ``cls``, the others as they are."""
    if name in LINK_PARAMETERS and model.links:
        return f"{model.links[cls].name}.{name}"
    return name


# ---- estimates from one view of the times (the medians, or one repeat of every row) ----

class _Est:
    def __init__(self, rows: list[ProbeRow], t: np.ndarray, model: NpuModel, cls: int):
        self.rows, self.t, self.m = rows, t, model
        self.v: dict[str, float | None] = {}
        self.how: dict[str, str] = {}
        self.held: list[HeldOut] = []
        self.sdma_w1: dict[int, float] = {}
        # the probed pair's class: its SDMA cost form (additive c + b / BW, or max(c, b / BW) per descriptor)
        self.is_max = bool(model.links[cls].form == "max") if model.links else False

    def sel(self, kind: str, **kw) -> list[int]:
        return [i for i, r in enumerate(self.rows) if r.kind == kind and all(getattr(r, k) == v for k, v in kw.items())]

    def set(self, name: str, value: float | None, how: str) -> None:
        if value is not None and not (math.isfinite(value) and value > 0):
            how = f"came out {value:.4g} (not > 0): below what these rows resolve; {how}"
            value = None
        self.v[name], self.how[name] = value, how

    def per_op(self, kind: str, minus: float = 0.0) -> tuple[float | None, str]:
        idx = self.sel(kind)
        if not idx:
            return None, f"no {kind} rows"
        return float(np.mean([(self.t[i] - minus) / self.rows[i].puts for i in idx])), \
            f"{len(idx)} {kind} row(s), {self.rows[idx[0]].puts} per launch"

    def run(self) -> "_Est":
        m = self.m
        for name, kind in (("quiet_us", "quiet"), ("sdma_quiet_us", "sdma_quiet"), ("wait_us", "wait")):
            self.set(name, *self.per_op(kind))
        q = self.v["quiet_us"]
        if q is None:
            self.set("flag_us", None, "needs quiet_us")
        else:
            self.set("flag_us", *self.per_op("flag", q))
        self.set("sdma_issue_us", *self.per_op("sdma_issue"))
        self._mte(q, m["core_gm_GBps"])
        self._latency()
        self._sdma()
        return self

    def _row_time(self, i: int, q: float, core_gm: float) -> tuple[float, float]:
        r = self.rows[i]
        p = (self.t[i] - q) / r.puts
        return p, r.bytes / (core_gm * 1e3)

    def _mte(self, q: float | None, core_gm: float) -> None:
        single = self.sel("mte_put", cores=1, buffering="single")
        sizes = sorted({self.rows[i].bytes for i in single})
        if q is None or len(sizes) < 2:
            why = "needs quiet_us" if q is None else f"single-buffered rows at {len(sizes)} row size(s): it and " \
                "mte_remote_GBps are one sum at one size"
            self.set("mte_put_us", None, why)
            self.set("mte_remote_GBps", None, why)
            return
        B = np.array([self.rows[i].bytes for i in single], dtype=np.float64)
        b = np.array([p - a for p, a in (self._row_time(i, q, core_gm) for i in single)])
        s, c = np.polyfit(B / 1e3, b, 1)  # b = c + (B / 1e3) * s, s in us per kB = 1 / GB/s
        how = f"{len(single)} single-buffered rows at {len(sizes)} row sizes, a = B / core_gm_GBps " \
              f"({core_gm:g}, the model's)"
        self.set("mte_put_us", float(c), how)
        self.set("mte_remote_GBps", float(1.0 / s) if s > 0 else float(s), how)
        if self.v["mte_put_us"] is None or self.v["mte_remote_GBps"] is None:
            return
        for i in self.sel("mte_put", buffering="double"):
            r = self.rows[i]
            a = r.bytes / (core_gm * 1e3)
            bb = self.v["mte_put_us"] + r.bytes / (self.v["mte_remote_GBps"] * 1e3)
            pred = a + bb + (r.puts - 1) * max(a, bb) + q
            self.held.append(HeldOut(r.label(), float(self.t[i]), pred, ("mte_put_us", "mte_remote_GBps")))

    def _latency(self) -> None:
        rtt = self.sel("flag_rtt")
        parts = {n: self.v[n] for n in ("quiet_us", "flag_us", "wait_us")}
        if not rtt:
            return self.set("flag_latency_us", None, "no flag_rtt rows")
        missing = [n for n, v in parts.items() if v is None]
        if missing:
            return self.set("flag_latency_us", None, f"needs {', '.join(missing)}")
        vals = []
        for i in rtt:
            r = self.rows[i]
            same = self.sel("mte_put", cores=1, buffering="single", bytes=r.bytes)
            if not same:
                return self.set("flag_latency_us", None, f"no single-buffered mte_put row of {r.bytes} bytes (the "
                                                         "round trip's row)")
            p = float(np.mean([(self.t[j] - parts["quiet_us"]) / self.rows[j].puts for j in same]))
            vals.append(self.t[i] / (2 * r.puts) - p - sum(parts.values()))
        self.set("flag_latency_us", float(np.mean(vals)),
                 f"{len(rtt)} flag_rtt row(s): half a round trip less the row, quiet, flag and wait")

    def _w(self, i: int) -> float:
        r = self.rows[i]
        return (self.t[i] - self.v["sdma_quiet_us"] - self.v["sdma_issue_us"]) / r.puts

    def _sdma(self) -> None:
        need = [n for n in ("sdma_quiet_us", "sdma_issue_us") if self.v[n] is None]
        one = self.sel("sdma", cores=1, peers=1)
        sizes = sorted({self.rows[i].bytes for i in one})
        if need or len(sizes) < 2:
            why = f"needs {', '.join(need)}" if need else f"sdma rows of one core to one peer at {len(sizes)} size(s)"
            for n in ("sdma_sqe_us", "sdma_GBps", "sdma_engines"):
                self.set(n, None, why)
            return
        B = np.array([self.rows[i].bytes for i in one], dtype=np.float64)
        w = np.array([self._w(i) for i in one])
        how = f"{len(one)} sdma rows of one core to one peer at {len(sizes)} sizes"
        if self.is_max:
            # max(c, b / BW) per descriptor: the smallest size is the fixed cost's, the largest the bytes'
            n = np.ceil(B / SQE_BYTES)
            small, large = B == B.min(), B == B.max()
            sqe = float(np.median(w[small] / n[small]))
            gbps = float(np.median((B[large] / n[large]) / (w[large] / n[large]))) / 1e3
            how += " (the probed class's max form: the fixed cost from the smallest, the rate from the largest)"
        else:
            X = np.column_stack([np.ceil(B / SQE_BYTES), B / 1e3])
            (sqe, inv_rate), *_ = np.linalg.lstsq(X, w, rcond=None)
            gbps = float(1.0 / inv_rate) if inv_rate > 0 else float(inv_rate)
        self.set("sdma_sqe_us", float(sqe), how)
        self.set("sdma_GBps", gbps, how)
        for i in one:
            self.sdma_w1[self.rows[i].bytes] = self._w(i)
        # engines: how many of the largest k's streams ran at once, at each size measured both ways
        many = [i for i in self.sel("sdma", peers=1) if self.rows[i].cores > 1 and self.rows[i].bytes in self.sdma_w1]
        if not many:
            self.set("sdma_engines", None, "no sdma rows from more than one core")
        else:
            kmax = max(self.rows[i].cores for i in many)
            top = [i for i in many if self.rows[i].cores == kmax]
            at_once = float(np.median([kmax * self.sdma_w1[self.rows[i].bytes] / self._w(i) for i in top]))
            if at_once > SATURATION * kmax:
                self.set("sdma_engines", None, f"the {kmax} cores' puts ran {at_once:.3g} at once (over "
                         f"{SATURATION:.0%} of {kmax}): the engines are at least that many, not saturated")
            else:
                self.set("sdma_engines", float(max(1.0, round(at_once))),
                         f"{len(top)} sdma row(s) of {kmax} cores: {at_once:.3g} of their streams at once")
        if None in (self.v["sdma_sqe_us"], self.v["sdma_GBps"]):
            return
        e = self.v["sdma_engines"]
        used = {i for i in one} | ({i for i in self.sel("sdma", peers=1) if self.rows[i].cores == kmax}
                                   if many else set())
        for i in self.sel("sdma"):
            r = self.rows[i]
            if i in used or (r.cores > 1 and e is None):
                continue
            wk = float(costs.call_us(r.bytes, self.v["sdma_sqe_us"], costs.rate(self.v["sdma_GBps"]), self.is_max))
            pred = self.v["sdma_issue_us"] + r.puts * wk * max(1.0, r.cores / (e or 1.0)) + self.v["sdma_quiet_us"]
            deps = ("sdma_sqe_us", "sdma_GBps") + (("sdma_engines",) if r.cores > 1 else ())
            self.held.append(HeldOut(r.label(), float(self.t[i]), pred, deps))


def _fit(rows: list[ProbeRow], model: NpuModel, cls: int, names) -> tuple[dict[str, FittedParam], list[HeldOut]]:
    """The parameters ``names`` from ``rows`` in class ``cls``'s terms: each identified or why not."""
    med = np.array([r.time_us for r in rows])
    main = _Est(rows, med, model, cls).run()
    reps = min(len(r.times_us) for r in rows)
    views = [_Est(rows, np.array([r.times_us[j] for r in rows]), model, cls).run() for j in range(reps)]
    params = {}
    for n in names:
        f = FittedParam(n, model.params[model_key(model, n, cls)].unit, main.v[n], None, False, main.how[n])
        if f.value is not None:
            per = np.array([v.v[n] for v in views if v.v[n] is not None])
            if len(per) < (reps + 1) // 2:
                f.how = f"came out > 0 in only {len(per)} of {reps} repeats; {f.how}"
            else:
                lo, hi = np.percentile(per, [25, 75])
                f.iqr = (float(lo), float(hi))
                rel = (hi - lo) / f.value
                if rel > SPREAD_LIMIT:
                    f.how = f"its per-repeat estimates spread {rel:.0%} (IQR / median, limit {SPREAD_LIMIT:.0%}): " \
                            f"noise; {f.how}"
                else:
                    f.identified = True
        params[n] = f
    # A pair fitted together (one straight line) stands or falls together.
    for pair in (("mte_put_us", "mte_remote_GBps"), ("sdma_sqe_us", "sdma_GBps")):
        for n, other in (pair, pair[::-1]):
            if n in params and other in params and params[n].identified and not params[other].identified:
                params[n].identified = False
                params[n].how = f"fitted with {other}, which is not identified; {params[n].how}"
    for h in main.held:
        if abs(h.error) > HELD_OUT_LIMIT:
            for n in h.params:
                if n in params and params[n].identified:
                    params[n].identified = False
                    params[n].how = f"the held-out row {h.label} is predicted {h.error:+.0%} off " \
                                    f"(limit {HELD_OUT_LIMIT:.0%}); {params[n].how}"
    return params, main.held


def fit_probe(rows: list[ProbeRow], model: NpuModel, free: list[str] | None = None, source: str = "") -> ProbeFit:
    """Fit the probe parameters of ``model`` (an :class:`NpuModel`, whose sourced values such as
    core_gm_GBps the estimates use) from ``rows`` (a probe CSV's): every one of
    :data:`PROBE_PARAMETERS` from the nearest link class's rows, and sdma_sqe_us and sdma_GBps of
    each farther class the rows reach (:func:`link_groups`, :class:`ClassFit`). ``free``: the
    parameters asked for (default all of :data:`PROBE_PARAMETERS`; a link one is asked for in every
    class probed). Returns a :class:`ProbeFit`; raises ParameterError for a ``free`` name that a
    probe cannot fit."""
    free = list(PROBE_PARAMETERS) if free is None else list(free)
    bad = [n for n in free if n not in PROBE_PARAMETERS]
    if bad or not free:
        raise ParameterError(f"free={free!r}: a probe CSV fits {', '.join(PROBE_PARAMETERS)}", parameter="free",
                             value=free)
    groups = link_groups(rows, model)
    cls = probed_class(rows, model)
    label = {id(r): _label(model, r) for r in rows if r.kind == "sdma" and r.peers == 1 and r.dst is not None}
    nearest = groups[0][0] if groups else None
    main_rows = [r for r in rows if label.get(id(r), nearest) == nearest]
    params, held = _fit(main_rows, model, cls, PROBE_PARAMETERS)
    classes, written = [], {cls: nearest}
    for lab, dst, c in groups[1:]:
        sub = [r for r in rows if r.kind != "sdma" or label.get(id(r)) == lab]
        fitted, _ = _fit(sub, model, c, ("sdma_sqe_us", "sdma_GBps"))
        if c in written:
            note = f"{model.name} prices PE 0 -> {dst} as its class {model.links[c].name}, written from {written[c]}"
            classes.append(ClassFit(lab, dst, c, fitted, False, note))
        else:
            written[c] = lab
            classes.append(ClassFit(lab, dst, c, fitted))
    pes = max(r.pes for r in rows)
    unreached = ()
    if model.links and pes <= model.topology.max_pes:
        from ..run.probe import probe_pairs  # the plan's own rule for which PEs reach which class
        unreached = tuple((n, k) for n, k in probe_pairs(model, pes).unreached if n not in written.values())
    r0 = rows[0]
    on = f"{'the CPU twin' if r0.target == 'cpu' else 'NPU'} {r0.soc}, {r0.pes} PEs" + (f" ({r0.note})" if r0.note else "")
    return ProbeFit(model, params, free, held, source, on, cls, classes, unreached)


def fit_probe_csv(path: str | Path, model: NpuModel, free: list[str] | None = None) -> ProbeFit:
    """:func:`fit_probe` of the probe CSV at ``path`` (ResultFileError when it is not one)."""
    return fit_probe(read_probe_csv(path), model, free, source=str(path))
