"""What ``run`` and ``compare`` share: the case flags and the loop over cases and variants (the table: :mod:`.case_tables`).

The case flags are those of the reference drivers (docs/cli.md#2-case-flags) plus the lab's
own (--routing, --target, --min-sdma-bytes, ...); where the reference's run script silently
bends a bad value (warmup, loops, an out-of-range --prof-pe) the value is refused instead
(docs/cli.md#5-deviations-from-the-reference). The table prints one
:class:`~combine_lab.results.rows.ResultRow` per line, a variant the target refuses and the
``--baseline`` run included.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import re
import sys
import warnings
from pathlib import Path

from ..case.grid import make_grid
from ..case.spec import CaseSpec
from ..errors import ParameterError
from ..folders import own_folders, usable_folder
from ..values import as_int, as_list
from ..planning.capacity import check_capacity
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, VARIANTS
from ..planning.settings import group_variants
from ..harness import BASELINE, WALL, Outcome, Run
from ..results.rows import ERROR, PASS
from ..run.build import VariantRefused
from ..run.kernel_source import kernel_source
from ..run.launch import check_ipport
from ..run.options import check_fnpu, check_fpe, check_loops, check_prof_pe, check_repeats, check_warmup
from ..formats.perf_csv import (counters_name, perf_summary_name, rank_files, staged_outputs,
                                variant_dir, write_summary_csv)
from ..run.runner import RunResult, case_wait_budget_s, refusals
from .case_tables import (BANDWIDTH_NOTE, RepeatedRow, _measured_caption, fold_outcomes, print_speedups, table_text,
                          write_run_summary)
from .cluster import add_cluster_flag, executor
from ..results.trace import TraceRecording


#: SHMEM's bootstrap address when -ipport is not given (docs/cli.md#2-case-flags).
DEFAULT_IPPORT = "tcp://127.0.0.1:8767"
#: ``--baseline hccl``: the all_to_all baseline (any other value names a kernel to compare against).
HCCL = "hccl"
#: A 127.0.0.1 bootstrap moves to port + (launch index mod this), one port per launch.
PORT_SPAN = 1000


class _PesSetsGnpus(argparse.Action):
    """``-pes N`` also sets ``-gnpus`` to N, in command-line order as the reference's run script does
    (``-gnpus 4 -pes 2``: 2 NPUs; ``-pes 2 -gnpus 4``: 4, refused without --perf)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.gnpus = None  # "the same as -pes" until a later -gnpus says otherwise


def _dtype_flag(text: str) -> str:
    """``-type`` as the reference's driver reads it: ``int`` is ``int32_t`` (its data_gen and main.cpp
    take both); anything else is checked by CaseSpec (the message names -type)."""
    return "int32_t" if text == "int" else text


def add_shape_flags(p: argparse.ArgumentParser):
    """The flags that make a case (docs/cli.md#2-case-flags shapes, routing, sweep lists); returns
    their group. ``run``/``compare`` add placement and run flags (:func:`add_case_flags`),
    ``suggest`` the model's."""
    g = p.add_argument_group("case (docs/cli.md#2-case-flags)")
    g.add_argument("-pes", type=int, default=2, action=_PesSetsGnpus,
                   help="PEs (ranks); sets -gnpus too, as the reference's run script: a -gnpus before it is "
                        "overridden, one after it stands (default 2)")
    g.add_argument("-type", dest="dtype", default="int32_t", type=_dtype_flag,
                   help="int32_t | float16_t | bfloat16_t (default int32_t); int is read as int32_t, as the reference does")
    g.add_argument("-bs", type=int, default=8, help="tokens per PE (default 8)")
    g.add_argument("-h", dest="h", type=int, default=7168, help="hidden size, elements (default 7168)")
    g.add_argument("-topk", type=int, default=8, help="experts per token (default 8)")
    g.add_argument("-expertPerPe", dest="expert_per_pe", type=int, default=2, help="experts per PE (default 2)")
    g.add_argument("--routing", default="uniform",
                   help="uniform | zipf:S | hot-expert:F | hot-rank:F | deepseek | trace:MODEL/DOMAIN/LAYER")
    g.add_argument("--seed", type=int, default=42, help="case seed (default 42)")
    g.add_argument("--masked-fraction", type=float, default=0.0, help="share of slots masked to -1 (default 0)")
    lists = "commas or spaces, several arguments or one quoted (\"8 16\"); the cases are the product of the lists"
    g.add_argument("--pes-list", nargs="+", default=None, help=f"sweep: PE counts ({lists})")
    g.add_argument("--bs-list", nargs="+", default=None, help="sweep: batch sizes")
    g.add_argument("--h-list", nargs="+", default=None, help="sweep: hidden sizes")
    g.add_argument("--topk-list", nargs="+", default=None, help="sweep: top-k values")
    g.add_argument("--expert-per-pe-list", nargs="+", default=None, help="sweep: experts per PE")
    return g


