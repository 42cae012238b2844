"""Folders a run writes to, checked before anything runs: output, work and notebook folders.

``combine-lab run --output-dir``, ``--work-dir``, ``combine-lab notebooks --out``,
``run_case(output_dir=..., work_dir=...)`` and a notebook's ``output_dir`` all go through
:func:`usable_folder`: the folder is created when missing and a file is written and removed in
it, so that a folder that cannot hold the run's files is refused with the folder and the reason
before a case is drawn, written or launched, not with a traceback after the run.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psutil

from .errors import ParameterError

__all__ = ["usable_folder", "KERNEL_FILE_SYSTEMS"]

#: File systems that are the kernel's interfaces, not storage: nothing of a run belongs there.
KERNEL_FILE_SYSTEMS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs",
                                 "tracefs", "configfs", "pstore", "bpf", "efivarfs", "mqueue", "binfmt_misc",
                                 "fusectl", "nsfs", "autofs", "rpc_pipefs"})


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


def usable_folder(path: str | os.PathLike, what: str) -> Path:
    """Make sure ``path`` is a folder this process can write files in: create it (and its parents)
    when missing, then write and remove a file in it. Returns the path (as given, ``~`` expanded).

    ``what``: how the caller names the folder in the message: a flag (``"--output-dir"``) or a
    parameter (``"output_dir"``).

    Raises:
        ParameterError: the folder cannot be used, before anything runs; the message names
            ``what``, the folder and the reason, e.g.
            ``--output-dir /tmp/f/perf: under /tmp/f, which is a file, not a folder``,
            ``--work-dir /proc/x: under /proc, the kernel's proc file system, which holds no files;
            pick a folder on a disk``, ``--output-dir /tmp/f: is a file, not a folder``,
            ``--out /ro/lab: cannot create it (Read-only file system)``,
            ``--out /data: cannot write in it (Permission denied)``.
    """
    folder = Path(path).expanduser()
    shown = f"{what} {path}"
    if folder.exists() and not folder.is_dir():
        raise ParameterError(f"{shown}: is a file, not a folder")
    # the deepest part of the path that exists: a file there means the folder cannot be made
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ParameterError(f"{shown}: under {existing}, which is a file, not a folder")
    mount, fstype = _mount_of(existing.resolve())
    if fstype in KERNEL_FILE_SYSTEMS:
        raise ParameterError(f"{shown}: under {mount}, the kernel's {fstype} file system, which holds no files; "
                             "pick a folder on a disk")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ParameterError(f"{shown}: cannot create it ({e.strerror or e})") from None
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ParameterError(f"{shown}: cannot write in it ({e.strerror or e})") from None
    return folder
