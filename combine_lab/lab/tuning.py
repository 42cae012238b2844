"""The tuning app's state, without widgets: the values a kernel engineer sets, what they plan to,
the modelled time, the runs and their history, and the figure of each view.

    from combine_lab.lab.tuning import TuningState
    s = TuningState(targets=["cpu"], pes=2, bs=64, h=8192, topk=2, expert_per_pe=2,
                    routing_model="hot-expert", skew=0.5, warmup=0, loops=1)
    s.plan                 # the doubleplane Plan of the current values (None when they are invalid)
    s.set(topk=9, loops=0) # every problem at once: s.problems, s.message; nothing is planned
    s.set(topk=2, loops=1)
    s.suggest()            # the modelled time at every floor where the plan changes, the best named
    s.run()                # classic and doubleplane on the twin (harness.compare), rows and history
    s.figures["segment_map"].png()   # the drawing the app shows, as PNG

:class:`combine_lab.lab.app.TuningApp` is a thin view over it (ipywidgets): every number, table,
verdict and figure the app shows comes from here, so this module imports neither ipywidgets nor
IPython and can be driven, and tested, without them (``pip install -e .[test]`` without the lab
extra). Nothing here raises for a bad value a person typed: :meth:`TuningState.set` stores values
as given, never clamped or rounded, and :attr:`TuningState.problems` lists every one that cannot be
used, each with its reason.

Changing a value replans at once and runs nothing: the routing is drawn with
:func:`combine_lab.case.case.make_case` (never x: the plan path does not touch ``case.x``) and
planned with :func:`combine_lab.planning.planner.plan_counts`; values that only change bytes
(h, dtype for skewed routings, min_sdma_bytes) reuse the drawn routing.

**Modelled time** (:mod:`combine_lab.model`): at every replan, the modelled ``comm_only`` of the
slowest PE for classic and for the current floor on the chosen machine (``a2``/``a3``); the curve
over every floor where the plan changes (:func:`combine_lab.model.suggest.suggest`) at each replan
for small cases (:data:`AUTO_SUGGEST_SEGMENTS`) and by :meth:`TuningState.suggest` for large ones.

**Run**: :meth:`TuningState.run` = :meth:`~TuningState.prepare_run` (checks; launches nothing),
:meth:`~TuningState.execute` (build, then :func:`combine_lab.harness.compare`: the one place
that launches anything, to be swapped for another harness) and :meth:`~TuningState.finish_run` /
:meth:`~TuningState.fail_run` (rows, history, verdict). ``execute`` touches no state, so a later
view may run it off the kernel's main thread.

What the views show always describes the current inputs, or says it does not: a failed plan
clears the plan views and the modelled panel; a failed Run clears the verdict, counters and
comparison; while the inputs differ from those of the last Run its verdict, counters and
comparison are stale (:attr:`TuningState.stale_views`) and :meth:`TuningState.save_figures`
leaves the comparison out.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..case.case import Case, make_case
from ..case.routing import parse_routing
from ..case.spec import CaseSpec
from ..case.traces import list_traces
from ..errors import ParameterError, SpecError
from ..model.machines import NpuModel
from ..model.stream import CaseRows
from ..model.suggest import Suggestion
from ..planning.cores import MAX_SDMA_BLOCKS, TWIN_DEFAULT_SOC, aiv_cores
from ..planning.planner import Plan, plan_counts
from ..planning.settings import KernelSettings
from ..results.rows import ResultRow
from ..run.capabilities import detect
from . import plots
from .form import (_CASE_FIELDS, FIELDS, MODELS, ROUTING_MODELS, RUN_INPUTS, Field, Problem, _is_int, default_trace,
                   format_bytes, routing_string)
from .history import HISTORY_COLUMNS, ROWS_COLUMNS
from .tuning_model import AUTO_SUGGEST_SEGMENTS, FloorChoice, ModelledState, floor_choice
from .tuning_runs import RUN_ERRORS, RUN_VIEWS, RunRequest, RunsState
from ..kernels import DOUBLEPLANE

__all__ = ["TuningState", "Field", "Problem", "RunRequest", "FloorChoice", "floor_choice", "FIELDS", "ROUTING_MODELS", "MODELS", "RUN_INPUTS",
           "HISTORY_COLUMNS", "ROWS_COLUMNS", "VIEWS", "RUN_VIEWS", "RUN_ERRORS", "AUTO_SUGGEST_SEGMENTS",
           "routing_string", "format_bytes", "default_trace"]

#: The views, in the order the app shows them: the plan's (segment map, plane bytes), the
#: modelled time over floors, the last Run's comparison and the history of Runs.
VIEWS = ("segment_map", "plane_bytes", "modelled", "compare", "history")


class _Figures(Mapping):
    """The figure of each current view, made the first time it is asked for (a replan never pays
    for a drawing nobody looks at) and kept until its view changes."""

    def __init__(self):
        self._make: dict[str, Callable[[], Any]] = {}
        self._made: dict[str, Any] = {}

    def set(self, name: str, make: Callable[[], Any]) -> None:
        self._make[name] = make
        self._made.pop(name, None)

    def put(self, name: str, fig) -> None:
        self._make[name] = lambda: fig
        self._made[name] = fig

    def pop(self, name: str, default=None):
        self._make.pop(name, None)
        return self._made.pop(name, default)

    def made(self, name: str) -> bool:
        """Whether the figure of ``name`` has been drawn since its view last changed."""
        return name in self._made

    def __getitem__(self, name: str):
        if name not in self._made:
            self._made[name] = self._make[name]()
        return self._made[name]

    def __iter__(self):
        return iter([n for n in VIEWS if n in self._make])

    def __len__(self) -> int:
        return len(self._make)


class TuningState(ModelledState, RunsState):
    """The values, plan, modelled time, runs and history of the tuning app, without widgets.

    Args:
        targets: targets Run may use; default ``capabilities.detect().targets()`` ('cpu', plus
            'npu' where it can run).
        max_uniform_x_bytes: uniform routing draws x with it (the reference recipe,
            docs/protocol.md#3-reference-data-and-the-check); above this many bytes of x (pes*bs*h*sizeof(T)) the case
            is not planned, with the reason in :attr:`problems`. Skewed routings never draw x to plan.
        max_run_bytes: a Run is refused when the case files plus windows would exceed this many
            bytes (estimate: (pes*bs*topk + 2*pes*bs) rows of h*sizeof(T) plus the windows).
        prof_all_max_pes: up to this many PEs every PE is profiled (per-PE times); above it PE 0 only.
        timeout_s: limit per launch of all PEs, seconds.
        **values: starting values (names of :data:`FIELDS`); the others take their defaults.

    Raises ParameterError for a name that is not a value (a programming error, not a value typed).

    Attributes:
        targets, traces: the options of ``target`` and ``trace`` here.
        spec: the CaseSpec of the current values, or None when they cannot be planned.
        plan: the doubleplane :class:`~combine_lab.planning.planner.Plan`, or None.
        problems: every :class:`Problem` of the current values ([] when they plan).
        sdma_table: DataFrame of the SDMA segments (pe, segment, local_expert, src_rank,
            token_count, bytes), as in ``plan.segments``.
        modelled: the modelled comm_only of the current inputs ({} without a plan): model,
            caption, floor, classic_us, doubleplane_us (the slowest PE's CoreMaxTime, us),
            speedup (classic / doubleplane), curve (True when the curve over floors is current).
        suggestion: the :class:`~combine_lab.model.suggest.Suggestion` of the current inputs, or None;
            suggest_seconds: how long the last :meth:`suggest` took (s).
        message: the text to show ('' when none): the problems, or why a Run or Suggest did nothing.
        history: DataFrame (:data:`HISTORY_COLUMNS`), one row per completed Run.
        rows: DataFrame (:data:`ROWS_COLUMNS`), one result row per variant of every completed Run.
        last_runs: the :class:`~combine_lab.harness.Comparison` of the last Run, or None.
        run_values: the values of the Run the run views show, or None (none, or it failed).
        run_error: "<Error>: <message>" of the last Run when it failed, else None.
        running: True while a Run goes on.
        figures: the figure of each view that describes the current inputs (:data:`VIEWS`; a
            stale one is not in it), made when first asked for: SVG drawings
            (:class:`combine_lab.lab.svg.SvgFigure`) for the plan and modelled views,
            matplotlib Figures for compare and history.
        replans: how many times the values were planned; plan_seconds: the last one's time (s).
        figure_width: the plan and modelled figures' width, CSS pixels (:meth:`set_figure_width`).
    """

    def __init__(self, targets: list[str] | None = None, *, max_uniform_x_bytes: int = 256 * 2 ** 20,
                 max_run_bytes: int = 2 * 2 ** 30, prof_all_max_pes: int = 8, timeout_s: float = 120.0,
                 **values: Any):
        self.targets = list(targets) if targets is not None else detect().targets()
        if not self.targets:
            self.targets = ["cpu"]
        self.traces = [t.removeprefix("trace:") for t in list_traces()]
        self.max_uniform_x_bytes = max_uniform_x_bytes
        self.max_run_bytes = max_run_bytes
        self.prof_all_max_pes = prof_all_max_pes
        self.timeout_s = timeout_s
        self._values = {n: f.default for n, f in FIELDS.items()}
        self._values["trace"] = default_trace(self.traces)
        self._values["target"] = self.targets[0]
        self._npu_soc: str | None = None
        self.spec: CaseSpec | None = None
        self.plan: Plan | None = None
        self.problems: list[Problem] = []
        self.sdma_table = pd.DataFrame(columns=["pe", "segment", "local_expert", "src_rank", "token_count", "bytes"])
        self.message = ""
        self.modelled: dict = {}
        self.suggestion: Suggestion | None = None
        self.suggest_seconds = float("nan")
        self._suggestion_key = None
        self.history = pd.DataFrame(columns=HISTORY_COLUMNS)
        self._history_rows: list[dict] = []
        self.rows = pd.DataFrame(columns=ROWS_COLUMNS)
        self._rows_data: list[dict] = []
        self.last_runs = None
        self.run_values: dict | None = None
        self.run_error: str | None = None
        self._run_rows: list[ResultRow] = []
        self._run_figure = None
        self.running = False
        self.figures = _Figures()
        self.figure_width = plots.WIDTH
        self.replans = 0
        self.plan_seconds = float("nan")
        self._case_key = None
        self._case: Case | None = None
        self._rows_key = None
        self._rows: CaseRows | None = None
        self._models: dict[str, NpuModel] = {}
        self._classic_cache: dict = {}
        self.set(**values)

    # ------------------------------------------------------------------ values
    def values(self) -> dict:
        """The current values by name (:data:`FIELDS`), as set: never clamped or rounded."""
        return dict(self._values)

    def run_inputs(self) -> dict:
        """The values a Run depends on (:data:`RUN_INPUTS`)."""
        return {k: self._values[k] for k in RUN_INPUTS}

    def options(self, name: str) -> tuple | None:
        """The values ``name`` may take when it is a choice (targets and traces as found here), else None."""
        if name == "target":
            return tuple(self.targets)
        if name == "trace":
            return tuple(self.traces)
        return FIELDS[name].options

    def set(self, **values: Any) -> Plan | None:
        """Set several values at once, then replan once (:meth:`refresh`); returns the Plan or None.

        A new ``routing_model`` resets ``skew`` to that model's default unless ``skew`` is given
        too. Raises ParameterError for an unknown name; a bad value raises nothing: it is kept as
        given and reported in :attr:`problems` and :attr:`message`.
        """
        unknown = set(values) - set(FIELDS)
        if unknown:
            raise ParameterError(f"unknown values {sorted(unknown)}; known: {sorted(FIELDS)}", parameter="values",
                                 value=sorted(unknown), allowed=str(sorted(FIELDS)))
        model = values.get("routing_model", self._values["routing_model"])
        if model != self._values["routing_model"] and "skew" not in values:
            param = ROUTING_MODELS.get(model) if isinstance(model, str) else None
            if param is not None:
                values = {**values, "skew": param[1]}
        self._values.update(values)
        return self.refresh()

    def soc(self) -> str:
        """The SoC whose AIV cores bound ``cores_per_rank``: the twin's (``COMBINE_TWIN_SOC``, default
        :data:`~combine_lab.planning.cores.TWIN_DEFAULT_SOC`) on cpu, the NPU's (``COMBINE_NPU_SOC`` or the
        one found) on npu, the twin's where none is known."""
        if self._values.get("target") == "npu":
            if self._npu_soc is None:  # found once: npu-smi is slow
                caps = detect()
                self._npu_soc = os.environ.get("COMBINE_NPU_SOC") or (caps.npus.soc if caps.npus else "") or ""
            try:
                aiv_cores(self._npu_soc)
                return self._npu_soc
            except ValueError:
                pass
        return os.environ.get("COMBINE_TWIN_SOC") or TWIN_DEFAULT_SOC

    def cores_limit(self) -> int:
        """The most cores per source rank allowed here: min(AIV cores of :meth:`soc`, 48)
        (docs/variants.md#4-limits)."""
        return min(aiv_cores(self.soc()), MAX_SDMA_BLOCKS)

    def _cores_reason(self) -> str:
        soc = self.soc()
        return (f"must be <= {self.cores_limit()} cores (the {aiv_cores(soc)} AIV cores of {soc}; at most "
                f"{MAX_SDMA_BLOCKS} cores issue SDMA)")

    @property
    def settings(self) -> KernelSettings | None:
        """The kernel settings of the current values (docs/variants.md), or None while ``segment`` or
        ``cores_per_rank`` cannot be used. Doubleplane runs with them, classic without the segment
        layout (classic sends nothing by SDMA)."""
        seg, cpr = self._values["segment"], self._values["cores_per_rank"]
        if seg not in (False, True) or not _is_int(cpr) or not 1 <= cpr <= self.cores_limit():
            return None
        return KernelSettings(segment=bool(seg), cores_per_rank=int(cpr))

    def skew_name(self) -> str | None:
        """What ``skew`` means for the current routing model ("S", "F"), or None when it takes none."""
        param = ROUTING_MODELS.get(self._values["routing_model"]) if isinstance(self._values["routing_model"], str) \
            else None
        return param[0] if param else None

    def check(self) -> tuple[CaseSpec | None, list[Problem]]:
        """Every problem of the current values, all at once, and the CaseSpec when there is none.

        First each value alone (:meth:`Field.check`: type, bounds, step, options), then, when the
        case's own values pass, what only the whole case can say (the routing's limits for this
        shape, :class:`~combine_lab.case.spec.CaseSpec`) and the uniform routing's size limit.
        Nothing is changed, nothing raises."""
        v = self._values
        problems: list[Problem] = []
        for name, f in FIELDS.items():
            if name == "skew" and self.skew_name() is None:
                continue  # the routing takes no number: whatever the box holds is not used
            if name == "trace" and v["routing_model"] != "trace":
                continue
            problems += f.check(v[name], self.options(name))
        cpr = v["cores_per_rank"]
        if _is_int(cpr) and cpr >= 1 and cpr > self.cores_limit():
            problems.append(Problem("cores_per_rank", cpr, self._cores_reason()))
        bad = {p.name for p in problems}
        if bad & {"pes", "topk", "expert_per_pe", "routing_model", "skew", "trace"}:
            return None, problems  # what the routing's limits are checked against is itself wrong
        # bs, h, dtype and seed play no part in the routing's limits: a bad one is stood in for
        # by a valid value, so that a limit of the routing (topk=9 at 4 experts) is said with it
        stand_in = {"bs": 1, "h": 1, "dtype": "int32_t", "seed": 0}
        c = {k: (stand_in[k] if k in bad else v[k]) for k in _CASE_FIELDS}
        try:
            routing = routing_string(v["routing_model"], v["skew"], v["trace"])
            spec = CaseSpec(pes=int(c["pes"]), bs=int(c["bs"]), h=int(c["h"]), topk=int(c["topk"]),
                            expert_per_pe=int(c["expert_per_pe"]), dtype=c["dtype"], seed=int(c["seed"]),
                            routing=routing)
        except SpecError as e:
            return None, problems + [Problem(*self._blame(e))]
        if bad & set(_CASE_FIELDS):
            return None, problems
        if parse_routing(spec.routing).name == "uniform":
            x_bytes = spec.pes * spec.bs * spec.row_bytes
            if x_bytes > self.max_uniform_x_bytes:
                problems.append(Problem(
                    "case", None,
                    f"routing 'uniform' follows the reference recipe, which draws x before the routing: "
                    f"{format_bytes(x_bytes)} of x at this shape, over the limit of "
                    f"{format_bytes(self.max_uniform_x_bytes)}; pick a skewed routing (it never draws x to plan) "
                    f"or a smaller shape"))
        return (None if problems else spec), problems

    def _blame(self, e: SpecError) -> tuple[str, Any, str]:
        """(name, value, reason) of a SpecError of the whole case, from its fields: the field it
        names (``e.parameter``) when that is one of ours, the routing's own field for ``routing``
        (its skew, trace or model), else "case" with the message as it is; the reason is what the
        error says is allowed (``e.allowed``), else its message."""
        reason = e.allowed if e.allowed is not None else str(e)
        if e.parameter == "routing":
            name = {"trace": "trace", "uniform": "routing_model", "deepseek": "routing_model"}.get(
                self._values["routing_model"], "skew")
            return name, self._values[name], reason
        if e.parameter in FIELDS and e.allowed is not None:
            return e.parameter, self._values[e.parameter], reason
        return "case", None, str(e)

    def _case_for(self, spec: CaseSpec) -> Case:
        """The drawn routing for ``spec``, reused while only bytes per row change (skewed routings
        draw their routing independently of h and dtype, uniform does not)."""
        uniform = parse_routing(spec.routing).name == "uniform"
        key = (spec.pes, spec.bs, spec.topk, spec.expert_per_pe, spec.routing, spec.seed, spec.masked_fraction,
               spec.dtype, spec.h if uniform else None)
        if key != self._case_key:
            self._case, self._case_key = make_case(spec), key
        return self._case

    @property
    def case(self) -> Case | None:
        """The drawn routing of the current values (expert_ids, expert_scales; x is never drawn
        to plan), or None when they cannot be planned."""
        return self._case if self.plan is not None else None

    def refresh(self) -> Plan | None:
        """Check the values, replan, remodel; runs nothing. Returns the new Plan, or None with
        :attr:`problems` and :attr:`message` saying why (then the plan and modelled views are cleared)."""
        t0 = time.perf_counter()
        self.plan, self.spec = None, None
        self.sdma_table = self.sdma_table.iloc[0:0]
        spec, self.problems = self.check()
        if spec is None:
            self.message = "Cannot plan this case: " + "; ".join(map(str, self.problems)) + ". Nothing was run."
            for name in ("segment_map", "plane_bytes", "modelled"):  # they showed other inputs: never saved as these
                self.figures.pop(name)
            self._clear_modelled()
            self._sync_run_views()
            return None
        case = self._case_for(spec)
        p = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, DOUBLEPLANE, int(self._values["min_sdma_bytes"]),
                        self.settings)
        self.spec, self.plan = spec, p
        self.message = ""
        seg = p.segments
        self.sdma_table = seg.loc[seg["plane"] == "SDMA", ["pe", "segment", "local_expert", "src_rank",
                                                           "token_count", "bytes"]].reset_index(drop=True)
        self._set_plan_figures()
        self._update_modelled()
        self._sync_run_views()
        self.replans += 1
        self.plan_seconds = time.perf_counter() - t0
        return p

    def _set_plan_figures(self) -> None:
        p, dtype, w = self.plan, self.spec.dtype, self.figure_width
        self.figures.set("segment_map", lambda: plots.segment_map(p, dtype=dtype, width=w))
        self.figures.set("plane_bytes", lambda: plots.plane_bytes_plot(p, width=w))

    def set_figure_width(self, width: int) -> bool:
        """Draw the plan and modelled figures ``width`` CSS pixels wide from now on (the width the
        page has for them; kept within 480-2400). Returns whether anything is to be redrawn."""
        w = int(min(max(int(width), 480), 2400))
        if w == self.figure_width:
            return False
        self.figure_width = w
        if self.plan is not None:
            self._set_plan_figures()
            if self.modelled and not self.modelled.get("refused") and not self.modelled.get("not_modelled"):
                self._set_modelled_figure()
        return True

    # ------------------------------------------------------------------ kept across a page reload
    def snapshot(self) -> dict:
        """The values and the history as plain JSON data (what a page keeps across a reload):
        ``{"values": ..., "history": [...], "rows": [...]}``. The last Run's results (x_out,
        counters) are not in it: after :meth:`restore` the history is there, the verdict is not."""
        def plain(v):
            if isinstance(v, (np.integer,)):
                return int(v)
            if isinstance(v, (np.floating, float)):
                return float(v) if math.isfinite(float(v)) else None
            if isinstance(v, (np.bool_,)):
                return bool(v)
            return v
        return {"values": {k: plain(v) for k, v in self._values.items()},
                "history": [{k: plain(v) for k, v in r.items()} for r in self._history_rows],
                "rows": [{k: plain(v) for k, v in r.items()} for r in self._rows_data]}

    def restore(self, data: Mapping) -> list[str]:
        """Take back a :meth:`snapshot`: its values (names this state does not know are left out
        and returned) and its history; replans once. Nothing is launched; a bad value comes back
        as it was, marked in :attr:`problems` like any other."""
        values = dict(data.get("values") or {})
        unknown = sorted(set(values) - set(FIELDS))
        for k in unknown:
            values.pop(k)
        if data.get("history"):
            nan = float("nan")
            self._history_rows = [{k: (nan if v is None else v) for k, v in r.items()} for r in data["history"]]
            self._rows_data = [{k: (nan if v is None else v) for k, v in r.items()} for r in data.get("rows") or []]
            self.history = pd.DataFrame(self._history_rows, columns=HISTORY_COLUMNS)
            self.rows = pd.DataFrame(self._rows_data, columns=ROWS_COLUMNS)
            history = self.history
            self.figures.set("history", lambda: plots.history_plot(history))
        if "skew" not in values and "routing_model" in values:
            values["skew"] = self._values["skew"]  # as kept, not the model's default
        self.set(**values)
        return unknown

    # ------------------------------------------------------------------ output
    def save_figures(self, out_dir, prefix: str = "tuning_") -> list[Path]:
        """Save the figures that describe the current inputs (:attr:`figures`) as
        ``<out_dir>/<prefix><view>.png``; returns the paths. A stale view (a plan that failed, a
        comparison from a Run with other inputs or one that failed) is not saved, and a file this
        method saved for it before is removed, so that the folder never holds it as current.
        Raises OSError when the folder cannot be written."""
        for name in VIEWS:
            if name not in self.figures:
                Path(out_dir, f"{prefix}{name}.png").unlink(missing_ok=True)
        return [plots.save_figure(self.figures[name], out_dir, f"{prefix}{name}") for name in self.figures]
