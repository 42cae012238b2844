"""The twin's Ascend C vector path refuses or reports what the hardware would get wrong, rule
by rule, for the rules the real kernel never breaks (so no broken kernel of the self-test
shows them), and computes what the hardware computes: each case of
tests/twin/twin_rules/vector_rules.cpp runs one misuse (or one computation) on one twin core,
linked against the twin library (asc-devkit basic_api; docs/hardware-rules.md#10-ascend-c-vector-path)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from combine_lab.run.build import build, twin_cxx

from conftest import RUN_TAG

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "twin" / "twin_rules" / "vector_rules.cpp"


@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> Path:
    """vector_rules built against this checkout's twin library (built first if needed)."""
    lib = build("cpu").parent / "libcombine_twin.a"
    cxx = twin_cxx()
    out = tmp_path_factory.mktemp("twin_rules") / "vector_rules"
    subprocess.run([cxx, "-O2", "-std=c++17", "-ffp-contract=off", "-DCOMBINE_TARGET_TWIN=1",
                    f"-I{ROOT / 'host/twin/include'}", f"-I{ROOT / 'host/twin'}", str(SOURCE), str(lib),
                    "-lpthread", "-lrt", "-o", str(out)], check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def shmem_rules(tmp_path_factory) -> Path:
    """tests/twin/twin_rules/shmem_rules.cpp built against this checkout's twin library."""
    lib = build("cpu").parent / "libcombine_twin.a"
    cxx = twin_cxx()
    out = tmp_path_factory.mktemp("shmem_rules") / "shmem_rules"
    subprocess.run([cxx, "-O2", "-std=c++17", "-DCOMBINE_TARGET_TWIN=1", f"-I{ROOT / 'host/twin/include'}",
                    f"-I{ROOT / 'host/twin'}", str(ROOT / "tests" / "twin" / "twin_rules" / "shmem_rules.cpp"),
                    str(lib),
                    "-lpthread", "-lrt", "-o", str(out)], check=True, capture_output=True, text=True)
    return out


def _run(binary: Path, case: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), case], capture_output=True, text=True, timeout=60)


FATAL = {
    "cast_float_to_int32_none": "Cast (float -> int32) with CAST_NONE: A2/A3 take "
                                "CAST_RINT/CAST_FLOOR/CAST_CEIL/CAST_ROUND/CAST_TRUNC for this pair (asc-devkit Cast)",
    "cast_half_to_float_rint": "Cast (half -> float) with CAST_RINT: A2/A3 take CAST_NONE for this pair (asc-devkit Cast)",
    "cast_int32_to_half": "Cast (int32 -> half): not a Cast the twin models for A2/A3 (half/bfloat16_t/int32/float: "
                          "half -> float, half -> int32, int32 -> float, float -> half, float -> int32, float -> "
                          "float, bfloat16_t -> float, float -> bfloat16_t)",
    "add_partial_overlap": "Add (float): destination UB [132128, 133152) overlaps source 0 UB [132096, 133120): "
                           "operands must overlap completely or not at all (asc-devkit address overlap rule)",
    "cast_widening_in_place": "Cast (half -> float): destination UB [132096, 133120) overlaps source UB [132096, "
                              "132608): this instruction's operands must not overlap (asc-devkit address overlap rule)",
    "tensor_misaligned": "LocalTensor: vector tile (LocalTensor) at UB offset 132112: UB addresses must be 32-byte "
                         "aligned",
    "tensor_past_ub": "LocalTensor: vector tile (LocalTensor) UB [196096, 197120) runs past the core's 192 KiB UB",
    "muls_past_tensor": "Muls (float): source UB [132096, 133152) runs past its LocalTensor UB [132096, 133120) "
                        "(256 float)",
    "pad_block_len_not_elements": "DataCopyPad (GM -> UB): blockLen 41 B is not a multiple of sizeof(T) = 2",
    "pipe_barrier_s": "PipeBarrier<PIPE_S>: not supported (asc-devkit: the scalar pipe orders itself)",
}


