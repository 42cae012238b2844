import ml_dtypes
import numpy as np
import pytest

from combine_lab.case import routing
from combine_lab.case.case import Case, golden_rank, golden_x_out, make_case
from combine_lab.case.spec import CaseSpec
from naive_case import make_case_naive

FIELDS = ("expand_x", "assist_info_for_combine", "ep_recv_count", "expert_ids", "expert_scales", "golden_x_out")


def handmade_case():
    """pes 2, expert_per_pe 2 (E 4), bs 2, topk 2, h 3; uniform spec so repeats are legal."""
    spec = CaseSpec(pes=2, bs=2, h=3, topk=2, expert_per_pe=2, seed=3)
    ids = np.array([[[0, 3], [1, -1]],
                    [[3, 2], [0, 0]]], dtype=np.int32)
    return Case(spec, ids, np.ones((2, 2, 2), dtype=np.float32))


def test_counts_of_a_handmade_routing():
    case = handmade_case()
    # segment = local_expert * pes + src_rank
    assert case.segment_counts.tolist() == [[1, 2, 1, 0], [0, 1, 1, 1]]
    assert case.ep_recv_count.dtype == np.int32
    assert case.ep_recv_count.tolist() == [[1, 3, 4, 4], [0, 1, 2, 3]]


def test_rank_inputs_of_a_handmade_routing():
    case = handmade_case()
    x = case.x
    r0 = case.rank_inputs(0)
    rows = [[0, 0, 0], [1, 1, 0], [1, 1, 1], [0, 1, 0]]  # expert 0: src 0 then src 1; expert 1: src 0
    assert r0.assist_info_for_combine.tolist() == rows + [[0, 0, 0]] * 4
    assert r0.expand_x.tolist() == [x[0, 0].tolist(), x[1, 1].tolist(), x[1, 1].tolist(), x[0, 1].tolist()] \
        + [[0, 0, 0]] * 4
    assert r0.ep_recv_count.tolist() == [1, 3, 4, 4]
    assert r0.expert_ids.tolist() == [[0, 3], [1, -1]]
    # int32, scales 1: golden = x times the number of valid slots of each token
    assert r0.golden_x_out.tolist() == [(2 * x[0, 0]).tolist(), x[0, 1].tolist()]
    r1 = case.rank_inputs(1)
    assert r1.assist_info_for_combine[:3].tolist() == [[1, 0, 1], [0, 0, 1], [1, 0, 0]]
    assert r1.golden_x_out.tolist() == [(2 * x[1, 0]).tolist(), (2 * x[1, 1]).tolist()]


def test_golden_hand_computed_float16():
    x = np.array([[1.5, -2.0], [0.25, 4.0]], dtype=np.float16)
    ids = np.array([[0, 1], [-1, 1]], dtype=np.int32)  # -1: masked, not summed
    scales = np.array([[0.5, 0.25], [0.9, 2.0]], dtype=np.float32)
    got = golden_rank(x, ids, scales, 4)
    assert got.dtype == np.float16
    assert got.tolist() == [[1.125, -1.5], [0.5, 8.0]]
    ids[1, 1] = 7  # out of range = masked too: nothing is summed
    assert golden_rank(x, ids, scales, 4).tolist() == [[1.125, -1.5], [0.0, 0.0]]


def test_golden_bfloat16_accumulates_in_float32_then_rounds_half_to_even():
    """bf16 (issue 34): float32 products and sums in topk order, then one rounding to nearest even,
    as the kernel's Cast(bfloat16_t <- float, CAST_RINT) rounds (docs/protocol.md#3-reference-data-and-the-check)."""
    bf16 = ml_dtypes.bfloat16
    x = np.array([[1.0, 1.0, -3.0]], dtype=bf16)
    ids = np.zeros((1, 2), dtype=np.int32)
    # 1 + 3*2^-9 is 3/4 of bf16's step (2^-7) above 1: up to 1 + 2^-7 (truncation would give 1.0);
    # 1 + 2^-8 is half a step: to the even neighbour, 1.0.
    s = np.array([[1.0, 3 * 2.0 ** -9]], dtype=np.float32)
    got = golden_rank(x, ids, s, 1)
    assert got.dtype == bf16
    assert got.view(np.uint16).tolist() == [[0x3F81, 0x3F81, 0xC041]]  # 1.0078125 twice, -3.015625
    s[0, 1] = 2.0 ** -8
    assert golden_rank(x, ids, s, 1).astype(np.float32).tolist() == [[1.0, 1.0, -3.015625]]


