"""Small helpers the lab notebooks share: output folder, parameter lists, result records.

Notebooks hold narrative and calls; what they need beyond the core package (where to
write figures, how to read a papermill parameter given as a string, how to leave
machine-readable results for the tests and ``combine-lab notebooks``) lives here.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

from ..errors import SpecError

__all__ = ["default_output_dir", "output_dir", "as_list", "write_record", "read_record", "RECORD_SUFFIX"]

#: A notebook's record is ``<output_dir>/<notebook stem><RECORD_SUFFIX>``.
RECORD_SUFFIX = ".record.json"


def default_output_dir() -> Path:
    """``$COMBINE_LAB_OUTPUT`` if set, else ``<repository>/output/lab`` (ignored by git)."""
    env = os.environ.get("COMBINE_LAB_OUTPUT")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "output" / "lab"


def output_dir(value: str | os.PathLike | None = None) -> Path:
    """The folder a notebook writes its figures, CSVs and record to, created if missing.

    ``value``: a path, or None / "" for :func:`default_output_dir`. Relative paths are
    taken from the current directory (the notebook's folder in JupyterLab, the
    caller's with papermill). Returns an absolute Path.
    """
    path = Path(value) if value not in (None, "") else default_output_dir()
    path = path.expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def as_list(value: Any, kind: Callable[[Any], Any] = int, name: str = "value") -> list:
    """A notebook parameter as a list of ``kind``.

    Accepts a list or tuple, a single value, or a string as papermill's ``-p`` passes
    it: ``"[8, 16]"`` (JSON), ``"8,16"`` or ``"8 16"``. For ``kind=str``, a JSON list of
    strings or ``"a,b"`` (no spaces needed). Raises SpecError naming ``name`` when an
    item does not convert or the list is empty.
    """
    items = value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                items = [p.strip().strip("'\"") for p in text.strip("[]").split(",")]
        else:
            items = [p for p in text.replace(",", " ").split()] if kind is not str else \
                [p.strip() for p in text.split(",")]
    elif not isinstance(value, (list, tuple)):
        items = [value]
    out = []
    for item in items:
        if kind is int and isinstance(item, float) and not item.is_integer():
            raise SpecError(f"{name}={value!r}: {item!r} is not an integer")
        try:
            v = kind(item)
        except (TypeError, ValueError):
            raise SpecError(f"{name}={value!r}: {item!r} is not a valid {kind.__name__}") from None
        if isinstance(v, str) and v == "":
            continue
        out.append(v)
    if not out:
        raise SpecError(f"{name}={value!r}: must hold at least one value")
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item") and callable(v.item):  # numpy scalar
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Path):
        return str(v)
    return v


def write_record(out_dir: str | os.PathLike, notebook: str, record: dict) -> Path:
    """Write ``record`` (JSON-able values; numpy scalars, Paths converted; NaN -> null)
    to ``<out_dir>/<notebook>.record.json`` and return the path. The tests and
    ``combine-lab notebooks`` read it to know what a headless run found."""
    path = Path(out_dir) / f"{notebook}{RECORD_SUFFIX}"
    path.write_text(json.dumps(_jsonable(record), indent=2, sort_keys=True))
    return path


def read_record(out_dir: str | os.PathLike, notebook: str) -> dict:
    """Read what :func:`write_record` wrote. Raises FileNotFoundError if the notebook left none."""
    return json.loads((Path(out_dir) / f"{notebook}{RECORD_SUFFIX}").read_text())
