"""Files appear whole or not at all: a write goes to a temporary name beside the file, is synced and
renamed; a failed write (a full disk) leaves the old file as it was, no temporary file, and an
error naming the file, the bytes and the errno."""

from __future__ import annotations

import errno
import os

import pytest

from combine_lab.errors import ResultFileError
from combine_lab.formats import files
from combine_lab.formats.files import atomic_write, write_atomic


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")
    assert write_atomic(path, "new text") == path
    assert path.read_text() == "new text" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_full_disk_leaves_the_old_file_and_names_file_bytes_and_errno(tmp_path, monkeypatch):
    path = tmp_path / "combine_perf_rank0.csv"
    path.write_text("old rows\n")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(ResultFileError) as e:
        write_atomic(path, b"x" * 1000)
    assert str(e.value) == f"{path}: cannot write 1000 bytes: ENOSPC (No space left on device)"
    assert path.read_text() == "old rows\n" and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_an_interrupt_while_writing_leaves_nothing_half_written(tmp_path):
    path = tmp_path / "big.bin"
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(path) as f:
            f.write(b"half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(ResultFileError) as e:
        write_atomic(tmp_path / "gone" / "x.txt", "abc")
    assert str(e.value) == f"{tmp_path / 'gone' / 'x.txt'}: cannot write 3 bytes: ENOENT (No such file or directory)"


def test_results_are_synced_and_case_files_only_renamed(tmp_path, monkeypatch):
    """A result (here a sidecar-like JSON) is fsynced before its rename; a case's files are not (they
    are remade from the spec and seed: the rename keeps them whole, a power loss costs a rerun), so a
    case of 2 PEs writes its 13 files (meta.json, 6 per rank) with no fsync."""
    from combine_lab.case.case import make_case
    from combine_lab.case.spec import CaseSpec
    from combine_lab.formats.casefiles import write_case

    synced = []
    real = files.os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    write_atomic(tmp_path / "result.json", "{}")
    assert len(synced) == 1
    case_dir = write_case(make_case(CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2)), tmp_path / "cases")
    assert len(synced) == 1
    assert sum(1 for p in case_dir.rglob("*") if p.is_file()) == 13
