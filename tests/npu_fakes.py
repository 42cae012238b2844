"""Fake NPU toolchains for the tests that need no hardware: a CANN folder (a bisheng that is
g++ underneath, acl/acl.h, kernel_operator.h, lib64, a version file), a SHMEM install
(shmem/include/shmem.h, shmem/lib/libshmem.so, shmem/src/device, version.info) and an npu-smi that prints
a table. Enough for CMake to configure the NPU target and for detection to find each piece."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

NPU_SMI_A2 = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 97.0        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 92.1        35                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
"""


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_cann(root: Path, version: str | None = "9.0.0", version_file: str = "toolkit_info",
              bisheng: bool = True, bisheng_date: str | None = None) -> Path:
    """A fake CANN toolkit at ``root``; ``version_file``: 'toolkit_info'
    (<arch>-linux/ascend_toolkit_install.info) or 'compiler' (compiler/version.info);
    ``bisheng_date``: the build date ``bisheng -v`` prints (YYYY-MM-DD; None prints g++'s)."""
    gxx = shutil.which("g++") or "g++"
    if bisheng:
        v = (f'[ "$1" = -v ] && {{ echo "bisheng version 1.0 ({bisheng_date} 10:00:00)" >&2; exit 0; }}\n'
             if bisheng_date else "")
        _exe(root / "compiler" / "ccec_compiler" / "bin" / "bisheng", f'#!/bin/sh\n{v}exec {gxx} "$@"\n')
    _touch(root / "include" / "acl" / "acl.h")
    _touch(root / "compiler" / "tikcpp" / "tikcfw" / "kernel_operator.h")
    (root / "compiler" / "tikcpp" / "tikcfw" / "impl").mkdir(parents=True, exist_ok=True)
    (root / "compiler" / "tikcpp" / "tikcfw" / "interface").mkdir(parents=True, exist_ok=True)
    _touch(root / "lib64" / "libascendcl.so")
    _touch(root / "lib64" / "libruntime.so")
    if version is not None:
        if version_file == "toolkit_info":
            _touch(root / f"{os.uname().machine}-linux" / "ascend_toolkit_install.info",
                   f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001\narch=x86_64\n")
        else:
            _touch(root / "compiler" / "version.info", f"Version={version}\nversion_dir=x\n")
    return root


def make_shmem(root: Path, version: str | None = "1.0.0", layout: str = "install", device_src: bool = True) -> Path:
    """A fake SHMEM at ``root``: layout 'install' (root/shmem/{include,lib,src/device},
    root/version.info) or 'source' (root/install/shmem/{include,lib}, root/src/device,
    root/VERSION); ``device_src``: whether the device sources are there."""
    lib_root = root / "shmem" if layout == "install" else root / "install" / "shmem"
    _touch(lib_root / "include" / "shmem.h")
    _touch(lib_root / "lib" / "libshmem.so")
    if device_src:
        src = lib_root / "src" if layout == "install" else root / "src"
        _touch(src / "device" / "utils" / "prof" / "shmemi_prof.h")
    if version is not None:
        if layout == "install":
            _touch(root / "version.info", f"        SHMEM Version :  {version}\n        Platform : x86_64\n")
        else:
            _touch(root / "VERSION", version + "\n")
    return lib_root


def make_bin(root: Path, npu_smi: str | None = None, twin_tools: bool = False) -> Path:
    """A PATH folder: an ``npu-smi`` printing ``npu_smi`` (when given); fake g++ and cmake when
    ``twin_tools`` (so doctor output does not depend on this machine)."""
    root.mkdir(parents=True, exist_ok=True)
    if npu_smi is not None:
        _touch(root / "npu_smi.txt", npu_smi)
        cat = shutil.which("cat") or "/bin/cat"
        _exe(root / "npu-smi", f'#!/bin/sh\n[ "$1" = info ] && exec {cat} "{root / "npu_smi.txt"}"\nexit 1\n')
    if twin_tools:
        _exe(root / "g++", "#!/bin/sh\nexit 0\n")
        _exe(root / "cmake", "#!/bin/sh\nexit 0\n")
    return root


def npu_env(tmp: Path, *, cann: str | None = "9.0.0", shmem: bool = True, npu_smi: str | None = None,
            soc: str | None = None, twin_tools: bool = False, bisheng_date: str | None = None) -> dict[str, str]:
    """A complete fake environment under ``tmp`` (no inherited variables but a PATH made of
    ``tmp/bin`` only): CANN of version ``cann`` (None: not installed), SHMEM, npu-smi output."""
    env = {"PATH": str(make_bin(tmp / "bin", npu_smi, twin_tools)), "COMBINE_LAB_BUILD_DIR": str(tmp / "builds")}
    if cann is not None:
        env["ASCEND_HOME_PATH"] = str(make_cann(tmp / "cann", cann, bisheng_date=bisheng_date))
    if shmem:
        make_shmem(tmp / "shmem")
        env["SHMEM_HOME"] = str(tmp / "shmem")
    if soc:
        env["COMBINE_NPU_SOC"] = soc
    return env
