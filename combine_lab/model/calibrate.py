"""Fit a timing model's free parameters to measured times (``combine-lab calibrate``).

Measurements come from perf CSVs in the reference format (docs/formats.md#3-perf-csv: ours, or the
reference run script's): each row gives a case (BS, H, TopK, ExpertPerPe, Npus, Dtype), a metric,
the profiled PE and one time per core that recorded the frame. The model replays the same case
(routing: the reference's uniform recipe unless told otherwise, since the CSV does not carry it)
and the fit minimises the relative error of every core's time, in log space, with
``scipy.optimize.least_squares`` within each free parameter's plausible range. The confidence of
each fitted value is its standard error from the Jacobian at the optimum (relative, in %).

A fit is refused as unusable (:attr:`Calibration.usable` false, ``combine-lab calibrate`` exits 1)
when a fitted parameter ends on a bound of its range, its standard error is above
:data:`STD_ERR_LIMIT_PCT`, the median error on the held-out measurements (every fifth case, or
every fifth measurement with fewer than :data:`MIN_CASES_TO_HOLD_OUT` cases; never fitted) is
above :data:`HELD_OUT_LIMIT_PCT`, or there are no more measured times than free parameters; the
report names the parameters the data cannot identify and the measurements that would
(:data:`IDENTIFIED_BY`; docs/timing-model.md#7-calibration).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..kernels import CLASSIC, DOUBLEPLANE
from ..case.case import Case, make_case
from ..case.spec import DTYPES, DTYPES_TEXT, CaseSpec
from ..errors import ParameterError
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from ..formats.perf_csv import counters_name, read_perf_csv
from ..formats.sidecars import read_sidecar
from .machines import NpuModel
from .replay import replay
from .stream import CaseRows, case_rows


@dataclass
class Measurement:
    """Measured per-core times of one (case, variant, metric) on profiled PE ``pe``:
    ``times_us`` float64 [cores] in core order (idle cores left out); ``min_sdma_bytes`` of the
    run; ``source`` names the file (and row) it came from."""

    case: Case
    variant: str
    metric: str
    pe: int
    times_us: np.ndarray
    min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES
    source: str = ""
    target: str = ""  # where it ran, from the run's sidecar: cpu, npu, model:<name> ("" without one)
    soc: str = ""     # the SoC it ran on, where the sidecar says



#: A fitted value whose standard error is above this (relative, %) is not identified.
STD_ERR_LIMIT_PCT = 25.0
#: A fit whose median |error| on the held-out measurements is above this (%) is refused.
HELD_OUT_LIMIT_PCT = 20.0
#: With fewer cases, every fifth measurement is held out instead of every fifth case.
MIN_CASES_TO_HOLD_OUT = 3
#: What would identify each parameter: the probe rows (``combine-lab probe``) and case shapes.
IDENTIFIED_BY = {
    "mte_put_us": "probe: the MTE put of one row to a remote PE per core; or tiny cases (bs 1-8, h 8-64)",
    "mte_remote_GBps": "probe: MTE puts of wide rows to one remote PE, single- and double-buffered; or h >= 16384",
    "flag_us": "probe: the flag round trip; or cases of many 1-row segments (bs 1-4, pes 8+)",
    "flag_latency_us": "probe: the flag round trip; or full_op of tiny cases",
    "quiet_us": "probe: the quiet cost; or cases of many small segments (pes 8+, bs 1-2)",
    "sdma_issue_us": "probe: SDMA puts of 14 KiB by 48 cores at once (the issue, not the engine, bounds them)",
    "sdma_quiet_us": "probe: the SDMA-quiet cost; or doubleplane cases with more than 256 SDMA rows per core",
    "sdma_sqe_us": "probe: SDMA puts of 14 KiB by k = 1, 2, 8, 48 cores to one peer of this link class; or "
                   "doubleplane at floor 0 with small rows",
    "sdma_GBps": "probe: SDMA puts of 1-2 MiB to one peer of this link class; or doubleplane with wide rows",
    "link_GBps": "probe: puts from many cores to one peer of this link class; or classic with wide rows",
    "egress_GBps": "probe: puts from many cores to many peers; or classic at pes 8+ with wide rows",
    "core_gm_GBps": "probe: the MTE put of one row to the core's own PE; or wide rows kept local",
    "vec_elems_per_us": "full_op of cases with many valid slots per token (topk 8, h 7168)",
    "wait_us": "full_op of cases with topk 8 and small h",
    "barrier_us": "full_op of tiny cases (bs 1)",
}


def identified_by(name: str) -> str:
    """The measurements that would identify parameter ``name`` (a link one by its bare name)."""
    return IDENTIFIED_BY.get(name.split(".")[-1], "cases that vary what it prices")


def variant_of_csv(path: str | Path) -> str:
    """classic or doubleplane, from a perf CSV's file name (docs/formats.md#3-perf-csv)."""
    name = Path(path).name
    if DOUBLEPLANE in name:
        return DOUBLEPLANE
    if re.match(r"combine_(classic_)?perf_", name):
        return CLASSIC
    raise ParameterError(f"{path}: not a perf CSV name (combine_perf_rank<r>.csv, combine_doubleplane_perf_rank<r>.csv, "
                         "or their _summary.csv)", parameter="path", value=path)