def add_case_flags(p: argparse.ArgumentParser) -> None:
    """The case and run flags of ``run`` and ``compare`` (docs/cli.md#2-case-flags, plus the lab's)."""
    g = add_shape_flags(p)
    g.add_argument("-gnpus", type=int, default=None,
                   help="NPUs on this node (default = -pes); a different value is set to -pes with --perf and "
                        "refused without it")
    g.add_argument("-fnpu", type=int, default=0, help="first NPU: PE r runs on NPU fnpu + r (default 0)")
    g.add_argument("-fpe", type=int, default=0, help="first PE id, passed to the driver (default 0; one node: 0)")
    g.add_argument("-ipport", default=DEFAULT_IPPORT,
                   help=f"SHMEM bootstrap (default {DEFAULT_IPPORT}); on 127.0.0.1 each launch (case, variant, "
                        f"profiled PE) takes the next port: port + n mod {PORT_SPAN}")
    r = p.add_argument_group("run")
    r.add_argument("--target", choices=["cpu", "npu"], default="cpu", help="cpu = CPU twin (default), npu = Ascend")
    r.add_argument("--min-sdma-bytes", type=int, default=DEFAULT_MIN_SDMA_BYTES,
                   help="smallest segment that may go by SDMA, bytes (default 2 MiB)")
    r.add_argument("--perf", action="store_true",
                   help="profile: warmup + loops launches, full_op and comm_only rows in the perf CSVs; without "
                        "it, one checked run per case (on the twin two launches: a flag the first leaves ready is caught in "
                        "the second), no CSV")
    r.add_argument("--repeats", type=int, default=None,
                   help="with --perf: times each case is run (warmup + loops launches each), the variants "
                        "interleaved (order reversed every other repeat) so that load hits both alike; the table "
                        "gives medians and their spread (min-max), compare the speed-up and whether it is beyond "
                        "noise (default 5 for compare, 1 for run; a timing model: 1)")
    r.add_argument("--warmup", type=int, default=5, help="untimed launches before profiling, >= 0 (default 5)")
    r.add_argument("--loops", type=int, default=50, help="profiled launches, >= 1 (default 50)")
    r.add_argument("--prof-pe", default=None,
                   help="with --perf: the PE profiled (default 0), or 'all': every PE in turn, one run each, then "
                        "the summary CSV (per case the slowest PE, ProfPe 'max')")
    r.add_argument("--output-dir", default="output/perf",
                   help="with --perf: where the perf CSVs go (default output/perf): combine_perf_rank<r>.csv "
                        "(classic) or combine_doubleplane_perf_rank<r>.csv, combine[_doubleplane]_perf_summary.csv, "
                        "and per case the lab's sidecar combine[_doubleplane]_counters_<case>.json; compare puts "
                        "each variant in its own subfolder (<dir>/classic, <dir>/doubleplane). The variant's files "
                        "of an earlier run there are removed first")
    r.add_argument("-a", "--analyse", choices=["plot", "md"], default=None,
                   help="with --perf, after the run: plot = figures of the CSVs (bandwidth and CoreMaxTime per case, "
                        "per metric: <prefix>_perf_<metric>.png), md = the same as Markdown tables "
                        "(<prefix>_perf_report.md), beside the CSVs")
    r.add_argument("--work-dir", default=None, help="where case files go (default a temporary folder, removed)")
    r.add_argument("--timeout", type=float, default=300.0, help="limit per launch of all PEs, seconds (default 300)")
    r.add_argument("--chaos", type=int, default=None, metavar="SEED",
                   help="twin: complete puts late and shuffled (seeded) and report protocol violations")
    r.add_argument("--kernel-source", action="append", default=None, metavar="DIR",
                   help="your own kernel: a folder with a combine kernel written for SHMEM and Ascend C (e.g. "
                        "<shmem>/examples/combine/combine_doubleplane), built unchanged and checked as the lab's is; "
                        "run: instead of the lab's kernel, compare: beside classic and doubleplane, named by its "
                        "label (reference:doubleplane); may be given several times (docs/own-kernel.md)")
    r.add_argument("--rule", dest="kernel_rule", choices=VARIANTS, default=None,
                   help="with --kernel-source: the decision rule your kernel follows, whose plan its counters must "
                        "equal (default: a 'combine-lab rule: <rule>' line in its CMakeLists.txt or combine_kernel.h, "
                        "else classic or doubleplane as its folder's name says, else doubleplane, said to be a guess)")
    r.add_argument("--counters-may-differ", action="store_true",
                   help="with --kernel-source: counters that differ from the rule's plan are shown, not a failure "
                        "(default: exit 1)")
    r.add_argument("--trace", default=None, metavar="FILE",
                   help="write the launch as a Chrome trace-event JSON (one case): open it in ui.perfetto.dev; measured "
                        "on the twin, modelled with --clock model:NAME (docs/lab.md#9-traces)")
    r.add_argument("--clock", default="wall", metavar="wall|model:NAME",
                   help="wall (default): run and time the kernel; model:NAME (a2, a3, host, or a .toml file): "
                        "price each case on the timing model instead, launching nothing (any shape, no payload); "
                        "the table says 'modelled on NAME', perf CSVs go to <output-dir>-model-NAME")
    r.add_argument("--model", dest="clock", type=lambda t: f"model:{t}", metavar="NAME",
                   help="the same as --clock model:NAME (as suggest and calibrate spell it)")
    add_cluster_flag(r)
    p.add_argument("--help", action="help", help="show this help and exit")


