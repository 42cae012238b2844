"""Fake NPU toolchains for the tests that need no hardware: a CANN folder (a bisheng that is
g++ underneath, acl/acl.h, kernel_operator.h, lib64, a version file), a SHMEM install
(shmem/include/shmem.h, shmem/lib/libshmem.so, shmem/src/device, version.info) and an npu-smi that prints
a table. Enough for CMake to configure the NPU target and for detection to find each piece; with
``linkable`` also to build and link it, the sources replaced by stubs (g++ is no bisheng)."""

from __future__ import annotations

import os
import shutil
import subprocess
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


#: The CANN libraries SHMEM links every target with (its CMakeLists.txt), as lib64/lib<name>.so.
CANN_LIBS = ("runtime", "ascendcl", "tiling_api", "platform", "c_sec", "nnopbase")


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# linkable=True: what the fake bisheng compiles instead of the real sources (g++ cannot compile
# them): a kernel library whose host half calls libshmem, and a driver that calls it and prints
# the result, so that running the driver proves it found both libraries.
STUB_KERNEL = """extern "C" unsigned long util_get_ffts_config(void);
namespace combine { unsigned long stub_launch() { return util_get_ffts_config() + 1; } }
"""
STUB_DRIVER = """#include <cstdio>
namespace combine { unsigned long stub_launch(); }
int main() { std::printf("%lx\\n", combine::stub_launch()); return 0; }
"""
STUB_SHMEM = 'extern "C" unsigned long util_get_ffts_config(void) { return 0x46465453; }\n'


