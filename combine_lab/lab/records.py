"""What the lab notebooks share: where they write, and the records they leave.

Notebooks hold narrative and calls; what they need beyond the core package (where to write
figures, how to leave machine-readable results for the tests and ``combine-lab notebooks``)
lives here. A papermill parameter given as a string is read by :func:`combine_lab.params.as_list`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["default_output_dir", "output_dir", "write_record", "read_record", "RECORD_SUFFIX"]

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
