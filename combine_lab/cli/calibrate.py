"""``combine-lab calibrate``: fit a timing model's assumed parameters to measured perf CSVs.

    combine-lab calibrate output/perf/*_perf_rank*.csv --model a3 --out params.toml \\
        [--routing R] [--seed N] [--min-sdma-bytes B] [--free a,b] [--cores all|max]
    combine-lab calibrate output/probe/combine_probe.csv --model a3 --out params.toml [--free a,b]   # docs/probe.md

Data of another target or SoC than the model's is refused (exit 1, nothing written), and so are a
probe CSV's SDMA rows timed by a build without SDMA (its ``build`` column), and a
fit that puts a parameter outside its stated range, unless --allow-outside-range
(docs/timing-model.md#7-calibration). A written model names its data (``[data]``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .commands import HELP
from ..errors import ParameterError
from ..formats.probe_csv import build_refusal, is_probe_csv, read_probe_csv
from ..model.calibrate import calibrate, data_refusal, measurements_from_csvs, outside_ranges
from ..model.machines import load_model
from ..model.probe_fit import fit_probe
from ..values import as_list
from .cases import add_clock_alias


def _calibrate(a: argparse.Namespace) -> int:
    for p in a.csv:  # a missing file is said as one, not as a name that is not a perf CSV's
        if not Path(p).is_file():
            raise ParameterError(f"csv={str(p)!r}: no such file (a probe CSV, or perf CSVs: "
                                 "combine_perf_rank<r>.csv, combine_doubleplane_perf_rank<r>.csv)",
                                 parameter="csv", value=str(p), allowed="existing CSV files")
    if any(is_probe_csv(p) for p in a.csv):  # a probe CSV (by its header): its own fit
        return calibrate_probe(a)
    model = load_model(a.model)
    meas = measurements_from_csvs(a.csv, routing=a.routing, seed=a.seed, min_sdma_bytes=a.min_sdma_bytes)
    ran = sorted({(m.source.rpartition(":")[0], m.target, m.soc) for m in meas})
    why = [w for w in (data_refusal(model, t, soc, f) for f, t, soc in ran) if w]
    if why:
        return refuse(why, a.out)
    free = as_list(a.free, str, "--free") if a.free else None
    fit = calibrate(model, meas, free=free, cores=a.cores)
    outside = [] if a.allow_outside_range else outside_ranges(model, dict(zip(fit.params["name"], fit.params["value"])))
    targets = sorted({t for _, t, _ in ran if t}) or ["not recorded"]
    socs = sorted({s for _, _, s in ran if s}) or ["not recorded"]
    return finish_fit(fit.report(), fit.usable, lambda: fit.model, a.out,
                      f"calibrated by combine-lab calibrate from {len(a.csv)} perf CSV(s), {len(meas)} measurements, "
                      f"starting from {model.name}",
                      {"files": [str(p) for p in a.csv], "target": ", ".join(targets), "soc": ", ".join(socs)}, outside)


def refuse(why: list[str], out: str | None) -> int:
    """calibrate refuses the data before fitting: each reason printed, exit 1, nothing written."""
    for w in why:
        print(f"calibrate: refused: {w}")
    print("calibrate: nothing fitted, nothing written (exit 1)")
    if out:
        print(f"model: not written to {out}: the data is not the model's machine's")
    return 1


def finish_fit(report: str, usable: bool, fitted, out: str | None, note: str, data: dict | None = None,
               outside: list[str] | None = None) -> int:
    """What ``combine-lab calibrate`` does with a fit, of perf CSVs or of a probe CSV: print its
    report; exit 1 and write nothing when it is not usable or puts a parameter ``outside`` its
    stated range (:func:`~combine_lab.model.calibrate.outside_ranges`; --allow-outside-range
    empties it); else write ``fitted()`` (an NpuModel) to ``out`` (a .toml, with ``note`` and the
    ``data`` it was fitted to) when asked, and exit 0."""
    print(report)
    for o in outside or ():
        print(f"calibrate: {o}: the model's own range says it cannot be (--allow-outside-range to write it anyway)")
    if not usable or outside:
        print("calibrate: not usable, nothing written (exit 1)")
        if out:
            print(f"model: not written to {out}: the fit is not usable")
        return 1
    if out:
        path = fitted().to_toml(out, note=note, data=data)
        print(f"model: {path} (use --clock model:{path} or --model {path})")
    return 0


def calibrate_probe(a: argparse.Namespace) -> int:
    """``combine-lab calibrate`` of one probe CSV (``a.csv``, ``a.model``, ``a.free``, ``a.out``):
    prints the fit; exit 0 and the fitted model written to ``a.out`` when every parameter asked
    for is identified, else exit 1, nothing written, the ones the data cannot identify named."""
    if len(a.csv) != 1 or not all(is_probe_csv(p) for p in a.csv):
        raise ParameterError(f"csv={a.csv!r}: a probe CSV is fitted alone (one file, not with perf CSVs)",
                             parameter="csv", value=a.csv)
    model = load_model(a.model)
    free = as_list(a.free, str, "--free") if a.free else None
    rows = read_probe_csv(a.csv[0])
    ran = sorted({(r.target, r.soc) for r in rows})
    why = [w for w in (data_refusal(model, t, soc, a.csv[0]) for t, soc in ran) if w]
    why += [w for w in (build_refusal(rows, a.csv[0]),) if w]
    if why:
        return refuse(why, a.out)
    fit = fit_probe(rows, model, free, source=str(a.csv[0]))
    outside = [] if a.allow_outside_range else outside_ranges(model, fit.values())
    return finish_fit(fit.report(), fit.usable, fit.fitted_model, a.out,
                      f"calibrated by combine-lab calibrate from the probe CSV {a.csv[0]}, starting from {model.name}",
                      {"files": [str(a.csv[0])], "target": ", ".join(t for t, _ in ran),
                       "soc": ", ".join(s for _, s in ran)}, outside)


def register(sub) -> None:
    p = sub.add_parser("calibrate", help=HELP["calibrate"],
                       description="Fit the assumed parameters of a timing model (data/npu_models) to perf CSVs in "
                                   "the reference format (docs/formats.md#3-perf-csv), per-rank files of ours or of the "
                                   "reference's run script. The CSVs do not say the routing: it is the reference's "
                                   "uniform recipe unless the lab's sidecar beside a CSV (combine[_doubleplane]_counters_<case>.json) or --routing says otherwise.")
    p.add_argument("csv", nargs="+", help="per-rank perf CSVs (combine[_doubleplane]_perf_rank<r>.csv), or one probe CSV "
                                          "(combine-lab probe, docs/probe.md)")
    p.add_argument("--model", default="a3", help="the model to start from: a2, a3, host, or a .toml file")
    add_clock_alias(p, "calibrate")
    p.add_argument("--out", default=None, help="write the fitted model here (.toml)")
    p.add_argument("--routing", default=None, help="routing of the cases (default: each run's sidecar beside its CSV, else uniform, the reference's recipe)")
    p.add_argument("--seed", type=int, default=None, help="case seed (default: the sidecar's, else 42, the reference's)")
    p.add_argument("--min-sdma-bytes", type=int, default=None,
                   help="the SDMA floor the doubleplane runs used, bytes (default: the sidecar's, else 2 MiB)")
    p.add_argument("--free", nargs="+", default=None, help="parameters to fit (default: the model's assumed ones)")
    p.add_argument("--allow-outside-range", action="store_true",
                   help="write a fit even where a value lies outside its parameter's stated range")
    p.add_argument("--cores", choices=["all", "max"], default="all",
                   help="fit every core's time (all) or each row's CoreMaxTime (max: for a host whose cores are "
                        "threads sharing a few CPUs)")
    p.set_defaults(handler=_calibrate)
