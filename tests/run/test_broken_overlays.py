"""The self-test's broken kernels as overlays (combine_lab/run/broken.py, docs/hardware-rules.md#12-broken-kernels):
one patch per broken kernel under kernels/broken/, applied by content to a copy of kernels/, the
real kernel's files free of them. No build here: the builds are tests/twin's."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from combine_lab.errors import ParameterError
from combine_lab.run import broken
from combine_lab.run.build import build, source_root
from combine_lab.run.selftest import BROKEN_KERNELS

ROOT = source_root()
REAL = {f: (ROOT / "kernels" / f).read_text() for f in ("combine_kernel.cpp", "combine_kernel.h", "combine_platform.h")}


def test_every_broken_kernel_has_a_patch_and_every_patch_a_broken_kernel():
    assert broken.names() == sorted(BROKEN_KERNELS) and len(BROKEN_KERNELS) == 24
    assert sorted(p.name for p in (ROOT / "kernels" / "broken").iterdir()) == [f"{n}.patch" for n in sorted(BROKEN_KERNELS)]


def test_the_real_kernel_carries_no_switch_of_theirs():
    assert not (ROOT / "kernels" / "combine_faults.h").exists()
    for f, text in REAL.items():
        assert "fault::" not in text and "COMBINE_FAULT" not in text and "BROKEN" not in text, f


@pytest.mark.parametrize("name", sorted(BROKEN_KERNELS))
def test_each_patch_applies_as_git_would_and_changes_the_kernel(name, tmp_path):
    files = broken.patched(name)
    changed = sorted(f for f in REAL if files[f] != REAL[f])
    assert changed == (["combine_kernel.h"] if name in ("shared_cache_line", "blocks_over_aiv") else
                       ["combine_kernel.cpp", "combine_kernel.h"] if name == "sdma_from_core_48" else
                       ["combine_kernel.cpp"])
    if shutil.which("git"):  # the same text as `git apply` makes of it
        shutil.copytree(ROOT / "kernels", tmp_path / "kernels", ignore=shutil.ignore_patterns("broken"))
        subprocess.run(["git", "apply", str(broken.patch_file(name))], cwd=tmp_path, check=True, capture_output=True)
        assert all((tmp_path / "kernels" / f).read_text() == files[f] for f in REAL)


def test_what_three_patches_change():
    cpp = broken.patched("ub_reuse")["combine_kernel.cpp"]
    assert "        next_stage_ = 0;  // BROKEN: one staging buffer\n" in cpp and "StageInFlight(buf);\n    }" not in cpp
    h = broken.patched("shared_cache_line")["combine_kernel.h"]
    assert "constexpr uint32_t kStatusStride = kStatusFlagBytes;  // BROKEN: 32 B apart" in h
    proc = broken.patched("device_barrier")["combine_kernel.cpp"]
    assert proc.count("aclshmemi_barrier_core_soft();") == REAL["combine_kernel.cpp"].count("aclshmemi_barrier_core_soft();") - 1
    assert "aclshmem_barrier_all();  // BROKEN" in proc


def _copy_root(tmp_path, edit=None):
    """A source root with kernels/ (and its patches) copied, ``edit`` applied to its combine_kernel.cpp."""
    shutil.copytree(ROOT / "kernels", tmp_path / "kernels")
    if edit is not None:
        k = tmp_path / "kernels" / "combine_kernel.cpp"
        k.write_text(edit(k.read_text()))
    return tmp_path


def test_a_patch_applies_by_content_where_the_kernel_moved(tmp_path):
    root = _copy_root(tmp_path, lambda t: t.replace("namespace combine {\n", "namespace combine {\n// one\n// two\n", 1))
    moved = broken.patched("no_pipe_v_barrier", root)["combine_kernel.cpp"]
    assert moved == broken.patched("no_pipe_v_barrier")["combine_kernel.cpp"].replace(
        "namespace combine {\n", "namespace combine {\n// one\n// two\n", 1)


def test_a_patch_whose_lines_changed_is_refused_naming_it_and_its_hunk(tmp_path):
    root = _copy_root(tmp_path, lambda t: t.replace("AscendC::PipeBarrier<PIPE_V>();  // Add reads what Muls wrote",
                                                    "AscendC::PipeBarrier<PIPE_V>();  // Add reads what Muls wrote it"))
    with pytest.raises(broken.BrokenPatchError) as e:
        broken.patched("no_pipe_v_barrier", root)
    patch = root / "kernels" / "broken" / "no_pipe_v_barrier.patch"
    header = next(ln for ln in patch.read_text().splitlines() if ln.startswith("@@"))
    assert str(e.value).startswith(f"{patch} (kernels/combine_kernel.cpp): hunk {header} no longer matches the kernel")
    assert "docs/hardware-rules.md#12-broken-kernels" in str(e.value)


def test_an_unknown_broken_kernel_is_refused_naming_the_ones_there_are():
    with pytest.raises(ParameterError) as e:
        broken.patched("no_such_bug")
    assert e.value.parameter == "broken" and e.value.value == "no_such_bug"
    assert "broken='no_such_bug': no broken kernel of that name; one of blocks_over_aiv, datacopy_unaligned," in str(e.value)
    with pytest.raises(ParameterError) as e:
        build("npu", broken=["ub_reuse"])
    assert e.value.parameter == "broken" and "run on the twin only, not target='npu'" in str(e.value)


def test_sources_are_written_once_so_an_unchanged_copy_is_not_rebuilt(tmp_path):
    out = broken.write_sources(["ub_reuse", "ub_overlap"], tmp_path)
    assert out == {"ub_reuse": tmp_path / "ub_reuse", "ub_overlap": tmp_path / "ub_overlap"}
    assert sorted(p.name for p in out["ub_reuse"].iterdir()) == sorted(
        p.name for p in (ROOT / "kernels").iterdir() if p.suffix in (".cpp", ".h"))
    k = out["ub_reuse"] / "combine_kernel.cpp"
    assert k.read_text() == broken.patched("ub_reuse")["combine_kernel.cpp"]
    stamp = k.stat().st_mtime_ns
    broken.write_sources(["ub_reuse"], tmp_path)
    assert k.stat().st_mtime_ns == stamp


def test_the_build_stops_on_a_stale_patch_before_compiling_anything(tmp_path, monkeypatch):
    """build(broken=...) applies the patches before it configures: a stale one is a BuildError naming it."""
    from combine_lab.run.build import BuildError, twin_cxx
    if twin_cxx() is None or shutil.which("cmake") is None:
        pytest.skip("the twin's build needs clang++ and cmake")
    root = _copy_root(tmp_path / "src", lambda t: t.replace("AscendC::PipeBarrier<PIPE_V>();  // Add reads what Muls wrote",
                                                            "AscendC::PipeBarrier<PIPE_V>();  // Add reads Muls' output"))
    shutil.copy(ROOT / "CMakeLists.txt", root / "CMakeLists.txt")
    monkeypatch.setenv("COMBINE_LAB_SOURCE", str(root))
    with pytest.raises(BuildError, match=r"no_pipe_v_barrier\.patch \(kernels/combine_kernel\.cpp\): hunk @@ .* no longer "
                                         "matches the kernel"):
        build("cpu", build_dir=tmp_path / "build", broken=["no_pipe_v_barrier"])
    assert not (tmp_path / "build" / "CMakeCache.txt").exists()  # nothing configured