@pytest.mark.parametrize("case", list(FATAL))
def test_a_misuse_is_refused_naming_core_instruction_and_range(rules, case):
    p = _run(rules, case)
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert p.stderr.strip() == f"twin: PE -1 core 0: {FATAL[case]}"


def test_a_copy_past_its_global_tensor_is_refused(rules):
    p = _run(rules, "copy_past_global")
    assert p.returncode == 3
    assert p.stderr.startswith("twin: PE -1 core 0: DataCopy (GM -> UB): reads 128 B of GM at 0x")
    assert p.stderr.strip().endswith(", past its GlobalTensor's 16 elements")


def test_two_vector_writes_with_no_barrier_between_them_are_reported(rules):
    p = _run(rules, "vector_waw_without_barrier")
    assert p.returncode == 0
    assert p.stderr.splitlines() == [
        "twin: protocol violation: PE -1 core 0: Duplicate (float) writes UB [132096, 133120) while Duplicate (float) "
        "may still write it (no PipeBarrier<PIPE_V> between them)"]


def test_datacopypad_pads_with_the_first_element_the_padding_value_or_garbage(rules):
    p = _run(rules, "pad_dummy_and_value")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    got = p.stdout.split()
    data = [f"{i + 1}" for i in range(20)]
    assert got[:32] == data + ["1"] * 12  # no padding, isPad false: the first element
    assert got[32:64] == ["7", "7"] + data + ["7"] * 10  # 2 left, isPad: the padding value throughout
    assert got[64:96] == data + ["-nan"] * 12  # isPad, no padding: left open by the docs (0xFFFF)


def test_axpy_rounds_once_where_muls_and_add_round_twice(rules):
    p = _run(rules, "axpy_rounds_once")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    fused = np.float32(2.0 ** -24).view(np.uint32)
    assert p.stdout.split() == ["axpy", f"{fused:08x}", "muls+add", "00000000"]


def test_casts_round_as_numpy_does(rules):
    p = _run(rules, "cast_rounding")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    x = np.array([2055.0, 2053.0, -1.75, 1.75, 65520.0, -0.0, 0.1, 3.5], dtype=np.float32)
    with np.errstate(over="ignore"):
        want = [f"{b:04x}" for b in x.astype(np.float16).view(np.uint16)] + [str(v) for v in x.astype(np.int32)]
    # half to even: 2055 -> 2056, 2053 -> 2052, 65520 -> inf; -0 keeps its sign; toward zero: -1.75 -> -1
    assert p.stdout.split() == want == ["6804", "6802", "bf00", "3f00", "7c00", "8000", "2e66", "4300",
                                        "2055", "2053", "-1", "1", "65520", "0", "0", "3"]


def _line(marker: str) -> int:
    """The line of tests/twin/twin_rules/vector_rules.cpp that carries ``// marker``."""
    lines = SOURCE.read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if ln.rstrip().endswith(f"// {marker}"))


def test_an_event_bit_set_again_before_its_wait_has_run_is_reported_with_both_call_sites(rules):
    """Pipes run ahead of each other: MTE2 can run the second tile's SetFlag<MTE2_V>(0) before V has
    run the WaitFlag of the first, since nothing makes V's wait come first (asc-devkit SetFlag/WaitFlag:
    the bit set twice is undefined). Program order alone (set, wait, set) would hide it."""
    p = _run(rules, "flag_set_twice_in_flight")
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        f"twin: protocol violation: PE -1 core 0: SetFlag<HardEvent::MTE2_V>(0) at twin_rules/vector_rules.cpp:"
        f"{_line('tile-b-set')} may run on MTE2 before WaitFlag<HardEvent::MTE2_V>(0) at "
        f"twin_rules/vector_rules.cpp:{_line('tile-a-wait')} has run on V: nothing orders that wait before this "
        "set, so the event bit can be set twice with no wait between (undefined; the next PipeBarrier<PIPE_ALL> "
        "hangs). Puts in flight on different UB buffers need their own sync_id (asc-devkit SetFlag/WaitFlag; "
        "docs/hardware-rules.md#3-event-flags)"]


