"""The twin's copy of a kernel source (cmake/twin_launch.py): every bisheng launch
`K<<<block_dim, l2ctrl, stream>>>(args)` rewritten onto the twin's launch and nothing else, line
for line, so that the compiler and the twin name the source's own lines."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("twin_launch", ROOT / "cmake" / "twin_launch.py")
twin_launch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(twin_launch)

SOURCE = '''// K<<<1, nullptr, s>>>(x) in a comment stays
const char* say = "x<<<y>>>";  /* and <<<in here>>> too */
template <typename T> void K(int a, T b);
void go(unsigned n, void* st, int v) {
    K<int><<<n, nullptr,
             st>>>(1, 2);
    ns::Other<<<static_cast<unsigned>(n), nullptr, st>>>(v, 1'000);
}
'''


def test_only_the_launch_lines_change_and_every_line_keeps_its_number():
    new, done = twin_launch.rewrite(SOURCE)
    assert [(line, old) for line, old, _ in done] == [(5, "K<int><<<n, nullptr,\n             st>>>"),
                                                      (7, "ns::Other<<<static_cast<unsigned>(n), nullptr, st>>>")]
    assert new.count("\n") == SOURCE.count("\n")
    got, want = new.splitlines(), SOURCE.splitlines()
    assert got[4] == "    ::twin::kernel_launch(K<int>, n, nullptr,"
    assert got[5] == "             st)(1, 2);"
    assert got[6] == "    ::twin::kernel_launch(ns::Other, static_cast<unsigned>(n), nullptr, st)(v, 1'000);"
    assert [g for i, g in enumerate(got) if i not in (4, 5, 6)] == [w for i, w in enumerate(want) if i not in (4, 5, 6)]


def test_the_copy_names_the_source_and_the_source_is_only_read(tmp_path, capsys):
    src = tmp_path / "k.cpp"
    src.write_text(SOURCE)
    before = src.stat().st_mtime_ns, src.read_bytes()
    twin_launch.twin_copy(src, tmp_path / "out" / "k.cpp")
    copy = (tmp_path / "out" / "k.cpp").read_text().splitlines()
    assert copy[:2] == ['#include "twin_launch.h"', f'#line 1 "{src}"']
    assert (src.stat().st_mtime_ns, src.read_bytes()) == before
    log = capsys.readouterr().out.splitlines()
    assert log[0] == f"twin launch: {src}:5: K<int><<<n, nullptr, st>>>  ->  ::twin::kernel_launch(K<int>, n, nullptr, st)"


@pytest.mark.parametrize("text, said", [("x = <<<1, 2, 3>>>(y);", "line 1: '<<<' without a kernel name before it"),
                                        ("\nK<<<1, nullptr, s(y);", "line 2: '<<<' without its '>>>'")])
def test_a_launch_it_cannot_read_is_refused_with_its_line(text, said):
    with pytest.raises(ValueError, match=said):
        twin_launch.rewrite(text)
