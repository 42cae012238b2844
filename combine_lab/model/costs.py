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
    """One SDMA stream's byte rate over class ``cls`` (bytes/us): ``<class>.sdma_GBps``, its table's
    fit, never above the link (``min(sdma_GBps, link_GBps)``: one stream cannot outrun its link;
    the shipped fits are made so, docs/timing-model.md#4-machines-and-parameters). The link's
    capacity bounds all streams and cores on it together (the fair-share bound of
    :mod:`.replay`), not one call."""
    return np.minimum(rate(model.link_values("sdma_GBps")), rate(model.link_values("link_GBps")))[cls]


def uplink_classes(model: NpuModel) -> np.ndarray:
    """bool [classes]: the classes whose traffic crosses the server's uplinks (a finite
    ``<class>.uplink_GBps``: a3's ``server``)."""
    return np.isfinite(model.link_values("uplink_GBps"))


#: The link class that does not go through a die's HCCS ports: the SIO between a card's two dies
#: (docs/timing-model.md#4-machines-and-parameters: 196 GB/s per die across cards and 270 over SIO
#: are given apart, H; SIO and an HCCS path are usable at once, O).
OFF_EGRESS = ("die_pair",)


def egress_classes(model: NpuModel) -> np.ndarray:
    """bool [classes]: the classes whose bytes count against a die's ``egress_GBps`` (every class
    but the SIO die pair, :data:`OFF_EGRESS`, which its own ``link_GBps`` bounds)."""
    return np.array([c.name not in OFF_EGRESS for c in model.links], dtype=bool)


def uplink_share(model: NpuModel, pes: int) -> np.ndarray:
    """float64 [pes]: bytes/us of its server's uplinks each PE of a launch of ``pes`` may use:
    ``uplink_GBps`` divided equally among the server's PEs in the launch
    (:meth:`~combine_lab.model.machines.NpuModel.server_dies`; an approximation: a die that sends
    less off its server would leave more to the others, so the heaviest die is priced a little
    slow). ``inf`` where no class has uplinks."""
    up = model.link_values("uplink_GBps")
    up = up[np.isfinite(up)]
    if not len(up):
        return np.full(int(pes), np.inf)
    return rate(float(up.min())) / model.server_dies(pes)


def call_us(nbytes, c_us, bw, is_max) -> np.ndarray:
    """One SDMA call of ``nbytes`` (us): ``ceil(nbytes / 1 MiB)`` descriptors, each of b bytes
    costing ``c_us + b / bw`` or, where ``is_max``, ``max(c_us, b / bw)`` (``bw`` in bytes/us).
    The one formula of the SDMA plane: :func:`sdma_call_us` and the published tables' fits use it."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    full = np.floor(nbytes / SQE_BYTES)
    rem = nbytes - full * SQE_BYTES
    additive = np.ceil(nbytes / SQE_BYTES) * c_us + nbytes / bw
    overlapped = full * np.maximum(c_us, SQE_BYTES / bw) + np.where(rem > 0, np.maximum(c_us, rem / bw), 0.0)
    return np.where(is_max, overlapped, additive)


def sdma_call_us(model: NpuModel, cls, nbytes) -> np.ndarray:
    """Engine time of one SDMA call of ``nbytes`` over class ``cls`` (us, float64 like
    ``nbytes``): :func:`call_us` with the class's ``c = <class>.sdma_sqe_us``, ``BW`` =
    :func:`sdma_rate` and its form (``max`` or ``additive``). Zero bytes cost nothing."""
    return call_us(nbytes, model.link_values("sdma_sqe_us")[cls], sdma_rate(model, cls), model.max_form[cls])
