"""The tuning app's modelled panel: the modelled comm_only of the inputs, the engine line, the
curve over floors and Suggest / Use it, the model's parameters. A mixin of
:class:`combine_lab.lab.app.TuningApp` (its state's ``modelled`` and ``suggestion``)."""

from __future__ import annotations

import html

import ipywidgets as widgets
import pandas as pd

from ..model.machines import NpuModel
from ..model.suggest import Suggestion
from ..model.unknowns import RESOLUTION
from .app_html import note, table
from .tuning import MODELS, format_bytes
from .tuning_model import bytes_text
from ..kernels import CLASSIC, DOUBLEPLANE

__all__ = ["ModelledView"]


class ModelledView:
    """The modelled panel of :class:`~combine_lab.lab.app.TuningApp`."""

    def _build_modelled_widgets(self) -> None:
        v = self.state.values()
        wide = widgets.Layout(width="100%")
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
            self.modelled_html.value = note("Modelled time: no plan for these inputs.")
            self.assumed_html.value = ""
            return
        if s is None or s is not self._shown_suggestion:  # a new case, or one Suggest did not name
            self._shown_suggestion = None
            self.use_button.disabled = True
            self.suggest_status.value = ""
        if m.get("refused"):  # the machine has fewer PEs than the case
            self.modelled_html.value = note(f"Modelled time: not priced on {html.escape(m['model'])}: "
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
        names = m.get("labels", {CLASSIC: CLASSIC, DOUBLEPLANE: DOUBLEPLANE})
        faster = ("a tie: SDMA changes nothing here, modelled" if abs(sp - 1) < 1e-9 else
                  f"a tie: within the model's resolution ({RESOLUTION:.0%})" if abs(sp - 1) <= RESOLUTION else
                  f"{names[DOUBLEPLANE]} faster" if sp > 1 else f"{names[DOUBLEPLANE]} slower")
        line = self._modelled_headline(sp, faster) + (
            f"<div class='cl-modelled-line' style='font-size:13px'>At floor {bytes_text(m['floor'])}: modelled comm_only "
            f"<b>{m['doubleplane_us']:,.1f} us</b> with {html.escape(names[DOUBLEPLANE])}, "
            f"{m['classic_us']:,.1f} us with {html.escape(names[CLASSIC])}: "
            f"speed-up {sp:.3f} ({faster}); kernel settings {html.escape(m.get('settings', 'reference'))}; "
            f"<i>{html.escape(self._model_line(st.model()))}</i>.</div>")
        line += self._engines_html()
        if s is None:
            line += note("The curve over every floor is not computed for this size at each change: "
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
        return (note(f"{html.escape(model.name)} ({html.escape(model.machine)}); source: {html.escape(model.path)}")
                + table(df, {c: c for c in df.columns}, "cl-params", label="the model's parameters",
                        fmt={"value": lambda v: html.escape(f"{v:,.6g}")}, wide=("where from",)))


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
            self.suggest_status.value = note(f"Computing the modelled time at every floor where the plan changes "
                                              f"({pes} PEs, {segments:,} segments)...")
            try:
                s = st.suggest()
            finally:
                self.suggest_button.disabled = False
            self._shown_suggestion = s
            self._render_modelled()
            self._show_suggestion(s)
            return s

    def _modelled_headline(self, sp: float, faster: str) -> str:
        """The modelled speed-up at this floor before the prose, with its band over the unknowns'
        box where Suggest's verdict is about this floor (the same :class:`~combine_lab.lab.tuning_model.Unknowns`)."""
        st = self.state
        u = st.unknowns()
        band = (f"<span class='cl-headline-range'>[{u.low:.2f}-{u.high:.2f} over the unknowns]</span> "
                if u is not None and u.suggested and u.floor == st.modelled.get("floor") else "")
        return (f"<div class='cl-headline cl-modelled-headline'><span class='cl-headline-number'>{sp:.3f}x</span> "
                f"{band}<span class='cl-headline-verdict'>{html.escape(faster)}</span> "
                f"<span class='cl-modelled-tag'>modelled on {html.escape(st.model().name)}</span></div>")

    def _engines_html(self) -> str:
        """The engine line of the modelled panel: the same :class:`~combine_lab.lab.tuning_model.Unknowns`
        Suggest's message words (one source: the two never disagree), '' when none is known."""
        u = self.state.unknowns()
        if u is None:
            return ""
        cur = self.state.modelled.get("floor")
        where = (f" (the floor Suggest names; this one is {bytes_text(cur)})" if u.suggested and u.floor != cur else "")
        return (f"<div class='cl-modelled-engines' style='font-size:13px'>Over the unknown SDMA engine count: "
                f"{html.escape(u.engines)}{where} (modelled; nobody has published how many run at once)</div>")

    def _suggestion_pick(self, s: Suggestion, c, floor: int) -> tuple[str, str]:
        """(the pick, what Use it does) of Suggest's message; sets the Use it button's words."""
        if c.never:
            pick = ("<b>no floor is suggested</b>: " + html.escape(c.text()) if c.all_tie else
                    "<b>keep never SDMA</b>: " + html.escape(c.text()))
            self.use_button.description = "Use it: never SDMA"
            self.use_button.tooltip = (f"sets min_sdma_bytes to {bytes_text(floor)}: one byte above the largest "
                                       f"segment the rule could pick ({bytes_text(c.largest_segment)}), so none goes "
                                       "by SDMA")
            return pick, (f" <b>Use it</b> sets the floor to {bytes_text(floor)}: one byte above the largest segment "
                          f"the rule could pick ({bytes_text(c.largest_segment)}), so no segment goes by SDMA.")
        b = s.curve[s.curve["threshold_bytes"] == c.hi].iloc[0]
        pick = (f"<b>a floor from {bytes_text(c.lo)} to {bytes_text(c.hi)}</b> ({format_bytes(c.lo)} to "
                f"{format_bytes(c.hi)}): modelled comm_only {c.best_us:,.1f} us, {float(b['speedup']):.3f} x classic at "
                f"the nominal values (any floor in it gives the same plan on these inputs)")
        self.use_button.description = f"Use it: floor {bytes_text(floor)}"
        self.use_button.tooltip = f"sets min_sdma_bytes to {bytes_text(floor)}, inside the interval"
        return pick, ""

    def _show_suggestion(self, s: Suggestion) -> None:
        """Suggest's message: the pick (an interval of floors, or a tie), then once what the
        unknowns do to it (the band over their box and the engine sentence: the panel's
        :meth:`_engines_html` words the same :class:`~combine_lab.lab.tuning_model.Unknowns`), and
        what moves it most. Every floor in exact bytes ("1,933,312 B")."""
        st = self.state
        c = st.floor_choice()
        pick, extra = self._suggestion_pick(s, c, st.suggested_floor())
        head = f"({len(s.curve)} floors modelled in {st.suggest_seconds:.2f} s; modelled, not measured)"
        unknowns = ""
        u = st.unknowns()
        if s.verdict is not None and u is not None and u.suggested:  # a tie is a tie: best only above the resolution
            unknowns = (f" Over the unknowns: {html.escape(u.band)}. SDMA engines alone: {html.escape(u.engines)}. "
                        "What moves it most (measure first): "
                        + html.escape(", ".join(s.verdict.sensitivity["parameter"].head(3))) + ".")
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

