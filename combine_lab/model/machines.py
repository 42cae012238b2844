"""The machines of the timing model: one TOML file per machine in ``data/npu_models/``, each a set
of parameters (an :class:`NpuModel`) and the link classes its PE pairs fall into.

Each parameter has a value, a unit and either a source (a published table, graded, with the fit
that gives the value: form, fitted values, error) or an ``assumed = [low, high]`` range with the
reason, where nothing is published (docs/timing-model.md#4-machines-and-parameters). The link
parameters (``link_GBps``, ``sdma_sqe_us``, ``sdma_GBps``) and the SDMA cost form are per link
class: on A3 the two dies of a card (SIO), the cards of one server (HCCS), the servers of a
SuperPoD; each PE pair's class comes from the file's stated rank -> die/card/server map
(:meth:`NpuModel.pair_class`). A link parameter is named ``<class>.<name>``
(``die_pair.sdma_GBps``); a model with one class also answers to the bare name.

Whatever shows a modelled time says which machine it was modelled on and which parameters are
assumed (:meth:`NpuModel.caption`); ``combine-lab calibrate`` fits the assumed ones to measured
perf CSVs.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import tomli_w

from ..errors import ParameterError
from ..formats.files import write_atomic

MODELS_DIR = Path(__file__).resolve().parents[2] / "data" / "npu_models"

#: Every chip-wide parameter the model reads, with its unit (the files must give exactly these).
PARAMETERS = {
    "egress_GBps": "GB/s", "core_gm_GBps": "GB/s", "mte_remote_GBps": "GB/s",
    "mte_put_us": "us", "flag_us": "us", "flag_latency_us": "us", "quiet_us": "us", "sdma_engines": "engines",
    "sdma_issue_us": "us", "sdma_quiet_us": "us", "vec_elems_per_us": "elements/us", "wait_us": "us",
    "barrier_us": "us", "hbm_GBps": "GB/s",
}
#: The parameters of each link class, with their unit.
LINK_PARAMETERS = {"link_GBps": "GB/s", "sdma_sqe_us": "us", "sdma_GBps": "GB/s"}
#: Link parameters a class may have (absent: no such limit, infinite): ``uplink_GBps``, what all
#: the dies of one server send over the class together, one way (a3's ``server`` class: the
#: server's uplinks into the SuperPoD network; docs/timing-model.md#3-costs).
OPTIONAL_LINK_PARAMETERS = {"uplink_GBps": "GB/s"}
#: SDMA cost forms of one descriptor of b bytes: c + b / BW (additive) or max(c, b / BW) (max:
#: the descriptor's fixed cost overlapped with its bytes).
SDMA_FORMS = ("additive", "max")
#: Which PE pairs a link class takes (the rank map: die = rank % dies_per_card, card = rank //
#: dies_per_card % cards_per_server, server = rank // (dies_per_card * cards_per_server)).
PAIRS = ("same_card", "same_server", "other_server", "any")
#: Counts are not fitted.
NOT_FITTED = ("sdma_engines",)


@dataclass(frozen=True)
class Param:
    """One parameter: ``value`` in ``unit``; ``source`` (published, with grade) and ``fit`` (the
    fit that gives the value from the source's table: a dict with form, fitted values, error), or
    ``assumed`` with ``rationale`` (the reason) and ``range`` (low, high); ``calibrate``:
    calibration fits it by default (an assumed parameter that per-core times cannot tell apart
    from another says ``calibrate = false``)."""

    name: str
    value: float
    unit: str
    source: str = ""
    assumed: bool = False
    rationale: str = ""
    range: tuple[float, float] | None = None
    fit: bool = True
    derivation: dict | None = None

    @property
    def cost(self) -> bool:
        """Whether a larger value makes everything slower (a time), else faster (a rate, a count)."""
        return self.unit == "us"


@dataclass(frozen=True)
class LinkClass:
    """A link class: ``name``, the PE ``pair`` it takes (:data:`PAIRS`), ``what`` (words) and the
    SDMA cost ``form`` (:data:`SDMA_FORMS`, with ``form_source``: why that form)."""

    name: str
    pair: str
    what: str
    form: str
    form_source: str = ""


@dataclass(frozen=True)
class Topology:
    """The rank map: rank r is die ``r % dies_per_card`` of card ``r // dies_per_card %
    cards_per_server`` of server ``r // (dies_per_card * cards_per_server)``; at most
    ``servers`` servers (``why`` says what limits them)."""

    dies_per_card: int = 1
    cards_per_server: int = 1 << 30
    servers: int = 1
    why: str = ""

    @property
    def max_pes(self) -> int:
        return self.dies_per_card * self.cards_per_server * self.servers

    def text(self) -> str:
        d, c = self.dies_per_card, self.cards_per_server
        if c >= 1 << 30:
            return "every PE pair one link class"
        die = f"die r % {d} of card r // {d} % {c}" if d > 1 else f"card r % {c}"
        return f"rank r is {die} of server r // {d * c} (at most {self.servers} server(s))"


@dataclass(frozen=True)
class NpuModel:
    """A machine the model prices: ``name`` (a2, a3, host, or a calibrated file's name),
    ``machine`` (words), ``soc`` (whose AIV count sets block_dim), ``aiv_cores``, ``params``
    (chip-wide ones by name, link ones as ``<class>.<name>``), ``links`` (the link classes, in
    file order) and ``topology``."""

    name: str
    machine: str
    soc: str
    aiv_cores: int
    params: dict[str, Param] = field(default_factory=dict)
    path: str = ""
    links: tuple[LinkClass, ...] = ()
    topology: Topology = Topology()
    target: str = "npu"  # what it models: npu, or cpu (the CPU twin: host.toml); calibrate takes only such data
    data: dict | None = None  # the data a calibrated model was fitted to (files, target, soc)

    def _key(self, name: str) -> str:
        if name in self.params:
            return name
        if name in LINK_PARAMETERS and len(self.links) == 1:
            return f"{self.links[0].name}.{name}"
        return name

    def __getitem__(self, name: str) -> float:
        key = self._key(name)
        if key not in self.params:
            raise KeyError(f"{name}: not a parameter of {self.name} (one of {', '.join(self.params)})")
        return self.params[key].value

    def param(self, name: str) -> Param:
        """The :class:`Param` of ``name`` (a link one as ``<class>.<name>``, bare with one class)."""
        return self.params[self._key(name)]

    def link_values(self, name: str) -> np.ndarray:
        """float64 [classes]: link parameter ``name`` of each class, in :attr:`links` order (an
        optional one, :data:`OPTIONAL_LINK_PARAMETERS`, is ``inf`` where a class has none)."""
        default = np.inf if name in OPTIONAL_LINK_PARAMETERS else None
        return np.array([self.params[f"{c.name}.{name}"].value if default is None or f"{c.name}.{name}" in self.params
                         else default for c in self.links], dtype=np.float64)

    def server_dies(self, pes: int) -> np.ndarray:
        """int64 [pes]: how many PEs of a launch of ``pes`` share each PE's server (the rank map,
        :func:`rank_place`): what a server's uplinks are divided by (docs/timing-model.md#3-costs)."""
        server = rank_place(self, np.arange(int(pes)))[0]
        return np.bincount(server)[server]

    @property
    def max_form(self) -> np.ndarray:
        """bool [classes]: the classes whose SDMA cost has the max form."""
        return np.array([c.form == "max" for c in self.links], dtype=bool)

    def pair_class(self, pes: int) -> np.ndarray:
        """int64 [pes, pes]: the link class (index into :attr:`links`) of each PE pair (sender,
        receiver), from the rank map (:class:`Topology`); a PE and itself: its own die's class.

        Raises:
            ParameterError: more PEs than the machine has (the topology's ``why`` says why).
        """
        if pes > self.topology.max_pes:
            raise ParameterError(f"pes={pes}: {self.name} models at most {self.topology.max_pes} PEs "
                                 f"({self.topology.why or self.topology.text()})", parameter="pes", value=pes)
        return _pair_class(self.topology, tuple(c.pair for c in self.links), int(pes))

    def link_class(self, src, dst) -> np.ndarray | str:
        """The name of the link class PE ``src`` uses to write to PE ``dst`` (ints or int arrays,
        broadcast together; a str for two ints, else an array of str): the rank map of
        :class:`Topology` (:func:`link_class`, the stable entry point; docs/timing-model.md#4-machines-and-parameters).

        Raises:
            ParameterError: a rank < 0 or beyond the machine (``parameter="src"`` or ``"dst"``).
        """
        return link_class(self, src, dst)

    @property
    def assumed(self) -> list[str]:
        """Names of the assumed parameters, in file order."""
        return [n for n, p in self.params.items() if p.assumed]

    @property
    def fittable(self) -> list[str]:
        """The assumed parameters calibration fits by default (counts and ``calibrate = false`` excluded)."""
        return [n for n in self.assumed if n not in NOT_FITTED and self.params[n].fit]

    def with_values(self, **values: float) -> "NpuModel":
        """A copy with some values replaced (same units, sources and flags); link parameters as
        ``**{"die_pair.sdma_GBps": 120.0}`` (bare names with one class)."""
        keyed = {self._key(k): v for k, v in values.items()}
        unknown = sorted(set(keyed) - set(self.params))
        if unknown:
            raise ParameterError(f"unknown model parameter(s) {unknown}: one of {sorted(self.params)}",
                                 parameter="values", value=unknown, allowed=str(sorted(self.params)))
        params = dict(self.params)
        for k, v in keyed.items():
            params[k] = replace(params[k], value=float(v))
        return replace(self, params=params)

    def points(self, values: dict[str, object]) -> "ModelPoints":
        """K points of this machine at once (:class:`ModelPoints`): ``values`` maps chip-wide
        parameters of :data:`PARAMETERS` to float arrays [K] (or scalars); the others keep this
        model's value, the link classes' parameters too.

        Raises:
            ParameterError: a name that is no chip-wide parameter, arrays of different lengths.
        """
        unknown = sorted(set(values) - set(PARAMETERS))
        if unknown:
            raise ParameterError(f"unknown chip-wide parameter(s) {unknown}: one of {sorted(PARAMETERS)}",
                                 parameter="values", value=unknown, allowed=str(sorted(PARAMETERS)))
        arrays = {n: np.atleast_1d(np.asarray(v, dtype=np.float64)) for n, v in values.items()}
        k = {len(a) for a in arrays.values()} - {1} or {1}
        if len(k) > 1:
            raise ParameterError(f"points of different lengths: {sorted(k)}", parameter="values", value=sorted(k))
        K = k.pop()
        full = {}
        for n in PARAMETERS:  # np.full, not broadcast_to + copy: the unknowns' search builds thousands of these
            a = arrays.get(n)
            full[n] = np.full(K, self.params[n].value if a is None else a[0]) if a is None or len(a) != K else a.copy()
        return ModelPoints(self, full)

    def caption(self) -> str:
        """'modelled on <name> (<machine>); assumed: a, b, c' -- to show beside any modelled time."""
        assumed = ", ".join(self.assumed) or "none"
        return f"modelled on {self.name} ({self.machine}); assumed parameters: {assumed}"

    def to_toml(self, path: str | Path, note: str = "", data: dict | None = None) -> Path:
        """Write this model as a TOML file that :func:`load_model` reads back; ``data`` (default
        :attr:`data`): the data it was fitted to (``[data]``: files, target, soc)."""
        doc = {"name": self.name, "machine": self.machine, "soc": self.soc, "aiv_cores": self.aiv_cores,
               "target": self.target}
        if note:
            doc["note"] = note
        data = self.data if data is None else data
        if data:
            doc["data"] = dict(data)
        t = self.topology
        if self.links and self.links[0].pair != "any":
            doc["topology"] = {"dies_per_card": t.dies_per_card, "cards_per_server": t.cards_per_server,
                               "servers": t.servers, "why": t.why}
        doc["params"] = {n: _entry(p) for n, p in self.params.items() if "." not in n}
        doc["links"] = {}
        for c in self.links:
            link = {"pair": c.pair, "what": c.what, "sdma_form": c.form}
            if c.form_source:
                link["sdma_form_source"] = c.form_source
            for n in (*LINK_PARAMETERS, *OPTIONAL_LINK_PARAMETERS):
                if f"{c.name}.{n}" in self.params:
                    link[n] = _entry(self.params[f"{c.name}.{n}"])
            doc["links"][c.name] = link
        return write_atomic(Path(path), tomli_w.dumps(doc))


@dataclass(frozen=True)
class ModelPoints:
    """K parameter points of one machine, priced together (:func:`.replay.stage1` over the
    unknowns' box, :mod:`.unknowns`): ``values`` maps every chip-wide parameter to float64 [K];
    the link classes' parameters are ``model``'s. ``points[name]`` is float64 [K, 1], so that it
    broadcasts against per-element arrays [K, n]."""

    model: NpuModel
    values: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.values["egress_GBps"])

    def __getitem__(self, name: str) -> np.ndarray:
        key = self.model._key(name)
        if key in self.values:
            return self.values[key][:, None]
        return np.full((len(self), 1), self.model[name])

    def link_values(self, name: str) -> np.ndarray:
        """float64 [classes]: the model's (links do not vary across the points)."""
        return self.model.link_values(name)

    @property
    def links(self):
        return self.model.links

    @property
    def max_form(self) -> np.ndarray:
        return self.model.max_form

    def pair_class(self, pes: int) -> np.ndarray:
        return self.model.pair_class(pes)

    def at(self, k: int) -> NpuModel:
        """Point ``k`` as an :class:`NpuModel`."""
        return self.model.with_values(**{n: float(v[k]) for n, v in self.values.items()})