def add_clock_alias(p: argparse.ArgumentParser, command: str) -> None:
    """``--clock model:NAME`` for a command that prices on a model given by ``--model NAME``
    (suggest, calibrate), as run and compare spell it: the two spellings are one flag."""
    def model_of(text: str) -> str:
        if text.startswith("model:") and len(text) > len("model:"):
            return text[len("model:"):]
        raise argparse.ArgumentTypeError(f"{text!r}: {command} prices on a timing model: model:NAME (a2, a3, host, "
                                         "or a .toml file), the same as --model NAME")
    p.add_argument("--clock", dest="model", type=model_of, metavar="model:NAME", help="the same as --model NAME")


def clock_model(text: str):
    """The NpuModel of ``--clock model:NAME``, or None for ``wall``.

    Raises:
        ParameterError: neither wall nor model:NAME, or an unknown model (listing the known ones).
    """
    if text == "wall":
        return None
    if not text.startswith("model:") or not text[len("model:"):]:
        raise ParameterError(f"--clock={text!r}: wall or model:NAME (NAME: a2, a3, host, or a .toml file)",
                             parameter="clock", value=text, allowed="wall or model:NAME")
    from ..model.machines import load_model
    try:
        return load_model(text[len("model:"):])
    except ParameterError as e:  # the flag named, as every other refusal names its flag
        raise ParameterError(f"--clock={text!r}: {e}", parameter="clock", value=text,
                             allowed="wall or model:NAME") from None


def _specs(a: argparse.Namespace, payload: bool = True, measured: bool = True) -> list[CaseSpec]:
    # the folders a run writes to, and the placement flags, before anything is drawn, written or launched
    # checked, not kept: a flag refused after this leaves no empty folder behind (own_folders makes them)
    if a.perf and payload and measured:  # a modelled run writes to its own folder (checked where it is made)
        usable_folder(a.output_dir, "--output-dir", keep=False)
    if a.work_dir is not None:
        usable_folder(a.work_dir, "--work-dir", keep=False)
    flag_check("-fnpu", check_fnpu, a.fnpu)
    if a.ipport is not None:
        check_ipport(a.ipport, "-ipport")
    axes = {
        "pes": as_list(a.pes_list, int, "--pes-list") if a.pes_list else [a.pes],
        "bs": as_list(a.bs_list, int, "--bs-list") if a.bs_list else [a.bs],
        "h": as_list(a.h_list, int, "--h-list") if a.h_list else [a.h],
        "topk": as_list(a.topk_list, int, "--topk-list") if a.topk_list else [a.topk],
        "expert_per_pe": as_list(a.expert_per_pe_list, int, "--expert-per-pe-list") if a.expert_per_pe_list
        else [a.expert_per_pe],
    }
    # Every case is validated, and checked to fit this machine (when it runs), before the first one runs.
    specs = make_grid(**axes, routings=[a.routing], dtype=[a.dtype], seed=a.seed,
                      masked_fraction=a.masked_fraction).specs
    if payload:
        for spec in specs:
            check_capacity(spec, a.work_dir, target=a.target, draws_x=True)
    return specs


