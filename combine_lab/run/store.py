"""The store: finished twin executables, shared by every checkout and keyed by what they are built from.

A CMake build folder belongs to one checkout (build.py keeps one per checkout, so that an edit
rebuilds incrementally), so a second checkout of the same sources (a fresh clone, a worktree, CI)
would compile everything again. The store keeps the executables a build made, under a key that
hashes everything they are made of and nothing about where (:func:`entry_key`), and build.py copies
them into a new build folder instead of compiling (docs/cli.md section 1).

    root = store_root()                                  # None: COMBINE_LAB_STORE=off
    key = entry_key(fingerprint, cxx)                    # 64 hex
    fetch(root, key, ["combine_host"], build_folder)     # the entry, its files copied in; or None
    publish(root, key, [build_folder / "combine_host"])  # the entry written (whole or not at all)

Layout: ``<root>/<key>/`` holds the files and ``manifest.json`` (each file's name, size in bytes
and sha256), written last; ``<root>/<key>.lock`` is the entry's lock (flock). An entry is written
into a temporary folder beside it (``<root>/.tmp-<key>-<pid>-<hex>``) and renamed into place, so a
reader sees a whole entry or none; a folder without a manifest, or whose files' sizes differ from
it, is torn and never used (the next publish replaces it). Fetching copies each file (never a
hard link: a later incremental build in that folder must not write into the store) to a
temporary name beside its destination, checks its sha256 against the manifest while copying,
and renames it into place.

The store is bounded: after each publish the least recently used entries beyond :data:`KEEP`
are removed (fetching an entry touches its folder's mtime, so what is used stays). Every
failure to read or write the store (a full disk, a read-only cache) only costs the reuse: the
build goes on as without a store.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

#: The environment variable naming the store's folder; its value ``off`` disables the store.
STORE_ENV = "COMBINE_LAB_STORE"
#: How many entries the store keeps: the least recently used beyond these are removed on publish.
KEEP = 8
#: Each entry's list of its files, written last.
MANIFEST = "manifest.json"
#: Raise this when what goes into an entry changes, so that old entries are never matched.
_LAYOUT = "combine_lab store 1"
_KEY = re.compile(r"[0-9a-f]{64}")
#: A temporary folder older than this (seconds) is a publisher's that died: removed on prune.
_STALE_TMP_S = 3600.0


def store_root(env: dict[str, str] | None = None) -> Path | None:
    """The store's folder: ``$COMBINE_LAB_STORE`` if set (``off``: None, no store), else
    ``$XDG_CACHE_HOME/combine_lab/store`` (``~/.cache`` without XDG_CACHE_HOME).

    Never under ``COMBINE_LAB_BUILD_DIR``: that names one checkout's builds, the store serves every
    checkout. ``env``: default ``os.environ``. The folder is created when first written.
    """
    env = os.environ if env is None else env
    value = env.get(STORE_ENV, "")
    if value == "off":
        return None
    if value:
        return Path(value)
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "combine_lab" / "store"


@functools.lru_cache(maxsize=None)
def compiler_identity(cxx: str) -> str:
    """``cxx`` (a compiler's path) and the first line of its ``--version`` (cached per process:
    one run of the compiler per path); ``"<path>\\n?"`` when it does not answer within 30 s."""
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    first = out.splitlines()[0].strip() if out.strip() else "?"
    return f"{cxx}\n{first}"


def entry_key(fingerprint: str, cxx: str, env: dict[str, str] | None = None) -> str:
    """The key (64 hex) of the executables built from ``fingerprint`` by compiler ``cxx``.

    ``fingerprint``: the sources' hash as build.py's ``_fingerprint`` makes it (the target, the
    relative path and bytes of CMakeLists.txt and every source under kernels/, host/, cmake/) over
    the configure arguments and the broken kernels' patches, with no path of a checkout or a build
    folder in them (the executables name their sources relative to the checkout). Beside it: the
    compiler's path and version (:func:`compiler_identity`), and ``CXXFLAGS`` / ``LDFLAGS`` from
    ``env`` (default ``os.environ``), which CMake's first configure adds to every compile or link.
    """
    env = os.environ if env is None else env
    h = hashlib.sha256(_LAYOUT.encode())
    for part in (fingerprint, compiler_identity(cxx), env.get("CXXFLAGS", ""), env.get("LDFLAGS", "")):
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def _checked_key(key: str) -> str:
    """``key`` when it is 64 lowercase hex (what :func:`entry_key` makes), else ValueError: a key
    names a folder of the store, so nothing else may be one."""
    if not _KEY.fullmatch(key):
        raise ValueError(f"key={key!r}: not a store key (64 hex digits)")
    return key


@contextlib.contextmanager
def _locked(root: Path, key: str, blocking: bool = True):
    """Hold the flock of entry ``key`` (``<root>/<key>.lock``); yields False, holding nothing,
    when ``blocking`` is False and another process holds it."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def manifest(root: Path, key: str) -> dict[str, dict] | None:
    """Entry ``key``'s files: name -> {"size": bytes, "sha256": hex}; None when the entry is not
    whole (no entry, no readable manifest, a file missing or of another size than it says)."""
    entry = root / _checked_key(key)
    try:
        files = json.loads((entry / MANIFEST).read_text())["files"]
        for name, meta in files.items():
            if (entry / name).stat().st_size != meta["size"]:
                return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return files


