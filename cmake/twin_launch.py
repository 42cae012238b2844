#!/usr/bin/env python3
"""The CPU twin's copy of a kernel source: every bisheng launch ``K<<<block_dim, l2ctrl, stream>>>(args)``
rewritten to ``::twin::kernel_launch(K, block_dim, l2ctrl, stream)(args)`` and nothing else changed.

    python3 cmake/twin_launch.py SOURCE COPY

bisheng compiles ``<<<...>>>`` itself; a host compiler cannot parse it. CMake runs this script on
every kernel source of a twin build (CMakeLists.txt ``combine_twin_kernel_copy``) and compiles the
copy, which starts with ``#include "twin_launch.h"`` (host/twin/include: the launch onto the twin's
core threads) and ``#line 1 "SOURCE"``, so that the compiler's diagnostics and the twin's messages
name the source's own lines. The launch configuration keeps its line breaks, so every line of
the copy is the source's line of the same number. The source is only read. Each rewrite is
printed (``twin launch: SOURCE:LINE: ...``), so the build log shows what was compiled.

Comments, string and character literals are left alone. The callee is the name before ``<<<``:
an identifier, optionally qualified (``ns::K``) and with template arguments (``K<T>``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def _code_mask(text: str) -> list[bool]:
    """True for every character of ``text`` that is code (not in a comment or a literal)."""
    mask = [True] * len(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator (1'000), not a literal
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            mask[k] = False
        i = j
    return mask


def _callee_start(text: str, end: int, mask: list[bool]) -> int:
    """Where the callee ending at ``end`` (exclusive, just before ``<<<``) starts, or -1."""
    i = end
    while True:
        while i > 0 and text[i - 1] in " \t":
            i -= 1
        if i > 0 and text[i - 1] == ">":  # template arguments: back to the matching '<'
            depth, j = 0, i - 1
            while j >= 0:
                if mask[j]:
                    if text[j] == ">":
                        depth += 1
                    elif text[j] == "<":
                        depth -= 1
                        if depth == 0:
                            break
                j -= 1
            if j < 0:
                return -1
            i = j
            while i > 0 and text[i - 1] in " \t":
                i -= 1
        m = _IDENT.search(text[max(0, i - 256):i])
        if not m:
            return -1
        i -= len(m.group(0))
        k = i
        while k > 0 and text[k - 1] in " \t":
            k -= 1
        if k >= 2 and text[k - 2:k] == "::":
            i = k - 2
            continue
        return i


def rewrite(text: str) -> tuple[str, list[tuple[int, str, str]]]:
    """``text`` with each ``K<<<cfg>>>`` as ``::twin::kernel_launch(K, cfg)``, and the rewrites as
    (line, old, new). Raises ValueError naming the line of a launch it cannot read."""
    mask = _code_mask(text)
    out, done, pos = [], [], 0
    for m in re.finditer(r"<<<", text):
        at = m.start()
        if at < pos or not mask[at]:
            continue
        line = text.count("\n", 0, at) + 1
        start = _callee_start(text, at, mask)
        if start < 0:
            raise ValueError(f"line {line}: '<<<' without a kernel name before it")
        depth, j = 0, at + 3
        while j < len(text):
            if mask[j]:
                ch = text[j]
                if ch in "([{":
                    depth += 1
                elif ch in ")]}":
                    depth -= 1
                elif depth == 0 and text.startswith(">>>", j):
                    break
            j += 1
        else:
            raise ValueError(f"line {line}: '<<<' without its '>>>'")
        callee = text[start:at].strip()
        config = text[at + 3:j]
        new = f"::twin::kernel_launch({callee}, {config.strip() if chr(10) not in config else config})"
        out.append(text[pos:start])
        out.append(new)
        done.append((line, text[start:j + 3], new))
        pos = j + 3
    out.append(text[pos:])
    return "".join(out), done


def twin_copy(source: str | Path, copy: str | Path, log=None) -> list[tuple[int, str, str]]:
    """Write the twin's copy of ``source`` to ``copy`` (see the module's docstring); returns the rewrites,
    each also printed to ``log`` (default stdout)."""
    log = sys.stdout if log is None else log
    source = Path(source).resolve()
    text = source.read_text()
    new, done = rewrite(text)
    copy = Path(copy)
    copy.parent.mkdir(parents=True, exist_ok=True)
    quoted = str(source).replace("\\", "\\\\").replace('"', '\\"')
    copy.write_text(f'#include "twin_launch.h"\n#line 1 "{quoted}"\n{new}')
    for line, old, rep in done:
        one = " ".join(old.split())
        print(f"twin launch: {source}:{line}: {one}  ->  {' '.join(rep.split())}", file=log)
    return done


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: twin_launch.py SOURCE COPY", file=sys.stderr)
        return 2
    try:
        twin_copy(argv[0], argv[1])
    except (OSError, ValueError) as e:
        print(f"twin launch: {argv[0]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
