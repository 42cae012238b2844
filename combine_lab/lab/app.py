"""The tuning app: ipywidgets over :class:`combine_lab.lab.tuning.TuningState`: controls to set a
case, a live plan view, modelled NPU time with a suggested SDMA floor, and a Run button that
compares both variants.

    from combine_lab.lab.app import TuningApp
    app = TuningApp()
    app                      # in a notebook: controls, plan view, modelled time, run panel

This module is the view: widgets, layout, CSS, event wiring and rendering to HTML. What is
planned, modelled, run and kept, and every figure, is the state's (:attr:`TuningApp.state`,
no widgets, tested without ipywidgets); the figures the app shows inline are the very drawings
the notebook shows and :meth:`TuningApp.save_figures` saves (:mod:`.svg`, :mod:`.plots`).

A changed control is handed to the state, which replans at once and runs nothing; the page then
shows the new plan (segment map and plane bytes in one update), the modelled panel and, when
the inputs differ from those of the last Run, that Run's verdict, counters and comparison
marked stale. **Suggest** computes the modelled curve over every floor for large cases (about
1-3 s at 64 PEs) and offers to set the floor to the best one. Every modelled number says
"modelled on ...", with the assumed parameters; measured times (Run) are labelled measured.

**Run** builds the target if needed and runs classic and doubleplane through the state
(:meth:`combine_lab.lab.tuning.TuningState.execute`, :func:`combine_lab.harness.compare`),
then shows the x_out verdict, per-plane counters, per-PE times and the history. The button stays
disabled until the run's results are shown, and a click that the browser sent while a run was
going (the second click of a double-click, queued behind the first run) starts nothing. A variant
the target refuses (doubleplane on an NPU with CANN older than 9.0.0) shows as REFUSED with its
reason, and classic still runs.

Everything a browser would do can be done from Python, which is how the tests drive it:
set ``app.controls[name].value`` (or :meth:`TuningApp.set`), call :meth:`TuningApp.run`,
:meth:`TuningApp.suggest`, :meth:`TuningApp.use_suggestion` or ``app.run_button.click()``, then
read ``app.plan``, ``app.sdma_table``, ``app.modelled``, ``app.suggestion``, ``app.message``,
``app.history``, ``app.rows``, ``app.last_runs`` (the state's). Bad values never raise: every
problem is listed in one readable message (``app.message``) and nothing is planned or launched.
"""

from __future__ import annotations

import contextlib
import html
import time
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd
from traitlets import TraitError

from ..errors import ParameterError, SpecError
from ..model.machines import NpuModel
from ..model.suggest import NEVER, Suggestion
from ..run.capabilities import detect
from . import plots, svg, tuning
from .tuning import (HISTORY_COLUMNS, MODELS, ROUTING_MODELS, ROWS_COLUMNS, RUN_ERRORS, RUN_INPUTS, TuningState,
                     format_bytes, routing_string)

__all__ = ["ROUTING_MODELS", "routing_string", "TuningApp", "HISTORY_COLUMNS", "HISTORY_SHOWN", "ROWS_COLUMNS",
           "MODELS", "H_RANGE"]

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
#: The h slider's range (elements per row); a value outside it widens it (a bad h is said, not clamped).
H_RANGE = (64, 16384, 64)
#: The controls, in the order shown (the state's values less the model, which has its own selector).
CONTROLS = RUN_INPUTS

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


_VARIANT_NAME = {"classic": "classic (MTE only)", "doubleplane": "doubleplane (MTE + SDMA)"}


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


def _note(text_html: str) -> str:
    return f"<div class='cl-note'>{text_html}</div>"


