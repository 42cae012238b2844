"""The summary of a run: one JSON file a later run can be compared with (``combine-lab diff``).

``<output-dir>/combine_lab_summary.json`` (:data:`SUMMARY_NAME`), written by ``combine-lab run`` and
``compare`` with ``--perf`` when every case has run (docs/formats.md#11-run-summary)::

    {"format": "combine_lab run summary 1", "command": "...", "target": "cpu", "clock": "wall",
     "measured": "measured on the CPU twin: ...", "repeats": 5, "warmup": 5, "loops": 50,
     "cases": [{"case_id": "shape_512_4096_2_8_8", "routing": "...", "dtype": "int32_t",
                "variants": {<label: classic, ...>: {"check": "PASS", "repeats": 5,
                                         "comm_only_us": {"median": 5437.0, "min": 5012.1, "max": 5890.2,
                                                          "each": [...]},
                                         "full_op_us": {...}, "mte_bytes": ..., "sdma_bytes": ...}, ...},
                "speedup": {"comm_only": {"median": 0.76, "min": 0.70, "max": 0.81, "verdict": "slower"},
                            "full_op": {...}},
                "speedup_by_settings": {"reference": {"comm_only": {...}, "full_op": {...}},
                                        "segment-c2": {...}}}]}

Times are microseconds (CoreMaxTime of the profiled PE; with every PE profiled, the slowest);
the spread is min-max over the repeats; a speed-up is classic / doubleplane of the same repeat,
one per settings group (``speedup_by_settings``; ``speedup`` is the reference group's, else the
first group's). With ``"clock": "model:NAME"`` nothing was measured: ``measured`` is the model's
caption ("modelled on NAME (...); assumed parameters: ...").
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ResultFileError
from .files import write_atomic

__all__ = ["SUMMARY_NAME", "SUMMARY_FORMAT", "write_run_summary", "read_run_summary"]

#: The file name of a run's summary in its output folder.
SUMMARY_NAME = "combine_lab_summary.json"
#: The value of its ``format`` key.
SUMMARY_FORMAT = "combine_lab run summary 1"


def write_run_summary(folder: str | Path, data: dict) -> Path:
    """Write ``data`` (the layout above, with ``format`` set here) as ``<folder>/combine_lab_summary.json``,
    whole or not at all; returns the path. Raises ResultFileError when it cannot be written."""
    path = Path(folder) / SUMMARY_NAME
    return write_atomic(path, json.dumps({"format": SUMMARY_FORMAT, **data}, indent=1) + "\n")


def read_run_summary(path: str | Path) -> dict:
    """A run summary from its file, or from the output folder that holds it (``--output-dir`` of the run).

    Raises:
        ResultFileError: missing, not JSON, or not a run summary (naming the file and what was found).
    """
    p = Path(path)
    if p.is_dir():
        p = p / SUMMARY_NAME
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise ResultFileError(f"{p}: cannot read the run summary ({e.strerror}); a run with --perf writes "
                              f"{SUMMARY_NAME} in its --output-dir", parameter="path", value=path) from None
    except ValueError as e:
        raise ResultFileError(f"{p}: not JSON ({e})", parameter="path", value=path) from None
    if not isinstance(data, dict) or data.get("format") != SUMMARY_FORMAT or not isinstance(data.get("cases"), list):
        found = data.get("format") if isinstance(data, dict) else None
        raise ResultFileError(f"{p}: not a combine_lab run summary (format {found!r}, expected {SUMMARY_FORMAT!r})",
                              parameter="path", value=path)
    return data
