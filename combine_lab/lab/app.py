"""The tuning app: ipywidgets over :class:`combine_lab.lab.tuning.TuningState`: controls to set a
case, a live plan view, modelled NPU time with a suggested SDMA floor, and a Run button that
compares both variants.

    from combine_lab.lab.app import TuningApp
    app = TuningApp()
    app                      # in a notebook: controls, plan view, modelled time, run panel

This module is the view, in pieces: the layout, the plan view and keeping across a reload here;
the controls in :mod:`.app_form` (grouped: case, routing, kernel, timing; the floor also in MiB and
on a log slider), the modelled panel in :mod:`.app_modelled`, the run panel in :mod:`.app_runs`,
the history (sort, filter, CSV, two Runs compared) in :mod:`.app_history`, Trace in
:mod:`.app_trace`, HTML pieces in :mod:`.app_html`, the browser-side part in :mod:`.app_bridge` with
the page's CSS and JavaScript as package files (``lab/static/``), and the kernel's process control
in :mod:`.server`. What is planned, modelled, run and kept, and every figure, is the state's
(:attr:`TuningApp.state`, no widgets, tested without ipywidgets); the figures the app shows inline
are the very drawings the notebook shows and :meth:`TuningApp.save_figures` saves (:mod:`.svg`,
:mod:`.plots`; the comparison and history drawn to the app's width).

A changed control is handed to the state, which replans at once and runs nothing; the page then
shows the new plan (segment map and plane bytes in one update), the modelled panel and, when
the inputs differ from those of the last Run, that Run's verdict, counters and comparison
marked stale. Every value that cannot be used is marked at its control (all of them at once,
each with its reason) and never changed: the number boxes are text, read exactly as typed.
**Suggest** computes the modelled curve over every floor for large cases (about 1-3 s at 64 PEs)
and gives the interval of floors that reach the best modelled time, or says that every floor
ties with never SDMA; **Use it** sets one. Every modelled number says "modelled", with the
assumed parameters listed once (in the figure and the parameters table); measured times (Run)
are labelled measured.

**Run** builds the target if needed and runs classic and doubleplane through the state
(:meth:`combine_lab.lab.tuning.TuningState.execute`, :func:`combine_lab.harness.compare`) on a
background thread, so that the kernel's main thread stays free: the plan view, the marks on bad
values and the stale marking follow every change made during a Run, and a note beside the button
says which values changed since it was pressed. The progress bar counts the launches of all PEs
(one per variant and profiled PE). A Run the app would refuse (a value that cannot be used, a
case over ``max_run_bytes``) is refused before any click: the button is disabled with the reason
beside it, and every message of a Run (refusal, failure, done) appears beside the button. A click
while a Run goes on starts nothing and says so beside the button; the second click of a
double-click (within ``click_guard_s`` of the first) starts nothing.

Keyboard: every control, disclosure (the SDMA segments, the model's parameters, the counters,
the whole history) and table is reachable with Tab; disclosures are buttons (Enter or Space
opens them), tables scroll with the arrow keys once focused; a focus ring of 3 px shows where
the focus is (WCAG 2.2 focus-visible); in JupyterLab the notebook's own shortcuts do not act on
keys pressed inside the app (so the arrow keys move a dropdown, not the active cell); after a
Run the focus goes back to Run. A small browser-side part (:class:`_Bridge`, an anywidget) does
what widgets cannot: that last part, telling the kernel the width the figures have (they are
drawn to fill it), keeping the settings and history of the page in the browser tab
(``keep_across_reload=True``: a reload shows them again, and stops a Run the reloaded page's
kernel was still making), and saying so on the page when the kernel stops answering, with a
reload button.

Everything a browser would do can be done from Python, which is how the tests drive it:
set ``app.controls[name].value`` (or :meth:`TuningApp.set`), call :meth:`TuningApp.run` (waits
for the Run), :meth:`TuningApp.start_run` (does not), :meth:`TuningApp.wait`,
:meth:`TuningApp.suggest`, :meth:`TuningApp.use_suggestion`, :meth:`TuningApp.trace`,
:meth:`TuningApp.export_history` or ``app.run_button.click()`` (the floor: ``app.floor_mib.value``,
``app.floor_slider.value``; the history: ``app.history_sort``, ``app.history_filter``,
``app.compare_a`` / ``app.compare_b``), then
read ``app.plan``, ``app.sdma_table``, ``app.modelled``, ``app.suggestion``, ``app.message``,
``app.history``, ``app.rows``, ``app.last_runs`` (the state's). Bad values never raise: every
problem is listed in one readable message (``app.message``) and nothing is planned or launched.
"""

