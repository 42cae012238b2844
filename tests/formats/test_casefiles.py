import json

import numpy as np
import pytest

from combine_lab.case.case import Case, case_from_arrays, make_case
from combine_lab.formats.casefiles import CaseFileError, CheckResult, check_x_out, read_case, write_case
from combine_lab.case.spec import CaseSpec, SpecError
from combine_lab.errors import ParameterError

FILES = ("expand_x.bin", "assist_info.bin", "ep_recv_count.bin", "expert_ids.bin", "expert_scales.bin",
         "golden_x_out.bin")
FIELDS = ("expand_x", "assist_info_for_combine", "ep_recv_count", "expert_ids", "expert_scales", "golden_x_out")

SPEC = CaseSpec(pes=2, bs=3, h=4, topk=2, expert_per_pe=2, dtype="float16_t", seed=5, masked_fraction=0.25)


@pytest.fixture
def case_dir(tmp_path):
    return write_case(make_case(SPEC), tmp_path)


def tree_bytes(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_layout_and_exact_bytes(tmp_path):
    spec = CaseSpec(pes=2, bs=2, h=3, topk=2, expert_per_pe=2, seed=3)
    ids = np.array([[[0, 3], [1, -1]], [[3, 2], [0, 0]]], dtype=np.int32)
    d = write_case(Case(spec, ids, np.ones((2, 2, 2), dtype=np.float32)), tmp_path)
    assert d == tmp_path / "golden" / "shape_2_3_2_4_2"
    assert sorted(tree_bytes(d)) == ["meta.json"] + [f"rank_{r}/{f}" for r in (0, 1) for f in sorted(FILES)]
    assert (d / "rank_0" / "ep_recv_count.bin").read_bytes() == bytes.fromhex(
        "01000000" "03000000" "04000000" "04000000")
    assert (d / "rank_1" / "expert_ids.bin").read_bytes() == bytes.fromhex(
        "03000000" "02000000" "00000000" "00000000")
    assert (d / "rank_0" / "expert_scales.bin").read_bytes() == bytes.fromhex("0000803f") * 4
    assert (d / "rank_0" / "assist_info.bin").read_bytes()[:24] == bytes.fromhex(
        "00000000" "00000000" "00000000" "01000000" "01000000" "00000000")
    assert (d / "rank_0" / "expand_x.bin").stat().st_size == 8 * 3 * 4
    assert (d / "meta.json").read_text() == (
        '{\n  "pe_size": 2,\n  "bs": 2,\n  "h": 3,\n  "topk": 2,\n  "expert_per_pe": 2,\n'
        '  "moe_expert_num": 4,\n  "dtype": "int32_t",\n  "expert_compute": "identity",\n'
        '  "seed": 3,\n  "routing": "uniform",\n  "masked_fraction": 0.0\n}\n')


def test_round_trip_is_byte_identical(case_dir, tmp_path):
    case = make_case(SPEC)
    back = read_case(case_dir)
    assert back.spec == SPEC
    assert back.ep_recv_count.tobytes() == case.ep_recv_count.tobytes()
    assert back.expert_ids.tobytes() == case.expert_ids.tobytes()
    assert back.expert_scales.tobytes() == case.expert_scales.tobytes()
    for r in range(SPEC.pes):
        a, b = case.rank_inputs(r), back.rank_inputs(r)
        for f in FIELDS:
            assert getattr(a, f).shape == getattr(b, f).shape
            assert getattr(a, f).tobytes() == getattr(b, f).tobytes(), f
    again = write_case(back, tmp_path / "again")
    assert tree_bytes(again) == tree_bytes(case_dir)


def test_reference_keys_only(case_dir):
    meta = json.loads((case_dir / "meta.json").read_text())
    for k in ("seed", "routing", "masked_fraction"):
        del meta[k]
    (case_dir / "meta.json").write_text(json.dumps(meta))
    back = read_case(case_dir)
    assert back.spec.routing == "external"
    assert back.spec.masked_fraction == 0.25  # measured: 3 of 12 slots are -1
    assert back.meta() == meta
    with pytest.raises(CaseFileError) as err:
        back.x
    assert str(err.value) == f"{case_dir}: x is not stored in case files; use rank_inputs(r)"


def test_missing_meta(tmp_path):
    with pytest.raises(CaseFileError) as err:
        read_case(tmp_path)
    assert str(err.value) == f"{tmp_path / 'meta.json'}: missing file; expected the case's meta.json " \
                             "(docs/formats.md#1-case-files)"


def test_missing_rank_file(case_dir):
    path = case_dir / "rank_1" / "expert_scales.bin"
    path.unlink()
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: missing file; expected 24 bytes (float32 [3, 2]) for shape_3_4_2_4_2"


def test_truncated_file(case_dir):
    path = case_dir / "rank_0" / "expand_x.bin"
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: 94 bytes found, expected 96 bytes (float16 [12, 4]) for shape_3_4_2_4_2"


def put(path, values, dtype="<i4"):
    path.write_bytes(np.asarray(values, dtype=dtype).tobytes())


def test_decreasing_count(case_dir):
    path = case_dir / "rank_1" / "ep_recv_count.bin"
    put(path, [2, 1, 3, 4])
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: ep_recv_count[1]=1 < ep_recv_count[0]=2; " \
                             "expected non-decreasing cumulative counts"


def test_count_past_capacity(case_dir):
    path = case_dir / "rank_0" / "ep_recv_count.bin"
    put(path, [1, 2, 13, 13])
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: ep_recv_count[2]=13 exceeds capacity pes*bs*topk=12"


def test_count_not_matching_routing(case_dir):
    path = case_dir / "rank_0" / "ep_recv_count.bin"
    counts = np.fromfile(path, dtype="<i4")
    found = np.diff(counts, prepend=0)
    put(path, counts + 1)  # segment 0 gets one row more than routed
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: segment 0 (local_expert 0, src_rank 0) has {found[0] + 1} rows, but " \
                             f"the expert_ids of all ranks route {found[0]} slots there"


def test_negative_count(case_dir):
    path = case_dir / "rank_0" / "ep_recv_count.bin"
    put(path, [-1, 0, 0, 0])
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: ep_recv_count[0]=-1 is negative; counts are cumulative row counts >= 0"


def test_assist_row_out_of_range(case_dir):
    path = case_dir / "rank_1" / "assist_info.bin"
    rows = np.fromfile(path, dtype="<i4").reshape(-1, 3)
    rows[1, 1] = 3  # token_id 3 with bs 3
    put(path, rows)
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: row 1 = {rows[1].tolist()} (src_rank, token_id, topk_id): " \
                             "token_id=3 out of range [0, 3)"


def test_assist_rows_out_of_order_or_in_the_wrong_segment(case_dir):
    case = read_case(case_dir)
    # the seeded case: PE 0 receives [0,2,1] [1,2,1] | [0,0,0] [0,2,0] | [1,2,0]
    assert case.ep_recv_count[0].tolist() == [1, 2, 4, 5]
    path = case_dir / "rank_0" / "assist_info.bin"
    rows = np.fromfile(path, dtype="<i4").reshape(-1, 3)
    assert rows[:5].tolist() == [[0, 2, 1], [1, 2, 1], [0, 0, 0], [0, 2, 0], [1, 2, 0]]
    rows[[2, 3]] = rows[[3, 2]]  # same segment, swapped
    put(path, rows)
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: rows 2 and 3 ([0, 2, 0], [0, 0, 0]) are not in increasing " \
                             "(token_id, topk_id) order within their segment"
    rows[[2, 3]] = rows[[3, 2]]
    rows[0] = [1, 0, 0]  # a src_rank 1 row inside the (local_expert 0, src_rank 0) segment
    put(path, rows)
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: row 0 = [1, 0, 0] lies in segment 0 (local_expert 0, src_rank 0) but " \
                             "rank 1's expert_ids[0, 0]=2; expected src_rank 0 and expert 0"


def test_expert_id_E_is_a_masked_slot(tmp_path):
    """Ids outside [0, E) (-1, E as "not routed" padding) are masked in files too: read_case agrees with
    the golden and the counts written from the same routing (it used to refuse E)."""
    spec = CaseSpec(pes=2, bs=3, h=4, topk=2, expert_per_pe=2, dtype="float16_t", routing="external")
    ids = np.array([[[0, 4], [3, -1], [4, 4]], [[1, 2], [4, 0], [3, 3]]], dtype=np.int64)
    x = np.linspace(-1, 1, 24).reshape(2, 3, 4)
    made = case_from_arrays(spec, x, ids, np.full((2, 3, 2), 0.5))
    case_dir = write_case(made, tmp_path)
    assert np.fromfile(case_dir / "rank_0" / "expert_ids.bin", dtype="<i4").tolist() == [0, 4, 3, -1, 4, 4]
    got = read_case(case_dir)
    assert got.expert_ids.tolist() == ids.tolist()
    assert got.segment_counts.tolist() == made.segment_counts.tolist()
    assert got.segment_counts.sum() == 7  # the valid ids: 0, 3 on rank 0; 1, 2, 0, 3, 3 on rank 1
    for r in range(2):
        assert got.golden(r).tobytes() == made.golden(r).tobytes()
    assert made.golden(0)[2].tolist() == [0.0] * 4  # token 2 of rank 0: both slots masked


def test_masked_share_found_from_files_counts_ids_at_or_above_E(tmp_path):
    spec = CaseSpec(pes=2, bs=2, h=2, topk=2, expert_per_pe=1, routing="external")
    ids = np.array([[[0, 2], [1, 1]], [[-1, 0], [7, 1]]], dtype=np.int32)
    case_dir = write_case(case_from_arrays(spec, np.ones((2, 2, 2)), ids, np.ones((2, 2, 2))), tmp_path)
    edit_meta(case_dir, masked_fraction=None)
    assert read_case(case_dir).spec.masked_fraction == 3 / 8


def edit_meta(case_dir, **changes):
    path = case_dir / "meta.json"
    meta = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            del meta[k]
        else:
            meta[k] = v
    path.write_text(json.dumps(meta))
    return path


@pytest.mark.parametrize("changes, message", [
    (dict(moe_expert_num=8), "moe_expert_num=8, expected pe_size*expert_per_pe=2*2=4"),
    (dict(h=None, bs=None), "missing keys ['bs', 'h']; expected all of ['pe_size', 'bs', 'h', 'topk', "
                            "'expert_per_pe', 'moe_expert_num', 'dtype', 'expert_compute']"),
    (dict(dtype="float32_t"), "dtype='float32_t': must be one of 'int32_t', 'float16_t', 'bfloat16_t'"),
    (dict(topk=0), "topk=0: must be an int >= 1"),
    (dict(expert_compute=1), "expert_compute=1, expected a string ('identity')"),
])
def test_meta_inconsistent(case_dir, changes, message):
    path = edit_meta(case_dir, **changes)
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{path}: {message}"


def test_meta_not_json(case_dir):
    path = case_dir / "meta.json"
    path.write_text("{")
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value).startswith(f"{path}: not valid JSON (Expecting property name")


