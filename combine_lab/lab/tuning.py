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

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..case.case import Case, make_case
from ..case.routing import parse_routing
from ..case.spec import DTYPES, CaseSpec
from ..case.traces import list_traces
from .. import harness
from ..errors import CaseFileError, ParameterError, ResultFileError, SpecError
from ..model.machines import NpuModel, load_model
from ..model.replay import settings_args, stage1
from ..model.stream import CaseRows, case_rows
from ..model.suggest import NEVER, Suggestion
from ..model.suggest import suggest as model_suggest
from ..model.unknowns import engines_curve, engines_line
from ..planning.capacity import window_geometry
from ..planning.cores import MAX_SDMA_BLOCKS, TWIN_DEFAULT_SOC, aiv_cores
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, Plan, plan_counts
from ..planning.settings import REFERENCE, KernelSettings, group_variants, variant_label
from .pricing import NotModelled, not_modelled_text, priced
from ..results.rows import (COMPARISON_COLUMNS, FAIL, METRICS, PASS, REFUSED, ROW_COLUMNS, NotRun, ResultRow,
                            compare_rows, result_row)
from ..results.tables import summarize
from ..run import build as build_mod
from ..run.capabilities import detect
from ..run.launch import LaunchError
from . import plots

__all__ = ["TuningState", "Field", "Problem", "RunRequest", "FloorChoice", "floor_choice", "FIELDS", "ROUTING_MODELS", "MODELS", "RUN_INPUTS",
           "HISTORY_COLUMNS", "ROWS_COLUMNS", "VIEWS", "RUN_VIEWS", "AUTO_SUGGEST_SEGMENTS", "routing_string",
           "format_bytes", "default_trace"]

#: Routing models offered -> (name of the skew parameter, its default), None when the model
#: takes no number; "trace" takes a trace name (MODEL/DOMAIN/LAYER).
ROUTING_MODELS: dict[str, tuple[str, float] | None] = {
    "uniform": None,
    "zipf": ("S", 1.2),
    "hot-expert": ("F", 0.1),
    "hot-rank": ("F", 0.5),
    "deepseek": None,
    "trace": None,
}

#: Machines of the modelled time (data/npu_models/<name>.toml).
MODELS = ("a2", "a3")

#: Columns of ``TuningState.history``, one row per Run: the case, its run values and its kernel
#: ``settings`` label (docs/variants.md: ``reference``, ``segment-c4``, ...), then the Run's
#: repeats summarized as the CLI and 03_sweep summarize them (:func:`combine_lab.results.tables.summarize`):
#: times in us, the median over repeats of the slowest profiled PE's CoreMaxTime;
#: ``<metric>_speedup`` the median of each repeat's classic / doubleplane (above 1: doubleplane
#: faster), ``..._speedup_lo`` / ``..._hi`` its min and max, ``..._verdict`` faster / slower /
#: within noise; sdma_share, check (FAIL when any repeat failed), counters_ok (every repeat) and
#: the reason of a variant that did not run.
HISTORY_COLUMNS = ["run", "case_id", "routing", "dtype", "target", "min_sdma_bytes", "settings", "warmup", "loops",
                   "repeats",
                   *COMPARISON_COLUMNS, *[f"{m}_{k}" for m in METRICS for k in ("speedup_lo", "speedup_hi", "verdict")]]
#: Columns of ``TuningState.rows``: the Run number, then one :class:`~combine_lab.results.rows.ResultRow`
#: per variant (the schema of the CLI table and the sweep CSV).
ROWS_COLUMNS = ["run", *ROW_COLUMNS]

#: Up to this many segments (pes * pes * expert_per_pe) the modelled curve over every floor is
#: recomputed at each replan (milliseconds); above it, :meth:`TuningState.suggest` computes it
#: (about 1-3 s at 64 PEs).
AUTO_SUGGEST_SEGMENTS = 4096

#: The views, in the order the app shows them: the plan's (segment map, plane bytes), the
#: modelled time over floors, the last Run's comparison and the history of Runs.
VIEWS = ("segment_map", "plane_bytes", "modelled", "compare", "history")
#: The views of the last Run that go stale when the inputs change.
RUN_VIEWS = ("verdict", "counters", "compare")

