"""The NPU branch compiles against declarations that mirror the public SHMEM, Ascend C and
ACL headers (tests/npu_decls, docs/hardware-rules.md#11-public-headers-and-the-build), here, without CANN or SHMEM.

How: clang stands in for bisheng. The kernel file is compiled in CUDA mode (no CUDA headers
or libraries), once for the AI core and once for the host, for A2/A3 (__NPU_ARCH__ 2201) and
for Ascend950 (3510), because in that mode a function's target is part of its declaration:
`__aicore__` is `device`, `__host_aicore__` is `host, device`, a kernel entry (`__global__`)
is `global`, whose body is device code and which only a `<<<>>>` launch may call; so an
AI-core function that calls a plain (host) function does not compile, as with bisheng, and the
launch line is compiled as it is written. `__gm__` and `__ubuf__` are distinct address spaces
in the AI-core pass. The driver's host-only files compile as plain C++ against the same headers.
Each blocker found when the kernel and driver were first read against the real headers is
reintroduced into a copy of the sources (or of the declarations) and must fail with the
compiler's own words.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DECLS = ROOT / "tests" / "npu_decls"
OLD_HEADER = "aclshmem" + ".h"  # the name SHMEM dropped; spelt so that `grep -r` finds it nowhere
HOST_ONLY = ["host/combine_host.cpp", "host/host_args.cpp", "host/case_io.cpp", "host/perf_csv.cpp"]
KERNEL = "kernels/combine_kernel.cpp"
# What bisheng defines for each arch: __NPU_ARCH__ picks asc-devkit's declarations;
# shmem.h tests only whether __CCE_AICORE__ is defined (its value follows the dav-c220 /
# dav-c310 arch names here).
ARCHS = {"A2/A3": ["-D__NPU_ARCH__=2201", "-D__CCE_AICORE__=220"],
         "Ascend950": ["-D__NPU_ARCH__=3510", "-D__CCE_AICORE__=310"]}
A2A3 = ("A2/A3",)
# SHMEM's include folders as cmake/npu.cmake passes them: include, src/device, src.
SHMEM_DIRS = ("include", "src/device", "src")

CLANG = shutil.which("clang++")
if CLANG is None:
    reason = "needs clang++ for the NPU-branch compile check: bash .ci/setup --test installs it (apt-get install clang)"
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytestmark = pytest.mark.skip(reason=reason)


def _flags(sdma: bool, decls: Path, dirs: tuple[str, ...]) -> list[str]:
    return ["-std=c++17", "-Wall", "-Werror", "-Wno-unknown-attributes", "-Wno-unknown-cuda-version",
            *(f"-I{decls / d}" for d in dirs), "-Ikernels", "-Ihost", "-DCOMBINE_TARGET_NPU=1",
            f"-DCOMBINE_NPU_SDMA={int(sdma)}", "-DCOMBINE_NPU_FFTS=1", "-include", "combine_syntax_check.h"]


def _kernel_pass(side: str, arch: str) -> list[str]:
    """AI-core (``device``) or host pass of a kernel file for ``arch`` (a key of ARCHS)."""
    return ["-x", "cuda", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_70", "-Xclang",
            "-fno-cuda-host-device-constexpr", *ARCHS[arch], f"--cuda-{side}-only"]


def kernel_jobs(archs=tuple(ARCHS), source: str = KERNEL) -> list[tuple[str, list[str]]]:
    return [job for arch in archs for job in ((f"kernel {arch} (AI core)", _kernel_pass("device", arch) + [source]),
                                              (f"kernel {arch} (host)", _kernel_pass("host", arch) + [source]))]


def run_compiles(root: Path, jobs, sdma: bool = True, decls: Path = DECLS, dirs=SHMEM_DIRS,
                 mode: list[str] | None = None) -> list[tuple[str, int, str]]:
    """(what, return code, compiler output) of each job, run side by side (the suite's time
    budget, issue 10); ``mode``: ['-fsyntax-only'] unless given (e.g. ['-c', '-o', path])."""
    procs = []
    for what, args in jobs:
        extra = mode(what) if callable(mode) else (mode or ["-fsyntax-only"])
        procs.append((what, subprocess.Popen([CLANG, *extra, *_flags(sdma, decls, dirs), *args], cwd=root,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
    out = []
    for what, p in procs:
        try:
            _, err = p.communicate(timeout=120)
        finally:
            p.kill()
        out.append((what, p.returncode, err))
    return out


def compile_npu_branch(root: Path = ROOT, sdma: bool = True, archs=tuple(ARCHS), decls: Path = DECLS,
                       dirs=SHMEM_DIRS, host_only: bool = True) -> list[tuple[str, int, str]]:
    """(what, return code, compiler output) for every compile of the NPU branch under ``root``:
    the kernel's two passes for each arch in ``archs``, then the driver's host-only files."""
    jobs = kernel_jobs(archs) + ([(f, ["-x", "c++", f]) for f in HOST_ONLY] if host_only else [])
    return run_compiles(root, jobs, sdma, decls, dirs)


def passes(*archs: str) -> set[str]:
    return {f"kernel {arch} ({side})" for arch in archs for side in ("AI core", "host")}


@pytest.mark.parametrize("sdma", [True, False], ids=["cann9-sdma", "mte-only"])
def test_npu_branch_compiles_against_the_public_declarations(sdma):
    results = compile_npu_branch(ROOT, sdma)
    assert [what for what, _, _ in results] == ["kernel A2/A3 (AI core)", "kernel A2/A3 (host)",
                                                "kernel Ascend950 (AI core)", "kernel Ascend950 (host)", *HOST_ONLY]
    for what, rc, err in results:
        assert rc == 0 and err == "", f"{what}:\n{err}"


def _mutated_tree(tmp_path: Path, path: str, old: str, new: str) -> Path:
    """A copy of kernels/ and host/ with ``old`` replaced by ``new`` once in ``path``."""
    for d in ("kernels", "host"):
        shutil.copytree(ROOT / d, tmp_path / d)
    _replace_once(tmp_path / path, old, new)
    return tmp_path


def _mutated_decls(tmp_path: Path, path: str, *edits: tuple[str, str]) -> Path:
    """A copy of tests/npu_decls with each (old, new) of ``edits`` made once in ``path`` (relative to it)."""
    decls = tmp_path / "npu_decls"
    shutil.copytree(DECLS, decls)
    for old, new in edits:
        _replace_once(decls / path, old, new)
    return decls


def _replace_once(target: Path, old: str, new: str) -> None:
    text = target.read_text()
    assert text.count(old) == 1, f"{target} no longer contains {old!r} once: update this test"
    target.write_text(text.replace(old, new))


def _failures(results) -> dict[str, str]:
    return {what: err for what, rc, err in results if rc != 0}


def test_old_header_name_is_refused(tmp_path):
    root = _mutated_tree(tmp_path, "kernels/combine_platform.h", '#include "shmem.h"', f'#include "{OLD_HEADER}"')
    failed = _failures(compile_npu_branch(root, archs=A2A3, host_only=False))  # the driver does not include it
    assert set(failed) == passes("A2/A3")
    assert f"fatal error: '{OLD_HEADER}' file not found" in failed["kernel A2/A3 (AI core)"]


def test_engine_mask_assigned_as_int_is_refused(tmp_path):
    root = _mutated_tree(tmp_path, "host/combine_host.cpp",
                         "static_cast<data_op_engine_type_t>(COMBINE_DATA_OP_ENGINES)", "COMBINE_DATA_OP_ENGINES")
    # only the file changed is compiled again: the others are the unchanged sources the test above compiles
    failed = _failures(run_compiles(root, [("host/combine_host.cpp", ["-x", "c++", "host/combine_host.cpp"])]))
    assert set(failed) == {"host/combine_host.cpp"}
    assert "error: assigning to 'data_op_engine_type_t' from incompatible type 'int'" in failed["host/combine_host.cpp"]


#: Each variant below compiles the whole NPU branch again (a second each): one runs in the quick
#: suite, the others, the same refusal of another helper or member, in the whole suite (.ci/run).
_SAME_PATH = pytest.mark.slow


@pytest.mark.parametrize("helper", ["payload_stride", pytest.param("window_layout", marks=_SAME_PATH),
                                    pytest.param("align_line", marks=_SAME_PATH)])
def test_host_only_helper_called_from_aicore_code_is_refused(tmp_path, helper):
    """A helper shared with the host needs __host_aicore__ when AI-core code calls it: the window
    layout's (kernels/combine_kernel.h), which the kernel's constructor calls too."""
    path, decl = {"payload_stride": ("kernels/combine_kernel.h", "inline uint64_t"),
                  "window_layout": ("kernels/combine_kernel.h", "inline WindowLayout"),
                  "align_line": ("kernels/combine_kernel.h", "inline uint64_t")}[helper]
    root = _mutated_tree(tmp_path, path, f"__host_aicore__ {decl} {helper}(", f"{decl} {helper}(")
    failed = _failures(compile_npu_branch(root, archs=A2A3))
    assert "kernel A2/A3 (AI core)" in failed and not set(failed) & set(HOST_ONLY)
    err = failed["kernel A2/A3 (AI core)"]
    # clang's words depend on the caller: overload resolution (a call), or a reference from a
    # __host__ __device__ helper or (a constexpr hook, evaluated in place) from the AI-core function.
    assert (f"error: no matching function for call to '{helper}'" in err
            and "call to __host__ function from __device__ function" in err) or \
           re.search(rf"error: reference to __host__ function '{helper}' in (__host__ )?__device__ function", err), err


def test_entry_body_is_checked_as_aicore_code(tmp_path):
    """The entry (extern "C" [[bisheng::core_ratio(0, 1)]] __global__ __aicore__) is clang's
    global function: its body is AI-core code, so a host function called there is refused."""
    root = _mutated_tree(tmp_path, KERNEL, "util_set_ffts_config(ffts_addr);",
                         "util_set_ffts_config(util_get_ffts_config());")
    failed = _failures(compile_npu_branch(root, archs=A2A3, host_only=False))
    assert set(failed) == passes("A2/A3")
    err = failed["kernel A2/A3 (AI core)"]
    assert "error: no matching function for call to 'util_get_ffts_config'" in err
    assert "call to __host__ function from __global__ function" in err


def test_gm_pointer_where_shmem_wants_a_ub_buffer_is_refused(tmp_path):
    root = _mutated_tree(tmp_path, KERNEL, "ub_at<U>(StageOff(buf))", "(__gm__ U*)(src)")
    failed = _failures(compile_npu_branch(root, archs=A2A3, host_only=False))
    assert set(failed) == {"kernel A2/A3 (AI core)"}
    err = failed["kernel A2/A3 (AI core)"]
    assert "no matching function for call to 'aclshmemx_mte_put_nbi'" in err
    assert "cannot pass pointer to address space '__generic' as a pointer to address space '__constant'" in err


def test_launch_arguments_are_checked_against_the_entry(tmp_path):
    root = _mutated_tree(tmp_path, KERNEL, "combine_int32<<<block_dim, nullptr, stream>>>(ffts, ",
                         "combine_int32<<<block_dim, nullptr, stream>>>(")
    failed = _failures(compile_npu_branch(root, archs=A2A3, host_only=False))
    assert set(failed) == passes("A2/A3")
    for err in failed.values():
        m = re.search(r"error: too few arguments to function call, expected (\d+), have (\d+)", err)
        assert m and int(m[2]) == int(m[1]) - 1, err


def test_launch_configuration_is_checked(tmp_path):
    """<<<blocks, l2ctrl, stream>>>: the stream where the block count goes is refused."""
    root = _mutated_tree(tmp_path, KERNEL, "combine_int32<<<block_dim, nullptr, stream>>>(",
                         "combine_int32<<<stream, nullptr, block_dim>>>(")
    failed = _failures(compile_npu_branch(root, archs=A2A3, host_only=False))
    assert set(failed) == passes("A2/A3")
    for err in failed.values():
        assert "cannot initialize a parameter of type 'uint32_t' (aka 'unsigned int') with an lvalue of type " \
               "'void *'" in err, err


def test_only_a_kernel_entry_can_be_launched(tmp_path):
    root = _mutated_tree(tmp_path, KERNEL, "extern \"C\" COMBINE_KERNEL_ATTRS __global__ __aicore__ void NAME(",
                         "extern \"C\" COMBINE_KERNEL_ATTRS __aicore__ void NAME(")
    failed = _failures(compile_npu_branch(root, archs=A2A3, host_only=False))
    assert set(failed) == passes("A2/A3")
    assert "error: kernel call to non-global function 'combine_int32'" in failed["kernel A2/A3 (AI core)"]
    assert "error: reference to __device__ function 'combine_int32' in __host__ function" in \
        failed["kernel A2/A3 (host)"]


def test_ascend950_overloads_are_its_own(tmp_path):
    """DataCopyPad's PaddingMode parameter exists on Ascend950 (__NPU_ARCH__ 3510) only (the UB -> GM
    copy of CopyTile, instantiated for stage 2's x_out tiles)."""
    root = _mutated_tree(tmp_path, KERNEL, "AscendC::DataCopyPad(dst, src, params);",
                         "AscendC::DataCopyPad<T, AscendC::PaddingMode::Compact>(dst, src, params);")
    failed = _failures(compile_npu_branch(root, host_only=False))
    assert set(failed) == passes("A2/A3")
    assert "error: no member named 'PaddingMode' in namespace 'AscendC'" in failed["kernel A2/A3 (AI core)"]


