"""The NPU branch compiles against declarations that mirror the public SHMEM, Ascend C and
ACL headers (tests/npu_decls, combine-facts section 10), here, without CANN or SHMEM.

How: clang stands in for bisheng. The kernel file is compiled twice in CUDA mode (no CUDA
headers or libraries), once for the AI core and once for the host, because in that mode a
function's target is part of its declaration: `__aicore__` is `device`, `__host_aicore__`
is `host, device`, so an AI-core function that calls a plain (host) function does not
compile, as with bisheng; `__gm__` and `__ubuf__` are distinct address spaces in the AI-core
pass. The driver's host-only files compile as plain C++ against the same headers. Each
blocker found when the kernel and driver were first read against the real headers is
reintroduced into a copy of the sources and must fail with the compiler's own words.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DECLS = ROOT / "tests" / "npu_decls" / "include"
OLD_HEADER = "aclshmem" + ".h"  # the name SHMEM dropped; spelt so that `grep -r` finds it nowhere
HOST_ONLY = ["host/combine_host.cpp", "host/host_args.cpp", "host/case_io.cpp", "host/perf_csv.cpp"]

CLANG = shutil.which("clang++")
if CLANG is None:
    reason = "needs clang++ for the NPU-branch compile check: bash .ci/setup --test installs it (apt-get install clang)"
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytestmark = pytest.mark.skip(reason=reason)


def _flags(sdma: bool) -> list[str]:
    return ["-fsyntax-only", "-std=c++17", "-Wall", "-Werror", "-Wno-unknown-attributes",
            "-Wno-unknown-cuda-version", f"-I{DECLS}", "-Ikernels", "-Ihost", "-DCOMBINE_TARGET_NPU=1",
            f"-DCOMBINE_NPU_SDMA={int(sdma)}", "-DCOMBINE_NPU_FFTS=1", "-DCOMBINE_SYNTAX_CHECK",
            "-include", "combine_syntax_check.h"]


def _kernel_pass(side: str) -> list[str]:
    """AI-core (``device``) or host pass of the kernel file: __CCE_AICORE__ as bisheng -xcce sets it."""
    return ["-x", "cuda", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_70", "-Xclang",
            "-fno-cuda-host-device-constexpr", "-D__CCE_AICORE__=220", f"--cuda-{side}-only"]


def compile_npu_branch(root: Path, sdma: bool = True) -> list[tuple[str, int, str]]:
    """(what, return code, compiler output) for every compile of the NPU branch under ``root``."""
    jobs = [("kernel (AI core)", _kernel_pass("device") + ["kernels/combine_kernel.cpp"]),
            ("kernel (host)", _kernel_pass("host") + ["kernels/combine_kernel.cpp"])]
    jobs += [(f, ["-x", "c++", f]) for f in HOST_ONLY]
    # The compiles are independent: run them side by side (the suite's time budget, issue 10).
    procs = [(what, subprocess.Popen([CLANG, *_flags(sdma), *args], cwd=root, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)) for what, args in jobs]
    out = []
    for what, p in procs:
        try:
            _, err = p.communicate(timeout=120)
        finally:
            p.kill()
        out.append((what, p.returncode, err))
    return out


@pytest.mark.parametrize("sdma", [True, False], ids=["cann9-sdma", "mte-only"])
def test_npu_branch_compiles_against_the_public_declarations(sdma):
    results = compile_npu_branch(ROOT, sdma)
    assert [what for what, _, _ in results] == ["kernel (AI core)", "kernel (host)", *HOST_ONLY]
    for what, rc, err in results:
        assert rc == 0 and err == "", f"{what}:\n{err}"


def _mutated_tree(tmp_path: Path, path: str, old: str, new: str) -> Path:
    """A copy of kernels/ and host/ with ``old`` replaced by ``new`` once in ``path``."""
    for d in ("kernels", "host"):
        shutil.copytree(ROOT / d, tmp_path / d)
    target = tmp_path / path
    text = target.read_text()
    assert text.count(old) == 1, f"{path} no longer contains {old!r}: update this test"
    target.write_text(text.replace(old, new))
    return tmp_path


def _failures(results) -> dict[str, str]:
    return {what: err for what, rc, err in results if rc != 0}


def test_old_header_name_is_refused(tmp_path):
    root = _mutated_tree(tmp_path, "kernels/combine_platform.h", '#include "shmem.h"', f'#include "{OLD_HEADER}"')
    failed = _failures(compile_npu_branch(root))
    assert set(failed) == {"kernel (AI core)", "kernel (host)"}
    assert f"fatal error: '{OLD_HEADER}' file not found" in failed["kernel (AI core)"]


def test_engine_mask_assigned_as_int_is_refused(tmp_path):
    root = _mutated_tree(tmp_path, "host/combine_host.cpp",
                         "static_cast<data_op_engine_type_t>(COMBINE_DATA_OP_ENGINES)", "COMBINE_DATA_OP_ENGINES")
    failed = _failures(compile_npu_branch(root))
    assert set(failed) == {"host/combine_host.cpp"}
    assert "error: assigning to 'data_op_engine_type_t' from incompatible type 'int'" in failed["host/combine_host.cpp"]


@pytest.mark.parametrize("helper", ["payload_stride", "window_layout"])
def test_host_only_helper_called_from_aicore_code_is_refused(tmp_path, helper):
    ret = {"payload_stride": "uint64_t", "window_layout": "WindowLayout"}[helper]
    root = _mutated_tree(tmp_path, "kernels/combine_kernel.h", f"__host_aicore__ inline {ret} {helper}(",
                         f"inline {ret} {helper}(")
    failed = _failures(compile_npu_branch(root))
    assert "kernel (AI core)" in failed and not set(failed) & set(HOST_ONLY)
    err = failed["kernel (AI core)"]
    assert (f"error: no matching function for call to '{helper}'" in err
            and "call to __host__ function from __device__ function" in err) or \
           f"error: reference to __host__ function '{helper}' in __host__ __device__ function" in err, err


def test_gm_pointer_where_shmem_wants_a_ub_buffer_is_refused(tmp_path):
    root = _mutated_tree(tmp_path, "kernels/combine_kernel.cpp", "ub_at<T>(StageOff(buf))",
                         "(__gm__ T*)(expand_x_ + uint64_t(row) * h_)")
    failed = _failures(compile_npu_branch(root))
    assert set(failed) == {"kernel (AI core)"}
    assert "no matching function for call to 'aclshmemx_mte_put_nbi'" in failed["kernel (AI core)"]


def test_launch_arguments_are_checked_against_the_entry(tmp_path):
    root = _mutated_tree(tmp_path, "kernels/combine_kernel.cpp",
                         "COMBINE_KERNEL_LAUNCH(combine_int32, block_dim, stream, ffts, ",
                         "COMBINE_KERNEL_LAUNCH(combine_int32, block_dim, stream, ")
    failed = _failures(compile_npu_branch(root))
    assert set(failed) == {"kernel (host)"}
    assert "the launch's arguments do not match the kernel entry's parameters" in failed["kernel (host)"]


def test_no_file_names_the_old_header():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = [f for f in tracked if (ROOT / f).is_file() and OLD_HEADER in (ROOT / f).read_text(errors="replace")]
    assert hits == []
