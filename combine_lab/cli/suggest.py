"""``combine-lab suggest``: the modelled time at every SDMA floor where the plan changes, and the best.

    combine-lab suggest -pes 64 -bs 4096 -h 7168 -topk 8 -expertPerPe 4 -type bfloat16_t --routing deepseek \\
        [--model a3] [--metric comm_only|full_op] [--what-if segment-sdma] [--csv curve.csv] [--all] \\
        [--variant doubleplane-segment[,classic,...]] [--cores-per-rank 6[,24,...]] [--json bands.json]

With one variant label and one cores-per-rank it prints that setting's floor curve and verdict; with
lists, every variant at every cores-per-rank side by side (docs/variants.md#6-what-the-model-says).
"""

from __future__ import annotations

import argparse
import json

from .commands import HELP
from ..kernels import DOUBLEPLANE
from ..case.case import make_case
from ..errors import ParameterError
from ..folders import usable_folder
from ..formats.files import write_atomic
from ..model.machines import load_model
from ..model.stream import case_rows
from ..model.suggest import METRICS, NEVER, band_records, suggest, suggest_settings
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from ..planning.cores import MAX_SDMA_BLOCKS, aiv_cores
from ..planning.settings import VARIANT_LABEL_FORM, KernelSettings, parse_variant_label, variant_label
from .cases import _specs, add_clock_alias, add_shape_flags

WHAT_IF = {"segment-sdma": "segment"}


def settings_labels(variants: str | None, cores: str | None, soc: str) -> list[str]:
    """The variant labels of ``--variant`` (comma list of variant labels) x ``--cores-per-rank``
    (comma list of ints), checked against ``soc`` before anything is priced.

    Raises:
        ParameterError: naming the flag, the value and what is allowed.
    """
    names = [v.strip() for v in (variants or DOUBLEPLANE).split(",")]
    parsed = []
    for v in names:
        try:
            parsed.append(parse_variant_label(v))
        except ParameterError as e:
            raise ParameterError(f"--variant {v!r}: must be {VARIANT_LABEL_FORM}"
                                 + ("" if e.allowed == f"must be {VARIANT_LABEL_FORM}" else f" ({e})"),
                                 parameter="variant", said_as="--variant", value=v) from None
    limit = min(aiv_cores(soc), MAX_SDMA_BLOCKS)
    if cores is None:
        counts = [None]
    else:
        counts = []
        for c in str(cores).split(","):
            c = c.strip()
            if not c.isdigit() or not 1 <= int(c) <= limit:
                raise ParameterError(f"--cores-per-rank {c!r}: must be an int in [1, {limit}] (the {aiv_cores(soc)} AIV "
                                     f"cores of {soc}; at most {MAX_SDMA_BLOCKS} cores issue SDMA)",
                                     parameter="cores_per_rank", said_as="--cores-per-rank", value=c)
            counts.append(int(c))
    labels = []
    for name, (variant, st) in zip(names, parsed):
        if st.cores_per_rank != 1 and cores is not None:
            raise ParameterError(f"--variant {name!r} with --cores-per-rank {cores}: give cores per rank in one of "
                                 "them", parameter="variant", said_as="--variant", value=name)
        if st.cores_per_rank > limit:
            raise ParameterError(f"--variant {name!r}: cores_per_rank={st.cores_per_rank} must be an int in "
                                 f"[1, {limit}] on {soc}", parameter="variant", said_as="--variant", value=name)
        for n in counts:
            labels.append(variant_label(variant, st if n is None else KernelSettings(st.segment, n)))
    return list(dict.fromkeys(labels))


def _suggest(a: argparse.Namespace) -> int:
    model = load_model(a.model)
    labels = settings_labels(a.variant, a.cores_per_rank, model.soc)
    if a.what_if and labels != [DOUBLEPLANE]:
        raise ParameterError(f"--what-if {a.what_if} with --variant {','.join(labels)}: the what-if prices the "
                             "reference's doubleplane (one SDMA call per segment, not built); doubleplane-segment is "
                             "that variant as built", parameter="what_if", said_as="--what-if", value=a.what_if)
    if a.out and len(labels) > 1:
        raise ParameterError(f"--out {a.out}: the engines figure is drawn for one variant label, not "
                             f"{len(labels)} ({','.join(labels)})", parameter="out", said_as="--out", value=a.out)
    specs = _specs(a, payload=False)
    if len(specs) != 1:
        raise ParameterError(f"suggest prices one case: the lists make {len(specs)}; give single values",
                             parameter="lists", value=len(specs), allowed="one case")
    case = make_case(specs[0])
    rows = case_rows(case, model.soc)
    print(f"case: {specs[0].case_id} routing {specs[0].routing}")
    if len(labels) > 1:
        c = suggest_settings(rows, model, labels, a.metric)
        print(c.text())
        if a.csv:
            write_atomic(a.csv, c.table.to_csv(index=False))
            print(f"settings CSV: {a.csv}")
        if a.json:
            _write_bands(a.json, specs[0], model, a.metric, {
                lb: band_records(rows, model, sg, _verdict_floors(sg)) for lb, sg in c.suggestions.items()})
        return 0
    variant, settings = parse_variant_label(labels[0])
    if a.out:
        usable_folder(a.out, "--out")
    s = suggest(rows, model, a.metric, WHAT_IF.get(a.what_if), settings=settings, variant=variant, baseline=a.baseline)
    most = None if a.all else 40
    print(s.text(most))
    if a.csv:
        write_atomic(a.csv, s.curve.to_csv(index=False))
        print(f"curve CSV: {a.csv}")
    if a.json:
        floors = s.curve["threshold_bytes"].iloc[s.shown(most)].tolist()
        _write_bands(a.json, specs[0], model, a.metric, {s.label: band_records(rows, model, s, floors)})
    if a.out:
        print(f"engines figure: {write_engines_figure(a.out, s, specs[0], model)}")
    return 0