def test_directory_name_must_match_meta(case_dir):
    edit_meta(case_dir, h=8)
    with pytest.raises(CaseFileError) as err:
        read_case(case_dir)
    assert str(err.value) == f"{case_dir}: directory name 'shape_3_4_2_4_2' does not match meta.json's case id " \
                             "'shape_3_8_2_4_2'"


def test_check_x_out_int32_is_bit_exact():
    g = np.array([[1, 2], [3, -4]], dtype=np.int32)
    assert check_x_out(g.copy(), g, "int32_t") == CheckResult(True, 0.0, 0, None)
    x = g.copy()
    x[1, 0] = 4
    x[1, 1] = 2_000_000_000
    assert check_x_out(x, g, "int32_t") == CheckResult(False, 2_000_000_004.0, 2, (1, 0))


def test_check_x_out_float16_is_bit_exact():
    g = np.array([2056.0, 100.0, 0.0, -2.0, np.inf], dtype=np.float16)
    assert check_x_out(g.copy(), g, "float16_t") == CheckResult(True, 0.0, 0, None)
    # One float16 step off (2048: a float16 accumulator's answer for [2048, 1 x 7]), the sign
    # of zero, and a NaN: each fails, however close.
    x = np.array([2048.0, 100.0, -0.0, -2.0, np.inf], dtype=np.float16)
    r = check_x_out(x, g, "float16_t")
    assert (r.ok, r.mismatches, r.first_bad_index, r.max_abs_err) == (False, 2, (0,), 8.0)
    x = np.array([2056.0, 100.0625, 0.0, np.nan, np.inf], dtype=np.float16)
    r = check_x_out(x, g, "float16_t")
    assert (r.ok, r.mismatches, r.first_bad_index, r.max_abs_err) == (False, 2, (1,), 0.0625)
    nan = np.array([np.nan], dtype=np.float16)
    assert not check_x_out(nan, nan.copy(), "float16_t").ok  # a NaN never passes


