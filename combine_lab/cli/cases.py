"""What ``run`` and ``compare`` share: the case flags, the loop over cases and variants, the table.

The case flags are those of the reference drivers (combine-facts section 9) plus the lab's
own (--routing, --target, --min-sdma-bytes, ...). The table prints one
:class:`~combine_lab.results.rows.ResultRow` per line, a variant the target refuses and the
``--baseline`` run included.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import pandas as pd

from ..case.spec import CaseSpec
from ..errors import ParameterError
from ..folders import usable_folder
from ..params import as_list
from ..planning.capacity import check_capacity
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from ..results.rows import REFUSED, NotRun, ResultRow, result_row
from ..run.build import VariantRefused
from ..run.launch import check_ipport
from ..run.outputs import perf_csv_name, write_summary_csv
from ..run.runner import prepare_case, refusals, run_case


def add_case_flags(p: argparse.ArgumentParser) -> None:
    """The case and run flags of ``run`` and ``compare`` (combine-facts section 9, plus the lab's)."""
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
    # the folders a run writes to, before anything is drawn, written or launched
    if a.perf:
        usable_folder(a.output_dir, "--output-dir")
    if a.work_dir is not None:
        usable_folder(a.work_dir, "--work-dir")
    if a.fnpu < 0:
        raise ParameterError(f"-fnpu={a.fnpu}: must be an NPU id >= 0 (PE r runs on NPU fnpu + r)")
    if a.ipport is not None:
        check_ipport(a.ipport, "-ipport")
    if a.gnpus is not None and a.gnpus != a.pes:
        raise ParameterError(f"-gnpus={a.gnpus}: must equal -pes={a.pes} (one node)")
    axes = {
        "pes": as_list(a.pes_list, int, "--pes-list") if a.pes_list else [a.pes],
        "bs": as_list(a.bs_list, int, "--bs-list") if a.bs_list else [a.bs],
        "h": as_list(a.h_list, int, "--h-list") if a.h_list else [a.h],
        "topk": as_list(a.topk_list, int, "--topk-list") if a.topk_list else [a.topk],
        "expert_per_pe": as_list(a.expert_per_pe_list, int, "--expert-per-pe-list") if a.expert_per_pe_list
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
        raise ParameterError(f"--prof-pe={text!r}: must be a PE number or 'all'") from None


#: The run table: column title -> ResultRow field.
TABLE_COLUMNS = {"case": "case_id", "routing": "routing", "variant": "variant", "check": "check",
                 "comm_only/us": "comm_only_us", "full_op/us": "full_op_us", "MTE bytes": "mte_bytes",
                 "SDMA bytes": "sdma_bytes", "planned SDMA": "planned_sdma_bytes", "counters=plan": "counters_ok",
                 "violations": "violations"}
_INT_FIELDS = ("mte_bytes", "sdma_bytes", "planned_sdma_bytes", "violations")


def table(rows: list[ResultRow]) -> pd.DataFrame:
    """The rows as the run table shows them (:data:`TABLE_COLUMNS`): times rounded to 3 decimals
    (us; NaN when not timed), bytes and violations as integers, counters=plan 'yes' or 'NO'; a
    value a row does not have (a refused variant, the baseline) is '-'."""
    data = {}
    for title, name in TABLE_COLUMNS.items():
        values = [getattr(r, name) for r in rows]
        if name in ("comm_only_us", "full_op_us"):
            data[title] = [round(v, 3) if not math.isnan(v) else float("nan") for v in values]
        elif name == "counters_ok":
            data[title] = ["-" if v is None else ("yes" if v else "NO") for v in values]
        elif name in _INT_FIELDS and any(v is None for v in values):
            data[title] = pd.Series(["-" if v is None else int(v) for v in values], dtype=object)
        else:
            data[title] = values
    return pd.DataFrame(data, columns=list(TABLE_COLUMNS))


def table_text(rows: list[ResultRow]) -> str:
    """:func:`table` as text, one row per line under a header; times not measured read '-'."""
    return table(rows).to_string(index=False, na_rep="-")


def _progress(items, desc: str):
    from tqdm.auto import tqdm
    return tqdm(items, desc=desc, unit="case", disable=len(items) < 2, file=sys.stderr)


def _report(res) -> None:
    """What went wrong in a run, on stderr: violations, counter mismatches, x_out mismatches."""
    for line in res.violations:
        print(f"protocol violation: {line}", file=sys.stderr)
    for line in res.counter_mismatches():
        print(f"counter mismatch: {line}", file=sys.stderr)
    for r, c in enumerate(res.checks):
        if not c.ok:
            print(f"x_out mismatch on PE {r}: {c}", file=sys.stderr)


def run_variants(a: argparse.Namespace, variants: list[str]) -> int:
    """Run ``variants`` on every case the flags ``a`` describe, print the table and the perf CSVs
    written; return the exit status (0 every run passed, 1 a check or counter comparison failed).

    A variant the target refuses (doubleplane on an NPU with CANN < 9.0.0) gets a REFUSED row and
    its reason on stderr while the others run; when it is the only one asked for, raises
    ``VariantRefused`` (exit 2). With ``--baseline`` the baseline's row follows each case's.
    """
    specs = _specs(a)
    prof_pe = _prof_pe(a.prof_pe)
    refused = refusals(a.target, variants)
    if refused and len(refused) == len(variants):  # nothing would run: say why, exit 2
        raise VariantRefused(refused[variants[0]])
    for why in refused.values():
        print(f"combine-lab: {why}", file=sys.stderr)
    if getattr(a, "baseline", None):
        from ..run.baseline import require_baseline
        require_baseline(a.target)  # before anything runs: the fix if it cannot
    out_dir = Path(a.output_dir)
    rows: list[ResultRow] = []
    bad, written = 0, set()
    for spec in _progress(specs, "combine"):
        prepared = prepare_case(spec, a.work_dir, a.target)
        try:
            for variant in variants:
                if variant in refused:
                    rows.append(result_row(NotRun.of(spec, variant, a.target, REFUSED, refused[variant],
                                                      a.min_sdma_bytes)))
                    continue
                res = run_case(prepared, variant, min_sdma_bytes=a.min_sdma_bytes, warmup=a.warmup, loops=a.loops,
                               perf=True, prof_pe=prof_pe, target=a.target, timeout_s=a.timeout,
                               output_dir=out_dir if a.perf else None, fnpu=a.fnpu, ipport=a.ipport,
                               chaos_seed=a.chaos)
                rows.append(result_row(res))
                bad += 0 if rows[-1].ok else 1
                _report(res)
                if a.perf:
                    written |= {out_dir / perf_csv_name(f"combine_{variant}", int(p)) for p in res.perf["ProfPe"]}
            if getattr(a, "baseline", None):  # compare --baseline hccl
                rows.append(_baseline_row(prepared, a))
                bad += 0 if rows[-1].ok else 1
        finally:
            if a.work_dir is None:
                prepared.cleanup()
    print(table_text(rows))
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


def _baseline_row(prepared, a: argparse.Namespace) -> ResultRow:
    """Run the all_to_all baseline on ``prepared`` (``--baseline hccl``: HCCL on npu, gloo on the
    twin); its x_out mismatches go to stderr."""
    from ..run.baseline import run_baseline

    res = run_baseline(prepared, target=a.target, warmup=a.warmup, loops=a.loops, timeout_s=a.timeout, fnpu=a.fnpu)
    for r, c in enumerate(res.checks):
        if not c.ok:
            print(f"x_out mismatch on PE {r} ({res.variant}): {c}", file=sys.stderr)
    return result_row(res)
