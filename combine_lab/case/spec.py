"""CaseSpec: the validated parameters of one combine case (docs/protocol.md#1-the-combine-problem, docs/protocol.md#2-dispatch-layout and docs/formats.md#1-case-files)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from .routing import check_routing, parse_routing

__all__ = ["DTYPES", "DTYPES_TEXT", "CaseSpec", "SpecError"]

#: sizeof(T) of each ``-type``, known without importing ml_dtypes.
_ITEMSIZE = {"int32_t": 4, "float16_t": 2, "bfloat16_t": 2}


class _Dtypes(Mapping):
    """The ``-type`` names and their numpy types, ml_dtypes imported on the first look-up of
    bfloat16_t: the import costs about 0.5 s of CPU, which a modelled case never needs
    (docs/timing-model.md#1-what-the-model-is). Equal to the plain dict of the same items."""

    def __getitem__(self, name: str) -> type:
        if name == "int32_t":
            return np.int32
        if name == "float16_t":
            return np.float16
        if name == "bfloat16_t":
            import ml_dtypes  # lazily, see the class docstring

            return ml_dtypes.bfloat16
        raise KeyError(name)

    def __iter__(self):
        return iter(_ITEMSIZE)

    def __len__(self) -> int:
        return len(_ITEMSIZE)

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and name in _ITEMSIZE

    def __repr__(self) -> str:
        return repr(dict(self))


#: Output/activation dtypes T the combine supports (docs/protocol.md#2-dispatch-layout): the
#: ``-type`` names and their numpy types (bfloat16: ml_dtypes', whose casts round half to even),
#: a read-only mapping that equals ``{"int32_t": np.int32, "float16_t": np.float16,
#: "bfloat16_t": ml_dtypes.bfloat16}``.
DTYPES = _Dtypes()
#: What a message says is allowed.
DTYPES_TEXT = ", ".join(repr(d) for d in DTYPES)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class CaseSpec:
    """Parameters of one combine case; validated on construction.

    Fields: ``pes`` (ranks), ``bs`` (tokens per rank), ``h`` (hidden size, elements),
    ``topk``, ``expert_per_pe``: ints >= 1; ``dtype``: 'int32_t', 'float16_t' or 'bfloat16_t'
    (docs/protocol.md#2-dispatch-layout); ``seed``: int >= 0;
    ``routing``: a routing string (see :mod:`combine_lab.routing`); ``masked_fraction``:
    number in [0, 1], the share of (rank, token, topk) slots masked to expert id -1.
    Numpy integers are stored as Python ints.

    Raises SpecError naming the field, the value and what is allowed; for distinct
    routings (every model but uniform) topk must be <= moe_expert_num, plus the
    model's own limits (:func:`combine_lab.case.routing.check_routing`).
    """

    pes: int
    bs: int
    h: int
    topk: int
    expert_per_pe: int
    dtype: str = "int32_t"
    seed: int = 42
    routing: str = "uniform"
    masked_fraction: float = 0.0

    def __post_init__(self):
        for name in ("pes", "bs", "h", "topk", "expert_per_pe"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise SpecError.of(name, v, "must be an int >= 1")
            object.__setattr__(self, name, int(v))
        if not isinstance(self.dtype, str) or self.dtype not in DTYPES:
            raise SpecError.of("dtype", self.dtype, f"must be one of {DTYPES_TEXT}")
        if not _is_int(self.seed) or self.seed < 0:
            raise SpecError.of("seed", self.seed, "must be an int >= 0")
        object.__setattr__(self, "seed", int(self.seed))
        mf = self.masked_fraction
        if not (isinstance(mf, (int, float, np.integer, np.floating)) and not isinstance(mf, bool)
                and math.isfinite(mf) and 0.0 <= mf <= 1.0):
            raise SpecError.of("masked_fraction", mf, "must be a number in [0, 1]")
        object.__setattr__(self, "masked_fraction", float(mf))
        check_routing(parse_routing(self.routing), self.pes, self.expert_per_pe, self.topk)

    @property
    def moe_expert_num(self) -> int:
        """E = pes * expert_per_pe."""
        return self.pes * self.expert_per_pe

    @property
    def np_dtype(self) -> type:
        """numpy scalar type of T (np.int32, np.float16 or ml_dtypes.bfloat16)."""
        return DTYPES[self.dtype]

    @property
    def itemsize(self) -> int:
        """sizeof(T) in bytes (4 or 2)."""
        return _ITEMSIZE[self.dtype]

    @property
    def row_bytes(self) -> int:
        """Bytes of one token row: h * itemsize."""
        return self.h * self.itemsize

    @property
    def case_id(self) -> str:
        """``shape_{bs}_{h}_{topk}_{E}_{pes}`` (docs/formats.md#1-case-files)."""
        return f"shape_{self.bs}_{self.h}_{self.topk}_{self.moe_expert_num}_{self.pes}"

    @property
    def capacity_rows(self) -> int:
        """Receive rows per destination PE: pes * bs * topk (docs/protocol.md#2-dispatch-layout)."""
        return self.pes * self.bs * self.topk

    def to_meta(self) -> dict:
        """meta.json content: the reference keys of docs/formats.md#1-case-files (pe_size, bs,
        h, topk, expert_per_pe, moe_expert_num, dtype, expert_compute='identity') then
        the extra keys seed, routing, masked_fraction."""
        return {
            "pe_size": self.pes, "bs": self.bs, "h": self.h, "topk": self.topk,
            "expert_per_pe": self.expert_per_pe, "moe_expert_num": self.moe_expert_num,
            "dtype": self.dtype, "expert_compute": "identity",
            "seed": self.seed, "routing": self.routing, "masked_fraction": self.masked_fraction,
        }