def _prof_pe(text: str | None, specs: list[CaseSpec]):
    """--prof-pe as run_case takes it (default 0), checked against every case's PEs."""
    if text is None:
        return 0
    try:
        pe = text if text == "all" else as_int(text)
    except ValueError:
        flag_check("--prof-pe", check_prof_pe, text)  # refused, as a PE number that is none: its words
        raise
    fewest = min(specs, key=lambda s: s.pes)
    return flag_check("--prof-pe", check_prof_pe, pe, f" ({fewest.case_id} has {fewest.pes} PEs)", pes=fewest.pes)


def flag_check(flag: str, check, value, why: str = "", **kw):
    """``check(value, **kw)`` (a validator of :mod:`combine_lab.run.options`: the one check of a run
    parameter) for a value given as ``flag``: returns what it returns; its refusal is said with the
    flag, ``"--loops=0: must be an int >= 1" + why``, its fields kept (parameter, value, allowed)."""
    try:
        return check(value, **kw)
    except ParameterError as e:
        shown = repr(value) if isinstance(value, str) else value
        raise ParameterError(f"{flag}={shown}: {e.allowed}{why}", parameter=e.parameter, value=e.value,
                             allowed=e.allowed) from None


def bootstrap_addresses(ipport: str):
    """-ipport as a function that returns the address of the next launch: on 127.0.0.1, ``port + n
    mod 1000`` for the n-th launch of this command (the reference's one port per case, so that a
    launch never meets the previous one's socket); any other address unchanged.

    Raises:
        ParameterError: not ``tcp://HOST:PORT``, or a 127.0.0.1 port past 65535 - 999.
    """
    m = re.fullmatch(r"tcp://([^\s:/]+):(\d+)", ipport)
    if not m:
        raise ParameterError(f"-ipport={ipport!r}: must be tcp://HOST:PORT (default {DEFAULT_IPPORT})",
                             parameter="ipport", value=ipport, allowed="tcp://HOST:PORT")
    host, port = m.group(1), int(m.group(2))
    if host != "127.0.0.1":
        if not 1 <= port <= 65535:
            raise ParameterError(f"-ipport={ipport!r}: port must be in [1, 65535]", parameter="ipport", value=ipport,
                                 allowed="port in [1, 65535]")
        return lambda: ipport
    if not 1 <= port <= 65535 - (PORT_SPAN - 1):
        raise ParameterError(f"-ipport={ipport!r}: a 127.0.0.1 port must be in [1, {65535 - (PORT_SPAN - 1)}] "
                             f"(each launch takes the next of {PORT_SPAN} ports)", parameter="ipport", value=ipport,
                             allowed=f"a 127.0.0.1 port in [1, {65535 - (PORT_SPAN - 1)}]")
    launches = itertools.count()
    return lambda: f"tcp://127.0.0.1:{port + next(launches) % PORT_SPAN}"


def _check_run_flags(a: argparse.Namespace, specs: list[CaseSpec], modelled: bool = False) -> None:
    """The flags that do not make a case, checked before anything runs (docs/cli.md#2-case-flags):
    -gnpus (set to -pes with --perf, refused without), --warmup, --loops, --repeats, -fnpu, -fpe, -a
    (``modelled``: priced on a model, which times every launch, --perf or not)."""
    if a.gnpus is not None and a.gnpus != a.pes:
        if not a.perf:
            raise ParameterError(f"-gnpus={a.gnpus}: must equal -pes={a.pes} (one node; with --perf it is set to "
                                 f"each case's -pes)", parameter="gnpus", value=a.gnpus, allowed=f"-pes={a.pes}")
        print(f"combine-lab: note: -gnpus={a.gnpus} set to each case's -pes (one node)", file=sys.stderr)
    for flag, check, value, reference in (("--warmup", check_warmup, a.warmup, "reads a negative value as 0"),
                                          ("--loops", check_loops, a.loops, "reads 0 or less as 1"),
                                          ("--repeats", check_repeats, 1 if a.repeats is None else a.repeats, None),
                                          ("-fpe", check_fpe, a.fpe, None)):
        why = f" (the reference's run script {reference}; here it is refused)" if reference else ""
        flag_check(flag, check, value, why)
    if a.analyse and not a.perf:
        raise ParameterError(f"-a/--analyse={a.analyse}: needs --perf (it draws the perf CSVs of this run)",
                             parameter="analyse", value=a.analyse, allowed="with --perf")
    if a.prof_pe is not None and not a.perf and not modelled:
        print("combine-lab: note: --prof-pe has no effect without --perf (nothing is profiled)",
              file=sys.stderr)
    if a.repeats is not None and a.repeats > 1 and not a.perf:
        print(f"combine-lab: note: --repeats={a.repeats} has no effect without --perf (nothing is timed: one run "
              "per case)", file=sys.stderr)
    elif a.repeats is not None and a.repeats > 1 and a.clock != "wall":
        print(f"combine-lab: note: --repeats={a.repeats} has no effect on a timing model (it is deterministic: "
              "each case is priced once)", file=sys.stderr)


