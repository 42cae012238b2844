"""The machines of the timing model: one TOML file per machine in ``data/npu_models/``, each a set
of parameters (an :class:`NpuModel`).

Each parameter has a value, a unit and either a source (a row of
docs/timing-model.md#4-machines-and-parameters, with its grade) or ``assumed = true`` with a rationale and
a plausible range, where nothing is published. Whatever shows a modelled time says which
machine it was modelled on and which parameters are assumed (:meth:`NpuModel.caption`);
``combine-lab calibrate`` fits the assumed ones to measured perf CSVs.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomli_w

from ..errors import ParameterError
from ..formats.files import write_atomic

MODELS_DIR = Path(__file__).resolve().parents[2] / "data" / "npu_models"

#: Every parameter the model reads, with its unit (the files must give exactly these).
PARAMETERS = {
    "link_GBps": "GB/s", "egress_GBps": "GB/s", "core_gm_GBps": "GB/s", "mte_remote_GBps": "GB/s",
    "mte_put_us": "us", "flag_us": "us", "flag_latency_us": "us", "quiet_us": "us", "sdma_engines": "engines",
    "sdma_GBps": "GB/s", "sdma_sqe_us": "us", "sdma_issue_us": "us", "sdma_quiet_us": "us",
    "vec_elems_per_us": "elements/us", "wait_us": "us", "barrier_us": "us",
}
#: Counts are not fitted.
NOT_FITTED = ("sdma_engines",)


@dataclass(frozen=True)
class Param:
    """One parameter: ``value`` in ``unit``; ``source`` (published, with grade) or ``assumed``
    with ``rationale`` and ``range`` (low, high); ``fit``: calibration fits it by default (an
    assumed parameter that per-core times cannot tell apart from another says ``fit = false``)."""

    name: str
    value: float
    unit: str
    source: str = ""
    assumed: bool = False
    rationale: str = ""
    range: tuple[float, float] | None = None
    fit: bool = True


@dataclass(frozen=True)
class NpuModel:
    """A machine the model prices: ``name`` (a2, a3, host, or a calibrated file's name),
    ``machine`` (words), ``soc`` (whose AIV count sets block_dim), ``aiv_cores``, ``params``."""

    name: str
    machine: str
    soc: str
    aiv_cores: int
    params: dict[str, Param] = field(default_factory=dict)
    path: str = ""

    def __getitem__(self, name: str) -> float:
        return self.params[name].value

    @property
    def assumed(self) -> list[str]:
        """Names of the assumed parameters, in file order."""
        return [n for n, p in self.params.items() if p.assumed]

    @property
    def fittable(self) -> list[str]:
        """The assumed parameters calibration fits by default (counts and ``fit = false`` excluded)."""
        return [n for n in self.assumed if n not in NOT_FITTED and self.params[n].fit]

    def with_values(self, **values: float) -> "NpuModel":
        """A copy with some values replaced (same units, sources and flags)."""
        unknown = sorted(set(values) - set(self.params))
        if unknown:
            raise ParameterError(f"unknown model parameter(s) {unknown}: one of {sorted(self.params)}")
        params = dict(self.params)
        for k, v in values.items():
            params[k] = replace(params[k], value=float(v))
        return replace(self, params=params)

    def caption(self) -> str:
        """'modelled on <name> (<machine>); assumed: a, b, c' -- to show beside any modelled time."""
        assumed = ", ".join(self.assumed) or "none"
        return f"modelled on {self.name} ({self.machine}); assumed parameters: {assumed}"

    def to_toml(self, path: str | Path, note: str = "") -> Path:
        """Write this model as a TOML file that :func:`load_model` reads back."""
        doc = {"name": self.name, "machine": self.machine, "soc": self.soc, "aiv_cores": self.aiv_cores,
               "params": {}}
        if note:
            doc["note"] = note
        for n, p in self.params.items():
            entry = {"value": float(p.value), "unit": p.unit}
            if p.source:
                entry["source"] = p.source
            if p.assumed:
                entry["assumed"] = True
            if p.rationale:
                entry["rationale"] = p.rationale
            if p.range is not None:
                entry["range"] = [float(p.range[0]), float(p.range[1])]
            if not p.fit:
                entry["fit"] = False
            doc["params"][n] = entry
        return write_atomic(Path(path), tomli_w.dumps(doc))


def model_names() -> list[str]:
    """Models shipped in data/npu_models/ (e.g. ['a2', 'a3', 'host'])."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.toml"))


def load_model(name: str | Path) -> NpuModel:
    """The model called ``name`` in data/npu_models/, or the TOML file at path ``name``.

    Raises:
        ParameterError: unknown name (listing the known ones), a file that is not TOML, or
            parameters missing, unknown, without unit/source or with the wrong unit.
    """
    p = Path(name)
    if p.suffix != ".toml":
        p = MODELS_DIR / f"{name}.toml"
        if not p.is_file():
            raise ParameterError(f"model={str(name)!r}: one of {', '.join(model_names())}, or a .toml file")
    try:
        doc = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ParameterError(f"{p}: not a readable TOML model file ({e})") from None
    raw = doc.get("params", {})
    missing, unknown = sorted(set(PARAMETERS) - set(raw)), sorted(set(raw) - set(PARAMETERS))
    if missing or unknown:
        raise ParameterError(f"{p}: parameters missing {missing} / unknown {unknown}")
    params = {}
    for n in PARAMETERS:  # one canonical order
        e = raw[n]
        if e.get("unit") != PARAMETERS[n]:
            raise ParameterError(f"{p}: {n}.unit={e.get('unit')!r}: must be {PARAMETERS[n]!r}")
        if not e.get("assumed") and not e.get("source"):
            raise ParameterError(f"{p}: {n} has neither a source nor assumed = true")
        rng = e.get("range")
        params[n] = Param(n, float(e["value"]), e["unit"], e.get("source", ""), bool(e.get("assumed", False)),
                          e.get("rationale", ""), (float(rng[0]), float(rng[1])) if rng else None,
                          bool(e.get("fit", True)))
        if params[n].value <= 0:
            raise ParameterError(f"{p}: {n}={params[n].value}: must be > 0")
    return NpuModel(str(doc.get("name", p.stem)), str(doc.get("machine", "")), str(doc.get("soc", "")),
                    int(doc.get("aiv_cores", 40)), params, str(p))
