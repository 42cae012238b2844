"""The one door into the timing model for code outside ``combine_lab/model/``: price a case's
variant under kernel settings, the curve over floors, the verdict over the unknowns, the engine
curve. Every function takes the kernel's settings the same way, the keyword ``settings=``
(KernelSettings, a settings label, or None: the rows' own, the reference's for a case's rows;
docs/variants.md), and converts them once, here.

    from combine_lab.model import facade
    rows = facade.rows_of(case, a3)                        # the model's view of a case (CaseRows)
    t = facade.times(rows, rows.sdma(DOUBLEPLANE, floor), a3, settings="segment-c4")   # ModelledTimes
    us = facade.comm_only_us(rows, mask, a3)               # stage 1 only: the slowest PE's comm_only
    s = facade.floor_curve(rows, a3, "comm_only")          # Suggestion: every floor where the plan changes
    v = facade.unknowns(rows, a3, floor, settings="c4", baseline="c4")   # Verdict over the unknowns
    e = facade.engine_curve(rows, a3, floor)               # speed-up at 1-48 SDMA engines
    r = facade.price_case(case, DOUBLEPLANE, a3, settings="c6")          # ModelledResult: a run without the run

Settings other than the reference's that the model refuses (a ParameterError: more cores per rank
than the SoC has, a segment layout for classic) raise :class:`NotModelled`, whose message the sweep
and the tuning app show in place of a number ("not modelled for <label> yet (...)"), so that a
number the model gives for the reference is never shown as another setting's. For the
reference's settings a ParameterError is the caller's mistake and passes unchanged.

The curve over floors and the verdict over the unknowns (the costly ones: a search of the unknowns'
box) are remembered by content, the last :data:`REMEMBERED` of them (:func:`remembered`): the same case,
settings, machine values and options give a copy of the same answer without pricing again.

The harness prices a Run on a model clock through :func:`price_case` / :func:`price_kernel`; the
tuning app's modelled panel, the sweep's modelled grid and the walkthrough through the rest. The
model's inner steps (``replay``, ``stage1``, ``model_case``) stay inside this folder
(tests/test_package_layout.py::test_the_model_is_entered_through_its_facade).
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..case.case import Case
from ..errors import ParameterError
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES
from ..planning.settings import KernelSettings, parse_settings
from .machines import NpuModel
from .modelled import ModelledResult, model_case
from .replay import ModelledTimes, replay, settings_args, stage1
from .stream import CaseRows, case_rows
from .suggest import Suggestion, suggest
from .unknowns import Verdict, engines_curve, verdict

__all__ = ["NotModelled", "not_modelled_text", "REFERENCE_ONLY", "refused_as_not_modelled", "rows_of", "under",
           "rows_fingerprint", "remembered", "REMEMBERED",
           "times", "comm_only_us", "floor_curve", "unknowns", "engine_curve", "price_case", "price_kernel"]

#: Why the model prices no settings other than the reference's, when it gives no other reason.
REFERENCE_ONLY = "the timing model prices the reference's settings only: one core per source rank, one SDMA call per row"


def not_modelled_text(label: str, why: str = "") -> str:
    """What the lab says in place of a modelled number for settings ``label``."""
    return f"not modelled for {label} yet" + (f" ({why})" if why else "")


class NotModelled(ParameterError):
    """The timing model does not price these kernel settings (yet): ``label`` names them, ``why``
    says what the model said (:data:`REFERENCE_ONLY` when it said nothing)."""

    def __init__(self, label: str, why: str = ""):
        self.label, self.why = label, why or REFERENCE_ONLY
        super().__init__(f"settings={label!r}: " + not_modelled_text(label, self.why), parameter="settings",
                         value=label)


def refused_as_not_modelled(settings: KernelSettings | None, call: Callable[[], Any]) -> Any:
    """``call()``; for settings other than the reference's, a ParameterError it raises becomes
    :class:`NotModelled` (its message kept as ``why``). The one place the lab's "not modelled for
    <label> yet" comes from."""
    if settings is None or settings.is_reference:
        return call()
    try:
        return call()
    except NotModelled:
        raise
    except ParameterError as e:  # the model refuses these settings: said, never priced as the reference
        raise NotModelled(settings.label, str(e)) from e