def _report(o: Outcome) -> None:
    """What went wrong in a run, on stderr: violations, counter mismatches, x_out mismatches, and
    what your kernel did when it failed or hung."""
    res = o.result if isinstance(o.result, RunResult) else o.baseline
    if res is None:
        if o.run.kernel is not None and o.row.check == ERROR:  # the whole reason: what failed, then the PE's log
            first, _, rest = o.row.reason.partition("\n")
            print(f"combine-lab: {first}", file=sys.stderr)
            for line in rest.splitlines():
                print(f"  {line}", file=sys.stderr)
        return
    shown = getattr(res, "violations", [])
    for line in shown:
        print(f"protocol violation: {line}", file=sys.stderr)
    more = getattr(res, "violation_count", 0) - len(shown)
    if shown and more > 0:  # the twin keeps the first reports of each PE
        print(f"protocol violation: ... and {more} more of {res.violation_count} (the twin keeps each PE's first "
              "reports)", file=sys.stderr)
    mismatches = res.counter_mismatches() if isinstance(res, RunResult) else []
    for line in mismatches:
        if res.kernel:  # your kernel's traffic beside its rule's plan
            print(f"{res.kernel} differs from the {res.variant} plan: {line}", file=sys.stderr)
        else:
            print(f"counter mismatch: {line}", file=sys.stderr)
    if mismatches and res.kernel and o.run.kernel is not None:
        print(f"{res.kernel}: counters=plan differs from its rule {res.variant} ({o.run.kernel.rule_from}): a failure "
              "(exit 1); --rule declares the rule it follows, --counters-may-differ shows it without failing",
              file=sys.stderr)
    for r, c in enumerate(res.checks):
        if not c.ok:
            label = "" if isinstance(res, RunResult) else f" ({res.variant})"
            print(f"x_out mismatch on PE {r}{label}: {c}", file=sys.stderr)


def _one_name_per_kernel(kernels: list) -> None:
    """Refuse two ``--kernel-source`` folders that results would name alike (``user:<folder>``):
    their rows, perf folders and speed-ups would land under one name and one would be lost.

    Raises:
        ParameterError: naming ``--kernel-source``, the name and both folders.
    """
    seen: dict[str, object] = {}
    for k in kernels:
        if k.label in seen:
            other = seen[k.label]
            same = "the same folder twice" if Path(other.path) == Path(k.path) else "two folders of one name"
            raise ParameterError(f"--kernel-source: {same} ({other.path} and {k.path}) would both be named "
                                 f"{k.label!r} in every table and output folder; give each its own folder name",
                                 parameter="--kernel-source", value=str(k.path), allowed="folders of distinct names")
        seen[k.label] = k


