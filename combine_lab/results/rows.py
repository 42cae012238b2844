"""One row per run of one variant on one case: the schema that every results table shares.

The CLI's run table, the sweep's tidy CSV, the tuning app's history and the baseline's line
are all made of :class:`ResultRow`, and :func:`result_row` is the one function that makes one,
from any of:

- a :class:`~combine_lab.run.runner.RunResult`: a variant that ran (check PASS or FAIL);
- a :class:`NotRun`: a variant the target refused (check REFUSED: doubleplane on an NPU with
  CANN older than 9.0.0) or a run that failed (check ERROR), with the reason;
- a :class:`~combine_lab.run.baseline.BaselineResult`: the all_to_all baseline (variant
  ``gloo-a2a`` or ``hccl-a2a``);
- a :class:`~combine_lab.model.modelled.ModelledResult`: a variant priced by the timing model
  (check MODEL, target ``model:<name>``, the "modelled on ..." caption as its reason).

Comparing the variants happens here too, once: :func:`speedup` (classic time / doubleplane
time, above 1 when doubleplane is faster), :func:`verdict` over repeats, :func:`modelled_verdict`
for the one point a timing model gives, and :func:`compare_rows` for one comparison of the two
rows of a case.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Union

import numpy as np

from ..kernels import CLASSIC, DOUBLEPLANE
from ..case.spec import CaseSpec
from ..errors import ParameterError
from ..run.baseline import BaselineResult
from ..model.modelled import MODELLED, ModelledResult
from ..model.unknowns import RESOLUTION
from ..run.runner import RunResult

__all__ = ["PASS", "FAIL", "REFUSED", "ERROR", "METRICS", "SPEEDUP", "NO_SDMA", "NotRun", "ResultRow", "ROW_COLUMNS",
           "result_row", "speedup", "spread", "fold_repeats", "verdict", "modelled_verdict", "FASTER", "SLOWER", "TIE", "WITHIN_NOISE",
           "compare_rows", "COMPARISON_COLUMNS"]

#: Values of ``ResultRow.check``: x_out matched golden on every PE, or not; the variant was
#: refused on this target; the run failed (a PE failed or timed out).
PASS, FAIL, REFUSED, ERROR = "PASS", "FAIL", "REFUSED", "ERROR"
#: The two perf metrics (docs/formats.md#3-perf-csv).
METRICS = ("comm_only", "full_op")
#: What a speed-up is, wherever the lab shows one: above 1 when doubleplane is faster.
SPEEDUP = "speed-up = classic time / doubleplane time (above 1: doubleplane faster)"
#: Verdict of a case whose doubleplane run sent nothing by SDMA: both variants sent the same bytes.
NO_SDMA = "no SDMA: identical traffic"


def first_line(reason: str) -> str:
    """What a table shows of a reason: its first line (a failed PE's reason goes on with its log)."""
    return str(reason or "").split("\n", 1)[0]


@dataclass(frozen=True)
class NotRun:
    """A variant of a case that did not run: ``check`` is REFUSED (the target refuses it here)
    or ERROR (the run failed); ``reason`` says why. ``min_sdma_bytes``: the floor it would
    have run with (None where it does not apply)."""

    case_id: str
    routing: str
    dtype: str
    target: str
    variant: str
    check: str
    reason: str
    min_sdma_bytes: int | None = None
    kernel: str = ""
    settings: str = "reference"
    cores_per_rank: int | None = None

    @classmethod
    def of(cls, spec: CaseSpec, variant: str, target: str, check: str, reason: str,
           min_sdma_bytes: int | None = None, kernel: str = "", settings: str = "reference",
           cores_per_rank: int | None = None) -> "NotRun":
        """The NotRun of ``variant`` (your kernel's label, with ``kernel`` its folder) on the case
        ``spec``. Raises ParameterError for a check other than REFUSED or ERROR."""
        if check not in (REFUSED, ERROR):
            raise ParameterError(f"check={check!r}: a variant that did not run is {REFUSED!r} or {ERROR!r}",
                                 parameter="check", value=check)
        return cls(spec.case_id, spec.routing, spec.dtype, target, variant, check, reason, min_sdma_bytes, kernel,
                   settings, cores_per_rank)


@dataclass(frozen=True)
class ResultRow:
    """What one run of one variant on one case came to.

    Attributes:
        case_id, routing, dtype, target: the case and where it ran ('cpu' twin or 'npu').
        variant: ``classic`` | ``doubleplane`` | ``gloo-a2a`` | ``hccl-a2a`` (baseline), or your kernel's
            label (``reference:doubleplane``, ``user:<folder>``; docs/own-kernel.md).
        check: :data:`PASS` | :data:`FAIL` (x_out against golden on every PE) | :data:`REFUSED` | :data:`ERROR`
            | ``MODEL`` (priced by the timing model: nothing ran; ``reason`` holds "modelled on ...").
        comm_only_us, full_op_us: CoreMaxTime/us of the slowest profiled PE (baseline: mean over
            loops of the slowest rank); NaN when nothing was timed.
        min_sdma_bytes: the SDMA floor, bytes (None for the baseline).
        mte_bytes, sdma_bytes, payload_bytes: payload bytes of one launch summed over PEs, by
            MTE, by SDMA and both: what the twin counted, else (NPU) what the plan says; None when
            it did not run and for the baseline.
        planned_sdma_bytes: what the planner sends by SDMA for this variant, bytes (None likewise).
        sdma_share: sdma_bytes / payload_bytes in [0, 1] (0 when nothing was sent; NaN when it
            did not run and for the baseline).
        counters_ok: the twin's counters equal the plan (True where nothing counts them: NPU);
            None when it did not run and for the baseline.
        violations: status flags the twin's checker saw ready before their payload (None likewise).
        max_abs_err: largest |x_out - golden| over PEs (NaN when it did not run).
        reason: why it was refused or failed; '' otherwise.
        kernel: the folder of your kernel ('' for the lab's): its counters are compared with the
            plan of its rule, not required to equal it (a kernel with another rule shows how it
            differs: ``counters_ok`` False, ``ok`` still True when x_out and the checker pass).
        settings: the settings group the row belongs to (docs/variants.md: ``reference``,
            ``segment``, ``c6``, ``segment-c6``): summaries compare classic and doubleplane within
            one group; ``variant`` then names the run's own settings (``doubleplane-segment-c6``,
            and ``classic-c6`` in group ``segment-c6``, classic having no segment layout).
        cores_per_rank: AIV cores per source rank it ran with (None for the baseline and your kernel).
        sdma_calls: aclshmemx_sdma_put_nbi calls of one launch summed over PEs: the twin's count,
            else the plan's (None when it did not run and for the baseline).
    """

    case_id: str
    routing: str
    dtype: str
    target: str
    variant: str
    check: str
    comm_only_us: float
    full_op_us: float
    min_sdma_bytes: int | None
    mte_bytes: int | None
    sdma_bytes: int | None
    payload_bytes: int | None
    planned_sdma_bytes: int | None
    sdma_share: float
    counters_ok: bool | None
    violations: int | None
    max_abs_err: float
    reason: str = ""
    kernel: str = ""
    settings: str = "reference"
    cores_per_rank: int | None = None
    sdma_calls: int | None = None

    @property
    def ran(self) -> bool:
        """True when the variant ran to the end (check PASS or FAIL)."""
        return self.check in (PASS, FAIL)

    @property
    def ok(self) -> bool:
        """Ran, x_out matched golden on every PE, counters equal the plan (your kernel's: its declared
        rule's, docs/own-kernel.md#7-results-files-and-the-model) and no violation."""
        return self.check == PASS and self.counters_ok is not False and not self.violations

    def time_us(self, metric: str) -> float:
        """``comm_only_us`` or ``full_op_us`` by metric name. Raises ParameterError for another."""
        if metric not in METRICS:
            raise ParameterError(f"metric={metric!r}: must be 'comm_only' or 'full_op'",
                                 parameter="metric", value=metric, allowed="comm_only or full_op")
        return self.comm_only_us if metric == "comm_only" else self.full_op_us

    def as_dict(self) -> dict:
        """The row as a dict, keys in :data:`ROW_COLUMNS` order."""
        return dataclasses.asdict(self)


#: The fields of :class:`ResultRow`, in order: the columns every results table shares.
ROW_COLUMNS = [f.name for f in dataclasses.fields(ResultRow)]

Outcome = Union[RunResult, NotRun, BaselineResult, ModelledResult]


def _max_err(checks) -> float:
    return max((c.max_abs_err for c in checks), default=float("nan"))


def result_row(outcome: Outcome, settings: str | None = None) -> ResultRow:
    """The :class:`ResultRow` of a run, a variant that did not run, or a baseline run;
    ``settings``: its settings group (default: the run's own settings label).

    Raises ParameterError for anything else.
    """
    if isinstance(outcome, RunResult):
        mte, sdma = outcome.sent_bytes()
        pb = outcome.plane_bytes()
        calls = int(pb["sdma_puts"].sum()) if len(pb) else int(outcome.plan.totals["sdma_calls"].sum())
        return ResultRow(
            case_id=outcome.case_id, routing=outcome.routing, dtype=outcome.dtype, target=outcome.target,
            variant=outcome.label, check=PASS if outcome.check_ok else FAIL,
            comm_only_us=outcome.time_us("comm_only"), full_op_us=outcome.time_us("full_op"),
            min_sdma_bytes=int(outcome.min_sdma_bytes), mte_bytes=mte, sdma_bytes=sdma, payload_bytes=mte + sdma,
            planned_sdma_bytes=int(outcome.plan.totals["sdma_bytes"].sum()), sdma_share=outcome.sdma_share(),
            counters_ok=not outcome.counter_mismatches(), violations=int(outcome.violation_count),
            max_abs_err=_max_err(outcome.checks), kernel=str(outcome.kernel_source or ""),
            settings=settings or outcome.settings.label,
            cores_per_rank=None if outcome.kernel else outcome.settings.cores_per_rank, sdma_calls=calls)
    if isinstance(outcome, NotRun):
        nan = float("nan")
        return ResultRow(
            case_id=outcome.case_id, routing=outcome.routing, dtype=outcome.dtype, target=outcome.target,
            variant=outcome.variant, check=outcome.check, comm_only_us=nan, full_op_us=nan,
            min_sdma_bytes=outcome.min_sdma_bytes, mte_bytes=None, sdma_bytes=None, payload_bytes=None,
            planned_sdma_bytes=None, sdma_share=nan, counters_ok=None, violations=None, max_abs_err=nan,
            reason=outcome.reason, kernel=outcome.kernel, settings=settings or outcome.settings,
            cores_per_rank=outcome.cores_per_rank)
    if isinstance(outcome, BaselineResult):
        return ResultRow(
            case_id=outcome.case_id, routing=outcome.routing, dtype=outcome.dtype, target=outcome.target,
            variant=outcome.variant, check=PASS if outcome.check_ok else FAIL,
            comm_only_us=outcome.time_us("comm_only"), full_op_us=outcome.time_us("full_op"), min_sdma_bytes=None,
            mte_bytes=None, sdma_bytes=None, payload_bytes=None, planned_sdma_bytes=None, sdma_share=float("nan"),
            counters_ok=None, violations=None, max_abs_err=_max_err(outcome.checks))
    if isinstance(outcome, ModelledResult):  # priced, not run: planned bytes, nothing checked or counted
        sdma = int(outcome.plan.totals["sdma_bytes"].sum())
        mte = int(outcome.plan.totals["mte_bytes"].sum())
        return ResultRow(
            case_id=outcome.case.spec.case_id, routing=outcome.case.spec.routing, dtype=outcome.case.spec.dtype,
            target=f"model:{outcome.model.name}", variant=outcome.label, check=MODELLED,
            comm_only_us=outcome.time_us("comm_only"), full_op_us=outcome.time_us("full_op"),
            min_sdma_bytes=outcome.min_sdma_bytes, mte_bytes=mte, sdma_bytes=sdma, payload_bytes=mte + sdma,
            planned_sdma_bytes=sdma, sdma_share=sdma / (mte + sdma) if mte + sdma else 0.0, counters_ok=None,
            violations=None, max_abs_err=float("nan"), reason=outcome.caption, kernel=str(outcome.kernel_source or ""),
            settings=settings or outcome.settings.label,
            cores_per_rank=None if outcome.kernel_source else outcome.settings.cores_per_rank,
            sdma_calls=int(outcome.plan.totals["sdma_calls"].sum()))
    raise ParameterError(f"outcome={type(outcome).__name__}: must be a RunResult, NotRun, BaselineResult or "
                         "ModelledResult", parameter="outcome", value=type(outcome).__name__)


def speedup(classic_us, doubleplane_us):
    """classic time / doubleplane time: above 1 when doubleplane is faster (:data:`SPEEDUP`).

    Numbers give a float, arrays (or Series, taken in order) an array of float64. NaN where
    a time is missing or doubleplane's is not above 0 (nothing measured: nothing to compare).
    """
    c = np.asarray(classic_us, dtype=np.float64)
    d = np.asarray(doubleplane_us, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(d > 0, c / np.where(d > 0, d, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


#: The verdict words of :func:`verdict` and :func:`modelled_verdict`.
FASTER, SLOWER, TIE, WITHIN_NOISE = "faster", "slower", "tie", "within noise"


def spread(values) -> tuple[float, float]:
    """The spread the lab reports with every median over repeats: (min, max) of ``values`` (NaN
    left out; (NaN, NaN) when none). Min-max, not quartiles: with the few repeats a run makes,
    a difference is called real only when every repeat agrees."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return (float(v.min()), float(v.max())) if v.size else (float("nan"), float("nan"))


def fold_repeats(values) -> tuple[float, float, float]:
    """The one fold of a run's repeats into what the lab reports (docs/cli.md#9-repeats-spread-and-verdicts):
    (median, min, max) of ``values`` (times in us, or speed-ups; NaN left out); all NaN when none.
    The run table, the summary, the speed-up of any pair and the tuning app's history fold with it."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if not v.size:
        return (float("nan"),) * 3
    return (float(np.median(v)), *spread(v))


def verdict(speedups, sdma_bytes: float) -> str:
    """What the measured speed-ups of a case's repeats say, in one word or phrase
    (docs/cli.md#9-repeats-spread-and-verdicts).

    ``speedups``: one per repeat (:func:`speedup` of the same repeat's pair, classic /
    doubleplane; NaN left out); ``sdma_bytes``: what the doubleplane run sent by SDMA. Returns
    "no run" (nothing to compare), :data:`NO_SDMA` (identical traffic: the speed-up is timing
    noise), :data:`FASTER` (every repeat above 1), :data:`SLOWER` (every repeat below 1) or
    :data:`WITHIN_NOISE` (the spread, min to max, covers 1.0); with one repeat there is no spread
    to judge: "faster (1 repeat: no spread)", "slower (...)", or "tie (...)" at exactly 1.
    A timing model's point is judged by :func:`modelled_verdict` instead.
    """
    s = np.asarray(speedups, dtype=np.float64)
    s = s[~np.isnan(s)]
    if not s.size:
        return "no run"
    if sdma_bytes == 0:
        return NO_SDMA
    if s.size == 1:
        return f"{FASTER if s[0] > 1.0 else SLOWER if s[0] < 1.0 else TIE} (1 repeat: no spread)"
    lo, hi = spread(s)
    if lo > 1.0:
        return FASTER
    if hi < 1.0:
        return SLOWER
    return WITHIN_NOISE


def modelled_verdict(speedup_point: float, sdma_bytes: float) -> str:
    """What a timing model's speed-up of a case says (``--clock model:NAME``: one deterministic point,
    no repeats; docs/cli.md#9-repeats-spread-and-verdicts).

    ``speedup_point``: classic / doubleplane modelled time; ``sdma_bytes``: what the doubleplane
    plan sends by SDMA. Returns "no run" (NaN), :data:`NO_SDMA`, "tie (modelled point, within 5 %)"
    when it is within the model's resolution of 1 (:data:`combine_lab.model.unknowns.RESOLUTION`, the
    model's "parity"), else "faster (modelled point)" / "slower (modelled point)".
    """
    s = float(speedup_point)
    if not np.isfinite(s):
        return "no run"
    if sdma_bytes == 0:
        return NO_SDMA
    if abs(s - 1.0) <= RESOLUTION:  # the model's tie rule (unknowns.word: "parity")
        return f"{TIE} (modelled point, within {RESOLUTION * 100:g} %)"
    return f"{FASTER if s > 1.0 else SLOWER} (modelled point)"


#: Keys of :func:`compare_rows`, in order.
COMPARISON_COLUMNS = [c for m in METRICS for c in (f"{m}_classic_us", f"{m}_doubleplane_us", f"{m}_speedup")] + [
    "sdma_share", "check", "counters_ok", "reason"]


def compare_rows(rows: Iterable[ResultRow]) -> dict:
    """One comparison of classic and doubleplane on the same case, from their rows (a row's variant
    label may carry its kernel settings, ``doubleplane-segment-c4``: docs/variants.md).

    Returns a dict with :data:`COMPARISON_COLUMNS`: per metric (comm_only, full_op) both
    variants' times (us; NaN for a variant without a row or that did not run) and the
    :func:`speedup`; ``sdma_share``: the doubleplane run's (NaN when it did not run);
    ``check``: FAIL when a variant that ran failed, else PASS when one ran, else the rows'
    own (REFUSED, ERROR); ``counters_ok``: every run's counters equal its plan; ``reason``:
    "<variant>: <reason>" of each variant that did not run, joined by "; " ('' when none).
    """
    by_variant = {r.variant.split("-")[0]: r for r in rows}  # by its combine: classic-c4 is classic's
    nan = float("nan")

    def t(variant: str, metric: str) -> float:
        r = by_variant.get(variant)
        return r.time_us(metric) if r is not None and r.ran else nan

    out: dict = {}
    for m in METRICS:
        c, d = t(CLASSIC, m), t(DOUBLEPLANE, m)
        out.update({f"{m}_classic_us": c, f"{m}_doubleplane_us": d, f"{m}_speedup": speedup(c, d)})
    dual = by_variant.get(DOUBLEPLANE)
    out["sdma_share"] = dual.sdma_share if dual is not None and dual.ran else nan
    ran = [r for r in by_variant.values() if r.ran]
    if any(r.check == FAIL for r in ran):
        out["check"] = FAIL
    elif ran:
        out["check"] = PASS
    else:
        out["check"] = next(iter(by_variant.values())).check if by_variant else ERROR
    out["counters_ok"] = bool(ran) and all(r.counters_ok is not False for r in ran)
    out["reason"] = "; ".join(f"{r.variant}: {first_line(r.reason)}" for r in by_variant.values() if not r.ran)
    return out
