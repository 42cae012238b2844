"""The price of one operation on a link class: the single place where the model turns bytes into
time for the MTE and SDMA planes (docs/timing-model.md#3-costs). :mod:`.replay` (vectorised, from
the plan), :mod:`.recorded` (op by op, from a recorded stream), :mod:`.published` (the one-stream
tables) and the walkthrough's formulas all call these, so the engine model cannot drift apart.

Rates are bytes per microsecond (GB/s * 1e3); ``cls`` is a link class index (int or int array,
:meth:`~combine_lab.model.machines.NpuModel.pair_class`).
"""

from __future__ import annotations

import numpy as np

from .machines import NpuModel
from .stream import SQE_BYTES


def rate(gbps) -> np.ndarray | float:
    """Bytes per microsecond of ``gbps`` GB/s (decimal)."""
    return np.asarray(gbps, dtype=np.float64) * 1e3


def link_rate(model: NpuModel, cls) -> np.ndarray:
    """One way capacity of the link of class ``cls`` (bytes/us): ``<class>.link_GBps``."""
    return rate(model.link_values("link_GBps"))[cls]


def mte_remote_rate(model: NpuModel, cls) -> np.ndarray:
    """A core's UB -> remote GM rate over class ``cls`` (bytes/us): ``min(mte_remote_GBps, link)``."""
    return np.minimum(rate(model["mte_remote_GBps"]), link_rate(model, cls))


def sdma_rate(model: NpuModel, cls) -> np.ndarray:
    """One SDMA stream's byte rate over class ``cls`` (bytes/us): ``min(<class>.sdma_GBps, link)``."""
    return np.minimum(rate(model.link_values("sdma_GBps")), rate(model.link_values("link_GBps")))[cls]


def sdma_call_us(model: NpuModel, cls, nbytes) -> np.ndarray:
    """Engine time of one SDMA call of ``nbytes`` over class ``cls`` (us, float64 like
    ``nbytes``): the call is ``ceil(nbytes / 1 MiB)`` descriptors (SQEs), each of b bytes costing
    ``c + b / BW`` (the class's form ``additive``) or ``max(c, b / BW)`` (form ``max``), with
    ``c = <class>.sdma_sqe_us`` and ``BW`` = :func:`sdma_rate`. Zero bytes cost nothing."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    c = model.link_values("sdma_sqe_us")[cls]
    bw = sdma_rate(model, cls)
    is_max = model.max_form[cls]
    full = np.floor(nbytes / SQE_BYTES)
    rem = nbytes - full * SQE_BYTES
    additive = np.ceil(nbytes / SQE_BYTES) * c + nbytes / bw
    overlapped = full * np.maximum(c, SQE_BYTES / bw) + np.where(rem > 0, np.maximum(c, rem / bw), 0.0)
    return np.where(is_max, overlapped, additive)
