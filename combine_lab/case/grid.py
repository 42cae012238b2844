"""The cases of a sweep or of a command line: the product of value lists, every case validated first.

    grid = make_grid(pes=[2], bs=[64, 128], h=[8192, 16384], topk=[2], expert_per_pe=[2],
                     routings=["uniform", "hot-expert:0.5"])
    grid.specs     # 8 CaseSpecs, in product order; grid.skipped: the invalid ones, when skipped

The one grid maker: ``combine-lab run|compare`` with ``--bs-list ...``, the sweep notebook and
:func:`combine_lab.lab.sweep.run_sweep` all take their cases from here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..errors import SpecError
from ..values import as_list
from .spec import CaseSpec

__all__ = ["Grid", "make_grid"]


@dataclass
class Grid:
    """The cases of a sweep: ``specs`` (valid CaseSpecs, in product order) and ``skipped``
    (``(parameters, reason)`` for each invalid combination when skipping was asked for)."""

    specs: list[CaseSpec]
    skipped: list[tuple[dict, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.specs)


def make_grid(pes, bs, h, topk, expert_per_pe, routings, dtype="int32_t", seed: int = 42,
              masked_fraction: float = 0.0, skip_invalid: bool = False) -> Grid:
    """The product of the axes as CaseSpecs, every one validated before anything runs.

    Each axis is a list, a single value, or a string as papermill ``-p`` passes it
    (``"[8, 16]"``, ``"8,16"``); ``routings`` and ``dtype`` likewise hold strings.
    Order: routing, dtype, pes, bs, h, topk, expert_per_pe (the last varies fastest).

    Raises SpecError naming every invalid combination (for example topk > E with a
    distinct routing), unless ``skip_invalid``: then they are listed in ``Grid.skipped``.
    """
    axes = {"routing": as_list(routings, str, "routings"), "dtype": as_list(dtype, str, "dtype"),
            "pes": as_list(pes, int, "pes"), "bs": as_list(bs, int, "bs"), "h": as_list(h, int, "h"),
            "topk": as_list(topk, int, "topk"), "expert_per_pe": as_list(expert_per_pe, int, "expert_per_pe")}
    specs, skipped, first = [], [], None
    for values in itertools.product(*axes.values()):
        params = dict(zip(axes, values))
        try:
            specs.append(CaseSpec(seed=seed, masked_fraction=masked_fraction, **params))
        except SpecError as e:
            skipped.append((params, str(e)))
            first = first or e
    if skipped and not skip_invalid:
        if not specs and len(skipped) == 1:  # one case: its own error (the CLI names the flag)
            raise first
        lines = "; ".join(f"{p}: {why}" for p, why in skipped[:5])
        more = f" (and {len(skipped) - 5} more)" if len(skipped) > 5 else ""
        raise SpecError(f"{len(skipped)} of {len(skipped) + len(specs)} sweep cases are invalid: {lines}{more}",
                        parameter=first.parameter, value=first.value)
    return Grid(specs, skipped)
