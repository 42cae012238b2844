"""``combine-lab suggest``: the modelled time at every SDMA floor where the plan changes, and the best.

    combine-lab suggest -pes 64 -bs 4096 -h 7168 -topk 8 -expertPerPe 8 -type float16_t --routing deepseek \\
        [--model a3] [--metric comm_only|full_op] [--what-if segment-sdma] [--csv curve.csv] [--all]
"""

from __future__ import annotations

import argparse

from ..case.case import make_case
from ..errors import ParameterError
from ..formats.files import write_atomic
from ..model.machines import load_model
from ..model.stream import case_rows
from ..model.suggest import METRICS, suggest
from .cases import _specs, add_shape_flags

WHAT_IF = {"segment-sdma": "segment"}


def _suggest(a: argparse.Namespace) -> int:
    model = load_model(a.model)
    specs = _specs(a, payload=False)
    if len(specs) != 1:
        raise ParameterError(f"suggest prices one case: the lists make {len(specs)}; give single values")
    case = make_case(specs[0])
    s = suggest(case_rows(case, model.soc), model, a.metric, WHAT_IF.get(a.what_if))
    print(f"case: {specs[0].case_id} routing {specs[0].routing}")
    print(s.text(None if a.all else 40))
    if a.csv:
        write_atomic(a.csv, s.curve.to_csv(index=False))
        print(f"curve CSV: {a.csv}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("suggest", add_help=False,
                       help="modelled time at every SDMA floor where the plan changes, and the best floor",
                       description="Price the case on the timing model at every floor (min_sdma_bytes) where the "
                                   "plan changes: each above-average remote segment size, 2 MiB, and never SDMA. "
                                   "Nothing runs; the times are modelled (docs/timing-model.md).")
    add_shape_flags(p)
    m = p.add_argument_group("model")
    m.add_argument("--model", default="a3", help="a2, a3, host, or a .toml file (default a3)")
    m.add_argument("--metric", choices=METRICS, default="comm_only",
                   help="the slowest PE's CoreMaxTime of this metric (default comm_only)")
    m.add_argument("--what-if", choices=sorted(WHAT_IF), default=None,
                   help="segment-sdma: also price SDMA calls per segment (one SQE per MiB) instead of per row")
    m.add_argument("--csv", default=None, help="also write the curve to this CSV (every floor)")
    m.add_argument("--all", action="store_true", help="print every floor (default: at most 40, evenly spread, "
                                                       "with the best, 2 MiB and never SDMA)")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.set_defaults(handler=_suggest, work_dir=None, target="cpu", perf=False, fnpu=0, ipport=None)