def run_variants(a: argparse.Namespace, variants: list[str]) -> int:
    """Run ``variants`` on every case the flags ``a`` describe, print the table and the files
    written; return the exit status (0 every run passed, 1 a check or counter comparison failed).

    Everything is checked before anything runs; then one :func:`combine_lab.harness.execute` runs
    every case and variant (``--clock model:NAME``: the same runs priced on the model). Without
    ``--perf`` each case is launched once and checked, nothing is written; with it, each variant's
    folder (:func:`variant_dir`: the output dir, or a subfolder per variant when several run; for a
    model ``<output-dir>-model-NAME``) first loses the files an earlier run of that variant left
    (perf CSVs, summary, sidecars, figures, report), then gets this run's; with ``--prof-pe all`` the
    summary CSV follows, and ``-a plot|md`` the figures or tables.

    A variant the target refuses (doubleplane on an NPU with CANN < 9.0.0) gets a REFUSED row and
    its reason on stderr while the others run; when it is the only one asked for, raises
    ``VariantRefused`` (exit 2). With ``--baseline`` the baseline's row follows each case's.
    """
    model = clock_model(getattr(a, "clock", "wall"))
    rule = getattr(a, "rule", None) or getattr(a, "kernel_rule", None)
    kernels = [kernel_source(d, rule=rule) for d in getattr(a, "kernel_source", None) or []]  # each checked first
    _one_name_per_kernel(kernels)
    for k in kernels:
        if k.rule_from != "rule=":
            print(f"{k.label}: rule {k.rule} ({'from ' + k.rule_from if k.rule_from != 'a guess' else 'a guess'}; "
                  "--rule declares it)", file=sys.stderr)
    if getattr(a, "only_kernels", False) and kernels:
        variants = []  # run --kernel-source: your kernels instead of the lab's
    # the lab's runs: label -> (variant, settings, settings groups whose summary it belongs to)
    entries = group_variants(variants, getattr(a, "settings", None))
    variants = list(entries)
    specs = _specs(a, payload=model is None or bool(kernels), measured=model is None)
    # on a model the slowest PE by default, as suggest prices it (the combine ends when every PE has)
    prof_pe = "all" if model is not None and a.prof_pe is None else _prof_pe(a.prof_pe, specs)
    _check_run_flags(a, specs, modelled=model is not None)
    # --baseline hccl: the all_to_all baseline's row; --baseline NAME: the kernel every speed-up is against
    names = list(entries) + [k.label for k in kernels]
    against = getattr(a, "baseline", None)
    baseline = against == HCCL
    against = None if against in (None, HCCL) else _baseline_name(against, names)
    base, refused = _base_and_refused(a, entries, kernels, model, baseline)
    # label -> folder: the lab's variants, then your kernels (their files named as their rule's)
    separate = len(variants) + len(kernels) > 1
    folders = {v: variant_dir(base, v, separate) for v in variants}
    folders.update({k.label: variant_dir(base, k.slug, separate) for k in kernels})
    rules = {**{v: v for v in variants}, **{k.label: k.rule for k in kernels}}  # what names each one's files
    written = {v: f for v, f in folders.items() if v not in refused} if a.perf else {}
    for folder in written.values():  # checked, not kept: own_folders makes them once the runs start
        usable_folder(folder, "--output-dir", keep=False)
    # Without --perf nothing is timed: one launch, then the check (as the reference's driver does; the twin
    # adds an untimed one before it, docs/hardware-rules.md#15-launch-epochs);
    # a model prices the loops asked for either way, once (it is deterministic).
    warmup, loops = (a.warmup, a.loops) if a.perf or model is not None else (0, 1)
    repeats = _repeats(a, variants, model)
    clock = model if model is not None else WALL
    trace = TraceRecording(getattr(a, "trace", None), model)
    trace.check(specs, kernels, a.target, [st for _, st, _ in entries.values()])
    runs = _runs(a, specs, entries, kernels, baseline, trace, clock=clock, repeats=repeats, warmup=warmup,
                 loops=loops, prof_pe=prof_pe)
    run_all = executor(a, max(s.pes for s in specs), DEFAULT_IPPORT)  # --cluster: connected and checked now
    outcomes: list[Outcome] = []
    outs = [base, *written.values()] if a.perf else []
    works = [a.work_dir] if a.work_dir is not None else []
    removed: dict = {}
    # This run owns its folders while it runs (a second run into them is refused, naming the flag of
    # the folder), and writes into staging folders that replace the earlier run's files only once
    # every case has run.
    with own_folders(outs, "--output-dir"), own_folders(works, "--work-dir"), trace:
        with staged_outputs(written, removed, rules) as stage, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a refusal was said once above; each case shows it as a row
            for o in run_all(runs, progress="model" if model is not None else "combine",
                             ipport=None if model is not None else bootstrap_addresses(a.ipport), work_dir=a.work_dir,
                             outputs=stage if a.perf else None):
                if not outcomes and a.target == "cpu" and model is None:  # once something ran (not on a refusal)
                    print(_budget_text(specs, a.timeout), file=sys.stderr)
                outcomes.append(o)
                _report(o)
        for variant, gone in removed.items():
            if gone and model is None:
                print(f"combine-lab: replaced an earlier {variant} run's files in {folders[variant]} ({len(gone)} of "
                      "its files, not this run's, removed)", file=sys.stderr)
        tidy, summary, rows = fold_outcomes(outcomes, entries, timed=a.perf or model is not None, perf=a.perf,
                                            modelled=model is not None)
        print(model.caption() if model is not None else _measured_caption(a, repeats))
        if model is not None:
            print("times: CoreMaxTime/us of the " + ("slowest PE (every PE priced, as suggest does)" if prof_pe == "all"
                                                     else f"profiled PE {prof_pe}") + ", modelled, not measured")
        for k in kernels if model is not None else []:
            print(f"{k.label}: priced from the operation stream it recorded in one launch on the twin")
        print(table_text(rows))
        if any(isinstance(r, RepeatedRow) and r.bandwidth for r in rows):
            print(BANDWIDTH_NOTE)
        pairs = print_speedups(summary, tidy, several=len(variants) > 1, pairs=bool(kernels or against) and (a.perf or model is not None),
                               against=against, model=model, repeats=repeats)
        trace.write(outcomes)
        if a.perf:
            path = write_run_summary(base, a, outcomes, summary, rows,
                                     model.caption() if model is not None else None, pairs)
            print(f"run summary: {path}")
        clock = model.caption() if model is not None else \
            "measured on the CPU twin" if a.target == "cpu" else f"measured on {a.target}"
        for label in written:
            _finish_perf(folders[label], rules[label], [s.case_id for s in specs], prof_pe == "all", a.analyse, clock)
        if len(written) > 1:  # every variant in one figure per metric (results/analysis.py)
            from ..results.analysis import comparison_figures
            for line in comparison_figures(base, {k: (folders[k], rules[k]) for k in written}, a.analyse == "plot", clock):
                print(line)
        if a.perf:  # every kernel's speed-up in one figure per metric (results/analysis.py)
            from ..results.analysis import speedup_figures
            for line in speedup_figures(base, pairs, a.analyse == "plot", clock):
                print(line)
    return _exit_status(outcomes, getattr(a, "counters_may_differ", False))