@pytest.mark.parametrize("member, name", [("bits_", "half"), pytest.param("bf16_bits_", "bfloat16_t", marks=_SAME_PATH)])
def test_a_one_byte_half_is_refused(tmp_path, member, name):
    decls = _mutated_decls(tmp_path, "include/kernel_operator.h", (f"    uint16_t {member};", f"    uint8_t {member};"))
    failed = _failures(compile_npu_branch(ROOT, archs=A2A3, decls=decls))
    assert set(failed) == passes("A2/A3") | set(HOST_ONLY)
    for err in failed.values():
        assert f"error: static_assert failed due to requirement 'sizeof({name}) == 2' \"bisheng's {name} is 2 bytes\"" \
               in err, err


def test_profiling_frames_need_shmem_src(tmp_path):
    """SHMEM's utils/prof/shmemi_prof.h (found through <shmem>/src/device) includes
    device/shmemi_device_common.h from <shmem>/src: without that folder the kernel does not
    compile (combine_platform.h includes the profiling header unconditionally, as shmem.h needs
    the same folders)."""
    failed = _failures(compile_npu_branch(ROOT, archs=A2A3, dirs=("include", "src/device")))
    assert set(failed) == passes("A2/A3")
    for err in failed.values():
        assert "utils/prof/shmemi_prof.h" in err
        assert "fatal error: 'device/shmemi_device_common.h' file not found" in err, err