#: Errors a run can end with that are shown as a message (anything else is a bug: it raises).
RUN_ERRORS = (SpecError, ParameterError, CaseFileError, ResultFileError, build_mod.BuildError, LaunchError, OSError,
              ValueError)

_VARIANT_NAME = {"classic": "classic (MTE only)", "doubleplane": "doubleplane (MTE + SDMA)"}


def routing_string(model: str, skew: float | None = None, trace: str | None = None) -> str:
    """The routing string of :mod:`combine_lab.case.routing` for a model and its skew strength.

    ``model``: a key of :data:`ROUTING_MODELS`; ``skew``: S (zipf) or F (hot-expert, hot-rank),
    ignored otherwise; ``trace``: MODEL/DOMAIN/LAYER for model 'trace'.
    Raises SpecError for an unknown model or a missing trace name.
    """
    if model not in ROUTING_MODELS:
        raise SpecError(f"routing model={model!r}: must be one of {', '.join(ROUTING_MODELS)}")
    if model == "trace":
        if not trace:
            raise SpecError("routing model='trace': pick a trace (MODEL/DOMAIN/LAYER)")
        return f"trace:{trace}"
    if ROUTING_MODELS[model] is None:
        return model
    return f"{model}:{float(skew):g}"


def format_bytes(n: float) -> str:
    """``n`` bytes for a message: "1.50 MiB", "512 B" (binary units, two decimals above 1 KiB)."""
    div, unit = plots.byte_unit(float(n))
    return f"{n / div:,.2f} {unit}" if unit != "B" else f"{int(n):,} B"


def default_trace(traces: list[str]) -> str | None:
    """The trace the app starts with: mixtral/arxiv/15 when present, else the first, else None."""
    return "mixtral/arxiv/15" if "mixtral/arxiv/15" in traces else (traces[0] if traces else None)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class Problem:
    """A value that cannot be used: ``name`` (the value's, as in :data:`FIELDS`, or "case" for a
    limit of the whole shape), the ``value`` given and the ``reason``; ``str()`` is the message
    line, e.g. ``"loops=0: must be an integer >= 1"``."""

    name: str
    value: Any
    reason: str

    def __str__(self) -> str:
        if self.name == "case":
            return self.reason
        shown = FIELDS[self.name].shown if self.name in FIELDS else self.name
        return f"{shown}={self.value!r}: {self.reason}"


@dataclass(frozen=True)
class Field:
    """What one value may be. ``kind``: "int", "number" or "choice"; ``minimum`` / ``maximum``:
    inclusive bounds (None: none); ``step``: an int value must be a multiple of it (None: any);
    ``options``: the values a "choice" may take (resolved per state for target and trace);
    ``default``; ``unit`` and ``help`` for labels and messages; ``label``: how the page names it
    (the control's label; default ``name``)."""

    name: str
    kind: str
    default: Any
    minimum: float | None = None
    maximum: float | None = None
    step: int | None = None
    options: tuple | None = None
    unit: str = ""
    help: str = ""
    label: str = ""

    @property
    def shown(self) -> str:
        """The name a person reads on the page (the control's label)."""
        return self.label or self.name

    def check(self, value, options: tuple | None = None) -> list[Problem]:
        """Every reason ``value`` is not allowed (empty: it is), never a corrected value.
        ``options`` overrides :attr:`options` (the targets and traces found at run time)."""
        opts = self.options if options is None else options
        if self.kind == "choice":
            if value not in (opts or ()):
                shown = ", ".join(repr(o) for o in (opts or ())[:8]) + (", ..." if len(opts or ()) > 8 else "")
                return [Problem(self.name, value, f"not offered here (offered: {shown or 'none'})")]
            return []
        if self.kind == "int" and not _is_int(value):
            return [Problem(self.name, value, "must be an integer")]
        if self.kind == "number" and not (_is_number(value) and math.isfinite(float(value))):
            return [Problem(self.name, value, "must be a finite number")]
        out = []
        if self.minimum is not None and value < self.minimum:
            out.append(Problem(self.name, value, f"must be >= {self.minimum:g}{' ' + self.unit if self.unit else ''}"))
        if self.maximum is not None and value > self.maximum:
            out.append(Problem(self.name, value, f"must be <= {self.maximum:g}{' ' + self.unit if self.unit else ''}"))
        if self.step and _is_int(value) and value % self.step:
            out.append(Problem(self.name, value, f"must be a multiple of {self.step}"))
        return out


