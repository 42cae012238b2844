"""The NPU build without hardware: CMake configures cmake/npu.cmake against a fake toolchain
(the generated compile and link commands carry bisheng, the arch flag of the SoC, CANN and
SHMEM include and library paths), and build(target='npu') refuses, before running anything,
with a message naming what is missing and how to provide it; it caches one folder per SoC."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from combine_lab.run import build as build_mod
from combine_lab.run.build import TargetUnavailable, build, require_npu_toolchain, source_root
from combine_lab.run.toolchain import CANN_FIX, SHMEM_FIX, SOC_FIX

from npu_fakes import make_cann, make_shmem, npu_env

HOST_SOURCES = ["combine_host.cpp", "host_args.cpp", "case_io.cpp", "perf_csv.cpp"]


def configure(env: dict[str, str], bdir: Path, soc: str | None = None, extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """Configure the NPU target as build() would; return (compile command by file name, link
    block by output: 'libcombine_kernel.so' and 'combine_host', each {'rule', 'inputs', VAR: value})."""
    tc = require_npu_toolchain(env, soc=soc)
    cmd = [shutil.which("cmake"), "-S", str(source_root()), "-B", str(bdir), "-G", "Ninja", "-DCOMBINE_TARGET=npu",
           "-DCMAKE_BUILD_TYPE=Release", *tc.cmake_args(), *extra]
    proc = subprocess.run(cmd, env={**os.environ, **env, "PATH": os.environ["PATH"]}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    compiles = {Path(e["file"]).name: e["command"] for e in json.loads((bdir / "compile_commands.json").read_text())}
    lines = (bdir / "build.ninja").read_text().splitlines()
    links = {}
    for out in ("libcombine_kernel.so", "combine_host"):
        start = next(i for i, ln in enumerate(lines) if ln.startswith(f"build {out}:"))
        rule, _, inputs = lines[start].partition(": ")[2].partition(" ")
        block = {"rule": rule, "inputs": inputs}
        for ln in lines[start + 1:]:
            if not ln.strip():
                break
            k, _, v = ln.strip().partition(" = ")
            block[k] = v
        links[out] = block
    return compiles, links


#: SHMEM's link set for every target, in its order (SHMEM CMakeLists.txt link_libraries).
SHMEM_LINK_SET = ["-lruntime", "-lstdc++", "-lascendcl", "-lm", "-ltiling_api", "-lplatform", "-lc_sec", "-ldl",
                  "-lnnopbase", "-lpthread"]


OLD_BISHENG_KERNEL_FLAGS = ["-mllvm -cce-aicore-stack-size=0x8000", "-mllvm -cce-aicore-addr-transform"]


_SOCS = [("Ascend910B3", "dav-c220", "dav-2201", True), ("Ascend950PR", "dav-c310", "dav-3510", False)]
_BISHENGS = [(None, "cce"), ("2026-03-26", "cce"), ("2026-03-27", "asc"), ("2026-08-01", "asc")]


# every SoC with every bisheng in .ci/run; the quick suite keeps each SoC once and each side of the flags' change
@pytest.mark.parametrize("soc, arch, npu_arch, ffts, bisheng_date, flags", [
    pytest.param(*soc, *b, marks=() if (soc[0], b[0]) in {("Ascend910B3", "2026-03-26"), ("Ascend910B3", "2026-03-27"),
                                                          ("Ascend950PR", None)} else pytest.mark.slow)
    for b in _BISHENGS for soc in _SOCS])
def test_configure_generates_bisheng_commands_with_arch_includes_and_libraries(tmp_path, soc, arch, npu_arch, ffts,
                                                                               bisheng_date, flags):
    env = npu_env(tmp_path, bisheng_date=bisheng_date)
    cann, shmem_root = tmp_path / "cann", tmp_path / "shmem" / "shmem"
    compiles, link = configure(env, tmp_path / "b", soc=soc)
    bisheng = str(cann / "compiler" / "ccec_compiler" / "bin" / "bisheng")
    # the probe's kernel and driver (cmake/probe.cmake, built only when asked) compile as the combine's do
    assert sorted(compiles) == sorted(["combine_kernel.cpp", "probe_kernel.cpp", "probe_host.cpp", *HOST_SOURCES])
    norm = lambda cmd, name: [a for a in shlex.split(cmd) if name not in a]  # noqa: E731
    assert norm(compiles["probe_kernel.cpp"], "probe_kernel") == norm(compiles["combine_kernel.cpp"], "combine_kernel")
    assert norm(compiles["probe_host.cpp"], "probe_host") == norm(compiles["combine_host.cpp"], "combine_host")

    kernel = shlex.split(compiles["combine_kernel.cpp"])
    joined = " ".join(kernel)
    assert kernel[0] == bisheng
    assert kernel[-1] == str(source_root() / "kernels" / "combine_kernel.cpp")  # the twin's kernel source
    # Ascend950 has no SDMA put in SHMEM (toolchain.sdma_soc_problem): built MTE-only
    for flag in ("-DCOMBINE_TARGET_NPU=1", f"-DCOMBINE_NPU_SDMA={0 if '950' in soc else 1}", f"-I{shmem_root}/include",
                 f"-I{shmem_root}/src/device", f"-I{shmem_root}/src", f"-I{cann}/include",
                 f"-I{cann}/compiler/tikcpp/tikcfw", f"-I{source_root()}/kernels", f"-I{source_root()}/host"):
        assert flag in kernel, flag
    if flags == "asc":  # bisheng dated 2026-03-27 or later, as SHMEM's own build decides
        assert "-xasc" in kernel and f"--npu-arch={npu_arch}" in kernel
        assert "--cce-auto-infer-kernel-type=false" in kernel
        assert ("--cce-auto-set-ffts=false" in kernel) == ffts
        assert "-xcce" not in kernel and not any(f in joined for f in OLD_BISHENG_KERNEL_FLAGS)
        assert link["libcombine_kernel.so"]["LINK_FLAGS"] == "--cce-fatobj-link"
    else:
        assert "-xcce" in kernel and f"--cce-aicore-arch={arch}" in kernel
        assert all(f in joined for f in OLD_BISHENG_KERNEL_FLAGS) and "-xasc" not in kernel
        assert link["libcombine_kernel.so"]["LINK_FLAGS"] == f"--cce-fatobj-link --cce-aicore-arch={arch}"
    assert ("-DCOMBINE_NPU_FFTS=1" in kernel) == ffts and ("-DFFTS_CONFIG=1" in kernel) == ffts
    for name in HOST_SOURCES:
        host = shlex.split(compiles[name])
        assert host[0] == bisheng and host[-1] == str(source_root() / "host" / name)
        assert "-xc++" in host and "-xcce" not in host and "-xasc" not in host
        assert f"-I{shmem_root}/include" in host and f"-I{cann}/include" in host
    for cmd in compiles.values():
        assert "host/twin" not in cmd and "COMBINE_TARGET_TWIN" not in cmd

    # The kernel: a shared library, linked with --cce-fatobj-link as SHMEM's example kernels
    # (examples/CMakeLists.txt), with SHMEM's CANN set, libshmem and unified_dlog.
    kernel_link, driver_link = link["libcombine_kernel.so"], link["combine_host"]
    assert kernel_link["rule"] == "CXX_SHARED_LIBRARY_LINKER__combine_kernel_Release"
    assert kernel_link["inputs"].split()[0] == "CMakeFiles/combine_kernel.dir/kernels/combine_kernel.cpp.o"
    assert "-fPIC" in kernel
    assert kernel_link["LINK_PATH"].split() == [f"-L{cann}/lib64", f"-L{shmem_root}/lib"]
    assert kernel_link["LINK_LIBRARIES"].split() == [f"-Wl,-rpath,{shmem_root}/lib:{cann}/lib64", *SHMEM_LINK_SET,
                                                     "-lshmem", "-lunified_dlog"]
    # The driver: plain C++ objects, no fat-object link, the same set plus libshmem and the kernel
    # library, which it finds at run time in the build folder through its RPATH.
    assert driver_link["rule"] == "CXX_EXECUTABLE_LINKER__combine_host_Release"
    assert [Path(i).name for i in driver_link["inputs"].partition(" | ")[0].split()] == \
        [f"{name}.o" for name in HOST_SOURCES]
    assert "LINK_FLAGS" not in driver_link
    assert driver_link["LINK_PATH"].split() == [f"-L{cann}/lib64", f"-L{shmem_root}/lib"]
    assert driver_link["LINK_LIBRARIES"].split() == [f"-Wl,-rpath,{shmem_root}/lib:{cann}/lib64:{tmp_path}/b",
                                                     *SHMEM_LINK_SET, "-lshmem", "libcombine_kernel.so"]


def test_configure_without_unified_dlog_links_the_rest(tmp_path):
    env = npu_env(tmp_path, soc="Ascend910B3", unified_dlog=False)
    _, link = configure(env, tmp_path / "b")
    assert link["libcombine_kernel.so"]["LINK_LIBRARIES"].split()[1:] == [*SHMEM_LINK_SET, "-lshmem"]


@pytest.mark.parametrize("missing", [["nnopbase"], ["tiling_api", "c_sec"]])
def test_configure_refuses_cann_without_shmems_link_set(tmp_path, missing):
    env = npu_env(tmp_path, soc="Ascend910B3")
    for lib in missing:
        (tmp_path / "cann" / "lib64" / f"lib{lib}.so").unlink()
    tc = require_npu_toolchain(env)
    proc = subprocess.run([shutil.which("cmake"), "-S", str(source_root()), "-B", str(tmp_path / "b"), "-G", "Ninja",
                           "-DCOMBINE_TARGET=npu", *tc.cmake_args()],
                          env={**os.environ, **env, "PATH": os.environ["PATH"]}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode != 0
    names = ", ".join(f"lib{lib}" for lib in missing)
    assert (f"COMBINE_TARGET=npu: CANN at {tmp_path}/cann lacks {names} in lib64 (SHMEM links every target with "
            "them): point ASCEND_HOME_PATH at a complete CANN toolkit install") in " ".join(proc.stdout.split())


def test_npu_build_links_and_the_driver_finds_its_libraries(tmp_path):
    """cmake --build with the linkable fakes (stub sources, real empty CANN libraries): the kernel
    library and the driver link, and the driver runs with no LD_LIBRARY_PATH, finding
    libcombine_kernel.so and libshmem.so (whose stub it calls through the kernel library)."""
    env = npu_env(tmp_path, soc="Ascend910B3", linkable=True)
    bdir = tmp_path / "b"
    configure(env, bdir)
    run_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run([shutil.which("cmake"), "--build", str(bdir)], env=run_env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    assert (bdir / "libcombine_kernel.so").is_file()
    out = subprocess.run([str(bdir / "combine_host")], env=run_env, capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (0, "46465454\n", "")
    # Without the RPATH's build folder the loader does not find the kernel library.
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (bdir / "libcombine_kernel.so").rename(moved / "libcombine_kernel.so")
    out = subprocess.run([str(bdir / "combine_host")], env=run_env, capture_output=True, text=True)
    assert out.returncode == 127
    assert "libcombine_kernel.so: cannot open shared object file" in out.stderr


def test_configure_refuses_shmem_without_device_sources(tmp_path):
    env = npu_env(tmp_path, shmem=False, soc="Ascend910B3")
    make_shmem(tmp_path / "shmem", device_src=False)
    env["SHMEM_HOME"] = str(tmp_path / "shmem")
    tc = require_npu_toolchain(env)
    proc = subprocess.run([shutil.which("cmake"), "-S", str(source_root()), "-B", str(tmp_path / "b"), "-G", "Ninja",
                           "-DCOMBINE_TARGET=npu", *tc.cmake_args()],
                          env={**os.environ, **env, "PATH": os.environ["PATH"]}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode != 0
    assert (f"SHMEM at {tmp_path}/shmem/shmem has no src/device (its device headers include files from there): "
            "install SHMEM with its device sources, or set SHMEM_HOME to the source tree") in " ".join(proc.stdout.split())


def test_configure_old_cann_builds_without_sdma(tmp_path):
    env = npu_env(tmp_path, cann="8.3.RC1", soc="Ascend910B3")
    compiles, _ = configure(env, tmp_path / "b")
    assert "-DCOMBINE_NPU_SDMA=0" in shlex.split(compiles["combine_kernel.cpp"])
    assert "-DCOMBINE_NPU_SDMA=0" in shlex.split(compiles["combine_host.cpp"])


def test_configure_source_build_of_shmem(tmp_path):
    env = npu_env(tmp_path, shmem=False, soc="Ascend910_9391")
    root = make_shmem(tmp_path / "shmem_src", layout="source")
    env["SHMEM_HOME"] = str(tmp_path / "shmem_src")
    compiles, link = configure(env, tmp_path / "b")
    kernel = shlex.split(compiles["combine_kernel.cpp"])
    assert f"-I{root}/include" in kernel  # shmem.h
    assert f"-I{tmp_path}/shmem_src/src/device" in kernel and f"-I{tmp_path}/shmem_src/src" in kernel  # device .hpp
    assert "--cce-aicore-arch=dav-c220" in kernel
    assert link["combine_host"]["LINK_PATH"].split() == [f"-L{tmp_path}/cann/lib64", f"-L{root}/lib"]


def test_cmake_refuses_a_compiler_that_is_not_bisheng(tmp_path):
    env = npu_env(tmp_path, soc="Ascend910B3")
    proc = subprocess.run([shutil.which("cmake"), "-S", str(source_root()), "-B", str(tmp_path / "b"), "-G", "Ninja",
                           "-DCOMBINE_TARGET=npu", f"-DASCEND_HOME_PATH={env['ASCEND_HOME_PATH']}",
                           f"-DSHMEM_HOME={env['SHMEM_HOME']}", "-DCOMBINE_NPU_SOC=Ascend910B3"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode != 0
    assert ("not bisheng: configure a fresh build folder with "
            f"-DCMAKE_CXX_COMPILER={env['ASCEND_HOME_PATH']}/compiler/ccec_compiler/bin/bisheng") in \
        " ".join(proc.stdout.split())


# ---- build(target='npu') refuses before running anything ----

@pytest.fixture
def nothing_runs(monkeypatch):
    """Any attempt to run a tool (cmake, a compiler, npu-smi) fails the test."""
    def forbidden(*a, **k):
        raise AssertionError(f"nothing may run: {a[:1]}")
    monkeypatch.setattr(build_mod, "_run", forbidden)
    monkeypatch.setattr(subprocess, "run", forbidden)
    monkeypatch.setattr(subprocess, "Popen", forbidden)


def use_env(monkeypatch, env: dict[str, str]) -> None:
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "SHMEM_HOME", "SHMEM_HOME_PATH", "COMBINE_NPU_SOC"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def refusal(monkeypatch, env, **kw) -> str:
    use_env(monkeypatch, env)
    with pytest.raises(TargetUnavailable) as e:
        build("npu", **kw)
    return str(e.value)


def test_build_npu_without_cann_or_shmem(tmp_path, monkeypatch, nothing_runs):
    msg = refusal(monkeypatch, {"PATH": str(tmp_path)})
    assert msg == ("target=npu: cannot build here:\n"
                   f"  missing CANN: ASCEND_HOME_PATH is not set; {CANN_FIX}\n"
                   f"  missing SHMEM: neither SHMEM_HOME nor SHMEM_HOME_PATH is set; {SHMEM_FIX}\n"
                   "The CPU twin (target=cpu) runs everywhere.")
    assert CANN_FIX == "install the CANN toolkit and run `source <CANN>/set_env.sh` (it sets ASCEND_HOME_PATH)"
    assert not (tmp_path / "builds").exists()


def test_build_npu_cann_folder_missing(tmp_path, monkeypatch, nothing_runs):
    env = npu_env(tmp_path, cann=None, soc="Ascend910B3")
    env["ASCEND_TOOLKIT_HOME"] = str(tmp_path / "nowhere")
    msg = refusal(monkeypatch, env)
    assert msg == ("target=npu: cannot build here:\n"
                   f"  missing CANN: ASCEND_TOOLKIT_HOME={tmp_path}/nowhere: no such folder; {CANN_FIX}\n"
                   "The CPU twin (target=cpu) runs everywhere.")


def test_build_npu_without_bisheng(tmp_path, monkeypatch, nothing_runs):
    env = npu_env(tmp_path, cann=None, soc="Ascend910B3")
    env["ASCEND_HOME_PATH"] = str(make_cann(tmp_path / "cann", bisheng=False))
    msg = refusal(monkeypatch, env)
    assert msg == ("target=npu: cannot build here:\n"
                   f"  missing CANN: no bisheng under {tmp_path}/cann/compiler/ccec_compiler/bin or on PATH "
                   f"(the toolkit's compiler); {CANN_FIX}\n"
                   "The CPU twin (target=cpu) runs everywhere.")


def test_build_npu_without_shmem(tmp_path, monkeypatch, nothing_runs):
    env = npu_env(tmp_path, shmem=False, soc="Ascend910B3")
    msg = refusal(monkeypatch, env)
    assert msg == ("target=npu: cannot build here:\n"
                   f"  missing SHMEM: neither SHMEM_HOME nor SHMEM_HOME_PATH is set; {SHMEM_FIX}\n"
                   "The CPU twin (target=cpu) runs everywhere.")
    env["SHMEM_HOME"] = str(tmp_path / "empty")
    msg = refusal(monkeypatch, env)
    assert msg.splitlines()[1] == (f"  missing SHMEM: SHMEM_HOME={tmp_path}/empty: no include/shmem.h and "
                                   f"lib/libshmem.so there or in its shmem/ or install/shmem/ folder; {SHMEM_FIX}")


def test_build_npu_without_a_known_soc(tmp_path, monkeypatch, nothing_runs):
    monkeypatch.setattr("combine_lab.run.toolchain._probe_torch_npu", lambda: None)
    env = npu_env(tmp_path)  # no NPU: no torch_npu, no npu-smi
    msg = refusal(monkeypatch, env)
    assert msg == ("target=npu: cannot build here:\n"
                   f"  missing SoC: unknown (no NPU visible); {SOC_FIX}\n"
                   "The CPU twin (target=cpu) runs everywhere.")
    msg = refusal(monkeypatch, env, soc="Ascend310P3")
    assert msg.splitlines()[1] == ("  missing SoC: Ascend310P3 is not an A2/A3 (Ascend910B*, Ascend910_93*) or "
                                   f"Ascend950 SoC; {SOC_FIX}")


# ---- caching per SoC ----

def test_build_npu_caches_per_soc_and_reconfigures_when_cann_changes(tmp_path, monkeypatch):
    env = npu_env(tmp_path)
    env.pop("PATH")  # cmake from this machine's PATH
    use_env(monkeypatch, env)
    calls = []

    def fake_run(cmd, cwd):  # stands in for cmake: configure writes a cache, build writes the binary
        calls.append(cmd)
        bdir = Path(cmd[cmd.index("-B") + 1]) if "-B" in cmd else Path(cmd[cmd.index("--build") + 1])
        (bdir / ("CMakeCache.txt" if "-B" in cmd else "combine_host")).write_text("x")

    monkeypatch.setattr(build_mod, "_run", fake_run)
    cmake, cann, builds = shutil.which("cmake"), tmp_path / "cann", tmp_path / "builds"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []

    def configure_cmd(soc, arch, sdma):
        return [cmake, "-S", str(source_root()), "-B", str(builds / f"npu-{soc}"), *gen, "-DCOMBINE_TARGET=npu",
                "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CXX_COMPILER={cann}/compiler/ccec_compiler/bin/bisheng",
                f"-DASCEND_HOME_PATH={cann}", f"-DSHMEM_HOME={tmp_path}/shmem", f"-DCOMBINE_NPU_SOC={soc}",
                f"-DCOMBINE_NPU_ARCH={arch}", f"-DCOMBINE_NPU_SDMA={sdma}", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]

    def build_cmd(soc):
        return [cmake, "--build", str(builds / f"npu-{soc}"), "--parallel", str(os.cpu_count() or 2)]

    assert build("npu", soc="Ascend910B3") == builds / "npu-Ascend910B3" / "combine_host"
    assert calls == [configure_cmd("Ascend910B3", "dav-c220", "ON"), build_cmd("Ascend910B3")]
    calls.clear()
    assert build("npu", soc="Ascend910B3") == builds / "npu-Ascend910B3" / "combine_host"
    assert calls == []  # cached
    assert build("npu", soc="Ascend950PR") == builds / "npu-Ascend950PR" / "combine_host"
    assert calls == [configure_cmd("Ascend950PR", "dav-c310", "OFF"), build_cmd("Ascend950PR")]  # no SDMA put
    calls.clear()
    monkeypatch.setenv("COMBINE_NPU_SOC", "Ascend910B3")
    assert build("npu") == builds / "npu-Ascend910B3" / "combine_host"
    assert calls == []
    # Another CANN (8.3, no SDMA): the folder is configured afresh for the new toolchain.
    make_cann(cann, "8.3.RC1")
    assert build("npu") == builds / "npu-Ascend910B3" / "combine_host"
    assert calls == [configure_cmd("Ascend910B3", "dav-c220", "OFF"), build_cmd("Ascend910B3")]


def test_configure_your_kernel_builds_its_sources_unchanged_with_its_own_header(tmp_path):
    """COMBINE_KERNEL_DIR (docs/own-kernel.md): the kernel library is the folder's sources as they are
    (no twin copy), with the folder, not kernels/, on its include path; the driver gains the call into
    it (host/user_kernel.cpp, against the folder's header) and COMBINE_USER_KERNEL=1."""
    folder = source_root() / "tests" / "kernels" / "combine_refstyle"
    env = npu_env(tmp_path, soc="Ascend910B3", bisheng_date="2026-08-01")
    compiles, link = configure(env, tmp_path / "b", extra=(f"-DCOMBINE_KERNEL_DIR={folder}",))
    assert sorted(compiles) == sorted(["combine_refstyle_kernel.cpp", "user_kernel.cpp", *HOST_SOURCES])
    kernel = shlex.split(compiles["combine_refstyle_kernel.cpp"])
    assert kernel[-1] == str(folder / "combine_refstyle_kernel.cpp") and "-xasc" in kernel
    assert f"-I{folder}" in kernel and f"-I{source_root()}/kernels" not in kernel
    entry = shlex.split(compiles["user_kernel.cpp"])
    assert "-xc++" in entry and entry.index(f"-I{folder}") < entry.index(f"-I{source_root()}/host")
    assert f"-I{source_root()}/kernels" not in entry
    assert "-DCOMBINE_USER_KERNEL=1" in shlex.split(compiles["combine_host.cpp"])
    assert "user_kernel.cpp.o" in link["combine_host"]["inputs"]
