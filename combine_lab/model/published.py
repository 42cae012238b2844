"""The published one-stream transfer tables the machines are derived from, and their fits
(docs/timing-model.md#4-machines-and-parameters).

Each table is one issuing stream moving 128 MiB (or a batch) as blocks of B bytes, its rate per
block size in decimal GB/s, so one block takes ``t(B) = B / rate``. A fit gives the descriptor
cost ``c`` and the bandwidth ``BW`` of one of two forms: ``additive``, ``t = c + B / BW``, or
``max``, ``t = max(c, B / BW)``, by least squares on the relative error of t. Which tables fit
a model value and which only check it (never both) is said per table (:data:`TABLES`, ``use``);
tests/model/test_model_validation.py re-fits the first and prices the second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KIB, MIB = 1024, 1024 * 1024


@dataclass(frozen=True)
class Table:
    """One published table: ``rows`` ((block bytes, GB/s), ...), ``source`` (repository and file,
    graded M), ``chip``, ``link`` (the class it measures), ``use``: "fit" (a model value comes from
    it) or "check" (it validates, never fits); ``min_block``, ``max_block``: the blocks the fit and
    the check take (a host-driven table's small blocks measure the host, not the link; above 2 MiB
    only one table has rows, which set ``link_GBps`` instead)."""

    name: str
    chip: str
    link: str
    source: str
    rows: tuple[tuple[int, float], ...]
    use: str
    min_block: int = 0
    max_block: int = 2 * MIB


TABLES = {t.name: t for t in [
    Table("hixl_a2_write", "a2", "hccs", "M: hicann/hixl benchmarks/performance_en.md, A2 one server, hixl_cs D2rD "
          "write", ((16 * KIB, 8.903), (32 * KIB, 12.778), (64 * KIB, 15.780), (128 * KIB, 17.787),
                    (256 * KIB, 19.018), (512 * KIB, 19.680), (1 * MIB, 20.031), (2 * MIB, 20.284)), "fit"),
    Table("fabricmem_a3_die_pair", "a3", "die_pair", "M: hicann/hixl benchmarks/performance_en.md, A3 one server "
          "(devices 0, 1), FabricMem AICPU unfold D2rD: SDMA, one stream, one SQE per descriptor",
          ((16 * KIB, 16.113), (32 * KIB, 37.012), (64 * KIB, 70.338), (128 * KIB, 125.744), (256 * KIB, 162.611),
           (512 * KIB, 170.724), (1 * MIB, 170.514), (2 * MIB, 165.513)), "fit"),
    Table("hixl_a3_die_pair", "a3", "die_pair", "M: hicann/hixl benchmarks/performance_en.md, A3 one server "
          "(devices 0, 1), hixl_cs D2rD write", ((16 * KIB, 18.018), (32 * KIB, 36.710), (64 * KIB, 70.133),
                                                 (128 * KIB, 122.422), (256 * KIB, 156.034), (512 * KIB, 161.101),
                                                 (1 * MIB, 161.185), (2 * MIB, 164.610)), "check"),
    Table("memfabric_a3_die_pair", "a3", "die_pair", "M: Ascend/memfabric_hybrid example/trans/perf/README.md, BM "
          "SDMA host-driven, 32 blocks per batch, device 0 -> 1", ((32 * KIB, 9.70), (128 * KIB, 39.98),
                                                                   (512 * KIB, 151.83), (1 * MIB, 179.72),
                                                                   (4 * MIB, 184.24), (16 * MIB, 186.61)),
          "check", 1 * MIB, 16 * MIB),
    Table("memfabric_a3_card", "a3", "card", "M: Ascend/memfabric_hybrid example/trans/perf/README.md, BM SDMA "
          "host-driven, 32 blocks per batch, device 0 -> 2 (two cards of one server)",
          ((32 * KIB, 9.79), (128 * KIB, 37.72), (512 * KIB, 93.10), (1 * MIB, 110.23), (2 * MIB, 122.04),
           (16 * MIB, 133.87)), "fit", 512 * KIB),
    Table("fabricmem_a3_server", "a3", "server", "M: hicann/hixl benchmarks/performance_en.md, A3 two servers of a "
          "SuperPoD, FabricMem AICPU unfold D2rD", ((16 * KIB, 4.282), (32 * KIB, 9.831), (64 * KIB, 18.419),
                                                    (128 * KIB, 32.156), (256 * KIB, 51.698), (512 * KIB, 72.708),
                                                    (1 * MIB, 91.918), (2 * MIB, 105.036)), "fit"),
    Table("hixl_a3_server", "a3", "server", "M: hicann/hixl benchmarks/performance_en.md, A3 two servers, hixl_cs "
          "(comm domain) D2rD", ((16 * KIB, 3.471), (128 * KIB, 22.87), (1 * MIB, 71.708), (2 * MIB, 89.985)),
          "check"),
]}


@dataclass(frozen=True)
class Fit:
    """A fit of one table: ``form``, ``c_us``, ``bw_GBps``, ``worst_error_pct`` (the largest
    |modelled / published - 1| of the block time over the rows fitted), ``rows`` fitted."""

    form: str
    c_us: float
    bw_GBps: float
    worst_error_pct: float
    rows: int


def block_us(form: str, c_us: float, bw_GBps: float, nbytes) -> np.ndarray:
    """One block's time by a fit's form (us), as the model prices an SDMA call of that size
    (:func:`combine_lab.model.costs.call_us`: one descriptor per MiB, each ``c + b / BW`` or
    ``max(c, b / BW)``)."""
    from .costs import call_us

    return call_us(nbytes, c_us, bw_GBps * 1e3, form == "max")


def fit_table(name: str, form: str, cap_GBps: float | None = None) -> Fit:
    """Least-squares fit of table ``name`` by ``form`` (``additive`` or ``max``) over its rows
    from ``min_block`` up: the log of modelled over published block time, minimised.

    ``cap_GBps``: the class's ``link_GBps``. One stream never moves faster than its link, so a
    free fit whose BW lands above it (a short table's c and BW trade off) is re-made with BW at the
    cap and only c fitted (docs/timing-model.md#4-machines-and-parameters)."""
    from scipy.optimize import least_squares  # slow to import: only where a fit is made

    t = TABLES[name]
    rows = [(b, r) for b, r in t.rows if t.min_block <= b <= t.max_block]
    B = np.array([b for b, _ in rows], dtype=np.float64)
    T = B / (np.array([r for _, r in rows]) * 1e3)

    def res(x):
        return np.log(block_us(form, np.exp(x[0]), np.exp(x[1]), B) / T)

    best = None
    for c0 in (0.3, 1.0, 3.0):  # the max form has kinks: start from a few places
        f = least_squares(res, np.log([c0, float(B[-1] / T[-1] / 1e3)]), method="lm" if len(B) > 2 else "trf")
        if best is None or f.cost < best.cost:
            best = f
    c, bw = np.exp(best.x)
    if cap_GBps is not None and bw > cap_GBps:
        bw = float(cap_GBps)
        best = None
        for c0 in (0.3, 1.0, 3.0):
            f = least_squares(lambda x: res([x[0], np.log(bw)]), [np.log(c0)], method="trf")
            if best is None or f.cost < best.cost:
                best = f
        c = float(np.exp(best.x[0]))
    err = float(np.max(np.abs(block_us(form, c, bw, B) / T - 1)) * 100)
    return Fit(form, float(c), float(bw), err, len(rows))
