"""``--trace FILE`` of ``run`` and ``compare``: the launch as a Chrome trace-event JSON that Perfetto
opens (combine_lab/results/trace.py; docs/formats.md#12-trace, docs/lab.md#8-traces). On the twin
each run records its operation stream (``COMBINE_TWIN_OPS``) into a folder of its own, removed
after; on a timing model the plan-derived stream is priced op by op."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from ..case.case import make_case
from ..errors import ParameterError
from ..folders import usable_folder
from ..results.trace import model_launch, twin_launch, write_trace

__all__ = ["TraceRecording"]


class TraceRecording:
    """What ``--trace`` needs around one ``run``/``compare``: checked before anything runs
    (:meth:`check`), an environment per run label on the twin (:meth:`env`), the file after
    (:meth:`write`). A context manager: its recording folders are removed on the way out."""

    def __init__(self, path: str | None, model=None):
        self.path = Path(path) if path else None
        self.model = model
        self._dir: str | None = None

    def check(self, specs: list, kernels: list, target: str) -> None:
        """Raises ParameterError before anything runs: several cases, your kernel on a model, an NPU."""
        if self.path is None:
            return
        if len(specs) != 1:
            raise ParameterError(f"--trace {self.path}: traces one case, the flags make {len(specs)} (a sweep)",
                                 parameter="--trace", value=str(self.path))
        if self.model is not None and kernels:
            raise ParameterError(f"--trace {self.path}: your kernel on a timing model is priced from one launch "
                                 "on the twin; trace it there (--clock wall)", parameter="--trace", value=str(self.path))
        if self.model is None and target != "cpu":
            raise ParameterError(f"--trace {self.path}: the twin records the operation stream (--target cpu); on an "
                                 "NPU use msprof", parameter="--trace", value=str(self.path))
        usable_folder(self.path.parent if str(self.path.parent) else Path("."), "--trace")

    def env(self, label: str) -> dict | None:
        """The environment of the twin run ``label``: its own COMBINE_TWIN_OPS folder; None untraced."""
        if self.path is None or self.model is not None:
            return None
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="combine_lab_trace_")
        folder = Path(self._dir) / re.sub(r"[^A-Za-z0-9_.-]", "_", label)
        folder.mkdir(exist_ok=True)
        return {"COMBINE_TWIN_OPS": str(folder)}

    def write(self, outcomes: list) -> Path | None:
        """The trace of each label's last launch among ``outcomes`` (those that ran), one process per
        PE and label; prints where it went. Returns the path, or None when not asked."""
        if self.path is None:
            return None
        last = {o.run.label: o for o in outcomes if o.result is not None and o.run.variant != "baseline"}
        launches = []
        for label, o in last.items():
            if self.model is not None:
                res = o.result
                sdma = (res.plan.segments["plane"].to_numpy() == "SDMA").reshape(o.spec.pes, -1)
                launches.append(model_launch(res.case, res.variant, sdma, self.model, label, res.settings))
            else:
                launches.append(twin_launch(o.run.env["COMBINE_TWIN_OPS"], make_case(o.spec), label))
        if not launches:
            return None
        spec = next(iter(last.values())).spec
        clock = launches[0].clock
        path = write_trace(self.path, launches, f"{spec.case_id} ({spec.routing}), {spec.pes} PEs, {clock}")
        print(f"trace: {path} ({clock}; open it in ui.perfetto.dev: Open trace file)")
        return path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        return False

