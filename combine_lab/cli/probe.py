"""``combine-lab probe``: the microbenchmarks of the model's unknowns, one probe CSV (docs/probe.md).

    combine-lab probe [-pes 2] [--model a2|a3|FILE] [--target cpu|npu] [--fnpu 0] [--cores 1,2,8,48]
        [--sdma-bytes 14336,1048576,2097152] [--row-bytes 14336,57344] [--repeats 5] [--out output/probe/combine_probe.csv]
    combine-lab calibrate output/probe/combine_probe.csv --model a3 --out a3-measured.toml   # the fit

``combine-lab calibrate`` of a probe CSV is in cli/calibrate.py (it tells one by its header,
combine_lab/formats/probe_csv.py).
"""

from __future__ import annotations

import argparse

from .commands import HELP
from ..model.machines import load_model
from ..run.probe import DEFAULT_ROW_BYTES, DEFAULT_SDMA_BYTES, probe_pairs, run_probe
from ..values import as_list


def _probe(a: argparse.Namespace) -> int:
    kw = {"row_bytes": as_list(a.row_bytes, int, "--row-bytes"), "repeats": a.repeats}
    if a.sdma_bytes:  # given: refused on a build without SDMA (run/probe.py)
        kw["sdma_bytes"] = as_list(a.sdma_bytes, int, "--sdma-bytes")
    if a.cores:
        kw["cores"] = as_list(a.cores, int, "--cores")
    model = None
    if a.model:
        model = load_model(a.model)
        pairs = probe_pairs(model, a.pes) if a.pes >= 2 else None  # fewer: run_probe refuses -pes
        if pairs is not None:
            print(f"probe: {pairs.text()} (docs/probe.md#6-link-classes)")
    path, rows = run_probe(a.pes, a.out, target=a.target, fnpu=a.fnpu, timeout_s=a.timeout, model=model, **kw)
    first = rows[0]
    if model is not None and first.build == "mte-only" and len(pairs.reached) > 1:
        print(f"probe: this build has no SDMA: only {pairs.reached[0][0]} was probed (the farther classes' rows "
              "are SDMA rows)")
    what = f"measured on the CPU twin ({first.note})" if first.target == "cpu" else f"measured on the NPU {first.soc}"
    print(f"probe: {len(rows)} measurements on {a.pes} PEs, {what}; time of one launch: the median of "
          f"{first.times_us.size} repeats, and their min-max")
    w = max(len(r.label()) for r in rows)
    for r in rows:
        gb = f"  {r.gbps:9.3f} GB/s" if r.gbps is not None else ""
        cls = f"  {r.link_class}" if r.link_class else ""
        lo, hi = float(r.times_us.min()), float(r.times_us.max())
        print(f"  {r.label():<{w}}  {r.time_us:10.3f} us  min-max {lo:.3f}-{hi:.3f}{gb}{cls}")
    fit_on = "host" if a.target == "cpu" else (a.model or "a3")
    print(f"probe CSV: {path}\nnext: combine-lab calibrate {path} --model {fit_on} "
          "--out fitted.toml, then combine-lab suggest ... --model fitted.toml")
    return 0


def register(sub) -> None:
    p = sub.add_parser("probe", help=HELP["probe"],
                       description="Time what the timing model assumes (docs/probe.md): SDMA puts from k cores "
                                   "(14 KiB and 1-2 MiB, to one peer and to all), the MTE put of one row single- and "
                                   "double-buffered, flag puts and their round trip, quiet and SDMA quiet, polling a "
                                   "ready slot. Writes one CSV that combine-lab calibrate fits from. The first hour "
                                   "on an NPU (docs/npu.md#11-the-first-hour-on-an-npu): environment, doctor, the npu "
                                   "tests, probe --model a3, calibrate, suggest on the fitted machine, compare.")
    p.add_argument("-pes", type=int, default=2, help="PEs (processes; on the NPU devices --fnpu..): at least 2; "
                   "peers to 'many' are all but PE 0 (default 2)")
    p.add_argument("--model", default=None, help="a2, a3 or a .toml: PE 0 sends to the first PE of each link class "
                   "of its rank map that -pes reaches (a3: die pair, card, server; a2: the HCCS mesh), and says which "
                   "it cannot reach; the CSV's link_class names each row's (default: PE 0 -> 1.., no class)")
    p.add_argument("--target", choices=["cpu", "npu"], default="cpu", help="cpu: the CPU twin (default); npu: bisheng")
    p.add_argument("--fnpu", type=int, default=0, help="first NPU device (npu)")
    p.add_argument("--cores", nargs="+", default=None, help="k of the SDMA rows (default 1,2,8,48, capped at the "
                                                             "SoC's AIV cores)")
    p.add_argument("--sdma-bytes", nargs="+", default=None,
                   help=f"bytes per SDMA put (default {','.join(map(str, DEFAULT_SDMA_BYTES))})")
    p.add_argument("--row-bytes", nargs="+", default=[",".join(map(str, DEFAULT_ROW_BYTES))],
                   help="bytes of one MTE row, at most 65536 (default 14336,57344)")
    p.add_argument("--repeats", type=int, default=5, help="timed launches per measurement (default 5)")
    p.add_argument("--timeout", type=float, default=300.0, help="limit for the whole run, seconds (default 300)")
    p.add_argument("--out", default="output/probe/combine_probe.csv", help="the probe CSV (written whole or not at all)")
    p.set_defaults(handler=_probe)
