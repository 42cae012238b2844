"""Values as users type them: one parser for lists, shared by command-line flags and notebook parameters.

``combine-lab run --bs-list 8,16`` (or ``--bs-list 8 16``), papermill's ``-p bs_list "[8, 16]"``
and a notebook cell's ``bs_list = [8, 16]`` all read the same way through :func:`as_list`.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from .errors import ParameterError

__all__ = ["as_list"]


def _split(text: str, kind: Callable[[Any], Any]) -> list:
    """The items of one piece of text: a JSON list, else comma-separated values (numbers may also be
    separated by spaces; strings may not, so that they keep inner spaces)."""
    text = text.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:  # e.g. "['uniform', 'zipf:1.2']": Python quotes, not JSON
            items = [p.strip().strip("'\"") for p in text.strip("[]").split(",")]
        return items if isinstance(items, list) else [items]
    if kind is str:
        return [p.strip() for p in text.split(",")]
    return text.replace(",", " ").split()


def as_list(value: Any, kind: Callable[[Any], Any] = int, name: str = "value") -> list:
    """``value`` as a list of ``kind`` (int, float or str).

    Accepts a list or tuple, a single value, or text: ``"[8, 16]"`` (JSON), ``"8,16"`` or
    ``"8 16"``; for ``kind=str``, a JSON list of strings or ``"a,b"``. Text items of a list are
    split the same way, so ``["8,16"]`` and ``["8", "16"]`` (what argparse's ``nargs="+"``
    gives) both read as ``[8, 16]``. Empty items are dropped; an int given as a float must be
    integral (``4.0`` reads as 4).

    Raises:
        ParameterError: an item does not convert, or no item is left; the message names
            ``name`` (a flag such as ``--bs-list`` or a notebook parameter) and the value given.
    """
    items: list = []
    for piece in (value if isinstance(value, (list, tuple)) else [value]):
        items += _split(piece, kind) if isinstance(piece, str) else [piece]
    shown = value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value
    out = []
    for item in items:
        if kind is int and isinstance(item, float) and not item.is_integer():
            raise ParameterError(f"{name}={shown!r}: {item!r} is not an integer")
        try:
            v = kind(item)
        except (TypeError, ValueError):
            raise ParameterError(f"{name}={shown!r}: {item!r} is not a valid {kind.__name__}") from None
        if isinstance(v, str) and v == "":
            continue
        out.append(v)
    if not out:
        raise ParameterError(f"{name}={shown!r}: must hold at least one value")
    return out
