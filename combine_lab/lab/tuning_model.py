"""The tuning state's modelled panel: the modelled comm_only of the current inputs on the chosen
machine, the curve over every floor where the plan changes (Suggest), and what that curve says
about the floor (:class:`FloorChoice`: an interval of best floors, or a tie with never SDMA).
A mixin of :class:`combine_lab.lab.tuning.TuningState` (its values, spec, plan and figures); no
widgets (:mod:`combine_lab.lab.app_modelled` shows it)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError
from ..model import facade
from ..model.facade import floor_curve as model_suggest  # by this name: the app's tests watch it
from ..model.machines import NpuModel, load_model
from ..model.stream import CaseRows
from ..model.suggest import NEVER, Suggestion
from ..model.unknowns import RESOLUTION, engines_line
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from ..planning.settings import REFERENCE, KernelSettings, group_variants, variant_label
from . import plots
from .form import MODELS, _is_int, format_bytes
from .pricing import NotModelled, not_modelled_text
from ..kernels import CLASSIC, DOUBLEPLANE

__all__ = ["FloorChoice", "floor_choice", "AUTO_SUGGEST_SEGMENTS", "ModelledState", "model_suggest", "bytes_text",
           "engines_sentence", "Unknowns"]

#: Up to this many segments (pes * pes * expert_per_pe) the modelled curve over every floor is
#: recomputed at each replan (milliseconds); above it, :meth:`TuningState.suggest` computes it
#: (about 1-3 s at 64 PEs).
AUTO_SUGGEST_SEGMENTS = 4096


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


def bytes_text(n) -> str:
    """Bytes exactly, as every message of the app writes them: "2,097,152 B" (issue 32: "2097152 B"
    and "2,097,152 B" on one page)."""
    return f"{int(n):,} B"


def engines_sentence(floor: int, engines, label: str = DOUBLEPLANE, against: str = CLASSIC) -> str:
    """Over the unknown SDMA engine count (DataFrame engines, speedup; the rest nominal): "doubleplane
    at floor 2,097,152 B: parity with 1, ..., 1.2x faster with 48 SDMA engines, the rest nominal: it
    pays only if 32 or more run at once": :func:`combine_lab.model.unknowns.engines_line`, the one
    sentence the CLI's suggest and the app both say."""
    return engines_line(floor, engines, label, against)


@dataclass(frozen=True)
class Unknowns:
    """What the model's unknowns do to the speed-up, as the app says it in both places (the
    modelled panel's engine line and Suggest's message): one source, so the two never disagree
    (issue 32: "pays only if 32 or more run at once" beside "no single unknown changes that").

    ``floor``: the floor it is about (bytes); ``suggested``: True when it is Suggest's verdict at
    its best floor (the engine curve and the band over the unknowns' box of one
    :class:`~combine_lab.model.unknowns.Verdict`), False for the current floor's engine curve alone;
    ``engines``: the engine sentence (:func:`engines_sentence`); ``band``: the band over the box and
    what makes it pay ('' without a verdict); ``beats``: the floor beats MTE-only over the whole box;
    ``low``, ``high``: the band's ends (NaN without a verdict)."""

    floor: int
    suggested: bool
    engines: str
    band: str = ""
    beats: bool = False
    low: float = float("nan")
    high: float = float("nan")


