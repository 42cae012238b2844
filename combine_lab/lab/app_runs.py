"""The tuning app's run panel: Run (on a background thread, so the kernel's main thread stays free
for the controls), its progress and the note beside it, the last Run's verdict, counters and
comparison (dimmed under "Stale" once the inputs change). A mixin of
:class:`combine_lab.lab.app.TuningApp`."""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import ipywidgets as widgets
import numpy as np

from . import plots
from .app_html import fitted_svg, table
from .app_sweep import failure_html
from .server import end_children
from .tuning import FIELDS, RUN_ERRORS
from ..kernels import CLASSIC, DOUBLEPLANE

__all__ = ["RunsView"]


class RunsView:
    """The run panel of :class:`~combine_lab.lab.app.TuningApp`."""

    def _build_run_widgets(self) -> None:
        wide = widgets.Layout(width="100%")
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

    def _render_run_state(self) -> None:
        """The Run button and the note beside it: why Run is off, what a Run going on uses and
        which values changed since it was pressed, or what the last Run came to."""
        st = self.state
        why = st.run_refusal()
        self._event("run-state", disabled=bool(why), running=st.running)
        self.run_button.disabled = bool(why)
        if hasattr(self, "trace_button"):  # no Trace while a Run goes on (it would be refused)
            self.trace_button.disabled = st.running or self.tracing
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


    def _verdict_html(self) -> str:
        v = self.state.verdict()
        if v is None:
            return ""
        runs = self.state.last_runs or {}
        lines = []
        for item in v["variants"]:
            name = item["name"]
            res = runs.get(item["variant"])
            if item["combine"] == DOUBLEPLANE and res is not None and not plots.sends_sdma(res):
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
        return (self._headline_html(h) + f"<p><b>{v['case_id']}</b> {html.escape(v['routing'])} on {v['target']}, "
                f"kernel settings {html.escape(v['settings'])} (run {v['run']}):</p><ul>{''.join(lines)}</ul>")

    @staticmethod
    def _headline_html(h) -> str:
        """The last Run's number before any prose (issue 32: "1.039 [0.98-1.99] within noise" only in a
        sentence): the comm_only speed-up (classic / doubleplane, the median over the paired repeats),
        its min-max and the verdict, with algbw of both variants (nccl-tests', decimal GB/s)."""
        if h is None or not np.isfinite(h["comm_only_speedup"]):
            return ""
        n = int(h["repeats"])
        lo, hi = h["comm_only_speedup_lo"], h["comm_only_speedup_hi"]
        rng = (f"<span class='cl-headline-range'>[{lo:.2f}-{hi:.2f}]</span> " if n > 1 and np.isfinite(lo)
               and np.isfinite(hi) else "")
        alg = [h.get(f"comm_only_{v}_algbw_GBps", float("nan")) for v in (CLASSIC, DOUBLEPLANE)]
        bw = (f"; algbw {alg[0]:,.2f} / {alg[1]:,.2f} GB/s (classic / doubleplane, the slowest profiled PE)"
              if all(np.isfinite(a) for a in alg) else "")
        return (f"<div class='cl-headline' role='status'><span class='cl-headline-number'>"
                f"{h['comm_only_speedup']:.3f}x</span> {rng}<span class='cl-headline-verdict'>"
                f"{html.escape(str(h['comm_only_verdict']))}</span> <span class='cl-measured-tag'>measured</span>"
                f"<div class='cl-note'>comm_only speed-up, classic / doubleplane (above 1: doubleplane faster): the "
                f"median{' [min-max]' if rng else ''} of {n} paired repeat{'s' if n > 1 else ''}{bw}</div></div>")

    def _counters_html(self) -> str:
        c = self.state.counters()
        if c is None:
            return ""
        if not len(c):
            return "<p>No per-plane counters on this target.</p>"
        return "<p>Per-plane counters (last launch; bytes, puts):</p>" + table(c, {k: k for k in c.columns},
                                                                               "cl-counters", label="counters")

    def _compare_html(self) -> str:
        fig = self.state.compare_figure
        if fig is None:
            return ""
        key = (id(fig), self.state.figure_width)  # drawn once per Run and width
        if self._compare_svg is None or self._compare_svg[0] != key:
            self._compare_svg = (key, fitted_svg(fig, self.state.figure_width))
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
            if self.tracing:  # one launch at a time: a Trace's PEs and a Run's would share the machine
                self._last_run_text = ("<div class='cl-run-off' style='color:#b00020'>Not run: a Trace goes on; press "
                                       "Run when it is written.</div>")
                self._render_run_state()
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

        Returns the :class:`~combine_lab.harness.Comparison` (``{CLASSIC: RunResult,
        DOUBLEPLANE: RunResult}``; a variant the target refuses is left out, with its reason in
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
        end_children()
        return True

