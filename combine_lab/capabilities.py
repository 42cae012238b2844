"""One table of what this machine can run: targets (CPU twin, NPU), CANN and SHMEM, SDMA, NPUs.

Tests, ``combine-lab doctor`` and the notebooks' target selector all read it, so they
agree on what can run here and why not. :func:`detect` is a function of its inputs: the
environment ``env`` (paths, ``PATH``), the folders those name, and :class:`Probes` (the
torch_npu import, package versions, running ``npu-smi``) which tests replace.

Rows (name: what ``available`` means):

- ``python``: always; detail is the version.
- ``twin``: a C++ compiler and CMake on PATH (the CPU twin can be built).
- ``twin_build``: the twin's build folder is built and up to date.
- ``cann``: the CANN toolkit (``ASCEND_HOME_PATH`` or ``ASCEND_TOOLKIT_HOME``) with ``bisheng``
  and a readable version.
- ``shmem``: SHMEM (``SHMEM_HOME`` or ``SHMEM_HOME_PATH``): ``shmem.h`` and ``libshmem.so``.
- ``sdma``: CANN 9.0.0 or later (SHMEM's SDMA engine; combine-facts section 7).
- ``torch``, ``torch_npu``: importable (baselines: gloo on the twin, HCCL on NPUs).
- ``npu``: NPUs visible, through torch_npu when importable, else ``npu-smi info``.
- ``soc``: the SoC name (``COMBINE_NPU_SOC`` overrides), supported when A2/A3 or Ascend950.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: CANN version from which SHMEM's SDMA engine exists (combine-facts section 7).
SDMA_MIN_CANN = (9, 0, 0)

CANN_FIX = "install the CANN toolkit and run `source <CANN>/set_env.sh` (it sets ASCEND_HOME_PATH)"
SHMEM_FIX = ("build SHMEM (git clone https://gitcode.com/cann/shmem; bash scripts/build.sh) or install its .run "
             "package, then set SHMEM_HOME to its install folder (`source <shmem>/set_env.sh` sets SHMEM_HOME_PATH)")
SOC_FIX = "set COMBINE_NPU_SOC to the SoC that `npu-smi info` names (e.g. Ascend910B3, Ascend950)"
TORCH_FIX = "pip install -e '.[baseline]' (CPU torch)"


@dataclass(frozen=True)
class Capability:
    """One row: ``name``, whether it is ``available``, a ``detail`` (version, path) and,
    when not available, the ``fix`` that makes it so."""

    name: str
    available: bool
    detail: str = ""
    fix: str = ""


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

    torch_npu: Callable[[], TorchNpu | None] = _probe_torch_npu
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
        return ShmemInfo(None, problem="SHMEM_HOME is not set")
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


def soc_arch(soc: str) -> tuple[str, int] | None:
    """(bisheng arch, cycles per microsecond) of a SoC name, None when unsupported.

    A2/A3 (Ascend910B*, Ascend910_93*): ('dav-c220', 50); Ascend950: ('dav-c310', 1000)
    (combine-facts sections 6-7; host/perf_csv.cpp applies the same rule to aclrtGetSocName).
    """
    s = soc or ""
    if "950" in s:
        return "dav-c310", 1000
    if re.search(r"910B|910_93", s):
        return "dav-c220", 50
    return None


#: The SoC whose AIV count and UB the CPU twin enforces when none is chosen
#: (``COMBINE_TWIN_SOC``; host/twin/twin_acl.cpp holds the same table).
TWIN_DEFAULT_SOC = "Ascend910B3"
#: What the twin models, as its refusal says (host/twin/twin_acl.cpp says the same).
TWIN_SOCS = ("the twin models Ascend910B2 (48 AIV), Ascend910B3 and Ascend910B4 (40 AIV) and Ascend910_93xx "
             "(48 AIV per die)")
#: SHMEM makes one SDMA stream per AIV block 0..47 (ACLSHMEM_MAX_AIV_PER_NPU).
MAX_SDMA_BLOCKS = 48


def aiv_cores(soc: str) -> int:
    """AIV (vector) cores of an A2/A3 SoC the twin models: 40 on Ascend910B3/B4, 48 on
    Ascend910B2 and on each Ascend910_93xx die (../shared/docs/npu-model-facts.md section 2).

    Raises:
        ValueError: a SoC the twin does not model, naming the ones it does.
    """
    s = soc or ""
    if s in ("Ascend910B3", "Ascend910B4"):
        return 40
    if s == "Ascend910B2" or s.startswith("Ascend910_93"):
        return 48
    raise ValueError(f"soc={soc!r}: {TWIN_SOCS}")


def launch_block_dim(pes: int, soc: str = TWIN_DEFAULT_SOC) -> int:
    """AIV blocks of one combine launch: min(pes, AIV cores of ``soc``, 48); core ``c`` serves the
    source ranks ``c, c + block_dim, ...`` (kernels/combine_kernel.h launch_block_dim)."""
    return min(int(pes), aiv_cores(soc), MAX_SDMA_BLOCKS)


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


def npu_variant_refusal(variant: str, env: dict[str, str] | None = None) -> str | None:
    """Why ``variant`` cannot run on the NPU target here, or None. Only CANN is read (cheap).

    The dual-plane variant needs SDMA, which needs CANN 9.0.0 or later; classic needs nothing more.
    """
    if variant != "doubleplane":
        return None
    cann = cann_info(dict(os.environ) if env is None else env)
    if cann.sdma:
        return None
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
            return {"classic": fix, "doubleplane": fix}
        if target != "npu":
            raise ValueError(f"target={target!r}: must be cpu or npu")
        fix = self.npu_fix()
        return {"classic": fix, "doubleplane": fix or self.rows["sdma"].fix}

    def baselines(self) -> dict[str, str]:
        """Baseline backend -> '' when ``compare --baseline hccl`` can run it here, else the fix:
        ``gloo`` (on the twin, CPU tensors) needs torch; ``hccl`` (on NPUs) needs torch_npu and NPUs."""
        gloo = "" if self.rows["torch"].available else self.rows["torch"].fix
        hccl = "" if self.rows["torch_npu"].available and self.rows["npu"].available else \
            (self.rows["torch_npu"].fix or self.rows["npu"].fix)
        return {"gloo": gloo, "hccl": hccl}


def _twin_rows(env: dict[str, str]) -> dict[str, Capability]:
    from . import build as build_mod  # late: build imports this module

    path = env.get("PATH", "")
    cxx = shutil.which(env.get("CXX", "g++"), path=path) or shutil.which("c++", path=path)
    cmake = shutil.which("cmake", path=path)
    missing = [n for n, v in (("a C++ compiler (g++)", cxx), ("cmake", cmake)) if not v]
    twin = Capability("twin", not missing, f"c++ {cxx or 'missing'}, cmake {cmake or 'missing'}",
                      "" if not missing else f"install {' and '.join(missing)} (bash .ci/setup)")
    status, where = build_mod.build_status("cpu", env=env)
    now = "python3 -c 'from combine_lab.build import build; build()'"
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
        rows["shmem"] = Capability("shmem", False, "not found (SHMEM_HOME is not set)", SHMEM_FIX)
    else:
        rows["shmem"] = Capability("shmem", False, shmem.problem, SHMEM_FIX)

    if cann.sdma:
        rows["sdma"] = Capability("sdma", True, f"CANN {cann.version} >= 9.0.0")
    else:
        why = f"CANN {cann.version} is older than 9.0.0" if cann.version_tuple else "needs CANN 9.0.0 or later"
        rows["sdma"] = Capability("sdma", False, why, "install CANN 9.0.0 or later (toolkit and ops-legacy packages "
                                                      "for the board) and source its set_env.sh")

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
    return Capabilities(rows, cann, shmem, npus, soc)
