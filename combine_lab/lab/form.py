"""The tuning app's form: the values a kernel engineer sets (:data:`FIELDS`), what each may be
(:class:`Field`), the reason one cannot be used (:class:`Problem`), and the routing string they make.
No widgets and no state: :class:`combine_lab.lab.tuning.TuningState` holds the values and checks
them with these; :mod:`combine_lab.lab.app_form` shows them as controls."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..case.spec import DTYPES
from ..errors import ParameterError, SpecError
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from ..run.options import CHECKS
from . import plots

__all__ = ["Field", "Problem", "FIELDS", "RUN_CHECKS", "ROUTING_MODELS", "MODELS", "RUN_INPUTS", "routing_string",
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


def routing_string(model: str, skew: float | None = None, trace: str | None = None) -> str:
    """The routing string of :mod:`combine_lab.case.routing` for a model and its skew strength.

    ``model``: a key of :data:`ROUTING_MODELS`; ``skew``: S (zipf) or F (hot-expert, hot-rank),
    ignored otherwise; ``trace``: MODEL/DOMAIN/LAYER for model 'trace'.
    Raises SpecError for an unknown model or a missing trace name.
    """
    if model not in ROUTING_MODELS:
        raise SpecError(f"routing model={model!r}: must be one of {', '.join(ROUTING_MODELS)}",
                        parameter="routing_model", value=model,
                        allowed=f"must be one of {', '.join(ROUTING_MODELS)}")
    if model == "trace":
        if not trace:
            raise SpecError("routing model='trace': pick a trace (MODEL/DOMAIN/LAYER)", parameter="trace", value=trace,
                            allowed="pick a trace (MODEL/DOMAIN/LAYER)")
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
    line, e.g. ``"loops=0: must be an int >= 1"``."""

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
        """Every reason ``value`` is not allowed (empty: it is), never a corrected value; a run
        parameter (:data:`RUN_CHECKS`) by its validator, in its words (``"loops=0: must be an int >= 1"``).
        ``options`` overrides :attr:`options` (the targets and traces found at run time)."""
        opts = self.options if options is None else options
        if self.name in RUN_CHECKS:  # a run parameter: its one validator, as run_case and the CLI check it
            try:
                RUN_CHECKS[self.name](value)
            except ParameterError as e:
                return [Problem(self.name, value, e.allowed)]
            return []
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


#: The form's run parameters -> their validators (:data:`combine_lab.run.options.CHECKS`): a control
#: is marked with the words run_case, the harness and the command line refuse the value with.
RUN_CHECKS = {n: CHECKS[n] for n in ("min_sdma_bytes", "warmup", "loops", "repeats")}

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