def _base_and_refused(a: argparse.Namespace, entries: dict, kernels: list, model, baseline: bool) -> tuple:
    """(the output folder above every kernel's, label -> why the target refuses it), checked before
    anything runs: a model's run writes to ``<output-dir>-model-NAME`` and refuses --chaos and
    --baseline hccl (they run the kernel); on a target, what it refuses is said on stderr, and when
    it refuses everything asked for, raises VariantRefused (exit 2); --baseline hccl's fix if it cannot."""
    if model is not None:
        for flag, given in (("--chaos", a.chaos is not None), ("--baseline", baseline)):
            if given:
                raise ParameterError(f"{flag}: runs the kernel; --clock model:{model.name} prices it without running",
                                     parameter=flag)
        return Path(f"{a.output_dir}-model-{model.name}"), {}
    refused = {v: why for v, (b, _, _) in entries.items() for why in [refusals(a.target, [b]).get(b)] if why}
    refused.update({k.label: why for k in kernels for why in [refusals(a.target, [k.rule]).get(k.rule)] if why})
    if refused and len(refused) == len(entries) + len(kernels):  # nothing would run: say why, exit 2
        raise VariantRefused(next(iter(refused.values())))
    for why in refused.values():
        print(f"combine-lab: {why}", file=sys.stderr)
    if baseline:
        from ..run.baseline import require_baseline
        require_baseline(a.target)  # before anything runs: the fix if it cannot
    return Path(a.output_dir), refused


def _exit_status(outcomes: list[Outcome], may_differ: bool) -> int:
    """0 when every run that ran passed (your kernel's counters may differ from its rule's plan with
    ``may_differ``: --counters-may-differ) and none of your kernels failed, else 1; each failure said
    last on stderr (a PASS of x_out is not a passed run)."""
    ran = [o.row for o in outcomes if o.row.ran]
    failed = [o.row for o in outcomes if o.row.check == ERROR]  # your kernel failed or hung (the lab's raise: exit 2)
    passed = lambda r: r.ok or (may_differ and bool(r.kernel) and dataclasses.replace(r, counters_ok=True).ok)  # noqa: E731
    said: dict[tuple, list[str]] = {}  # a run that failed in several repeats is said once, with their count
    for r in [r for r in ran if not passed(r)] + failed:
        said.setdefault((r.variant, r.case_id), []).append(_why_failed(r))
    runs = collections.Counter((o.row.variant, o.row.case_id) for o in outcomes)
    for (variant, case_id), why in said.items():
        # the counts are the first failing repeat's (the table's violations column sums the repeats)
        times = f" (in {len(why)} of {runs[(variant, case_id)]} repeats; the first of them)" if runs[(variant, case_id)] > 1 else ""
        print(f"combine-lab: FAILED {variant} {case_id}{times}: {why[0]}", file=sys.stderr)
    return 0 if all(passed(r) for r in ran) and not failed else 1


