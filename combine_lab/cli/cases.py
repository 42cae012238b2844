"""What ``run`` and ``compare`` share: the case flags and their checks (the loop over cases and kernels:
:mod:`.run_cases`; its table: :mod:`.case_tables`).

The case flags are those of the reference drivers (docs/cli.md#2-case-flags) plus the lab's
own (--routing, --target, --min-sdma-bytes, ...); where the reference's run script silently
bends a bad value (warmup, loops, an out-of-range --prof-pe) the value is refused instead
(docs/cli.md#5-deviations-from-the-reference).
"""

from __future__ import annotations

import argparse
import itertools
import re

from ..case.grid import make_grid
from ..case.spec import CaseSpec
from ..errors import ParameterError
from ..folders import usable_folder
from ..values import as_int, as_list
from ..planning.capacity import check_capacity
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, VARIANTS
from ..run.launch import check_ipport
from ..run.options import check_fnpu, check_fpe, check_loops, check_prof_pe, check_repeats, check_warmup
from .cluster import add_cluster_flag

#: SHMEM's bootstrap address when -ipport is not given (docs/cli.md#2-case-flags).
DEFAULT_IPPORT = "tcp://127.0.0.1:8767"
#: Where --perf writes when --output-dir is not given (docs/cli.md#1-commands).
OUTPUT_DIR = "output/perf"
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


class _Given(argparse.Action):
    """A flag's value, and ``<dest>_given`` True: the command line named it (its default does not)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


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
    r.add_argument("--output-dir", default=OUTPUT_DIR, action=_Given,
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
                             allowed=e.allowed, said_as=flag) from None


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


def _check_run_flags(a: argparse.Namespace, specs: list[CaseSpec], modelled: bool = False) -> list[str]:
    """The flags that do not make a case, checked before anything runs (docs/cli.md#2-case-flags):
    -gnpus (set to -pes with --perf, refused without), --warmup, --loops, --repeats, -fnpu, -fpe, -a
    (``modelled``: priced on a model, which times every launch, --perf or not). Returns the notes on
    flags that are taken but have no effect (or another than given), for the caller to say once
    every other check has passed (a refusal after them would bury its error under them)."""
    notes = []
    if a.gnpus is not None and a.gnpus != a.pes:
        if not a.perf:
            raise ParameterError(f"-gnpus={a.gnpus}: must equal -pes={a.pes} (one node; with --perf it is set to "
                                 f"each case's -pes)", parameter="gnpus", value=a.gnpus, allowed=f"-pes={a.pes}",
                                 said_as="-gnpus")
        notes.append(f"-gnpus={a.gnpus} set to each case's -pes (one node)")
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
        notes.append("--prof-pe has no effect without --perf (nothing is profiled)")
    if a.repeats is not None and a.repeats > 1 and not a.perf:
        notes.append(f"--repeats={a.repeats} has no effect without --perf (nothing is timed: one run per case)")
    elif a.repeats is not None and a.repeats > 1 and a.clock != "wall":
        notes.append(f"--repeats={a.repeats} has no effect on a timing model (it is deterministic: each case is "
                     "priced once)")
    if getattr(a, "output_dir_given", False) and not a.perf:
        notes.append(f"--output-dir {a.output_dir} has no effect without --perf (nothing is written)")
    return notes