#: Every value of the state, in the order the app shows its controls (then the model).
FIELDS: dict[str, Field] = {f.name: f for f in (
    Field("pes", "int", 4, minimum=1, help="PEs (ranks)"),
    Field("bs", "int", 256, minimum=1, unit="tokens", help="tokens per PE"),
    Field("h", "int", 8192, minimum=1, unit="elements", help="hidden size, elements per row"),
    Field("topk", "int", 2, minimum=1, help="experts per token"),
    Field("expert_per_pe", "int", 2, minimum=1, help="experts per PE"),
    Field("dtype", "choice", "int32_t", options=tuple(DTYPES)),
    Field("routing_model", "choice", "zipf", options=tuple(ROUTING_MODELS), help="routing model", label="routing"),
    Field("skew", "number", 1.2, help="S for zipf, F for hot-expert and hot-rank", label="skew"),
    Field("trace", "choice", None, help="MODEL/DOMAIN/LAYER of a routing trace"),
    Field("seed", "int", 42, minimum=0, help="case seed"),
    Field("min_sdma_bytes", "int", DEFAULT_MIN_SDMA_BYTES, minimum=0, unit="B", help="SDMA floor"),
    Field("segment", "choice", False, options=(False, True),
          help="doubleplane's segment layout: one SDMA call per contiguous segment (docs/variants.md)",
          label="segment layout"),
    Field("cores_per_rank", "int", 1, minimum=1,
          help="AIV cores per source rank, 1 to the SoC's AIV cores (docs/variants.md)", label="cores per rank"),
    Field("warmup", "int", 1, minimum=0, help="launches before profiling"),
    Field("loops", "int", 3, minimum=1, help="profiled launches"),
    Field("repeats", "int", 3, minimum=1, help="paired runs of both variants: the spread of the times"),
    Field("target", "choice", "cpu", help="where Run runs"),
    Field("model", "choice", "a3", options=MODELS, help="machine of the modelled time"),
)}
#: The values a Run depends on: a change of any of them makes the last Run's views stale (the
#: model is not one: it only prices the plan).
RUN_INPUTS = tuple(n for n in FIELDS if n != "model")
_CASE_FIELDS = ("pes", "bs", "h", "topk", "expert_per_pe", "dtype", "seed")


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


@dataclass(frozen=True)
class FloorChoice:
    """What a modelled curve over floors says about the SDMA floor, ties included.

    ``best_us``: the least modelled time; ``lo``, ``hi``: the interval of floors (bytes,
    inclusive; ``hi`` None: no upper end) whose plan reaches it, the floors where the plan
    changes being the curve's; ``never``: never SDMA (the classic plan) reaches it too, so no
    floor is better than sending nothing by SDMA (a tie, not a win); ``all_tie``: every floor
    reaches it (the floor changes nothing, modelled); ``floor``: the one :meth:`TuningState.use_suggestion`
    sets (the default 2 MiB when inside the interval, else its largest power of two, else its
    upper end; for a tie with never: one byte above every segment the rule could pick);
    ``largest_segment``: that segment's bytes."""

    best_us: float
    lo: int
    hi: int | None
    never: bool
    all_tie: bool
    floor: int
    largest_segment: int

    def text(self) -> str:
        """One sentence for the page: the interval, or the tie."""
        if self.all_tie:
            return (f"every floor ties with never SDMA (modelled comm_only {self.best_us:,.1f} us at each): the floor "
                    f"changes nothing here, so no floor is suggested")
        if self.never:
            return (f"no floor beats never SDMA: floors from {format_bytes(self.lo)} up tie with it at "
                    f"{self.best_us:,.1f} us (a tie, not a win)")
        span = f"any floor from {format_bytes(self.lo)} to {format_bytes(self.hi)}"
        return f"{span} reaches the best modelled comm_only, {self.best_us:,.1f} us"