def _how_it_ran(path: Path, variant: str, case_id: str) -> dict | None:
    """routing, seed and min_sdma_bytes from the lab's sidecar beside a perf CSV (our runs write
    one per case: formats/sidecars.py), or None where there is none (the reference's run script)."""
    side = path.parent / counters_name(variant, case_id)
    if not side.is_file():
        return None
    data = read_sidecar(side)
    return {"routing": str(data["routing"]), "seed": int(data["seed"]), "min_sdma_bytes": int(data["min_sdma_bytes"]),
            "file": side, "target": str(data["target"]), "soc": str(data.get("soc", ""))}


def measurements_from_csvs(paths: list[str | Path], routing: str | None = None, seed: int | None = None,
                           min_sdma_bytes: int | None = None) -> list[Measurement]:
    """One :class:`Measurement` per row of the perf CSVs at ``paths``; each case is remade from its
    shape with the routing, seed and SDMA floor it ran with. The CSV format has no column for them
    (docs/formats.md#3-perf-csv): they come from the lab's sidecar beside the CSV where there is one,
    else from the arguments, else the reference's recipe (uniform, seed 42, 2 MiB).

    Raises:
        ParameterError: a file name that is not a perf CSV, a dtype other than int32_t /
            float16_t / bfloat16_t, a summary row (ProfPe 'max'), or a routing / seed / min_sdma_bytes given
            that contradicts the sidecar of the run (naming both).
        ResultFileError: a file that is not a perf CSV (read_perf_csv), or a broken sidecar.
    """
    given = {"routing": routing, "seed": seed, "min_sdma_bytes": min_sdma_bytes}
    default = {"routing": "uniform", "seed": 42, "min_sdma_bytes": DEFAULT_MIN_SDMA_BYTES}
    out, cases, sidecars = [], {}, {}
    for path in map(Path, paths):
        variant = variant_of_csv(path)
        df = read_perf_csv(path)
        for i, r in df.iterrows():
            dtype = str(r["Dtype"])
            if dtype not in DTYPES:
                raise ParameterError(f"{path}: row {i}: Dtype={r['Dtype']!r}: one of {DTYPES_TEXT}",
                                     parameter="paths", value=path)
            try:
                pe = int(r["ProfPe"])
            except (TypeError, ValueError):
                raise ParameterError(f"{path}: row {i}: ProfPe={r['ProfPe']!r}: calibrate from per-rank files "
                                     "(combine_*perf_rank<r>.csv), not summaries",
                                     parameter="paths", value=path) from None
            pes, bs, h, topk, epp = (int(r[k]) for k in ("Npus", "BS", "H", "TopK", "ExpertPerPe"))
            case_id = f"shape_{bs}_{h}_{topk}_{pes * epp}_{pes}"
            if (path.parent, variant, case_id) not in sidecars:  # one read per case (its rows share it)
                sidecars[path.parent, variant, case_id] = _how_it_ran(path, variant, case_id)
            ran = sidecars[path.parent, variant, case_id]
            how = dict(default)
            for k, v in given.items():
                if ran is not None and v is not None and v != ran[k]:
                    raise ParameterError(f"{k}={v!r}, but {ran['file']} says this run used {k}={ran[k]!r}: "
                                         f"leave {k} out (the sidecar is read) or give {ran[k]!r}",
                                         parameter=k, value=v, allowed=repr(ran[k]))
                how[k] = ran[k] if ran is not None else (v if v is not None else default[k])
            key = (pes, bs, h, topk, epp, dtype, how["routing"], how["seed"])
            if key not in cases:
                cases[key] = make_case(CaseSpec(pes=pes, bs=bs, h=h, topk=topk, expert_per_pe=epp, dtype=dtype,
                                                routing=how["routing"], seed=how["seed"]))
            times = np.asarray(r["core_times_us"], dtype=np.float64)
            out.append(Measurement(cases[key], variant, str(r["Metric"]), pe, times, how["min_sdma_bytes"],
                                   f"{path.name}:{i}", "" if ran is None else ran["target"],
                                   "" if ran is None else ran["soc"]))
    return out


