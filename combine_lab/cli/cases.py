"""What ``run`` and ``compare`` share: the case flags, the loop over cases and variants, the table.

The case flags are those of the reference drivers (combine-facts section 9) plus the lab's
own (--routing, --target, --min-sdma-bytes, ...).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import pandas as pd

from ..case.spec import CaseSpec
from ..errors import SpecError
from ..planning.capacity import check_capacity
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from ..run.outputs import perf_csv_name, write_summary_csv
from ..run.build import VariantRefused
from ..run.capabilities import npu_variant_refusal
from ..run.runner import RunResult, prepare_case, run_case


def _int_list(text_items: list[str], flag: str) -> list[int]:
    out = []
    for item in text_items:
        for part in str(item).split(","):
            if part.strip() == "":
                continue
            try:
                out.append(int(part))
            except ValueError:
                raise SpecError(f"{flag}={item!r}: must be integers, separated by spaces or commas") from None
    return out


def add_case_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("case (combine-facts section 9)")
    g.add_argument("-pes", type=int, default=2, help="PEs (ranks); sets -gnpus too (default 2)")
    g.add_argument("-gnpus", type=int, default=None, help="NPUs on this node; must equal -pes")
    g.add_argument("-bs", type=int, default=8, help="tokens per PE (default 8)")
    g.add_argument("-h", dest="h", type=int, default=7168, help="hidden size, elements (default 7168)")
    g.add_argument("-topk", type=int, default=8, help="experts per token (default 8)")
    g.add_argument("-expertPerPe", dest="expert_per_pe", type=int, default=4, help="experts per PE (default 4)")
    g.add_argument("-type", dest="dtype", default="int32_t", help="int32_t | float16_t (default int32_t)")
    g.add_argument("-fnpu", type=int, default=0, help="first NPU id (default 0)")
    g.add_argument("-ipport", default=None, help="SHMEM bootstrap, default a free port on tcp://127.0.0.1")
    g.add_argument("--routing", default="uniform",
                   help="uniform | zipf:S | hot-expert:F | hot-rank:F | deepseek | trace:MODEL/DOMAIN/LAYER")
    g.add_argument("--seed", type=int, default=42, help="case seed (default 42)")
    g.add_argument("--masked-fraction", type=float, default=0.0, help="share of slots masked to -1 (default 0)")
    g.add_argument("--pes-list", nargs="+", default=None, help="sweep: PE counts")
    g.add_argument("--bs-list", nargs="+", default=None, help="sweep: batch sizes")
    g.add_argument("--h-list", nargs="+", default=None, help="sweep: hidden sizes")
    g.add_argument("--topk-list", nargs="+", default=None, help="sweep: top-k values")
    g.add_argument("--expert-per-pe-list", nargs="+", default=None, help="sweep: experts per PE")
    r = p.add_argument_group("run")
    r.add_argument("--target", choices=["cpu", "npu"], default="cpu", help="cpu = CPU twin (default), npu = Ascend")
    r.add_argument("--min-sdma-bytes", type=int, default=DEFAULT_MIN_SDMA_BYTES,
                   help="smallest segment that may go by SDMA, bytes (default 2 MiB)")
    r.add_argument("--perf", action="store_true", help="write perf CSVs (full_op, comm_only)")
    r.add_argument("--warmup", type=int, default=5, help="launches before profiling (default 5)")
    r.add_argument("--loops", type=int, default=50, help="profiled launches (default 50)")
    r.add_argument("--prof-pe", default="0", help="PE to profile, or 'all' to profile every PE in turn")
    r.add_argument("--output-dir", default="output/perf", help="perf CSV folder (default output/perf)")
    r.add_argument("--work-dir", default=None, help="where case files go (default a temporary folder, removed)")
    r.add_argument("--timeout", type=float, default=300.0, help="limit per launch of all PEs, seconds (default 300)")
    r.add_argument("--chaos", type=int, default=None, metavar="SEED",
                   help="twin: complete puts late and shuffled (seeded) and report protocol violations")
    p.add_argument("--help", action="help", help="show this help and exit")


def _specs(a: argparse.Namespace) -> list[CaseSpec]:
    if a.gnpus is not None and a.gnpus != a.pes:
        raise SpecError(f"-gnpus={a.gnpus}: must equal -pes={a.pes} (one node)")
    axes = {
        "pes": _int_list(a.pes_list, "--pes-list") if a.pes_list else [a.pes],
        "bs": _int_list(a.bs_list, "--bs-list") if a.bs_list else [a.bs],
        "h": _int_list(a.h_list, "--h-list") if a.h_list else [a.h],
        "topk": _int_list(a.topk_list, "--topk-list") if a.topk_list else [a.topk],
        "expert_per_pe": _int_list(a.expert_per_pe_list, "--expert-per-pe-list") if a.expert_per_pe_list
        else [a.expert_per_pe],
    }
    # Every case is validated, and checked to fit this machine, before the first one runs.
    specs = [CaseSpec(pes=p, bs=b, h=h, topk=k, expert_per_pe=e, dtype=a.dtype, seed=a.seed, routing=a.routing,
                      masked_fraction=a.masked_fraction)
             for p, b, h, k, e in itertools.product(*axes.values())]
    for spec in specs:
        check_capacity(spec, a.work_dir, target=a.target, draws_x=True)
    return specs


def _prof_pe(text: str):
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"--prof-pe={text!r}: must be a PE number or 'all'") from None


def _row(res: RunResult) -> dict:
    pb = res.plane_bytes()
    return {
        "case": res.case_id, "routing": res.routing, "variant": res.variant,
        "check": "PASS" if res.check_ok else "FAIL",
        "comm_only/us": round(res.time_us("comm_only"), 3), "full_op/us": round(res.time_us("full_op"), 3),
        "MTE bytes": int(pb["mte_bytes"].sum()) if len(pb) else None,
        "SDMA bytes": int(pb["sdma_bytes"].sum()) if len(pb) else None,
        "planned SDMA": int(res.plan.totals["sdma_bytes"].sum()),
        "counters=plan": "yes" if not res.counter_mismatches() else "NO",
        "violations": res.violation_count,
    }


def _progress(items, desc: str):
    from tqdm.auto import tqdm
    return tqdm(items, desc=desc, unit="case", disable=len(items) < 2, file=sys.stderr)


def run_variants(a: argparse.Namespace, variants: list[str]) -> int:
    specs = _specs(a)
    prof_pe = _prof_pe(a.prof_pe)
    out_dir = Path(a.output_dir)
    rows, bad, written = [], 0, set()
    for spec in _progress(specs, "combine"):
        prepared = prepare_case(spec, a.work_dir, a.target)
        try:
            for variant in runnable(variants, a, spec, rows):  # npu: doubleplane refused on CANN < 9
                res = run_case(prepared, variant, min_sdma_bytes=a.min_sdma_bytes, warmup=a.warmup, loops=a.loops,
                               perf=True, prof_pe=prof_pe, target=a.target, timeout_s=a.timeout,
                               output_dir=out_dir if a.perf else None, fnpu=a.fnpu, ipport=a.ipport,
                               chaos_seed=a.chaos)
                rows.append(_row(res))
                bad += 0 if res.ok else 1
                for line in res.violations:
                    print(f"protocol violation: {line}", file=sys.stderr)
                for line in res.counter_mismatches():
                    print(f"counter mismatch: {line}", file=sys.stderr)
                for r, c in enumerate(res.checks):
                    if not c.ok:
                        print(f"x_out mismatch on PE {r}: {c}", file=sys.stderr)
                if a.perf:
                    written |= {out_dir / perf_csv_name(f"combine_{variant}", int(p)) for p in res.perf["ProfPe"]}
            bad += baseline_rows(prepared, a, rows)  # compare --baseline hccl
        finally:
            if a.work_dir is None:
                prepared.cleanup()
    print(pd.DataFrame(rows).to_string(index=False))
    if a.perf and written:
        for variant in variants:
            files = sorted(p for p in written if p.name in {perf_csv_name(f"combine_{variant}", r)
                                                            for r in range(max(s.pes for s in specs))})
            if len(files) > 1 or len(specs) > 1:
                summary = out_dir / f"combine_{variant}_perf_summary.csv"
                write_summary_csv(files, summary)
                files.append(summary)
            print("perf CSV: " + ", ".join(str(p) for p in files))
    return 0 if bad == 0 else 1



#: Columns of the run table (cli._row) that a refused variant or a baseline does not have.
_NO_VALUE = {"comm_only/us": "-", "full_op/us": "-", "MTE bytes": "-", "SDMA bytes": "-", "planned SDMA": "-",
             "counters=plan": "-"}

def runnable(variants: list[str], a: argparse.Namespace, spec, rows: list[dict]):
    """Yield the variants of ``variants`` that can run on ``a.target`` here, in order.

    A refused one (doubleplane on an NPU with CANN < 9.0.0) gets a ``REFUSED`` row in its place
    and its reason on stderr, and the others still run; when the only variant asked for is
    refused, raises :class:`build.VariantRefused`. With ``--baseline``, checks first that the
    baseline can run here (:class:`baseline.BaselineUnavailable` otherwise).
    """
    if getattr(a, "baseline", None):
        from ..run.baseline import require_baseline
        require_baseline(a.target)
    for v in variants:
        why = npu_variant_refusal(v) if a.target == "npu" else None
        if why is None:
            yield v
            continue
        if len(variants) == 1:
            raise VariantRefused(why)
        print(f"combine-lab: {why}", file=sys.stderr)
        rows.append({"case": spec.case_id, "routing": spec.routing, "variant": v, "check": "REFUSED", **_NO_VALUE})


def baseline_rows(prepared, a: argparse.Namespace, rows: list[dict]) -> int:
    """With ``--baseline hccl``: run the all_to_all baseline on ``prepared``, append its row;
    return 1 when its x_out differs from golden (printed on stderr), else 0."""
    if not getattr(a, "baseline", None):
        return 0
    from ..run.baseline import run_baseline

    res = run_baseline(prepared, target=a.target, warmup=a.warmup, loops=a.loops, timeout_s=a.timeout, fnpu=a.fnpu)
    rows.append({**_NO_VALUE, "case": res.case_id, "routing": res.routing, "variant": res.variant,
                 "check": "PASS" if res.check_ok else "FAIL",
                 "comm_only/us": round(res.time_us("comm_only"), 3), "full_op/us": round(res.time_us("full_op"), 3)})
    for r, c in enumerate(res.checks):
        if not c.ok:
            print(f"x_out mismatch on PE {r} ({res.variant}): {c}", file=sys.stderr)
    return 0 if res.check_ok else 1