def test_golden_rounds_product_then_sum_in_topk_order():
    # Found by search: sequential float32 (x*s0) + (x*s1) + (x*s2) rounds to a different
    # float16 than x*(s0+s1+s2) or than summing k in reverse order.
    x = np.array([[0.1929]], dtype=np.float16)  # 0.19287109375
    s = np.array([[0.8080536127090454, 0.7897536754608154, 0.35725605487823486]], dtype=np.float32)
    ids = np.zeros((1, 3), dtype=np.int32)
    assert golden_rank(x, ids, s, 1).tolist() == [[0.377197265625]]
    assert float(np.float16(np.float32(x[0, 0]) * s.sum())) == 0.376953125  # the forbidden shortcut
    assert golden_rank(x, ids, s[:, ::-1].copy(), 1).tolist() == [[0.376953125]]  # order matters


def test_golden_x_out_stacks_every_pe():
    spec = CaseSpec(3, 4, 5, 2, 1, dtype="float16_t", masked_fraction=0.25)
    case = make_case(spec)
    g = golden_x_out(case)
    assert g.shape == (3, 4, 5) and g.dtype == np.float16
    for r in range(3):
        assert g[r].tobytes() == case.rank_inputs(r).golden_x_out.tobytes()


def test_uniform_int32_golden_is_x_times_valid_count():
    spec = CaseSpec(2, 6, 4, 3, 2, seed=9, masked_fraction=0.2)
    case = make_case(spec)
    valid = (case.expert_ids >= 0).sum(axis=2)
    assert (golden_x_out(case) == case.x * valid[..., None]).all()
    assert (case.expert_ids == -1).sum() == round(0.2 * 36)


@pytest.mark.parametrize("spec", [
    CaseSpec(2, 3, 4, 2, 2),
    CaseSpec(3, 4, 5, 3, 2, dtype="float16_t", seed=1, masked_fraction=0.3),
    CaseSpec(2, 5, 3, 9, 2, dtype="float16_t", seed=2),  # uniform, topk > E: repeats
    CaseSpec(1, 6, 4, 3, 4, dtype="float16_t", seed=3, routing="zipf:1.0", masked_fraction=0.1),
    CaseSpec(4, 4, 2, 4, 3, dtype="float16_t", seed=4, routing="hot-rank:0.5", masked_fraction=0.5),
    CaseSpec(4, 5, 3, 2, 2, seed=5, routing="deepseek", masked_fraction=0.05),
    CaseSpec(2, 8, 2, 2, 1, dtype="float16_t", seed=6, masked_fraction=1.0),
], ids=lambda s: f"{s.routing}-{s.dtype}-{s.masked_fraction}-{s.case_id}")
def test_vectorised_equals_naive_loop(spec):
    case = make_case(spec)
    naive = make_case_naive(spec)
    for r in range(spec.pes):
        fast = case.rank_inputs(r)
        for field in FIELDS:
            a, b = getattr(fast, field), naive[r][field]
            assert a.dtype == b.dtype and a.shape == b.shape, field
            assert a.tobytes() == b.tobytes(), (r, field)


def test_rank_inputs_shapes_and_dtypes():
    spec = CaseSpec(2, 3, 5, 2, 4, dtype="float16_t")
    inp = make_case(spec).rank_inputs(1)
    assert inp.expand_x.shape == (12, 5) and inp.expand_x.dtype == np.float16
    assert inp.assist_info_for_combine.shape == (12, 3) and inp.assist_info_for_combine.dtype == np.int32
    assert inp.ep_recv_count.shape == (8,) and inp.ep_recv_count.dtype == np.int32
    assert inp.expert_ids.shape == (3, 2) and inp.expert_scales.dtype == np.float32
    assert inp.golden_x_out.shape == (3, 5) and inp.golden_x_out.dtype == np.float16


def test_rank_index_out_of_range():
    case = make_case(CaseSpec(2, 1, 1, 1, 1))
    with pytest.raises(IndexError) as err:
        case.rank_inputs(2)
    assert str(err.value) == "r=2: must be in [0, pes=2)"


def test_make_case_for_a_big_non_uniform_case_draws_no_x(monkeypatch):
    monkeypatch.setattr(routing, "_draw_x_from", lambda *a: pytest.fail("x drawn"))
    case = make_case(CaseSpec(16, 512, 7168, 8, 8, routing="zipf:1.2"))
    assert case.ep_recv_count.shape == (16, 128)
    assert case.ep_recv_count[:, -1].sum() == 16 * 512 * 8


from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from combine_lab.case.spec import SpecError  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pes=st.integers(1, 3), epp=st.integers(1, 3), bs=st.integers(1, 4), h=st.integers(1, 3),
       topk=st.integers(1, 4), dtype=st.sampled_from(["int32_t", "float16_t"]), seed=st.integers(0, 2**32),
       model=st.sampled_from(["uniform", "zipf:1.1", "hot-expert:0.25", "hot-rank:0.5", "deepseek"]),
       masked=st.sampled_from([0.0, 0.3, 1.0]))
