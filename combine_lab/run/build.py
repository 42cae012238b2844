"""Build the combine host driver and kernel with CMake, reusing the build until a source changes.

The twin target (``cpu``) compiles ``kernels/`` and ``host/`` with the host C++ compiler
against ``host/twin``; the ``npu`` target compiles the same sources with CANN's bisheng
against CANN and SHMEM (``cmake/npu.cmake``, docs/npu.md#4-build-and-run), one build folder per
SoC (``build/npu-<soc>``). Without CANN or SHMEM it stops before invoking anything and says
what is missing and how to provide it.

A checkout's build folders are its own (``cache_root``), so an edit rebuilds incrementally; the
twin's lab-own executables (the driver, the probe's, the broken kernels') are also kept in the
store shared by every checkout (:mod:`~combine_lab.run.store`, keyed by the sources' bytes, the
configure arguments and the compiler), so a second checkout of the same sources copies them in
instead of compiling (docs/cli.md section 1).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import CombineLabError, ParameterError
from . import broken as overlays
from . import store, toolchain

TARGETS = ("cpu", "npu")
BINARY_NAME = "combine_host"
#: What :func:`build` can be asked for: the driver, or the probe's driver (docs/probe.md).
PROGRAMS = (BINARY_NAME, "probe_host")
_SOURCE_DIRS = ("kernels", "host", "cmake")
#: The files of those folders a build is made of (cmake/twin_launch.py writes the twin's kernel copy;
#: the broken kernels' patches are hashed on their own, broken.fingerprint).
_SOURCE_SUFFIXES = {".cpp", ".h", ".hpp", ".cmake", ".txt", ".py"}


class BuildError(CombineLabError, RuntimeError):
    """The build could not be configured or compiled; the message holds the tool output tail."""


class TargetUnavailable(BuildError):
    """The requested target cannot be built on this machine (for example npu without CANN)."""


class VariantRefused(TargetUnavailable):
    """The target builds, but this variant cannot run on it here (dual-plane on CANN < 9.0.0)."""


@dataclass(frozen=True)
class NpuToolchain:
    """What an NPU build uses: ``bisheng``, CANN ``cann_home`` and ``cann_version``, SHMEM
    ``shmem_home`` and ``shmem_root``, the ``soc`` and its ``arch`` (dav-c220 / dav-c310) and
    whether the kernel's SDMA plane is built (``sdma``: CANN >= 9.0.0 and a SoC with SDMA put,
    :func:`~combine_lab.run.toolchain.sdma_soc_problem`; otherwise MTE-only)."""

    bisheng: str
    cann_home: str
    cann_version: str
    shmem_home: str
    shmem_root: str
    soc: str
    arch: str
    sdma: bool

    def cmake_args(self) -> list[str]:
        """The -D options of the NPU configure step (cmake/npu.cmake)."""
        return [f"-DCMAKE_CXX_COMPILER={self.bisheng}", f"-DASCEND_HOME_PATH={self.cann_home}",
                f"-DSHMEM_HOME={self.shmem_home}", f"-DCOMBINE_NPU_SOC={self.soc}",
                f"-DCOMBINE_NPU_ARCH={self.arch}", f"-DCOMBINE_NPU_SDMA={'ON' if self.sdma else 'OFF'}",
                "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]


#: How the twin's compiler is found, and what to do when there is none (docs/twin.md#9-kernels-as-the-npu-compiles-them).
TWIN_CXX_FIX = "install clang (bash .ci/setup, or apt-get install clang), or set CXX to a clang++"


def twin_cxx(env: dict[str, str] | None = None) -> str | None:
    """The clang++ the twin builds with: ``$CXX`` when it names a clang, else ``clang++`` on PATH,
    else the newest ``clang++-<N>`` there; None when there is none.

    The twin compiles kernels with clang: a UB pointer is a byte offset (``(__ubuf__ T*)32``), which
    clang's x86-64 address space 256 makes a GS-relative address, GS being the core thread's UB."""
    env = os.environ if env is None else env
    path = env.get("PATH", os.defpath)
    cxx = env.get("CXX", "")
    if cxx and "clang" in Path(cxx).name:
        found = shutil.which(cxx, path=path)
        if found:
            return found
    found = shutil.which("clang++", path=path)
    if found:
        return found
    for n in range(30, 13, -1):
        found = shutil.which(f"clang++-{n}", path=path)
        if found:
            return found
    return None


def source_root() -> Path:
    """The repository root holding ``CMakeLists.txt``, ``kernels/`` and ``host/``.

    Uses ``COMBINE_LAB_SOURCE`` when set, else the folder above the package.

    Raises:
        BuildError: no ``CMakeLists.txt`` there.
    """
    root = Path(os.environ.get("COMBINE_LAB_SOURCE", Path(__file__).resolve().parents[2]))
    if not (root / "CMakeLists.txt").is_file():
        raise BuildError(f"COMBINE_LAB_SOURCE={root}: no CMakeLists.txt there; point it at the combine_lab checkout",
                         parameter="COMBINE_LAB_SOURCE", value=str(root))
    return root


def cache_root(env: dict[str, str] | None = None) -> Path:
    """The lab's builds of this checkout: ``$XDG_CACHE_HOME/combine_lab/builds-<12 hex of the source
    root's path>`` (``~/.cache`` without XDG_CACHE_HOME). One folder per checkout, since a CMake build
    folder belongs to one source folder; never inside the checkout (docs/cli.md section 1)."""
    env = os.environ if env is None else env
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    checkout = hashlib.sha256(str(source_root()).encode()).hexdigest()[:12]
    return cache / "combine_lab" / f"builds-{checkout}"


def default_build_dir(target: str = "cpu", soc: str | None = None, env: dict[str, str] | None = None) -> Path:
    """``$COMBINE_LAB_BUILD_DIR/<target>`` if set, else ``<cache_root()>/<target>``; the NPU target
    gets one folder per SoC: ``.../npu-<soc>``."""
    env = os.environ if env is None else env
    base = env.get("COMBINE_LAB_BUILD_DIR")
    name = f"npu-{soc}" if target == "npu" and soc else target
    return (Path(base) if base else cache_root(env)) / name


#: Fingerprints already hashed in this process, by the sources' (path, mtime, size, inode): every
#: run asks for the build, and a sweep or the tuning app's session runs hundreds.
_hashed: dict[tuple, str] = {}


def _source_files(root: Path) -> list[Path]:
    """CMakeLists.txt, then the sources under each of :data:`_SOURCE_DIRS` (sorted as paths)."""
    files = [root / "CMakeLists.txt"]
    for d in _SOURCE_DIRS:
        found = [Path(top, f) for top, _, names in os.walk(root / d) for f in names
                 if os.path.splitext(f)[1] in _SOURCE_SUFFIXES]
        files += sorted(p for p in found if p.is_file())
    return files


def _fingerprint(root: Path, target: str, config: str = "") -> str:
    """sha256 of ``target``, ``config`` and every source's path and bytes (:func:`_source_files`); hashed
    again only when a source's path, mtime, size or inode changed since this process last hashed them
    (as make and ninja decide what is out of date)."""
    files = _source_files(root)
    seen = []
    for p in files:
        st = p.stat()
        seen.append((str(p), st.st_mtime_ns, st.st_size, st.st_ino))
    key = (target, config, tuple(seen))
    if key in _hashed:
        return _hashed[key]
    h = hashlib.sha256(target.encode())
    h.update(config.encode())
    for p in files:
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    fp = h.hexdigest()
    # a file written within the last 2 s may be written again with the same mtime (the clock's
    # granularity) and size: not remembered (git's "racy" index entries, the same reasoning)
    if time.time_ns() - max(s[1] for s in seen) > 2_000_000_000:
        if len(_hashed) > 64:
            _hashed.clear()
        _hashed[key] = fp
    return fp


#: The build log in every build folder: the configure and compile lines of the last build and
#: their output (a kernel folder's build shows each launch the twin's copy rewrote there).
BUILD_LOG = "build.log"


def _run(cmd: list[str], cwd: Path) -> str:
    """Run ``cmd`` (a configure or build step); return its output. Raises BuildError with its tail."""
    # Its own process group, killed whole when this process is interrupted (Ctrl-C, SIGTERM): ninja's
    # compilers must not outlive the build that started them.
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        tail = "\n".join(out.splitlines()[-40:])
        raise BuildError(f"{' '.join(cmd)} failed with status {proc.returncode}:\n{tail}")
    return out


def _logged(cmd: list[str], cwd: Path, log: Path) -> None:
    """:func:`_run`, its command and output appended to the build log ``log`` (a failure's tail too)."""
    try:
        out = _run(cmd, cwd)
    except BuildError as e:
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{e}\n")
        raise BuildError(f"{e} (the whole log: {log})") from None
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{out or ''}")


def _stamp(bdir: Path, program: str) -> Path:
    """The stamp (sources' fingerprint, config) of ``program``'s last build in ``bdir``: one per
    program, since a build of the driver alone (cmake's "all") does not build the probe, and its
    stamp must not vouch for a probe_host built from older sources."""
    return bdir / ("combine_lab_stamp.json" if program == BINARY_NAME else f"combine_lab_stamp_{program}.json")


def build_status(target: str = "cpu", build_dir: str | os.PathLike | None = None,
                 env: dict[str, str] | None = None) -> tuple[str, Path]:
    """('up to date' | 'stale' | 'not built', build folder) of ``target``'s default (or given) folder.

    'stale': built, but a source under kernels/, host/, cmake/ changed since. Runs nothing.
    """
    bdir = Path(build_dir) if build_dir is not None else default_build_dir(target, env=env)
    stamp = _stamp(bdir, BINARY_NAME)
    if not (bdir / BINARY_NAME).is_file() or not stamp.is_file():
        return "not built", bdir
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return "stale", bdir
    fp = _fingerprint(source_root(), target, data.get("config", ""))
    return ("up to date" if data.get("fingerprint") == fp else "stale"), bdir


def broken_binary(build_dir: str | os.PathLike, name: str) -> Path:
    """The driver built with broken kernel ``name`` (``kernels/broken/<name>.patch``) in ``build_dir``
    (see :func:`build`'s ``broken``)."""
    return Path(build_dir) / f"{BINARY_NAME}_broken_{name}"


def kernel_build_dir(kernel, target: str = "cpu", soc: str | None = None, main: bool = False) -> Path:
    """The default build folder of a kernel folder (a :class:`~combine_lab.run.kernel_source.KernelSource`):
    beside the target's, ``<target>-kernel-<label>-<8 hex of its path>`` (``...-main`` for its own main.cpp)."""
    tag = hashlib.sha256(str(kernel.path).encode()).hexdigest()[:8]
    base = default_build_dir(target, soc)
    return base.parent / f"{base.name}-kernel-{kernel.slug}-{tag}{'-main' if main else ''}"


def build(target: str = "cpu", build_dir: str | os.PathLike | None = None, force: bool = False,
          broken: list[str] | None = None, soc: str | None = None, kernel=None, main: str | None = None,
          program: str = BINARY_NAME) -> Path:
    """Configure and build the host driver for ``target``; return the binary's path.

    The build folder is reused while the fingerprint of every file under ``kernels/``,
    ``host/``, ``cmake/`` and ``CMakeLists.txt`` is unchanged, so a second call costs one
    hash of the sources. Concurrent callers serialise on a lock file in the build folder.
    Ninja is used when it is on PATH. The twin's lab-own builds (not ``kernel``, not npu) also use
    the store shared by every checkout (:mod:`~combine_lab.run.store`, ``COMBINE_LAB_STORE``): a
    folder not up to date first copies the executables from the store's entry of the same
    sources, configure arguments and compiler, if it has them all ("reused from the store <entry>"
    in its build.log, no cmake run); a compiled build, or an up-to-date one the store lacks, is
    put there.

    Args:
        target: ``"cpu"`` (the CPU twin) or ``"npu"``.
        build_dir: folder for CMake's files; default :func:`default_build_dir`.
        force: rebuild even if nothing changed.
        broken: cpu only: the self-test's broken kernels to build (names of ``kernels/broken/<name>.patch``,
            docs/hardware-rules.md#12-broken-kernels): beside the driver, one more driver per name
            (:func:`broken_binary`), built from a copy of ``kernels/`` with that patch applied, written
            into ``<build_dir>/broken_src/<name>`` (:mod:`~combine_lab.run.broken`); the twin's library
            is shared. The checkout's kernel is only read. Use its own ``build_dir``.
        soc: npu only: the SoC to build for (sets the bisheng arch); default ``COMBINE_NPU_SOC``,
            else the SoC of the visible NPUs. The default folder is per SoC.
        kernel: your own kernel (a folder, or a :class:`~combine_lab.run.kernel_source.KernelSource`,
            checked against the entry contract first): the driver is built with it instead of the
            lab's kernel, into its own folder (:func:`kernel_build_dir`), the folder's files only read
            (docs/own-kernel.md). The build's log, with each launch the twin's copy rewrote, is
            ``build.log`` beside the binary.
        main: with ``kernel``: build the folder's own ``main.cpp`` as the executable of this name
            (e.g. ``combine_doubleplane``) instead of the lab's driver, against the twin; SHMEM's
            examples' ``examples/utils`` goes on its include path when the folder has one two levels
            up. Returns that executable.
        program: the lab's executable to build and return: ``combine_host`` (the driver, built
            with everything else) or ``probe_host`` (the probe, docs/probe.md, built only when asked:
            ``--target all probe_host``). Same folder, same fingerprint.

    Raises:
        ParameterError: ``target`` is not one of :data:`TARGETS`; ``broken`` names no patch, or is
            asked for with another target or with ``kernel``.
        TargetUnavailable: ``target="npu"`` without CANN, bisheng, SHMEM or a known SoC; raised
            before anything is run, the message names each missing piece and how to provide it.
        BuildError: cmake is missing, or configuring or compiling failed.
        KernelSourceError: ``kernel`` does not meet the entry contract (before anything is built).
    """
    kernel, broken = _checked_request(target, broken, kernel, main, program)
    broken_fp = overlays.fingerprint(broken, source_root()) if broken else ""  # ParameterError for a name with no patch
    config_args, soc = _toolchain_args(target, broken, soc)
    kernel_fp = ""
    if kernel is not None:
        config_args += _kernel_args(kernel, main)
        kernel_fp = kernel.fingerprint()
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake not found on PATH: install it (apt-get install cmake, or pip install cmake)")
    root = source_root()
    bdir = _build_folder(build_dir, target, soc, kernel, main)
    bdir.mkdir(parents=True, exist_ok=True)
    binary = bdir / (main or program)
    stamp = _stamp(bdir, program)
    log = bdir / BUILD_LOG
    made = [binary] + [broken_binary(bdir, n) for n in broken]
    with open(bdir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shelf = _store_slot(root, target, kernel, config_args, broken_fp)
        if broken:
            config_args.append(f"-DCOMBINE_BROKEN_SRC={(bdir / 'broken_src').absolute()}")
        config = " ".join(config_args)
        fp = _fingerprint(root, target, config + kernel_fp + broken_fp)
        fresh, old_config = _last_build(stamp, fp, made, force)
        if fresh:
            if shelf is not None:  # a warm checkout seeds the store (once: then the store has it)
                _publish(shelf, _stamp_key(stamp) or shelf.key(), made + [bdir / TWIN_LIBRARY], False)
            return binary
        if shelf is not None and not force and _reuse(shelf, made, bdir, target, log):
            stamp.write_text(json.dumps({"fingerprint": fp, "target": target, "config": config,
                                         "store_key": shelf.key()}))
            return binary
        _say_building(kernel, target, bdir, log)
        log.write_text("")
        if broken:  # the broken kernels' copies of kernels/, each with its patch (a changed one rebuilt alone)
            try:
                overlays.write_sources(broken, bdir / "broken_src", root)
            except overlays.BrokenPatchError as e:
                raise BuildError(str(e)) from e
        _configure_and_compile(cmake, root, bdir, target, config_args, old_config, program, log)
        if not binary.is_file():
            raise BuildError(f"build finished but {binary} is missing")
        record = {"fingerprint": fp, "target": target, "config": config}
        if shelf is not None:
            record["store_key"] = shelf.key()
            _publish(shelf, shelf.key(), made + [bdir / TWIN_LIBRARY], force)
        stamp.write_text(json.dumps(record))
    return binary


@dataclass(frozen=True)
class _Shelf:
    """Where a build's executables are stored: the store's folder ``root``, and what the key is
    made of (the sources' ``fingerprint`` with the portable configure arguments, compiler ``cxx``)."""

    root: Path
    fingerprint: str
    cxx: str

    def key(self) -> str:
        """The entry's key (:func:`~combine_lab.run.store.entry_key`; runs ``cxx --version`` once
        per process, so the up-to-date path asks the stamp first)."""
        return store.entry_key(self.fingerprint, self.cxx)


def _store_slot(root: Path, target: str, kernel, config_args: list[str], broken_fp: str) -> _Shelf | None:
    """Where this build is stored, or None where it does not use the store: ``COMBINE_LAB_STORE=off``,
    or another build than the twin's lab-own ones.

    Only those are stored: a kernel folder's build names that folder's absolute path in its
    executables (and its kernel is keyed by the folder's path, not by its bytes); the NPU
    driver's RPATH points at libcombine_kernel.so in its own build folder, so a copy elsewhere
    would load another folder's kernel. ``config_args``: before the build folder's own
    ``-DCOMBINE_BROKEN_SRC`` is added, so that the key names no folder; ``Python3_EXECUTABLE``
    is left out too: it only runs cmake/twin_launch.py, whose copy is a function of the sources.
    """
    where = store.store_root()
    if where is None or target != "cpu" or kernel is not None:
        return None
    portable = [a for a in config_args if not a.startswith("-DPython3_EXECUTABLE=")]
    cxx = next(a.split("=", 1)[1] for a in config_args if a.startswith("-DCMAKE_CXX_COMPILER="))
    return _Shelf(where, _fingerprint(root, target, " ".join(portable) + broken_fp), cxx)


def _stamp_key(stamp: Path) -> str | None:
    """The store key the stamp recorded when its build was made (with the compiler's version of
    then), or None (a stamp from before the store)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        key = json.loads(stamp.read_text()).get("store_key")
        if isinstance(key, str) and re.fullmatch(r"[0-9a-f]{64}", key):
            return key
    return None


#: Beside the executables, the twin's library goes into the store: the tests link their own
#: programs of twin rules against ``<build folder>/libcombine_twin.a``.
TWIN_LIBRARY = "libcombine_twin.a"


def _publish(shelf: _Shelf, key: str, paths: list[Path], replace: bool) -> None:
    """Store ``paths`` as entry ``key`` unless the store already has them all (a store that
    cannot be written costs only the reuse, :func:`~combine_lab.run.store.publish`)."""
    if all(p.is_file() for p in paths) and (replace or not store.has(shelf.root, key, [p.name for p in paths])):
        store.publish(shelf.root, key, paths, replace=replace)


def _reuse(shelf: _Shelf, made: list[Path], bdir: Path, target: str, log: Path) -> bool:
    """Copy ``made`` and the twin library from the store's entry into ``bdir`` when it has them
    all; True then, with one line in the build log (and on stderr at a terminal)."""
    entry = store.fetch(shelf.root, shelf.key(), [p.name for p in made] + [TWIN_LIBRARY], bdir)
    if entry is None:
        return False
    log.write_text(f"reused from the store {entry}\n")
    if sys.stderr is not None and sys.stderr.isatty():
        what = f"the {target} driver" if len(made) == 1 else f"the {target} driver and {len(made) - 1} broken kernels"
        print(f"combine-lab: {what} reused from the store ({entry}: built from the same sources) into {bdir}",
              file=sys.stderr, flush=True)
    return True


def _checked_request(target: str, broken: list[str] | None, kernel, main: str | None,
                     program: str) -> tuple[object, list[str]]:
    """(kernel source or None, broken names): what :func:`build` was asked for, refused before
    anything runs where the combination cannot be built (each error names its parameter)."""
    if target not in TARGETS:
        raise ParameterError(f"target={target!r}: must be one of {', '.join(TARGETS)}",
                             parameter="target", value=target)
    if kernel is not None:
        from .kernel_source import kernel_source
        kernel = kernel_source(kernel)
        if broken:
            raise ParameterError("broken: the broken kernels are the lab's kernel's; not with kernel=",
                                 parameter="broken", value=broken)
    if main is not None and (kernel is None or not re.fullmatch(r"[A-Za-z0-9_.-]+", main) or kernel.main is None):
        why = "needs kernel=" if kernel is None else f"{kernel.path} has no main.cpp" if kernel.main is None else \
            "an executable name: letters, digits, _ . -"
        raise ParameterError(f"main={main!r}: {why}", parameter="main", value=main)
    if program not in PROGRAMS or (program != BINARY_NAME and (kernel is not None or broken)):
        raise ParameterError(f"program={program!r}: one of {', '.join(PROGRAMS)} (probe_host: the lab's own build, "
                             "without kernel= or broken=)", parameter="program", value=program)
    broken = list(broken or [])
    if broken and target != "cpu":
        raise ParameterError(f"broken: the broken kernels run on the twin only, not target={target!r}",
                             parameter="broken", value=broken)
    return kernel, broken


def _toolchain_args(target: str, broken: list[str], soc: str | None) -> tuple[list[str], str | None]:
    """(CMake's configure arguments for the target's compiler, the SoC built for): the twin's clang++,
    or the NPU toolchain (whose SoC replaces ``soc``); TargetUnavailable before anything runs."""
    config_args: list[str] = [f"-DCOMBINE_BROKEN_KERNELS={';'.join(broken)}"]
    if target == "cpu":
        cxx = twin_cxx()
        if cxx is None:
            raise TargetUnavailable(f"target=cpu: no clang++ found: the CPU twin compiles kernels with clang; "
                                    f"{TWIN_CXX_FIX}", parameter="target", value="cpu")
        config_args += [f"-DCMAKE_CXX_COMPILER={cxx}", f"-DPython3_EXECUTABLE={sys.executable}"]
    if target == "npu":
        tc = require_npu_toolchain(soc=soc)
        config_args = tc.cmake_args()
        soc = tc.soc
    return config_args, soc


def _kernel_args(kernel, main: str | None) -> list[str]:
    """CMake's arguments that build your kernel folder in place of the lab's (and its own main.cpp
    as ``main``, SHMEM's examples' utils on the include path where the folder has them)."""
    args = [f"-DCOMBINE_KERNEL_DIR={kernel.path}",
            f"-DCOMBINE_KERNEL_SOURCES={';'.join(str(p) for p in kernel.sources)}"]
    if main is not None:
        utils = kernel.path.parent.parent / "utils"  # SHMEM's examples/<group>/<example> -> examples/utils
        args += [f"-DCOMBINE_KERNEL_MAIN={main}", f"-DCOMBINE_KERNEL_INCLUDES={utils if utils.is_dir() else ''}"]
    return args


def _build_folder(build_dir: str | os.PathLike | None, target: str, soc: str | None, kernel,
                  main: str | None) -> Path:
    """The folder to build in: the one given, else a kernel folder's own, else the target's default
    (the NPU's per SoC): builds of different sources never share a folder."""
    if build_dir is not None:
        return Path(build_dir)
    if kernel is not None:
        return kernel_build_dir(kernel, target, soc, main is not None)
    return default_build_dir("npu", soc) if target == "npu" else default_build_dir(target)


def _last_build(stamp: Path, fp: str, made: list[Path], force: bool) -> tuple[bool, str | None]:
    """(up to date, the last build's config or None): whether the stamp vouches for every binary in
    ``made`` at fingerprint ``fp`` (never with ``force``); an unreadable stamp vouches for nothing."""
    old_config = None
    if stamp.is_file():
        try:
            data = json.loads(stamp.read_text())
            old_config = data.get("config", "")
            if not force and all(b.is_file() for b in made) and data.get("fingerprint") == fp:
                return True, old_config
        except (OSError, ValueError):
            pass
    return False, old_config


def _say_building(kernel, target: str, bdir: Path, log: Path) -> None:
    """One line on stderr when a person waits at a terminal: what is built, where and why."""
    if sys.stderr is not None and sys.stderr.isatty():
        what = f"{kernel.label} from {kernel.path} (unchanged)" if kernel is not None else "the " + target + \
            " driver"
        print(f"combine-lab: building {what} in {bdir} (first run or sources changed; about "
              f"30 s on 2 cores; log: {log})", file=sys.stderr, flush=True)


def _configure_and_compile(cmake: str, root: Path, bdir: Path, target: str, config_args: list[str],
                           old_config: str | None, program: str, log: Path) -> None:
    """CMake's configure (again on the twin, or for a new toolchain) and build steps, logged in
    ``log``; BuildError with the failing step's tail."""
    config = " ".join(config_args)
    if old_config is not None and old_config != config:
        # Another NPU toolchain (CANN, SHMEM, SoC): CMake cannot switch compilers in place.
        shutil.rmtree(bdir / "CMakeFiles", ignore_errors=True)
        (bdir / "CMakeCache.txt").unlink(missing_ok=True)
    # The twin's folder is configured again on every rebuild: cheap, and the broken kernels it
    # was configured with are then always the ones asked for (a cache from an earlier list
    # would build only that list's drivers).
    if not (bdir / "CMakeCache.txt").is_file() or target == "cpu":
        gen = ["-G", "Ninja"] if shutil.which("ninja") and not (bdir / "CMakeCache.txt").is_file() else []
        _logged([cmake, "-S", str(root), "-B", str(bdir), *gen, f"-DCOMBINE_TARGET={target}",
                 "-DCMAKE_BUILD_TYPE=Release", *config_args], root, log)
    # The probe with everything else, so the stamp never vouches for a stale driver.
    only = ["--target", "all", program] if program != BINARY_NAME else []
    _logged([cmake, "--build", str(bdir), "--parallel", str(os.cpu_count() or 2), *only], root, log)


def require_npu_toolchain(env: dict[str, str] | None = None, soc: str | None = None,
                          probes: "toolchain.Probes | None" = None) -> NpuToolchain:
    """The NPU toolchain from ``env`` (default ``os.environ``), or why there is none.

    Looks for CANN (``ASCEND_HOME_PATH`` / ``ASCEND_TOOLKIT_HOME``, with bisheng and a
    version), SHMEM (``SHMEM_HOME`` / ``SHMEM_HOME_PATH``) and the SoC (``soc``, else
    ``COMBINE_NPU_SOC``, else the visible NPUs through ``probes``). Runs no build tool.

    Raises:
        TargetUnavailable: one line per missing piece, each with how to provide it.
    """
    env = dict(os.environ) if env is None else env
    cann = toolchain.cann_info(env)
    shmem = toolchain.shmem_info(env)
    missing = []
    if not cann.ok:
        missing.append(f"CANN: {cann.problem}; {toolchain.CANN_FIX}")
    if not shmem.ok:
        missing.append(f"SHMEM: {shmem.problem}; {toolchain.SHMEM_FIX}")
    soc = soc or env.get("COMBINE_NPU_SOC")
    if not soc and not missing:
        probes = probes or toolchain.Probes()
        soc = toolchain.npu_info(env, probes, probes.torch_npu()).soc
    arch = toolchain.soc_arch(soc) if soc else None
    if not missing and arch is None:
        what = f"{soc} is not an A2/A3 (Ascend910B*, Ascend910_93*) or Ascend950 SoC" if soc else \
            "unknown (no NPU visible)"
        missing.append(f"SoC: {what}; {toolchain.SOC_FIX}")
    if missing:
        raise TargetUnavailable("target=npu: cannot build here:\n" + "\n".join(f"  missing {m}" for m in missing)
                                + "\nThe CPU twin (target=cpu) runs everywhere.", parameter="target", value="npu")
    return NpuToolchain(cann.bisheng, cann.home, cann.version, shmem.home, shmem.root, soc, arch[0],
                        cann.sdma and not toolchain.sdma_soc_problem(soc))
