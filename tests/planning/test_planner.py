import numpy as np
import pandas as pd
import pytest

from combine_lab.case.case import make_case
from combine_lab.planning.planner import plan, plan_counts
from combine_lab.case.spec import CaseSpec
from combine_lab.errors import ParameterError

MiB2 = 2 * 1024 * 1024


def cumulative(*segment_rows):
    """One PE's ep_recv_count from per-segment rows."""
    return np.cumsum(segment_rows).tolist()


def planes(p, pe):
    seg = p.segments
    return seg[seg.pe == pe].plane.tolist()


def test_exactly_2_mib_above_average_goes_sdma():
    # pes 3, expert_per_pe 1, row = 1 byte: PE 0's remote segments are 1 and 2;
    # den = 2; segment 1: 2 MiB, segment 2: empty -> 2 MiB * 2 > 2 MiB
    counts = np.array([cumulative(0, MiB2, 0), cumulative(0, 0, 0), cumulative(0, 0, 0)])
    p = plan_counts(counts, h=1, itemsize=1)
    assert planes(p, 0) == ["MTE", "SDMA", "MTE"]
    assert p.sdma_segments(0).tolist() == [1]
    assert p.totals.loc[0].to_dict() == {"mte_rows": 0, "mte_bytes": 0, "sdma_rows": MiB2, "sdma_bytes": MiB2,
                                         "remote_rows": MiB2, "remote_avg_segment_bytes": MiB2 / 2,
                                         "sdma_calls": MiB2, "sdma_sqes": MiB2, "control_writes": 0,
                                         "control_bytes": 0}


def test_one_byte_under_2_mib_goes_mte():
    counts = np.array([cumulative(0, MiB2 - 1, 0), [0] * 3, [0] * 3])
    assert planes(plan_counts(counts, h=1, itemsize=1), 0) == ["MTE"] * 3


def test_2_mib_reached_through_h_and_itemsize():
    # float16, h 7168: a row is 14336 bytes; 147 rows = 2107392 >= 2 MiB, 146 rows = 2093056 < 2 MiB
    counts = np.array([cumulative(0, 147, 0), cumulative(146, 0, 0), [0] * 3])
    p = plan_counts(counts, h=7168, itemsize=2)
    assert planes(p, 0) == ["MTE", "SDMA", "MTE"]
    assert planes(p, 1) == ["MTE", "MTE", "MTE"]  # PE 1: 146 rows from src 0 (remote) but under 2 MiB


def test_exactly_the_average_stays_mte():
    # two remote segments of 600 rows x 4096 bytes (2.34 MiB each): each equals the average
    counts = np.array([cumulative(0, 600, 600), [0] * 3, [0] * 3])
    p = plan_counts(counts, h=1024, itemsize=4)
    assert planes(p, 0) == ["MTE"] * 3
    assert p.totals.loc[0, "remote_avg_segment_bytes"] == 600 * 4096
    counts[0] = cumulative(0, 601, 600)  # one row above the average: SDMA
    assert planes(plan_counts(counts, h=1024, itemsize=4), 0) == ["MTE", "SDMA", "MTE"]


def test_local_segment_never_sdma():
    counts = np.array([cumulative(10 * MiB2, 0, 0), [0] * 3, [0] * 3])
    p = plan_counts(counts, h=1, itemsize=1)
    assert planes(p, 0) == ["MTE"] * 3
    assert p.totals.loc[0, "remote_rows"] == 0 and p.totals.loc[0, "mte_rows"] == 10 * MiB2


def test_empty_segments_never_sdma_even_without_a_floor():
    counts = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 0]])
    p = plan_counts(counts, h=1, itemsize=1, min_sdma_bytes=0)
    assert (p.segments.plane == "MTE").all()
    counts = np.array([cumulative(0, 3, 0), [0] * 3, [0] * 3])
    assert planes(plan_counts(counts, h=1, itemsize=1, min_sdma_bytes=0), 0) == ["MTE", "SDMA", "MTE"]


def test_single_pe_has_nothing_remote():
    counts = np.array([cumulative(5 * MiB2, 9 * MiB2)])  # pes 1, expert_per_pe 2
    p = plan_counts(counts, h=1, itemsize=1)
    assert p.segments.plane.tolist() == ["MTE", "MTE"]
    assert p.totals.loc[0].to_dict() == {"mte_rows": 14 * MiB2, "mte_bytes": 14 * MiB2, "sdma_rows": 0,
                                         "sdma_bytes": 0, "remote_rows": 0, "remote_avg_segment_bytes": 0.0,
                                         "sdma_calls": 0, "sdma_sqes": 0, "control_writes": 0, "control_bytes": 0}
    assert p.sdma_segments(0).tolist() == []


