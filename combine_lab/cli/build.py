"""``combine-lab build``: build the lab's driver, or your own kernel with it, or your kernel folder's
own driver (``main.cpp``) against the twin (or, ``--target npu``, by bisheng as SHMEM's own build
makes it), so that the reference's run script runs it unchanged.

    combine-lab build                                                    # the lab's driver (twin)
    combine-lab build --kernel-source ~/shmem/examples/combine/combine_doubleplane
    combine-lab build --kernel-source ~/shmem/examples/combine/combine_doubleplane --main
        # -> ~/shmem/build/bin/combine_doubleplane, what that example's scripts/run.sh runs
        # (combine_classic's run.sh runs ~/shmem/build/bin/combine)

docs/own-kernel.md#5-the-references-own-driver-and-runsh.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from pathlib import Path

from .commands import HELP
from ..errors import ParameterError
from ..folders import usable_folder
from ..run import build as build_mod
from ..run.kernel_source import reference_root, kernel_source


def main_bin_dir(ks) -> Path | None:
    """Where a kernel folder's run script looks for its driver: ``<shmem root>/build/bin`` for an
    example of a SHMEM checkout (its run.sh runs ``${PROJECT_ROOT}/build/bin/<example>``), else None."""
    root = reference_root(ks.path)
    return root / "build" / "bin" if root is not None else None


def main_name(folder: Path) -> str:
    """The name a kernel folder's run script runs its own driver by: the ``build/bin/<name>`` of its
    ``scripts/run.sh`` (SHMEM's classic example runs ``build/bin/combine``, its doubleplane one
    ``build/bin/combine_doubleplane``), else the executable its ``CMakeLists.txt`` adds
    (``aclshmem_add_collective_example(<name>)``), else the folder's name."""
    for file, pattern in (("scripts/run.sh", r"build/bin/([A-Za-z0-9_.+-]+)"),
                          ("CMakeLists.txt", r"aclshmem_add_collective_example\(\s*([A-Za-z0-9_.+-]+)")):
        try:
            m = re.search(pattern, (folder / file).read_text(errors="replace"))
        except OSError:
            continue
        if m:
            return m[1]
    return folder.name


def install(binary: Path, folder: Path, name: str) -> Path:
    """Copy ``binary`` to ``folder/name`` (made first), replacing what is there in one rename."""
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / name
    tmp = folder / f".{name}.combine-lab-tmp"
    shutil.copy2(binary, tmp)
    os.replace(tmp, dst)
    return dst


def _build(a: argparse.Namespace) -> int:
    if a.kernel_source is None:
        if a.main is not None or a.bin_dir is not None:
            raise ParameterError("--main, --bin-dir: build a kernel folder's own main.cpp; they need --kernel-source",
                                 parameter="main" if a.main is not None else "bin_dir",
                                 value=a.main if a.main is not None else a.bin_dir, allowed="with --kernel-source")
        print(f"driver: {build_mod.build(a.target)}")
        return 0
    ks = kernel_source(a.kernel_source)
    if a.main is None:
        binary = build_mod.build(a.target, kernel=ks)
        print(f"driver: {binary} (the lab's driver with {ks.label}, built from {ks.path} unchanged)")
        print(f"build log: {binary.parent / build_mod.BUILD_LOG} (each launch the twin's copy rewrote)")
        return 0
    name = a.main or main_name(ks.path)
    folder = Path(a.bin_dir) if a.bin_dir is not None else main_bin_dir(ks)
    if folder is None:
        raise ParameterError(f"--bin-dir: {ks.path} is not an example of a SHMEM checkout; say where the driver goes",
                             parameter="bin_dir")
    usable_folder(folder, "--bin-dir")
    binary = build_mod.build(a.target, kernel=ks, main=name)  # npu: bisheng, cmake/npu.cmake COMBINE_KERNEL_MAIN
    dst = install(binary, folder, name)
    against = "the CPU twin" if a.target == "cpu" else "CANN and SHMEM by bisheng"
    print(f"driver: {dst} ({ks.path / 'main.cpp'} and its kernel, built unchanged against {against})")
    print(f"build log: {binary.parent / build_mod.BUILD_LOG}")
    run_sh = ks.path / "scripts" / "run.sh"
    if run_sh.is_file():
        print(f"run it: bash {run_sh} -pes 2 -type int32_t   (its run.sh runs {dst})")
    return 0


def register(sub) -> None:
    """Add ``build`` to ``sub`` (argparse sub-parsers)."""
    p = sub.add_parser("build", help=HELP["build"])
    p.add_argument("--kernel-source", default=None, metavar="DIR",
                   help="a folder with your own combine kernel (docs/own-kernel.md), built unchanged")
    p.add_argument("--main", nargs="?", const="", default=None, metavar="NAME",
                   help="build the folder's own main.cpp (against the twin, or --target npu) as NAME (default: the name its "
                        "scripts/run.sh runs, e.g. combine for SHMEM's combine_classic, else the folder's name) "
                        "into --bin-dir")
    p.add_argument("--bin-dir", default=None, metavar="DIR",
                   help="with --main: where the driver goes (default for a SHMEM example: <shmem>/build/bin, where "
                        "its scripts/run.sh looks)")
    p.add_argument("--target", choices=["cpu", "npu"], default="cpu", help="cpu = CPU twin (default), npu = Ascend")
    p.set_defaults(handler=_build)
