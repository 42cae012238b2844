import ml_dtypes
import numpy as np
import pytest

from combine_lab.case.spec import DTYPES, CaseSpec, SpecError
from combine_lab.case.traces import list_traces


def test_properties_of_a_float16_case():
    s = CaseSpec(pes=4, bs=16, h=7168, topk=8, expert_per_pe=2, dtype="float16_t")
    assert s.moe_expert_num == 8
    assert s.itemsize == 2
    assert s.np_dtype is np.float16
    assert s.row_bytes == 14336
    assert s.case_id == "shape_16_7168_8_8_4"
    assert s.capacity_rows == 512


def test_to_meta_holds_reference_keys_then_extras():
    s = CaseSpec(2, 3, 5, 2, 4, seed=7, routing="zipf:1.5", masked_fraction=0.25)
    assert s.to_meta() == {
        "pe_size": 2, "bs": 3, "h": 5, "topk": 2, "expert_per_pe": 4, "moe_expert_num": 8,
        "dtype": "int32_t", "expert_compute": "identity",
        "seed": 7, "routing": "zipf:1.5", "masked_fraction": 0.25,
    }
    assert list(s.to_meta())[:8] == ["pe_size", "bs", "h", "topk", "expert_per_pe",
                                     "moe_expert_num", "dtype", "expert_compute"]


def test_dtypes_table():
    assert DTYPES == {"int32_t": np.int32, "float16_t": np.float16, "bfloat16_t": ml_dtypes.bfloat16}
    assert CaseSpec(1, 1, 1, 1, 1).itemsize == 4
    bf = CaseSpec(2, 3, 5, 1, 1, dtype="bfloat16_t")
    assert (bf.itemsize, bf.row_bytes, bf.to_meta()["dtype"]) == (2, 10, "bfloat16_t")


def test_numpy_ints_are_stored_as_python_ints():
    s = CaseSpec(np.int64(2), np.int32(3), 4, 1, 1, seed=np.uint8(5))
    assert type(s.pes) is int and type(s.bs) is int and type(s.seed) is int
    assert s == CaseSpec(2, 3, 4, 1, 1, seed=5)


def test_uniform_allows_topk_above_expert_count():
    # uniform repeats choices, so topk > E is legal (docs/protocol.md#3-reference-data-and-the-check)
    assert CaseSpec(1, 2, 4, topk=9, expert_per_pe=8).topk == 9


@pytest.mark.parametrize("kwargs, message", [
    (dict(pes=0), "pes=0: must be an int >= 1"),
    (dict(bs=2.0), "bs=2.0: must be an int >= 1"),
    (dict(h=True), "h=True: must be an int >= 1"),
    (dict(topk=-1), "topk=-1: must be an int >= 1"),
    (dict(expert_per_pe="8"), "expert_per_pe='8': must be an int >= 1"),
    (dict(dtype="float32_t"), "dtype='float32_t': must be one of 'int32_t', 'float16_t', 'bfloat16_t'"),
    (dict(seed=-1), "seed=-1: must be an int >= 0"),
    (dict(masked_fraction=1.5), "masked_fraction=1.5: must be a number in [0, 1]"),
    (dict(masked_fraction=float("nan")), "masked_fraction=nan: must be a number in [0, 1]"),
    (dict(pes=1, topk=9, routing="zipf:1.2"),
     "topk=9: must be <= moe_expert_num=8 when choices are distinct (routing 'zipf:1.2')"),
    (dict(routing="zipf"), "routing='zipf': S must be a finite number >= 0, e.g. 'zipf:1.2'"),
    (dict(routing="zipf:-1"), "routing='zipf:-1': S must be a finite number >= 0, e.g. 'zipf:1.2'"),
    (dict(routing="hot-rank:x"), "routing='hot-rank:x': F must be a number in [0, 1], e.g. 'hot-rank:0.1'"),
    (dict(routing="deepseek:2"), "routing='deepseek:2': model 'deepseek' takes no parameter"),
    (dict(routing="normal"),
     "routing='normal': unknown model 'normal'; allowed: uniform, zipf:S, hot-expert:F, hot-rank:F, "
     "trace:MODEL/DOMAIN/LAYER, deepseek, external"),
    (dict(routing=3),
     "routing=3: must be a string, one of uniform, zipf:S, hot-expert:F, hot-rank:F, "
     "trace:MODEL/DOMAIN/LAYER, deepseek, external"),
    (dict(routing="hot-expert:0.2"),
     "routing='hot-expert:0.2': F=0.2 must be <= 1/topk=0.125 (topk=8): a token picks each expert at most once"),
    (dict(routing="hot-expert:0.1", pes=2, expert_per_pe=4),
     "routing='hot-expert:0.1': F=0.1 must equal 1/topk=0.125 when topk=8 == moe_expert_num=8: "
     "every token picks every expert"),
    (dict(routing="hot-rank:0.9", expert_per_pe=4),
     "routing='hot-rank:0.9': F=0.9 must be <= min(topk, expert_per_pe)/topk=0.5 (topk=8, expert_per_pe=4): "
     "a token picks at most 4 distinct experts of one PE"),
    (dict(routing="hot-rank:0.1", pes=2, expert_per_pe=5),
     "routing='hot-rank:0.1': F=0.1 must be >= (topk - (moe_expert_num - expert_per_pe))/topk=0.375 "
     "(topk=8, moe_expert_num=10, expert_per_pe=5): a token picks at most 5 distinct experts off the hot PE"),
    (dict(routing="trace:olmoe/github/7"),
     "routing='trace:olmoe/github/7': moe_expert_num=32 (pes*expert_per_pe) must equal the trace's expert count 64"),
    (dict(routing="trace:olmoe/github/8"),
     "routing='trace:olmoe/github/8': unknown trace 'olmoe/github/8'; names are MODEL/DOMAIN/LAYER, one of "
     + ", ".join(t.removeprefix("trace:") for t in list_traces())
     + "; nearest: olmoe/github/7, olmoe/github/0, olmoe/github/15"),
])
def test_spec_errors_name_field_value_and_rule(kwargs, message):
    base = dict(pes=4, bs=2, h=8, topk=8, expert_per_pe=8)
    base.update(kwargs)
    with pytest.raises(SpecError) as err:
        CaseSpec(**base)
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)


def test_hot_rank_single_pe_needs_everything_on_it():
    assert CaseSpec(1, 2, 2, 2, 4, routing="hot-rank:1").routing == "hot-rank:1"
    with pytest.raises(SpecError, match=r"^routing='hot-rank:0.5': F=0.5 must be >= .*=1 "):
        CaseSpec(1, 2, 2, 2, 4, routing="hot-rank:0.5")