@pytest.mark.parametrize("case", ["flag_one_id_per_tile", "flag_ordered_by_a_flag_back", "tensor_at_ub_top"])
def test_an_event_bit_reused_once_its_wait_is_ordered_first_is_accepted(rules, case):
    """Never stricter than the hardware: one id per tile, or MTE2 waiting (V_MTE2) for what V did after
    its wait, orders the first WaitFlag before the second SetFlag; and a tile at the top of the UB
    ([191 KiB, 192 KiB), where SHMEM's own launches keep their scratch) is the kernel's to use."""
    p = _run(rules, case)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_a_second_setflag_in_program_order_is_reported_with_both_call_sites(rules):
    p = _run(rules, "flag_set_twice_in_program_order")
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        f"twin: protocol violation: PE -1 core 0: SetFlag<HardEvent::MTE2_V>(3) at twin_rules/vector_rules.cpp:"
        f"{_line('flag-set-second')} while the SetFlag at twin_rules/vector_rules.cpp:{_line('flag-set-first')} is "
        "not yet waited: two SetFlags on one event bit with no WaitFlag between them are undefined (a SHMEM call "
        "with sync_id 3 pairs its own flags on that id)"]


def test_shmem_puts_may_use_the_ub_up_to_192_kib_as_the_reference_does(shmem_rules, no_leaks):
    """SHMEM's 188 KiB+ area (ACLSHMEM_INTERNAL_UB_BUF_START_ADDR) is used only inside SHMEM's own
    launches; its put paths check ub_limit = 192 KiB. The reference stages 190 KiB at UB offset 64,
    its status block at 32 and its SDMA scratch at 191 KiB: accepted, and every byte arrives."""
    p = subprocess.run([str(shmem_rules), "stage_190k_at_64"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COMBINE_TWIN_SESSION": f"{RUN_TAG}ub190"})
    assert (p.returncode, p.stdout, p.stderr) == (0, "ok row 1 ready 8 sdma 1\n", "")


def test_the_heap_guarantees_what_shmems_does_and_no_more(shmem_rules, no_leaks):
    """SHMEM's heap (src/host/mem/shmem_mgr.cpp) rounds sizes up to 16 B: aclshmem_malloc is 16 B
    aligned only; aclshmem_align takes a power of two (else nullptr), as does a size of 0."""
    p = subprocess.run([str(shmem_rules), "alloc"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COMBINE_TWIN_SESSION": f"{RUN_TAG}alloc"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["alloc 0 32 128 -1 -1 240"]  # 20 -> 32; 64 B at 32; 100 -> 112 B at 128
    assert p.stderr.splitlines() == [
        "twin: PE 0: aclshmem_align: refused: size 64, alignment 48 (SHMEM: size > 0, alignment a power of 2)",
        "twin: PE 0: aclshmem_align: refused: size 0, alignment 64 (SHMEM: size > 0, alignment a power of 2)"]


def test_a_shmem_staging_buffer_past_the_192_kib_ub_is_refused(shmem_rules, no_leaks):
    p = subprocess.run([str(shmem_rules), "stage_past_ub"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COMBINE_TWIN_SESSION": f"{RUN_TAG}ub192"})
    assert p.returncode == 3
    assert p.stderr.strip() == ("twin: PE 0 core 0: aclshmemx_mte_put_nbi (GM -> UB -> GM): MTE staging UB [64, 196672) "
                                "runs past the core's 192 KiB UB (Ascend910B3; SHMEM checks UB ranges against ub_limit = "
                                "192 KiB) (inside aclshmemx_mte_put_nbi called at twin_rules/shmem_rules.cpp:28)")  # the call