def test_shmem_device_headers_need_shmem_src_device(tmp_path):
    """Without <shmem>/src/device, shmem.h's device part fails before combine_platform.h reaches
    the profiling header."""
    failed = _failures(compile_npu_branch(ROOT, archs=A2A3, dirs=("include", "src")))
    assert set(failed) == passes("A2/A3")
    for err in failed.values():
        assert "fatal error: 'gm2gm/shmemi_device_cc.h' file not found" in err, err
        assert "shmemi_prof.h" not in err


def _undefined_acl_symbols(tmp_path: Path, decls_by_name: dict[str, Path]) -> dict[str, set[str]]:
    """The undefined ACL symbols (as the linker sees them; SHMEM's left out) of
    host/combine_host.cpp compiled against each declaration folder."""
    procs = [(name, subprocess.Popen([CLANG, "-c", "-o", str(tmp_path / f"{name}.o"), *_flags(True, decls, SHMEM_DIRS),
                                      "-x", "c++", "host/combine_host.cpp"], cwd=ROOT, stderr=subprocess.PIPE, text=True))
             for name, decls in decls_by_name.items()]
    out = {}
    for name, p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        nm = subprocess.run(["nm", "-u", str(tmp_path / f"{name}.o")], capture_output=True, text=True, check=True)
        out[name] = {ln.split()[-1] for ln in nm.stdout.splitlines() if "acl" in ln and "shmem" not in ln}
    return out


