"""Build the combine host driver and kernel with CMake, reusing the build until a source changes.

The twin target (``cpu``) compiles ``kernels/`` and ``host/`` with the host C++ compiler
against ``host/twin``; the ``npu`` target needs CANN's bisheng and SHMEM (combine-facts
section 7) and is not available on machines without them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

TARGETS = ("cpu", "npu")
BINARY_NAME = "combine_host"
_SOURCE_DIRS = ("kernels", "host", "cmake")
_SOURCE_SUFFIXES = {".cpp", ".h", ".hpp", ".cmake", ".txt"}


class BuildError(RuntimeError):
    """The build could not be configured or compiled; the message holds the tool output tail."""


class TargetUnavailable(BuildError):
    """The requested target cannot be built on this machine (for example npu without CANN)."""


def source_root() -> Path:
    """The repository root holding ``CMakeLists.txt``, ``kernels/`` and ``host/``.

    Uses ``COMBINE_LAB_SOURCE`` when set, else the folder above the package.

    Raises:
        BuildError: no ``CMakeLists.txt`` there.
    """
    root = Path(os.environ.get("COMBINE_LAB_SOURCE", Path(__file__).resolve().parents[1]))
    if not (root / "CMakeLists.txt").is_file():
        raise BuildError(f"COMBINE_LAB_SOURCE={root}: no CMakeLists.txt there; point it at the combine_lab checkout")
    return root


def default_build_dir(target: str = "cpu") -> Path:
    """``$COMBINE_LAB_BUILD_DIR/<target>`` if set, else ``<source root>/build/<target>``."""
    base = os.environ.get("COMBINE_LAB_BUILD_DIR")
    return (Path(base) if base else source_root() / "build") / target


def _fingerprint(root: Path, target: str) -> str:
    h = hashlib.sha256(target.encode())
    files = [root / "CMakeLists.txt"]
    for d in _SOURCE_DIRS:
        if (root / d).is_dir():
            files += sorted(p for p in (root / d).rglob("*") if p.suffix in _SOURCE_SUFFIXES and p.is_file())
    for p in files:
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise BuildError(f"{' '.join(cmd)} failed with status {proc.returncode}:\n{tail}")


def build(target: str = "cpu", build_dir: str | os.PathLike | None = None, force: bool = False,
          kernel_source: str | os.PathLike | None = None) -> Path:
    """Configure and build the host driver for ``target``; return the binary's path.

    The build folder is reused while the fingerprint of every file under ``kernels/``,
    ``host/``, ``cmake/`` and ``CMakeLists.txt`` is unchanged, so a second call costs one
    hash of the sources. Concurrent callers serialise on a lock file in the build folder.
    Ninja is used when it is on PATH.

    Args:
        target: ``"cpu"`` (the CPU twin) or ``"npu"``.
        build_dir: folder for CMake's files; default :func:`default_build_dir`.
        force: rebuild even if nothing changed.
        kernel_source: another kernel file to build instead of ``kernels/combine_kernel.cpp``
            (tests build deliberately broken kernels this way); use its own ``build_dir``.

    Raises:
        ValueError: ``target`` is not one of :data:`TARGETS`.
        TargetUnavailable: ``target="npu"`` without CANN (``ASCEND_HOME_PATH``) and SHMEM.
        BuildError: cmake is missing, or configuring or compiling failed.
    """
    if target not in TARGETS:
        raise ValueError(f"target={target!r}: must be one of {', '.join(TARGETS)}")
    if target == "npu":
        _require_npu_toolchain()
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake not found on PATH: install it (apt-get install cmake, or pip install cmake)")
    root = source_root()
    bdir = Path(build_dir) if build_dir is not None else default_build_dir(target)
    bdir.mkdir(parents=True, exist_ok=True)
    binary = bdir / BINARY_NAME
    stamp = bdir / "combine_lab_stamp.json"
    with open(bdir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fp = _fingerprint(root, target)
        if kernel_source is not None:
            fp += hashlib.sha256(Path(kernel_source).read_bytes()).hexdigest()
        if not force and binary.is_file() and stamp.is_file():
            try:
                if json.loads(stamp.read_text()).get("fingerprint") == fp:
                    return binary
            except (OSError, ValueError):
                pass
        if not (bdir / "CMakeCache.txt").is_file():
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            extra = [f"-DCOMBINE_KERNEL_SOURCE={Path(kernel_source).resolve()}"] if kernel_source else []
            _run([cmake, "-S", str(root), "-B", str(bdir), *gen, *extra, f"-DCOMBINE_TARGET={target}",
                  "-DCMAKE_BUILD_TYPE=Release"], root)
        _run([cmake, "--build", str(bdir), "--parallel", str(os.cpu_count() or 2)], root)
        if not binary.is_file():
            raise BuildError(f"build finished but {binary} is missing")
        stamp.write_text(json.dumps({"fingerprint": fp, "target": target}))
    return binary


def _require_npu_toolchain() -> None:
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
    shmem = os.environ.get("SHMEM_HOME")
    missing = []
    if not home:
        missing.append("CANN (set ASCEND_HOME_PATH by sourcing <cann>/set_env.sh)")
    if not shmem:
        missing.append("SHMEM (set SHMEM_HOME to an installed SHMEM)")
    if missing or not (Path(__file__).resolve().parents[1] / "cmake" / "npu.cmake").is_file():
        raise TargetUnavailable(
            "target=npu: not built here: missing " + (", ".join(missing) if missing else "cmake/npu.cmake")
            + "; the CPU twin (target=cpu) runs everywhere")
