"""One segment and why the rule sent it by its plane (combine_lab/lab/segments.py,
docs/decision-rule.md#1-the-rule): the app's segment lookup, the segment map's cells by keyboard."""

from __future__ import annotations

import numpy as np
import pytest

from combine_lab.errors import ParameterError
from combine_lab.lab.segments import segment_cells_data, segment_details, segment_text, segment_texts
from combine_lab.planning.planner import plan_counts

# 3 PEs, one expert each, rows of 1024 int32 = 4096 B; PE 0 gets 10 rows from itself, 600 from PE 1, 100 from PE 2
# (ep_recv_count is cumulative per PE, as the kernel reads it)
COUNTS = np.cumsum(np.array([[10, 600, 100], [0, 5, 7], [1, 1, 1]], dtype=np.int64), axis=1)


def test_each_reason_of_the_rule_in_its_integers():
    p = plan_counts(COUNTS, 1024, 4, "doubleplane", 2 * 2 ** 20)
    sdma = segment_details(p, 0, 0, 1)
    # remote rows of PE 0: 700 -> 2,867,200 B over max(3 - 1, 1) * 1 = 2 remote segments
    assert sdma == {"pe": 0, "local_expert": 0, "src_rank": 1, "rows": 600, "bytes": 2_457_600, "plane": "SDMA",
                    "local": False, "floor": 2_097_152, "threshold_num": 2_867_200, "threshold_den": 2,
                    "above_average": True,
                    "why": "at or above the floor (2,457,600 B >= 2,097,152 B) and above PE 0's average remote "
                           "segment (2,457,600 B * 2 > 2,867,200)"}
    assert segment_details(p, 0, 0, 0)["why"] == "the PE's own segment (local): always MTE"
    assert segment_details(p, 0, 0, 2)["why"] == "below the floor (409,600 B < 2,097,152 B)"
    assert segment_details(p, 1, 0, 0)["why"] == "empty: nothing to send"
    low = plan_counts(COUNTS, 1024, 4, "doubleplane", 0)
    d = segment_details(low, 0, 0, 2)
    assert d["plane"] == "MTE" and d["why"] == "at or below PE 0's average remote segment (409,600 B * 2 <= 2,867,200)"
    assert segment_details(plan_counts(COUNTS, 1024, 4, "classic", 0), 0, 0, 1)["why"] == \
        "classic sends every segment by MTE"
    assert segment_text(p, 0, 0, 1) == (
        "PE 0 sends 600 rows (2,457,600 B) of local_expert 0 back to src_rank 1 by SDMA: at or above the floor "
        "(2,457,600 B >= 2,097,152 B) and above PE 0's average remote segment (2,457,600 B * 2 > 2,867,200) "
        "(docs/decision-rule.md#1-the-rule)")
    # the plan's plane is the rule's, segment by segment
    for pe in range(3):
        for s in range(3):
            d = segment_details(low, pe, 0, s)
            want = s != pe and d["rows"] > 0 and d["bytes"] * d["threshold_den"] > d["threshold_num"]
            assert (d["plane"] == "SDMA") == want, d


def test_an_index_out_of_range_is_named():
    p = plan_counts(COUNTS, 1024, 4, "doubleplane", 0)
    with pytest.raises(ParameterError, match=r"src_rank=3: must be an int in \[0, 3\)") as e:
        segment_details(p, 0, 0, 3)
    assert e.value.parameter == "src_rank"
    with pytest.raises(ParameterError, match=r"local_expert=1: must be an int in \[0, 1\)"):
        segment_details(p, 0, 1, 0)


def test_every_segments_text_at_once_is_the_one_by_one_text():
    for variant, floor in (("doubleplane", 2 * 2 ** 20), ("doubleplane", 0), ("classic", 0)):
        p = plan_counts(COUNTS, 1024, 4, variant, floor)
        texts = segment_texts(p)
        assert texts.shape == (3, 1, 3)
        assert [texts[d, 0, s] for d in range(3) for s in range(3)] == \
            [segment_text(p, d, 0, s) for d in range(3) for s in range(3)]


def test_the_texts_follow_the_segments_layout_with_several_experts():
    rng = np.random.default_rng(7)
    counts = np.cumsum(rng.integers(0, 400, size=(4, 2 * 4)), axis=1)  # 4 PEs, 2 experts: segment = le * pes + src
    p = plan_counts(counts, 2048, 2, "doubleplane", 1 << 20)
    texts = segment_texts(p)
    assert all(texts[d, le, s] == segment_text(p, d, le, s) for d in range(4) for le in range(2) for s in range(4))
    d = segment_details(p, 3, 1, 2)
    assert d["rows"] == int(counts[3, 1 * 4 + 2] - counts[3, 1 * 4 + 1])


def _decode_cells(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """The stacked map's data-rows and data-sdma back to arrays, as docs/lab.md section 4 and
    segment_cells_data's docstring describe them (independent of how they were written)."""
    import base64
    n = int(data["pes"]) * int(data["epp"]) * int(data["pes"])
    rows = np.frombuffer(base64.b64decode(data["rows"]), dtype=f"<u{int(data['rows-bits']) // 8}")
    bits = np.frombuffer(base64.b64decode(data["sdma"]), dtype=np.uint8)
    sdma = np.array([(bits[i >> 3] >> (7 - (i & 7))) & 1 for i in range(n)], dtype=bool)
    return rows, sdma


def test_the_stacked_maps_cells_decode_to_the_plans_segments_exactly():
    p = plan_counts(COUNTS, 1024, 4, "doubleplane", 2 * 2 ** 20)
    data = segment_cells_data(p)
    assert {k: v for k, v in data.items() if k not in ("rows", "sdma")} == {
        "pes": "3", "epp": "1", "variant": "doubleplane", "floor": "2097152", "row-bytes": "4096", "rows-bits": "16"}
    rows, sdma = _decode_cells(data)
    assert rows.tolist() == [10, 600, 100, 0, 5, 7, 1, 1, 1]
    assert sdma.tolist() == [False, True, False] + [False] * 6
    # the app's shape (pes 64, epp 8: 32,768 segments): every count and plane in the plan's order
    rng = np.random.default_rng(3)
    counts = np.cumsum(rng.integers(0, 200, size=(64, 8 * 64)), axis=1)
    p = plan_counts(counts, 7168, 4, "doubleplane", 0)
    data = segment_cells_data(p)
    rows, sdma = _decode_cells(data)
    assert data["rows-bits"] == "8" and len(data["rows"]) == 43_692 and len(data["sdma"]) == 5464
    assert np.array_equal(rows, p.segments["token_count"].to_numpy())
    assert np.array_equal(sdma, (p.segments["plane"] == "SDMA").to_numpy()) and 0 < sdma.sum() < 32768
    assert np.array_equal(int(data["row-bytes"]) * rows.astype(np.int64), p.segments["bytes"].to_numpy())
    # a count of 2**32 or more has no encoding here: no hover data, the lookup under the map still says it
    big = plan_counts(np.array([[0, 2 ** 32]], dtype=np.int64), 1, 1, "classic", 0)
    assert segment_cells_data(big) is None
    assert segment_cells_data(plan_counts(np.array([[0, 2 ** 32 - 1]], dtype=np.int64), 1, 1, "classic", 0))[
        "rows-bits"] == "32"