def test_acl_c_api_has_c_linkage(tmp_path):
    """acl/acl.h declares the C API extern "C", as CANN's headers do: the driver's object asks
    the linker for libascendcl's unmangled names; without it the names are C++-mangled."""
    cxx_decls = _mutated_decls(tmp_path, "include/acl/acl.h", ('#ifdef __cplusplus\nextern "C" {\n#endif\n', ""),
                               ("#ifdef __cplusplus\n}\n#endif\n", ""))
    syms = _undefined_acl_symbols(tmp_path, {"c": DECLS, "cxx": cxx_decls})
    assert {"aclInit", "aclrtSetDevice", "aclrtMalloc", "aclrtMemcpy", "aclrtSynchronizeStreamWithTimeout"} <= syms["c"]
    assert all(re.fullmatch(r"acl\w+", sym) for sym in syms["c"]), syms["c"]
    assert {"_Z7aclInitPKc", "_Z14aclrtSetDevicei"} <= syms["cxx"]
    assert not any(re.fullmatch(r"acl\w+", sym) for sym in syms["cxx"]), syms["cxx"]


DEVICE_PROBE = """#include <type_traits>
#include "kernel_operator.h"
#include "shmem.h"
static_assert(std::is_same_v<decltype(&aclshmem_int32_test), int (*)(__gm__ int32_t*, int, int32_t)>);
static_assert(std::is_same_v<decltype(&aclshmemi_barrier_core_soft), void (*)()>);
static_assert(std::is_same_v<decltype(&AscendC::GetSystemCycle), int64_t (*)()>);
__aicore__ inline int64_t probe(__gm__ int32_t* flag) {
    aclshmemi_barrier_core_soft();
    return aclshmem_int32_test(flag, ACLSHMEM_CMP_EQ, 1) + AscendC::GetSystemCycle();
}
"""
HOST_PROBE = """#include <type_traits>
#include "acl/acl.h"
static_assert(std::is_same_v<decltype(&aclrtSynchronizeStreamWithTimeout), aclError (*)(aclrtStream, int32_t)>);
static_assert(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT == 507046);
"""


