"""One table of what this machine can run: targets (CPU twin, NPU), CANN and SHMEM, SDMA, NPUs.

Tests, ``combine-lab doctor`` and the notebooks' target selector all read it, so they
agree on what can run here and why not. :func:`detect` is a function of its inputs: the
environment ``env`` (paths, ``PATH``), the folders those name, and
:class:`~combine_lab.run.toolchain.Probes` (the torch_npu import, package versions, running
``npu-smi``) which tests replace. The facts themselves (CANN, SHMEM, SoC, NPUs) are found by
:mod:`combine_lab.run.toolchain`; this module turns them into rows with their fixes.

Rows (name: what ``available`` means):

- ``python``: always; detail is the version.
- ``twin``: a C++ compiler and CMake on PATH (the CPU twin can be built).
- ``twin_build``: the twin's build folder is built and up to date.
- ``cann``: the CANN toolkit (``ASCEND_HOME_PATH`` or ``ASCEND_TOOLKIT_HOME``) with ``bisheng``
  and a readable version.
- ``shmem``: SHMEM (``SHMEM_HOME`` or ``SHMEM_HOME_PATH``): ``shmem.h`` and ``libshmem.so``.
- ``sdma``: CANN 9.0.0 or later (SHMEM's SDMA engine) on a SoC with SDMA put (not Ascend950;
  docs/npu.md#2-prerequisites).
- ``torch``, ``torch_npu``: importable (baselines: gloo on the twin, HCCL on NPUs).
- ``npu``: NPUs visible, through torch_npu when importable, else ``npu-smi info``.
- ``soc``: the SoC name (``COMBINE_NPU_SOC`` overrides), supported when A2/A3 or Ascend950.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from ..kernels import CLASSIC, DOUBLEPLANE
from ..errors import ParameterError
from . import build as build_mod
from .toolchain import (CANN_FIX, SDMA_SOC_FIX, SHMEM_FIX, SOC_FIX, CannInfo, NpuInfo, Probes, ShmemInfo, cann_info,
                        npu_info, sdma_soc_problem, shmem_info, soc_arch)

TORCH_FIX = "bash .ci/setup --baseline (CPU-only torch)"


@dataclass(frozen=True)
class Capability:
    """One row: ``name``, whether it is ``available``, a ``detail`` (version, path) and,
    when not available, the ``fix`` that makes it so."""

    name: str
    available: bool
    detail: str = ""
    fix: str = ""


def npu_variant_refusal(variant: str, env: dict[str, str] | None = None,
                        probes: Probes | None = None) -> str | None:
    """Why ``variant`` cannot run on the NPU target here, or None.

    Without a usable CANN (none found, no bisheng, no readable version) every variant is refused,
    and the reason says so. With one, the dual-plane variant needs SDMA, which needs CANN 9.0.0 or
    later and a SoC with SHMEM's SDMA put (not Ascend950, :func:`~.toolchain.sdma_soc_problem`);
    classic needs nothing more. The SoC is ``COMBINE_NPU_SOC``, else what ``npu-smi info`` names
    (through ``probes``), read only for doubleplane on CANN 9.0.0 or later.
    """
    env = dict(os.environ) if env is None else env
    cann = cann_info(env)
    if not cann.ok:
        return (f"variant={variant} on target=npu: refused: no usable CANN here ({cann.problem}), and every variant "
                f"needs it: {CANN_FIX}")
    if variant != DOUBLEPLANE:
        return None
    if cann.sdma:
        soc = env.get("COMBINE_NPU_SOC") or npu_info(env, probes or Probes(), None).soc
        why = sdma_soc_problem(soc)
        return (f"variant=doubleplane on target=npu: refused: the dual-plane combine needs SDMA put, and {why}; "
                f"the classic variant still runs") if why else None
    found = f"found CANN {cann.version} at {cann.home}" if cann.version else (cann.problem or "CANN not found")
    return (f"variant=doubleplane on target=npu: refused: the dual-plane combine needs SDMA, which needs CANN "
            f"9.0.0 or later ({found}); the classic variant still runs")


# ---------------------------------------------------------------------------------------------
# The table

@dataclass(frozen=True)
class Capabilities:
    """All rows, by name (``python``, ``twin``, ``twin_build``, ``cann``, ``shmem``, ``sdma``,
    ``torch``, ``torch_npu``, ``npu``, ``soc``), plus the CANN, SHMEM and NPU facts behind them."""

    rows: dict[str, Capability] = field(default_factory=dict)
    cann: CannInfo | None = None
    shmem: ShmemInfo | None = None
    npus: NpuInfo | None = None
    soc: str = ""

    def __getitem__(self, name: str) -> Capability:
        return self.rows[name]

    def npu_fix(self) -> str:
        """What stops the NPU target here ('' when nothing): the first missing piece's fix."""
        for name in ("cann", "shmem", "npu", "soc"):
            if not self.rows[name].available:
                return self.rows[name].fix
        return ""

    def targets(self) -> list[str]:
        """Targets that can run here: ``cpu`` with a C++ compiler and CMake; ``npu`` with CANN,
        SHMEM, a visible NPU and a supported SoC."""
        out = ["cpu"] if self.rows["twin"].available else []
        if not self.npu_fix():
            out.append("npu")
        return out

    def variants(self, target: str) -> dict[str, str]:
        """Variant -> '' when it can run on ``target`` here, else the fix."""
        if target == "cpu":
            fix = "" if self.rows["twin"].available else self.rows["twin"].fix
            return {CLASSIC: fix, DOUBLEPLANE: fix}
        if target != "npu":
            raise ParameterError(f"target={target!r}: must be cpu or npu",
                                 parameter="target", value=target, allowed="cpu or npu")
        fix = self.npu_fix()
        return {CLASSIC: fix, DOUBLEPLANE: fix or self.rows["sdma"].fix}

    def baselines(self) -> dict[str, str]:
        """Baseline backend -> '' when ``compare --baseline hccl`` can run it here, else the fix:
        ``gloo`` (on the twin, CPU tensors) needs torch; ``hccl`` (on NPUs) needs torch_npu and NPUs."""
        gloo = "" if self.rows["torch"].available else self.rows["torch"].fix
        hccl = "" if self.rows["torch_npu"].available and self.rows["npu"].available else \
            (self.rows["torch_npu"].fix or self.rows["npu"].fix)
        return {"gloo": gloo, "hccl": hccl}


