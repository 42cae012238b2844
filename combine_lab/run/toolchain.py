"""CANN, SHMEM, the SoC and the NPUs as found from the environment, and the NPU toolchain they make.

Every function here is a function of its inputs: the environment ``env`` (paths, ``PATH``),
the folders those name, and :class:`Probes` (the torch_npu import, package versions, running
``npu-smi``), which tests replace. :mod:`.build` makes the NPU toolchain of them;
:mod:`.capabilities` turns the same facts into the table that the doctor, tests and notebooks read.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

#: CANN version from which SHMEM's SDMA engine exists (docs/npu.md#2-prerequisites).
SDMA_MIN_CANN = (9, 0, 0)

CANN_FIX = "install the CANN toolkit and run `source <CANN>/set_env.sh` (it sets ASCEND_HOME_PATH)"
SHMEM_FIX = ("build SHMEM (git clone https://gitcode.com/cann/shmem; bash scripts/build.sh) or install its .run "
             "package, then set SHMEM_HOME to its install folder (`source <shmem>/set_env.sh` sets SHMEM_HOME_PATH)")
SOC_FIX = "set COMBINE_NPU_SOC to the SoC that `npu-smi info` names (e.g. Ascend910B3, Ascend950)"
#: What to do where the SoC has no SDMA put (sdma_soc_problem).
SDMA_SOC_FIX = "run doubleplane on an A2/A3 NPU (Ascend910B*, Ascend910_93*); classic runs on this SoC"


@dataclass(frozen=True)
class CannInfo:
    """CANN as found from the environment: ``home`` (None when not set), ``version`` text and
    ``version_tuple`` (major, minor, patch; None when unreadable), ``bisheng`` path or None,
    ``problem`` (why it cannot be used; empty when it can)."""

    home: str | None
    version: str | None = None
    version_tuple: tuple[int, int, int] | None = None
    bisheng: str | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem

    @property
    def sdma(self) -> bool:
        """True when this CANN has SHMEM's SDMA engine (>= 9.0.0)."""
        return self.ok and self.version_tuple is not None and self.version_tuple >= SDMA_MIN_CANN


@dataclass(frozen=True)
class ShmemInfo:
    """SHMEM as found: ``home`` (the variable's value, None when not set), ``root`` (the folder
    holding ``include/shmem.h`` and ``lib/libshmem.so``), ``version`` text, ``problem``."""

    home: str | None
    root: str | None = None
    version: str | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


@dataclass(frozen=True)
class TorchNpu:
    """What importing torch_npu told: its ``version``, the NPU ``count`` and the ``soc`` name of NPU 0."""

    version: str
    count: int
    soc: str


@dataclass(frozen=True)
class NpuInfo:
    """Visible NPUs: ``count``, ``soc`` name ('' when unknown), ``source`` ('torch_npu' or
    'npu-smi'), ``problem`` when none are visible."""

    count: int = 0
    soc: str = ""
    source: str = ""
    problem: str = ""