#: How many curves over floors and verdicts over the unknowns are kept (:func:`remembered`).
REMEMBERED = 32
_memo: "OrderedDict[tuple, Any]" = OrderedDict()
_memo_lock = threading.Lock()


def rows_fingerprint(rows: CaseRows) -> str:
    """A digest of everything the model reads of ``rows`` (every array, shape and setting): equal for
    the same case, routing and settings on the same SoC, whichever object holds them."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((rows.pes, rows.epp, rows.bs, rows.topk, rows.h, rows.itemsize, rows.block_dim, rows.settings,
                   rows.soc)).encode())
    for a in (rows.counts, rows.dest, rows.seg, rows.pos, rows.owner, rows.slot, rows.valid, rows.expert_ids):
        if a is not None:
            h.update(repr((a.dtype.str, a.shape)).encode())
            h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def remembered(kind: str, rows: CaseRows, model: NpuModel, options: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()``, or a copy of what it gave for the same ``kind``, rows (:func:`rows_fingerprint`),
    machine (every parameter's value and range: a calibrated or edited model is another) and
    ``options`` among the last :data:`REMEMBERED` answers. The tuning app asks again for a case it
    showed before (a value changed and changed back, another app on the same case) and gets the
    curve and verdict at once; each caller gets its own copy (its frames are its to change). A
    refusal (an exception) is not kept."""
    key = (kind, rows_fingerprint(rows), repr(model), options)
    try:
        hash(key)
    except TypeError:  # an option that is no value (a list, a dict): priced, not kept
        return compute()
    with _memo_lock:
        hit = _memo.get(key)
        if hit is not None:
            _memo.move_to_end(key)
    if hit is None:
        hit = compute()
        with _memo_lock:
            _memo[key] = hit
            while len(_memo) > REMEMBERED:
                _memo.popitem(last=False)
    return copy.deepcopy(hit)


def _settings(settings: KernelSettings | str | None) -> KernelSettings | None:
    return None if settings is None else parse_settings(settings)


def rows_of(case: Case, model: NpuModel, settings: KernelSettings | str | None = None) -> CaseRows:
    """The model's view of ``case`` on ``model``'s SoC (:func:`.stream.case_rows`): drawn routing,
    counts per segment, block_dim of ``settings`` (default the reference's).

    Raises:
        NotModelled: settings other than the reference's that the SoC cannot run.
        ParameterError: a settings label that is not one (docs/variants.md).
    """
    st = _settings(settings)
    return refused_as_not_modelled(st, lambda: case_rows(case, model.soc, st))


def under(rows: CaseRows, settings: KernelSettings | str | None) -> CaseRows:
    """``rows`` under kernel ``settings`` (None: as they are): the conversion every function here makes.

    Raises:
        NotModelled: settings other than the reference's that the SoC cannot run.
    """
    st = _settings(settings)
    return rows if st is None else refused_as_not_modelled(st, lambda: rows.with_settings(st))


def times(rows: CaseRows, sdma: np.ndarray, model: NpuModel, *, settings: KernelSettings | str | None = None,
          what_if: str | None = None) -> ModelledTimes:
    """Modelled comm_only and full_op per PE and core (us) of the plan ``sdma`` (bool [pes, epp*pes]:
    any plan, not only the rule's) under ``settings``, on ``model`` (:func:`.replay.replay`).
    ``what_if="segment"``: one SDMA call per segment instead of per row (the reference's what-if,
    docs/timing-model.md).

    Raises:
        NotModelled: as :func:`under`. ValueError: an unknown ``what_if``.
    """
    st = _settings(settings)
    return refused_as_not_modelled(st, lambda: replay(under(rows, st), sdma, model, sdma_mode=what_if))