class TuningApp:
    """Controls, plan view, modelled time and run panel for one combine case: a view of a
    :class:`~combine_lab.lab.tuning.TuningState`.

    Args:
        targets: targets offered by the target selector; default
            ``capabilities.detect().targets()`` ('cpu', plus 'npu' where it can run).
        max_uniform_x_bytes, max_run_bytes, prof_all_max_pes, timeout_s: the state's limits
            (:class:`~combine_lab.lab.tuning.TuningState`).
        model: the machine of the modelled-time panel (:data:`MODELS`).
        click_guard_s: without the browser's time stamps (a click from Python), a Run click handled
            this soon after the last run's results were shown is the rest of a double-click (queued
            while the run went on), not a new request: ignored.
        **initial: starting values of the controls (names as in :attr:`controls`). An unknown
            name raises ParameterError.

    Attributes:
        state: the :class:`~combine_lab.lab.tuning.TuningState` shown; spec, plan, sdma_table,
            modelled, suggestion, message, history, rows, last_runs, figures, stale_views and
            replans are its.
        controls: dict name -> widget for pes, bs, h (a slider), topk, expert_per_pe, dtype,
            routing_model, skew, trace, seed, min_sdma_bytes, warmup, loops, target.
        model_select: the machine of the modelled panel (a2, a3).
        plan_seconds: the last replan's time (s): plan, both plan figures and the modelled panel.
        ignored_clicks: Run clicks that started nothing (a run going on, or a double-click).
    """

    def __init__(self, targets: list[str] | None = None, *, max_uniform_x_bytes: int = 256 * 2 ** 20,
                 max_run_bytes: int = 2 * 2 ** 30, prof_all_max_pes: int = 8, timeout_s: float = 120.0,
                 model: str = "a3", click_guard_s: float = 0.5, **initial: Any):
        unknown = set(initial) - set(CONTROLS)
        if unknown:
            raise ParameterError(f"unknown controls {sorted(unknown)}; known: {sorted(CONTROLS)}")
        targets = list(targets) if targets is not None else detect().targets()
        t0 = time.perf_counter()
        self.state = TuningState(targets, max_uniform_x_bytes=max_uniform_x_bytes, max_run_bytes=max_run_bytes,
                                 prof_all_max_pes=prof_all_max_pes, timeout_s=timeout_s,
                                 model=model, **initial)  # a model not offered is said, like any bad value
        self.click_guard_s = click_guard_s
        self.ignored_clicks = 0
        self.plan_seconds = float("nan")
        self._run_done_at = -float("inf")
        self._run_click_sent: float | None = None  # browser clock: the click that started the last run
        self._run_took = 0.0  # kernel clock: from that click to its results shown
        self._shown_suggestion: Suggestion | None = None  # the one Suggest named (Use it applies to it)
        self._compare_svg: tuple[int, str] | None = None  # (id of the compare figure, its SVG)
        self._hold = 0
        self._build_widgets()
        self._root = self._layout()
        self._push_values()
        self._render()
        self.plan_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------ the state's, read through
    targets = property(lambda self: self.state.targets)
    spec = property(lambda self: self.state.spec, doc="The CaseSpec of the current values, or None.")
    plan = property(lambda self: self.state.plan, doc="The doubleplane Plan shown, or None.")
    sdma_table = property(lambda self: self.state.sdma_table, doc="The SDMA segments listed (DataFrame).")
    modelled = property(lambda self: self.state.modelled, doc="The modelled comm_only of the inputs ({}: none).")
    suggestion = property(lambda self: self.state.suggestion, doc="The current Suggestion, or None.")
    message = property(lambda self: self.state.message, doc="The message shown ('' when none).")
    history = property(lambda self: self.state.history, doc="One row per completed Run (DataFrame).")
    rows = property(lambda self: self.state.rows, doc="One result row per variant of every Run (DataFrame).")
    last_runs = property(lambda self: self.state.last_runs, doc="The last Run's Comparison, or None.")
    figures = property(lambda self: self.state.figures, doc="The figure of each current view (name -> figure).")
    stale_views = property(lambda self: self.state.stale_views, doc="The run views shown marked stale.")
    replans = property(lambda self: self.state.replans, doc="How many times the values were planned.")

    @property
    def max_run_bytes(self) -> int:
        """A Run is refused above this many bytes of case files and windows (the state's)."""
        return self.state.max_run_bytes

    @max_run_bytes.setter
    def max_run_bytes(self, value: int) -> None:
        self.state.max_run_bytes = value

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self) -> None:
        style = {"description_width": "116px"}  # "min_sdma_bytes" in full
        lay = widgets.Layout(width="236px")

        def int_box(desc, value, tip):
            return widgets.IntText(value=value, description=desc, tooltip=tip, style=style, layout=lay)

        traces = list(self.state.traces)  # MODEL/DOMAIN/LAYER
        v = self.state.values()
        default_trace = v["trace"] if v["trace"] in traces else tuning.default_trace(traces)
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
            # the defaults first: the state's values (bad ones included) are pushed once they are all built
            "min_sdma_bytes": int_box("min_sdma_bytes", tuning.FIELDS["min_sdma_bytes"].default, "SDMA floor, bytes"),
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
        self.model_select = widgets.Dropdown(options=list(MODELS), value=v["model"] if v["model"] in MODELS else "a3",
                                             description="model", style={"description_width": "50px"},
                                             layout=widgets.Layout(width="150px"))
        self.model_select.add_class("cl-model-select")
        self.model_select.observe(lambda c: self._changed("model", c["new"]), names="value")
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

    # ------------------------------------------------------------------ values: widgets <-> state
    def values(self) -> dict:
        """Current control values by name (the state's, as set: never clamped)."""
        return {k: v for k, v in self.state.values().items() if k in CONTROLS}

    @contextlib.contextmanager
    def _held(self):
        self._hold += 1
        try:
            yield
        finally:
            self._hold -= 1

    def set(self, **values: Any) -> None:
        """Set several controls at once, then replan once. Unknown names raise ParameterError
        (a programming error, not a user value); a bad value (one a selector does not offer
        included) is kept by the state and said in the message, never clamped: an h outside the
        slider's range widens it. Returns None, so that a notebook cell ending with it does not
        show the app again."""
        unknown = set(values) - set(CONTROLS)
        if unknown:
            raise ParameterError(f"unknown controls {sorted(unknown)}; known: {sorted(CONTROLS)}")
        self._apply(values)

    def _apply(self, values: dict) -> None:
        t0 = time.perf_counter()
        self.state.set(**values)
        self._push_values()
        self._render()
        self.plan_seconds = time.perf_counter() - t0

    def _on_change(self, change) -> None:
        if self._hold:
            return
        name = next(k for k, w in self.controls.items() if w is change["owner"])
        self._changed(name, change["new"])

    def _changed(self, name: str, value) -> None:
        if not self._hold:
            self._apply({name: value})

    def _push_values(self) -> None:
        """Show the state's values in the widgets. A value a widget cannot hold (a target the
        selector does not offer, text in a number box) stays the state's: the message names it."""
        v = self.state.values()
        with self._held():
            for name, w in self.controls.items():
                if w.value == v[name]:
                    continue
                try:
                    if name == "h":
                        self._fit_h_slider(v[name])
                    w.value = v[name]
                except (TraitError, TypeError, ValueError):
                    pass
            if self.model_select.value != v["model"] and v["model"] in MODELS:
                self.model_select.value = v["model"]
        skew = self.state.skew_name()
        self.controls["skew"].disabled = skew is None
        self.controls["skew"].description = f"skew ({skew})" if skew else "skew (n/a)"
        self.controls["trace"].disabled = v["routing_model"] != "trace"

    def _fit_h_slider(self, v) -> None:
        """The slider's default range, widened to hold ``v`` (an int) when it lies outside."""
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            s, (lo, hi, _) = self.controls["h"], H_RANGE
            s.min, s.max = min(lo, int(v)), max(hi, int(v))  # always around [lo, hi]: min <= max throughout

    def make_spec(self):
        """The CaseSpec of the current values. Raises SpecError (or ParameterError, when only a
        run setting is wrong) naming every problem of the values at once."""
        spec, problems = self.state.check()
        if spec is None:
            case = {"pes", "bs", "h", "topk", "expert_per_pe", "dtype", "routing_model", "skew", "trace", "seed",
                    "case"}
            error = SpecError if any(p.name in case for p in problems) else ParameterError
            raise error("; ".join(map(str, problems)))
        return spec

    def refresh(self):
        """Check the values, replan, redraw the plan view and the modelled panel; runs nothing.
        Returns the new Plan, or None (with ``message`` set) when the values are invalid."""
        t0 = time.perf_counter()
        p = self.state.refresh()
        self._render()
        self.plan_seconds = time.perf_counter() - t0
        return p

    # ------------------------------------------------------------------ rendering
    def _render(self) -> None:
        """Show the state: message, plan, modelled panel, run views and buttons."""
        st = self.state
        self._show_message(st.message)
        self.run_title.value = (f"<h4 class='cl-h'>Run on {html.escape(str(st.values()['target']))} "
                                "<span class='cl-measured-tag'>measured</span></h4>")
        self.run_button.disabled = st.plan is None or st.running
        self.suggest_button.disabled = st.plan is None
        self._render_plan()
        self._render_modelled()
        self._render_run_views()

    def _show_message(self, text: str, kind: str = "error") -> None:
        colour = {"error": "#b00020", "info": "#0b5394"}[kind]
        self.message_html.value = (f"<div class='cl-message' style='border-left:4px solid {colour};padding:4px 8px;"
                                   f"color:{colour}'>{html.escape(text)}</div>") if text else ""

    def _render_plan(self) -> None:
        st, p, spec = self.state, self.state.plan, self.state.spec
        if p is None:  # the plan view showed another case: cleared, never shown as this one's
            self.plan_summary.value = self.sdma_html.value = self.plan_figures.value = ""
            return
        t = p.totals
        mte, sdma = int(t["mte_bytes"].sum()), int(t["sdma_bytes"].sum())
        avg = t["remote_avg_segment_bytes"]
        self.plan_summary.value = (
            f"<div class='cl-note' style='font-size:13px;color:#222'><b>{spec.case_id}</b>, routing "
            f"<code>{html.escape(spec.routing)}</code>, {spec.dtype}: MTE would carry {format_bytes(mte)}, SDMA "
            f"{format_bytes(sdma)} ({100 * sdma / max(mte + sdma, 1):.1f} %) in {len(st.sdma_table)} SDMA segments; "
            f"remote average segment {format_bytes(avg.min())} to {format_bytes(avg.max())} per PE "
            f"(SDMA floor {p.min_sdma_bytes:,} B).</div>")
        limit = 40
        shown = st.sdma_table.head(limit)
        more = f"<p>... and {len(st.sdma_table) - limit} more</p>" if len(st.sdma_table) > limit else ""
        self.sdma_html.value = (_table(shown, {c: c for c in shown.columns}, "cl-sdma-table") + more) if len(shown) \
            else "<p>none: every segment goes by MTE</p>"
        # both figures in one value: they change together in the page
        self.plan_figures.value = st.figures["segment_map"].svg + st.figures["plane_bytes"].svg

    def _render_modelled(self) -> None:
        st = self.state
        m, s = st.modelled, st.suggestion
        if not m:
            self._shown_suggestion = None
            self.use_button.disabled = True
            self.suggest_status.value = ""
            self.modelled_html.value = _note("Modelled time: no plan for these inputs.")
            self.assumed_html.value = ""
            return
        if s is None or s is not self._shown_suggestion:  # a new case, or one Suggest did not name
            self._shown_suggestion = None
            self.use_button.disabled = True
            self.suggest_status.value = ""
        faster = "faster" if m["speedup"] > 1 else "slower" if m["speedup"] < 1 else "as fast"
        line = (f"<div class='cl-modelled-line' style='font-size:13px'>At floor {m['floor']:,} B: modelled comm_only "
                f"<b>{m['doubleplane_us']:,.1f} us</b> with doubleplane, {m['classic_us']:,.1f} us with classic: "
                f"speed-up {m['speedup']:.3f} (doubleplane {faster}), <i>{html.escape(m['caption'])}</i>.</div>")
        if s is None:
            line += _note("The curve over every floor is not computed for this size at each change: "
                          "press <b>Suggest</b> (about 1-3 s at 64 PEs).")
        self.modelled_html.value = line + st.figures["modelled"].svg
        self.assumed_html.value = self._assumed_table(st.model())

    @staticmethod
    def _assumed_table(model: NpuModel) -> str:
        rows = [{"parameter": p.name, "value": p.value, "unit": p.unit,
                 "where from": ("assumed: " + p.rationale) if p.assumed else p.source,
                 "range": f"{p.range[0]:g} - {p.range[1]:g}" if p.range else ""} for p in model.params.values()]
        df = pd.DataFrame(rows)
        table = _table(df, {c: c for c in df.columns}, "cl-params")
        return (_note(f"{html.escape(model.caption())}. Source: {html.escape(model.path)}")
                + table.replace("white-space: nowrap", ""))

    def _verdict_html(self) -> str:
        v = self.state.verdict()
        if v is None:
            return ""
        lines = []
        for item in v["variants"]:
            if item["check"] not in ("PASS", "FAIL"):  # refused: its reason, no check
                lines.append(f"<li><b>{item['name']}</b>: <span style='color:#b35900'>{item['check']}</span>: "
                             f"{html.escape(item['reason'])}</li>")
                continue
            bad, mism = item["bad_pes"], item["mismatches"]
            lines.append(f"<li class='cl-verdict-line'><b>{item['name']}</b>: x_out "
                         + ("<span style='color:#1a7f37'>PASS on every PE</span>" if not bad else
                            f"<span style='color:#b00020'>FAIL on PE {bad}</span>")
                         + ("; counters = plan" if not mism else
                            "; counters differ from the plan: " + html.escape("; ".join(mism[:4])))
                         + "</li>")
        return (f"<p><b>{v['case_id']}</b> {html.escape(v['routing'])} on {v['target']} "
                f"(run {v['run']}):</p><ul>{''.join(lines)}</ul>")

    def _counters_html(self) -> str:
        c = self.state.counters()
        if c is None:
            return ""
        if not len(c):
            return "<p>No per-plane counters on this target.</p>"
        return "<p>Per-plane counters (last launch; bytes, puts):</p>" + _table(c, {k: k for k in c.columns},
                                                                               "cl-counters")

    def _compare_html(self) -> str:
        fig = self.state.compare_figure
        if fig is None:
            return ""
        if self._compare_svg is None or self._compare_svg[0] != id(fig):  # drawn once per Run
            self._compare_svg = (id(fig), plots.figure_svg(fig))
        return self._compare_svg[1]

    def _render_run_views(self) -> None:
        """The last Run's verdict, counters and comparison: as they are while the inputs are
        those it ran with, dimmed under a "Stale" line otherwise; a failed Run's reason."""
        st = self.state
        if st.run_error is not None and st.run_values is None:
            self.verdict_html.value = (f"<p style='color:#b00020'><b>Run failed</b>: {html.escape(st.run_error)}. "
                                       "No verdict for these inputs.</p>")
            self.counters_html.value = self.compare_html.value = ""
            return
        verdict, counters, compare = self._verdict_html(), self._counters_html(), self._compare_html()
        if not st.stale_views:
            self.verdict_html.value, self.counters_html.value, self.compare_html.value = verdict, counters, compare
            return
        self.verdict_html.value = (
            f"<div class='cl-stale' style='border-left:4px solid #888;padding:4px 8px;color:#555'><b>Stale</b>: the "
            f"verdict, counters and comparison below are from run {len(st.history)}; "
            f"{html.escape(st.stale_reason())}. Press Run for the current inputs.</div>"
            f"<div style='opacity:0.45'>{verdict}</div>")
        self.counters_html.value = f"<div style='opacity:0.45'>{counters}</div>"
        self.compare_html.value = f"<div class='cl-stale-figure' style='opacity:0.35'>{compare}</div>"

    def _render_history(self) -> None:
        st = self.state
        self.history_html.value = _table(st.history, HISTORY_SHOWN, "cl-history-table", _HISTORY_FORMAT)
        self.history_all_html.value = _table(st.history, {c: c for c in HISTORY_COLUMNS}, "cl-history-all")
        self.history_plot_html.value = plots.figure_svg(st.figures["history"]) if "history" in st.figures else ""

    # ------------------------------------------------------------------ modelled time
    def suggest(self) -> Suggestion | None:
        """Model comm_only at every floor where the plan of the current inputs changes
        (:meth:`combine_lab.lab.tuning.TuningState.suggest`), draw the curve and name the best floor.
        Returns the Suggestion, or None when the inputs cannot be planned (``message`` says why).
        The button is disabled while it computes."""
        st = self.state
        if st.plan is None:
            st.suggest()  # says why in the message
            self._show_message(st.message)
            return None
        pes, segments = st.suggest_size()
        self.suggest_button.disabled = True
        self.use_button.disabled = True
        self.suggest_button.icon = "spinner"
        self.suggest_status.value = _note(f"Computing the modelled time at every floor where the plan changes "
                                          f"({pes} PEs, {segments:,} segments)...")
        try:
            s = st.suggest()
        finally:
            self.suggest_button.disabled = False
            self.suggest_button.icon = "search"
        self._shown_suggestion = s
        b = s.best
        floor = int(b["threshold_bytes"])
        pick = "never SDMA (the classic plan)" if floor == NEVER else f"min_sdma_bytes = {floor:,} B"
        self.suggest_status.value = (
            f"<div class='cl-suggestion' style='font-size:13px'>Suggested floor: <b>{pick}</b>: modelled comm_only "
            f"{b['modelled_us']:,.1f} us, {b['speedup']:.3f} x classic, {int(b['sdma_segments'])} SDMA segments "
            f"({len(s.curve)} floors modelled in {st.suggest_seconds:.2f} s; {html.escape(s.caption)}).</div>")
        self.use_button.description = ("Use it: never SDMA" if floor == NEVER else f"Use it: floor {floor:,} B")
        self.use_button.disabled = False
        self._render_modelled()
        return s

    def use_suggestion(self) -> int | None:
        """Set the floor control to the suggested floor (for "never SDMA": one byte above every
        segment the rule could pick) and replan; returns the floor set, or None without a current
        suggestion."""
        floor = self.state.suggested_floor()
        if floor is not None:
            self.set(min_sdma_bytes=floor)
        return floor

    # ------------------------------------------------------------------ run
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
        if self.state.running:
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

    def _progress(self, step: int, text: str) -> None:
        self.progress.value = step
        self.status.value = text

    def run(self):
        """Build if needed, run classic and doubleplane on the chosen target, check, plot, record.

        Returns the :class:`~combine_lab.harness.Comparison` (``{"classic": RunResult,
        "doubleplane": RunResult}``; a variant the target refuses is left out, with its reason in
        ``.refused``, and recorded as a REFUSED row), or None when the values are invalid, the
        case is too large for ``max_run_bytes``, or the run failed: then ``message`` says why
        and (for the first two) nothing was launched. The Run button is disabled from the start
        until the results (or the failure) are shown.
        """
        st = self.state
        if st.running:
            return None
        request = st.prepare_run()
        if request is None:
            self._render()
            return None
        st.running = True
        self.run_button.disabled = True
        self.progress.value = 0
        try:
            try:
                runs = st.execute(request, self._progress)
            except RUN_ERRORS as e:
                st.fail_run(request, e)
                self.status.value = "failed"
                self._render()
                return None
            self._record(runs, request)
            self.progress.value = 4
            self.status.value = "done"
            return runs
        finally:
            # only now, with the results (or the failure) shown, may Run be pressed again
            st.running = False
            self._run_done_at = time.monotonic()
            self.run_button.disabled = st.plan is None

    def _record(self, runs, request) -> None:
        """Record the Run in the state and show its verdict, counters, comparison and history."""
        self.state.finish_run(request, runs)
        self._render_run_views()
        self._render_history()

    # ------------------------------------------------------------------ output
    def save_figures(self, out_dir, prefix: str = "tuning_") -> list:
        """Save the figures that describe the current inputs as ``<out_dir>/<prefix><view>.png``
        (:meth:`combine_lab.lab.tuning.TuningState.save_figures`: the drawings the app shows);
        returns the paths. A stale view is not saved, and a file saved for it before is removed."""
        return self.state.save_figures(out_dir, prefix)