def _entry(p: Param) -> dict:
    entry = {"value": float(p.value), "unit": p.unit}
    if p.source:
        entry["source"] = p.source
    if p.derivation:
        entry["fit"] = dict(p.derivation)
    if p.assumed:
        entry["assumed"] = [float(p.range[0]), float(p.range[1])]
        entry["reason"] = p.rationale
    if not p.fit:
        entry["calibrate"] = False
    return entry


@lru_cache(maxsize=64)
def _pair_class(t: Topology, pairs: tuple[str, ...], pes: int) -> np.ndarray:
    r = np.arange(pes)
    card = r // t.dies_per_card
    server = card // t.cards_per_server
    kind = np.where(card[:, None] == card[None, :], 0, np.where(server[:, None] == server[None, :], 1, 2))
    out = np.zeros((pes, pes), dtype=np.int64)
    for i, pair in enumerate(pairs):
        if pair == "any":
            out[:] = i
        else:
            out[kind == PAIRS.index(pair)] = i
    for k, pair in enumerate(("same_card", "same_server", "other_server")):  # a kind with no class of its own:
        if pair not in pairs and (kind == k).any():                            # the next wider one that has one
            wider = next((pairs.index(w) for w in PAIRS[k + 1:3] if w in pairs), None)
            narrower = next((pairs.index(w) for w in reversed(PAIRS[:k]) if w in pairs), 0)
            out[kind == k] = wider if wider is not None else narrower
    out.flags.writeable = False
    return out


