"""The store of finished twin executables (combine_lab/run/store.py, docs/cli.md section 1), issue 30
item 6: a second checkout of the same sources (a fresh clone, a worktree, CI) rebuilt everything.
Now it copies the executables another checkout built, keyed by the sources' bytes, the configure
arguments and the compiler, and never by a folder. No compile here beyond the session's driver."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from combine_lab.run import build as build_mod
from combine_lab.run import store
from combine_lab.run.build import BINARY_NAME, TWIN_LIBRARY, build, source_root

ROOT = source_root()


class CompileCalled(Exception):
    """The fake compile step's: the build did not reuse the store."""


def _no_compile(*args, **kwargs):
    raise CompileCalled


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _checkout_copy(dest: Path) -> Path:
    """What a second checkout holds of the build's sources: CMakeLists.txt, kernels/, host/, cmake/."""
    dest.mkdir()
    shutil.copy(ROOT / "CMakeLists.txt", dest / "CMakeLists.txt")
    for d in ("kernels", "host", "cmake"):
        shutil.copytree(ROOT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture
def second_checkout(twin_binary, tmp_path, monkeypatch):
    """(store folder, the key, the copy's build folder): this session's driver published into a
    store of its own under tmp_path (its stamp is up to date and that store lacks it: a warm
    checkout seeds the store), then the environment of a second checkout of the same sources
    (COMBINE_LAB_SOURCE a copy, its own empty build folder), whose compile step raises."""
    where = tmp_path / "store"
    monkeypatch.setenv("COMBINE_LAB_STORE", str(where))
    assert build("cpu") == twin_binary
    (entry,) = store.entries(where)
    monkeypatch.setenv("COMBINE_LAB_SOURCE", str(_checkout_copy(tmp_path / "src")))
    monkeypatch.setenv("COMBINE_LAB_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setattr(build_mod, "_configure_and_compile", _no_compile)
    return where, entry.name, tmp_path / "build" / "cpu"


def test_a_second_checkout_copies_the_driver_from_the_store_without_cmake(second_checkout, twin_binary):
    where, key, bdir = second_checkout
    files = store.manifest(where, key)
    assert sorted(files) == [BINARY_NAME, TWIN_LIBRARY]
    assert files[BINARY_NAME] == {"size": twin_binary.stat().st_size, "sha256": _sha256(twin_binary)}
    binary = build("cpu")  # the compile step raises: cmake never runs
    assert binary == bdir / BINARY_NAME
    assert _sha256(binary) == files[BINARY_NAME]["sha256"] == _sha256(twin_binary)
    assert _sha256(bdir / TWIN_LIBRARY) == files[TWIN_LIBRARY]["sha256"]
    assert os.access(binary, os.X_OK)
    # a copy, not a link: a later incremental build in that folder must not write into the store
    assert binary.stat().st_nlink == 1 and binary.stat().st_ino != (where / key / BINARY_NAME).stat().st_ino
    assert (bdir / build_mod.BUILD_LOG).read_text() == f"reused from the store {where / key}\n"
    assert json.loads((bdir / "combine_lab_stamp.json").read_text())["store_key"] == key
    assert sorted(p.name for p in bdir.iterdir()) == sorted([".build.lock", build_mod.BUILD_LOG, BINARY_NAME,
                                                             "combine_lab_stamp.json", TWIN_LIBRARY])


def test_the_key_names_no_folder_and_the_driver_names_its_sources_relative_to_the_checkout(twin_binary, tmp_path,
                                                                                          monkeypatch):
    """The same key in the checkout and in its copy; the driver's bytes hold no checkout path, and
    name the kernel as kernels/combine_kernel.cpp (the twin's reports: relative to the checkout)."""
    args = build_mod._toolchain_args("cpu", [], None)[0]
    here = build_mod._store_slot(ROOT, "cpu", None, args, "").key()
    copy = _checkout_copy(tmp_path / "src")
    assert build_mod._store_slot(copy, "cpu", None, args, "").key() == here
    other_python = [a if not a.startswith("-DPython3_EXECUTABLE=") else "-DPython3_EXECUTABLE=/elsewhere/python3"
                    for a in args]
    assert build_mod._store_slot(copy, "cpu", None, other_python, "").key() == here
    data = twin_binary.read_bytes()
    assert str(ROOT).encode() not in data and b"kernels/combine_kernel.cpp\0" in data


def test_the_broken_drivers_name_their_copy_not_the_build_folder(broken_kernels):
    """A broken kernel's copy (<build folder>/broken_src/<name>/) is named kernels/broken/<name>/ in
    its driver: the same bytes whichever folder built it, and the twin's reports still say
    ub_reuse/combine_kernel.cpp:<line> (the last folder and the file)."""
    data = broken_kernels["ub_reuse"].read_bytes()
    assert str(broken_kernels["ub_reuse"].parent).encode() not in data and str(ROOT).encode() not in data
    assert b"kernels/broken/ub_reuse/combine_kernel.cpp\0" in data


def test_one_changed_byte_in_kernels_is_another_key_and_compiles(second_checkout):
    where, key, bdir = second_checkout
    header = Path(os.environ["COMBINE_LAB_SOURCE"]) / "kernels" / "combine_kernel.h"
    text = header.read_bytes()
    header.write_bytes(text + b" ")
    args = build_mod._toolchain_args("cpu", [], None)[0]
    assert build_mod._store_slot(header.parents[1], "cpu", None, args, "").key() != key
    with pytest.raises(CompileCalled):
        build("cpu")
    assert not (bdir / BINARY_NAME).exists()
    assert [e.name for e in store.entries(where)] == [key]


@pytest.mark.parametrize("tear", ["manifest missing", "size mismatch"])
def test_a_torn_entry_is_not_used(second_checkout, tear):
    where, key, bdir = second_checkout
    if tear == "manifest missing":
        (where / key / store.MANIFEST).unlink()
    else:
        with open(where / key / BINARY_NAME, "ab") as f:
            f.write(b"\0")
    assert store.manifest(where, key) is None and not store.has(where, key, [BINARY_NAME])
    assert store.fetch(where, key, [BINARY_NAME], bdir.parent) is None
    with pytest.raises(CompileCalled):
        build("cpu")
    assert not (bdir / BINARY_NAME).exists()


def test_bytes_other_than_the_manifest_says_are_not_used_and_the_entry_goes(tmp_path):
    where, key = tmp_path / "store", "a" * 64
    exe = tmp_path / "exe"
    exe.write_bytes(b"12345678")
    assert store.publish(where, key, [exe]) == where / key
    (where / key / "exe").write_bytes(b"12345670")  # same size, another byte
    (tmp_path / "out").mkdir()
    assert store.fetch(where, key, ["exe"], tmp_path / "out") is None
    assert list((tmp_path / "out").iterdir()) == [] and store.entries(where) == []


def test_store_off_never_reads_or_writes_the_store(second_checkout, tmp_path, monkeypatch):
    where, key, bdir = second_checkout
    monkeypatch.setenv("COMBINE_LAB_STORE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("fetch", "publish", "has", "manifest", "entries", "prune"):
        monkeypatch.setattr(store, name, _no_compile)
    assert store.store_root() is None
    with pytest.raises(CompileCalled):  # the compile step, not a store function: the build ran
        build("cpu")
    monkeypatch.setattr(build_mod, "_configure_and_compile", lambda *a: (bdir / BINARY_NAME).write_text("built"))
    assert build("cpu") == bdir / BINARY_NAME and build("cpu") == bdir / BINARY_NAME  # built, then up to date
    assert "store_key" not in json.loads((bdir / "combine_lab_stamp.json").read_text())
    assert not (tmp_path / "cache").exists() and sorted(e.name for e in os.scandir(where)) == [key, f"{key}.lock"]


def test_the_store_folder_is_the_users_cache_never_a_checkouts():
    home = Path.home() / ".cache" / "combine_lab" / "store"
    assert store.store_root({}) == home
    assert store.store_root({"COMBINE_LAB_BUILD_DIR": "/b"}) == home
    assert store.store_root({"XDG_CACHE_HOME": "/c"}) == Path("/c/combine_lab/store")
    assert store.store_root({"XDG_CACHE_HOME": "/c", "COMBINE_LAB_STORE": "/s"}) == Path("/s")
    assert store.store_root({"COMBINE_LAB_STORE": "off"}) is None


def _entry(where: Path, tmp_path: Path, n: int, mtime: float) -> str:
    """Publish a one-file entry whose key ends in ``n``; its folder's mtime set to ``mtime``."""
    exe = tmp_path / f"exe{n}"
    exe.write_bytes(bytes([n]) * 16)
    key = f"{n:064x}"
    store.publish(where, key, [exe], keep=100)
    os.utime(where / key, (mtime, mtime))
    return key


def test_prune_keeps_the_newest_entries_and_a_fetch_counts_as_use(tmp_path):
    where = tmp_path / "store"
    keys = [_entry(where, tmp_path, n, 1_000_000 + n) for n in range(6)]
    assert [e.name for e in store.entries(where)] == keys[::-1]
    (tmp_path / "out").mkdir()
    assert store.fetch(where, keys[0], ["exe0"], tmp_path / "out") == where / keys[0]  # the oldest, used now
    assert (tmp_path / "out" / "exe0").read_bytes() == bytes([0]) * 16
    assert store.prune(where, keep=3) == [where / keys[3], where / keys[2], where / keys[1]]
    kept = [keys[0], keys[5], keys[4]]
    assert [e.name for e in store.entries(where)] == kept
    assert sorted(p.name for p in where.iterdir()) == sorted(kept + [f"{k}.lock" for k in kept])


def test_a_publish_keeps_at_most_keep_entries(tmp_path):
    where = tmp_path / "store"
    keys = [_entry(where, tmp_path, n, 1_000_000 + n) for n in range(store.KEEP + 1)]
    newest = tmp_path / "new"
    newest.write_bytes(b"new")
    store.publish(where, "f" * 64, [newest])
    assert store.KEEP == 8
    assert [e.name for e in store.entries(where)] == ["f" * 64] + keys[::-1][:store.KEEP - 1]


def test_one_entry_holds_the_driver_and_the_probe(tmp_path):
    """The probe's build (the same sources) adds probe_host to the driver's entry, never replaces it."""
    where, key = tmp_path / "store", "b" * 64
    for name in ("combine_host", "probe_host"):
        (tmp_path / name).write_bytes(name.encode())
    store.publish(where, key, [tmp_path / "combine_host"])
    store.publish(where, key, [tmp_path / "probe_host"])
    assert store.manifest(where, key) == {n: {"size": len(n), "sha256": hashlib.sha256(n.encode()).hexdigest()}
                                          for n in ("combine_host", "probe_host")}
    assert sorted(p.name for p in where.iterdir()) == [key, f"{key}.lock"]  # no temporary folder left


def test_the_sources_fingerprint_is_hashed_again_only_when_a_source_changed(tmp_path, monkeypatch):
    """build._fingerprint: the sources' bytes hashed once per process while no source's path, mtime, size
    or inode changes (the second ask reads no file); an edit of the same size is seen by its mtime; a
    file written within the last 2 s is hashed every time (a second write could keep its mtime)."""
    root = tmp_path / "src"
    for rel, text in {"CMakeLists.txt": "project(x)\n", "kernels/k.cpp": "int k;\n", "host/h.h": "int h;\n",
                      "cmake/c.cmake": "# c\n", "host/notes.md": "not a source\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    old = 1_700_000_000_000_000_000
    for p in root.rglob("*"):
        os.utime(p, ns=(old, old))
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self.name) or real(self))
    want = hashlib.sha256(b"cpu")
    for rel in ("CMakeLists.txt", "kernels/k.cpp", "host/h.h", "cmake/c.cmake"):  # the order _fingerprint hashes
        want.update(rel.encode())
        want.update((root / rel).read_bytes())
    reads.clear()
    first = build_mod._fingerprint(root, "cpu")
    assert first == want.hexdigest() and sorted(reads) == ["CMakeLists.txt", "c.cmake", "h.h", "k.cpp"]
    reads.clear()
    assert build_mod._fingerprint(root, "cpu") == first and reads == []  # remembered: nothing read
    (root / "kernels/k.cpp").write_text("int q;\n")  # same size, a new mtime
    os.utime(root / "kernels/k.cpp", ns=(old + 10**9, old + 10**9))
    changed = build_mod._fingerprint(root, "cpu")
    assert changed != first and reads
    now = time.time_ns()
    (root / "host/h.h").write_text("int g;\n")
    os.utime(root / "host/h.h", ns=(now, now))
    racy = build_mod._fingerprint(root, "cpu")
    (root / "host/h.h").write_text("int f;\n")  # same size, the same mtime: only the bytes tell
    os.utime(root / "host/h.h", ns=(now, now))
    assert build_mod._fingerprint(root, "cpu") != racy != changed
