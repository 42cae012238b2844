"""Values as users type them: one parser for lists and declared types, shared by command-line flags
and notebook parameters.

``combine-lab run --bs-list 8,16`` (or ``--bs-list 8 16``), papermill's ``-p bs_list "[8, 16]"``
and a notebook cell's ``bs_list = [8, 16]`` all read the same way through :func:`as_list`.
A notebook parameter declared ``h: int = 8192`` and given as text (a YAML string, papermill's
``-r h 4096`` or ``-p`` of a string) is converted by :func:`convert` to the declared type, or
refused naming the parameter, the value and the type.
"""

from __future__ import annotations

import ast
import json
import numbers
import re
from typing import Any, Callable

import numpy as np

from .errors import ParameterError, flag_of, python_name

__all__ = ["as_list", "as_int", "convert", "describe_type"]

_INT_TEXT = re.compile(r"[+-]?\d+")


def as_int(value: Any) -> int:
    """``value`` as an int, by the one rule for ints as users type them (flags, ``--params`` files,
    papermill ``-p``, notebook cells): an int (Python or numpy, not a bool) or the text of one in
    decimal digits (``"4096"``, ``" -3 "``). A float is never taken for an int, whatever its value:
    papermill's ``-p loops 1e3`` arrives as the float 1000.0, a YAML ``1e3`` as the text "1e3", and
    argparse's ``--loops 1e3`` is refused; all three are refused alike.

    Raises ValueError whose text says why (empty for a value that is no number at all).
    """
    if isinstance(value, (bool, np.bool_)):
        raise ValueError("")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            return int(text)
        try:
            value = float(text)
        except ValueError:
            raise ValueError("") from None
        shown = repr(text)
    elif isinstance(value, numbers.Real):
        shown = repr(value)
    else:
        raise ValueError("")
    f = float(value)
    if f == f and abs(f) != float("inf") and f.is_integer():
        raise ValueError(f"{shown} is a float, never taken for an int: write {int(f)}")
    raise ValueError(f"{shown} is not an integer")


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


def _refused(name: str, shown, allowed: str) -> ParameterError:
    """``"<name>=<shown!r>: <allowed>"``, its parameter the Python name of ``name`` (a flag such as
    ``--bs-list`` is ``bs_list``, said as the flag)."""
    return ParameterError(f"{name}={shown!r}: {allowed}", parameter=python_name(name), value=shown, allowed=allowed,
                          said_as=flag_of(name))


