"""The self-test's broken kernels as overlays: ``kernels/broken/<name>.patch``, one unified diff
per broken kernel against the real kernel's files (``kernels/combine_kernel.cpp``,
``kernels/combine_kernel.h``), applied to a copy of ``kernels/`` in the build folder
(docs/hardware-rules.md#12-broken-kernels). The real kernel's text carries no switch of theirs,
so what the walkthrough shows is the kernel as it is.

    names()                                  # every broken kernel there is a patch for
    patched("ub_reuse")                      # {"combine_kernel.cpp": text, ...}: kernels/ with the patch applied
    write_sources(["ub_reuse"], folder)      # folder/ub_reuse/: that copy, for the build (build.py)

A patch is applied by its text, not its line numbers: each hunk's old lines (context and removed
lines) must be in the file, and where they are more than once the one nearest the hunk's line
number is taken, as ``patch`` does without fuzz. A hunk that no longer matches stops with
:class:`BrokenPatchError`, naming the patch and the hunk: the kernel changed there, and the patch
must be made again (``git apply`` / ``git diff`` from the checkout's root, the same files).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from ..errors import CombineLabError, ParameterError

#: Where the patches lie, under the source root.
BROKEN_FOLDER = Path("kernels") / "broken"
#: The files of ``kernels/`` each copy holds (the folder's own sources; its subfolders are not copied).
_COPIED = {".cpp", ".h"}
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class BrokenPatchError(CombineLabError, RuntimeError):
    """A broken kernel's patch does not apply to the kernel as it is now (or is not a unified diff);
    :func:`~combine_lab.run.build.build` raises it as its BuildError."""


def folder(root: str | os.PathLike | None = None) -> Path:
    """``<root>/kernels/broken``: the folder of the patches. ``root``: the source root; default
    ``COMBINE_LAB_SOURCE``, else the folder above the package, as
    :func:`~combine_lab.run.build.source_root` has it (build.py imports this module, so not from there)."""
    if root is None:
        root = os.environ.get("COMBINE_LAB_SOURCE") or Path(__file__).resolve().parents[2]
    return Path(root) / BROKEN_FOLDER


def names(root: str | os.PathLike | None = None) -> list[str]:
    """The broken kernels there is a patch for: the names of ``kernels/broken/*.patch``, sorted."""
    return sorted(p.stem for p in folder(root).glob("*.patch"))


def patch_file(name: str, root: str | os.PathLike | None = None) -> Path:
    """``kernels/broken/<name>.patch``.

    Raises:
        ParameterError: there is no such patch (``parameter="broken"``; the message lists the names).
    """
    path = folder(root) / f"{name}.patch"
    if not re.fullmatch(r"[a-z0-9_]+", name) or not path.is_file():
        raise ParameterError(f"broken={name!r}: no broken kernel of that name; one of {', '.join(names(root))} "
                             f"(the patches in {folder(root)})", parameter="broken", value=name)
    return path


def _hunks(text: str, where: Path) -> dict[str, list[tuple[str, int, list[str], list[str]]]]:
    """file (relative to kernels/) -> its hunks (header, old start, old lines, new lines), in order."""
    files: dict[str, list] = {}
    current = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("+++ "):
            path = ln[4:].split("\t")[0].strip()
            path = path[2:] if path.startswith("b/") else path
            if not path.startswith("kernels/") or "/" in path[len("kernels/"):]:
                raise BrokenPatchError(f"{where}: {path}: a broken kernel patches files of kernels/ only")
            current = files.setdefault(path[len("kernels/"):], [])
        elif (m := _HUNK.match(ln)) is not None:
            if current is None:
                raise BrokenPatchError(f"{where}: hunk {ln!r} before any +++ line")
            n_old = int(m[2]) if m[2] is not None else 1
            n_new = int(m[4]) if m[4] is not None else 1
            old, new = [], []
            i += 1
            while i < len(lines) and (len(old) < n_old or len(new) < n_new):
                body = lines[i]
                tag, rest = (body[:1], body[1:]) if body else (" ", "")
                if tag in " -":
                    old.append(rest)
                if tag in " +":
                    new.append(rest)
                if tag not in " -+\\":
                    raise BrokenPatchError(f"{where}: hunk {ln!r}: line {body!r} is not a diff line")
                i += 1
            current.append((ln, int(m[1]), old, new))
            continue
        i += 1
    if not files:
        raise BrokenPatchError(f"{where}: no +++ line: not a unified diff")
    return files


def apply(text: str, hunks: list[tuple[str, int, list[str], list[str]]], where: str) -> str:
    """``text`` with ``hunks`` (from one file's part of a patch) applied by content.

    Raises:
        BrokenPatchError: a hunk's old lines are not in ``text``; the message names ``where`` and the hunk.
    """
    lines = text.splitlines()
    offset = 0  # how far the earlier hunks moved the lines below them
    for header, start, old, new in hunks:
        want = start - 1 + offset
        at = [i for i in range(len(lines) - len(old) + 1) if lines[i:i + len(old)] == old]
        if not at:
            raise BrokenPatchError(f"{where}: hunk {header} no longer matches the kernel (its lines "
                                   f"{old[0]!r}... are not there): make the patch again against kernels/ "
                                   "(docs/hardware-rules.md#12-broken-kernels)")
        i = min(at, key=lambda a: abs(a - want))
        lines[i:i + len(old)] = new
        offset += len(new) - len(old)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def patched(name: str, root: str | os.PathLike | None = None) -> dict[str, str]:
    """The files of ``kernels/`` (its .cpp and .h, by name) with broken kernel ``name``'s patch
    applied; the real files are only read.

    Raises:
        ParameterError: no such broken kernel. BrokenPatchError: its patch does not apply.
    """
    patch = patch_file(name, root)
    kernels = patch.parent.parent
    files = {p.name: p.read_text() for p in sorted(kernels.iterdir()) if p.is_file() and p.suffix in _COPIED}
    for rel, hunks in _hunks(patch.read_text(), patch).items():
        if rel not in files:
            raise BrokenPatchError(f"{patch}: patches kernels/{rel}, which is not there")
        files[rel] = apply(files[rel], hunks, f"{patch} (kernels/{rel})")
    return files


def fingerprint(selected: list[str], root: str | os.PathLike | None = None) -> str:
    """A hash of the named patches' text (the build's stamp changes with them)."""
    h = hashlib.sha256()
    for name in selected:
        h.update(name.encode())
        h.update(patch_file(name, root).read_bytes())
    return h.hexdigest()


def write_sources(selected: list[str], dest: str | os.PathLike, root: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write each named broken kernel's copy of ``kernels/`` into ``dest/<name>/``; returns name ->
    that folder. A file whose text is already there is left alone, so its build is not redone.

    Raises:
        ParameterError: an unknown name. BrokenPatchError: a patch does not apply.
    """
    out = {}
    for name in selected:
        where = Path(dest) / name
        where.mkdir(parents=True, exist_ok=True)
        for fname, text in patched(name, root).items():
            target = where / fname
            if not target.is_file() or target.read_text() != text:
                target.write_text(text)
        out[name] = where
    return out