from __future__ import annotations

import collections
import html
import json
import os
import threading
import time
import uuid
import weakref
from typing import Any

import ipywidgets as widgets

from ..errors import ParameterError
from ..run.capabilities import detect
from . import plots, svg  # noqa: F401 - svg: read through this module (app_mod.svg) by the tests
from .app_bridge import HEARTBEAT_AFTER_PING_S, HEARTBEAT_S, KERNEL_SILENT_S, css_html, make_bridge
from .app_form import CONTROL_GROUPS, CONTROLS, H_STEP, FormView
from .app_history import HISTORY_SHOWN, HistoryView
from .app_html import Disclosure, note, parse_number, table
from .app_modelled import ModelledView
from .app_runs import RunsView
from .app_sweep import SweepPanel
from .app_trace import TraceView
from .segments import segment_text
from .server import on_stop_signal, stop_other_kernel
from .tuning import HISTORY_COLUMNS, MODELS, ROUTING_MODELS, ROWS_COLUMNS, TuningState, format_bytes, routing_string

__all__ = ["ROUTING_MODELS", "routing_string", "TuningApp", "HISTORY_COLUMNS", "HISTORY_SHOWN", "ROWS_COLUMNS",
           "MODELS", "H_STEP", "STORAGE_KEY", "parse_number", "KERNEL_SILENT_S", "HEARTBEAT_S",
           "HEARTBEAT_AFTER_PING_S", "CONTROL_GROUPS", "CONTROLS"]

#: Where a page keeps its settings and history across a reload (the browser tab's sessionStorage).
STORAGE_KEY = "combine_lab.tuning_app"

#: Apps of this process that keep their state across a reload (a newer page stops their Run).
_KEPT_APPS: "weakref.WeakSet[TuningApp]" = weakref.WeakSet()


def _stop_runs_of_this_process(_signum=None, _frame=None) -> None:
    """SIGUSR1: a reloaded page's new kernel asks this one (the old page's) to stop its Run."""
    for app in list(_KEPT_APPS):
        app.stop_run("the page was reloaded: its new kernel took over")


