"""The tuning app's Trace button: the current case's launch of both variants as the Chrome
trace-event JSON that ``combine-lab compare --trace FILE`` writes (:class:`combine_lab.results.trace.TraceRecording`,
docs/formats.md#13-trace; open it in ui.perfetto.dev): measured on the CPU twin (one launch of each
variant, its operation stream recorded) or modelled on the model of the modelled panel. A mixin of
:class:`combine_lab.lab.app.TuningApp`; it runs on a thread of its own, as a Run does, and never
while a Run goes on."""

from __future__ import annotations

import html
import os
import threading
from pathlib import Path

import ipywidgets as widgets

from .. import harness
from ..harness import Run
from ..planning.settings import group_variants
from ..results.trace import TraceRecording
from ..run import build as build_mod
from .tuning import RUN_ERRORS
from ..kernels import CLASSIC, DOUBLEPLANE

__all__ = ["TraceView", "TRACE_CLOCKS"]

#: The Trace selector's clocks: label -> "twin" (measured on the CPU twin) or "model" (the panel's model).
TRACE_CLOCKS = {"measured on the CPU twin": "twin", "modelled (the panel's model)": "model"}


class TraceView:
    """The Trace button of :class:`~combine_lab.lab.app.TuningApp` (:meth:`trace`)."""

    def _build_trace_widgets(self) -> None:
        self.trace_clock = widgets.Dropdown(options=list(TRACE_CLOCKS), value="measured on the CPU twin",
                                            description="trace", style={"description_width": "initial"},
                                            layout=widgets.Layout(width="300px"))
        self.trace_clock.add_class("cl-trace-clock")
        self.trace_button = widgets.Button(description="Trace", tooltip="write the launch of both variants as a "
                                           "Perfetto trace (what compare --trace FILE writes)")
        self.trace_button.add_class("cl-trace")
        self.trace_button.on_click(lambda _b: self.start_trace())
        self.trace_note = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.trace_note.add_class("cl-trace-note")
        self.trace_dir = Path(".")
        self.trace_path: Path | None = None
        self._trace_thread: threading.Thread | None = None

    @property
    def tracing(self) -> bool:
        """True while a Trace goes on (its thread has not said where the file went yet)."""
        return getattr(self, "_trace_thread", None) is not None and self._trace_thread.is_alive()

    def _trace_row(self) -> widgets.Widget:
        row = widgets.HBox([self.trace_clock, self.trace_button], layout=widgets.Layout(flex_flow="row wrap",
                                                                                       width="100%"))
        row.add_class("cl-trace-row")
        return row

    def trace(self, path: str | os.PathLike | None = None, clock: str = "twin") -> Path | None:
        """Write the current case's trace and wait for it: ``clock`` "twin" (measured on the CPU
        twin: one launch of classic and doubleplane, their operation streams recorded) or "model"
        (modelled on the panel's machine); ``path`` default ``trace_<case_id>_<clock>.json`` in
        :attr:`trace_dir`. Returns the path, or None when nothing was written (``trace_note`` says
        why: the values cannot be used, a Run goes on, an NPU target, the segment layout on a model)."""
        if not self.start_trace(path, clock):
            return None
        self._trace_thread.join()
        return self.trace_path

    def start_trace(self, path: str | os.PathLike | None = None, clock: str | None = None) -> bool:
        """Start :meth:`trace` on a thread of its own and return at once: True when it started."""
        clock = clock or TRACE_CLOCKS[self.trace_clock.value]
        with self._lock:
            st = self.state
            if st.running or self.tracing:
                self._trace_said("a Run or a Trace goes on: wait for it", error=True)
                return False
            request = st.prepare_run()
            if request is None:
                self._trace_said(f"not traced: {st.message or st.run_refusal()}", error=True)
                return False
            model = st.model() if clock == "model" else None
            spec = request.case.spec
            out = Path(path) if path is not None else self.trace_dir / f"trace_{spec.case_id}_{clock}.json"
            self.trace_button.disabled = True
            self._trace_said(f"tracing {spec.case_id} ({'modelled on ' + model.name if model else 'on the CPU twin'})...")
            self._trace_thread = threading.Thread(target=self._trace_thread_main, args=(request, out, model),
                                                  name="combine-lab-trace", daemon=True)
            self._trace_thread.start()
            return True

    def _trace_runs(self, request, rec: TraceRecording, model) -> list[Run]:
        v = request.values
        return [Run(request.case, variant, clock=model if model is not None else harness.WALL, warmup=0, loops=1,
                    prof_pe=0, min_sdma_bytes=v["min_sdma_bytes"], target=v["target"],
                    timeout_s=self.state.timeout_s, settings=st, group=request.settings.label, env=rec.env(label))
                for label, (variant, st, _) in group_variants([CLASSIC, DOUBLEPLANE],
                                                              [request.settings.label]).items()]

    def _trace_thread_main(self, request, out: Path, model) -> None:
        path, error = None, None
        try:
            with TraceRecording(str(out), model) as rec:
                settings = [st for _, st, _ in group_variants([CLASSIC, DOUBLEPLANE],
                                                              [request.settings.label]).values()]
                rec.check([request.case.spec], [], request.values["target"], settings)
                if model is None:
                    build_mod.build(request.values["target"])
                path = rec.write(list(harness.execute(self._trace_runs(request, rec, model))))
        except RUN_ERRORS as e:
            error = e
        except BaseException as e:  # noqa: BLE001 - a bug: said beside the button, never a silent thread death
            error = e
        with self._lock:
            self.trace_path = path
            self.trace_button.disabled = False
            if error is not None:
                self._trace_said(f"Trace failed: {type(error).__name__}: {str(error).splitlines()[0]}", error=True)
            elif path is None:
                self._trace_said("Trace: no variant ran, nothing written", error=True)
            else:
                where = f"modelled on {model.name}" if model is not None else "measured on the CPU twin"
                self._trace_said(f"Trace written: {path} ({where}; open it in ui.perfetto.dev: Open trace file; "
                                 "docs/lab.md#9-traces)")

    def _trace_said(self, text: str, error: bool = False) -> None:
        colour = "#b00020" if error else "#222"
        self.trace_note.value = f"<div class='cl-note' role='status' style='color:{colour}'>{html.escape(text)}</div>"