def data_refusal(model: NpuModel, target: str, soc: str, source: str) -> str | None:
    """Why data measured on ``target`` (cpu: the CPU twin, npu, model:<name>: modelled; "" unknown)
    and ``soc`` ("" unknown) cannot calibrate ``model`` (None: it can): the twin's times are not an
    NPU's, nor one SoC's another's (docs/timing-model.md#7-calibration). ``source`` names the data."""
    kind = target if target in ("cpu", "npu") else ""
    where = {"cpu": "the CPU twin", "npu": "an NPU"}
    if kind and kind != model.target:
        other = "--model host (the twin's model)" if kind == "cpu" else "a model of that NPU (--model a2, a3 or a file)"
        return (f"{source} was measured on {where[kind]} (target {target}, SoC {soc or 'not recorded'}); model "
                f"{model.name} models {where[model.target]} ({model.soc}): its times are not that machine's; "
                f"calibrate {other}")
    if soc and model.soc and soc != model.soc:
        return (f"{source} was measured on SoC {soc} (target {target or 'not recorded'}); model {model.name} is of "
                f"{model.soc}: calibrate a model of {soc}")
    return None


def outside_ranges(model: NpuModel, values: dict[str, float]) -> list[str]:
    """The fitted ``values`` (parameter -> value) outside their parameter's stated range, each as
    'quiet_us = 0.0375 is outside its stated range [0.2, 5] us'."""
    out = []
    for name, v in values.items():
        p = model.param(name)
        if p.range is not None and not p.range[0] <= v <= p.range[1]:
            out.append(f"{name} = {v:.4g} is outside its stated range [{p.range[0]:g}, {p.range[1]:g}] {p.unit}")
    return out