def has(root: Path, key: str, names: list[str]) -> bool:
    """Whether entry ``key`` is whole and holds every file in ``names``."""
    files = manifest(root, key)
    return files is not None and all(n in files for n in names)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _copy_in(src: Path, dest: Path, sha256: str) -> bool:
    """Copy ``src`` to ``dest`` through a temporary name beside it, its mode kept and its mtime
    now; True when the bytes copied have ``sha256`` (else nothing is left at ``dest``'s name)."""
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.part")
    h = hashlib.sha256()
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            for chunk in iter(lambda: fin.read(1 << 20), b""):
                h.update(chunk)
                fout.write(chunk)
        if h.hexdigest() != sha256:
            tmp.unlink()
            return False
        shutil.copymode(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def fetch(root: Path, key: str, names: list[str], dest: str | os.PathLike) -> Path | None:
    """Copy the files ``names`` of entry ``key`` into folder ``dest``; returns the entry's folder,
    or None (nothing of it used) when the entry is missing, torn or lacks a name, or when a file's
    bytes differ from its manifest's sha256 (the entry is then removed). Touches the entry (its
    mtime: recently used).

    A file copied before a later one fails stays in ``dest``: each is whole (renamed into place)
    and the caller, finding None, builds them all anyway. An OSError reading the store is None too.
    """
    entry = root / _checked_key(key)
    if not entry.is_dir():  # the common miss, without creating a lock file
        return None
    try:
        with _locked(root, key):
            files = manifest(root, key)
            if files is None or not all(n in files for n in names):
                return None
            for name in names:
                if not _copy_in(entry / name, Path(dest) / name, files[name]["sha256"]):
                    _remove(entry)  # its bytes changed since: no later fetch may try it, a publish rewrites it
                    return None
            os.utime(entry)
    except OSError:
        return None
    return entry


def publish(root: Path, key: str, paths: list[Path], replace: bool = False, keep: int = KEEP) -> Path | None:
    """Store the files ``paths`` as entry ``key`` (each under its own name); returns the entry.

    An entry already whole with every name is kept as it is (``replace``: written again anyway,
    for a forced rebuild); a whole entry's other files are carried into the new one (one entry
    holds the driver and, once a build asked for it, the probe's driver: the same sources); a
    torn one is replaced. Written into a temporary folder beside the entry, the manifest last,
    then renamed into place under the entry's lock, so no reader sees part of one. Afterwards
    :func:`prune` keeps the ``keep`` most recently used entries. Returns None, storing nothing,
    when the store cannot be written (OSError: a full disk, a read-only folder): the build has
    its files anyway.
    """
    entry = root / _checked_key(key)
    paths = [Path(p) for p in paths]
    names = [p.name for p in paths]
    try:
        with _locked(root, key):
            if not replace and has(root, key, names):
                os.utime(entry)
                return entry
            old = manifest(root, key) or {}
            tmp = root / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                tmp.mkdir()
                files = {}
                for name in sorted(set(old) - set(names)):
                    if _copy_in(entry / name, tmp / name, old[name]["sha256"]):
                        files[name] = old[name]
                for p in paths:
                    shutil.copyfile(p, tmp / p.name)
                    shutil.copymode(p, tmp / p.name)
                    files[p.name] = {"size": (tmp / p.name).stat().st_size, "sha256": _sha256(tmp / p.name)}
                (tmp / MANIFEST).write_text(json.dumps({"key": key, "files": files}, indent=1) + "\n")
                _remove(entry)  # a torn entry, or the one replaced
                os.rename(tmp, entry)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        return None
    prune(root, keep)
    return entry


def _remove(entry: Path) -> None:
    """Remove an entry's folder, first renamed aside so that no reader finds half of it."""
    if entry.exists():
        gone = entry.with_name(f".tmp-gone-{entry.name}-{uuid.uuid4().hex[:8]}")
        os.rename(entry, gone)
        shutil.rmtree(gone, ignore_errors=True)


def entries(root: Path) -> list[Path]:
    """The store's entry folders (whole or torn), the most recently used first (by mtime)."""
    try:
        found = [p for p in root.iterdir() if _KEY.fullmatch(p.name) and p.is_dir()]
    except OSError:
        return []
    stamped = []
    for p in found:
        with contextlib.suppress(OSError):
            stamped.append((p.stat().st_mtime, p.name, p))
    return [p for _, _, p in sorted(stamped, reverse=True)]


def prune(root: Path, keep: int = KEEP) -> list[Path]:
    """Remove every entry beyond the ``keep`` most recently used, with its lock file, and the
    temporary folders of publishers that died over an hour ago; returns the entries removed.

    An entry in use (its lock held: being fetched or written) is left for a later prune.
    """
    removed = []
    for entry in entries(root)[keep:]:
        with contextlib.suppress(OSError), _locked(root, entry.name, blocking=False) as held:
            if held:
                _remove(entry)
                # Unlinked while held: a process waiting on the old lock file then finds no entry
                # and writes a new one, which the rename into place keeps whole.
                (root / f"{entry.name}.lock").unlink(missing_ok=True)
                removed.append(entry)
    with contextlib.suppress(OSError):
        for tmp in root.glob(".tmp-*"):
            if time.time() - tmp.stat().st_mtime > _STALE_TMP_S:
                shutil.rmtree(tmp, ignore_errors=True)
    return removed
