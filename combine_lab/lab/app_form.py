"""The tuning app's form: one control per value of the state (:data:`CONTROLS`), number boxes read
exactly as typed, each bad value marked at its control with its reasons, and the values handed to
the state (which replans at once). A mixin of :class:`combine_lab.lab.app.TuningApp`."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import ipywidgets as widgets
from traitlets import TraitError

from ..case.spec import DTYPES
from ..errors import ParameterError, SpecError
from . import tuning
from .app_html import number_text, parse_number
from .tuning import FIELDS, MODELS, ROUTING_MODELS, RUN_INPUTS

__all__ = ["FormView", "CONTROLS", "CONTROL_GROUPS", "H_STEP", "FLOOR_LOG2_MIB", "floor_mib_text"]

#: How far the arrow keys move h in its box (elements): the h of most models is a multiple of it.
H_STEP = 64
#: The controls, in the order shown (the state's values less the model, which has its own selector).
CONTROLS = RUN_INPUTS
#: The controls in groups, as a kernel engineer thinks of them (issue 32: 17 raw identifiers in one
#: row): group -> (its heading, its controls). The floor's MiB box and log slider sit in "kernel".
CONTROL_GROUPS = {
    "case": ("Case", ("pes", "bs", "h", "topk", "expert_per_pe", "dtype", "seed")),
    "routing": ("Routing", ("routing_model", "skew", "trace")),
    "kernel": ("Kernel: SDMA floor, settings", ("min_sdma_bytes", "segment", "cores_per_rank")),
    "timing": ("Timing: where, how long", ("target", "warmup", "loops", "repeats")),
}
#: The floor slider's range, log2 of MiB: 1 KiB to 256 MiB, in quarter steps of the exponent; the
#: byte box takes any floor (0 included: every non-empty segment above its PE's average goes by SDMA).
FLOOR_LOG2_MIB = (-10.0, 8.0, 0.25)
_NUMBER_FIELDS = tuple(n for n in CONTROLS if FIELDS[n].kind in ("int", "number"))


def floor_mib_text(nbytes) -> str:
    """The floor in MiB as its box shows it: exact (a byte count over 2**20 is a binary fraction),
    shortest form: 2097152 -> "2", 1933312 -> "1.84375", 4096 -> "0.00390625"; "" for a value that is
    no whole number of bytes (the byte box says why)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        return ""
    return f"{nbytes / 2 ** 20:.12g}"


class FormView:
    """The controls of :class:`~combine_lab.lab.app.TuningApp` and the values they hand its state."""

    def _build_controls(self) -> None:
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
            w.layout = widgets.Layout(width="100%", max_width="100%")  # the group's width: no ragged grid
            w.observe(self._on_change, names="value")
        self._build_floor_controls(style)

    def _build_floor_controls(self, style: dict) -> None:
        """The floor in MiB (a box and a log slider) beside its exact bytes: the byte box stays the
        value (read exactly); these two set it in whole bytes and follow it."""
        lo, hi, step = FLOOR_LOG2_MIB
        self.floor_mib = widgets.Text(value="", description="floor (MiB)", continuous_update=False, style=style,
                                      tooltip="SDMA floor in MiB (2**20 B): set in whole bytes",
                                      layout=widgets.Layout(width="100%"))
        self.floor_mib.add_class("cl-floor-mib")
        self.floor_slider = widgets.FloatLogSlider(value=2.0, base=2, min=lo, max=hi, step=step, readout=False,
                                                   continuous_update=False, description="floor (log)", style=style,
                                                   tooltip="SDMA floor, 1 KiB to 256 MiB on a log scale (arrow keys: "
                                                           "a quarter power of two)",
                                                   layout=widgets.Layout(width="100%"))
        self.floor_slider.add_class("cl-floor-slider")
        self.floor_bytes = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.floor_bytes.add_class("cl-floor-bytes")
        self.floor_mib.observe(self._on_floor_mib, names="value")
        self.floor_slider.observe(self._on_floor_slider, names="value")

    def _on_floor_mib(self, change) -> None:
        if self._hold:
            return
        v = parse_number(change["new"])
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and 0 <= v < 2 ** 44
        # a MiB value that is no floor goes to the state as typed, which names it at the byte box
        self._changed("min_sdma_bytes", int(round(v * 2 ** 20)) if ok else change["new"])

    def _on_floor_slider(self, change) -> None:
        if not self._hold:
            self._changed("min_sdma_bytes", int(round(float(change["new"]) * 2 ** 20)))

    def _sync_floor(self) -> None:
        """The MiB box, the slider and the exact bytes beside them show the byte box's value."""
        b = self.state.values()["min_sdma_bytes"]
        ok = isinstance(b, int) and not isinstance(b, bool) and b >= 0
        lo, hi, _ = FLOOR_LOG2_MIB
        with self._held():
            text = floor_mib_text(b)
            if ok and parse_number(self.floor_mib.value) != b / 2 ** 20:
                self.floor_mib.value = text
            if ok:
                x = min(max(b / 2 ** 20, 2 ** lo), 2 ** hi)
                if abs(self.floor_slider.value - x) > 1e-12 * x:
                    self.floor_slider.value = x
        self.floor_bytes.value = (f"<div class='cl-note cl-floor-exact'>= <b>{b:,} B</b>"
                                  + (" (every segment over its PE's average)" if b == 0 else "")
                                  + "</div>" if ok else "<div class='cl-note cl-floor-exact'>= no floor: see the byte "
                                  "box</div>")

    def _controls_box(self) -> widgets.Widget:
        """The controls in their groups (:data:`CONTROL_GROUPS`), each a column with a heading."""
        boxes = []
        for key, (title, names) in CONTROL_GROUPS.items():
            parts = [widgets.HTML(f"<div class='cl-group-title'>{title}</div>")]
            for n in names:
                parts.append(self.controls[n])
                if n == "min_sdma_bytes":
                    parts += [self.floor_bytes, self.floor_mib, self.floor_slider]
            box = widgets.VBox(parts, layout=widgets.Layout(width="292px"))
            box.add_class("cl-group")
            box.add_class(f"cl-group-{key}")
            boxes.append(box)
        controls = widgets.Box(boxes, layout=widgets.Layout(width="100%"))
        controls.add_class("cl-controls")
        return controls

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
            raise ParameterError(f"unknown controls {sorted(unknown)}; known: {sorted(CONTROLS)}",
                                 parameter="values", value=sorted(unknown), allowed=str(sorted(CONTROLS)))
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
                shown = number_text(v[name]) if name in _NUMBER_FIELDS else v[name]
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
        self._sync_floor()

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