def _twin_rows(env: dict[str, str]) -> dict[str, Capability]:
    path = env.get("PATH", "")
    cxx = build_mod.twin_cxx(dict(env, PATH=path))  # the twin compiles kernels with clang
    cmake = shutil.which("cmake", path=path)
    missing = [n for n, v in (("clang++ (the twin compiles kernels with clang)", cxx), ("cmake", cmake)) if not v]
    twin = Capability("twin", not missing, f"clang++ {cxx or 'missing'}, cmake {cmake or 'missing'}",
                      "" if not missing else f"install {' and '.join(missing)} (bash .ci/setup)")
    status, where = build_mod.build_status("cpu", env=env)
    now = "python3 -c 'from combine_lab.run.build import build; build()'"
    fixes = {"up to date": "", "stale": f"rebuilt on the next run, or now: {now}",
             "not built": f"built on the first run, or now: {now}"}
    built = Capability("twin_build", status == "up to date", f"{status} ({where})", fixes.get(status, ""))
    return {"twin": twin, "twin_build": built}


def detect(env: dict[str, str] | None = None, probes: Probes | None = None) -> Capabilities:
    """Detect the capability table from ``env`` (default ``os.environ``), the folders it names
    and ``probes`` (default :class:`Probes`: the real torch_npu import, pip metadata, npu-smi)."""
    env = dict(os.environ) if env is None else env
    probes = probes or Probes()
    rows = {"python": Capability("python", True, probes.python_version())}
    rows.update(_twin_rows(env))

    cann = cann_info(env)
    if cann.ok:
        rows["cann"] = Capability("cann", True, f"{cann.version} at {cann.home}")
    elif cann.home is None:
        rows["cann"] = Capability("cann", False, "not found (ASCEND_HOME_PATH is not set)", CANN_FIX)
    else:
        rows["cann"] = Capability("cann", False, cann.problem, CANN_FIX)

    shmem = shmem_info(env)
    if shmem.ok:
        rows["shmem"] = Capability("shmem", True, f"{shmem.version or 'version unknown'} at {shmem.root}")
    elif shmem.home is None:
        rows["shmem"] = Capability("shmem", False, "not found (neither SHMEM_HOME nor SHMEM_HOME_PATH is set)", SHMEM_FIX)
    else:
        rows["shmem"] = Capability("shmem", False, shmem.problem, SHMEM_FIX)

    torch_v = probes.package_version("torch")
    rows["torch"] = Capability("torch", torch_v is not None, torch_v or "not installed", "" if torch_v else TORCH_FIX)
    tnpu = probes.torch_npu()
    rows["torch_npu"] = Capability("torch_npu", tnpu is not None, tnpu.version if tnpu else "not importable",
                                   "" if tnpu else "pip install torch_npu (the release matching torch and CANN)")

    npus = npu_info(env, probes, tnpu)
    rows["npu"] = Capability("npu", npus.count > 0, f"{npus.count} visible ({npus.source})" if npus.count
                             else npus.problem, "" if npus.count else
                             "run on a machine with Ascend NPUs and their driver (npu-smi info lists them)")

    soc = env.get("COMBINE_NPU_SOC") or npus.soc
    arch = soc_arch(soc) if soc else None
    if arch:
        rows["soc"] = Capability("soc", True, f"{soc} ({arch[0]}, {arch[1]} cycles/us)")
    elif soc:
        rows["soc"] = Capability("soc", False, f"{soc}: not an A2/A3 (Ascend910B*, Ascend910_93*) or Ascend950 SoC",
                                 SOC_FIX)
    else:
        rows["soc"] = Capability("soc", False, "unknown (no NPU visible, COMBINE_NPU_SOC not set)", SOC_FIX)

    soc_problem = sdma_soc_problem(soc)
    if cann.sdma and soc_problem:
        rows["sdma"] = Capability("sdma", False, soc_problem, SDMA_SOC_FIX)
    elif cann.sdma:
        rows["sdma"] = Capability("sdma", True, f"CANN {cann.version} >= 9.0.0")
    else:
        why = f"CANN {cann.version} is older than 9.0.0" if cann.version_tuple else "needs CANN 9.0.0 or later"
        rows["sdma"] = Capability("sdma", False, why, "install CANN 9.0.0 or later (toolkit and ops-legacy packages "
                                                      "for the board) and source its set_env.sh")
    return Capabilities(rows, cann, shmem, npus, soc)
