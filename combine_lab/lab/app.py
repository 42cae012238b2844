"""The tuning app: ipywidgets to set a case, a live plan view, modelled NPU time with a suggested
SDMA floor, and a Run button that compares both variants.

    from combine_lab.lab.app import TuningApp
    app = TuningApp()
    app                      # in a notebook: controls, plan view, modelled time, run panel

Changing a control replans at once and runs nothing: the routing is drawn with
:func:`combine_lab.case.case.make_case` (never x: the plan path does not touch ``case.x``)
and planned with :func:`combine_lab.planning.planner.plan_counts`; controls that only change
bytes (h, dtype for skewed routings, min_sdma_bytes) reuse the drawn routing. Both plan figures
(segment map; plane bytes and thresholds) are drawn as SVG (:mod:`.svg`) and shown in one update.

**Modelled time** (:mod:`combine_lab.model`): on every replan, the modelled ``comm_only`` of the
slowest PE for classic and for the current floor on the chosen machine (``a2``/``a3``), from the
kernel's own operation stream; the curve over every floor where the plan changes comes from
:func:`combine_lab.model.suggest.suggest`, computed at each replan for small cases and by the
**Suggest** button for large ones (about 1-3 s at 64 PEs), which also names the best floor and
offers to set the floor control to it. Every modelled number says "modelled on ...", with the
assumed parameters; measured times (Run) are labelled measured, never mixed with them.

**Run** builds the target if needed and runs classic and doubleplane through
:func:`combine_lab.harness.compare`, then shows the x_out verdict, per-plane counters,
per-PE times and a history of runs. The button stays disabled until the run's results are shown,
and a click that the browser sent while a run was going (the second click of a double-click,
queued behind the first run) starts nothing. A
variant the target refuses (doubleplane on an NPU with CANN older than 9.0.0) shows as REFUSED
with its reason, and classic still runs.

Everything a browser would do can be done from Python, which is how the tests drive it:
set ``app.controls[name].value`` (or :meth:`TuningApp.set`), call :meth:`TuningApp.run`,
:meth:`TuningApp.suggest`, :meth:`TuningApp.use_suggestion` or ``app.run_button.click()``, then
read ``app.plan``, ``app.sdma_table``, ``app.modelled``, ``app.suggestion``, ``app.message``,
``app.history``, ``app.rows``, ``app.last_runs``. Bad values never raise: they show a readable
message (``app.message``) and nothing is planned or launched.

What is shown always describes the current inputs, or says it does not: a failed plan clears the
plan view and the modelled panel; a failed Run clears the verdict, counters and comparison;
and while the inputs differ from those of the last Run (a control changed, a plan failed) its
verdict, counters and comparison are marked stale (``app.stale_views``) and
:meth:`TuningApp.save_figures` leaves the comparison out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import ipywidgets as widgets
import numpy as np
import pandas as pd

from ..case.case import Case, make_case
from ..case.routing import parse_routing
from ..case.spec import CaseSpec
from ..case.traces import list_traces
from ..errors import CaseFileError, ParameterError, SpecError
from ..model.params import NpuModel, load_model
from ..model.replay import stage1
from ..model.stream import CaseRows, case_rows
from ..model.suggest import NEVER, Suggestion
from ..model.suggest import suggest as model_suggest
from ..planning.capacity import CapacityError, window_geometry
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, Plan, plan_counts
from ..results.rows import COMPARISON_COLUMNS, REFUSED, ROW_COLUMNS, NotRun, ResultRow, compare_rows, result_row
from .. import harness
from ..run import build as build_mod
from ..run import runner
from ..run.capabilities import detect
from ..run.launch import LaunchError
from ..errors import ResultFileError
from . import plots, svg

__all__ = ["ROUTING_MODELS", "routing_string", "TuningApp", "HISTORY_COLUMNS", "HISTORY_SHOWN", "ROWS_COLUMNS",
           "MODELS"]

#: Routing models offered by the app -> (name of the skew parameter, its default), None when
#: the model takes no number; "trace" takes a trace name from the trace selector.
ROUTING_MODELS: dict[str, tuple[str, float] | None] = {
    "uniform": None,
    "zipf": ("S", 1.2),
    "hot-expert": ("F", 0.1),
    "hot-rank": ("F", 0.5),
    "deepseek": None,
    "trace": None,
}

#: Machines the modelled-time panel offers (data/npu_models/<name>.toml).
MODELS = ("a2", "a3")

#: Columns of ``TuningApp.history``, one row per Run: the case and settings, then
#: :func:`combine_lab.results.rows.compare_rows` of the run's rows: times in us (CoreMaxTime,
#: mean over profiled PEs), ``<metric>_speedup`` = classic time / doubleplane time (above 1:
#: doubleplane faster, :data:`combine_lab.results.rows.SPEEDUP`), sdma_share, check,
#: counters_ok and the reason of a variant that did not run.
HISTORY_COLUMNS = ["run", "case_id", "routing", "dtype", "target", "min_sdma_bytes", "warmup", "loops",
                   *COMPARISON_COLUMNS]
#: The history columns the app shows in its table (column -> heading); the others are one click
#: away ("all columns"), so that the table fits a JupyterLab column.
HISTORY_SHOWN = {"run": "run", "case_id": "case (bs, h, topk, E, pes)", "routing": "routing", "target": "target",
                 "min_sdma_bytes": "SDMA floor", "comm_only_classic_us": "classic comm_only (us)",
                 "comm_only_doubleplane_us": "doubleplane comm_only (us)", "comm_only_speedup": "speed-up",
                 "sdma_share": "SDMA share", "check": "check", "counters_ok": "counters = plan"}
#: How the shown history writes its values (short, so that the table fits; "all columns" has them exact).
_HISTORY_FORMAT = {"case_id": lambda v: html.escape(str(v).removeprefix("shape_")),
                   "min_sdma_bytes": lambda v: html.escape(svg.floor_text(int(v))),
                   "comm_only_classic_us": lambda v: "-" if not np.isfinite(v) else f"{v:,.1f}",
                   "comm_only_doubleplane_us": lambda v: "-" if not np.isfinite(v) else f"{v:,.1f}",
                   "sdma_share": lambda v: "-" if not np.isfinite(v) else f"{100 * v:.1f} %"}
#: Columns of ``TuningApp.rows``: the Run number, then one :class:`~combine_lab.results.rows.ResultRow`
#: per variant (the schema of the CLI table and the sweep CSV).
ROWS_COLUMNS = ["run", *ROW_COLUMNS]

_INT_FIELDS = ("pes", "bs", "h", "topk", "expert_per_pe", "seed", "min_sdma_bytes", "warmup", "loops")
_CASE_FIELDS = ("pes", "bs", "h", "topk", "expert_per_pe", "seed")
#: Errors a run can end with that the app shows as a message.
_RUN_ERRORS = (SpecError, ParameterError, CaseFileError, ResultFileError, build_mod.BuildError, LaunchError, OSError,
               ValueError)
#: The h slider's range (elements per row); :meth:`TuningApp.set` widens it for a value outside.
H_RANGE = (64, 16384, 64)
#: Up to this many segments (pes * pes * expert_per_pe) the modelled curve over every floor is
#: recomputed at each replan (milliseconds); above it, the Suggest button computes it.
AUTO_SUGGEST_SEGMENTS = 4096

_CSS = """<style>
.cl-app { max-width: 100%; }
.cl-app .cl-controls { display: flex; flex-flow: row wrap; gap: 2px 10px; }
.cl-app .cl-controls .widget-inline-hbox .widget-label { min-width: 0; }
.cl-app h4.cl-h { margin: 12px 0 4px 0; font-size: 14px; }
.cl-app .cl-note { color: #555; font-size: 12px; margin: 2px 0; }
.cl-app .cl-scroll { overflow-x: auto; max-width: 100%; }
.cl-app table.cl-table { border-collapse: collapse; font-size: 12px; }
.cl-app table.cl-table th, .cl-app table.cl-table td { padding: 2px 7px; border-bottom: 1px solid #ddd;
  text-align: right; white-space: nowrap; }
.cl-app table.cl-table th { background: #f4f4f4; font-weight: 600; white-space: normal; vertical-align: bottom; }
.cl-app table.cl-history-table th { max-width: 96px; }
.cl-app .cl-figure { margin: 4px 0; }
.cl-app .cl-modelled-tag { background: #fff4d6; border: 1px solid #e0b84a; border-radius: 3px; padding: 0 4px; }
.cl-app .cl-measured-tag { background: #e6f0fa; border: 1px solid #7aa7d6; border-radius: 3px; padding: 0 4px; }
</style>"""


def routing_string(model: str, skew: float | None = None, trace: str | None = None) -> str:
    """The routing string of :mod:`combine_lab.routing` for a model and its skew strength.

    ``model``: a key of :data:`ROUTING_MODELS`; ``skew``: S (zipf) or F (hot-expert,
    hot-rank), ignored otherwise; ``trace``: MODEL/DOMAIN/LAYER for model 'trace'.
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


def _fmt_bytes(n: float) -> str:
    div, unit = plots.byte_unit(float(n))
    return f"{n / div:,.2f} {unit}" if unit != "B" else f"{int(n):,} B"


def _cell(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return "-" if not np.isfinite(v) else f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    return html.escape(str(v))


def _table(df: pd.DataFrame, headings: dict[str, str], cls: str, fmt: dict | None = None) -> str:
    """A compact HTML table of ``df``'s ``headings`` columns (column -> heading); ``fmt``: column ->
    function writing a value (as HTML), else :func:`_cell`."""
    fmt = fmt or {}
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings.values())
    body = "".join("<tr>" + "".join(f"<td>{fmt.get(c, _cell)(r[c])}</td>" for c in headings) + "</tr>"
                   for r in df.to_dict("records"))
    return f"<div class='cl-scroll'><table class='cl-table {cls}'><tr>{head}</tr>{body}</table></div>"


class _Figures(Mapping):
    """The matplotlib Figure of each current view, made the first time it is asked for: the app
    itself draws SVG, so a replan never pays for a figure nobody looks at."""

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

    def __getitem__(self, name: str):
        if name not in self._made:
            self._made[name] = self._make[name]()
        return self._made[name]

    def __iter__(self):
        return iter(list(self._make))

    def __len__(self) -> int:
        return len(self._make)


class TuningApp:
    """Controls, plan view, modelled time and run panel for one combine case.

    Args:
        targets: targets offered by the target selector; default
            ``capabilities.detect().targets()`` ('cpu', plus 'npu' where it can run).
        max_uniform_x_bytes: uniform routing draws x with it (the reference recipe,
            docs/protocol.md#3-reference-data-and-the-check); above this many bytes of x (pes*bs*h*sizeof(T)) the
            app refuses to plan it and says so. Skewed routings never draw x to plan.
        max_run_bytes: a Run is refused when the case files plus windows would exceed this
            many bytes (estimate: (pes*bs*topk + 2*pes*bs) rows of h*sizeof(T) plus the windows).
        prof_all_max_pes: up to this many PEs every PE is profiled (per-PE times); above it PE 0 only.
        timeout_s: limit per launch of all PEs, seconds.
        model: the machine of the modelled-time panel (:data:`MODELS`).
        click_guard_s: without the browser's time stamps (a click from Python), a Run click handled
            this soon after the last run's results were shown is the rest of a double-click (queued
            while the run went on), not a new request: ignored.
        **initial: starting values of the controls (names as in :attr:`controls`).

    Attributes:
        controls: dict name -> widget for pes, bs, h (a slider), topk, expert_per_pe, dtype,
            routing_model, skew, trace, seed, min_sdma_bytes, warmup, loops, target.
        model_select: the machine of the modelled panel (a2, a3).
        spec: the CaseSpec of the current values, or None when they are invalid.
        plan: the doubleplane :class:`~combine_lab.planning.planner.Plan` shown, or None.
        sdma_table: DataFrame of the SDMA segments listed (pe, segment, local_expert,
            src_rank, token_count, bytes), as in ``plan.segments``.
        modelled: the modelled comm_only of the current inputs ({} without a plan): model,
            caption, floor, classic_us, doubleplane_us (the slowest PE's CoreMaxTime, us),
            speedup (classic / doubleplane), curve (True when the curve over floors is current).
        suggestion: the :class:`~combine_lab.model.suggest.Suggestion` of the current inputs, or None.
        message: the text of the message shown ('' when none).
        history: DataFrame (:data:`HISTORY_COLUMNS`), one row per completed run.
        rows: DataFrame (:data:`ROWS_COLUMNS`), one result row per variant of every completed run.
        last_runs: the :class:`~combine_lab.harness.Comparison` of the last run (variant ->
            RunResult, and ``refused``: variant -> reason), or None.
        figures: the matplotlib Figure of each view that describes the current inputs
            ("segment_map", "plane_bytes": the current plan; "compare": the last Run, while the
            inputs are still the ones it ran with; "history": every completed Run), made when
            first asked for. A view that no longer describes them is not in it, so
            :meth:`save_figures` never saves it as current.
        stale_views: the run views shown marked stale ("verdict", "counters", "compare"): the
            inputs changed since the Run they show, or the current ones cannot be planned.
        replans: how many times the plan view was recomputed; plan_seconds: the last one's time
            (plan, both figures and the modelled panel).
        ignored_clicks: Run clicks that started nothing (a run going on, or a double-click).
    """

    def __init__(self, targets: list[str] | None = None, *, max_uniform_x_bytes: int = 256 * 2 ** 20,
                 max_run_bytes: int = 2 * 2 ** 30, prof_all_max_pes: int = 8, timeout_s: float = 120.0,
                 model: str = "a3", click_guard_s: float = 0.5, **initial: Any):
        self.targets = list(targets) if targets is not None else detect().targets()
        if not self.targets:
            self.targets = ["cpu"]
        self.max_uniform_x_bytes = max_uniform_x_bytes
        self.max_run_bytes = max_run_bytes
        self.prof_all_max_pes = prof_all_max_pes
        self.timeout_s = timeout_s
        self.click_guard_s = click_guard_s
        self.spec: CaseSpec | None = None
        self.plan: Plan | None = None
        self.sdma_table = pd.DataFrame(columns=["pe", "segment", "local_expert", "src_rank", "token_count", "bytes"])
        self.message = ""
        self.history = pd.DataFrame(columns=HISTORY_COLUMNS)
        self._history_rows: list[dict] = []
        self.rows = pd.DataFrame(columns=ROWS_COLUMNS)
        self._rows_data: list[dict] = []
        self.last_runs: dict | None = None
        self.figures = _Figures()
        self.stale_views: list[str] = []
        self.modelled: dict = {}
        self.suggestion: Suggestion | None = None
        self._suggestion_key = None
        self._run_values: dict | None = None  # the inputs of the Run the run views show
        self._run_verdict = ""
        self._run_counters = ""
        self._run_figure = None
        self._run_compare_svg = ""
        self._running = False
        self._run_done_at = -float("inf")
        self._run_click_sent: float | None = None  # browser clock: the click that started the last run
        self._run_took = 0.0  # kernel clock: from that click to its results shown
        self.ignored_clicks = 0
        self.replans = 0
        self.plan_seconds = float("nan")
        self._case_key = None
        self._case: Case | None = None
        self._rows_key = None
        self._rows: CaseRows | None = None
        self._models: dict[str, NpuModel] = {}
        self._classic_cache: dict = {}
        self._hold = 0
        self._build_widgets(model)
        self._root = self._layout()
        self.set(**initial)

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self, model: str) -> None:
        style = {"description_width": "116px"}  # "min_sdma_bytes" in full
        lay = widgets.Layout(width="236px")

        def int_box(desc, value, tip):
            return widgets.IntText(value=value, description=desc, tooltip=tip, style=style, layout=lay)

        traces = [t.removeprefix("trace:") for t in list_traces()]  # MODEL/DOMAIN/LAYER
        default_trace = "mixtral/arxiv/15" if "mixtral/arxiv/15" in traces else (traces[0] if traces else None)
        lo, hi, step = H_RANGE
        c = {
            "pes": int_box("pes", 4, "PEs (ranks)"),
            "bs": int_box("bs", 256, "tokens per PE"),
            "h": widgets.IntSlider(value=8192, min=lo, max=hi, step=step, description="h",
                                   continuous_update=False, tooltip="hidden size, elements per row", style=style,
                                   layout=widgets.Layout(width="352px")),
            "topk": int_box("topk", 2, "experts per token"),
            "expert_per_pe": int_box("expert_per_pe", 2, "experts per PE"),
            "dtype": widgets.Dropdown(options=["int32_t", "float16_t"], value="int32_t", description="dtype",
                                      style=style, layout=lay),
            "routing_model": widgets.Dropdown(options=list(ROUTING_MODELS), value="zipf", description="routing",
                                              style=style, layout=lay),
            "skew": widgets.FloatText(value=1.2, description="skew (S or F)", style=style, layout=lay),
            "trace": widgets.Dropdown(options=traces, value=default_trace, description="trace", style=style,
                                      layout=widgets.Layout(width="352px")),
            "seed": int_box("seed", 42, "case seed"),
            "min_sdma_bytes": int_box("min_sdma_bytes", DEFAULT_MIN_SDMA_BYTES, "SDMA floor, bytes"),
            "warmup": int_box("warmup", 1, "launches before profiling"),
            "loops": int_box("loops", 3, "profiled launches"),
            "target": widgets.Dropdown(options=self.targets, value=self.targets[0], description="target",
                                       style=style, layout=lay),
        }
        self.controls = c
        for name, w in c.items():
            w.add_class("cl-control")
            w.add_class(f"cl-control-{name}")
            w.observe(self._on_change, names="value")
        wide = widgets.Layout(width="100%")
        self.message_html = widgets.HTML(layout=wide)
        self.plan_summary = widgets.HTML(layout=wide)
        self.plan_figures = widgets.HTML(layout=wide)  # segment map and plane bytes: one update, shown together
        self.plan_figures.add_class("cl-plan-figures")
        self.sdma_html = widgets.HTML(layout=wide)
        # modelled time
        self.model_select = widgets.Dropdown(options=list(MODELS), value=model if model in MODELS else "a3",
                                             description="model", style={"description_width": "50px"},
                                             layout=widgets.Layout(width="150px"))
        self.model_select.add_class("cl-model-select")
        self.model_select.observe(lambda _c: self._model_changed(), names="value")
        self.suggest_button = widgets.Button(description="Suggest", icon="search",
                                             tooltip="model every floor where the plan changes, and name the best")
        self.suggest_button.add_class("cl-suggest")
        self.suggest_button.on_click(lambda _b: self.suggest())
        self.use_button = widgets.Button(description="Use the suggested floor", disabled=True,
                                         layout=widgets.Layout(width="auto"),
                                         tooltip="set min_sdma_bytes to the suggested floor")
        self.use_button.add_class("cl-use-suggestion")
        self.use_button.on_click(lambda _b: self.use_suggestion())
        self.suggest_status = widgets.HTML(layout=wide)
        self.suggest_status.add_class("cl-suggest-status")
        self.modelled_html = widgets.HTML(layout=wide)
        self.modelled_html.add_class("cl-modelled-panel")
        self.assumed_html = widgets.HTML(layout=wide)
        # run
        self.run_button = widgets.Button(description="Run", button_style="primary", icon="play",
                                         tooltip="build if needed, run classic and doubleplane, check x_out")
        self.run_button.add_class("cl-run")
        self.run_button.on_click(self._on_run_click)
        self.progress = widgets.IntProgress(value=0, min=0, max=4, description="", layout=widgets.Layout(width="160px"))
        self.status = widgets.Label(value="")
        self.status.add_class("cl-run-status")
        self.run_title = widgets.HTML()
        self.verdict_html = widgets.HTML(layout=wide)
        self.verdict_html.add_class("cl-verdict")
        self.counters_html = widgets.HTML(layout=wide)
        self.compare_html = widgets.HTML(layout=wide)
        self.compare_html.add_class("cl-compare")
        self.history_html = widgets.HTML(layout=wide)
        self.history_html.add_class("cl-history")
        self.history_all_html = widgets.HTML(layout=wide)
        self.history_plot_html = widgets.HTML(layout=wide)
        self._sync_model_widgets()

    def _layout(self) -> widgets.Widget:
        controls = widgets.Box(list(self.controls.values()), layout=widgets.Layout(width="100%"))
        controls.add_class("cl-controls")
        sdma = widgets.Accordion(children=[self.sdma_html], titles=("SDMA segments listed by the planner",),
                                 layout=widgets.Layout(width="100%"))
        plan_box = widgets.VBox([widgets.HTML("<h4 class='cl-h'>Plan (nothing runs)</h4>"), self.plan_summary,
                                 self.plan_figures, sdma], layout=widgets.Layout(width="100%"))
        assumed = widgets.Accordion(children=[self.assumed_html], titles=("The model's parameters",),
                                    layout=widgets.Layout(width="100%"))
        model_box = widgets.VBox([
            widgets.HTML("<h4 class='cl-h'>Modelled NPU time <span class='cl-modelled-tag'>modelled, not measured"
                         "</span></h4>"),
            widgets.HBox([self.model_select, self.suggest_button, self.use_button],
                         layout=widgets.Layout(flex_flow="row wrap", width="100%")),
            self.suggest_status, self.modelled_html, assumed], layout=widgets.Layout(width="100%"))
        counters = widgets.Accordion(children=[self.counters_html], titles=("Per-plane counters of the last run",),
                                     layout=widgets.Layout(width="100%"))
        history_all = widgets.Accordion(children=[self.history_all_html], titles=("History: all columns",),
                                        layout=widgets.Layout(width="100%"))
        run_box = widgets.VBox([self.run_title,
                                widgets.HBox([self.run_button, self.progress, self.status],
                                             layout=widgets.Layout(flex_flow="row wrap", width="100%")),
                                self.verdict_html, counters, self.compare_html,
                                widgets.HTML("<h4 class='cl-h'>History <span class='cl-measured-tag'>measured</span>"
                                             "</h4><div class='cl-note'>speed-up = classic time / doubleplane time "
                                             "(above 1: doubleplane faster); times: comm_only, CoreMaxTime (us)</div>"),
                                self.history_html, history_all, self.history_plot_html],
                               layout=widgets.Layout(width="100%"))
        root = widgets.VBox([widgets.HTML(_CSS), controls, self.message_html, plan_box, model_box, run_box],
                            layout=widgets.Layout(width="100%"))
        root.add_class("cl-app")
        return root

    @property
    def widget(self) -> widgets.Widget:
        """The whole app as one widget (controls, plan view, modelled time, run panel)."""
        return self._root

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self._root)

    # ------------------------------------------------------------------ state
    def values(self) -> dict:
        """Current control values by name."""
        return {k: w.value for k, w in self.controls.items()}

    @contextlib.contextmanager
    def _held(self):
        self._hold += 1
        try:
            yield
        finally:
            self._hold -= 1

    def set(self, **values: Any) -> None:
        """Set several controls at once, then replan once. Unknown names raise ParameterError
        (a programming error, not a user value); a value a Dropdown does not offer shows a
        message; an h outside the slider's range widens it (so that a bad h is said, not clamped).
        Returns None, so that a notebook cell ending with it does not show the app again."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ParameterError(f"unknown controls {sorted(unknown)}; known: {sorted(self.controls)}")
        bad = None
        # the model first: choosing one resets the skew to its default
        ordered = sorted(values.items(), key=lambda kv: kv[0] != "routing_model")
        with self._held():
            for k, v in ordered:
                try:
                    if k == "h":
                        self._fit_h_slider(v)
                    self.controls[k].value = v
                except Exception as e:  # traitlets TraitError: e.g. a target the selector does not offer
                    bad = f"{k}={v!r}: not offered here ({e})"
        self.refresh()
        if bad:
            self._show_message(bad)

    def _fit_h_slider(self, v) -> None:
        """The slider's default range, widened to hold ``v`` (an int) when it lies outside."""
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            s, (lo, hi, _) = self.controls["h"], H_RANGE
            s.min, s.max = min(lo, int(v)), max(hi, int(v))  # always around [lo, hi]: min <= max throughout

    def _on_model(self, model: str) -> None:
        """A new routing model: its default skew, and only the selectors it uses enabled."""
        param = ROUTING_MODELS.get(model)
        if param is not None:
            with self._held():
                self.controls["skew"].value = param[1]
        self._sync_model_widgets()

    def _sync_model_widgets(self) -> None:
        model = self.controls["routing_model"].value
        self.controls["skew"].disabled = ROUTING_MODELS.get(model) is None
        self.controls["trace"].disabled = model != "trace"
        param = ROUTING_MODELS.get(model)
        self.controls["skew"].description = f"skew ({param[0]})" if param else "skew (n/a)"

    def _on_change(self, change) -> None:
        if change["owner"] is self.controls["routing_model"]:
            self._on_model(change["new"])
        if not self._hold:
            self.refresh()

    def make_spec(self) -> CaseSpec:
        """The CaseSpec of the current values. Raises SpecError (a case field) or ParameterError
        (floor, warmup, loops) with a readable message."""
        v = self.values()
        for k in _INT_FIELDS:
            if not isinstance(v[k], int):
                error = SpecError if k in _CASE_FIELDS else ParameterError
                raise error(f"{k}={v[k]!r}: must be an integer")
        routing = routing_string(v["routing_model"], v["skew"], v["trace"])
        spec = CaseSpec(pes=v["pes"], bs=v["bs"], h=v["h"], topk=v["topk"], expert_per_pe=v["expert_per_pe"],
                        dtype=v["dtype"], seed=v["seed"], routing=routing)
        for k, lo in (("min_sdma_bytes", 0), ("warmup", 0), ("loops", 1)):
            if v[k] < lo:
                raise ParameterError(f"{k}={v[k]}: must be an int >= {lo}")
        return spec

    def _show_message(self, text: str, kind: str = "error") -> None:
        self.message = text
        colour = {"error": "#b00020", "info": "#0b5394"}[kind]
        self.message_html.value = (f"<div class='cl-message' style='border-left:4px solid {colour};padding:4px 8px;"
                                   f"color:{colour}'>{html.escape(text)}</div>") if text else ""

    def _case_for(self, spec: CaseSpec) -> Case:
        """The drawn routing for ``spec``, reused while only bytes-per-row change (skewed routings
        draw their routing independently of h and dtype, uniform does not)."""
        uniform = parse_routing(spec.routing).name == "uniform"
        key = (spec.pes, spec.bs, spec.topk, spec.expert_per_pe, spec.routing, spec.seed, spec.masked_fraction,
               spec.dtype, spec.h if uniform else None)
        if key != self._case_key:
            self._case, self._case_key = make_case(spec), key
        return self._case

    def refresh(self) -> Plan | None:
        """Validate the values, replan, redraw the plan view and the modelled panel; runs nothing.

        Returns the new Plan, or None (with ``message`` set) when the values are invalid.
        """
        t0 = time.perf_counter()
        self.plan = None
        self.spec = None
        self.sdma_table = self.sdma_table.iloc[0:0]
        self.run_title.value = (f"<h4 class='cl-h'>Run on {html.escape(str(self.controls['target'].value))} "
                                "<span class='cl-measured-tag'>measured</span></h4>")
        try:
            spec = self.make_spec()
            if parse_routing(spec.routing).name == "uniform":
                x_bytes = spec.pes * spec.bs * spec.row_bytes
                if x_bytes > self.max_uniform_x_bytes:
                    raise CapacityError(
                        f"routing 'uniform' follows the reference recipe, which draws x before the routing: "
                        f"{_fmt_bytes(x_bytes)} of x at this shape, over the app's limit of "
                        f"{_fmt_bytes(self.max_uniform_x_bytes)}; pick a skewed routing (it never draws x to plan) "
                        f"or a smaller shape")
            case = self._case_for(spec)
            p = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, "doubleplane",
                            self.controls["min_sdma_bytes"].value)
        except (SpecError, ParameterError, CapacityError) as e:
            self._show_message(f"Cannot plan this case: {e}. Nothing was run.")
            self.run_button.disabled = True
            self.suggest_button.disabled = True
            self.plan_summary.value = ""
            self.sdma_html.value = ""
            # the plan view showed another case: cleared, never saved as this one's
            self.plan_figures.value = ""
            self.figures.pop("segment_map")
            self.figures.pop("plane_bytes")
            self._clear_modelled("no plan for these inputs")
            self._sync_run_views()
            return None
        self.spec, self.plan = spec, p
        self.run_button.disabled = self._running
        self.suggest_button.disabled = False
        self._show_message("")
        seg = p.segments
        self.sdma_table = seg.loc[seg["plane"] == "SDMA", ["pe", "segment", "local_expert", "src_rank",
                                                           "token_count", "bytes"]].reset_index(drop=True)
        self._draw_plan(spec, p)
        self._update_modelled()
        self._sync_run_views()
        self.replans += 1
        self.plan_seconds = time.perf_counter() - t0
        return p

    def _sync_run_views(self) -> None:
        """Show the last Run's verdict, counters and comparison as current while the inputs are
        those it ran with (and they can be planned); otherwise mark them stale and take the
        comparison out of :attr:`figures`."""
        if self._run_values is None:
            self.stale_views = []
            return
        if self.plan is not None and self.values() == self._run_values:
            self.stale_views = []
            self.verdict_html.value = self._run_verdict
            self.counters_html.value = self._run_counters
            self.compare_html.value = self._run_compare_svg
            self.figures.put("compare", self._run_figure)
            return
        self.stale_views = ["verdict", "counters", "compare"]
        self.figures.pop("compare")
        changed = [k for k, v in self.values().items() if self._run_values.get(k) != v]
        why = ("the inputs cannot be planned" if self.plan is None else
               "the inputs changed since (" + ", ".join(changed) + ")")
        run = len(self.history)
        self.verdict_html.value = (
            f"<div class='cl-stale' style='border-left:4px solid #888;padding:4px 8px;color:#555'><b>Stale</b>: the "
            f"verdict, counters and comparison below are from run {run}; {html.escape(why)}. Press Run for the "
            f"current inputs.</div><div style='opacity:0.45'>{self._run_verdict}</div>")
        self.counters_html.value = f"<div style='opacity:0.45'>{self._run_counters}</div>"
        self.compare_html.value = f"<div class='cl-stale-figure' style='opacity:0.35'>{self._run_compare_svg}</div>"

    def _clear_run_views(self) -> None:
        """A Run failed: nothing of the run before it describes these inputs."""
        self._run_values, self._run_verdict, self._run_counters, self._run_figure = None, "", "", None
        self._run_compare_svg = ""
        self.stale_views = []
        self.counters_html.value = ""
        self.compare_html.value = ""
        self.figures.pop("compare")

    def _draw_plan(self, spec: CaseSpec, p: Plan) -> None:
        t = p.totals
        mte, sdma = int(t["mte_bytes"].sum()), int(t["sdma_bytes"].sum())
        avg = t["remote_avg_segment_bytes"]
        self.plan_summary.value = (
            f"<div class='cl-note' style='font-size:13px;color:#222'><b>{spec.case_id}</b>, routing "
            f"<code>{html.escape(spec.routing)}</code>, {spec.dtype}: MTE would carry {_fmt_bytes(mte)}, SDMA "
            f"{_fmt_bytes(sdma)} ({100 * sdma / max(mte + sdma, 1):.1f} %) in {len(self.sdma_table)} SDMA segments; "
            f"remote average segment {_fmt_bytes(avg.min())} to {_fmt_bytes(avg.max())} per PE "
            f"(SDMA floor {p.min_sdma_bytes:,} B).</div>")
        limit = 40
        shown = self.sdma_table.head(limit)
        more = f"<p>... and {len(self.sdma_table) - limit} more</p>" if len(self.sdma_table) > limit else ""
        self.sdma_html.value = (_table(shown, {c: c for c in shown.columns}, "cl-sdma-table") + more) if len(shown) \
            else "<p>none: every segment goes by MTE</p>"
        # both figures in one value: they change together in the page
        self.plan_figures.value = svg.segment_map_svg(p, spec.dtype) + svg.plane_bytes_svg(p)
        self.figures.set("segment_map", lambda: plots.segment_map(p))
        self.figures.set("plane_bytes", lambda: plots.plane_bytes_plot(p))

    # ------------------------------------------------------------------ modelled time
    def _model(self) -> NpuModel:
        name = self.model_select.value
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
        """Modelled comm_only of the slowest PE (us): stage 1 only, which is all comm_only holds."""
        comm, _ = stage1(rows.counts, mask, np.arange(rows.pes), rows.pes, rows.block_dim, rows.epp,
                         rows.row_bytes, model)
        return float(comm.max())

    def _model_changed(self) -> None:
        if self.plan is not None:
            self._update_modelled()

    def _curve_key(self, model: NpuModel):
        return (self._rows_key, self.spec.h, self.spec.itemsize, model.name)

    def _update_modelled(self) -> None:
        model = self._model()
        rows = self._model_rows(model)
        floor = int(self.controls["min_sdma_bytes"].value)
        ckey = (self._curve_key(model), "classic")
        if ckey not in self._classic_cache:
            self._classic_cache = {ckey: self._comm_only(rows, rows.sdma("classic", 0), model)}
        classic = self._classic_cache[ckey]
        dual = self._comm_only(rows, rows.sdma("doubleplane", floor), model)
        key = self._curve_key(model)
        if self._suggestion_key != key:
            self.suggestion, self._suggestion_key = None, None
            self.use_button.disabled = True
            self.suggest_status.value = ""
            if rows.pes * rows.counts.shape[1] <= AUTO_SUGGEST_SEGMENTS:
                self.suggestion, self._suggestion_key = model_suggest(rows, model, "comm_only"), key
        self.modelled = {"model": model.name, "caption": model.caption(), "floor": floor, "classic_us": classic,
                         "doubleplane_us": dual, "speedup": classic / dual if dual > 0 else float("nan"),
                         "curve": self.suggestion is not None}
        self._draw_modelled()

    def _draw_modelled(self) -> None:
        m, model = self.modelled, self._model()
        s = self.suggestion
        best = int(s.best["threshold_bytes"]) if s is not None else None
        fig = svg.modelled_floors_svg(s.curve if s is not None else None, m["classic_us"], m["floor"],
                                      m["doubleplane_us"], m["caption"], best=best)
        faster = "faster" if m["speedup"] > 1 else "slower" if m["speedup"] < 1 else "as fast"
        line = (f"<div class='cl-modelled-line' style='font-size:13px'>At floor {m['floor']:,} B: modelled comm_only "
                f"<b>{m['doubleplane_us']:,.1f} us</b> with doubleplane, {m['classic_us']:,.1f} us with classic: "
                f"speed-up {m['speedup']:.3f} (doubleplane {faster}), <i>{html.escape(m['caption'])}</i>.</div>")
        if s is None:
            line += ("<div class='cl-note'>The curve over every floor is not computed for this size at each change: "
                     "press <b>Suggest</b> (about 1-3 s at 64 PEs).</div>")
        self.modelled_html.value = line + fig
        self.assumed_html.value = self._assumed_table(model)

    @staticmethod
    def _assumed_table(model: NpuModel) -> str:
        rows = [{"parameter": p.name, "value": p.value, "unit": p.unit,
                 "where from": ("assumed: " + p.rationale) if p.assumed else p.source,
                 "range": f"{p.range[0]:g} - {p.range[1]:g}" if p.range else ""} for p in model.params.values()]
        df = pd.DataFrame(rows)
        table = _table(df, {c: c for c in df.columns}, "cl-params")
        return (f"<div class='cl-note'>{html.escape(model.caption())}. Source: {html.escape(model.path)}</div>"
                + table.replace("white-space: nowrap", ""))

    def _clear_modelled(self, why: str) -> None:
        self.modelled = {}
        self.suggestion, self._suggestion_key = None, None
        self.use_button.disabled = True
        self.suggest_status.value = ""
        self.modelled_html.value = f"<div class='cl-note'>Modelled time: {html.escape(why)}.</div>"

    def suggest(self) -> Suggestion | None:
        """Model comm_only at every floor where the plan of the current inputs changes
        (:func:`combine_lab.model.suggest.suggest`), draw the curve and name the best floor.
        Returns the Suggestion, or None when the inputs cannot be planned (``message`` says why).
        The button is disabled while it computes."""
        if self.plan is None or self.spec is None:
            self._show_message("Cannot suggest a floor: the current inputs cannot be planned. Nothing was modelled.")
            return None
        model = self._model()
        rows = self._model_rows(model)
        self.suggest_button.disabled = True
        self.use_button.disabled = True
        self.suggest_button.icon = "spinner"
        self.suggest_status.value = (f"<div class='cl-note'>Computing the modelled time at every floor where the plan "
                                     f"changes ({rows.pes} PEs, {rows.pes * rows.counts.shape[1]:,} segments)..."
                                     "</div>")
        t0 = time.perf_counter()
        try:
            s = model_suggest(rows, model, "comm_only")
        finally:
            self.suggest_button.disabled = False
            self.suggest_button.icon = "search"
        self.suggestion, self._suggestion_key = s, self._curve_key(model)
        self.modelled["curve"] = True
        b = s.best
        floor = int(b["threshold_bytes"])
        pick = "never SDMA (the classic plan)" if floor == NEVER else f"min_sdma_bytes = {floor:,} B"
        self.suggest_status.value = (
            f"<div class='cl-suggestion' style='font-size:13px'>Suggested floor: <b>{pick}</b>: modelled comm_only "
            f"{b['modelled_us']:,.1f} us, {b['speedup']:.3f} x classic, {int(b['sdma_segments'])} SDMA segments "
            f"({len(s.curve)} floors modelled in {time.perf_counter() - t0:.2f} s; {html.escape(s.caption)}).</div>")
        self.use_button.description = ("Use it: never SDMA" if floor == NEVER else f"Use it: floor {floor:,} B")
        self.use_button.disabled = False
        self._draw_modelled()
        return s

    def use_suggestion(self) -> int | None:
        """Set the floor control to the suggested floor (for "never SDMA": one byte above every
        segment the rule could pick) and replan; returns the floor set, or None without a current
        suggestion."""
        s = self.suggestion
        if s is None or self._suggestion_key is None or self.plan is None:
            return None
        floor = int(s.best["threshold_bytes"])
        if floor == NEVER:
            floor = int(s.curve["threshold_bytes"].max()) + 1
        self.set(min_sdma_bytes=floor)
        return floor

    # ------------------------------------------------------------------ run
    def _run_bytes(self, spec: CaseSpec) -> int:
        rows = spec.pes * spec.bs * spec.topk + 2 * spec.pes * spec.bs
        return rows * spec.row_bytes + spec.pes * window_geometry(spec)["window_bytes"]

    @staticmethod
    def _click_sent_at() -> float | None:
        """When the browser sent the click being handled, in the browser's clock (seconds): the date
        in the header of the kernel's current shell message, or None outside a kernel or without one."""
        try:
            from IPython import get_ipython
            kernel = getattr(get_ipython(), "kernel", None)
            parent = kernel.get_parent("shell") if kernel is not None else None
            if not parent or parent.get("msg_type") != "comm_msg":
                return None
            date = parent.get("header", {}).get("date")
            if isinstance(date, str):
                from datetime import datetime
                date = datetime.fromisoformat(date.replace("Z", "+00:00"))
            return date.timestamp() if date is not None else None
        except Exception:  # noqa: BLE001 - no kernel, another kernel's API: fall back to the time guard
            return None

    def _on_run_click(self, _button) -> None:
        """A click on Run. One run per request: a click while a run goes on starts nothing, nor
        does one the browser sent before the last run's results could be shown (the second click of
        a double-click, which the kernel queued behind the first run). The browser stamps each
        message: a click sent less than the last run's duration after the click that started it
        was sent while the button showed disabled, or before it could; both clocks are compared
        only with themselves. Without stamps (a click from Python), a click within
        ``click_guard_s`` of the last results counts as the rest of a double-click."""
        sent = self._click_sent_at()
        if self._running:
            self.ignored_clicks += 1
            return
        if sent is not None and self._run_click_sent is not None:
            if sent - self._run_click_sent < self._run_took:
                self.ignored_clicks += 1
                return
        elif time.monotonic() - self._run_done_at < self.click_guard_s:
            self.ignored_clicks += 1
            return
        self._run_click_sent = sent
        started = time.monotonic()
        self.run()
        self._run_took = time.monotonic() - started

    def run(self) -> "harness.Comparison | None":
        """Build if needed, run classic and doubleplane on the chosen target, check, plot, record.

        Returns the :class:`~combine_lab.harness.Comparison` (``{"classic": RunResult,
        "doubleplane": RunResult}``; a variant the target refuses is left out, with its reason in
        ``.refused``, and recorded as a REFUSED row), or None when the values are invalid, the
        case is too large for ``max_run_bytes``, or the run failed: then ``message`` says why
        and (for the first two) nothing was launched. The Run button is disabled from the start
        until the results (or the failure) are shown.
        """
        if self._running:
            return None
        plan_now = self.refresh()
        if plan_now is None or self.spec is None:
            return None
        spec = self.spec
        v = self.values()
        need = self._run_bytes(spec)
        if need > self.max_run_bytes:
            self._show_message(f"Not run: this case needs about {_fmt_bytes(need)} of case files and windows, over "
                               f"the app's limit of {_fmt_bytes(self.max_run_bytes)} (TuningApp(max_run_bytes=...)). "
                               "Nothing was launched.")
            return None
        prof_pe = "all" if spec.pes <= self.prof_all_max_pes else 0
        self._running = True
        self.run_button.disabled = True
        self.progress.value = 0
        try:
            try:
                self.status.value = f"building target {v['target']} (if needed)..."
                build_mod.build(v["target"])
                self.progress.value = 1
                launches = 2 * (spec.pes if prof_pe == "all" else 1) * (v["warmup"] + v["loops"])
                self.status.value = f"running classic and doubleplane ({launches} launches of {spec.pes} PEs)..."
                case = Case(spec, self._case.expert_ids, self._case.expert_scales)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a refusal is shown as a row with its reason, not a warning
                    runs = harness.compare(case, warmup=v["warmup"], loops=v["loops"], target=v["target"],
                                          min_sdma_bytes=v["min_sdma_bytes"], prof_pe=prof_pe,
                                          timeout_s=self.timeout_s)
                self.progress.value = 3
            except _RUN_ERRORS as e:
                self.status.value = "failed"
                self._show_message(f"Run failed: {type(e).__name__}: {e}")
                self._clear_run_views()
                self.verdict_html.value = (f"<p style='color:#b00020'><b>Run failed</b>: "
                                           f"{html.escape(type(e).__name__)}: {html.escape(str(e))}. No verdict for "
                                           "these inputs.</p>")
                return None
            self.status.value = "checking x_out and counters..."
            self.last_runs = runs
            self._record(runs, v)
            self.progress.value = 4
            self.status.value = "done"
            return runs
        finally:
            # only now, with the results (or the failure) shown, may Run be pressed again
            self._running = False
            self._run_done_at = time.monotonic()
            self.run_button.disabled = self.plan is None

    def _result_rows(self, runs, v: dict) -> list[ResultRow]:
        """The run's rows, in variant order: one per RunResult, one per refused variant."""
        refused = getattr(runs, "refused", {})
        rows = []
        for variant in ("classic", "doubleplane"):
            if variant in runs:
                rows.append(result_row(runs[variant]))
            elif variant in refused:
                rows.append(result_row(NotRun.of(self.spec, variant, v["target"], REFUSED, refused[variant],
                                                 v["min_sdma_bytes"])))
        return rows

    def _record(self, runs, v: dict) -> None:
        rows = self._result_rows(runs, v)
        lines = []
        for row in rows:
            res = runs.get(row.variant)
            name = {"classic": "classic (MTE only)", "doubleplane": "doubleplane (MTE + SDMA)"}[row.variant]
            if res is None:
                lines.append(f"<li><b>{name}</b>: <span style='color:#b35900'>{row.check}</span>: "
                             f"{html.escape(row.reason)}</li>")
                continue
            bad = [r for r, chk in enumerate(res.checks) if not chk.ok]
            mism = res.counter_mismatches()
            lines.append(f"<li class='cl-verdict-line'><b>{name}</b>: x_out "
                         + ("<span style='color:#1a7f37'>PASS on every PE</span>" if not bad else
                            f"<span style='color:#b00020'>FAIL on PE {bad}</span>")
                         + ("; counters = plan" if not mism else
                            "; counters differ from the plan: " + html.escape("; ".join(mism[:4])))
                         + "</li>")
        first = rows[0]
        self._run_verdict = (f"<p><b>{first.case_id}</b> {html.escape(first.routing)} on {first.target} "
                             f"(run {len(self.history) + 1}):</p><ul>{''.join(lines)}</ul>")
        frames = []
        for res in runs.values():
            pb = res.plane_bytes()
            if len(pb):
                frames.append(pb.reset_index().assign(variant=res.variant))
        if frames:
            counters = pd.concat(frames, ignore_index=True)[["variant", "pe", "mte_bytes", "sdma_bytes", "mte_puts",
                                                            "sdma_puts", "status_writes"]]
            self._run_counters = ("<p>Per-plane counters (last launch; bytes, puts):</p>"
                                  + _table(counters, {c: c for c in counters.columns}, "cl-counters"))
        else:
            self._run_counters = "<p>No per-plane counters on this target.</p>"
        fig = plots.compare_per_pe(runs)
        self._run_figure = fig
        self._run_compare_svg = plots.figure_svg(fig)
        number = len(self.history) + 1
        self._rows_data.extend({"run": number, **r.as_dict()} for r in rows)
        self.rows = pd.DataFrame(self._rows_data, columns=ROWS_COLUMNS)
        self._history_rows.append({"run": number, "case_id": first.case_id, "routing": first.routing,
                                   "dtype": first.dtype, "target": first.target,
                                   "min_sdma_bytes": v["min_sdma_bytes"], "warmup": v["warmup"], "loops": v["loops"],
                                   **compare_rows(rows)})
        self.history = pd.DataFrame(self._history_rows, columns=HISTORY_COLUMNS)
        self._run_values = dict(v)
        self._sync_run_views()
        hfig = plots.history_plot(self.history)
        self.figures.put("history", hfig)
        self.history_html.value = _table(self.history, HISTORY_SHOWN, "cl-history-table", _HISTORY_FORMAT)
        self.history_all_html.value = _table(self.history, {c: c for c in HISTORY_COLUMNS}, "cl-history-all")
        self.history_plot_html.value = plots.figure_svg(hfig)

    # ------------------------------------------------------------------ output
    def save_figures(self, out_dir, prefix: str = "tuning_") -> list:
        """Save the figures that describe the current inputs (:attr:`figures`) as
        ``<out_dir>/<prefix><view>.png``; returns the paths. A stale view (a plan that failed, a
        comparison from a Run with other inputs or one that failed) is not saved, and a file
        this method saved for it before is removed, so that the folder never holds it as current."""
        for name in ("segment_map", "plane_bytes", "compare", "history"):
            if name not in self.figures:
                Path(out_dir, f"{prefix}{name}.png").unlink(missing_ok=True)
        return [plots.save_figure(self.figures[name], out_dir, f"{prefix}{name}") for name in self.figures]