def rank_place(model: NpuModel, rank) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(server, card, die) of ``rank`` (int or int array) on ``model``'s rank map
    (:class:`Topology`): die ``r % dies_per_card`` of card ``r // dies_per_card % cards_per_server``
    of server ``r // (dies_per_card * cards_per_server)``; each int64 like ``rank``. A machine of
    one class for every pair (the older file form) is one server of one card per rank.

    Raises:
        ParameterError: a rank < 0 or >= the machine's PEs (``parameter="rank"``).
    """
    return _place(model, rank, "rank")


def _place(model: NpuModel, rank, what: str):
    t = model.topology
    r = np.asarray(rank, dtype=np.int64)
    if r.size and (r.min() < 0 or r.max() >= t.max_pes):
        bad = int(r.min()) if r.min() < 0 else int(r.max())
        raise ParameterError(f"{what}={bad}: a rank of {model.name} in [0, {t.max_pes - 1}] "
                             f"({t.why or t.text()})", parameter=what, value=bad)
    card = r // t.dies_per_card
    return card // t.cards_per_server, card % t.cards_per_server, r % t.dies_per_card


def link_class(model: NpuModel, src, dst) -> np.ndarray | str:
    """The name of the link class (``model.links[i].name``: on a3 ``die_pair``, ``card`` or
    ``server``; on a2 ``hccs``) that PE ``src`` uses to write to PE ``dst``: the rank map
    (:func:`rank_place`) -> same card, same server or another server -> the class taking that
    pair (a kind with no class of its own takes the next wider class that has one, as
    :meth:`NpuModel.pair_class`). A PE and itself: its own die's class. ``src`` and ``dst``:
    ints or int arrays (broadcast); a str for two ints, else an array of str of the broadcast
    shape. The one rank map the model, the probe fits and the bandwidth tables share
    (docs/timing-model.md#4-machines-and-parameters).

    Raises:
        ParameterError: a rank < 0 or beyond the machine (``parameter="src"`` or ``"dst"``).
    """
    s, d = np.broadcast_arrays(np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64))
    ss, sc, _ = _place(model, s, "src")
    ds, dc, _ = _place(model, d, "dst")
    kind = np.where((ss == ds) & (sc == dc), 0, np.where(ss == ds, 1, 2))
    pairs = tuple(c.pair for c in model.links)
    # the class of each kind, as _pair_class picks it (a 3 x 3 rank map of one die per kind)
    by_kind = np.array([_kind_class(pairs, k) for k in range(3)], dtype=np.int64)
    names = np.array([c.name for c in model.links], dtype=object)[by_kind[kind]]
    return str(names) if kind.ndim == 0 else names


def _kind_class(pairs: tuple[str, ...], k: int) -> int:
    """The class index that takes pairs of kind ``k`` (0 same card, 1 same server, 2 other server)."""
    if "any" in pairs:
        return pairs.index("any")
    if PAIRS[k] in pairs:
        return pairs.index(PAIRS[k])
    wider = next((pairs.index(w) for w in PAIRS[k + 1:3] if w in pairs), None)
    narrower = next((pairs.index(w) for w in reversed(PAIRS[:k]) if w in pairs), 0)
    return wider if wider is not None else narrower


def model_names() -> list[str]:
    """Models shipped in data/npu_models/ (e.g. ['a2', 'a3', 'host'])."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.toml"))