def _verdict_floors(s) -> list[int]:
    """The floors a settings table's JSON prices: the verdict's, 2 MiB, never SDMA."""
    t = s.curve["threshold_bytes"].tolist()
    return list(dict.fromkeys(f for f in ([s.verdict.floor] if s.verdict is not None else []) +
                              [DEFAULT_MIN_SDMA_BYTES, NEVER] if f in t))


def _write_bands(path, spec, model, metric: str, bands: dict) -> None:
    """``suggest --json``: per setting and floor the band over the unknowns (docs/formats.md#12-suggest-json)."""
    doc = {"case": spec.case_id, "routing": spec.routing, "model": model.name, "caption": model.caption(),
           "metric": metric, "speedup": "comm_only of classic (each floor's against) / the setting's, the slowest PE's",
           "settings": [{"variant": lb, "floors": recs} for lb, recs in bands.items()]}
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    print(f"bands JSON: {path}")


def write_engines_figure(folder, s, spec, model):
    """The speed-up against SDMA engines (:func:`combine_lab.lab.unknowns_plot.engines_plot`) of
    Suggestion ``s`` at its verdict's floor and at the default 2 MiB floor where that differs,
    saved as ``<folder>/suggest_engines.png``; returns the path (None: no floor sends by SDMA)."""
    from ..lab.plots import save_figure
    from ..lab.unknowns_plot import ENGINES_FIGURE, engines_plot
    from ..planning.planner import DEFAULT_MIN_SDMA_BYTES

    curves = {}
    if s.verdict is not None and s.verdict.floor >= 0:
        curves[f"{s.label} at floor {s.verdict.floor:,} B (suggest's)"] = s.verdict.engines
    if s.at_default is not None:
        curves[f"{s.label} at floor {DEFAULT_MIN_SDMA_BYTES:,} B (the default)"] = s.at_default.engines
    if not curves:
        return None
    fig = engines_plot(curves, f"{spec.case_id} ({spec.routing})", spec.pes, s.caption)
    return save_figure(fig, folder, ENGINES_FIGURE)


def register(sub) -> None:
    p = sub.add_parser("suggest", add_help=False,
                       help=HELP["suggest"],
                       description="Price the case on the timing model at every floor (min_sdma_bytes) where the "
                                   "plan changes: each above-average remote segment size, 2 MiB, and never SDMA. "
                                   "Nothing runs; the times are modelled (docs/timing-model.md).")
    add_shape_flags(p)
    m = p.add_argument_group("model")
    m.add_argument("--model", default="a3", help="a2, a3, host, or a .toml file (default a3)")
    add_clock_alias(m, "suggest")
    m.add_argument("--metric", choices=METRICS, default="comm_only",
                   help="the slowest PE's CoreMaxTime of this metric (default comm_only)")
    m.add_argument("--what-if", choices=sorted(WHAT_IF), default=None,
                   help="segment-sdma: also price SDMA calls per segment (one SQE per MiB) instead of per row")
    m.add_argument("--variant", default=None,
                   help="variant label(s) to price, comma separated: doubleplane (default), doubleplane-segment, "
                        "classic, doubleplane-c6, ... (docs/variants.md)")
    m.add_argument("--cores-per-rank", default=None,
                   help="AIV cores per source rank, comma separated (1 to min(AIV cores of the model's SoC, 48)); "
                        "with --variant, every variant at every count")
    m.add_argument("--csv", default=None, help="also write the curve (or, with several settings, the table) to "
                                               "this CSV (every floor)")
    m.add_argument("--baseline", default=None,
                   help="the classic the verdict is against: reference or c<N> (default: classic with the same cores "
                        "per source rank; with several settings, the reference's, one scale for all)")
    m.add_argument("--json", default=None, help="also write, per setting and floor (those the table shows), the "
                                                "band over the unknowns: nominal, low, high and the point of each end")
    m.add_argument("--out", default=None, metavar="DIR",
                   help="also write the speed-up against SDMA engines as DIR/suggest_engines.png (modelled)")
    m.add_argument("--all", action="store_true", help="print every floor (default: at most 40, evenly spread, "
                                                       "with the best, 2 MiB and never SDMA)")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.set_defaults(handler=_suggest, work_dir=None, target="cpu", perf=False, fnpu=0, ipport=None)
