"""Stage 2 (the Ascend C vector reduction) is bit-exact on the twin for every dtype: the
kernel and the golden both reduce in float32 in topk order, then cast once (docs/protocol.md#1-the-combine-problem and docs/protocol.md#3-reference-data-and-the-check). Hand-made cases (case_from_arrays) whose answers a float16 accumulator, an
integer accumulator, rounding instead of truncation, or any other summation order would get
wrong; h = 2068 spans a whole tile (2048 elements) and a 20-element tail that needs
DataCopyPad (40 B for float16, 80 B for int32)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from combine_lab import CaseSpec, make_case, run_case
from combine_lab.case.case import case_from_arrays, golden_rank

H = 2068
NAN = float("nan")


def _fp16_case():
    """Per PE (both alike), x = 1 on tokens 0-2, so each slot adds exactly its scale:
    token 0: [2048, 1 x 7] -> 2055 in float32, 2056 in float16 (half to even); a float16
             accumulator stays at 2048 (each 2048 + 1 rounds back to 2048);
    token 1: [60000, 60000, -60000, -50000] -> 10000 (float16 partial sums overflow to inf);
    token 2: [1, 2^24, -2^24] in topk order -> 0 (1 + 2^24 rounds to 2^24 in float32; any
             other order gives 1), with masked slots (-1, -3) between them whose
             scales (777, 555, NaN) must never be read;
    token 3: every slot masked -> +0."""
    spec = CaseSpec(pes=2, bs=4, h=H, topk=8, expert_per_pe=4, routing="external", dtype="float16_t")
    x = np.ones((2, 4, H))
    x[:, 3] = 7.0
    ids = np.array([[0, 1, 2, 3, 4, 5, 6, 7],
                    [3, 4, 0, 7, -1, -1, -1, -1],
                    [5, -1, 1, -3, 2, -1, -1, -1],
                    [-1] * 8] * 2).reshape(2, 4, 8)
    scales = np.array([[2048, 1, 1, 1, 1, 1, 1, 1],
                       [60000, 60000, -60000, -50000, NAN, NAN, NAN, NAN],
                       [1, 777, 2 ** 24, 555, -2 ** 24, NAN, NAN, NAN],
                       [NAN] * 8] * 2, dtype=np.float64).reshape(2, 4, 8)
    return case_from_arrays(spec, x, ids, scales)


def _int32_case():
    """Per PE: token 0: x = 1, [2048, 1 x 7] -> 2055; token 1: x = 1, [-0.75, -1] -> -1.75,
    truncated toward zero -> -1 (rounding gives -2); token 2: x = 1, [1, 2^24, -2^24] -> 0 in
    float32 topk order (integer arithmetic gives 1); token 3: masked -> 0; token 4: x =
    2^24 + 1, scale 1 -> 2^24 (the float32 input rounds, as the golden's does)."""
    spec = CaseSpec(pes=2, bs=5, h=H, topk=8, expert_per_pe=4, routing="external", dtype="int32_t")
    x = np.ones((2, 5, H), dtype=np.int64)
    x[:, 3] = 5
    x[:, 4] = 2 ** 24 + 1
    m = [-1] * 6
    ids = np.array([[0, 1, 2, 3, 4, 5, 6, 7],
                    [6, 2] + m,
                    [5, -1, 1, -3, 2, -1, -1, -1],
                    [-1] * 8,
                    [1, -1, -1, -1, -1, -1, -1, -1]] * 2).reshape(2, 5, 8)
    scales = np.array([[2048, 1, 1, 1, 1, 1, 1, 1],
                       [-0.75, -1] + [NAN] * 6,
                       [1, 777, 2 ** 24, 555, -2 ** 24, NAN, NAN, NAN],
                       [NAN] * 8,
                       [1] + [NAN] * 7] * 2, dtype=np.float64).reshape(2, 5, 8)
    return case_from_arrays(spec, x, ids, scales)


def _bf16_case():
    """bf16 (issue 34), per PE: x = 1 on tokens 0-2:
    token 0: [256, 1 x 7] -> 263 in float32, 264 in bfloat16 (half to even; truncation gives
             262, a bfloat16 accumulator stays at 256: each 256 + 1 rounds back);
    token 1: [1, 2^24, -2^24] in topk order -> 0, masked slots between (never read);
    token 2: [-1, -(2^-8 + 2^-16)] -> just past half a step below -1: -1.0078125 (truncation
             gives -1);
    token 3: every slot masked -> +0. h = 2068 as for the others: a whole tile and a
    20-element tail (40 B, by DataCopyPad)."""
    spec = CaseSpec(pes=2, bs=4, h=H, topk=8, expert_per_pe=4, routing="external", dtype="bfloat16_t")
    x = np.ones((2, 4, H))
    x[:, 3] = 7.0
    ids = np.array([[0, 1, 2, 3, 4, 5, 6, 7],
                    [5, -1, 1, -3, 2, -1, -1, -1],
                    [3, 6, -1, -1, -1, -1, -1, -1],
                    [-1] * 8] * 2).reshape(2, 4, 8)
    scales = np.array([[256, 1, 1, 1, 1, 1, 1, 1],
                       [1, 777, 2 ** 24, 555, -2 ** 24, NAN, NAN, NAN],
                       [-1, -(2.0 ** -8 + 2.0 ** -16)] + [NAN] * 6,
                       [NAN] * 8] * 2, dtype=np.float64).reshape(2, 4, 8)
    return case_from_arrays(spec, x, ids, scales)


FP16_EXPECTED = np.array([2056.0, 10000.0, 0.0, 0.0], dtype=np.float16)
BF16_EXPECTED = np.array([264.0, 0.0, -1.0078125, 0.0], dtype=ml_dtypes.bfloat16)
INT32_EXPECTED = np.array([2055, -1, 0, 0, 2 ** 24], dtype=np.int32)


@pytest.fixture(scope="module")
def fp16_case():
    return _fp16_case()


@pytest.fixture(scope="module")
def int32_case():
    return _int32_case()


@pytest.fixture(scope="module")
def bf16_case():
    return _bf16_case()


def test_the_hand_made_goldens_are_what_the_docstrings_say(fp16_case, int32_case, bf16_case):
    for case, want in ((fp16_case, FP16_EXPECTED), (int32_case, INT32_EXPECTED), (bf16_case, BF16_EXPECTED)):
        for r in range(2):
            g = golden_rank(case.x[r], case.expert_ids[r], case.expert_scales[r], case.spec.moe_expert_num)
            assert g.tobytes() == np.repeat(want[:, None], H, axis=1).tobytes()


@pytest.mark.parametrize("variant,min_sdma,seed", [("classic", 2 << 20, None), ("doubleplane", 0, None),
                                                   ("classic", 2 << 20, 3), ("doubleplane", 0, 4)])
def test_float16_stage2_is_bit_exact(fp16_case, variant, min_sdma, seed, no_leaks):
    res = run_case(fp16_case, variant, min_sdma_bytes=min_sdma, chaos_seed=seed)
    assert res.ok and res.violation_count == 0, (res.checks, res.violations)
    want = np.repeat(FP16_EXPECTED[:, None], H, axis=1)
    for r in range(2):
        assert res.x_out[r].tobytes() == want.tobytes()  # +0 where 0: the sign bit too


@pytest.mark.parametrize("variant,min_sdma,seed", [("classic", 2 << 20, None), ("doubleplane", 0, 2)])
def test_int32_stage2_is_bit_exact(int32_case, variant, min_sdma, seed, no_leaks):
    res = run_case(int32_case, variant, min_sdma_bytes=min_sdma, chaos_seed=seed)
    assert res.ok and res.violation_count == 0, (res.checks, res.violations)
    want = np.repeat(INT32_EXPECTED[:, None], H, axis=1)
    for r in range(2):
        assert res.x_out[r].tobytes() == want.tobytes()


@pytest.mark.parametrize("variant,min_sdma,seed", [("classic", 2 << 20, None), ("doubleplane", 0, 5)])
def test_bfloat16_stage2_is_bit_exact(bf16_case, variant, min_sdma, seed, no_leaks):
    """bf16 goes through the vector Casts (bfloat16_t -> float CAST_NONE, float -> bfloat16_t
    CAST_RINT), the only path it has (docs/protocol.md#2-dispatch-layout)."""
    res = run_case(bf16_case, variant, min_sdma_bytes=min_sdma, chaos_seed=seed)
    assert res.ok and res.violation_count == 0, (res.checks, res.violations)
    want = np.repeat(BF16_EXPECTED[:, None], H, axis=1)
    for r in range(2):
        assert res.x_out[r].tobytes() == want.tobytes()


@pytest.mark.parametrize("pes", [2, 3, 8, pytest.param(64, marks=pytest.mark.slow)])
def test_bfloat16_drawn_cases_are_bit_exact_at_any_pes(pes, no_leaks):
    """A drawn bf16 case (zipf routing, some slots masked) passes bit for bit at 2 to 64 PEs, both variants."""
    spec = CaseSpec(pes=pes, bs=4 if pes > 8 else 16, h=96, topk=2, expert_per_pe=2, dtype="bfloat16_t",
                    routing="zipf:1.2", masked_fraction=0.1)
    case = make_case(spec)
    for variant in ("classic", "doubleplane"):
        res = run_case(case, variant, min_sdma_bytes=0)
        assert res.ok and res.violation_count == 0, (pes, variant, res.checks, res.violations)
        for r in range(pes):
            assert res.x_out[r].view(np.uint16).tobytes() == case.golden(r).view(np.uint16).tobytes(), (variant, r)


@pytest.mark.parametrize("dtype", ["float16_t", "int32_t", "bfloat16_t"])
def test_portable_loops_give_the_same_bytes_as_the_vectorised_ones(dtype, no_leaks):
    """COMBINE_TWIN_NO_SIMD=1 takes the twin's plain loops instead of AVX2/F16C (the fallback
    for CPUs without them): the same x_out, byte for byte, equal to the golden."""
    spec = CaseSpec(pes=2, bs=16, h=H, topk=4, expert_per_pe=2, dtype=dtype, masked_fraction=0.2)
    fast = run_case(spec, "classic")
    plain = run_case(spec, "classic", env={"COMBINE_TWIN_NO_SIMD": "1"})
    assert fast.ok and plain.ok
    for r in range(2):
        assert fast.x_out[r].tobytes() == plain.x_out[r].tobytes()