def _param(p: Path, n: str, e: dict, unit: str) -> Param:
    if not isinstance(e, dict):
        raise ParameterError(f"{p}: {n}: a table with value and unit", parameter="model", value=p)
    if e.get("unit") != unit:
        raise ParameterError(f"{p}: {n}.unit={e.get('unit')!r}: must be {unit!r}", parameter="model", value=p)
    assumed = e.get("assumed", False)
    rng = e.get("range")
    if isinstance(assumed, list):  # assumed = [low, high]
        if len(assumed) != 2:
            raise ParameterError(f"{p}: {n}.assumed={assumed!r}: [low, high]", parameter="model", value=p)
        rng, assumed = assumed, True
    reason = e.get("reason", e.get("rationale", ""))
    if not assumed and not e.get("source"):
        raise ParameterError(f"{p}: {n} has neither a source nor an assumed range", parameter="model", value=p)
    if assumed and not (rng and reason):
        raise ParameterError(f"{p}: {n} is assumed without a range [low, high] and a reason",
                             parameter="model", value=p)
    fit = e.get("fit")
    par = Param(n, float(e["value"]), unit, e.get("source", ""), bool(assumed), reason,
                (float(rng[0]), float(rng[1])) if rng else None,
                bool(e.get("calibrate", fit if isinstance(fit, bool) else True)),
                dict(fit) if isinstance(fit, dict) else None)
    if par.value <= 0:
        raise ParameterError(f"{p}: {n}={par.value}: must be > 0", parameter="model", value=p)
    return par