class ModelledState:
    """The modelled panel of :class:`~combine_lab.lab.tuning.TuningState` (its ``modelled``,
    ``suggestion`` and ``figures["modelled"]``), from its values, spec and drawn routing."""

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
            self._rows, self._rows_key = facade.rows_of(self._case, model), key
        return dataclasses.replace(self._rows, h=self.spec.h, itemsize=self.spec.itemsize)

    @staticmethod
    def _comm_only(rows: CaseRows, mask: np.ndarray, model: NpuModel) -> float:
        """Modelled comm_only of the slowest PE (us) under ``rows.settings``: stage 1 only, which is
        all comm_only holds (the panel redraws at every change: no stage 2 priced for it)."""
        return facade.comm_only_us(rows, mask, model)

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
            under = {v: facade.under(rows, s) for v, s in vs.items()}
        except ParameterError as e:  # settings the model's SoC cannot run: never the reference's numbers instead
            self.suggestion, self._suggestion_key = None, None
            why = e.why if isinstance(e, NotModelled) else str(e)
            self.modelled = {"model": model.name, "caption": model.caption(), "settings": st.label,
                             "not_modelled": not_modelled_text(st.label, why)}
            self.figures.pop("modelled")
            return
        floor = int(self._values["min_sdma_bytes"])
        ckey = (self._curve_key(model), CLASSIC)
        if ckey not in self._classic_cache:
            self._classic_cache = {ckey: self._comm_only(under[CLASSIC], rows.sdma(CLASSIC, 0), model)}
        classic = self._classic_cache[ckey]
        dual = self._comm_only(under[DOUBLEPLANE], rows.sdma(DOUBLEPLANE, floor), model)
        key = self._curve_key(model)
        small = rows.pes * rows.counts.shape[1] <= AUTO_SUGGEST_SEGMENTS
        if self._suggestion_key != key:
            self.suggestion, self._suggestion_key = None, None
            if small:
                self.suggestion, self._suggestion_key = model_suggest(under[DOUBLEPLANE], model, "comm_only"), key
        labels = {v: variant_label(v, s) for v, s in vs.items()}
        # against this group's own classic (classic-c4 for segment-c4), as the speed-up beside it
        curve = (facade.engine_curve(under[DOUBLEPLANE], model, floor, baseline=vs[CLASSIC])
                 if small and rows.sdma(DOUBLEPLANE, floor).any() else None)
        engines = engines_line(floor, curve, labels[DOUBLEPLANE]) if curve is not None else ""
        self.modelled = {"model": model.name, "caption": model.caption(), "floor": floor, "classic_us": classic,
                         "doubleplane_us": dual, "speedup": classic / dual if dual > 0 else float("nan"),
                         "curve": self.suggestion is not None, "engines_line": engines, "settings": st.label,
                         "engines_curve": (curve, labels[DOUBLEPLANE]) if curve is not None else None,
                         "labels": labels}
        self._set_modelled_figure()

    def _variant_settings(self, st: KernelSettings) -> dict[str, KernelSettings]:
        """classic's and doubleplane's settings under the group ``st`` (classic without the segment layout)."""
        return {v: s for v, s, _ in group_variants([CLASSIC, DOUBLEPLANE], [st.label]).values()}

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
            s = model_suggest(rows, model, "comm_only", settings=self._variant_settings(st)[DOUBLEPLANE])
        except NotModelled as e:
            self.message = f"Cannot suggest a floor on {model.name}: {not_modelled_text(st.label, e.why)}"
            return None
        floor = int(self._values["min_sdma_bytes"])
        if st.is_reference and not self.modelled.get("engines_line") and rows.sdma(DOUBLEPLANE, floor).any():
            curve = facade.engine_curve(rows, model, floor)
            self.modelled["engines_line"] = engines_line(floor, curve)
            self.modelled["engines_curve"] = (curve, DOUBLEPLANE)
        self.suggest_seconds = time.perf_counter() - t0
        self.suggestion, self._suggestion_key = s, self._curve_key(model)
        self.modelled["curve"] = True
        self._set_modelled_figure()
        return s

    def unknowns(self) -> Unknowns | None:
        """What the unknowns do to the speed-up (:class:`Unknowns`): from Suggest's verdict when the
        current suggestion has one (the engine curve and the band at its floor), else from the
        current floor's engine curve; None when neither is known (no SDMA at this floor, a large
        case before Suggest, no plan)."""
        s = self.suggestion
        v = s.verdict if s is not None and self._suggestion_key is not None else None
        if v is not None and v.floor >= 0 and self.plan is not None:
            band = (f"the speed-up at {bytes_text(v.floor)} is {v.low:.3f}x - {v.high:.3f}x "
                    f"{v.against} over the unknowns' box (nominal {v.nominal:.3f}x; the model's resolution "
                    f"{RESOLUTION:.0%}): "
                    + ("it beats MTE-only throughout" if v.beats else
                       f"no floor beats MTE-only everywhere in the unknowns' box; {v.pays_if()}"))
            return Unknowns(int(v.floor), True, engines_sentence(v.floor, v.engines, v.label, v.against), band,
                            bool(v.beats), float(v.low), float(v.high))
        m = self.modelled
        if m.get("engines_curve") is None or "floor" not in m:
            return None
        curve, label = m["engines_curve"]
        return Unknowns(int(m["floor"]), False, engines_sentence(m["floor"], curve, label))

    def floor_choice(self) -> "FloorChoice | None":
        """What the current suggestion says about the floor (:func:`floor_choice`): the interval
        of floors that reach the best modelled time, or a tie with never-SDMA; None without one."""
        s = self.suggestion
        if s is None or self._suggestion_key is None or self.plan is None:
            return None
        return floor_choice(s)

    def suggested_floor(self) -> int | None:
        """The floor :meth:`use_suggestion` would set (bytes), or None without a current suggestion:
        the current floor when it is one of the best; else the floor Suggest priced its band over
        the unknowns at, when that is one of them; else :attr:`FloorChoice.floor` (inside the
        interval of best floors; for "never SDMA" one byte above every segment the rule could pick)."""
        c = self.floor_choice()
        if c is None:
            return None
        cur = self._values["min_sdma_bytes"]
        if not c.never and _is_int(cur) and c.lo <= cur <= c.hi:
            return int(cur)
        v = self.suggestion.verdict
        if not c.never and v is not None and c.lo <= v.floor <= c.hi:
            return int(v.floor)  # the floor Suggest's band is of: Use it shows that band, not another floor's
        return c.floor

    def use_suggestion(self) -> int | None:
        """Set ``min_sdma_bytes`` to :meth:`suggested_floor` and replan; returns the floor set, or
        None without a current suggestion."""
        floor = self.suggested_floor()
        if floor is not None:
            self.set(min_sdma_bytes=floor)
        return floor
