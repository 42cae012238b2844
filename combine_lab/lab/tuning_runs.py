"""The tuning state's runs: a Run of the current values (checked before anything launches, then
built and run through :func:`combine_lab.harness.compare`), its result rows and history row, its
verdict and counters, and whether the views of the last Run still describe the inputs (stale).
A mixin of :class:`combine_lab.lab.tuning.TuningState`; no widgets (:mod:`combine_lab.lab.app_runs`
shows it)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from .. import harness
from ..case.case import Case
from ..case.spec import CaseSpec
from ..errors import CaseFileError, ParameterError, ResultFileError, SpecError
from ..planning.capacity import window_geometry
from ..planning.settings import KernelSettings, group_variants, variant_label
from ..results.rows import REFUSED, NotRun, ResultRow, result_row
from ..results.tables import compare_over_repeats
from ..run import build as build_mod
from ..run.launch import LaunchError
from . import plots
from .form import FIELDS, format_bytes
from .history import HISTORY_COLUMNS, ROWS_COLUMNS
from ..kernels import CLASSIC, DOUBLEPLANE

__all__ = ["RunRequest", "RUN_ERRORS", "RUN_VIEWS", "RunsState"]

#: The views of the last Run that go stale when the inputs change.
RUN_VIEWS = ("verdict", "counters", "compare")

#: Errors a run can end with that are shown as a message (anything else is a bug: it raises).
RUN_ERRORS = (SpecError, ParameterError, CaseFileError, ResultFileError, build_mod.BuildError, LaunchError, OSError,
              ValueError)

_VARIANT_NAME = {CLASSIC: "classic (MTE only)", DOUBLEPLANE: "doubleplane (MTE + SDMA)"}


@dataclass(frozen=True)
class RunRequest:
    """What one Run will do, fixed when it was asked for: the case (its drawn routing), the
    values, ``prof_pe`` ("all" or 0), ``launches``: launches of all PEs (one per variant and
    profiled PE, each ``warmup + loops`` kernel launches: what the progress bar counts),
    ``kernel_launches`` (their total) and the kernel ``settings`` (docs/variants.md)."""

    case: Case
    values: dict
    prof_pe: Any
    launches: int
    kernel_launches: int = 0
    settings: KernelSettings = KernelSettings()


class RunsState:
    """The runs of :class:`~combine_lab.lab.tuning.TuningState`: prepare, execute, finish or fail
    a Run; its verdict, counters and staleness (the state's ``history``, ``rows``, ``last_runs``)."""

    def run_bytes(self, spec: CaseSpec) -> int:
        """Bytes a Run of ``spec`` needs on disk and in windows (estimate, see ``max_run_bytes``)."""
        rows = spec.pes * spec.bs * spec.topk + 2 * spec.pes * spec.bs
        return rows * spec.row_bytes + spec.pes * window_geometry(spec)["window_bytes"]

    def run_refusal(self) -> str:
        """Why Run would launch nothing for the current values ('' when it would run), said before
        any click: a Run goes on, a value cannot be used, or the case is over ``max_run_bytes``."""
        if self.running:
            return "a Run goes on: wait for its results"
        if self.plan is None or self.spec is None:
            # "marked above" only for what a control marks: a limit of the whole shape is no one value's
            marked = [p for p in self.problems if p.name != "case"]
            shape = [p for p in self.problems if p.name == "case"]
            parts = []
            if marked:
                n = len(marked)
                parts.append(f"{n} value{'s' if n != 1 else ''} cannot be used (marked above): "
                             + "; ".join(map(str, marked)))
            if shape:
                parts.append("the case cannot be planned here: " + "; ".join(map(str, shape)))
            return "; ".join(parts) if parts else "the values cannot be planned"
        need = self.run_bytes(self.spec)
        if need > self.max_run_bytes:
            return (f"this case needs about {format_bytes(need)} of case files and windows, over the app's limit of "
                    f"{format_bytes(self.max_run_bytes)}: lower pes, bs or h")
        return ""

    def prepare_run(self) -> RunRequest | None:
        """The Run of the current values, checked; launches nothing. None (``message`` and
        :meth:`run_refusal` say why) when a Run goes on, the values cannot be planned or the case
        is over ``max_run_bytes``."""
        if self.running:
            return None
        if self.refresh() is None or self.spec is None:
            return None
        why = self.run_refusal()
        if why:
            self.message = f"Not run: {why}. Nothing was launched."
            return None
        spec, v = self.spec, self.run_inputs()
        prof_pe = "all" if spec.pes <= self.prof_all_max_pes else 0
        launches = 2 * (spec.pes if prof_pe == "all" else 1) * v["repeats"]
        return RunRequest(Case(spec, self._case.expert_ids, self._case.expert_scales), v, prof_pe, launches,
                          launches * (v["warmup"] + v["loops"]), self.settings)

    @staticmethod
    def progress_steps(request: RunRequest) -> int:
        """How many steps :meth:`execute` tells ``progress`` of: the build, each launch of all PEs, the check."""
        return request.launches + 2

    def execute(self, request: RunRequest, progress: Callable[[int, int, str], None] | None = None):
        """Build the target if needed and run classic and doubleplane on the request's case, with
        its kernel settings (classic without the segment layout; results keyed by their labels,
        ``classic-c4``, ``doubleplane-segment-c4``):
        the one place that launches anything (:func:`combine_lab.harness.compare`). Changes
        no state and reads only ``request``, so a view may call it from another thread while the
        inputs change. ``progress(done, total, text)`` is told after the build, after each launch
        of all PEs (``request.launches`` of them: one per variant and profiled PE) and at the
        check; ``total`` is :meth:`progress_steps`. Returns the Comparison; raises what the build
        or the run raise (:data:`RUN_ERRORS`)."""
        say = progress or (lambda done, total, text: None)
        v, total = request.values, self.progress_steps(request)
        pes = request.case.spec.pes
        say(0, total, f"building target {v['target']} (if needed)...")
        build_mod.build(v["target"])
        done = [1]
        profiled = pes if request.prof_pe == "all" else 1
        # one "start" runs every PE once; the count says what it multiplies (issue 32: "launch 5 of 48
        # (8 PEs)" read as 48 kernel launches)
        why = (f"2 variants x {v['repeats']} repeat{'s' if v['repeats'] != 1 else ''}"
               + (f" x {profiled} profiled PEs" if profiled > 1 else ""))
        each = f"all {pes} PEs, {v['warmup'] + v['loops']} kernel launches each"
        say(1, total, f"start 1 of {request.launches} of the PEs ({why}; {each})...")

        def launched(_pe: int) -> None:
            done[0] += 1
            n = done[0] - 1
            text = (f"start {n + 1} of {request.launches} of the PEs ({why}; {each})..." if n < request.launches
                    else "checking x_out and counters...")
            say(min(done[0], total - 1), total, text)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a refusal is recorded as a row with its reason, not a warning
            runs = harness.compare(request.case, warmup=v["warmup"], loops=v["loops"], target=v["target"],
                                  min_sdma_bytes=v["min_sdma_bytes"], prof_pe=request.prof_pe, repeats=v["repeats"],
                                  timeout_s=self.timeout_s, on_launch=launched, settings=request.settings)
        failed = getattr(runs, "failed", {})
        if failed:  # a variant's PE failed: the Run fails with each one's whole reason (the twin's, then its log)
            raise LaunchError("\n".join(f"{label}: {why}" for label, why in failed.items()))
        say(total - 1, total, "checking x_out and counters...")
        return runs

    def run(self, progress: Callable[[int, str], None] | None = None):
        """Build if needed, run classic and doubleplane on the target, check, record.

        Returns the :class:`~combine_lab.harness.Comparison` (``{CLASSIC: RunResult,
        DOUBLEPLANE: RunResult}``; a variant the target refuses is left out, with its reason in
        ``.refused``, and recorded as a REFUSED row), or None when the values are invalid, the case
        is too large for ``max_run_bytes``, a Run goes on, or the run failed: then ``message``
        says why and (but for the last) nothing was launched. ``progress``: see :meth:`execute`.
        """
        request = self.prepare_run()
        if request is None:
            return None
        self.running = True
        try:
            try:
                runs = self.execute(request, progress)
            except RUN_ERRORS as e:
                self.fail_run(request, e)
                return None
            self.finish_run(request, runs)
            return runs
        finally:
            self.running = False

    def fail_run(self, request: RunRequest, error: BaseException) -> None:
        """Record that ``request``'s Run failed: ``message``, ``run_error``; nothing of the Run
        before it describes these inputs any more (its verdict, counters and comparison are cleared)."""
        self.run_error = f"{type(error).__name__}: {error}"  # whole: a failed PE's reason, then its log
        self.message = f"Run failed: {self.run_error.splitlines()[0] if self.run_error else ''}"
        self.run_values, self._run_rows, self._run_figure, self.last_runs = None, [], None, None
        self.figures.pop("compare")
        self._sync_run_views()

    @staticmethod
    def _result_rows(runs, request: RunRequest) -> list[ResultRow]:
        """The run's rows, in variant order: one per RunResult, one per refused variant (of the
        request's case: the inputs may have changed while it ran), each in the request's settings group."""
        refused, v, group = getattr(runs, "refused", {}), request.values, request.settings.label
        rows = []
        for variant, st, _ in group_variants([CLASSIC, DOUBLEPLANE], [group]).values():
            label = variant_label(variant, st)
            if label in runs:
                rows.append(result_row(runs[label], group))
            elif label in refused:
                rows.append(result_row(NotRun.of(request.case.spec, label, v["target"], REFUSED, refused[label],
                                                 v["min_sdma_bytes"], settings=group,
                                                 cores_per_rank=st.cores_per_rank)))
        return rows

    @staticmethod
    def _over_repeats(runs, rows: list[ResultRow]) -> dict:
        """The history's comparison of a Run: the one fold of repeats
        (:func:`combine_lab.results.tables.compare_over_repeats`) of its rows and every repeat's tidy rows."""
        return compare_over_repeats(rows, runs.tidy() if getattr(runs, "outcomes", []) else None)

    def finish_run(self, request: RunRequest, runs) -> None:
        """Record ``request``'s completed Run: result rows, a history row, the verdict, counters
        and comparison (current while the inputs stay those it ran with)."""
        v = request.values
        rows = self._result_rows(runs, request)
        number = len(self.history) + 1
        self.last_runs = runs
        self.run_error = None
        self._run_rows = rows
        self._run_figure = plots.compare_per_pe(runs)
        self._rows_data.extend({"run": number, **r.as_dict()} for r in rows)
        self.rows = pd.DataFrame(self._rows_data, columns=ROWS_COLUMNS)
        first = rows[0]
        self._history_rows.append({"run": number, "case_id": first.case_id, "routing": first.routing,
                                   "dtype": first.dtype, "target": first.target,
                                   "min_sdma_bytes": v["min_sdma_bytes"], "settings": request.settings.label,
                                   "warmup": v["warmup"], "loops": v["loops"],
                                   "repeats": v["repeats"], **self._over_repeats(runs, rows)})
        self.history = pd.DataFrame(self._history_rows, columns=HISTORY_COLUMNS)
        self.run_values = dict(v)
        history = self.history
        self.figures.set("history", lambda: plots.history_plot(history))
        self._sync_run_views()

    def verdict(self) -> dict | None:
        """The last completed Run's verdict, or None: run (its number), case_id, routing, target, and
        settings (the Run's settings label), and ``variants``: per variant its label (``variant``:
        ``doubleplane-segment-c4``), ``combine`` (classic or doubleplane), name, check (PASS, FAIL, REFUSED),
        reason (of a refusal), bad_pes (PEs whose x_out differs from golden) and mismatches (counters
        that differ from the plan)."""
        if self.run_values is None or not self._run_rows:
            return None
        runs, out = self.last_runs, []
        for row in self._run_rows:
            res = runs.get(row.variant)
            base = row.variant.split("-")[0]
            name = _VARIANT_NAME[base] + ("" if row.variant == base else f", {row.variant.removeprefix(base + '-')}")
            item = {"variant": row.variant, "combine": base, "name": name, "check": row.check,
                    "reason": row.reason, "bad_pes": [], "mismatches": []}
            if res is not None:
                item["bad_pes"] = [r for r, chk in enumerate(res.checks) if not chk.ok]
                item["mismatches"] = list(res.counter_mismatches())
            out.append(item)
        first = self._run_rows[0]
        return {"run": len(self.history), "case_id": first.case_id, "routing": first.routing,
                "target": first.target, "settings": first.settings, "variants": out}

    def counters(self) -> pd.DataFrame | None:
        """Per-plane counters of the last completed Run's last launch, one row per variant and PE
        (variant, pe, mte_bytes, sdma_bytes, mte_puts, sdma_puts, status_writes), empty on a target
        without them; None without a Run."""
        if self.run_values is None or self.last_runs is None:
            return None
        frames = []
        for res in self.last_runs.values():
            pb = res.plane_bytes()
            if len(pb):
                frames.append(pb.reset_index().assign(variant=res.label))
        cols = ["variant", "pe", "mte_bytes", "sdma_bytes", "mte_puts", "sdma_puts", "status_writes"]
        return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)

    # ------------------------------------------------------------------ staleness
    def changed_since_run(self) -> list[str]:
        """The values changed since the Run the run views show ([] without one)."""
        if self.run_values is None:
            return []
        return [k for k, v in self.run_inputs().items() if self.run_values.get(k) != v]

    @property
    def stale_views(self) -> list[str]:
        """The run views (:data:`RUN_VIEWS`) that no longer describe the inputs: the inputs changed
        since the Run they show, or the current ones cannot be planned. [] without a Run."""
        if self.run_values is None:
            return []
        if self.plan is not None and not self.changed_since_run():
            return []
        return list(RUN_VIEWS)

    def stale_reason(self) -> str:
        """Why the run views are stale, for the page ('' when they are not)."""
        if not self.stale_views:
            return ""
        if self.plan is None:
            return "the inputs cannot be planned"
        return "changed since: " + ", ".join(FIELDS[n].shown for n in self.changed_since_run())

    def _sync_run_views(self) -> None:
        """The comparison is a current figure only while the inputs are those it ran with."""
        if self.run_values is not None and not self.stale_views and self._run_figure is not None:
            self.figures.put("compare", self._run_figure)
        else:
            self.figures.pop("compare")

    @property
    def compare_figure(self):
        """The last completed Run's comparison (matplotlib Figure), current or stale; None without one."""
        return self._run_figure if self.run_values is not None else None
