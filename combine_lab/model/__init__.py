"""Modelled NPU time: the kernel's operation stream replayed on a calibratable model of the planes
(machine parameters -> stream -> replay), with calibration and threshold suggestions.

The public surface, importable from here::

    from combine_lab.model import load_model, model_case, suggest
    from combine_lab.kernels import DOUBLEPLANE
    a3 = load_model("a3")                       # NpuModel: parameters with units and sources
    priced = model_case(make_case(spec), DOUBLEPLANE, a3)   # ModelledResult, modelled on a3
    best = suggest(spec, a3)                    # the SDMA floor curve and the best floor

- :mod:`.machines`: :class:`NpuModel`, :func:`load_model`, :func:`model_names`, :data:`PARAMETERS`,
  :func:`link_class` (the rank map: the link class name of a PE pair), :func:`rank_place`;
- :mod:`.stream`: the operation stream of a case (:func:`case_rows`, :class:`CaseRows`);
- :mod:`.replay`: :func:`replay` (one plan in virtual time), :func:`stage1` (many floors at once);
- :mod:`.modelled`: :func:`model_case` (a run_case without the run), :class:`ModelledResult`;
- :mod:`.suggest`: :func:`suggest` (time at every floor where the plan changes), :class:`Suggestion`;
- :mod:`.calibrate`: ``calibrate``, ``measurements_from_csvs`` (``from combine_lab.model.calibrate
  import calibrate``: not imported here, it needs scipy, which takes a while to import).
The harness (:mod:`combine_lab.harness`) prices a Run whose clock is an NpuModel through
:func:`model_case`; the tuning app, the sweep and ``suggest`` use the same replay.
"""

from __future__ import annotations

from .modelled import MODELLED, ModelledResult, model_case
from .machines import PARAMETERS, NpuModel, link_class, load_model, model_names, rank_place
from .replay import ModelledTimes, replay, stage1
from .stream import CaseRows, case_rows
from .suggest import Suggestion, suggest

__all__ = ["NpuModel", "link_class", "rank_place", "load_model", "model_names", "PARAMETERS", "CaseRows", "case_rows", "ModelledTimes", "replay",
           "stage1", "MODELLED", "ModelledResult", "model_case", "Suggestion", "suggest"]