def test_segments_frame_layout():
    # pes 2, expert_per_pe 2: segment = local_expert * 2 + src_rank
    counts = np.array([cumulative(1, 600, 2, 700), cumulative(3, 4, 5, 6)])
    p = plan_counts(counts, h=1024, itemsize=4)
    expected = pd.DataFrame({
        "pe": [0, 0, 0, 0, 1, 1, 1, 1],
        "segment": [0, 1, 2, 3, 0, 1, 2, 3],
        "local_expert": [0, 0, 1, 1, 0, 0, 1, 1],
        "src_rank": [0, 1, 0, 1, 0, 1, 0, 1],
        "token_count": [1, 600, 2, 700, 3, 4, 5, 6],
        "bytes": [4096, 2457600, 8192, 2867200, 12288, 16384, 20480, 24576],
        "plane": ["MTE", "MTE", "MTE", "SDMA", "MTE", "MTE", "MTE", "MTE"],
    })
    pd.testing.assert_frame_equal(p.segments, expected, check_dtype=False)
    # PE 0: remote rows 1300 over den = 1 * 2 -> average 650 rows; 700 > 650 > 600
    assert p.totals.loc[0, "remote_avg_segment_bytes"] == 650 * 4096
    assert p.totals.index.name == "pe" and list(p.totals.columns) == [
        "mte_rows", "mte_bytes", "sdma_rows", "sdma_bytes", "remote_rows", "remote_avg_segment_bytes", "sdma_calls",
        "sdma_sqes", "control_writes", "control_bytes"]
    assert p.sdma_segments(0).tolist() == [3] and p.sdma_segments(1).tolist() == []


def test_classic_sends_everything_by_mte():
    counts = np.array([cumulative(0, MiB2, 0), [0] * 3, [0] * 3])
    p = plan_counts(counts, h=1, itemsize=1, variant="classic")
    assert (p.segments.plane == "MTE").all() and p.totals.sdma_bytes.sum() == 0


def test_huge_values_use_exact_integers():
    # segment_bytes * den passes 2**63 here: int64 would wrap
    h = 2 ** 50
    counts = np.array([cumulative(0, 3000, 2999), [0] * 3, [0] * 3])
    p = plan_counts(counts, h=h, itemsize=4)
    assert planes(p, 0) == ["MTE", "SDMA", "MTE"]
    assert p.segments.loc[1, "bytes"] == 3000 * 4 * h


def test_plan_of_a_case_matches_plan_counts():
    case = make_case(CaseSpec(4, 64, 7168, 8, 4, routing="hot-rank:0.5"))
    a, b = plan(case), plan_counts(case.ep_recv_count, 7168, 4)
    pd.testing.assert_frame_equal(a.segments, b.segments)
    assert a.segments.token_count.sum() == 4 * 64 * 8
    assert a.segments.groupby("pe").token_count.sum().tolist() == case.ep_recv_count[:, -1].tolist()


@pytest.mark.parametrize("args, message", [
    (dict(variant="sdma_only"), "variant='sdma_only': must be one of 'classic', 'doubleplane'"),
    (dict(variant="dual_plane"), "variant='dual_plane': must be one of 'classic', 'doubleplane'"),
    (dict(h=0), "h=0: must be an int >= 1"),
    (dict(itemsize=2.0), "itemsize=2.0: must be an int >= 1"),
    (dict(min_sdma_bytes=-1), "min_sdma_bytes=-1: must be an int >= 0"),
    (dict(ep_recv_count=np.zeros((2, 3), dtype=np.int32)),
     "ep_recv_count shape=[2, 3] dtype=int32: must be an integer array [pes, expert_per_pe*pes] with "
     "expert_per_pe >= 1"),
    (dict(ep_recv_count=np.zeros(4, dtype=np.int32)),
     "ep_recv_count shape=[4] dtype=int32: must be an integer array [pes, expert_per_pe*pes] with "
     "expert_per_pe >= 1"),
    (dict(ep_recv_count=np.array([[1, 2], [3, 2]])),
     "ep_recv_count[1, 1]=2: must be >= the previous count (3); counts are cumulative"),
])
def test_planner_errors(args, message):
    kwargs = dict(ep_recv_count=np.array([[1, 2], [3, 4]]), h=4, itemsize=4)
    kwargs.update(args)
    with pytest.raises(ParameterError) as err:
        plan_counts(**kwargs)
    assert str(err.value) == message


def test_sdma_segments_bad_pe():
    p = plan_counts(np.array([[1, 2], [3, 4]]), 4, 4)
    with pytest.raises(ParameterError) as err:
        p.sdma_segments(2)
    assert str(err.value) == "pe=2: must be in [0, pes=2)"
