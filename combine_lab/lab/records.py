"""What the lab notebooks share: their parameters' types, where they write, and the records they leave.

Notebooks hold narrative and calls; what they need beyond the core package (typed parameters,
where to write figures, how to leave machine-readable results for the tests and
``combine-lab notebooks``) lives here.

Every notebook declares the type of each parameter in its ``parameters`` cell
(``h: int = 8192``, ``bs_list: list[int] = [64, 128]``, ``output_dir: "Optional[str]" = None``),
where papermill's ``inspect_notebook`` and ``--help-notebook`` read it too; its first code
cell calls :func:`check_parameters`, so that text from plain papermill (``-r``, ``-p``
strings, ``-y``) is converted before anything runs.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import ParameterError
from ..folders import usable_folder
from ..formats.files import write_atomic
from ..values import convert

__all__ = ["default_output_dir", "command_output_dir", "output_dir", "write_record", "read_record", "RECORD_SUFFIX", "check_parameters",
           "annotation_text"]

#: A notebook's record is ``<output_dir>/<notebook stem><RECORD_SUFFIX>``.
RECORD_SUFFIX = ".record.json"


def annotation_text(annotation: Any) -> str:
    """A parameter's annotation as text, as papermill reads it from the cell: ``int`` -> ``"int"``,
    ``list[int]`` -> ``"list[int]"``, a string annotation as it is."""
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def check_parameters(namespace: dict) -> dict:
    """Convert a notebook's parameters to their declared types, in place, before anything runs.

    ``namespace``: the notebook's globals (``globals()``), holding the parameters cell's values,
    papermill's injected ones over them, and ``__annotations__`` (name -> declared type) from
    the parameters cell. Each annotated name is converted by :func:`combine_lab.values.convert`
    (``"2"`` -> 2 for ``int``, ``"False"`` -> False for ``bool``, ``"[64,128]"`` -> [64, 128] for
    ``list[int]``). Returns {name: converted value}.

    Raises:
        ParameterError: naming every parameter that does not convert, its value and its type,
            e.g. ``parameter h='40x': expected int``.
    """
    out, bad = {}, []
    for name, annotation in dict(namespace.get("__annotations__", {})).items():
        if name not in namespace:
            continue
        try:
            out[name] = convert(namespace[name], annotation_text(annotation), name)
        except ParameterError as e:
            bad.append(e)
    if bad:  # one: its own fields; several: the names, in the order of the parameters cell
        one = bad[0] if len(bad) == 1 else None
        raise ParameterError("; ".join(map(str, bad)), parameter=one.parameter if one else "namespace",
                             value=one.value if one else [e.parameter for e in bad],
                             allowed=one.allowed if one else None)
    namespace.update(out)
    return out


def default_output_dir() -> Path:
    """``$COMBINE_LAB_OUTPUT`` if set, else ``<repository>/output/lab`` (ignored by git)."""
    env = os.environ.get("COMBINE_LAB_OUTPUT")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "output" / "lab"


def command_output_dir() -> Path:
    """Where ``combine-lab notebooks`` (and its ``--cluster`` batch) writes without ``--out``:
    ``$COMBINE_LAB_OUTPUT`` if set, else the current folder's ``output/lab``, as every command writes
    into its output flag or the current folder (docs/cli.md#1-commands); a notebook opened in
    JupyterLab keeps :func:`default_output_dir`."""
    env = os.environ.get("COMBINE_LAB_OUTPUT")
    return Path(env) if env else Path.cwd() / "output" / "lab"


def output_dir(value: str | os.PathLike | None = None) -> Path:
    """The folder a notebook writes its figures, CSVs and record to, created if missing.

    ``value``: a path, or None / "" for :func:`default_output_dir`. Relative paths are
    taken from the current directory (the notebook's folder in JupyterLab, the
    caller's with papermill). Returns an absolute Path.

    Raises ParameterError naming the folder and why it cannot hold files (a file, under a file,
    under /proc, not writable: :func:`combine_lab.folders.usable_folder`).
    """
    path = Path(value) if value not in (None, "") else default_output_dir()
    return usable_folder(path, "output_dir").resolve()


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
    return write_atomic(path, json.dumps(_jsonable(record), indent=2, sort_keys=True))


def read_record(out_dir: str | os.PathLike, notebook: str) -> dict:
    """Read what :func:`write_record` wrote. Raises FileNotFoundError if the notebook left none."""
    return json.loads((Path(out_dir) / f"{notebook}{RECORD_SUFFIX}").read_text())