@dataclass
class Calibration:
    """A fit: ``model`` with the fitted values; ``params`` (DataFrame: name, start, value, unit,
    std_err_pct); ``cases`` (DataFrame per measurement: source, case_id, variant, metric, pe,
    measured_us, modelled_us, error_pct of the core-max time, rms_core_error_pct)."""

    model: NpuModel
    params: pd.DataFrame
    cases: pd.DataFrame
    cost: float
    warnings: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    held_out_error_pct: float = float("nan")

    @property
    def usable(self) -> bool:
        """No problem: every parameter identified, the held-out measurements within the limit."""
        return not self.problems

    def report(self) -> str:
        """The fit as text: one line per parameter, then per measurement, then whether it is usable."""
        p = self.params.to_string(index=False, formatters={"start": "{:.4g}".format, "value": "{:.4g}".format,
                                                           "std_err_pct": lambda v: "n/a" if not np.isfinite(v)
                                                           else f"{v:.2f}"})
        c = self.cases.to_string(index=False, float_format=lambda v: f"{v:.3f}")
        warn = "".join(f"\nWARNING: {w}" for w in self.warnings)
        held = (f"held-out measurements (never fitted): median |error| {self.held_out_error_pct:.1f} % "
                f"(limit {HELD_OUT_LIMIT_PCT:g} %)" if np.isfinite(self.held_out_error_pct) else
                "held-out measurements: none")
        verdict = ("the fit is usable" if self.usable else
                   "NOT USABLE:" + "".join(f"\n  - {q}" for q in self.problems))
        return f"{self.model.caption()}{warn}\n\nfitted parameters:\n{p}\n\nper measurement:\n{c}\n\n{held}\n{verdict}"


def _pairs(model: NpuModel, rows: dict[int, CaseRows], meas: list[Measurement], cores: str = "all"):
    """(modelled, measured) per-core times of each measurement, matched core by core (or, where a
    file left idle cores out, largest to largest), over the cores the model gives work to; with
    ``cores="max"`` only the CoreMaxTime of each."""
    out, cache = [], {}
    for m in meas:
        k = (id(m.case), m.variant, m.min_sdma_bytes)
        if k not in cache:
            r = rows[id(m.case)]
            cache[k] = replay(r, r.sdma(m.variant, m.min_sdma_bytes), model)
        pred = getattr(cache[k], m.metric)[m.pe]
        got = m.times_us
        if len(pred) != len(got):
            n = min(len(pred), len(got))
            pred, got = np.sort(pred)[-n:], np.sort(got)[-n:]
        if cores == "max":
            out.append((pred.max(keepdims=True), got.max(keepdims=True)))
            continue
        busy = pred > 0  # a core with no rows records no comm_only time worth fitting
        out.append((pred[busy], got[busy]))
    return out


def calibrate(model: NpuModel, meas: list[Measurement], free: list[str] | None = None,
              cores: str = "all") -> Calibration:
    """Fit ``free`` parameters (default: the model's assumed, fittable ones) to ``meas``.

    Residuals are log(modelled / measured) per core time (``cores="all"``), or of each
    measurement's CoreMaxTime only (``cores="max"``: for a host whose cores are threads sharing a
    few CPUs, where one core's time is mostly its scheduling); values stay within each
    parameter's range (or a factor 100 of the start where none is given).

    Raises:
        ParameterError: no measurements, ``cores`` not all/max, or a free name that is not a
            parameter of the model.
    """
    free = _checked_free(model, meas, free, cores)
    rows = {}
    for m in meas:
        if id(m.case) not in rows:
            rows[id(m.case)] = case_rows(m.case, model.soc)
    held = _held_out(meas)
    fitted_meas = [m for m, h in zip(meas, held) if not h]
    lo, hi, x0 = _log_box(model, free)

    def residuals(x: np.ndarray) -> np.ndarray:
        mod = model.with_values(**{f: math.exp(v) for f, v in zip(free, x)})
        return np.concatenate([np.log(p / np.maximum(g, 1e-9)) for p, g in _pairs(mod, rows, fitted_meas, cores)])

    from scipy.optimize import least_squares  # here: importing it costs every command a quarter second

    fit = least_squares(residuals, np.array(x0), bounds=(np.array(lo), np.array(hi)), x_scale="jac", method="trf")
    x, blind, kept, cost = _blind_to_start(fit, x0, residuals)
    fitted = model.with_values(**{f: math.exp(v) for f, v in zip(free, x)})
    n_res = len(fit.fun)
    warnings = []
    if n_res <= len(free):
        warnings.append(f"underdetermined: {n_res} measured time(s) for {len(free)} free parameters; the standard "
                        "errors mean nothing. Calibrate from more cases (tiny, wide and skewed shapes) or fit fewer "
                        "parameters (--free).")
    std = _std_errors(fit, cost, blind, len(free))
    params = _params_table(model, fitted, free, std, blind, kept)
    cases = _cases_table(fitted, rows, meas, held, cores)
    out = cases[cases["held_out"]]
    held_err = float(out["error_pct"].abs().median()) if len(out) else float("nan")
    problems = _problems(free, x, (lo, hi), kept, std, n_res, held_err)
    return Calibration(fitted, params, cases, cost / 2, tuple(warnings), tuple(problems), held_err)


