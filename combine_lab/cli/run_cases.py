"""``run`` and ``compare``'s loop over cases and kernels: plan (every flag checked, the runs made),
execute (one :func:`combine_lab.harness.execute`, here or on a --cluster), present (the table of
:mod:`.case_tables`, the speed-ups, the perf folders and figures); the flags are :mod:`.cases`'.

A variant the target refuses gets a REFUSED row; the exit status is 0 when every run passed
(docs/cli.md#2-case-flags).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import sys
import warnings
from pathlib import Path

from ..case.spec import CaseSpec
from ..errors import ParameterError
from ..folders import own_folders, usable_folder
from ..planning.settings import group_variants
from ..harness import BASELINE, WALL, Outcome, Run
from ..results.rows import ERROR, PASS
from ..results.trace import TraceRecording
from ..run.build import VariantRefused
from ..run.kernel_source import kernel_source
from ..run.runner import RunResult, case_wait_budget_s, refusals
from ..formats.perf_csv import (counters_name, perf_summary_name, rank_files, staged_outputs,
                                variant_dir, write_summary_csv)
from .case_tables import (BANDWIDTH_NOTE, RepeatedRow, _measured_caption, fold_outcomes, print_speedups, table_text,
                          write_run_summary)
from .cases import DEFAULT_IPPORT, HCCL, _check_run_flags, _prof_pe, _specs, bootstrap_addresses, clock_model
from .cluster import executor


#: Protocol violations listed per run on stderr, at most (the sidecar keeps each PE's first reports).
SHOWN_VIOLATIONS = 8


def openable(text: str, folder) -> str:
    """``text`` with the twin's short names of your kernel's files (``<folder name>/<file>:<line>``,
    the last two parts of the path) given whole (``<folder>/<file>:<line>``), so that a line a report
    names opens from wherever the command ran; ``folder`` None: unchanged."""
    if folder is None:
        return text
    folder = Path(folder)
    return re.sub(rf"(?<![\w/.-]){re.escape(folder.name)}/(?=[\w.-]+:\d)", lambda m: f"{folder}/", text)


def _report(o: Outcome, listed: set) -> None:
    """What went wrong in a run, on stderr: violations, counter mismatches, x_out mismatches, and
    what your kernel did when it failed or hung. Violations are listed for the first repeat of a
    run (kernel and case) that has any, :data:`SHOWN_VIOLATIONS` at most; ``listed`` holds the
    (variant, case) already listed (the FAILED line says in how many repeats they came)."""
    res = o.result if isinstance(o.result, RunResult) else o.baseline
    if res is None:
        if o.run.kernel is not None and o.row.check == ERROR:  # the whole reason: what failed, then the PE's log
            first, _, rest = openable(o.row.reason, o.run.kernel.path).partition("\n")
            print(f"combine-lab: {first}", file=sys.stderr)
            for line in rest.splitlines():
                print(f"  {line}", file=sys.stderr)
        return
    count = getattr(res, "violation_count", 0)
    key = (o.row.variant, o.row.case_id)
    if count and key not in listed:
        listed.add(key)
        # the first report of each kind first (a second bug is not hidden behind the first's many), then
        # the other first reports
        kinds = list(getattr(res, "violation_kinds", []))
        firsts = [example for _, example in kinds]
        shown = (firsts + [v for v in getattr(res, "violations", []) if v not in firsts])[:SHOWN_VIOLATIONS]
        for line in shown:
            print(f"protocol violation: {openable(line, getattr(res, 'kernel_source', None))}", file=sys.stderr)
        if count > len(shown):
            later = f" (repeat {o.repeat + 1}; later repeats' are not listed)" if o.run.repeats > 1 else ""
            kept = "its sidecar keeps" if o.run.perf else "a --perf run's sidecar would keep"  # no files without it
            by_kind = (f" ({len(kinds)} kinds, the first of each listed first: {', '.join(str(n) for n, _ in kinds)} "
                       "reports)" if len(kinds) > 1 else "")
            print(f"protocol violation: ... and {count - len(shown)} more of {count} in this run{by_kind}{later}; "
                  f"{kept} each PE's first reports", file=sys.stderr)
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
                                 parameter="kernel_source", said_as="--kernel-source", value=str(k.path),
                                 allowed="folders of distinct names")
        seen[k.label] = k


@dataclasses.dataclass
class _Plan:
    """Everything :func:`run_variants` settles before anything runs: the timing ``model`` (None: the
    wall clock), your ``kernels``, the lab's ``entries`` (label -> (variant, settings, groups)), the
    ``specs``, ``prof_pe``, the kernel every speed-up is against (``against``), the output folder above
    every kernel's (``base``), per label its ``folders`` and the rule that names its files (``rules``),
    the folders this run writes (``written``: with --perf, the target's refusals left out), ``repeats``,
    the ``trace``, the ``runs`` and the bootstrap address of each launch (``ipport``)."""

    model: object
    kernels: list
    entries: dict
    specs: list[CaseSpec]
    prof_pe: object
    against: str | None
    base: Path
    folders: dict
    rules: dict
    written: dict
    repeats: int
    trace: TraceRecording
    runs: list[Run]
    ipport: object = None  # the next launch's bootstrap address (bootstrap_addresses); None on a model
    notes: list[str] = dataclasses.field(default_factory=list)  # flags taken without effect (_check_run_flags)

    @property
    def caption(self) -> str | None:
        """The model's caption ("modelled on ..."), None on the wall clock."""
        return self.model.caption() if self.model is not None else None


def run_variants(a: argparse.Namespace, variants: list[str]) -> int:
    """Run ``variants`` on every case the flags ``a`` describe, print the table and the files
    written; return the exit status (0 every run passed, 1 a check or counter comparison failed).

    Everything is checked before anything runs (:func:`_plan`); then one :func:`combine_lab.harness.execute`
    runs every case and variant (``--clock model:NAME``: the same runs priced on the model). Without
    ``--perf`` each case is launched once and checked, nothing is written; with it, each variant's
    folder (:func:`variant_dir`: the output dir, or a subfolder per variant when several run; for a
    model ``<output-dir>-model-NAME``) first loses the files an earlier run of that variant left
    (perf CSVs, summary, sidecars, figures, report), then gets this run's; with ``--prof-pe all`` the
    summary CSV follows, and ``-a plot|md`` the figures or tables.

    A variant the target refuses (doubleplane on an NPU with CANN < 9.0.0) gets a REFUSED row and
    its reason on stderr while the others run; when it is the only one asked for, raises
    ``VariantRefused`` (exit 2). With ``--baseline`` the baseline's row follows each case's.
    """
    plan = _plan(a, variants)
    for note in plan.notes:  # said once every flag has passed its check
        print(f"combine-lab: note: {note}", file=sys.stderr)
    run_all = executor(a, max(s.pes for s in plan.specs), DEFAULT_IPPORT)  # --cluster: connected and checked now
    outs = [plan.base, *plan.written.values()] if a.perf else []
    works = [a.work_dir] if a.work_dir is not None else []
    # This run owns its folders while it runs (a second run into them is refused, naming the flag of
    # the folder), and until its tables and figures are written.
    with own_folders(outs, "--output-dir"), own_folders(works, "--work-dir"), plan.trace:
        outcomes = _execute(a, plan, run_all)
        _present(a, plan, outcomes)
    return _exit_status(outcomes, getattr(a, "counters_may_differ", False))


def _plan(a: argparse.Namespace, variants: list[str]) -> _Plan:
    """The flags ``a`` checked and made into runs, before anything is launched or written (each
    refusal a ParameterError naming its flag; VariantRefused when the target refuses everything)."""
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
    entries = group_variants(variants, getattr(a, "settings", None))
    variants = list(entries)
    specs = _specs(a, payload=model is None or bool(kernels), measured=model is None)
    # on a model the slowest PE by default, as suggest prices it (the combine ends when every PE has)
    prof_pe = "all" if model is not None and a.prof_pe is None else _prof_pe(a.prof_pe, specs)
    notes = _check_run_flags(a, specs, modelled=model is not None)
    # --baseline hccl: the all_to_all baseline's row; --baseline NAME: the kernel every speed-up is against
    against = getattr(a, "baseline", None)
    baseline = against == HCCL
    against = None if against in (None, HCCL) else _baseline_name(against, list(entries) + [k.label for k in kernels])
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
    trace = TraceRecording(getattr(a, "trace", None), model)
    trace.check(specs, kernels, a.target, [st for _, st, _ in entries.values()])
    runs = _runs(a, specs, entries, kernels, baseline, trace, clock=model if model is not None else WALL,
                 repeats=repeats, warmup=warmup, loops=loops, prof_pe=prof_pe)
    ipport = None if model is not None else bootstrap_addresses(a.ipport)  # -ipport refused here, not mid-run
    return _Plan(model, kernels, entries, specs, prof_pe, against, base, folders, rules, written, repeats, trace, runs,
                 ipport, notes)


def _execute(a: argparse.Namespace, plan: _Plan, run_all) -> list[Outcome]:
    """Every run of ``plan`` through ``run_all`` (here, or a --cluster's workers), each outcome's
    faults said as it comes; the perf files written into staging folders that replace the earlier
    run's only once every case has run."""
    outcomes: list[Outcome] = []
    removed: dict = {}
    listed: set = set()  # runs whose violations were listed (once, not in every repeat)
    with staged_outputs(plan.written, removed, plan.rules) as stage, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a refusal was said once above; each case shows it as a row
        for o in run_all(plan.runs, progress="model" if plan.model is not None else "combine",
                         ipport=plan.ipport,
                         work_dir=a.work_dir, outputs=stage if a.perf else None):
            if not outcomes and a.target == "cpu" and plan.model is None:  # once something ran (not on a refusal)
                print(_budget_text(plan.specs, a.timeout), file=sys.stderr)
            outcomes.append(o)
            _report(o, listed)
    for variant, gone in removed.items():
        if gone and plan.model is None:
            print(f"combine-lab: replaced an earlier {variant} run's files in {plan.folders[variant]} ({len(gone)} of "
                  "its files, not this run's, removed)", file=sys.stderr)
    return outcomes


def _present(a: argparse.Namespace, plan: _Plan, outcomes: list[Outcome]) -> None:
    """The table, the speed-ups and, with --perf, the run summary, each kernel's summary CSV,
    analysis and file lines, and the figures of every kernel side by side."""
    model, kernels = plan.model, plan.kernels
    several = len(plan.entries) > 1
    tidy, summary, rows = fold_outcomes(outcomes, plan.entries, timed=a.perf or model is not None, perf=a.perf,
                                        modelled=model is not None)
    print(plan.caption if model is not None else _measured_caption(a, plan.repeats))
    if model is not None:
        print("times: CoreMaxTime/us of the " + ("slowest PE (every PE priced, as suggest does)" if plan.prof_pe == "all"
                                                 else f"profiled PE {plan.prof_pe}") + ", modelled, not measured")
    for k in kernels if model is not None else []:
        print(f"{k.label}: priced from the operation stream it recorded in one launch on the twin")
    print(table_text(rows))
    if any(isinstance(r, RepeatedRow) and r.bandwidth for r in rows):
        print(BANDWIDTH_NOTE)
    pairs = print_speedups(summary, tidy, several=several,
                           pairs=bool(kernels or plan.against) and (a.perf or model is not None),
                           against=plan.against, model=model, repeats=plan.repeats)
    plan.trace.write(outcomes)
    if a.perf:
        print(f"run summary: {write_run_summary(plan.base, a, outcomes, summary, rows, plan.caption, pairs)}")
    clock = plan.caption or ("measured on the CPU twin" if a.target == "cpu" else f"measured on {a.target}")
    for label in plan.written:
        _finish_perf(plan.folders[label], plan.rules[label], [s.case_id for s in plan.specs], plan.prof_pe == "all",
                     a.analyse, clock)
    if len(plan.written) > 1:  # every variant in one figure per metric (results/analysis.py)
        from ..results.analysis import comparison_figures
        figures = {k: (plan.folders[k], plan.rules[k]) for k in plan.written}
        for line in comparison_figures(plan.base, figures, a.analyse == "plot", clock):
            print(line)
    if a.perf:  # every kernel's speed-up in one figure per metric (results/analysis.py)
        from ..results.analysis import speedup_figures
        for line in speedup_figures(plan.base, pairs, a.analyse == "plot", clock):
            print(line)


def _base_and_refused(a: argparse.Namespace, entries: dict, kernels: list, model, baseline: bool) -> tuple:
    """(the output folder above every kernel's, label -> why the target refuses it), checked before
    anything runs: a model's run writes to ``<output-dir>-model-NAME`` and refuses --chaos and
    --baseline hccl (they run the kernel); on a target, what it refuses is said on stderr, and when
    it refuses everything asked for, raises VariantRefused (exit 2); --baseline hccl's fix if it cannot."""
    if model is not None:
        for flag, name, given in (("--chaos", "chaos_seed", a.chaos is not None), ("--baseline", "baseline", baseline)):
            if given:
                raise ParameterError(f"{flag}: runs the kernel; --clock model:{model.name} prices it without running",
                                     parameter=name, said_as=flag)
        return Path(f"{a.output_dir}-model-{model.name}"), {}
    refused = {v: why for v, (b, _, _) in entries.items() for why in [refusals(a.target, [b]).get(b)] if why}
    refused.update({k.label: why for k in kernels for why in [refusals(a.target, [k.rule]).get(k.rule)] if why})
    if refused and len(refused) == len(entries) + len(kernels):  # nothing would run: say why, exit 2
        raise VariantRefused(next(iter(refused.values())), parameter="variant", value=next(iter(refused)))
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
    said: dict[tuple, list] = {}  # a run that failed in several repeats is said once, with their count
    for r in [r for r in ran if not passed(r)] + failed:
        said.setdefault((r.variant, r.case_id), []).append(r)
    runs = collections.Counter((o.row.variant, o.row.case_id) for o in outcomes)
    for (variant, case_id), rows in said.items():
        # the counts are the first failing repeat's; the table's violations column sums the repeats: both said
        n = runs[(variant, case_id)]
        times = f" (in {len(rows)} of {n} repeats; the first of them)" if n > 1 else ""
        total = sum(r.violations or 0 for r in rows)
        both = (f"; {total} in the {len(rows)} repeats together, the table's count"
                if len(rows) > 1 and rows[0].violations and total != rows[0].violations else "")
        print(f"combine-lab: FAILED {variant} {case_id}{times}: {_why_failed(rows[0])}{both}", file=sys.stderr)
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
                             f"this command runs: {', '.join(names)}", parameter="baseline", said_as="--baseline",
                             value=text,
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