def test_declarations_for_bounded_waits(tmp_path):
    """What a kernel and driver that bound their waits call (docs/hardware-rules.md#8-bounded-waits), with the
    real headers' types: aclshmem_int32_test, aclshmemi_barrier_core_soft (through shmem.h),
    AscendC::GetSystemCycle, aclrtSynchronizeStreamWithTimeout and its timeout error."""
    (tmp_path / "device_probe.cpp").write_text(DEVICE_PROBE)
    (tmp_path / "host_probe.cpp").write_text(HOST_PROBE)
    jobs = kernel_jobs(tuple(ARCHS), str(tmp_path / "device_probe.cpp"))
    jobs += [("host probe", ["-x", "c++", str(tmp_path / "host_probe.cpp")])]
    results = run_compiles(ROOT, jobs)
    assert len(results) == 5
    for what, rc, err in results:
        assert rc == 0 and err == "", f"{what}:\n{err}"


def test_no_file_names_the_old_header():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = [f for f in tracked if (ROOT / f).is_file() and OLD_HEADER in (ROOT / f).read_text(errors="replace")]
    assert hits == []


REFSTYLE = ROOT / "tests" / "kernels" / "combine_refstyle"  # a kernel folder written as SHMEM's examples are


def test_your_kernel_and_the_driver_that_calls_it_compile_in_the_npu_branch():
    """The new build path (docs/own-kernel.md): a kernel folder written for SHMEM (raw UB integer
    addresses, ACLSHMEM_DEVICE, the profiling header, float16_t and op::fp16_t instances, the
    <<<>>> launch, the soft core barrier) compiles as it is written, both passes; host/user_kernel.cpp
    compiles against the folder's own combine_kernel.h (its -I first, as the build puts it), the
    driver with COMBINE_USER_KERNEL=1, and the folder's own main.cpp as plain C++."""
    kernel = str(REFSTYLE / "combine_refstyle_kernel.cpp")
    # its stage 2 reads half scalars from GM: the declarations' scalar half (tests/npu_decls/README.md)
    jobs = [(what, ["-DCOMBINE_DECLS_SCALAR_HALF=1", *args]) for what, args in kernel_jobs(A2A3, source=kernel)]
    jobs += [("user entry", ["-x", "c++", "host/user_kernel.cpp"]),
             ("driver (your kernel)", ["-x", "c++", "-DCOMBINE_USER_KERNEL=1", "host/combine_host.cpp"]),
             ("folder's main.cpp", ["-x", "c++", str(REFSTYLE / "main.cpp")])]
    first = lambda what: ["-fsyntax-only", f"-I{REFSTYLE}"] if what in ("user entry", "folder's main.cpp") \
        else ["-fsyntax-only"]  # noqa: E731
    for what, rc, err in run_compiles(ROOT, jobs, mode=first):
        assert rc == 0 and err == "", f"{what}:\n{err}"