def test_bfloat16_case_files_are_raw_bits_and_checked_bit_exact(tmp_path):
    """bf16 (issue 34): the reference's layout, 2 bytes per element (the value's top 16 bits, little
    endian); read back identical; x_out checked bit for bit."""
    spec = CaseSpec(pes=2, bs=3, h=4, topk=2, expert_per_pe=2, dtype="bfloat16_t", seed=5)
    case = make_case(spec)
    d = write_case(case, tmp_path)
    r0 = case.rank_inputs(0)
    raw = (d / "rank_0" / "expand_x.bin").read_bytes()
    assert len(raw) == 12 * 4 * 2 and raw == r0.expand_x.view(np.uint16).astype("<u2").tobytes()
    assert (d / "rank_0" / "golden_x_out.bin").read_bytes() == r0.golden_x_out.view(np.uint16).tobytes()
    assert json.loads((d / "meta.json").read_text())["dtype"] == "bfloat16_t"
    back = read_case(d)
    assert back.spec == spec
    g = r0.golden_x_out
    assert check_x_out(g.copy(), g, "bfloat16_t") == CheckResult(True, 0.0, 0, None)
    x = g.copy()
    x.view(np.uint16)[1, 2] ^= 1  # one bf16 step off
    r = check_x_out(x, g, "bfloat16_t")
    assert (r.ok, r.mismatches, r.first_bad_index) == (False, 1, (1, 2))