def _probe_torch_npu() -> TorchNpu | None:
    if importlib.util.find_spec("torch_npu") is None:
        return None
    try:
        import torch  # noqa: F401
        import torch_npu  # noqa: F401
        count = int(torch.npu.device_count())
        soc = str(torch.npu.get_device_name(0)) if count else ""
        return TorchNpu(getattr(torch_npu, "__version__", "?"), count, soc)
    except Exception:  # an import that fails (driver missing) is "not importable"
        return None


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run_quiet(argv: list[str], env: dict[str, str]) -> str | None:
    """stdout of ``argv`` (10 s at most), or None when it cannot run or fails."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10,
                              env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


@dataclass(frozen=True)
class Probes:
    """The parts of detection that are not a file or a variable; tests pass fakes.

    ``torch_npu()``: :class:`TorchNpu` or None when torch_npu is not importable;
    ``package_version(name)``: installed version or None; ``python_version()``;
    ``run(argv, env)``: stdout of a command or None.
    """

    # looked up when called, so that a test that replaces _probe_torch_npu reaches it
    torch_npu: Callable[[], TorchNpu | None] = lambda: _probe_torch_npu()  # noqa: E731
    package_version: Callable[[str], str | None] = _package_version
    python_version: Callable[[], str] = platform.python_version
    run: Callable[[list[str], dict], str | None] = _run_quiet


# ---------------------------------------------------------------------------------------------
# Pieces, each a function of env (and the folders it names)

def parse_version(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a CANN or SHMEM version: '9.0.0' -> (9, 0, 0),
    '8.3.RC1' -> (8, 3, 0), '9.0.0.beta1' -> (9, 0, 0); None when it does not start with digits."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _read_key(path: Path, pattern: str) -> str | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    m = re.search(pattern, text, flags=re.MULTILINE | re.IGNORECASE)
    return m.group(1).strip() if m else None


def cann_version_files(home: Path) -> list[Path]:
    """Where the CANN version is read, in order: ``<arch>-linux/ascend_toolkit_install.info``
    (``version=``), ``compiler/version.info`` (``Version=``), ``version.cfg``."""
    return sorted(home.glob("*-linux/ascend_toolkit_install.info")) + [home / "compiler" / "version.info",
                                                                       home / "version.cfg"]


def cann_info(env: dict[str, str]) -> CannInfo:
    """CANN from ``ASCEND_HOME_PATH`` (else ``ASCEND_TOOLKIT_HOME``): folder, version, bisheng."""
    home = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
    if not home:
        return CannInfo(None, problem="ASCEND_HOME_PATH is not set")
    var = "ASCEND_HOME_PATH" if env.get("ASCEND_HOME_PATH") else "ASCEND_TOOLKIT_HOME"
    p = Path(home)
    if not p.is_dir():
        return CannInfo(home, problem=f"{var}={home}: no such folder")
    version = None
    for f in cann_version_files(p):
        version = _read_key(f, r"^\s*version\s*=\s*\[?([0-9][0-9A-Za-z._\-]*)")
        if version:
            break
    vt = parse_version(version) if version else None
    bisheng = next((str(c) for c in (p / "compiler" / "ccec_compiler" / "bin" / "bisheng", p / "bin" / "bisheng")
                    if c.is_file() and os.access(c, os.X_OK)), None)
    bisheng = bisheng or shutil.which("bisheng", path=env.get("PATH", ""))
    if bisheng is None:
        return CannInfo(home, version, vt, None,
                        f"no bisheng under {home}/compiler/ccec_compiler/bin or on PATH (the toolkit's compiler)")
    if vt is None:
        return CannInfo(home, version, None, bisheng,
                        f"cannot read the CANN version from {home}/<arch>-linux/ascend_toolkit_install.info "
                        f"or {home}/compiler/version.info")
    return CannInfo(home, version, vt, bisheng)


def shmem_roots(home: Path) -> list[Path]:
    """Folders that may hold SHMEM's ``include/`` and ``lib/``: ``<home>/shmem`` (the install
    layout), ``<home>``, ``<home>/install/shmem`` (a source build)."""
    return [home / "shmem", home, home / "install" / "shmem"]


def shmem_info(env: dict[str, str]) -> ShmemInfo:
    """SHMEM from ``SHMEM_HOME`` (else ``SHMEM_HOME_PATH``, which SHMEM's set_env.sh exports)."""
    home = env.get("SHMEM_HOME") or env.get("SHMEM_HOME_PATH")
    if not home:
        return ShmemInfo(None, problem="neither SHMEM_HOME nor SHMEM_HOME_PATH is set")
    var = "SHMEM_HOME" if env.get("SHMEM_HOME") else "SHMEM_HOME_PATH"
    p = Path(home)
    root = next((r for r in shmem_roots(p) if (r / "include" / "shmem.h").is_file()
                 and (r / "lib" / "libshmem.so").is_file()), None)
    if root is None:
        return ShmemInfo(home, problem=f"{var}={home}: no include/shmem.h and lib/libshmem.so there "
                                       f"or in its shmem/ or install/shmem/ folder")
    version = None
    for f in (p / "version.info", root / "version.info", root.parent / "version.info"):
        version = _read_key(f, r"SHMEM\s+Version\s*:\s*(\S+)")
        if version:
            break
    if version is None:
        for f in (p / "VERSION", root / "VERSION"):
            try:
                version = f.read_text().strip() or None
            except OSError:
                continue
            if version:
                break
    return ShmemInfo(home, str(root), version)


def sdma_soc_problem(soc: str) -> str:
    """Why the kernel's SDMA plane cannot run on ``soc`` ('' when it can, or the SoC is unknown).

    The kernel sends by SDMA put (``aclshmemx_sdma_put_nbi``); hicann/shmem
    ``examples/sdma/README.md`` says Ascend950 supports SDMA get only, not put
    (docs/npu.md#2-prerequisites). A2/A3 support both.
    """
    if "950" in (soc or ""):
        return (f"SHMEM does not support SDMA put on {soc} (Ascend950: SDMA get only, "
                f"hicann/shmem examples/sdma/README.md)")
    return ""


def soc_arch(soc: str) -> tuple[str, int] | None:
    """(bisheng arch, cycles per microsecond) of a SoC name, None when unsupported.

    A2/A3 (Ascend910B*, Ascend910_93*): ('dav-c220', 50); Ascend950: ('dav-c310', 1000)
    (docs/npu.md#5-device-api and docs/npu.md#6-host-api; host/perf_csv.cpp applies the same rule to aclrtGetSocName).
    """
    s = soc or ""
    if "950" in s:
        return "dav-c310", 1000
    if re.search(r"910B|910_93", s):
        return "dav-c220", 50
    return None


_NPU_SMI_ROW = re.compile(r"^\|\s*(\d+)\s+([A-Za-z0-9_\-]+)\s+\|\s*(OK|Warning|Alarm|Critical|\w+)\s*\|")


def parse_npu_smi(text: str) -> list[tuple[int, str]]:
    """(NPU id, SoC name) of each NPU row of ``npu-smi info``; names get the 'Ascend' prefix
    (``910B3`` -> ``Ascend910B3``)."""
    out = []
    for line in text.splitlines():
        m = _NPU_SMI_ROW.match(line.strip())
        if m:
            name = m.group(2)
            out.append((int(m.group(1)), name if name.lower().startswith("ascend") else f"Ascend{name}"))
    return out


def npu_info(env: dict[str, str], probes: Probes, torch_npu: TorchNpu | None) -> NpuInfo:
    """Visible NPUs: from torch_npu when it imported, else from ``npu-smi info`` on PATH."""
    if torch_npu is not None:
        if torch_npu.count > 0:
            return NpuInfo(torch_npu.count, torch_npu.soc, "torch_npu")
        return NpuInfo(0, "", "torch_npu", "torch_npu sees no NPU (torch.npu.device_count() == 0)")
    smi = shutil.which("npu-smi", path=env.get("PATH", ""))
    if smi is None:
        return NpuInfo(0, "", "", "neither torch_npu nor npu-smi is here (no Ascend driver)")
    text = probes.run([smi, "info"], env)
    if text is None:
        return NpuInfo(0, "", "npu-smi", "`npu-smi info` failed (driver not loaded?)")
    rows = parse_npu_smi(text)
    if not rows:
        return NpuInfo(0, "", "npu-smi", "`npu-smi info` lists no NPU")
    return NpuInfo(len(rows), rows[0][1], "npu-smi")
