"""How a case is run, checked in one place: one validator per run parameter (warmup, loops,
repeats, prof_pe, min_sdma_bytes, target, timeout_s, chaos_seed, fnpu, fpe) and
:class:`RunOptions`, the group of them that :func:`combine_lab.run.runner.run_case` and the
harness's :class:`~combine_lab.harness.Run` take.

Every entry calls these and no other check of its own: the Python API (``run_case``,
``harness.Run``, ``run_sweep``), the command line (which puts its flag first: ``--loops=0: must be
an int >= 1 ...``) and the tuning app's form (which marks the control with the same words). Each
validator raises :class:`~combine_lab.errors.ParameterError` with ``parameter`` (the Python name),
``value`` and ``allowed`` set, the message ``"<parameter>=<value!r>: <allowed>"``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES

__all__ = ["RunOptions", "TARGETS", "CHECKS", "check_warmup", "check_loops", "check_repeats", "check_prof_pe",
           "check_min_sdma_bytes", "check_target", "check_timeout_s", "check_chaos_seed", "check_fnpu", "check_fpe",
           "check_perf", "profiled_pes", "OPTION_FIELDS"]

#: Where a run can be made: ``cpu`` (the twin) or ``npu`` (Ascend).
TARGETS = ("cpu", "npu")


def _is_int(v: Any) -> bool:
    return isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_))


def _int_at_least(name: str, value: Any, lo: int) -> int:
    if not _is_int(value) or value < lo:
        raise ParameterError.of(name, value, f"must be an int >= {lo}")
    return int(value)


def check_warmup(value: Any) -> int:
    """Untimed launches before profiling: an int >= 0. Returns it as an int; raises ParameterError."""
    return _int_at_least("warmup", value, 0)


def check_loops(value: Any) -> int:
    """Profiled launches: an int >= 1. Returns it as an int; raises ParameterError."""
    return _int_at_least("loops", value, 1)


def check_repeats(value: Any) -> int:
    """How many times a run is made (its repeats interleaved with the other runs'): an int >= 1."""
    return _int_at_least("repeats", value, 1)


def check_min_sdma_bytes(value: Any) -> int:
    """The SDMA floor of the decision rule (docs/decision-rule.md#1-the-rule), bytes: an int >= 0."""
    return _int_at_least("min_sdma_bytes", value, 0)


def check_fpe(value: Any) -> int:
    """The first PE id passed to the driver: an int >= 0."""
    return _int_at_least("fpe", value, 0)


def check_fnpu(value: Any) -> int:
    """The first NPU (PE r runs on NPU fnpu + r): an int >= 0."""
    if not _is_int(value) or value < 0:
        raise ParameterError.of("fnpu", value, "must be an NPU id >= 0 (PE r runs on NPU fnpu + r)")
    return int(value)


def check_prof_pe(value: Any, pes: int | None = None) -> int | str:
    """The profiled PE: ``"all"`` or a PE number, in ``[0, pes - 1]`` once the case's ``pes`` is
    known (``None``: any PE number >= 0). Returns ``"all"`` or the int; raises ParameterError."""
    if value == "all" and isinstance(value, str):
        return "all"
    if not _is_int(value):
        raise ParameterError.of("prof_pe", value, "must be a PE number or 'all'")
    if pes is not None and not 0 <= value < pes:
        raise ParameterError.of("prof_pe", value, f"must be 'all' or a PE in [0, {pes - 1}]")
    if value < 0:
        raise ParameterError.of("prof_pe", value, "must be 'all' or a PE number >= 0")
    return int(value)


def profiled_pes(prof_pe: Any, pes: int) -> list[int]:
    """The PEs a ``prof_pe`` profiles on a case of ``pes`` PEs: every PE for ``"all"``, else that one.
    Raises ParameterError as :func:`check_prof_pe` (the one check of a profiled PE, whatever the clock)."""
    pe = check_prof_pe(prof_pe, pes)
    return list(range(pes)) if pe == "all" else [pe]


def check_target(value: Any) -> str:
    """Where the run is made: one of :data:`TARGETS`."""
    if value not in TARGETS or not isinstance(value, str):
        raise ParameterError.of("target", value, f"must be one of {', '.join(TARGETS)}")
    return value


def check_timeout_s(value: Any) -> float:
    """The limit of each launch of all PEs, seconds: a number > 0 (``inf``: none)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or math.isnan(value) or value <= 0:
        raise ParameterError.of("timeout_s", value, "must be > 0 seconds")
    return value


def check_chaos_seed(value: Any, target: str = "cpu") -> int | None:
    """The twin's chaos mode: None (off) or an int >= 0, on target ``cpu`` only."""
    if value is None:
        return None
    if not _is_int(value) or value < 0 or target != "cpu":
        raise ParameterError.of("chaos_seed", value, "must be an int >= 0, on target cpu (the twin)")
    return int(value)


def check_perf(value: Any) -> bool:
    """Whether perf rows are recorded: a bool (or 0/1)."""
    if not isinstance(value, (bool, np.bool_)) and not (_is_int(value) and value in (0, 1)):
        raise ParameterError.of("perf", value, "must be True or False")
    return bool(value)


#: Parameter -> its validator (one argument; prof_pe without the case's PEs, chaos_seed on the twin):
#: what the tuning app's form calls to mark a control.
CHECKS = {"warmup": check_warmup, "loops": check_loops, "repeats": check_repeats, "prof_pe": check_prof_pe,
          "min_sdma_bytes": check_min_sdma_bytes, "target": check_target, "timeout_s": check_timeout_s,
          "chaos_seed": check_chaos_seed, "fnpu": check_fnpu, "fpe": check_fpe, "perf": check_perf}


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How one run of a case is made, each field checked when it is made (raises ParameterError: one per
    bad field, by that field's validator above, its message ``"<field>=<value!r>: <allowed>"``).

    These fields are written here only: the harness's :class:`~combine_lab.harness.Run` is a RunOptions
    with the case, the clock and the repeats added (its option fields, defaults and checks are these),
    and :func:`combine_lab.run.runner.run_case` groups its keywords into one.

    Attributes:
        warmup, loops: untimed launches before profiling and profiled launches (>= 0, >= 1).
        perf: record perf rows of the profiled PE(s); without it one launch is checked and nothing is timed.
        prof_pe: the profiled PE, or ``"all"`` (every PE in turn: one launch sequence each); checked
            against the case's PEs by :meth:`prof_pes`.
        min_sdma_bytes: the SDMA floor of the decision rule, bytes (docs/decision-rule.md#1-the-rule: 2 MiB).
        target: ``cpu`` (the twin) or ``npu``, for the wall clock.
        timeout_s: limit of each launch of all PEs, seconds.
        chaos_seed: the twin's chaos mode (None: off).
        fnpu, fpe: first NPU and first PE id of the driver.
    """

    warmup: int = 0
    loops: int = 1
    perf: bool = True
    prof_pe: int | str = 0
    min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES
    target: str = "cpu"
    timeout_s: float = 120.0
    chaos_seed: int | None = None
    fnpu: int = 0
    fpe: int = 0

    def __post_init__(self):
        # the order the errors are raised in: what a person sets most often first
        for name in ("warmup", "loops", "min_sdma_bytes", "fpe", "target"):
            object.__setattr__(self, name, CHECKS[name](getattr(self, name)))
        object.__setattr__(self, "chaos_seed", check_chaos_seed(self.chaos_seed, self.target))
        for name in ("timeout_s", "fnpu", "prof_pe", "perf"):
            object.__setattr__(self, name, CHECKS[name](getattr(self, name)))

    def prof_pes(self, pes: int) -> list[int]:
        """The PEs profiled on a case of ``pes`` PEs, one launch sequence each (one PE without
        ``perf``: nothing is profiled). Raises ParameterError for a PE past the case's."""
        chosen = profiled_pes(self.prof_pe, pes)
        return chosen if self.perf else chosen[:1]


#: The names of :class:`RunOptions`'s fields, in order: what :class:`~combine_lab.harness.Run` and
#: run_case take as the run's options.
OPTION_FIELDS = tuple(f.name for f in fields(RunOptions))
