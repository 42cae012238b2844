"""Modelled numbers for kernel settings, only where the timing model prices them.

    from combine_lab.lab.pricing import priced, NOT_MODELLED
    t = priced(replay, "segment-c4", rows, mask, model)   # raises NotModelled until the model prices it

The lab shows modelled times beside the twin's for the reference's settings always, and for other
kernel settings (docs/variants.md: ``segment``, ``c<N>``) only once the model accepts them: its
functions take them by the keyword ``settings=`` (:mod:`combine_lab.model`: ``replay``,
``model_case``, ``suggest``, ``verdict``). Until a function has that keyword, or when it refuses the
settings with a ParameterError, :func:`priced` raises :class:`NotModelled`, whose message the sweep
and the tuning app show in place of a number: "not modelled for <label> yet". A number the model
would give for the reference is never shown as another setting's.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..errors import ParameterError
from ..planning.settings import KernelSettings, parse_settings

__all__ = ["NotModelled", "priced", "not_modelled_text", "REFERENCE_ONLY"]

#: Why a model function without a ``settings`` keyword prices no other settings.
REFERENCE_ONLY = "the timing model prices the reference's settings only: one core per source rank, one SDMA call per row"


def not_modelled_text(label: str, why: str = "") -> str:
    """What the lab says in place of a modelled number for settings ``label``."""
    return f"not modelled for {label} yet" + (f" ({why})" if why else "")


class NotModelled(ParameterError):
    """The timing model does not price these kernel settings (yet): ``label`` names them, ``why``
    says what the model said (:data:`REFERENCE_ONLY` when its function takes no ``settings`` at all)."""

    def __init__(self, label: str, why: str = ""):
        self.label, self.why = label, why or REFERENCE_ONLY
        super().__init__(f"settings={label!r}: " + not_modelled_text(label, self.why), parameter="settings",
                         value=label)


def priced(fn: Callable[..., Any], settings: KernelSettings | str | None, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)`` of the model for kernel ``settings``: for the reference's exactly as
    the model has it; for other settings with ``settings=`` (a KernelSettings) when ``fn`` takes
    that keyword, else with its first argument, the case's CaseRows, under those settings
    (``CaseRows.with_settings``: ``replay`` and ``verdict`` price the settings their rows carry).

    Raises:
        NotModelled: ``fn`` takes neither, or the model raised a ParameterError for these settings
            (its message kept as ``why``).
        ParameterError: a settings label that is not one (docs/variants.md).
    """
    from ..model.stream import CaseRows

    st = parse_settings(settings)
    if st.is_reference:
        return fn(*args, **kwargs)
    try:
        if "settings" in inspect.signature(fn).parameters:
            return fn(*args, settings=st, **kwargs)
        if args and isinstance(args[0], CaseRows):
            return fn(args[0].with_settings(st), *args[1:], **kwargs)
    except NotModelled:
        raise
    except ParameterError as e:  # the model refuses these settings: said, never priced as the reference
        raise NotModelled(st.label, str(e)) from e
    raise NotModelled(st.label)