def floor_choice(s: Suggestion, rel: float = 1e-9) -> FloorChoice:
    """The :class:`FloorChoice` of a :class:`~combine_lab.model.suggest.Suggestion`: which floors
    reach its least modelled time (within ``rel``), as one interval, and whether never-SDMA ties.

    The curve holds the floors where the plan changes, largest first, then never SDMA (-1):
    floor f gives the plan of the smallest curve floor >= f, so curve floor t_i stands for the
    floors in (t_{i+1}, t_i], and never SDMA for every floor above the largest."""
    c = s.curve
    th = c["threshold_bytes"].to_numpy().astype(np.int64)
    us = c["modelled_us"].to_numpy(dtype=float)
    best = float(np.nanmin(us))
    hit = us <= best * (1 + rel) + 1e-12
    sizes = np.sort(th[th >= 0])[::-1]  # largest first
    largest = int(sizes[0]) if sizes.size else 0
    # floors from the top: never SDMA (every floor above the largest), then each curve floor
    # t_i, standing for (t_{i+1}, t_i]; the best floors are the first run of hits from the top
    spans = [(largest + 1, None, bool(hit[th == NEVER].any()))]
    for i, t in enumerate(sizes):
        below = int(sizes[i + 1]) + 1 if i + 1 < len(sizes) else 0
        spans.append((below, int(t), bool(hit[th == t].any())))
    first = next(i for i, sp in enumerate(spans) if sp[2])
    last = first
    while last + 1 < len(spans) and spans[last + 1][2]:
        last += 1
    lo, hi = spans[last][0], spans[first][1]
    never = first == 0
    all_tie = bool(hit.all())
    if never:
        return FloorChoice(best, lo, None, True, all_tie, largest + 1, largest)
    if lo <= DEFAULT_MIN_SDMA_BYTES <= hi:
        floor = DEFAULT_MIN_SDMA_BYTES
    else:
        k = int(math.floor(math.log2(hi))) if hi > 0 else 0
        floor = 2 ** k if hi > 0 and 2 ** k >= lo else hi
    return FloorChoice(best, lo, hi, False, all_tie, int(floor), largest)


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