def _checked_free(model: NpuModel, meas: list[Measurement], free: list[str] | None, cores: str) -> list[str]:
    """The free parameters to fit, after refusing what cannot be fitted: no measurements, an unknown
    ``cores`` or a free name the model does not have."""
    if not meas:
        raise ParameterError("no measurements to calibrate from", parameter="meas", value=meas)
    if cores not in ("all", "max"):
        raise ParameterError(f"cores={cores!r}: all or max", parameter="cores", value=cores, allowed="all or max")
    free = list(model.fittable if free is None else free)
    unknown = [f for f in free if f not in model.params]
    if unknown:
        raise ParameterError(f"free parameter(s) {unknown}: one of {list(model.params)}",
                             parameter="free", value=unknown, allowed=str(list(model.params)))
    return free


def _held_out(meas: list[Measurement]) -> list[bool]:
    """Which measurements the fit never sees, to check it: every fifth case (all its measurements), or
    every fifth measurement with fewer than MIN_CASES_TO_HOLD_OUT cases; none below 5 measurements."""
    case_ids = list(dict.fromkeys(id(m.case) for m in meas))
    if len(case_ids) >= MIN_CASES_TO_HOLD_OUT:
        out_cases = set(case_ids[4::5]) or {case_ids[-1]}
        return [id(m.case) in out_cases for m in meas]
    return [i % 5 == 4 for i in range(len(meas))] if len(meas) >= 5 else [False] * len(meas)


def _log_box(model: NpuModel, free: list[str]) -> tuple[list[float], list[float], list[float]]:
    """(lo, hi, x0): each free parameter's range and start in log space, where the fit runs (its
    residuals are relative); a factor 100 around the start where a parameter has no range."""
    lo, hi, x0 = [], [], []
    for f in free:
        p = model.params[f]
        a, b = p.range if p.range else (p.value / 100, p.value * 100)
        lo.append(math.log(a))
        hi.append(math.log(b))
        x0.append(min(max(math.log(p.value), math.log(a)), math.log(b)))
    return lo, hi, x0


