"""Files that appear whole or not at all, and what a failed write says.

Every file the lab writes (perf CSVs, sidecars, summaries, figures, reports, sweep CSVs, case
files, executed notebooks) goes through :func:`atomic_write` or :func:`write_atomic`: the bytes go
to a temporary name in the same folder (``.<name>.part-<pid>``), are flushed to the disk
(``fsync``) and only then renamed over the file's name, so a reader sees the old file or the new
one, never half of one, and a run killed or out of disk space in the middle leaves no truncated
file. A write that fails (``ENOSPC``, ``EROFS``, ``EACCES``, ...) removes its temporary file and
raises :class:`~combine_lab.errors.ResultFileError` naming the file, the bytes and the errno.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Iterator

from ..errors import ResultFileError
from ..folders import os_reason

__all__ = ["atomic_write", "write_atomic", "write_failed", "PART_MARK", "STAGING_PREFIX"]

#: What a temporary name carries: ``.<name>.part-<pid>`` (a crashed run's are never a result).
PART_MARK = ".part-"
#: A run's staging folder in an output folder: ``.staging-<pid>`` (combine_lab.formats.perf_csv.staged_outputs).
STAGING_PREFIX = ".staging-"


def write_failed(path: str | os.PathLike, nbytes: int | None, e: OSError) -> ResultFileError:
    """The error of a write of ``nbytes`` (None: unknown) to ``path`` that failed with ``e``:
    ``<path>: cannot write 1048576 bytes: ENOSPC (No space left on device)``."""
    size = f"{nbytes} bytes" if nbytes is not None else "it"
    path = Path(path)
    if path.parent.name.startswith(STAGING_PREFIX):  # name the file the run was writing, not its staging copy
        path = path.parent.parent / path.name
    return ResultFileError(f"{path}: cannot write {size}: {os_reason(e)}", parameter="path", value=path)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", size: Callable[[], int] | None = None,
                 sync: bool = True) -> Iterator:
    """Open a temporary file beside ``path`` for writing (``mode``: ``"wb"`` or ``"w"``, UTF-8, no
    newline translation); when the block ends without error it is flushed, fsynced and renamed
    over ``path``; on any error (an exception, Ctrl-C) it is removed and ``path`` is untouched.
    ``size``: the bytes being written, for the message of a failed write. ``sync=False`` skips the
    fsync: the rename alone keeps the file whole to every reader and through a killed process; the
    fsync adds only that a power loss cannot leave it empty, which inputs remade from their seed
    (case files) do not need and which costs a run of many small files most of its writing time.

    Raises:
        ResultFileError: an OSError while writing, syncing or renaming (the folder missing,
            full or read-only), naming the file, the bytes and the errno.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}{PART_MARK}{os.getpid()}")
    f = None
    try:
        f = open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""}))
        yield f
        f.flush()
        if sync:
            os.fsync(f.fileno())
        f.close()
        f = None
        os.replace(tmp, path)
    except OSError as e:
        raise write_failed(path, size() if size else None, e) from None
    finally:
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
        with contextlib.suppress(OSError):
            tmp.unlink()  # gone already when it was renamed


def write_atomic(path: str | os.PathLike, data: bytes | str, sync: bool = True) -> Path:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` whole or not at all (:func:`atomic_write`,
    ``sync`` as there); returns the path. Raises ResultFileError naming the file, the bytes and the errno."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_write(path, "wb", size=lambda: len(raw), sync=sync) as f:
        f.write(raw)
    return Path(path)