class TuningState:
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
            raise ParameterError(f"unknown values {sorted(unknown)}; known: {sorted(FIELDS)}")
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
            return None, problems + [Problem(*self._blame(str(e)))]
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

    def _blame(self, text: str) -> tuple[str, Any, str]:
        """(name, value, reason) of a SpecError of the whole case: the value its message starts
        with when that is one of ours ("topk=9: ..."), the routing's own value for a routing
        message, else "case" with the message as it is."""
        head = text.split("=", 1)[0].strip()
        if head == "routing" or head.startswith("routing "):
            name = {"trace": "trace", "uniform": "routing_model", "deepseek": "routing_model"}.get(
                self._values["routing_model"], "skew")
            return name, self._values[name], text.split(": ", 1)[-1] if ": " in text else text
        if head in FIELDS and ": " in text:
            return head, self._values[head], text.split(": ", 1)[1]
        return "case", None, text

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
        p = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, "doubleplane", int(self._values["min_sdma_bytes"]),
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

    # ------------------------------------------------------------------ modelled time
    def model(self) -> NpuModel:
        """The :class:`~combine_lab.model.machines.NpuModel` of the ``model`` value (loaded once)."""
        name = self._values["model"] if self._values["model"] in MODELS else "a3"
        if name not in self._models:
            self._models[name] = load_model(name)
        return self._models[name]

    def _model_rows(self, model: NpuModel) -> CaseRows:
        """The model's view of the current case: drawn once per routing and SoC, its bytes per row
        replaced when only h or dtype change (the routing, and so every count, stays)."""
        key = (self._case_key, id(self._case), model.soc)
        if key != self._rows_key:
            self._rows, self._rows_key = case_rows(self._case, model.soc), key
        return dataclasses.replace(self._rows, h=self.spec.h, itemsize=self.spec.itemsize)

    @staticmethod
    def _comm_only(rows: CaseRows, mask: np.ndarray, model: NpuModel) -> float:
        """Modelled comm_only of the slowest PE (us) under ``rows.settings``: stage 1 only, which is
        all comm_only holds (the panel redraws at every change: no stage 2 priced for it)."""
        comm, _ = stage1(rows.counts, mask, np.arange(rows.pes), rows.pes, rows.block_dim, rows.epp,
                         rows.row_bytes, model, **settings_args(rows))
        return float(comm.max())

    def _curve_key(self, model: NpuModel):
        st = self.settings
        return (self._rows_key, self.spec.h, self.spec.itemsize, model.name, st.label if st else None)

    def _clear_modelled(self) -> None:
        self.modelled = {}
        self.suggestion, self._suggestion_key = None, None

    def _update_modelled(self) -> None:
        model = self.model()
        try:
            model.pair_class(self.spec.pes)
        except ParameterError as e:  # the machine has fewer PEs than the case: say why, price nothing
            self.suggestion, self._suggestion_key = None, None
            self.modelled = {"model": model.name, "caption": model.caption(), "refused": str(e)}
            self.figures.pop("modelled")
            return
        st = self.settings or REFERENCE
        vs = self._variant_settings(st)
        try:  # the case's rows under each variant's settings (classic without the segment layout)
            rows = self._model_rows(model)
            under = {v: rows.with_settings(s) for v, s in vs.items()}
        except ParameterError as e:  # settings the model's SoC cannot run: never the reference's numbers instead
            self.suggestion, self._suggestion_key = None, None
            self.modelled = {"model": model.name, "caption": model.caption(), "settings": st.label,
                             "not_modelled": not_modelled_text(st.label, str(e))}
            self.figures.pop("modelled")
            return
        floor = int(self._values["min_sdma_bytes"])
        ckey = (self._curve_key(model), "classic")
        if ckey not in self._classic_cache:
            self._classic_cache = {ckey: self._comm_only(under["classic"], rows.sdma("classic", 0), model)}
        classic = self._classic_cache[ckey]
        dual = self._comm_only(under["doubleplane"], rows.sdma("doubleplane", floor), model)
        key = self._curve_key(model)
        small = rows.pes * rows.counts.shape[1] <= AUTO_SUGGEST_SEGMENTS
        if self._suggestion_key != key:
            self.suggestion, self._suggestion_key = None, None
            if small:
                self.suggestion, self._suggestion_key = model_suggest(under["doubleplane"], model, "comm_only"), key
        labels = {v: variant_label(v, s) for v, s in vs.items()}
        # against this group's own classic (classic-c4 for segment-c4), as the speed-up beside it
        engines = (engines_line(floor, engines_curve(under["doubleplane"], model, floor, baseline=vs["classic"]),
                                labels["doubleplane"])
                   if small and rows.sdma("doubleplane", floor).any() else "")
        self.modelled = {"model": model.name, "caption": model.caption(), "floor": floor, "classic_us": classic,
                         "doubleplane_us": dual, "speedup": classic / dual if dual > 0 else float("nan"),
                         "curve": self.suggestion is not None, "engines_line": engines, "settings": st.label,
                         "labels": labels}
        self._set_modelled_figure()

    def _variant_settings(self, st: KernelSettings) -> dict[str, KernelSettings]:
        """classic's and doubleplane's settings under the group ``st`` (classic without the segment layout)."""
        return {v: s for v, s, _ in group_variants(["classic", "doubleplane"], [st.label]).values()}

    def _set_modelled_figure(self) -> None:
        m, s, w = dict(self.modelled), self.suggestion, self.figure_width
        self.figures.set("modelled", lambda: plots.modelled_floors(
            s.curve if s is not None else None, m["caption"], floor=m["floor"], classic_us=m["classic_us"],
            floor_us=m["doubleplane_us"], width=w))

    def suggest_size(self) -> tuple[int, int]:
        """(PEs, segments) the curve over floors has to model for the current case; (0, 0) without a plan."""
        if self.plan is None:
            return 0, 0
        return self.spec.pes, self.spec.pes * self.spec.pes * self.spec.expert_per_pe

    def suggest(self) -> Suggestion | None:
        """Model comm_only at every floor where the plan of the current inputs changes
        (:func:`combine_lab.model.suggest.suggest`) and name the best floor. Returns the
        Suggestion, or None when the inputs cannot be planned (``message`` says why)."""
        if self.plan is None or self.spec is None:
            self.message = "Cannot suggest a floor: the current inputs cannot be planned. Nothing was modelled."
            return None
        model = self.model()
        if self.modelled.get("refused"):
            self.message = f"Cannot suggest a floor on {model.name}: {self.modelled['refused']}"
            return None
        if self.modelled.get("not_modelled"):
            self.message = f"Cannot suggest a floor on {model.name}: {self.modelled['not_modelled']}"
            return None
        t0 = time.perf_counter()
        rows = self._model_rows(model)
        st = self.settings
        try:
            s = priced(model_suggest, self._variant_settings(st)["doubleplane"], rows, model, "comm_only")
        except NotModelled as e:
            self.message = f"Cannot suggest a floor on {model.name}: {not_modelled_text(st.label, e.why)}"
            return None
        floor = int(self._values["min_sdma_bytes"])
        if st.is_reference and not self.modelled.get("engines_line") and rows.sdma("doubleplane", floor).any():
            self.modelled["engines_line"] = engines_line(floor, engines_curve(rows, model, floor))
        self.suggest_seconds = time.perf_counter() - t0
        self.suggestion, self._suggestion_key = s, self._curve_key(model)
        self.modelled["curve"] = True
        self._set_modelled_figure()
        return s

    def floor_choice(self) -> "FloorChoice | None":
        """What the current suggestion says about the floor (:func:`floor_choice`): the interval
        of floors that reach the best modelled time, or a tie with never-SDMA; None without one."""
        s = self.suggestion
        if s is None or self._suggestion_key is None or self.plan is None:
            return None
        return floor_choice(s)

    def suggested_floor(self) -> int | None:
        """The floor :meth:`use_suggestion` would set (bytes; :attr:`FloorChoice.floor`: inside the
        interval of best floors, the current floor when it is one of them; for "never SDMA" one
        byte above every segment the rule could pick), or None without a current suggestion."""
        c = self.floor_choice()
        if c is None:
            return None
        cur = self._values["min_sdma_bytes"]
        if not c.never and _is_int(cur) and c.lo <= cur <= c.hi:
            return int(cur)
        return c.floor

    def use_suggestion(self) -> int | None:
        """Set ``min_sdma_bytes`` to :meth:`suggested_floor` and replan; returns the floor set, or
        None without a current suggestion."""
        floor = self.suggested_floor()
        if floor is not None:
            self.set(min_sdma_bytes=floor)
        return floor

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

    # ------------------------------------------------------------------ run
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

        Returns the :class:`~combine_lab.harness.Comparison` (``{"classic": RunResult,
        "doubleplane": RunResult}``; a variant the target refuses is left out, with its reason in
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
        for variant, st, _ in group_variants(["classic", "doubleplane"], [group]).values():
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
        """The history's comparison of a Run: :func:`compare_rows` of its last repeat's rows (the
        SDMA share, the reason of a variant that did not run), its times, speed-ups and verdicts
        replaced by the summary over every repeat (:func:`combine_lab.results.tables.summarize`), its
        check FAIL and counters_ok False when any repeat's were."""
        out = compare_rows(rows)
        for m in METRICS:
            out.update({f"{m}_speedup_lo": float("nan"), f"{m}_speedup_hi": float("nan"), f"{m}_verdict": "no run"})
        outcomes = getattr(runs, "outcomes", [])
        summary = summarize(runs.tidy()) if outcomes else None
        if summary is None or not len(summary):
            return out
        s = summary.iloc[0]
        for m in METRICS:
            for k in ("classic_us", "doubleplane_us", "speedup", "speedup_lo", "speedup_hi", "verdict"):
                out[f"{m}_{k}"] = s[f"{m}_{k}"]
        if out["check"] == PASS and not s["check_ok"]:
            out["check"] = FAIL
        out["counters_ok"] = bool(out["counters_ok"]) and bool(s["counters_ok"])
        return out

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