def test_vectorised_equals_naive_loop_property(pes, epp, bs, h, topk, dtype, seed, model, masked):
    try:
        spec = CaseSpec(pes, bs, h, topk, epp, dtype=dtype, seed=seed, routing=model, masked_fraction=masked)
    except SpecError:
        assume(False)
    case = make_case(spec)
    naive = make_case_naive(spec)
    for r in range(pes):
        fast = case.rank_inputs(r)
        for field in FIELDS:
            assert getattr(fast, field).tobytes() == naive[r][field].tobytes(), (r, field)


# ---- issue 9 item 1: ids outside [0, E) are masked whatever their integer dtype ----

from combine_lab.case.case import as_expert_ids, case_from_arrays  # noqa: E402
from combine_lab.planning.planner import plan  # noqa: E402


def test_int64_id_past_int32_is_masked_not_cast_into_range():
    """The field report: pes 2, expert_per_pe 1, bs 1, h 4, topk 2, ids [[0, 2**32 + 1]] on rank 0.
    A plain cast made the second id 1 (a valid expert): golden 2x instead of 1x."""
    spec = CaseSpec(pes=2, bs=1, h=4, topk=2, expert_per_pe=1, routing="external")
    x = np.arange(8, dtype=np.int32).reshape(2, 1, 4)
    ids = np.array([[[0, 2**32 + 1]], [[1, -1]]], dtype=np.int64)
    case = case_from_arrays(spec, x, ids, np.ones((2, 1, 2)))
    assert case.expert_ids.dtype == np.int32
    assert case.expert_ids.tolist() == [[[0, -1]], [[1, -1]]]
    assert case.golden(0).tolist() == [[0, 1, 2, 3]]  # 1x: the second slot is masked
    assert case.golden(1).tolist() == [[4, 5, 6, 7]]
    assert case.segment_counts.tolist() == [[1, 0], [0, 1]]
    p = plan(case, "doubleplane")
    assert p.segments["token_count"].tolist() == [1, 0, 0, 1]


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_ids_outside_E_are_masked_in_every_integer_dtype(dtype):
    spec = CaseSpec(pes=2, bs=2, h=3, topk=2, expert_per_pe=1, routing="external")  # E = 2
    info = np.iinfo(dtype)
    far = info.max  # 127 ... 2**64 - 1: outside [0, 2) in every dtype
    ids = np.array([[[0, 2], [far, 1]], [[1, far], [0, 0]]], dtype=dtype)
    if info.min < 0:
        ids[1, 1, 1] = -1
    x = np.ones((2, 2, 3))
    case = case_from_arrays(spec, x, ids, np.ones((2, 2, 2)))
    assert case.expert_ids.dtype == np.int32
    kept = case.expert_ids
    assert kept[0, 0].tolist() == [0, 2]  # E itself fits int32: kept, masked
    assert kept[0, 1, 1] == 1 and kept[1, 0, 0] == 1 and kept[1, 1, 0] == 0
    masked = (kept < 0) | (kept >= 2)
    assert masked.tolist() == [[[False, True], [True, False]], [[False, True], [False, dtype.startswith("int")]]]
    assert np.array_equal(golden_x_out(case)[:, :, 0], (~masked).sum(axis=2))
    assert case.segment_counts.sum() == int((~masked).sum())


@pytest.mark.parametrize("ids, dtype_name", [(np.zeros((2, 1, 2)), "float64"), (np.zeros((2, 1, 2), bool), "bool"),
                                             (np.array([[["0", "1"]], [["1", "0"]]]), "str32")])
def test_non_integer_ids_refused_naming_the_field(ids, dtype_name):
    spec = CaseSpec(pes=2, bs=1, h=4, topk=2, expert_per_pe=1, routing="external")
    with pytest.raises(SpecError) as err:
        case_from_arrays(spec, np.ones((2, 1, 4)), ids, np.ones((2, 1, 2)))
    assert str(err.value) == (f"expert_ids: dtype {dtype_name}: must be an integer array (expert ids; ids outside "
                              "[0, 2) are masked)")
    with pytest.raises(SpecError) as err:
        case_from_arrays(spec, np.ones((2, 1, 4)), np.zeros((2, 1, 2), int), np.full((2, 1, 2), "a"))
    assert str(err.value) == "expert_scales: dtype str32: must be an array of numbers (int or float)"


def test_int32_ids_are_not_copied():
    ids = np.array([[0, 5, -1]], dtype=np.int32)
    assert as_expert_ids(ids, 2) is ids
