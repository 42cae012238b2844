"""One table of what this machine can run: targets (CPU twin, NPU), CANN and SHMEM, SDMA.

Tests, ``combine-lab doctor`` and the notebooks' target selector all read it, so they
agree on what can run here and why not.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Capability:
    """One row: ``name``, whether it is ``available``, a ``detail`` (version, path) and,
    when not available, the ``fix`` that makes it so."""

    name: str
    available: bool
    detail: str = ""
    fix: str = ""


@dataclass(frozen=True)
class Capabilities:
    """All rows, by name (``twin``, ``cann``, ``shmem``, ``sdma``, ``npu``)."""

    rows: dict[str, Capability] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Capability:
        return self.rows[name]

    def targets(self) -> list[str]:
        """Targets that can run here: always ``cpu``; ``npu`` when CANN, SHMEM and an NPU are present."""
        out = ["cpu"] if self.rows["twin"].available else []
        if self.rows["npu"].available:
            out.append("npu")
        return out


def detect(env: dict[str, str] | None = None) -> Capabilities:
    """Detect the capability table from ``env`` (default ``os.environ``) and PATH.

    The twin needs a C++ compiler and CMake; the NPU target needs CANN
    (``ASCEND_HOME_PATH`` or ``ASCEND_TOOLKIT_HOME``), SHMEM (``SHMEM_HOME``) and a visible NPU.
    """
    env = dict(os.environ) if env is None else env
    cxx = shutil.which(env.get("CXX", "g++")) or shutil.which("c++")
    cmake = shutil.which("cmake")
    rows = {
        "twin": Capability("twin", bool(cxx and cmake), f"c++: {cxx}, cmake: {cmake}",
                           "" if cxx and cmake else "install g++ and cmake (bash .ci/setup)"),
    }
    cann = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
    rows["cann"] = Capability("cann", bool(cann), cann or "", "" if cann else "source <CANN>/set_env.sh")
    shmem = env.get("SHMEM_HOME")
    rows["shmem"] = Capability("shmem", bool(shmem), shmem or "", "" if shmem else "set SHMEM_HOME to SHMEM's install")
    rows["sdma"] = Capability("sdma", False, "", "needs CANN 9.0.0 or later on an NPU")
    rows["npu"] = Capability("npu", False, "", "needs an Ascend NPU with CANN and SHMEM")
    return Capabilities(rows)