def _runs(a: argparse.Namespace, specs: list[CaseSpec], entries: dict, kernels: list, baseline: bool, trace,
          **common) -> list[Run]:
    """Per case, in order: the lab's runs (``entries``: label -> (variant, settings, groups)), your
    kernels, then the all_to_all baseline (``baseline``); ``common``: clock, repeats, warmup, loops,
    prof_pe, as every kernel's run takes them."""
    flags = dict(perf=a.perf, min_sdma_bytes=a.min_sdma_bytes, target=a.target, timeout_s=a.timeout,
                 chaos_seed=a.chaos, fnpu=a.fnpu, fpe=a.fpe, **common)
    runs = []
    for spec in specs:
        runs += [Run(spec, b, settings=st, group=groups[0], env=trace.env(label), **flags)
                 for label, (b, st, groups) in entries.items()]
        runs += [Run(spec, k.rule, kernel=k, env=trace.env(k.label), **flags) for k in kernels]
        if baseline:
            runs.append(Run(spec, BASELINE, warmup=a.warmup, loops=a.loops, target=a.target, timeout_s=a.timeout,
                            fnpu=a.fnpu))
    return runs


def _baseline_name(text: str, names: list[str]) -> str:
    """``--baseline NAME``: one of the runs of this command (``names``: the lab's variant labels and your
    kernels' labels).

    Raises:
        ParameterError: naming --baseline, the value and what it may be.
    """
    name = text.strip()
    if name not in names:
        raise ParameterError(f"--baseline={text!r}: must be {HCCL} (the all_to_all baseline) or one of the kernels "
                             f"this command runs: {', '.join(names)}", parameter="--baseline", value=text,
                             allowed=", ".join((HCCL, *names)))
    return name


def _why_failed(r) -> str:
    """Why row ``r`` did not pass, in one line (exit 1): the check, violations, counters, or its failure."""
    if r.check == ERROR:
        return r.reason.splitlines()[0] if r.reason else "it failed"
    why = [] if r.check == PASS else [f"x_out {r.check} against golden"]
    if r.violations:
        why.append(f"{r.violations} protocol violation{'s' if r.violations != 1 else ''} (the first listed above; "
                   "docs/hardware-rules.md)")
    if r.counters_ok is False:
        why.append("counters differ from the plan of its rule")
    return "; ".join(why) or "not passed"


def _budget_text(specs: list[CaseSpec], timeout_s: float) -> str:
    """The twin's wait budget of the cases (:func:`combine_lab.run.runner.case_wait_budget_s`), as said once a run
    has begun: ``twin wait budget: 10 s (...)``, or its range over a sweep."""
    budgets = sorted({case_wait_budget_s(s, timeout_s) for s in specs})
    said = f"{budgets[0]:g} s" if len(budgets) == 1 else f"{budgets[0]:g}-{budgets[-1]:g} s"
    return (f"twin wait budget: {said} (a status wait gives up once nothing has landed on any PE for that long; "
            "sized from the case, docs/twin.md#2-sessions-and-cleanup)")


def _repeats(a: argparse.Namespace, variants: list[str], model) -> int:
    """--repeats as the runs take it (checked >= 1 by :func:`_check_run_flags`): compare (several
    variants) 5 by default, run 1; 1 without --perf (nothing is timed) and on a timing model (it is
    deterministic)."""
    if not a.perf or model is not None:
        return 1
    return a.repeats if a.repeats is not None else (5 if len(variants) > 1 else 1)


def _paths_line(paths: list[Path], folder: Path, most: int = 4) -> str:
    """Up to ``most`` paths in full; more as the folder, the count and the first and last name
    (a 64-PE run writes 64 rank files, and a line of 64 paths hides the rest of the output)."""
    if len(paths) <= most:
        return ", ".join(str(p) for p in paths)
    return f"{len(paths)} files in {folder}/ ({paths[0].name} ... {paths[-1].name})"


def _finish_perf(folder: Path, variant: str, case_ids: list[str], summary: bool, analyse: str | None,
                 note: str = "") -> None:
    """After a perf run of ``variant``: the summary CSV (``--prof-pe all``), the ``-a`` analysis,
    and one line per kind of file written in ``folder``; ``note`` titles modelled figures."""
    ranks = rank_files(folder, variant)
    print("perf CSV: " + _paths_line(ranks, folder))
    if summary and ranks:
        path = folder / perf_summary_name(variant)
        write_summary_csv(ranks, path)
        print(f"perf summary: {path}")
    print("sidecars: " + _paths_line([folder / counters_name(variant, c) for c in dict.fromkeys(case_ids)], folder))
    if analyse == "plot":
        from ..results.analysis import write_figures
        print("figures: " + ", ".join(str(p) for p in write_figures(folder, variant, note)))
    elif analyse == "md":
        from ..results.analysis import write_report
        print(f"report: {write_report(folder, variant, note)}")
