"""One harness for every run the lab makes: descriptions of runs in, one outcome per run and repeat out.

    runs = [Run(spec, v, repeats=5, warmup=2, loops=20) for v in VARIANTS]
    for o in execute(runs, progress="compare"):
        print(o.repeat, o.row.variant, o.row.check, o.row.comm_only_us)

A :class:`Run` says what to run (a case, a variant), on which clock (``wall``: build, launch
and time the kernel on a target; an :class:`~combine_lab.model.machines.NpuModel`: price it on
the timing model, launching nothing), how often (repeats) and how (warmup/loops, the profiled
PE, the SDMA floor, ...). :func:`execute` runs a list of them: each case's files are written
once, the repeats of the runs on one case are interleaved (the order of the variants reversed
every other repeat, so that a burst of load lands on all of them alike), a variant the target
refuses and a run that fails become rows that say why, the perf CSVs and sidecars go through one
writer (:func:`combine_lab.formats.sidecars.write_run_files`), and every outcome carries its
:class:`~combine_lab.results.rows.ResultRow`: the one row format of the CLI's table, the sweep's
tidy CSV and the tuning app's history. The CLI (``run``, ``compare``), the sweep, the tuning
app and the walkthrough all run through here (the latter two by :func:`compare`).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence, Union

import pandas as pd

from .kernels import DOUBLEPLANE
from .case.case import Case, make_case
from .case.spec import CaseSpec
from .errors import ParameterError
from .model import facade
from .model.modelled import ModelledResult
from .model.machines import NpuModel
from .planning.planner import VARIANTS
from .planning.settings import check_kernel_settings, group_variants, parse_settings, variant_label, lab_kernel
from .results.rows import ERROR, REFUSED, NotRun, ResultRow, result_row
from .results.tables import TIDY_COLUMNS, tidy_rows
from .run.launch import LaunchError
from .formats.sidecars import write_run_files
from .run import runner
from .run.options import OPTION_FIELDS, RunOptions, check_repeats
from .run.runner import CaseLike, KernelFailed, PreparedCase, RunResult, prepare_case, refusals

__all__ = ["WALL", "BASELINE", "Run", "Outcome", "execute", "Comparison", "compare", "progress_bar"]

#: The clock of a run that launches the kernel and times it on its target.
WALL = "wall"
#: The variant of a Run that is the all_to_all baseline (torch.distributed: gloo on the twin, HCCL on
#: an NPU; combine_lab.run.baseline) on the same case files, not the kernel.
BASELINE = "baseline"


@dataclass(frozen=True)
class Run(RunOptions):
    """One run to make: ``variant`` of ``case`` on ``clock``, ``repeats`` times, each repeat made as
    its :class:`~combine_lab.run.options.RunOptions` say.

    A Run is a RunOptions with what to run added: its option fields (warmup, loops, perf, prof_pe,
    min_sdma_bytes, target, timeout_s, chaos_seed, fnpu, fpe; keywords) are RunOptions's own, with
    their defaults, their documentation and their checks, and the whole Run is checked when it is made
    (:meth:`check`: one ParameterError for the first bad field, naming it, its value and what is allowed).

    Attributes:
        case: a CaseSpec, a Case, a PreparedCase or a reference case folder (runs given the same
            object share its case files).
        variant: ``classic``, ``doubleplane``, or :data:`BASELINE` (the all_to_all baseline, wall clock only).
        clock: :data:`WALL` (launch on ``target``, time with the kernel's profiling frames, us) or an
            NpuModel (priced by the timing model; nothing launched, no payload drawn).
        repeats: how many times (>= 1); the repeats of runs on one case are interleaved.
        env: extra environment of the PEs; binary: a driver to use instead of building one.
        on_launch: called with the profiled PE after each launch of all PEs (a progress count;
            the tuning app's bar); None: nothing is told.
        kernel: your own kernel instead of the lab's (a folder, checked against the entry contract
            when the Run is made, or a KernelSource; docs/own-kernel.md): ``variant`` is then the rule
            whose plan its counters are compared with (default: the kernel's), and results call it by
            its label (``reference:doubleplane``). On a timing model it runs once on the twin and its
            recorded operation stream is priced (:func:`combine_lab.model.recorded.replay_recorded`).
        settings: the lab kernel's settings (KernelSettings or a label: ``reference``, ``segment``,
            ``c6``, ``segment-c6``; docs/variants.md); results call the run by its variant label
            (``doubleplane-segment-c6``). A timing model prices them on its SoC (docs/variants.md#6-what-the-model-says),
            refusing what that SoC cannot run.
        group: the settings group its row belongs to, for summaries that compare classic and
            doubleplane within one group (default: its own settings label).
    """

    case: CaseLike
    variant: str | None = None
    clock: Union[str, NpuModel] = WALL
    repeats: int = 1
    env: Mapping[str, str] | None = None
    binary: str | os.PathLike | None = None
    on_launch: Callable[[int], None] | None = None
    kernel: object = None
    settings: object = None
    group: str = ""

    def __post_init__(self):
        super().__post_init__()  # the run options, each by its one validator (combine_lab.run.options)
        object.__setattr__(self, "repeats", check_repeats(self.repeats))
        object.__setattr__(self, "settings", parse_settings(self.settings))
        if not self.group:
            object.__setattr__(self, "group", self.settings.label)
        if self.kernel is not None:  # a folder becomes its KernelSource: refused here when it breaks the contract
            from .run.kernel_source import kernel_source
            object.__setattr__(self, "kernel", kernel_source(self.kernel))
        if self.variant is None:
            object.__setattr__(self, "variant", self.kernel.rule if self.kernel is not None else DOUBLEPLANE)
        self.check()

    @property
    def label(self) -> str:
        """What results call this run: your kernel's label (``reference:doubleplane``), else the variant
        with its settings (``doubleplane-segment-c6``)."""
        if self.kernel is not None:
            return self.kernel.label
        return self.variant if self.variant == BASELINE else variant_label(self.variant, self.settings)

    @property
    def descriptor(self):
        """The kernel this run runs, as a :class:`combine_lab.kernels.Kernel` (name, source, rule,
        settings, supports; its default speed-up ``baseline``); None for the all_to_all baseline."""
        if self.variant == BASELINE:
            return None
        return self.kernel.kernel if self.kernel is not None else lab_kernel(self.variant, self.settings)

    @property
    def modelled(self) -> bool:
        """True when the run is priced on a timing model, not launched."""
        return isinstance(self.clock, NpuModel)

    def check(self) -> None:
        """Raises ParameterError naming the field, the value and what is allowed: what the run options'
        validators cannot see alone (the variant, the clock, the settings on the clock's SoC, the profiled
        PE against the case's PEs). Called when the Run is made; :func:`execute` calls it again."""
        if self.variant not in VARIANTS + (BASELINE,):
            allowed = ", ".join(map(repr, VARIANTS + (BASELINE,)))
            raise ParameterError(f"variant={self.variant!r}: must be one of {allowed}", parameter="variant",
                                 value=self.variant, allowed=allowed)
        if self.kernel is not None and self.variant == BASELINE:
            raise ParameterError(f"variant={BASELINE!r}: the baseline runs no kernel; kernel= names one",
                                 parameter="variant", value=BASELINE)
        if self.variant == BASELINE and self.modelled:
            raise ParameterError(f"variant={BASELINE!r}: runs torch.distributed; a timing model prices the kernel only",
                                 parameter="variant", value=BASELINE)
        if not self.settings.is_reference:
            if self.kernel is not None or self.variant == BASELINE:
                raise ParameterError(f"settings={self.settings.label!r}: kernel settings are the lab kernel's "
                                     f"(not {self.label}'s)", parameter="settings", value=self.settings.label)
            if self.modelled:  # the model prices them on its SoC: refuse what that SoC cannot run
                check_kernel_settings(self.settings, self.variant, self.clock.soc)
        if not self.modelled and self.clock != WALL:
            raise ParameterError(f"clock={self.clock!r}: {WALL!r} or an NpuModel (combine_lab.model.load_model)",
                                 parameter="clock", value=self.clock, allowed=f"{WALL!r} or an NpuModel")
        spec = _spec_of(self.case)
        if spec is not None and self.variant != BASELINE:  # the profiled PE against the case's, before writing
            self.prof_pes(spec.pes)

    @property
    def options(self) -> RunOptions:
        """Its run options alone (warmup, loops, perf, prof_pe, ...): the RunOptions each repeat is made with."""
        return RunOptions(**{name: getattr(self, name) for name in OPTION_FIELDS})


@dataclass
class Outcome:
    """What one repeat of one :class:`Run` came to.

    Attributes:
        run: the description; repeat: 0-based index of the repeat.
        spec: the case's CaseSpec.
        row: its :class:`~combine_lab.results.rows.ResultRow` (check PASS/FAIL, MODEL, REFUSED or ERROR).
        result: the RunResult (wall) or ModelledResult (a model), None when it did not run (and for
            the baseline, whose BaselineResult is in ``baseline``).
        perf: the perf rows of the profiled PEs (combine_lab.formats.perf_csv.read_perf_csv form, times in
            us; modelled rows for a model); empty when nothing was timed.
    """

    run: Run
    repeat: int
    spec: CaseSpec
    row: ResultRow
    result: RunResult | ModelledResult | None = None
    perf: pd.DataFrame = field(default_factory=pd.DataFrame)
    baseline: object | None = None  # a BaselineResult (combine_lab.run.baseline) for variant BASELINE


def progress_bar(items, desc: str, *, disable: bool = False, unit: str = "case"):
    """A tqdm text bar over ``items``: on stdout in a Jupyter kernel, on stderr elsewhere (a terminal,
    a log).

    Text, not tqdm's notebook widget: a notebook executed headless (papermill, ``combine-lab
    notebooks``) saves a widget's first state as its text (``sweep: 0%| | 0/4``) and never the
    rest, while a text bar's saved output ends with its last state (``sweep: 100%|...| 4/4``);
    JupyterLab draws the same text bar in place as it advances.
    """
    from tqdm.std import tqdm

    # A Jupyter kernel has imported IPython before any cell runs; elsewhere importing it only to ask
    # would cost every CLI process a third of a second.
    ipython = sys.modules.get("IPython")
    in_kernel = ipython is not None and type(ipython.get_ipython()).__name__ == "ZMQInteractiveShell"
    return tqdm(items, desc=desc, unit=unit, disable=disable, file=sys.stdout if in_kernel else sys.stderr,
                dynamic_ncols=not in_kernel, ncols=80 if in_kernel else None)


def _spec_of(case: CaseLike) -> CaseSpec | None:
    if isinstance(case, CaseSpec):
        return case
    if isinstance(case, Case):
        return case.spec
    if isinstance(case, PreparedCase):
        return case.case.spec
    return None  # a case folder: known once read


def _groups(runs: Sequence[Run]) -> list[list[Run]]:
    """The runs grouped by their case object, in the order each case first appears."""
    groups: dict[int, list[Run]] = {}
    for r in runs:
        groups.setdefault(id(r.case), []).append(r)
    return list(groups.values())


def execute(runs: Iterable[Run], *, progress: str | None = None, ipport: str | Callable[[], str] | None = None,
            work_dir: str | os.PathLike | None = None, outputs: Mapping[str, str | os.PathLike] | None = None,
            keep_files: bool = False, on_error: str = "raise") -> Iterator[Outcome]:
    """Run every :class:`Run` of ``runs`` and yield one :class:`Outcome` per run and repeat, as each ends.

    Args:
        runs: the descriptions; each is checked (:meth:`Run.check`) before the first one runs.
        progress: the label of a progress bar (one step per case), or None for none.
        ipport: SHMEM's bootstrap address of every launch, or a function giving the next one
            (``combine-lab``'s -ipport: one port per launch); default a free 127.0.0.1 port.
        work_dir: where case files are written (default a temporary folder per case, removed).
        outputs: variant -> folder: where the perf CSVs (``--perf``) and the sidecar of each case go,
            written once every launch of the run succeeded (combine_lab.formats.sidecars.write_run_files).
        keep_files: keep the temporary case files.
        on_error: ``"raise"``: a failed run raises (LaunchError, OSError); ``"row"``: it becomes an
            ERROR row with the whole error (its first line says what failed), and the rest of that case's
            repeats are skipped.

    Yields:
        Outcomes in run order within each repeat. A variant the target refuses gets one REFUSED
        outcome (repeat 0) with the reason, and a warning, while the others run.

    Raises:
        ParameterError: a Run that cannot be made (before anything runs).
        SpecError, CaseFileError, CapacityError: a case that cannot be made or does not fit.
        LaunchError, OSError: a run failed, with ``on_error="raise"``.
    """
    runs = list(runs)
    if on_error not in ("raise", "row"):
        raise ParameterError.of("on_error", on_error, "'raise' or 'row'")
    for r in runs:
        r.check()
    groups = _groups(runs)
    bar = progress_bar(groups, progress, disable=progress is None or len(groups) < 2) if progress else groups
    for group in bar:
        yield from _execute_case(group, ipport, work_dir, outputs, keep_files, on_error)


def _not_run(run: Run, spec: CaseSpec, check: str, reason: str, repeat: int) -> Outcome:
    target = f"model:{run.clock.name}" if run.modelled else run.target
    kernel = str(run.kernel.path) if run.kernel is not None else ""
    return Outcome(run, repeat, spec, result_row(NotRun.of(spec, run.label, target, check, reason,
                                                           run.min_sdma_bytes, kernel, run.group,
                                                           None if run.kernel is not None else run.settings.cores_per_rank)))


def _execute_case(group: list[Run], ipport, work_dir, outputs, keep_files: bool, on_error: str) -> Iterator[Outcome]:
    case = group[0].case
    walls = [r for r in group if not r.modelled or r.kernel is not None]  # a modelled kernel runs on the twin
    refused = {id(r): why for r in walls if r.binary is None and r.variant != BASELINE
               for why in [refusals(r.target, [r.variant]).get(r.variant)] if why}
    prepared: PreparedCase | None = None
    try:
        if walls and any(id(r) not in refused for r in walls):
            prepared = prepare_case(case, work_dir, walls[0].target)
            the_case = prepared.case
        else:
            the_case = case.case if isinstance(case, PreparedCase) else case if isinstance(case, Case) else \
                make_case(case) if isinstance(case, CaseSpec) else prepare_case(case).case
        spec = the_case.spec
        for why in dict.fromkeys(refused.values()):
            warnings.warn(why, stacklevel=3)
        runnable = [r for r in group if id(r) not in refused]
        failed_kernels: set[int] = set()
        for rep in range(max((r.repeats for r in group), default=0)):
            # a refused run shows once, in its place; the others' order flips every other repeat
            order = group if rep == 0 else runnable if rep % 2 == 0 else runnable[::-1]
            done: list[Outcome] = []
            try:
                for r in order:
                    if id(r) in refused:
                        done.append(_not_run(r, spec, REFUSED, refused[id(r)], 0))
                    elif id(r) in failed_kernels:
                        continue
                    elif rep < r.repeats and r.kernel is not None:
                        # your kernel failing or hanging is a result about it, not the lab's failure:
                        # its row says what happened (the slot it waited for), the others run on
                        try:
                            done.append(_one(r, rep, prepared, the_case, ipport, outputs))
                        except KernelFailed as e:
                            failed_kernels.add(id(r))
                            done.append(_not_run(r, spec, ERROR, str(e), rep))
                    elif rep < r.repeats:
                        done.append(_one(r, rep, prepared, the_case, ipport, outputs))
            except (LaunchError, OSError) as e:
                if on_error == "raise":
                    raise
                # the whole repeat: a pair with one variant missing compares nothing
                for r in runnable:
                    if rep < r.repeats:
                        yield _not_run(r, spec, ERROR, str(e), rep)
                return
            yield from done
    except OSError as e:  # the case files could not be written
        if on_error == "raise":
            raise
        spec = _spec_of(case)
        if spec is None:
            raise
        for r in group:
            yield _not_run(r, spec, ERROR, str(e), 0)
    finally:
        if prepared is not None and not keep_files and prepared is not case:
            prepared.cleanup()


def _one(r: Run, rep: int, prepared: PreparedCase | None, the_case: Case, ipport, outputs) -> Outcome:
    """Run (or price) one repeat of ``r`` and write its files to ``outputs[r.label]``."""
    folder = Path(outputs[r.label]) if outputs is not None and r.label in outputs else None
    if r.variant == BASELINE:
        from .run.baseline import run_baseline  # torch: only when asked for
        res = run_baseline(prepared, target=r.target, warmup=r.warmup, loops=r.loops, timeout_s=r.timeout_s,
                           fnpu=r.fnpu)
        return Outcome(r, rep, the_case.spec, result_row(res), None, baseline=res)
    if r.modelled and r.kernel is not None:  # your kernel priced as it really issues its operations
        res = facade.price_kernel(prepared, r.kernel, r.clock, variant=r.variant, min_sdma_bytes=r.min_sdma_bytes,
                                  prof_pe=r.prof_pe, warmup=r.warmup, loops=r.loops, timeout_s=r.timeout_s,
                                  ipport=ipport, binary=r.binary)
        perf = pd.concat([res.perf_rows(pe) for pe in res.prof_pes], ignore_index=True) if r.perf else pd.DataFrame()
    elif r.modelled:
        res = facade.price_case(the_case, r.variant, r.clock, r.min_sdma_bytes, r.prof_pe, r.warmup, r.loops,
                                settings=r.settings)
        # priced whether or not files are asked for: a modelled run always has its times
        perf = pd.concat([res.perf_rows(pe) for pe in res.prof_pes], ignore_index=True)
    else:
        res = runner.run_case(prepared, r.variant, min_sdma_bytes=r.min_sdma_bytes, warmup=r.warmup, loops=r.loops,
                       perf=r.perf, prof_pe=r.prof_pe, target=r.target, timeout_s=r.timeout_s, ipport=ipport,
                       chaos_seed=r.chaos_seed, fnpu=r.fnpu, fpe=r.fpe, binary=r.binary,
                       env=dict(r.env) if r.env else None, on_launch=r.on_launch,
                       kernel_source=r.kernel, settings=r.settings)
        perf = res.perf
    if folder is not None:
        write_run_files(folder, res, perf if r.perf else None)
    return Outcome(r, rep, the_case.spec, result_row(res, r.group), res, perf)


class Comparison(dict):
    """What :func:`compare` returns: label -> result (RunResult, or ModelledResult on a model) for
    each run that ran: the variants in :data:`~combine_lab.planning.planner.VARIANTS` order, then
    each of your kernels by its label (``reference:doubleplane``); ``refused``: label -> reason for
    each one the target refused; ``failed``: label -> what your kernel did (it failed or hung);
    ``outcomes``: every repeat's :class:`Outcome`, in the order they ran (the mapping holds each
    label's last repeat), for a summary over repeats (:meth:`tidy`)."""

    def __init__(self, runs=(), refused: dict[str, str] | None = None, failed: dict[str, str] | None = None,
                 outcomes: list[Outcome] | None = None):
        super().__init__(runs)
        self.refused: dict[str, str] = dict(refused or {})
        self.failed: dict[str, str] = dict(failed or {})
        self.outcomes: list[Outcome] = list(outcomes or [])

    def tidy(self) -> pd.DataFrame:
        """Every repeat's rows as the tidy table (:data:`combine_lab.results.tables.TIDY_COLUMNS`):
        what :func:`combine_lab.results.tables.summarize` turns into medians, spreads and a verdict."""
        rows = [r for o in self.outcomes for r in tidy_rows(o.row, o.spec, o.perf if o.result is not None else None,
                                                          o.repeat)]
        return pd.DataFrame(rows, columns=TIDY_COLUMNS)

    def speedups(self, baseline: str | None = None) -> pd.DataFrame:
        """The speed-up of every kernel that ran against ``baseline`` (a label; None: each against its
        same-settings classic), per case over the repeats: :func:`combine_lab.results.pairs.pair_speedups`
        (baseline time / kernel time, above 1: the kernel faster; docs/cli.md#9-repeats-spread-and-verdicts)."""
        from .results.pairs import pair_speedups
        return pair_speedups(self.tidy(), baseline, modelled=any(o.run.modelled for o in self.outcomes))


def compare(case: CaseLike, *, clock: Union[str, NpuModel] = WALL, work_dir: str | os.PathLike | None = None,
            keep_files: bool = False, ipport: str | Callable[[], str] | None = None,
            outputs: Mapping[str, str | os.PathLike] | None = None, kernel_source=None, **fields) -> Comparison:
    """Run ``classic`` and ``doubleplane`` on the same case files (one :func:`execute` of two Runs),
    and beside them each kernel of ``kernel_source``.

    Keyword arguments are :class:`Run`'s fields (warmup, loops, perf, prof_pe, min_sdma_bytes, target,
    timeout_s, chaos_seed, ...) and :func:`execute`'s (work_dir, keep_files, ipport, outputs, keyed by
    label). ``kernel_source``: a folder with your own kernel, a KernelSource, or a list of them
    (docs/own-kernel.md); each runs on the same case files under its label, checked as the lab's
    kernel is, and one that fails or hangs is in ``Comparison.failed`` with what it did. A variant
    refused on this target (doubleplane on an NPU with CANN < 9.0.0) is left out of the mapping, with
    its reason in ``Comparison.refused`` and in a warning; classic still runs.

    Raises: as :func:`execute` with ``on_error="raise"``; KernelSourceError for a folder that does not
    meet the entry contract (before anything runs).
    """
    kernels = [] if kernel_source is None else list(kernel_source) if isinstance(kernel_source, (list, tuple)) \
        else [kernel_source]
    # one settings group: classic without the segment layout (doubleplane's), both rows in the group
    group = parse_settings(fields.pop("settings", None))
    lab = {k: v for k, v in fields.items() if k != "group"}
    runs = [Run(case, v, clock=clock, settings=st, group=group.label, **lab)
            for v, st, _ in group_variants(list(VARIANTS), [group.label]).values()]
    runs += [Run(case, clock=clock, kernel=k, **fields) for k in kernels]
    out = Comparison()
    for o in execute(runs, ipport=ipport, work_dir=work_dir, outputs=outputs, keep_files=keep_files):
        out.outcomes.append(o)
        if o.result is None and o.row.check == ERROR:
            out.failed[o.run.label] = o.row.reason
        elif o.result is None:
            out.refused[o.run.label] = o.row.reason
        else:
            out[o.run.label] = o.result
    order = [r.label for r in runs if r.label in out]
    return Comparison({k: out[k] for k in order}, out.refused, out.failed, out.outcomes)
