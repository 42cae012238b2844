"""Modelled numbers for kernel settings, only where the timing model prices them.

    from combine_lab.lab.pricing import priced, NotModelled
    t = priced(facade.times, "segment-c4", rows, mask, model)   # raises NotModelled until the model prices it

The lab shows modelled times beside the twin's for the reference's settings always, and for other
kernel settings (docs/variants.md: ``segment``, ``c<N>``) only once the model accepts them. The
model's door (:mod:`combine_lab.model.facade`) takes the settings the same way in every function,
by the keyword ``settings=``, and raises :class:`NotModelled` where the model refuses them, whose
message the sweep and the tuning app show in place of a number: "not modelled for <label> yet". A
number the model would give for the reference is never shown as another setting's.
:class:`NotModelled`, :func:`not_modelled_text` and :data:`REFERENCE_ONLY` are the facade's, named
here too for the lab's callers.
"""

from __future__ import annotations

from typing import Any, Callable

from ..model.facade import REFERENCE_ONLY, NotModelled, not_modelled_text, refused_as_not_modelled
from ..planning.settings import KernelSettings, parse_settings

__all__ = ["NotModelled", "priced", "not_modelled_text", "REFERENCE_ONLY"]


def priced(fn: Callable[..., Any], settings: KernelSettings | str | None, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)`` of a model function that takes kernel settings as the facade's do, by
    the keyword ``settings=``: for the reference's exactly as the model has it (no keyword); for other
    settings with ``settings=`` (a KernelSettings), a ParameterError of the model's becoming
    :class:`NotModelled` (:func:`combine_lab.model.facade.refused_as_not_modelled`).

    Raises:
        NotModelled: the model raised a ParameterError for these settings (its message kept as ``why``).
        ParameterError: a settings label that is not one (docs/variants.md).
    """
    st = parse_settings(settings)
    if st.is_reference:
        return fn(*args, **kwargs)
    return refused_as_not_modelled(st, lambda: fn(*args, settings=st, **kwargs))