def _shared_lib(path: Path, source: str = "") -> Path:
    """A real (tiny) shared library at ``path``, built by g++ from ``source``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([shutil.which("g++") or "g++", "-shared", "-fPIC", "-x", "c++", "-", "-o", str(path)],
                   input=source, text=True, check=True)
    return path


def _bisheng(root: Path, bisheng_date: str | None, linkable: bool) -> str:
    """The fake bisheng: g++ underneath; ``linkable``: without bisheng's own options (-xasc, -xcce,
    --npu-arch=, --cce-*, -mllvm X) and with the stubs in place of the kernel and driver sources."""
    gxx = shutil.which("g++") or "g++"
    text = "#!/bin/sh\n"
    if bisheng_date:
        text += f'[ "$1" = -v ] && {{ echo "bisheng version 1.0 ({bisheng_date} 10:00:00)" >&2; exit 0; }}\n'
    if linkable:
        stubs = root / "stub_src"
        _touch(stubs / "kernel.cpp", STUB_KERNEL)
        _touch(stubs / "driver.cpp", STUB_DRIVER)
        _touch(stubs / "empty.cpp")
        text += ("skip=0\n"
                 "for a do\n"
                 "  shift\n"
                 "  if [ $skip = 1 ]; then skip=0; continue; fi\n"
                 "  case \"$a\" in\n"
                 "    -xasc|-xcce|--npu-arch=*|--cce-*) continue ;;\n"
                 "    -mllvm) skip=1; continue ;;\n"
                 f"    */kernels/combine_kernel.cpp) a={stubs}/kernel.cpp ;;\n"
                 f"    */host/combine_host.cpp) a={stubs}/driver.cpp ;;\n"
                 f"    */host/*.cpp) a={stubs}/empty.cpp ;;\n"
                 "  esac\n"
                 "  set -- \"$@\" \"$a\"\n"
                 "done\n")
    return text + f'exec {gxx} "$@"\n'


def make_cann(root: Path, version: str | None = "9.0.0", version_file: str = "toolkit_info",
              bisheng: bool = True, bisheng_date: str | None = None, unified_dlog: bool = True,
              linkable: bool = False) -> Path:
    """A fake CANN toolkit at ``root``; ``version_file``: 'toolkit_info'
    (<arch>-linux/ascend_toolkit_install.info) or 'compiler' (compiler/version.info);
    ``bisheng_date``: the build date ``bisheng -v`` prints (YYYY-MM-DD; None prints g++'s);
    lib64 holds :data:`CANN_LIBS` and libunified_dlog.so when ``unified_dlog``: empty files, or
    real empty shared libraries and a bisheng that builds the stubs when ``linkable``."""
    if bisheng:
        _exe(root / "compiler" / "ccec_compiler" / "bin" / "bisheng", _bisheng(root, bisheng_date, linkable))
    _touch(root / "include" / "acl" / "acl.h")
    _touch(root / "compiler" / "tikcpp" / "tikcfw" / "kernel_operator.h")
    (root / "compiler" / "tikcpp" / "tikcfw" / "impl").mkdir(parents=True, exist_ok=True)
    (root / "compiler" / "tikcpp" / "tikcfw" / "interface").mkdir(parents=True, exist_ok=True)
    for lib in CANN_LIBS + (("unified_dlog",) if unified_dlog else ()):
        (_shared_lib if linkable else _touch)(root / "lib64" / f"lib{lib}.so")
    if version is not None:
        if version_file == "toolkit_info":
            _touch(root / f"{os.uname().machine}-linux" / "ascend_toolkit_install.info",
                   f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001\narch=x86_64\n")
        else:
            _touch(root / "compiler" / "version.info", f"Version={version}\nversion_dir=x\n")
    return root


def make_shmem(root: Path, version: str | None = "1.0.0", layout: str = "install", device_src: bool = True,
               linkable: bool = False) -> Path:
    """A fake SHMEM at ``root``: layout 'install' (root/shmem/{include,lib,src/device},
    root/version.info) or 'source' (root/install/shmem/{include,lib}, root/src/device,
    root/VERSION); ``device_src``: whether the device sources are there; ``linkable``: libshmem.so
    a real shared library defining util_get_ffts_config (else an empty file)."""
    lib_root = root / "shmem" if layout == "install" else root / "install" / "shmem"
    _touch(lib_root / "include" / "shmem.h")
    if linkable:
        _shared_lib(lib_root / "lib" / "libshmem.so", STUB_SHMEM)
    else:
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
    """A PATH folder: an ``npu-smi`` printing ``npu_smi`` (when given); fake clang++ and cmake when
    ``twin_tools`` (so doctor output does not depend on this machine)."""
    root.mkdir(parents=True, exist_ok=True)
    if npu_smi is not None:
        _touch(root / "npu_smi.txt", npu_smi)
        cat = shutil.which("cat") or "/bin/cat"
        _exe(root / "npu-smi", f'#!/bin/sh\n[ "$1" = info ] && exec {cat} "{root / "npu_smi.txt"}"\nexit 1\n')
    if twin_tools:
        _exe(root / "clang++", "#!/bin/sh\nexit 0\n")
        _exe(root / "cmake", "#!/bin/sh\nexit 0\n")
    return root


def npu_env(tmp: Path, *, cann: str | None = "9.0.0", shmem: bool = True, npu_smi: str | None = None,
            soc: str | None = None, twin_tools: bool = False, bisheng_date: str | None = None,
            unified_dlog: bool = True, linkable: bool = False) -> dict[str, str]:
    """A complete fake environment under ``tmp`` (no inherited variables but a PATH made of
    ``tmp/bin`` only): CANN of version ``cann`` (None: not installed), SHMEM, npu-smi output;
    ``linkable``: the NPU target builds and links (stubs for the sources, see make_cann)."""
    env = {"PATH": str(make_bin(tmp / "bin", npu_smi, twin_tools)), "COMBINE_LAB_BUILD_DIR": str(tmp / "builds")}
    if cann is not None:
        env["ASCEND_HOME_PATH"] = str(make_cann(tmp / "cann", cann, bisheng_date=bisheng_date,
                                                unified_dlog=unified_dlog, linkable=linkable))
    if shmem:
        make_shmem(tmp / "shmem", linkable=linkable)
        env["SHMEM_HOME"] = str(tmp / "shmem")
    if soc:
        env["COMBINE_NPU_SOC"] = soc
    return env