def comm_only_us(rows: CaseRows, sdma: np.ndarray, model: NpuModel, *,
                 settings: KernelSettings | str | None = None) -> float:
    """Modelled comm_only of the slowest PE (us) of plan ``sdma`` under ``settings``: stage 1 only,
    which is all comm_only holds (what the tuning app's panel redraws at every change, so no stage 2
    is priced for it).

    Raises:
        NotModelled: as :func:`under`.
    """
    st = _settings(settings)

    def price() -> float:
        r = under(rows, st)
        comm, _ = stage1(r.counts, sdma, np.arange(r.pes), r.pes, r.block_dim, r.epp, r.row_bytes, model,
                         **settings_args(r))
        return float(comm.max())
    return refused_as_not_modelled(st, price)


def floor_curve(rows: CaseRows, model: NpuModel, metric: str = "comm_only", *,
                settings: KernelSettings | str | None = None, **options) -> Suggestion:
    """The modelled time of ``metric`` at every floor where the plan changes, the best floor and the
    verdict over the unknowns there (:func:`.suggest.suggest`, whose ``options`` pass on: what_if,
    unknowns, variant, baseline) under ``settings`` (default the rows' own).

    Raises:
        NotModelled: settings other than the reference's that the model refuses.
        ParameterError: as :func:`.suggest.suggest` (metric, what_if, variant).
    """
    st = _settings(settings)
    key = (metric, st, tuple(sorted(options.items(), key=lambda kv: kv[0])))
    return refused_as_not_modelled(st, lambda: remembered("floor_curve", rows, model, key, lambda: suggest(
        rows, model, metric, settings=st, **options)))


def unknowns(rows: CaseRows, model: NpuModel, floor: int, *, settings: KernelSettings | str | None = None,
             **options) -> Verdict:
    """The verdict over the model's unknowns at ``floor`` (bytes) under ``settings``
    (:func:`.unknowns.verdict`, whose ``options`` pass on: variant, baseline, joint;
    docs/timing-model.md#8-choosing-the-floor).

    Raises:
        NotModelled: settings other than the reference's that the model refuses.
        ParameterError: as :func:`.unknowns.verdict` (too many PEs for the machine, a bad baseline).
    """
    st = _settings(settings)

    def price() -> Verdict:
        r = under(rows, st)
        return remembered("unknowns", r, model, (int(floor), tuple(sorted(options.items(), key=lambda kv: kv[0]))),
                          lambda: verdict(r, model, int(floor), **options))
    return refused_as_not_modelled(st, price)


def engine_curve(rows: CaseRows, model: NpuModel, floor: int, *, settings: KernelSettings | str | None = None,
                 baseline: KernelSettings | str | None = None) -> pd.DataFrame:
    """The speed-up at ``floor`` under ``settings`` over classic under ``baseline`` (default the
    reference's) at each SDMA engine count 1-48, the rest nominal (DataFrame: engines, speedup;
    :func:`.unknowns.engines_curve`).

    Raises:
        NotModelled: settings other than the reference's that the model refuses.
    """
    st = _settings(settings)
    return refused_as_not_modelled(st, lambda: engines_curve(under(rows, st), model, int(floor), baseline=baseline))


def price_case(case: Case, variant: str, model: NpuModel, min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES,
               prof_pe: int | str = 0, warmup: int = 5, loops: int = 50, *,
               settings: KernelSettings | str | None = None) -> ModelledResult:
    """One variant of ``case`` priced on ``model`` as a run would report it (perf rows, sidecar,
    CoreMaxTime per profiled PE): :func:`.modelled.model_case`, the harness's model clock.

    Raises:
        ParameterError: as :func:`.modelled.model_case` (variant, prof_pe, settings the SoC cannot run).
    """
    return model_case(case, variant, model, min_sdma_bytes, prof_pe, warmup, loops, settings=settings)


def price_kernel(case, kernel, model: NpuModel, **options) -> ModelledResult:
    """Your kernel (a folder or KernelSource) priced on ``model`` from the operation stream it records in
    one launch on the twin (:func:`.recorded.model_kernel`, whose ``options`` pass on).

    Raises: as :func:`.recorded.model_kernel`.
    """
    from .recorded import model_kernel  # launches the twin: imported only when a kernel is priced

    return model_kernel(case, kernel, model, **options)