def _blind_to_start(fit, x0: list[float], residuals) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(x, blind, kept, cost): the fit, each parameter the data are blind to put back at its start
    where the fit stays as good (cost: the sum of squared residuals at the optimum)."""
    x = np.array(fit.x)
    # A parameter these measurements do not depend on at the fit (its column of the Jacobian is
    # zero: e.g. a rate above a bandwidth that caps it) has no confidence at all. It goes back to
    # its start value where that leaves the fit as good: the data say nothing about it, so the
    # written model must not carry a value the optimiser wandered to.
    blind = np.linalg.norm(fit.jac, axis=0) < 1e-9 * max(float(np.linalg.norm(fit.jac)), 1e-300)
    kept = np.zeros(len(x0), dtype=bool)
    cost = float(fit.fun @ fit.fun)
    for j in np.flatnonzero(blind):
        trial = x.copy()
        trial[j] = x0[j]
        r = residuals(trial)
        if float(r @ r) <= cost * (1 + 1e-9) + 1e-300:
            x, kept[j] = trial, True
    return x, blind, kept, cost


def _std_errors(fit, cost: float, blind: np.ndarray, n_free: int) -> np.ndarray:
    """float [free]: each fitted value's standard error from the Jacobian (log units: relative), inf
    where the data are blind to it or there are no more residuals than free parameters."""
    n_res = len(fit.fun)
    dof = max(n_res - n_free, 1)
    s2 = cost / dof
    try:
        cov = np.linalg.pinv(fit.jac.T @ fit.jac) * s2
        std = np.sqrt(np.clip(np.diag(cov), 0, None))  # in log units: relative error
    except np.linalg.LinAlgError:
        std = np.full(n_free, np.nan)
    std = np.where(blind, np.inf, std)
    if n_res <= n_free:
        std = np.full(n_free, np.inf)
    return std


def _params_table(model: NpuModel, fitted: NpuModel, free: list[str], std: np.ndarray, blind: np.ndarray,
                  kept: np.ndarray) -> pd.DataFrame:
    """Calibration.params: each free parameter's start, fitted value, unit, standard error (%) and
    a note where the data did not move it."""
    notes = ["no effect on these measurements: kept at its start value" if k
             else "no effect at the fitted value (bounded by the data from one side only)" if b else ""
             for b, k in zip(blind, kept)]
    return pd.DataFrame({"name": free, "start": [model[f] for f in free], "value": [fitted[f] for f in free],
                         "unit": [model.params[f].unit for f in free], "std_err_pct": 100 * std, "note": notes})


def _cases_table(fitted: NpuModel, rows: dict[int, CaseRows], meas: list[Measurement], held: list[bool],
                 cores: str) -> pd.DataFrame:
    """Calibration.cases: every measurement (held out or fitted) against the fitted model, its
    CoreMaxTime's error and the rms of its cores' errors."""
    recs = []
    for (p, g), m, h in zip(_pairs(fitted, rows, meas, cores), meas, held):
        mx, px = float(np.max(g, initial=0.0)), float(np.max(p, initial=0.0))
        core_err = np.log(p / np.maximum(g, 1e-9))
        recs.append({"source": m.source, "case_id": m.case.spec.case_id, "variant": m.variant, "metric": m.metric,
                     "pe": m.pe, "measured_us": mx, "modelled_us": px, "error_pct": 100 * (px - mx) / max(mx, 1e-9),
                     "rms_core_error_pct": 100 * float(np.sqrt(np.mean(core_err ** 2))) if len(core_err) else 0.0,
                     "held_out": h})
    return pd.DataFrame(recs)


def _problems(free: list[str], x: np.ndarray, box: tuple[list[float], list[float]], kept: np.ndarray,
              std: np.ndarray, n_res: int, held_err: float) -> list[str]:
    """Why the fit is unusable, each naming what would fix it: too few times, a parameter on a bound
    of its range or without confidence, a held-out error above the limit (docs/timing-model.md#7-calibration)."""
    lo, hi = box
    problems = []
    if n_res <= len(free):
        problems.append(f"{n_res} measured time(s) for {len(free)} free parameters: none of "
                        f"{', '.join(free)} is identified; measure more (" +
                        "; ".join(f"{f}: {identified_by(f)}" for f in free) + ") or fit fewer (--free)")
    else:
        for j, f in enumerate(free):
            why = []
            if min(abs(x[j] - lo[j]), abs(x[j] - hi[j])) < 1e-3 and not kept[j]:
                why.append(f"ends on a bound of its range [{math.exp(lo[j]):g}, {math.exp(hi[j]):g}]")
            if not np.isfinite(std[j]):
                why.append("no effect on these measurements")
            elif 100 * std[j] > STD_ERR_LIMIT_PCT:
                why.append(f"standard error {100 * std[j]:.3g} % (limit {STD_ERR_LIMIT_PCT:g} %)")
            if why:
                problems.append(f"{f}: not identified ({'; '.join(why)}); would be by {identified_by(f)}")
    if not np.isfinite(held_err):
        problems.append("no measurement could be held out to check the fit: give at least 5 measurements")
    elif held_err > HELD_OUT_LIMIT_PCT:
        problems.append(f"the held-out measurements' median |error| is {held_err:.1f} % (limit "
                        f"{HELD_OUT_LIMIT_PCT:g} %): the model's form does not fit these times")
    return problems
