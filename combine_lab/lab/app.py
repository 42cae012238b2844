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
:meth:`TuningApp.suggest`, :meth:`TuningApp.use_suggestion` or ``app.run_button.click()``, then
read ``app.plan``, ``app.sdma_table``, ``app.modelled``, ``app.suggestion``, ``app.message``,
``app.history``, ``app.rows``, ``app.last_runs`` (the state's). Bad values never raise: every
problem is listed in one readable message (``app.message``) and nothing is planned or launched.
"""

from __future__ import annotations

import collections
import contextlib
import html
import json
import os
import signal
import threading
import time
import uuid
import weakref
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd
from traitlets import Int, TraitError, Unicode

from ..case.spec import DTYPES
from ..errors import ParameterError, SpecError
from ..model.machines import NpuModel
from ..model.suggest import Suggestion
from ..model.unknowns import RESOLUTION
from ..run.capabilities import detect
from . import plots, svg, tuning
from .app_sweep import SweepPanel, failure_html
from .tuning import (FIELDS, HISTORY_COLUMNS, MODELS, ROUTING_MODELS, ROWS_COLUMNS, RUN_ERRORS, RUN_INPUTS,
                     TuningState, format_bytes, routing_string)

__all__ = ["ROUTING_MODELS", "routing_string", "TuningApp", "HISTORY_COLUMNS", "HISTORY_SHOWN", "ROWS_COLUMNS",
           "MODELS", "H_STEP", "STORAGE_KEY", "parse_number"]

#: The history columns the app shows in its table (column -> heading); the others are one click
#: away ("all columns"), so that the table fits a JupyterLab column.
HISTORY_SHOWN = {"run": "run", "case_id": "case (bs, h, topk, E, pes), kernel settings", "routing": "routing",
                 "min_sdma_bytes": "SDMA floor", "comm_only_classic_us": "classic comm_only, median (us)",
                 "comm_only_doubleplane_us": "doubleplane comm_only, median (us)",
                 "comm_only_speedup_spread": "speed-up [min-max]", "comm_only_verdict": "verdict",
                 "sdma_share": "SDMA share", "check": "check", "counters_ok": "counters = plan"}
#: How the shown history writes its values (short, so that the table fits; "all columns" has them exact).
_HISTORY_FORMAT = {"case_id": lambda v: html.escape(str(v).removeprefix("shape_")),
                   "min_sdma_bytes": lambda v: html.escape(svg.floor_text(int(v))),
                   "comm_only_classic_us": lambda v: "-" if not np.isfinite(v) else f"{v:,.1f}",
                   "comm_only_doubleplane_us": lambda v: "-" if not np.isfinite(v) else f"{v:,.1f}",
                   "sdma_share": lambda v: "-" if not np.isfinite(v) else
                   "none (= classic)" if v == 0 else f"{100 * v:.1f} %"}
#: How far the arrow keys move h in its box (elements): the h of most models is a multiple of it.
H_STEP = 64
#: The controls, in the order shown (the state's values less the model, which has its own selector).
CONTROLS = RUN_INPUTS
#: Where a page keeps its settings and history across a reload (the browser tab's sessionStorage).
STORAGE_KEY = "combine_lab.tuning_app"
_NUMBER_FIELDS = tuple(n for n in CONTROLS if FIELDS[n].kind in ("int", "number"))
#: How long the page goes without the kernel's heartbeat before it says the kernel stopped (s). The
#: heartbeat comes from a thread of its own once a second (:data:`HEARTBEAT_S`), so a kernel busy on
#: its main thread (a Suggest at 64 PEs) still beats, and a dead one is said within 3-4.5 s.
KERNEL_SILENT_S = 3
#: How often the kernel's heartbeat thread tells the page it is alive (s).
HEARTBEAT_S = 1.0
#: How long after the page's last ping (every 2 s) the kernel goes on beating (s): a page that went
#: away stops pinging, and its kernel then goes idle, for voila's culler to end.
HEARTBEAT_AFTER_PING_S = 10.0

_CSS = """<style>
/* room for a focus ring (3 px, 2 px out) round full-width parts: the page's output area scrolls, so cuts it */
.cl-app { max-width: 100%; padding: 5px; box-sizing: border-box; }
.cl-app .cl-controls { display: flex; flex-flow: row wrap; gap: 2px 10px; }
.cl-app .cl-controls .widget-inline-hbox .widget-label { min-width: 0; }
.cl-app h4.cl-h { margin: 12px 0 4px 0; font-size: 14px; }
.cl-app .cl-note { color: #555; font-size: 12px; margin: 2px 0; }
/* an HTML widget is a flex row whose content would take the table's whole width: it may shrink, so the
   table's own box below is what scrolls */
.cl-app .widget-html, .cl-app .widget-html-content { min-width: 0; max-width: 100%; }
/* tables scroll inside their box, with a scrollbar that shows, and by keyboard once focused */
.cl-app .cl-scroll { overflow-x: auto; max-width: 100%; scrollbar-width: auto; scrollbar-color: #888 #eee; }
.cl-app .cl-scroll::-webkit-scrollbar { height: 12px; }
.cl-app .cl-scroll::-webkit-scrollbar-thumb { background: #888; border-radius: 6px; }
.cl-app .cl-scroll::-webkit-scrollbar-track { background: #eee; }
.cl-app table.cl-table { border-collapse: collapse; font-size: 12px; }
.cl-app table.cl-table th, .cl-app table.cl-table td { padding: 2px 7px; border-bottom: 1px solid #ddd;
  text-align: right; white-space: nowrap; }
.cl-app table.cl-table th { background: #f4f4f4; font-weight: 600; white-space: normal; vertical-align: bottom; }
.cl-app table.cl-history-table th { max-width: 96px; }
.cl-app table.cl-params td { white-space: normal; text-align: left; min-width: 4em; }
.cl-app table.cl-params td.cl-wide { min-width: 18em; }
.cl-app .cl-figure { margin: 4px 0; }
.cl-app .cl-modelled-tag { background: #fff4d6; border: 1px solid #e0b84a; border-radius: 3px; padding: 0 4px; }
.cl-app .cl-measured-tag { background: #e6f0fa; border: 1px solid #7aa7d6; border-radius: 3px; padding: 0 4px; }
/* a value that cannot be used: marked where it is typed */
.cl-app .cl-bad input, .cl-app .cl-bad select { border: 2px solid #b00020 !important; background: #fff3f4; }
.cl-app .cl-bad .widget-label { color: #b00020; }
/* and its reasons at the control, not only in a tooltip (data-reason: the bridge copies the tooltip) */
.cl-app .cl-controls .cl-bad { flex-wrap: wrap; height: auto; }
.cl-app .cl-controls .cl-bad::after { content: attr(data-reason); flex-basis: 100%; color: #b00020; font-size: 12px;
  line-height: 1.3; white-space: normal; margin: 1px 0 3px 0; }
/* ipywidgets' boxes scroll (overflow: auto): a focus ring 5 px outside a button or a table's box was cut
   at the box's edge, and content a few px over the box showed a spurious scrollbar. Tables and figures
   scroll in their own boxes (.cl-scroll), so the widget boxes need not. */
.cl-app.widget-box, .cl-app .widget-box, .cl-app .widget-html, .cl-app .widget-html-content { overflow: visible; }
/* WCAG 2.2 focus appearance: a 3 px ring in a colour with 3:1 contrast on white and on the widgets */
.cl-app :focus-visible, .cl-app input:focus, .cl-app select:focus {
  outline: 3px solid #1a4fa0 !important; outline-offset: 2px !important; box-shadow: none !important; }
.cl-app .cl-toggle { text-align: left; }
.cl-app .cl-run-note { font-size: 13px; }
.cl-app .cl-run-log { font-size: 12px; color: #333; background: #f7f7f7; padding: 4px 6px; margin: 4px 0;
  max-height: 16em; overflow: auto; white-space: pre-wrap; }
.cl-app .cl-bridge { display: none; }
.cl-dead-banner { border: 2px solid #b00020; background: #fff3f4; color: #5c0010; padding: 8px 12px; margin: 6px 0;
  font-size: 14px; }
/* the voila page's "loading" line goes once the app is there */
body:has(.cl-app) .cl-app-loading { display: none; }
</style>"""

#: The browser's part of the app: what widgets cannot do from the kernel (see the module docstring).
_BRIDGE_ESM = r"""
function render({ model, el }) {
  el.classList.add('cl-bridge');
  let root = null, timers = [], observers = [], lastPong = Date.now(), banner = null, wasFocused = false;
  const key = model.get('key');
  function setup() {
    root = el.closest('.cl-app');
    if (!root) return false;
    // JupyterLab's notebook shortcuts (arrows, A, B, D D ...) must not act on keys pressed in the app
    root.setAttribute('data-lm-suppress-shortcuts', 'true');
    // and the notebook's own keydown handling (JupyterLab 4.6 moves the active cell on ArrowDown even in a
    // <select>): keys pressed in the app stay in the app, their default actions kept; Escape and
    // Shift/Ctrl+Enter still reach the notebook (leave the app, run the cell)
    root.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' || (e.key === 'Enter' && (e.shiftKey || e.ctrlKey || e.metaKey || e.altKey))) return;
      e.stopPropagation();
    });
    // the width the figures have: they are drawn to fill it
    const ro = new ResizeObserver(() => {
      const w = Math.round(root.clientWidth);
      if (w > 0 && Math.abs(w - model.get('width')) > 8) { model.set('width', w); model.save_changes(); }
    });
    ro.observe(root); observers.push(ro);
    // after a Run the button comes back enabled: give it the focus it lost when it was disabled
    const watch = () => {
      const b = root.querySelector('.cl-run');
      if (!b) return;
      const mo = new MutationObserver(() => {
        if (b.disabled) { wasFocused = wasFocused || document.activeElement === b || document.activeElement === document.body; }
        else if (wasFocused) {
          wasFocused = false;
          const a = document.activeElement;
          if (!a || a === document.body || a === b) b.focus();
        }
      });
      mo.observe(b, { attributes: true, attributeFilter: ['disabled'] }); observers.push(mo);
      b.addEventListener('mousedown', () => { wasFocused = true; });
      b.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') wasFocused = true; });
    };
    watch();
    // each control's tooltip and, while it is marked, its reasons at the control (data-reason, drawn by the
    // CSS): ipywidgets 8 puts no tooltip of a described control in the page. The kernel sends them as
    // 'tips' (name -> [tooltip, reasons]); marks and tips may come in either order, so both are watched.
    const tips = () => {
      let t = {};
      try { t = JSON.parse(model.get('tips') || '{}'); } catch (e) { return; }
      for (const [name, [tip, why]] of Object.entries(t)) {
        const c = root.querySelector('.cl-control-' + name);
        if (!c) continue;
        const text = why || tip || '';
        for (const e of [c, c.querySelector('.widget-label')]) {
          if (!e) continue;
          if (text && e.getAttribute('title') !== text) e.setAttribute('title', text);
          else if (!text && e.hasAttribute('title')) e.removeAttribute('title');
        }
        const want = c.classList.contains('cl-bad') ? (why || '') : '';
        if ((c.getAttribute('data-reason') || '') !== want) {
          if (want) c.setAttribute('data-reason', want); else c.removeAttribute('data-reason');
        }
      }
    };
    // and every other widget's label without a tooltip says "null" on hover: no title there instead
    const nulls = () => root.querySelectorAll('[title="null"]').forEach((e) => e.removeAttribute('title'));
    tips(); nulls();
    model.on('change:tips', tips);
    const to = new MutationObserver(() => { tips(); nulls(); });
    to.observe(root, { subtree: true, attributes: true, attributeFilter: ['class', 'title'], childList: true });
    observers.push(to);
    // the arrow keys step a number box by its step (h: by H_STEP, as its tooltip says), like <input type=number>
    root.addEventListener('keydown', (e) => {
      if (e.key !== 'ArrowUp' && e.key !== 'ArrowDown') return;
      const box = e.target.closest && e.target.closest('.cl-number');
      if (!box || e.target.tagName !== 'INPUT') return;
      const step = Number(box.getAttribute('data-step') || (box.className.match(/cl-step-(\d+)/) || [])[1] || 0);
      const v = Number(e.target.value.trim());
      if (!step || !Number.isInteger(v)) return;
      e.preventDefault();
      e.target.value = String(v + (e.key === 'ArrowUp' ? step : -step));
      e.target.dispatchEvent(new Event('change', { bubbles: true }));
    }, true);  // capture: the text box's own keydown handler stops the event from bubbling
    return true;
  }
  if (!setup()) { const t = setInterval(() => { if (setup()) clearInterval(t); }, 100); timers.push(t); }
  // settings and history kept in this tab across a reload
  if (key) {
    try {
      const saved = window.sessionStorage.getItem(key);
      if (saved) { model.set('restore', saved); model.save_changes(); }
    } catch (e) { /* storage off: nothing kept */ }
    model.on('change:stored', () => {
      try { window.sessionStorage.setItem(key, model.get('stored')); } catch (e) { }
    });
  }
  // a kernel that stops answering is said on the page, with a reload
  // the kernel's heartbeat (a thread of its own, once a second) or its answer to a ping: it is alive
  model.on('msg:custom', (msg) => {
    if (msg && (msg.pong !== undefined || msg.alive !== undefined)) {
      lastPong = Date.now();
      if (banner) { banner.remove(); banner = null; if (root) root.removeAttribute('inert'); }
    }
  });
  const silent = model.get('silent_s') * 1000;
  let lastPing = 0;
  timers.push(setInterval(() => {
    if (Date.now() - lastPing > 2000) { lastPing = Date.now(); try { model.send({ ping: lastPing }); } catch (e) { } }
    if (Date.now() - lastPong > silent && !banner && root) {
      banner = document.createElement('div');
      banner.className = 'cl-dead-banner';
      banner.setAttribute('role', 'alert');
      banner.textContent = "The app's kernel has not answered for " + Math.round((Date.now() - lastPong) / 1000) +
        " s: it has stopped (or is stuck), so the controls are off. Reload the page for a new one. ";
      const b = document.createElement('button');
      b.textContent = 'Reload the page'; b.className = 'cl-reload';
      b.onclick = () => window.location.reload();
      banner.appendChild(b);
      // outside the app, which takes no input meanwhile (a value typed there would go nowhere)
      root.parentNode.insertBefore(banner, root);
      root.setAttribute('inert', '');
    }
  }, 500));
  return () => { timers.forEach(clearInterval); observers.forEach((o) => o.disconnect()); if (banner) banner.remove(); };
}
export default { render };
"""


def _make_bridge():
    """The anywidget of the browser's part, or None where anywidget is missing (the app works
    without it: no width, no keeping across a reload, no word when the kernel stops)."""
    try:
        import anywidget
    except ImportError:  # pragma: no cover - anywidget ships with the lab extra
        return None

    class _Bridge(anywidget.AnyWidget):
        """What the page does in the browser for the app (module docstring): width, storage,
        focus after Run, the notebook's shortcuts off inside the app, a word when the kernel stops."""
        _esm = _BRIDGE_ESM
        key = Unicode("").tag(sync=True)
        stored = Unicode("").tag(sync=True)
        restore = Unicode("").tag(sync=True)
        width = Int(0).tag(sync=True)
        silent_s = Int(KERNEL_SILENT_S).tag(sync=True)
        tips = Unicode("{}").tag(sync=True)  # JSON: control name -> [tooltip, reasons it is marked ('')]

    bridge = _Bridge()
    # the tests shorten it (COMBINE_LAB_KERNEL_SILENT_S): a person's page waits KERNEL_SILENT_S
    bridge.silent_s = int(os.environ.get("COMBINE_LAB_KERNEL_SILENT_S") or KERNEL_SILENT_S)
    bridge.last_ping = time.monotonic()

    def answer(w, content, buffers) -> None:
        if isinstance(content, dict) and "ping" in content:
            w.last_ping = time.monotonic()
            w.send({"pong": content.get("ping")})
    bridge.on_msg(answer)
    _start_heartbeat(bridge)
    return bridge


def _start_heartbeat(bridge) -> threading.Thread:
    """Tell the page once every :data:`HEARTBEAT_S` that this kernel is alive, from a daemon thread
    (ipykernel sends from any thread), while the page pings (within :data:`HEARTBEAT_AFTER_PING_S`
    of its last ping the main thread handled) and until the bridge is closed or collected: a dead
    kernel is then said within ``silent_s`` plus a beat, one busy on its main thread for up to
    :data:`HEARTBEAT_AFTER_PING_S` not at all. Every beat is kernel activity, so beating with no page
    there would keep voila's culler from ever ending the kernel of a closed page."""
    ref = weakref.ref(bridge)

    def beat() -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            b = ref()
            if b is None or getattr(b, "comm", None) is None:
                return
            if time.monotonic() - b.last_ping < HEARTBEAT_AFTER_PING_S:
                with contextlib.suppress(Exception):  # a closing comm: the next round ends the thread
                    b.send({"alive": time.time()})
            del b
    t = threading.Thread(target=beat, name="combine-lab-heartbeat", daemon=True)
    t.start()
    return t


def parse_number(text):
    """What a number box holds, read exactly: an int for an integer ("8192", "-64", " 12 "), a
    float for any other number ("1.5", "1e3"), else the text itself (a bad value the state names).
    Never rounded or clamped: "100.5" stays 100.5 (and is then said not to be an integer)."""
    if not isinstance(text, str):
        return text
    t = text.strip().replace("_", "")
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return text


def _number_text(v) -> str:
    """A value as its number box shows it."""
    if isinstance(v, (bool, np.bool_)):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}" if abs(float(v)) < 1e15 else repr(float(v))
    return "" if v is None else str(v)


_VARIANT_NAME = {"classic": "classic (MTE only)", "doubleplane": "doubleplane (MTE + SDMA)"}

#: Apps of this process that keep their state across a reload (a newer page stops their Run).
_KEPT_APPS: "weakref.WeakSet[TuningApp]" = weakref.WeakSet()


def _stop_runs_of_this_process(_signum=None, _frame=None) -> None:
    """SIGUSR1: a reloaded page's new kernel asks this one (the old page's) to stop its Run."""
    for app in list(_KEPT_APPS):
        app.stop_run("the page was reloaded: its new kernel took over")


def _cell(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return "-" if not np.isfinite(v) else f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    return html.escape(str(v))


def _table(df: pd.DataFrame, headings: dict[str, str], cls: str, fmt: dict | None = None, label: str = "",
           wide: tuple = ()) -> str:
    """A compact HTML table of ``df``'s ``headings`` columns (column -> heading); ``fmt``: column ->
    function writing a value (as HTML), else :func:`_cell`. The table sits in a box that scrolls
    sideways when it is wider than the page, reachable with Tab (``label`` names it) and scrolled
    with the arrow keys; ``wide``: columns that wrap their text at a readable width."""
    fmt = fmt or {}
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings.values())
    body = "".join("<tr>" + "".join(f"<td{' class=cl-wide' if c in wide else ''}>{fmt.get(c, _cell)(r[c])}</td>"
                                    for c in headings) + "</tr>" for r in df.to_dict("records"))
    name = html.escape(label or cls, quote=True)
    return (f"<div class='cl-scroll' tabindex='0' role='region' aria-label='{name}'>"
            f"<table class='cl-table {cls}'><tr>{head}</tr>{body}</table></div>")


def _speedup_spread(mid: float, lo: float, hi: float, repeats) -> str:
    """A Run's speed-up as the history shows it: "1.234 [1.10-1.31]" (median [min-max] over its
    repeats), the median alone after one repeat, "-" when nothing was compared."""
    if not np.isfinite(mid):
        return "-"
    if int(repeats) < 2 or not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{mid:.3f}"
    return f"{mid:.3f} [{lo:.2f}-{hi:.2f}]"


def _note(text_html: str) -> str:
    return f"<div class='cl-note'>{text_html}</div>"


class _Disclosure:
    """A section that opens and closes: a toggle button (Tab reaches it, Enter or Space opens
    it) over its content, which is hidden while closed. ``box`` is the widget to lay out."""

    def __init__(self, title: str, content: widgets.Widget, cls: str):
        self.title = title
        self.content = content
        self.button = widgets.ToggleButton(value=False, description=f"\u25b8 {title}", tooltip=f"show {title}",
                                           layout=widgets.Layout(width="auto", max_width="100%"))
        self.button.add_class("cl-toggle")
        self.button.add_class(f"cl-toggle-{cls}")
        content.layout = widgets.Layout(width="100%", display="none")  # its own: layouts may be shared
        self.button.observe(self._toggled, names="value")
        self.box = widgets.VBox([self.button, content], layout=widgets.Layout(width="100%"))
        self.box.add_class(f"cl-section-{cls}")

    def _toggled(self, change) -> None:
        self.content.layout.display = "" if change["new"] else "none"
        self.button.description = f"{chr(0x25be) if change['new'] else chr(0x25b8)} {self.title}"

    def set_title(self, title: str) -> None:
        self.title = title
        self.button.description = f"{chr(0x25be) if self.button.value else chr(0x25b8)} {title}"

    @property
    def open(self) -> bool:
        return bool(self.button.value)


class TuningApp:
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
    """

    def __init__(self, targets: list[str] | None = None, *, max_uniform_x_bytes: int = 256 * 2 ** 20,
                 max_run_bytes: int = 2 * 2 ** 30, prof_all_max_pes: int = 8, timeout_s: float = 120.0,
                 model: str = "a3", click_guard_s: float = 0.5, keep_across_reload: bool = False, **initial: Any):
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
        self.events: collections.deque = collections.deque(maxlen=1000)
        self._events_file = os.environ.get("COMBINE_LAB_APP_EVENTS", "")
        self.plan_seconds = float("nan")
        self.keep_across_reload = keep_across_reload
        self.restored = ""
        self.instance = uuid.uuid4().hex
        self._last_click_at = -float("inf")
        self._click_note = ""
        self._shown_suggestion: Suggestion | None = None  # the one Suggest named (Use it applies to it)
        self._compare_svg: tuple[int, str] | None = None  # (id of the compare figure, its SVG)
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
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGUSR1, _stop_runs_of_this_process)
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
        style = {"description_width": "116px"}  # "min_sdma_bytes" in full
        lay = widgets.Layout(width="236px")

        def number_box(name, tip, step=0):
            label = FIELDS[name].shown
            w = widgets.Text(value="", description=label, tooltip=tip, continuous_update=False, style=style,
                             layout=lay)
            w.add_class("cl-number")
            if step:
                w.add_class(f"cl-step-{step}")  # the arrow keys' step (the bridge reads it)
            return w

        traces = list(self.state.traces)  # MODEL/DOMAIN/LAYER
        v = self.state.values()
        default_trace = v["trace"] if v["trace"] in traces else tuning.default_trace(traces)
        c = {
            "pes": number_box("pes", "PEs (ranks)"),
            "bs": number_box("bs", "tokens per PE"),
            "h": number_box("h", f"hidden size, elements per row (arrow keys: +-{H_STEP})", step=H_STEP),
            "topk": number_box("topk", "experts per token"),
            "expert_per_pe": number_box("expert_per_pe", "experts per PE"),
            "dtype": widgets.Dropdown(options=list(DTYPES), value="int32_t", description="dtype",
                                      style=style, layout=lay),
            "routing_model": widgets.Dropdown(options=list(ROUTING_MODELS), value="zipf", description="routing",
                                              style=style, layout=lay),
            "skew": number_box("skew", "S for zipf, F for hot-expert and hot-rank"),
            "trace": widgets.Dropdown(options=traces, value=default_trace, description="trace", style=style,
                                      layout=widgets.Layout(width="352px")),
            "seed": number_box("seed", "case seed"),
            "min_sdma_bytes": number_box("min_sdma_bytes", "SDMA floor, bytes"),
            "warmup": number_box("warmup", "launches before profiling"),
            "loops": number_box("loops", "profiled launches"),
            "repeats": number_box("repeats", "paired runs of both variants: the spread"),
            "segment": widgets.Checkbox(value=False, description=FIELDS["segment"].shown, indent=False,
                                        tooltip="doubleplane only: the receiver's window laid out by expert, one "
                                                "SDMA call per contiguous segment (docs/variants.md)",
                                        layout=lay),
            "cores_per_rank": number_box("cores_per_rank", f"AIV cores per source rank, 1 to "
                                                           f"{self.state.cores_limit()} here (docs/variants.md)"),
            "target": widgets.Dropdown(options=self.targets, value=self.targets[0], description="target",
                                       style=style, layout=lay),
        }
        self.controls = c
        self._tips = {name: w.tooltip or "" for name, w in c.items()}
        for name, w in c.items():
            w.add_class("cl-control")
            w.add_class(f"cl-control-{name}")
            w.observe(self._on_change, names="value")
        wide = widgets.Layout(width="100%")
        self.message_html = widgets.HTML(layout=wide)
        self.message_html.add_class("cl-problems")
        self.plan_summary = widgets.HTML(layout=wide)
        self.plan_figures = widgets.HTML(layout=wide)  # segment map and plane bytes: one update, shown together
        self.plan_figures.add_class("cl-plan-figures")
        self.sdma_html = widgets.HTML(layout=wide)
        self.sdma_html.add_class("cl-sdma")
        # modelled time
        self.model_select = widgets.Dropdown(options=list(MODELS), value=v["model"] if v["model"] in MODELS else "a3",
                                             description="model", style={"description_width": "50px"},
                                             layout=widgets.Layout(width="150px"))
        self.model_select.add_class("cl-model-select")
        self.model_select.observe(lambda ch: self._changed("model", ch["new"]), names="value")
        self.suggest_button = widgets.Button(description="Suggest",
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
        self.run_button = widgets.Button(description="Run", button_style="primary",
                                         tooltip="build if needed, run classic and doubleplane, check x_out")
        self.run_button.add_class("cl-run")
        self.run_button.on_click(self._on_run_click)
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="", layout=widgets.Layout(width="200px"))
        self.progress.add_class("cl-progress")
        self.status = widgets.Label(value="")
        self.status.add_class("cl-run-status")
        self.run_note = widgets.HTML(layout=wide)
        self.run_note.add_class("cl-run-note")
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
        self.bridge = _make_bridge()
        if self.bridge is not None:
            self.bridge.key = STORAGE_KEY if self.keep_across_reload else ""
            self.bridge.observe(self._on_width, names="width")
            self.bridge.observe(self._on_restore, names="restore")

    def _layout(self) -> widgets.Widget:
        controls = widgets.Box(list(self.controls.values()), layout=widgets.Layout(width="100%"))
        controls.add_class("cl-controls")
        self.sdma_section = _Disclosure("SDMA segments listed by the planner", self.sdma_html, "sdma")
        plan_box = widgets.VBox([widgets.HTML("<h4 class='cl-h'>Plan (nothing runs)</h4>"), self.plan_summary,
                                 self.plan_figures, self.sdma_section.box], layout=widgets.Layout(width="100%"))
        self.params_section = _Disclosure("The model's parameters (values, units, where from)", self.assumed_html,
                                          "params")
        model_box = widgets.VBox([
            widgets.HTML("<h4 class='cl-h'>Modelled NPU time <span class='cl-modelled-tag'>modelled, not measured"
                         "</span></h4>"),
            widgets.HBox([self.model_select, self.suggest_button, self.use_button],
                         layout=widgets.Layout(flex_flow="row wrap", width="100%")),
            self.suggest_status, self.modelled_html, self.params_section.box], layout=widgets.Layout(width="100%"))
        self.counters_section = _Disclosure("Per-plane counters of the last run", self.counters_html, "counters")
        self.history_all_section = _Disclosure("History: all columns", self.history_all_html, "history-all")
        self.sweep = SweepPanel(self.state.values, lambda: self.state.spec)
        self.sweep_section = _Disclosure("Sweep: this case over lists of PEs and tokens, here or on a cluster",
                                         self.sweep.box, "sweep")
        run_row = widgets.HBox([self.run_button, self.progress, self.status],
                               layout=widgets.Layout(flex_flow="row wrap", width="100%", align_items="center"))
        run_row.add_class("cl-run-row")
        run_box = widgets.VBox([self.run_title, run_row, self.run_note,
                                self.verdict_html, self.counters_section.box, self.compare_html,
                                widgets.HTML("<h4 class='cl-h'>History <span class='cl-measured-tag'>measured</span>"
                                             "</h4><div class='cl-note'>speed-up = classic time / doubleplane time "
                                             "(above 1: doubleplane faster); times: comm_only, CoreMaxTime (us)</div>"),
                                self.history_html, self.history_all_section.box, self.history_plot_html,
                                self.sweep_section.box],
                               layout=widgets.Layout(width="100%"))
        parts = [widgets.HTML(_CSS), controls, self.message_html, plan_box, model_box, run_box]
        if self.bridge is not None:
            parts.append(self.bridge)
        root = widgets.VBox(parts, layout=widgets.Layout(width="100%"))
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
        included) is kept by the state, marked at its control and said in the message, never
        clamped or rounded. Returns None, so that a notebook cell ending with it does not show
        the app again."""
        unknown = set(values) - set(CONTROLS)
        if unknown:
            raise ParameterError(f"unknown controls {sorted(unknown)}; known: {sorted(CONTROLS)}")
        self._apply(values)

    def _apply(self, values: dict) -> None:
        with self._lock:
            t0 = time.perf_counter()
            self.state.set(**values)
            self._push_values()
            self._render()
            self.plan_seconds = time.perf_counter() - t0
            self._save()

    def _on_change(self, change) -> None:
        if self._hold:
            return
        name = next(k for k, w in self.controls.items() if w is change["owner"])
        value = parse_number(change["new"]) if name in _NUMBER_FIELDS else change["new"]
        self._changed(name, value)

    def _changed(self, name: str, value) -> None:
        self._event("change", name=name, value=value, hold=self._hold)
        if not self._hold:
            self._apply({name: value})

    def _push_values(self) -> None:
        """Show the state's values in the widgets, exactly (the number boxes hold their text). A
        value a selector cannot hold (a target not offered) stays the state's: its mark says so."""
        v = self.state.values()
        with self._held():
            for name, w in self.controls.items():
                shown = _number_text(v[name]) if name in _NUMBER_FIELDS else v[name]
                if name in _NUMBER_FIELDS and parse_number(w.value) == v[name] and type(parse_number(w.value)) is \
                        type(v[name]):
                    continue  # "8192 " stays as typed: the same value
                if w.value == shown:
                    continue
                try:
                    w.value = shown
                except (TraitError, TypeError, ValueError):
                    pass
            if self.model_select.value != v["model"] and v["model"] in MODELS:
                self.model_select.value = v["model"]
        skew = self.state.skew_name()
        self.controls["skew"].disabled = skew is None
        self.controls["skew"].description = f"skew ({skew})" if skew else "skew (n/a)"
        self.controls["trace"].disabled = v["routing_model"] != "trace"

    def _mark_problems(self) -> None:
        """Each control whose value cannot be used is marked (class ``cl-bad``) with its reasons
        as its tooltip, all at once; the others are unmarked."""
        reasons: dict[str, list[str]] = {}
        for p in self.state.problems:
            reasons.setdefault(p.name, []).append(p.reason)
        for name, w in self.controls.items():
            bad = reasons.get(name)
            if bad and "cl-bad" not in w._dom_classes:
                w.add_class("cl-bad")
            elif not bad and "cl-bad" in w._dom_classes:
                w.remove_class("cl-bad")
            tip = "; ".join(bad) if bad else self._tips.get(name, "")
            if w.tooltip != tip:
                w.tooltip = tip
        if self.bridge is not None:  # the page shows them (the bridge): tooltips, and reasons at the control
            tips = json.dumps({name: [self._tips.get(name, ""), "; ".join(reasons.get(name, []))]
                               for name in self.controls})
            if self.bridge.tips != tips:
                self.bridge.tips = tips

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
        with self._lock:
            t0 = time.perf_counter()
            p = self.state.refresh()
            self._render()
            self.plan_seconds = time.perf_counter() - t0
            return p

    def _on_width(self, change) -> None:
        """The page says how wide the app is: the figures are drawn to fill it."""
        with self._lock:
            if self.state.set_figure_width(int(change["new"]) - 4):
                self._render_plan()
                self._render_modelled()

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
            stopped = _stop_other_kernel(data) if data.get("running") else ""
            self._last_run_text = _note(html.escape(self.restored + (" " + stopped if stopped else "")))
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

    def _render_run_state(self) -> None:
        """The Run button and the note beside it: why Run is off, what a Run going on uses and
        which values changed since it was pressed, or what the last Run came to."""
        st = self.state
        why = st.run_refusal()
        self._event("run-state", disabled=bool(why), running=st.running)
        self.run_button.disabled = bool(why)
        if st.running and self._request is not None:
            changed = [FIELDS[k].shown for k, v in self._request.values.items() if st.values().get(k) != v]
            text = ("Running with the values as they were when Run was pressed"
                    + (f"; changed since: {', '.join(changed)} (planned above; its results will show as stale: "
                       "press Run again when it ends)" if changed else "") + "."
                    + (f" {self._click_note}." if self._click_note else ""))
            self.run_note.value = f"<div class='cl-note cl-pending'>{html.escape(text)}</div>"
            return
        if why:
            self.run_note.value = (f"<div class='cl-run-off' style='color:#b00020'><b>Run is off</b>: "
                                   f"{html.escape(why)}.</div>")
            return
        self.run_note.value = self._last_run_text

    def _show_message(self, text: str, kind: str = "error") -> None:
        colour = {"error": "#b00020", "info": "#0b5394"}[kind]
        self.message_html.value = (f"<div class='cl-message' role='status' style='border-left:4px solid {colour};"
                                   f"padding:4px 8px;color:{colour}'>{html.escape(text)}</div>") if text else ""

    def _render_plan(self) -> None:
        st, p, spec = self.state, self.state.plan, self.state.spec
        if p is None:  # the plan view showed another case: cleared, never shown as this one's
            self.plan_summary.value = self.sdma_html.value = self.plan_figures.value = ""
            self.sdma_section.set_title("SDMA segments listed by the planner")
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
        self.sdma_html.value = (_table(shown, {c: c for c in shown.columns}, "cl-sdma-table", label="SDMA segments")
                                + more) if len(shown) else "<p>none: every segment goes by MTE</p>"
        self.sdma_section.set_title(f"SDMA segments listed by the planner ({len(st.sdma_table)})")
        # both figures in one value: they change together in the page
        self.plan_figures.value = st.figures["segment_map"].svg + st.figures["plane_bytes"].svg

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

    @staticmethod
    def _model_line(model: NpuModel) -> str:
        """The model named once, short: its assumed parameters are listed in the figure and the table."""
        return f"modelled on {model.name} ({model.machine}); {len(model.assumed)} of its parameters are assumed"

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
        if m.get("refused"):  # the machine has fewer PEs than the case
            self.modelled_html.value = _note(f"Modelled time: not priced on {html.escape(m['model'])}: "
                                             f"{html.escape(m['refused'])}.")
            self.assumed_html.value = self._assumed_table(st.model())
            return
        if m.get("not_modelled"):  # kernel settings the model does not price (yet): no number shown as theirs
            self.modelled_html.value = (
                f"<div class='cl-not-modelled' style='font-size:13px'>Modelled time on {html.escape(m['model'])}: "
                f"{html.escape(m['not_modelled'])}. Set segment layout off and cores per rank 1 for the reference's "
                "modelled time and a suggested floor (the rule, and so the plan, is the same for every setting).</div>")
            self.assumed_html.value = self._assumed_table(st.model())
            return
        sp = m["speedup"]
        names = m.get("labels", {"classic": "classic", "doubleplane": "doubleplane"})
        faster = ("a tie: SDMA changes nothing here, modelled" if abs(sp - 1) < 1e-9 else
                  f"a tie: within the model's resolution ({RESOLUTION:.0%})" if abs(sp - 1) <= RESOLUTION else
                  f"{names['doubleplane']} faster" if sp > 1 else f"{names['doubleplane']} slower")
        line = (f"<div class='cl-modelled-line' style='font-size:13px'>At floor {m['floor']:,} B: modelled comm_only "
                f"<b>{m['doubleplane_us']:,.1f} us</b> with {html.escape(names['doubleplane'])}, "
                f"{m['classic_us']:,.1f} us with {html.escape(names['classic'])}: "
                f"speed-up {sp:.3f} ({faster}); kernel settings {html.escape(m.get('settings', 'reference'))}; "
                f"<i>{html.escape(self._model_line(st.model()))}</i>.</div>")
        if m.get("engines_line"):  # the verdict over the unknown that moves it most
            line += (f"<div class='cl-modelled-engines' style='font-size:13px'>Over the unknown SDMA engine count: "
                     f"{html.escape(m['engines_line'])} (modelled; nobody has published how many run at once)</div>")
        if s is None:
            line += _note("The curve over every floor is not computed for this size at each change: "
                          "press <b>Suggest</b> (about 1-3 s at 64 PEs).")
        self.modelled_html.value = line + st.figures["modelled"].svg
        self.assumed_html.value = self._assumed_table(st.model())

    @staticmethod
    def _assumed_table(model: NpuModel) -> str:
        rows = [{"parameter": p.name, "value": p.value, "unit": p.unit,
                 "range": f"{p.range[0]:g} - {p.range[1]:g}" if p.range else "",
                 "where from": ("assumed: " + p.rationale) if p.assumed else p.source} for p in model.params.values()]
        df = pd.DataFrame(rows)
        # "where from" last and wrapping: every column stays in view at 1280 px
        return (_note(f"{html.escape(model.name)} ({html.escape(model.machine)}); source: {html.escape(model.path)}")
                + _table(df, {c: c for c in df.columns}, "cl-params", label="the model's parameters",
                         wide=("where from",)))

    def _verdict_html(self) -> str:
        v = self.state.verdict()
        if v is None:
            return ""
        runs = self.state.last_runs or {}
        lines = []
        for item in v["variants"]:
            name = item["name"]
            res = runs.get(item["variant"])
            if item["combine"] == "doubleplane" and res is not None and not plots.sends_sdma(res):
                name = f"{item['variant']} (no SDMA traffic in this case: = classic)"
            if item["check"] not in ("PASS", "FAIL"):  # refused: its reason, no check
                lines.append(f"<li><b>{name}</b>: <span style='color:#b35900'>{item['check']}</span>: "
                             f"{html.escape(item['reason'])}</li>")
                continue
            bad, mism = item["bad_pes"], item["mismatches"]
            lines.append(f"<li class='cl-verdict-line'><b>{name}</b>: x_out "
                         + ("<span style='color:#1a7f37'>PASS on every PE</span>" if not bad else
                            f"<span style='color:#b00020'>FAIL on PE {bad}</span>")
                         + ("; counters = plan" if not mism else
                            "; counters differ from the plan: " + html.escape("; ".join(mism[:4])))
                         + "</li>")
        h = self.state.history.iloc[-1] if len(self.state.history) else None
        if h is not None and np.isfinite(h["comm_only_speedup"]):
            n = int(h["repeats"])
            spread = _speedup_spread(h["comm_only_speedup"], h["comm_only_speedup_lo"], h["comm_only_speedup_hi"], n)
            lines.append(f"<li class='cl-verdict-speedup'><b>comm_only speed-up</b> (classic / doubleplane, "
                         f"median [min-max] of {n} paired repeat{'s' if n > 1 else ''}): {spread}: "
                         f"<b>{html.escape(str(h['comm_only_verdict']))}</b></li>")
        return (f"<p><b>{v['case_id']}</b> {html.escape(v['routing'])} on {v['target']}, kernel settings "
                f"{html.escape(v['settings'])} (run {v['run']}):</p><ul>{''.join(lines)}</ul>")

    def _counters_html(self) -> str:
        c = self.state.counters()
        if c is None:
            return ""
        if not len(c):
            return "<p>No per-plane counters on this target.</p>"
        return "<p>Per-plane counters (last launch; bytes, puts):</p>" + _table(c, {k: k for k in c.columns},
                                                                               "cl-counters", label="counters")

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
            self.verdict_html.value = (f"<p style='color:#b00020'><b>Run failed</b>: "
                                       f"{html.escape(st.run_error.splitlines()[0])}. "
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
        settings = st.history["settings"].fillna("reference").astype(str)
        shown = st.history.assign(case_id=[c if g == "reference" else f"{c}, {g}"  # the settings beside the case
                                           for c, g in zip(st.history["case_id"], settings)],
                                  comm_only_speedup_spread=[
            _speedup_spread(r["comm_only_speedup"], r["comm_only_speedup_lo"], r["comm_only_speedup_hi"], r["repeats"])
            for _, r in st.history.iterrows()])
        self.history_html.value = _table(shown, HISTORY_SHOWN, "cl-history-table", _HISTORY_FORMAT,
                                         label="history")
        self.history_all_html.value = _table(st.history, {c: c for c in HISTORY_COLUMNS}, "cl-history-all",
                                             label="history, all columns")
        self.history_plot_html.value = plots.figure_svg(st.figures["history"]) if "history" in st.figures else ""

    # ------------------------------------------------------------------ modelled time
    def suggest(self) -> Suggestion | None:
        """Model comm_only at every floor where the plan of the current inputs changes
        (:meth:`combine_lab.lab.tuning.TuningState.suggest`), draw the curve and say which floors
        reach the best modelled time (an interval), or that every floor ties with never SDMA.
        Returns the Suggestion, or None when the inputs cannot be planned (``message`` says why).
        The button is disabled while it computes."""
        with self._lock:
            st = self.state
            if st.plan is None:
                st.suggest()  # says why in the message
                self._show_message(st.message)
                return None
            pes, segments = st.suggest_size()
            self.suggest_button.disabled = True
            self.use_button.disabled = True
            self.suggest_status.value = _note(f"Computing the modelled time at every floor where the plan changes "
                                              f"({pes} PEs, {segments:,} segments)...")
            try:
                s = st.suggest()
            finally:
                self.suggest_button.disabled = False
            self._shown_suggestion = s
            self._render_modelled()
            self._show_suggestion(s)
            return s

    def _show_suggestion(self, s: Suggestion) -> None:
        st = self.state
        c = st.floor_choice()
        floor = st.suggested_floor()
        head = f"({len(s.curve)} floors modelled in {st.suggest_seconds:.2f} s; modelled, not measured)"
        unknowns = ""
        if s.verdict is not None:  # a tie is a tie: best only above the resolution over every unknown's range
            unknowns = (" " + html.escape(s.pick_text()) + ". What moves it most (measure first): "
                        + html.escape(", ".join(s.verdict.sensitivity["parameter"].head(3))) + ".")
        if c.never:
            pick = ("<b>no floor is suggested</b>: " + html.escape(c.text()) if c.all_tie else
                    "<b>keep never SDMA</b>: " + html.escape(c.text()))
            self.use_button.description = "Use it: never SDMA"
            self.use_button.tooltip = (f"sets min_sdma_bytes to {floor:,} B: one byte above the largest segment the "
                                       f"rule could pick ({format_bytes(c.largest_segment)}), so none goes by SDMA")
            extra = (f" <b>Use it</b> sets the floor to {floor:,} B: one byte above the largest segment the rule "
                     f"could pick ({format_bytes(c.largest_segment)}), so no segment goes by SDMA.")
        else:
            b = s.curve[s.curve["threshold_bytes"] == c.hi].iloc[0]
            pick = (f"<b>a floor from {format_bytes(c.lo)} to {format_bytes(c.hi)}</b>: modelled comm_only "
                    f"{c.best_us:,.1f} us, {float(b['speedup']):.3f} x classic (any floor in it gives the same plan "
                    f"on these inputs)")
            self.use_button.description = f"Use it: floor {svg.floor_text(floor)}"
            self.use_button.tooltip = f"sets min_sdma_bytes to {floor:,} B, inside the interval"
            extra = ""
        if s.verdict is not None and not s.beats and not c.never:
            pick = "<b>no floor beats MTE-only under these assumptions</b>; at the nominal values " + pick
        self.suggest_status.value = (f"<div class='cl-suggestion' style='font-size:13px'>Suggested: {pick} {head}."
                                     f"{extra}{unknowns}</div>")
        self.use_button.disabled = False

    def use_suggestion(self) -> int | None:
        """Set the floor control to the suggested floor (inside the interval of best floors; for
        "never SDMA": one byte above every segment the rule could pick) and replan; returns the
        floor set, or None without a current suggestion."""
        floor = self.state.suggested_floor()
        if floor is not None:
            self.set(min_sdma_bytes=floor)
            if self._shown_suggestion is not None and self.state.suggestion is self._shown_suggestion:
                self._show_suggestion(self._shown_suggestion)
        return floor

    # ------------------------------------------------------------------ run
    def _event(self, kind: str, **detail: Any) -> None:
        t = time.monotonic()
        self.events.append((t, kind, detail))
        if self._events_file:
            with open(self._events_file, "a") as f:
                f.write(f"{t:.3f} {threading.current_thread().name} {kind} {detail}\n")

    def _on_run_click(self, _button) -> None:
        """A click on Run (the browser's Enter or Space on it too). The kernel handles messages in
        the order the page sent them, so a click always meets the plan of every value typed before
        it. One Run per request: a click within ``click_guard_s`` of the click before it is the rest
        of a double-click and starts nothing; any other click starts a Run, or, while a Run goes
        on, says beside the button that it was not queued. No click is dropped without a word
        (issue 27: a guard timed from the last Run's results dropped a deliberate keyboard Run that
        came 0.37 s after a short Run ended)."""
        now = time.monotonic()
        gap, self._last_click_at = now - self._last_click_at, now
        self._event("click", running=self.state.running, gap=round(gap, 3), disabled=self.run_button.disabled)
        if gap < self.click_guard_s:
            self.ignored_clicks += 1
            self._event("ignored", why="double-click")
            return
        if self.state.running:
            self.ignored_clicks += 1
            self._event("ignored", why="running")
            with self._lock:
                self._click_note = ("Run was pressed again while this Run goes on: not queued (press it once this "
                                    "one ends)")
                self._render_run_state()
            return
        self.start_run()

    def _progress(self, done: int, total: int, text: str) -> None:
        with self._lock:
            self.progress.max = total
            self.progress.value = done
            self.status.value = text

    def start_run(self) -> bool:
        """Start a Run of the current values on a background thread and return at once: True when
        it started, False when it was refused (the note beside the button says why; nothing was
        launched). The kernel's main thread stays free for the controls meanwhile."""
        with self._lock:
            st = self.state
            if st.running:
                return False
            request = st.prepare_run()
            self._event("start", started=request is not None, message=st.message, h=st.values().get("h"))
            if request is None:
                self._last_run_text = (f"<div class='cl-run-off' style='color:#b00020'>{html.escape(st.message)}</div>"
                                       if st.message else "")
                self._render()
                return False
            st.running = True
            self._request = request
            self._stop_reason = ""
            self.progress.max = st.progress_steps(request)
            self.progress.value = 0
            self.progress.bar_style = ""
            self.status.value = "starting..."
            self._render_run_state()
            self._save()
            self._thread = threading.Thread(target=self._run_thread, args=(request,), name="combine-lab-run",
                                            daemon=True)
            self._thread.start()
            return True

    def _run_thread(self, request) -> None:
        st = self.state
        runs, error = None, None
        try:
            runs = st.execute(request, self._progress)
        except RUN_ERRORS as e:
            error = e
        except BaseException as e:  # noqa: BLE001 - a bug: said beside the button, never a silent thread death
            error = e
        with self._lock:
            try:
                if error is not None:
                    if self._stop_reason:
                        error = RuntimeError(f"stopped: {self._stop_reason}")
                    st.fail_run(request, error)
                    self.status.value = "failed"
                    self.progress.bar_style = "danger"
                    # the reason first, the PE's log below it
                    self._last_run_text = failure_html(st.run_error, "<b>Run failed</b>: ", ". Nothing of it is kept.")
                else:
                    st.finish_run(request, runs)
                    self.progress.value = self.progress.max
                    self.progress.bar_style = "success"
                    checks = ", ".join(f"{v} {r.check_ok and 'PASS' or 'FAIL'}" for v, r in runs.items())
                    refused = "".join(f"; {v} refused: {why}" for v, why in runs.refused.items())
                    self.status.value = "done"
                    self._last_run_text = (f"<div class='cl-run-done' role='status'>Run {len(st.history)} done: x_out "
                                           f"{html.escape(checks + refused)} (verdict below).</div>")
                    self._render_history()
            finally:
                st.running = False
                self._request = None
                self._click_note = ""
                self._event("done", history=len(st.history))
                self._render_run_views()
                self._render_run_state()
                self._save()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the Run going on (if any) to show its results; True when none goes on now."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return not self.state.running

    def run(self):
        """Build if needed, run classic and doubleplane on the chosen target, check, plot, record,
        and wait for it (:meth:`start_run`, then :meth:`wait`).

        Returns the :class:`~combine_lab.harness.Comparison` (``{"classic": RunResult,
        "doubleplane": RunResult}``; a variant the target refuses is left out, with its reason in
        ``.refused``, and recorded as a REFUSED row), or None when the values are invalid, the
        case is too large for ``max_run_bytes``, a Run goes on, or the run failed: then
        ``message`` and the note beside the button say why and (for the first two) nothing was
        launched. The Run button is disabled from the start until the results (or the failure) are shown.
        """
        if self.state.running:
            return None
        before = len(self.state.history)
        if not self.start_run():
            return None
        self.wait()
        return self.state.last_runs if len(self.state.history) > before and self.state.run_error is None else None

    def stop_run(self, reason: str = "stopped") -> bool:
        """Stop the Run going on: its PE processes are ended, so the harness removes its case files
        and the Run ends as failed with ``reason``. Returns whether a Run was going on."""
        if not self.state.running:
            return False
        self._stop_reason = reason
        _end_children()
        return True

    # ------------------------------------------------------------------ output
    def save_figures(self, out_dir, prefix: str = "tuning_") -> list:
        """Save the figures that describe the current inputs as ``<out_dir>/<prefix><view>.png``
        (:meth:`combine_lab.lab.tuning.TuningState.save_figures`: the drawings the app shows);
        returns the paths. A stale view is not saved, and a file saved for it before is removed."""
        return self.state.save_figures(out_dir, prefix)


def _end_children() -> None:
    """End the processes this kernel started (a Run's PEs, a build): the kernel of a page that
    was reloaded has nothing else of its own running."""
    import psutil
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for k in kids:
        try:
            k.kill()
        except psutil.Error:
            pass


def _stop_other_kernel(data: dict) -> str:
    """Ask the kernel of the page before the reload (``data["pid"]``) to stop its Run (SIGUSR1),
    when it is a kernel beside this one (the same server started both); returns what was done."""
    import psutil
    pid = data.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return ""
    try:
        other, me = psutil.Process(pid), psutil.Process()
        if other.ppid() != me.ppid() or "ipykernel" not in " ".join(other.cmdline()):
            return ""
        other.send_signal(signal.SIGUSR1)
    except (psutil.Error, OSError):
        return ""
    return "The Run the page before the reload was making was stopped."