def as_list(value: Any, kind: Callable[[Any], Any] = int, name: str = "value") -> list:
    """``value`` as a list of ``kind`` (int, float or str).

    Accepts a list or tuple, a single value, or text: ``"[8, 16]"`` (JSON), ``"8,16"`` or
    ``"8 16"``; for ``kind=str``, a JSON list of strings or ``"a,b"``. Text items of a list are
    split the same way, so ``["8,16"]`` and ``["8", "16"]`` (what argparse's ``nargs="+"``
    gives) both read as ``[8, 16]``. Empty items are dropped; an int item follows
    :func:`as_int` (``4.0`` and ``"1e3"`` are refused).

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
        if kind is int:
            try:
                out.append(as_int(item))
            except ValueError as e:  # as_int's own words (ValueError, not a lab error: nothing to read back)
                raise _refused(name, shown, str(e) or f"{item!r} is not a valid int") from None
            continue
        try:
            v = kind(item)
        except (TypeError, ValueError):
            raise _refused(name, shown, f"{item!r} is not a valid {kind.__name__}") from None
        if isinstance(v, str) and v == "":
            continue
        out.append(v)
    if not out:
        raise _refused(name, shown, "must hold at least one value")
    return out


#: The types a notebook parameter may declare (its annotation), by name.
_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
_NONE_TEXT = ("none", "null", "")


def _parse_type(text: str):
    """``("int",)``, ``("list", "float")``, ``("optional", <inner>)`` from an annotation's text:
    int, float, bool, str, list[T] (T a scalar), Optional[T], T | None (also typing.List, typing.Optional).
    Raises ParameterError for anything else."""
    def walk(node):
        if isinstance(node, ast.Name) and node.id in _SCALARS:
            return (node.id,)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "typing":
            node = ast.Name(id=node.attr)
        if isinstance(node, ast.Subscript):
            base = node.value.id if isinstance(node.value, ast.Name) else \
                getattr(node.value, "attr", None)
            if base in ("list", "List"):
                inner = walk(node.slice)
                if inner[0] in ("int", "float", "str"):
                    return ("list", inner[0])
            if base == "Optional":
                return ("optional", walk(node.slice))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            sides = [node.left, node.right]
            nones = [n for n in sides if isinstance(n, ast.Constant) and n.value is None]
            if len(nones) == 1:
                other = sides[0] if sides[1] in nones else sides[1]
                return ("optional", walk(other))
        raise ValueError
    try:
        return walk(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError):
        allowed = "int, float, bool, str, list[int], list[float], list[str], Optional[T]"
        raise ParameterError(f"type {text!r}: must be one of {allowed}", parameter="type", value=text,
                             allowed=allowed) from None


def describe_type(declared: str) -> str:
    """``declared`` (an annotation's text, e.g. ``"list[int]"``) in words: ``"list of int"``,
    ``"str or None"``, ``"bool (True/False)"``."""
    def words(t):
        if t[0] == "list":
            return f"list of {t[1]}"
        if t[0] == "optional":
            return f"{words(t[1])} or None"
        return "bool (True/False)" if t[0] == "bool" else t[0]
    return words(_parse_type(declared))


def _scalar(value: Any, kind: str):
    """``value`` as the scalar ``kind``; raises ValueError when it is not one."""
    is_bool = isinstance(value, (bool, np.bool_))
    if kind == "bool":
        if is_bool or isinstance(value, numbers.Integral) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError
    if is_bool:  # True is not a number here, nor a word
        raise ValueError
    if kind == "str":
        if isinstance(value, str):
            return value
        if isinstance(value, numbers.Real):  # papermill -p turns "2024" into 2024
            return str(value)
        raise ValueError
    if kind == "int":
        return as_int(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise ValueError("") from None  # float's own words add nothing to "expected float"
    if not isinstance(value, numbers.Real):
        raise ValueError
    return float(value)


def convert(value: Any, declared: str, name: str = "value") -> Any:
    """``value`` converted to the type ``declared`` (an annotation's text), for notebook parameters
    that arrive as text (YAML strings, papermill ``-r`` and ``-p`` strings).

    - ``int``: an int or the text of one (``"4096"``, ``" 16 "``), by :func:`as_int`: never a float
      (papermill's ``-p loops 1e3`` gives 1000.0: refused, as ``"1e3"`` and ``--loops 1e3`` are);
    - ``float``: a number or its text;
    - ``bool``: a bool, 0/1, or ``true/false``, ``yes/no``, ``on/off``, ``1/0`` in any case
      (``"False"`` is False);
    - ``str``: text, or a number as papermill ``-p`` makes of ``"2024"``;
    - ``list[int]`` etc.: a list, a single value or text, as :func:`as_list` reads it
      (``"[64, 128]"``, ``"64,128"``);
    - ``Optional[T]`` (or ``T | None``): None, the text ``None``/``null``/empty, or a T.

    Returns the converted value. Raises ParameterError naming the parameter, the value given and
    the type expected, e.g. ``"parameter h='40x': expected int"``.
    """
    t = _parse_type(declared)
    if t[0] == "optional":
        if value is None or isinstance(value, str) and value.strip().lower() in _NONE_TEXT:
            return None
        t = t[1]
    expected = describe_type(declared)
    if t[0] == "list":
        try:
            return as_list(value, _SCALARS[t[1]], name)
        except ParameterError as e:  # its allowed: what as_list said of the item
            raise ParameterError(f"parameter {name}={value!r}: expected {expected} ({e.allowed})", parameter=name,
                                 value=value, allowed=expected) from None
    try:
        return _scalar(value, t[0])
    except (ValueError, TypeError, OverflowError) as e:
        why = f" ({e})" if isinstance(e, ValueError) and str(e) else ""
        raise ParameterError(f"parameter {name}={value!r}: expected {expected}{why}", parameter=name, value=value,
                             allowed=expected) from None