def load_model(name: str | Path) -> NpuModel:
    """The model called ``name`` in data/npu_models/, or the TOML file at path ``name``.

    The file (docs/formats.md#10-model-files): ``[params.<name>]`` for every chip-wide parameter
    of :data:`PARAMETERS`; ``[links.<class>]`` with ``pair``, ``what``, ``sdma_form`` and a table
    per parameter of :data:`LINK_PARAMETERS`; ``[topology]`` (the rank map). A file of the older
    form, the link parameters among ``params``, is one class taking every pair.

    Raises:
        ParameterError: unknown name (listing the known ones), a file that is not TOML, or
            parameters missing, unknown, without unit/source or with the wrong unit, a link class
            without a pair or form the model knows.
    """
    p = Path(name)
    if p.suffix != ".toml":
        p = MODELS_DIR / f"{name}.toml"
        if not p.is_file():
            raise ParameterError(f"model={str(name)!r}: one of {', '.join(model_names())}, or a .toml file",
                                 parameter="model", value=name, allowed=", ".join(model_names()))
    try:
        doc = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ParameterError(f"{p}: not a readable TOML model file ({e})", parameter="model", value=p) from None
    raw = dict(doc.get("params", {}))
    links_raw = dict(doc.get("links", {}))
    if not links_raw:  # the older form: one class for every pair
        links_raw = {"all": {"pair": "any", "what": "every PE pair", "sdma_form": "additive",
                             **{n: raw.pop(n) for n in LINK_PARAMETERS if n in raw}}}
    if "hbm_GBps" not in raw:  # a file written before HBM was priced: it reads as before
        raw["hbm_GBps"] = {"value": 1e9, "unit": "GB/s", "assumed": [1e9, 1e9], "calibrate": False,
                           "reason": "not in this (older) model file: HBM not priced, as when it was written"}
    missing, unknown = sorted(set(PARAMETERS) - set(raw)), sorted(set(raw) - set(PARAMETERS))
    if missing or unknown:
        raise ParameterError(f"{p}: parameters missing {missing} / unknown {unknown}", parameter="model", value=p)
    params = {n: _param(p, n, raw[n], PARAMETERS[n]) for n in PARAMETERS}  # one canonical order
    links = []
    for cname, e in links_raw.items():
        pair, form = e.get("pair"), e.get("sdma_form")
        if pair not in PAIRS:
            raise ParameterError(f"{p}: links.{cname}.pair={pair!r}: one of {', '.join(PAIRS)}",
                                 parameter="model", value=p)
        if form not in SDMA_FORMS:
            raise ParameterError(f"{p}: links.{cname}.sdma_form={form!r}: one of {', '.join(SDMA_FORMS)}",
                                 parameter="model", value=p)
        miss = sorted(set(LINK_PARAMETERS) - set(e))
        if miss:
            raise ParameterError(f"{p}: links.{cname}: parameters missing {miss}", parameter="model", value=p)
        links.append(LinkClass(cname, pair, str(e.get("what", "")), form, str(e.get("sdma_form_source", ""))))
        for n, unit in LINK_PARAMETERS.items():
            params[f"{cname}.{n}"] = _param(p, f"{cname}.{n}", e[n], unit)
        for n, unit in OPTIONAL_LINK_PARAMETERS.items():
            if n in e:
                params[f"{cname}.{n}"] = _param(p, f"{cname}.{n}", e[n], unit)
    t = doc.get("topology")
    topo = Topology(int(t.get("dies_per_card", 1)), int(t.get("cards_per_server", 1 << 30)),
                    int(t.get("servers", 1)), str(t.get("why", ""))) if t else Topology(1, 1 << 30, 1)
    target = str(doc.get("target", "npu"))
    if target not in ("npu", "cpu"):
        raise ParameterError(f"{p}: target={target!r}: npu (a machine of NPUs) or cpu (the CPU twin)",
                             parameter="model", value=p)
    return NpuModel(str(doc.get("name", p.stem)), str(doc.get("machine", "")), str(doc.get("soc", "")),
                    int(doc.get("aiv_cores", 40)), params, str(p), tuple(links), topo, target,
                    dict(doc["data"]) if isinstance(doc.get("data"), dict) else None)