class TuningApp(FormView, ModelledView, RunsView, HistoryView, TraceView):
    """Controls, plan view, modelled time and run panel for one combine case: a view of a
    :class:`~combine_lab.lab.tuning.TuningState`.

    Args:
        targets: targets offered by the target selector; default
            ``capabilities.detect().targets()`` ('cpu', plus 'npu' where it can run).
        max_uniform_x_bytes, max_run_bytes, prof_all_max_pes, timeout_s: the state's limits
            (:class:`~combine_lab.lab.tuning.TuningState`).
        model: the machine of the modelled-time panel (:data:`MODELS`).
        click_guard_s: a Run click this soon (s) after the click before it is the rest of a
            double-click, not a new request: ignored (the usual double-click interval, 0.5 s).
        keep_across_reload: keep the settings and history in the browser tab (sessionStorage,
            :data:`STORAGE_KEY`) and take them back when the page is reloaded (``combine-lab app``:
            each page has its own kernel); the new page's kernel then stops a Run the old one was
            still making. Off in a notebook, whose kernel outlives a reload anyway.
        **initial: starting values of the controls (names as in :attr:`controls`). An unknown
            name raises ParameterError.

    Attributes:
        state: the :class:`~combine_lab.lab.tuning.TuningState` shown; spec, plan, sdma_table,
            modelled, suggestion, message, history, rows, last_runs, figures, stale_views and
            replans are its.
        controls: dict name -> widget for pes, bs, h, topk, expert_per_pe, dtype, routing_model,
            skew, trace, seed, min_sdma_bytes, warmup, loops, target (the numbers are text boxes,
            read exactly as typed: :func:`parse_number`).
        model_select: the machine of the modelled panel (a2, a3).
        run_note: what the Run button would do, or why not, or what the last Run came to: beside the button.
        plan_seconds: the last replan's time (s): plan, both plan figures and the modelled panel.
        ignored_clicks: Run clicks that started nothing (a Run going on, or a double-click).
        events: the app's event log, the newest 1,000 as ``(monotonic s, kind, details)``: controls
            changed, Run clicks (and why one started nothing), Runs started and done, the Run
            button's state. With ``COMBINE_LAB_APP_EVENTS=FILE`` in the kernel's environment each
            event is also appended to FILE as a line (the browser tests print it when they fail).
        restored: what the last restore from the browser said ('' when nothing was restored).
        floor_mib, floor_slider, floor_bytes: the floor in MiB (a text box and a log slider, 1 KiB
            to 256 MiB) and its exact bytes beside them; they set ``min_sdma_bytes`` in whole bytes.
        history_sort, history_descending, history_filter, history_csv_html, compare_a, compare_b,
            history_compare_html: the history's sort, filter, CSV download and two Runs compared.
        trace_clock, trace_button, trace_note, trace_dir, trace_path: Trace (:meth:`trace`).
    """

    def __init__(self, targets: list[str] | None = None, *, max_uniform_x_bytes: int = 256 * 2 ** 20,
                 max_run_bytes: int = 2 * 2 ** 30, prof_all_max_pes: int = 8, timeout_s: float = 120.0,
                 model: str = "a3", click_guard_s: float = 0.5, keep_across_reload: bool = False, **initial: Any):
        unknown = set(initial) - set(CONTROLS)
        if unknown:
            raise ParameterError(f"unknown controls {sorted(unknown)}; known: {sorted(CONTROLS)}",
                                 parameter="initial", value=sorted(unknown), allowed=str(sorted(CONTROLS)))
        targets = list(targets) if targets is not None else detect().targets()
        t0 = time.perf_counter()
        self.state = TuningState(targets, max_uniform_x_bytes=max_uniform_x_bytes, max_run_bytes=max_run_bytes,
                                 prof_all_max_pes=prof_all_max_pes, timeout_s=timeout_s,
                                 model=model, **initial)  # a model not offered is said, like any bad value
        self.click_guard_s = click_guard_s
        self.ignored_clicks = 0
        self.events: collections.deque = collections.deque(maxlen=1000)
        self._events_file = os.environ.get("COMBINE_LAB_APP_EVENTS", "")
        self.plan_seconds = float("nan")
        self.keep_across_reload = keep_across_reload
        self.restored = ""
        self.instance = uuid.uuid4().hex
        self._last_click_at = -float("inf")
        self._click_note = ""
        self._shown_suggestion: Suggestion | None = None  # the one Suggest named (Use it applies to it)
        self._compare_svg: tuple[tuple, str] | None = None  # ((id of the compare figure, width), its SVG)
        self._hold = 0
        # one lock for the state and the widgets: the kernel's main thread (controls) and a Run's thread
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._request = None
        self._stop_reason = ""
        self._last_run_text = ""
        self._build_widgets()
        self._root = self._layout()
        self._push_values()
        self._render()
        self.plan_seconds = time.perf_counter() - t0
        if keep_across_reload:
            _KEPT_APPS.add(self)
            on_stop_signal(_stop_runs_of_this_process)
            self._save()

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
        with self._lock:
            self.state.max_run_bytes = value
            self._render()

    @property
    def running(self) -> bool:
        """True while a Run goes on (its thread has not shown its results yet)."""
        return self.state.running

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self) -> None:
        self._build_controls()
        wide = widgets.Layout(width="100%")
        self.message_html = widgets.HTML(layout=wide)
        self.message_html.add_class("cl-problems")
        self.plan_summary = widgets.HTML(layout=wide)
        self.plan_figures = widgets.HTML(layout=wide)  # segment map and plane bytes: one update, shown together
        self.plan_figures.add_class("cl-plan-figures")
        self.sdma_html = widgets.HTML(layout=wide)
        self.sdma_html.add_class("cl-sdma")
        self._build_segment_lookup()
        self._build_modelled_widgets()
        self._build_run_widgets()
        self._build_history_widgets()
        self._build_trace_widgets()
        self.bridge = make_bridge()
        if self.bridge is not None:
            self.bridge.key = STORAGE_KEY if self.keep_across_reload else ""
            self.bridge.observe(self._on_width, names="width")
            self.bridge.observe(self._on_restore, names="restore")
    def _layout(self) -> widgets.Widget:
        controls = self._controls_box()
        self.sdma_section = Disclosure("SDMA segments listed by the planner", self.sdma_html, "sdma")
        plan_box = widgets.VBox([widgets.HTML("<h4 class='cl-h'>Plan (nothing runs)</h4>"), self.plan_summary,
                                 self.plan_figures, self._segment_row(), self.segment_html, self.sdma_section.box],
                                layout=widgets.Layout(width="100%"))
        self.params_section = Disclosure("The model's parameters (values, units, where from)", self.assumed_html,
                                          "params")
        model_box = widgets.VBox([
            widgets.HTML("<h4 class='cl-h'>Modelled NPU time <span class='cl-modelled-tag'>modelled, not measured"
                         "</span></h4>"),
            self._model_row(),
            self.suggest_status, self.modelled_html, self.params_section.box], layout=widgets.Layout(width="100%"))
        self.counters_section = Disclosure("Per-plane counters of the last run", self.counters_html, "counters")
        self.history_all_section = Disclosure("History: all columns", self.history_all_html, "history-all")
        self.sweep = SweepPanel(self.state.values, lambda: self.state.spec)
        self.sweep_section = Disclosure("Sweep: this case over lists of PEs and tokens, here or on a cluster",
                                         self.sweep.box, "sweep")
        run_row = widgets.HBox([self.run_button, self.progress, self.status],
                               layout=widgets.Layout(flex_flow="row wrap", width="100%", align_items="center"))
        run_row.add_class("cl-run-row")
        run_box = widgets.VBox([self.run_title, run_row, self.run_note, self._trace_row(), self.trace_note,
                                self.verdict_html, self.counters_section.box, self.compare_html,
                                widgets.HTML("<h4 class='cl-h'>History <span class='cl-measured-tag'>measured</span>"
                                             "</h4><div class='cl-note'>speed-up = classic time / doubleplane time "
                                             "(above 1: doubleplane faster); times: comm_only, CoreMaxTime (us)</div>"),
                                *self._history_tools(), self.history_all_section.box, self.history_plot_html,
                                self.sweep_section.box],
                               layout=widgets.Layout(width="100%"))
        parts = [widgets.HTML(css_html()), controls, self.message_html, plan_box, model_box, run_box]
        if self.bridge is not None:
            parts.append(self.bridge)
        root = widgets.VBox(parts, layout=widgets.Layout(width="100%"))
        root.add_class("cl-app")
        return root

    def _model_row(self) -> widgets.Widget:
        row = widgets.HBox([self.model_select, self.suggest_button, self.use_button],
                           layout=widgets.Layout(flex_flow="row wrap", width="100%"))
        row.add_class("cl-model-row")
        return row

    @property
    def widget(self) -> widgets.Widget:
        """The whole app as one widget (controls, plan view, modelled time, run panel)."""
        return self._root

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self._root)

    def _on_width(self, change) -> None:
        """The page says how wide the app is: the figures are drawn to fill it."""
        with self._lock:
            if self.state.set_figure_width(int(change["new"]) - 4):
                self._render_plan()
                self._render_modelled()
                self._render_run_views()  # the comparison and the history, drawn to the new width
                self._render_history()

    # ------------------------------------------------------------------ kept across a reload
    def _save(self) -> None:
        """Hand the settings and history to the page, which keeps them in its tab."""
        if not self.keep_across_reload or self.bridge is None:
            return
        data = self.state.snapshot()
        data.update(app=self.instance, pid=os.getpid(), running=bool(self.state.running))
        self.bridge.stored = json.dumps(data)

    def _on_restore(self, change) -> None:
        """The page (reloaded) gives back what an earlier page of this tab kept: its settings and
        history come back, and a Run its kernel was still making is stopped."""
        if not self.keep_across_reload or not change["new"]:
            return
        try:
            data = json.loads(change["new"])
        except ValueError:
            return
        if not isinstance(data, dict) or data.get("app") == self.instance:
            return  # our own, as the page re-rendered
        with self._lock:
            if self.state.running:
                return
            self.state.restore(data)
            self._push_values()
            self._render()
            self._render_history()
            runs = len(self.state.history)
            self.restored = (f"Settings and {runs} run{'s' if runs != 1 else ''} of history kept from before the "
                             "reload (the last run's verdict and counters are not: press Run for them).")
            stopped = stop_other_kernel(data) if data.get("running") else ""
            self._last_run_text = note(html.escape(self.restored + (" " + stopped if stopped else "")))
            self._render_run_state()
            self._save()

    # ------------------------------------------------------------------ rendering
    def _render(self) -> None:
        """Show the state: marks and message, plan, modelled panel, run views, Run and its note."""
        st = self.state
        self._mark_problems()
        self._show_message(st.message if st.plan is None else "")
        self.run_title.value = (f"<h4 class='cl-h'>Run on {html.escape(str(st.values()['target']))} "
                                "<span class='cl-measured-tag'>measured</span></h4>")
        self.suggest_button.disabled = st.plan is None
        self._render_plan()
        self._render_modelled()
        self._render_run_views()
        self._render_run_state()

    def _show_message(self, text: str, kind: str = "error") -> None:
        colour = {"error": "#b00020", "info": "#0b5394"}[kind]
        self.message_html.value = (f"<div class='cl-message' role='status' style='border-left:4px solid {colour};"
                                   f"padding:4px 8px;color:{colour}'>{html.escape(text)}</div>") if text else ""

    def _build_segment_lookup(self) -> None:
        """One segment of the plan by its (PE, local_expert, src_rank) and why the rule sent it by its
        plane (:func:`~combine_lab.lab.segments.segment_text`): the segment map's cells, by keyboard."""
        style = {"description_width": "initial"}
        self.segment_pick = {n: widgets.Dropdown(options=[0], value=0, description=label, style=style,
                                                 layout=widgets.Layout(width=w))
                             for n, label, w in (("pe", "segment of PE", "160px"), ("local_expert", "local_expert",
                                                                                         "150px"),
                                                 ("src_rank", "src_rank", "130px"))}
        for n, w in self.segment_pick.items():
            w.add_class(f"cl-segment-{n}")
            w.observe(self._on_segment_pick, names="value")
        self.segment_html = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.segment_html.add_class("cl-segment-text")

    def _segment_row(self) -> widgets.Widget:
        row = widgets.HBox(list(self.segment_pick.values()), layout=widgets.Layout(flex_flow="row wrap",
                                                                                   width="100%"))
        row.add_class("cl-segment-row")
        return row

    def _on_segment_pick(self, _change) -> None:
        if not self._hold:
            with self._lock:
                self._render_segment()

    def _render_segment(self) -> None:
        p = self.state.plan
        if p is None:
            self.segment_html.value = ""
            return
        sizes = {"pe": p.pes, "local_expert": p.expert_per_pe, "src_rank": p.pes}
        with self._held():
            for n, w in self.segment_pick.items():
                if len(w.options) != sizes[n]:
                    keep = w.value if w.value is not None and w.value < sizes[n] else 0
                    w.options = list(range(sizes[n]))
                    w.value = keep
        v = {n: int(w.value) for n, w in self.segment_pick.items()}
        self.segment_html.value = (f"<div class='cl-note cl-segment-why' role='status'>"
                                   f"{html.escape(segment_text(p, v['pe'], v['local_expert'], v['src_rank']))}</div>")

    def _render_plan(self) -> None:
        st, p, spec = self.state, self.state.plan, self.state.spec
        if p is None:  # the plan view showed another case: cleared, never shown as this one's
            self.plan_summary.value = self.sdma_html.value = self.plan_figures.value = ""
            self.sdma_section.set_title("SDMA segments listed by the planner")
            self._render_segment()
            return
        t = p.totals
        mte, sdma = int(t["mte_bytes"].sum()), int(t["sdma_bytes"].sum())
        avg = t["remote_avg_segment_bytes"]
        calls = int(t["sdma_calls"].sum())
        share = (f"SDMA {format_bytes(sdma)} ({100 * sdma / max(mte + sdma, 1):.1f} %) in {len(st.sdma_table)} SDMA "
                 f"segments, {calls:,} SDMA call{'s' if calls != 1 else ''}" if sdma
                 else f"nothing by SDMA ({plots.NO_SDMA_CASE})")
        self.plan_summary.value = (
            f"<div class='cl-note' style='font-size:13px;color:#222'><b>{spec.case_id}</b>, routing "
            f"<code>{html.escape(spec.routing)}</code>, {spec.dtype}: MTE would carry {format_bytes(mte)}, "
            f"{html.escape(share)}; remote average segment {format_bytes(avg.min())} to {format_bytes(avg.max())} per PE "
            f"(SDMA floor {p.min_sdma_bytes:,} B); kernel settings <code>{html.escape(p.settings.label)}</code>"
            f"{self._settings_note(p.settings)}.</div>")
        limit = 40
        shown = st.sdma_table.head(limit)
        more = f"<p>... and {len(st.sdma_table) - limit} more</p>" if len(st.sdma_table) > limit else ""
        self.sdma_html.value = (table(shown, {c: c for c in shown.columns}, "cl-sdma-table", label="SDMA segments")
                                + more) if len(shown) else "<p>none: every segment goes by MTE</p>"
        self.sdma_section.set_title(f"SDMA segments listed by the planner ({len(st.sdma_table)})")
        # both figures in one value: they change together in the page
        self.plan_figures.value = st.figures["segment_map"].svg + st.figures["plane_bytes"].svg
        self._render_segment()

    @staticmethod
    def _settings_note(settings) -> str:
        """What the kernel settings change, beside the plan (docs/variants.md): never which plane a segment takes."""
        if settings.is_reference:
            return " (one core per source rank, one SDMA call per row)"
        parts = []
        if settings.segment:
            parts.append("doubleplane lays the receiver's window out by expert: one SDMA call per contiguous chunk of "
                         "a segment")
        if settings.cores_per_rank != 1:
            parts.append(f"{settings.cores_per_rank} AIV cores per source rank, each sending a chunk of every segment")
        return (": " + "; ".join(parts) + ". The planes (the segment map) are the rule's, the same for every setting; "
                "classic runs without the segment layout")

    # ------------------------------------------------------------------ output
    def save_figures(self, out_dir, prefix: str = "tuning_") -> list:
        """Save the figures that describe the current inputs as ``<out_dir>/<prefix><view>.png``
        (:meth:`combine_lab.lab.tuning.TuningState.save_figures`: the drawings the app shows);
        returns the paths. A stale view is not saved, and a file saved for it before is removed."""
        return self.state.save_figures(out_dir, prefix)