def test_a_ub_pointer_passed_as_a_gm_one_is_refused_in_your_kernel(tmp_path):
    """UB pointers written as raw integers keep their address space: the staging buffer given where
    SHMEM wants the GM source does not compile (the compiler's words)."""
    src = tmp_path / "combine_refstyle"
    shutil.copytree(REFSTYLE, src)
    _replace_once(src / "combine_refstyle_kernel.cpp", "payload + slot * stride, expand_x + row * h, stage,",
                  "payload + slot * stride, stage, stage,")
    jobs = [(what, ["-DCOMBINE_DECLS_SCALAR_HALF=1", *args])
            for what, args in kernel_jobs(A2A3, source=str(src / "combine_refstyle_kernel.cpp"))]
    failed = _failures(run_compiles(ROOT, jobs))
    assert "kernel A2/A3 (AI core)" in failed
    assert "no matching function for call to 'aclshmemx_mte_put_nbi'" in failed["kernel A2/A3 (AI core)"]


def test_bf16_instance_is_compiled_through_the_vector_casts(tmp_path):
    """bfloat16_t is in the compile check (issue 34): its entry, combine_bfloat16, is compiled for
    both archs, and it takes its conversions from ReduceCast<bfloat16_t> (Cast bf16 <-> float on
    the vector unit): without that specialisation the AI-core pass fails naming it."""
    root = _mutated_tree(tmp_path, KERNEL, "template <>\nstruct ReduceCast<bfloat16_t> {",
                         "template <>\nstruct ReduceCast<bfloat16_t*> {")
    failed = _failures(compile_npu_branch(root, archs=A2A3, host_only=False))
    assert "kernel A2/A3 (AI core)" in failed
    assert "implicit instantiation of undefined template 'combine::ReduceCast<bfloat16_t>'" in \
        failed["kernel A2/A3 (AI core)"]
