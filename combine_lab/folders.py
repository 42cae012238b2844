"""Folders a run writes to: checked before anything runs, and owned by one run while it runs.

``combine-lab run --output-dir``, ``--work-dir``, ``combine-lab notebooks --out``,
``run_case(output_dir=..., work_dir=...)`` and a notebook's ``output_dir`` all go through
:func:`usable_folder`: the folder is created when missing and a file is written and removed in
it, so that a folder that cannot hold the run's files is refused with the folder and the reason
before a case is drawn, written or launched, not with a traceback after the run.

While a run writes to a folder it owns it (:func:`own_folders`): a lock file in the folder names
the run (pid, start time, command). A second run into a folder in use, or into a folder inside or
around one in use, is refused at once, naming the folder and the other run; a lock left by a run
that was killed (its process is gone) is recognised and taken over.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import json
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator

import psutil

from .errors import ParameterError, flag_of, python_name

__all__ = ["usable_folder", "own_folders", "os_reason", "LOCK_NAME", "KERNEL_FILE_SYSTEMS"]

#: The lock file a run keeps in each folder it writes to (:func:`own_folders`).
LOCK_NAME = ".combine-lab.lock"

#: File systems that are the kernel's interfaces, not storage: nothing of a run belongs there.
KERNEL_FILE_SYSTEMS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs",
                                 "tracefs", "configfs", "pstore", "bpf", "efivarfs", "mqueue", "binfmt_misc",
                                 "fusectl", "nsfs", "autofs", "rpc_pipefs"})


def os_reason(e: OSError) -> str:
    """What an OSError says, its errno named: ``ENOSPC (No space left on device)``; ``error (...)``
    when it carries no errno."""
    code = errno_mod.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else "error"
    return f"{code} ({e.strerror or e})"


def _mount_of(path: Path) -> tuple[str, str]:
    """(mount point, file system type) of the mount holding ``path`` (an existing, resolved path);
    ("", "") when the mount table cannot be read."""
    best = ("", "")
    try:
        parts = psutil.disk_partitions(all=True)
    except (OSError, RuntimeError):
        return best
    text = str(path)
    for part in parts:
        mp = part.mountpoint
        inside = text == mp or text.startswith(mp.rstrip("/") + "/")
        if inside and len(mp) >= len(best[0]):
            best = (mp, part.fstype)
    return best


def _kind(path: Path) -> str:
    """"folder", "file" (anything else that exists) or "missing", from one stat of ``path``."""
    try:
        return "folder" if stat.S_ISDIR(path.stat().st_mode) else "file"
    except (FileNotFoundError, NotADirectoryError):  # NotADirectoryError: a part of it is a file
        return "missing"


def usable_folder(path: str | os.PathLike, what: str, keep: bool = True) -> Path:
    """Make sure ``path`` is a folder this process can write files in: create it (and its parents)
    when missing, then write and remove a file in it. Returns the path (as given, ``~`` expanded).

    ``what``: how the caller names the folder in the message: a flag (``"--output-dir"``) or a
    parameter (``"output_dir"``). ``keep=False``: the folders the check created are removed again
    after it passed too, for a caller that checks its folders before its other parameters (a later
    refusal must leave nothing behind; the run creates them when it starts: :func:`own_folders`).

    Raises:
        ParameterError: the folder cannot be used, before anything runs; the message names
            ``what``, the folder and the reason, e.g.
            ``--output-dir /tmp/f/perf: under /tmp/f, which is a file, not a folder``,
            ``--work-dir /proc/x: under /proc, the kernel's proc file system, which holds no files;
            pick a folder on a disk``, ``--output-dir /tmp/f: is a file, not a folder``,
            ``--out /ro/lab: cannot create it: EROFS (Read-only file system)``,
            ``--out /data: cannot write in it: EACCES (Permission denied)``,
            ``--output-dir /mnt/full: cannot write in it: ENOSPC (No space left on device)``; a folder
            it created for the check is removed again.
    """
    folder = Path(path).expanduser()
    shown = f"{what} {path}"
    if _kind(folder) == "file":
        raise ParameterError(f"{shown}: is a file, not a folder", parameter=python_name(what), said_as=flag_of(what),
                             value=path)
    # the deepest part of the path that exists: a file there means the folder cannot be made (one stat
    # each: a folder another process removes meanwhile is missing, never taken for a file)
    existing = folder.absolute()
    while (kind := _kind(existing)) == "missing" and existing != existing.parent:
        existing = existing.parent
    if kind == "file":
        raise ParameterError(f"{shown}: under {existing}, which is a file, not a folder",
                             parameter=python_name(what), said_as=flag_of(what), value=path)
    mount, fstype = _mount_of(existing.resolve())
    if fstype in KERNEL_FILE_SYSTEMS:
        raise ParameterError(f"{shown}: under {mount}, the kernel's {fstype} file system, which holds no files; "
                             "pick a folder on a disk", parameter=python_name(what), said_as=flag_of(what), value=path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _remove_made(folder, existing)
        raise ParameterError(f"{shown}: cannot create it: {os_reason(e)}",
                             parameter=python_name(what), said_as=flag_of(what), value=path) from None
    try:  # a byte written: a full disk still creates an empty file, but refuses its first block
        with tempfile.TemporaryFile(dir=folder) as f:
            f.write(b"\0")
            f.flush()
    except OSError as e:
        _remove_made(folder, existing)
        raise ParameterError(f"{shown}: cannot write in it: {os_reason(e)}",
                             parameter=python_name(what), said_as=flag_of(what), value=path) from None
    if not keep:
        _remove_made(folder, existing)
    return folder


def _remove_made(folder: Path, existing: Path) -> None:
    """Remove the empty folders from ``folder`` up to ``existing`` (not included): what a refused
    check created, so that a refusal leaves nothing behind."""
    f = folder.absolute()
    while f != existing and f != f.parent:
        with contextlib.suppress(OSError):
            f.rmdir()
        f = f.parent


_held: dict[Path, int] = {}  # folders this process owns -> how many own_folders blocks hold each


def _holder(lock: Path) -> dict | None:
    """The run named in ``lock`` while its process lives (the pid and its start time match), else
    None: no lock, an unreadable one, or one left by a run that is gone."""
    try:
        who = json.loads(lock.read_text())
        proc = psutil.Process(int(who["pid"]))
        if abs(proc.create_time() - float(who["started"])) > 1.0 or proc.status() == psutil.STATUS_ZOMBIE:
            return None  # the pid was reused by another process, or the run is a corpse
        return who
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None


def _in_use(folder: Path, what: str) -> ParameterError | None:
    """The refusal of ``folder`` when a live run other than this process owns it or a folder
    around it, else None."""
    for f in (folder, *folder.parents):
        who = _holder(f / LOCK_NAME)
        if who is not None and int(who["pid"]) != os.getpid():
            since = time.strftime("%H:%M:%S", time.localtime(float(who["started"])))
            where = "" if f == folder else f" (it owns {f}, which holds this folder)"
            return ParameterError(f"{what} {folder}: in use by another run{where}: pid {who['pid']} since {since}: "
                                  f"{who.get('command', '?')}; wait for it to end, or choose another folder",
                                  parameter=python_name(what), said_as=flag_of(what), value=folder)
    return None


@contextlib.contextmanager
def own_folders(folders: Iterable[str | os.PathLike], what: str) -> Iterator[list[Path]]:
    """Own every folder of ``folders`` (created if missing) while the block runs: a lock file
    (:data:`LOCK_NAME`: this process's pid, start time and command) in each, removed when the
    block ends, however it ends (a Ctrl-C too). Nested blocks of one process share a lock.

    ``what``: how the message names the folders (``"--output-dir"``).

    Raises:
        ParameterError: a folder (or one around it, or one inside it that this run will write to
            and another run owns) is in use by another live run, or its lock cannot be written
            (naming the errno: a full disk); nothing is taken then. A lock
            whose run is gone (killed) is taken over.
    """
    paths = sorted({Path(f).expanduser().absolute() for f in folders})
    for p in paths:
        err = _in_use(p, what)
        if err is not None:
            raise err
    me = psutil.Process()
    command = " ".join(" ".join(me.cmdline() or sys.argv).split())  # one line, whatever the arguments hold
    command = command if len(command) <= 160 else command[:157] + "..."
    record = json.dumps({"pid": os.getpid(), "started": me.create_time(), "command": command})
    taken: list[Path] = []
    try:
        for p in paths:
            if _held.get(p):
                _held[p] += 1
                taken.append(p)
                continue
            p.mkdir(parents=True, exist_ok=True)
            tmp = p / f"{LOCK_NAME}.{os.getpid()}"
            try:
                tmp.write_text(record)
            except OSError as e:  # a disk full since usable_folder: no half-written lock left
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise ParameterError(f"{what} {p}: cannot write in it: {os_reason(e)}",
                                     parameter=python_name(what), said_as=flag_of(what), value=p) from None
            err = _in_use(p, what)  # a run that started meanwhile
            if err is not None:
                tmp.unlink()
                raise err
            os.replace(tmp, p / LOCK_NAME)  # replaces a dead run's lock
            _held[p] = 1
            taken.append(p)
        yield paths
    finally:
        for p in taken:
            _held[p] -= 1
            if not _held[p]:
                del _held[p]
                with contextlib.suppress(OSError):
                    if _holder(p / LOCK_NAME) is None or json.loads((p / LOCK_NAME).read_text())["pid"] == os.getpid():
                        (p / LOCK_NAME).unlink()