def test_check_x_out_bad_input():
    g = np.zeros((2, 3), dtype=np.int32)
    with pytest.raises(ParameterError) as err:
        check_x_out(np.zeros((3, 2), dtype=np.int32), g, "int32_t")
    assert str(err.value) == "x_out shape=[3, 2]: must equal golden shape [2, 3]"
    with pytest.raises(ParameterError) as err:
        check_x_out(np.zeros((2, 3), dtype=np.float16), g, "int32_t")
    assert str(err.value) == "x_out dtype=float16: must be int32 for 'int32_t'"
    with pytest.raises(SpecError) as err:
        check_x_out(g, g, "float32_t")
    assert str(err.value) == "dtype='float32_t': must be one of 'int32_t', 'float16_t', 'bfloat16_t'"
    with pytest.raises(ParameterError) as err:
        check_x_out(np.zeros((2, 3), dtype=np.float16), np.zeros((2, 3), dtype=np.float16), "bfloat16_t")
    assert str(err.value) == "x_out dtype=float16: must be bfloat16 for 'bfloat16_t'"


def test_a_long_write_shows_a_progress_line_on_stderr_and_a_short_one_nothing(tmp_path, monkeypatch, capsys):
    """Past PROGRESS_AFTER_S seconds (2 s; 0 here) write_case shows one step per PE on stderr, cleared at the end."""
    from combine_lab.formats import casefiles

    case = make_case(CaseSpec(pes=3, bs=2, h=4, topk=1, expert_per_pe=1))
    write_case(case, tmp_path / "quick")
    assert capsys.readouterr() == ("", "")
    assert casefiles.PROGRESS_AFTER_S == 2.0
    monkeypatch.setattr(casefiles, "PROGRESS_AFTER_S", 0)
    write_case(case, tmp_path / "slow")
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("\rcase files shape_2_4_1_3_3:   0%|          | 0/3 [")
    assert err.endswith("\r")  # the line is cleared once every PE's files are written
