"""Kernel settings (docs/variants.md): labels, checks, the block count and the SDMA calls the plan expects."""

import numpy as np
import pytest

from combine_lab.errors import ParameterError
from combine_lab.formats.perf_csv import file_prefix, perf_csv_name
from combine_lab.planning.cores import chunk_bounds, launch_block_dim
from combine_lab.planning.planner import plan_counts
from combine_lab.planning.settings import (REFERENCE, KernelSettings, check_kernel_settings, driver_policy,
                                           parse_settings, parse_variant_label, variant_label)


@pytest.mark.parametrize("label, variant, settings", [
    ("classic", "classic", REFERENCE),
    ("doubleplane", "doubleplane", REFERENCE),
    ("doubleplane-segment", "doubleplane", KernelSettings(segment=True)),
    ("classic-c4", "classic", KernelSettings(cores_per_rank=4)),
    ("doubleplane-segment-c6", "doubleplane", KernelSettings(segment=True, cores_per_rank=6)),
])
def test_variant_labels_round_trip(label, variant, settings):
    assert parse_variant_label(label) == (variant, settings)
    assert variant_label(variant, settings) == label


def test_settings_labels():
    assert [parse_settings(x).label for x in ("reference", "segment", "c6", "segment-c6", None)] == [
        "reference", "segment", "c6", "segment-c6", "reference"]
    assert parse_settings("c1") == REFERENCE
    for label in ("c0", "segment-c0"):  # the field report: say that N must be >= 1
        with pytest.raises(ParameterError) as e:
            parse_settings(label)
        assert str(e.value) == (f"settings={label!r}: N must be >= 1 (cores per source rank; c1 is the reference's "
                                "one core); the labels are 'reference', 'segment', 'c<N>' or 'segment-c<N>' (N: cores "
                                "per source rank)")
    with pytest.raises(ParameterError, match=r"^settings='segmnt': must be 'reference', 'segment', 'c<N>' or "
                                             r"'segment-c<N>' \(N: cores per source rank\); did you mean 'segment'\?$"):
        parse_settings("segmnt")
    with pytest.raises(ParameterError, match=r"^variant='classic-segment': 'segment' is a doubleplane setting"):
        parse_variant_label("classic-segment")
    with pytest.raises(ParameterError, match=r"^variant='doubleplane-fast': must be 'classic', 'doubleplane'"):
        parse_variant_label("doubleplane-fast")


def test_check_kernel_settings_names_parameter_value_and_range():
    assert check_kernel_settings(KernelSettings(cores_per_rank=40), "classic", "Ascend910B3").cores_per_rank == 40
    with pytest.raises(ParameterError) as e:
        check_kernel_settings(KernelSettings(cores_per_rank=41), "classic", "Ascend910B3")
    assert str(e.value) == ("cores_per_rank=41: must be an int in [1, 40] (the 40 AIV cores of Ascend910B3; at most "
                            "48 cores issue SDMA)")
    assert e.value.parameter == "cores_per_rank"
    with pytest.raises(ParameterError, match=r"^segment with variant='classic'"):
        check_kernel_settings(KernelSettings(segment=True), "classic")
    assert [driver_policy(v, parse_settings(s)) for v, s in
            (("classic", "c2"), ("doubleplane", "c2"), ("doubleplane", "segment"))] == [
        "mte_only", "dual_plane", "dual_plane_segment"]


def test_block_dim_groups_and_chunks():
    # one core per rank: min(pes, 40, 48) on Ascend910B3; with c cores per rank whole groups of c
    assert [launch_block_dim(p, "Ascend910B3") for p in (2, 8, 64)] == [2, 8, 40]
    assert [launch_block_dim(p, "Ascend910B3", 6) for p in (2, 8, 16)] == [12, 36, 36]
    assert launch_block_dim(8, "Ascend910_9391", 6) == 48
    assert chunk_bounds(10, 20, 3) == [(10, 13), (13, 16), (16, 20)]
    assert chunk_bounds(0, 2, 3) == [(0, 0), (0, 1), (1, 2)]


def test_plan_sdma_calls_sqes_and_control_writes():
    # pes 2, epp 2: PE 0's only remote rows are 10 from rank 1, PE 1's 3 from rank 0 (each above its average)
    counts = np.array([[0, 10, 10, 10], [3, 3, 3, 3]])
    row = 256 * 1024  # bytes: 4 rows per 1 MiB SQE
    ref = plan_counts(counts, h=row // 4, itemsize=4, min_sdma_bytes=0)
    assert ref.totals["sdma_rows"].tolist() == [10, 3]
    assert ref.totals["sdma_calls"].tolist() == [10, 3] and ref.totals["sdma_sqes"].tolist() == [10, 3]
    assert ref.totals["control_writes"].tolist() == [0, 0]
    seg = plan_counts(counts, h=row // 4, itemsize=4, min_sdma_bytes=0, settings="segment")
    assert seg.totals["sdma_calls"].tolist() == [1, 1]
    assert seg.totals["sdma_sqes"].tolist() == [3, 1]  # 2.5 MiB -> 3 SQEs; 0.75 MiB -> 1
    assert seg.totals["control_writes"].tolist() == [4, 4]  # bases and ready flag to each of 2 PEs
    assert seg.totals["control_bytes"].tolist() == [2 * (2 * 4 + 32)] * 2
    c3 = plan_counts(counts, h=row // 4, itemsize=4, min_sdma_bytes=0, settings="segment-c3")
    assert c3.totals["sdma_calls"].tolist() == [3, 3]  # chunks of 3, 3, 4 rows; of 1, 1, 1
    assert c3.totals["sdma_sqes"].tolist() == [1 + 1 + 1, 3]
    # rows that are not back to back in the window (h*4 not a multiple of 32): one call per row
    odd = plan_counts(counts, h=33, itemsize=4, min_sdma_bytes=0, settings="segment")
    assert odd.totals["sdma_calls"].tolist() == odd.totals["sdma_rows"].tolist() == [10, 3]
    with pytest.raises(ParameterError, match=r"^segment with variant='classic'"):
        plan_counts(counts, h=8, itemsize=4, variant="classic", settings="segment")


def test_files_per_variant_label():
    assert file_prefix("doubleplane-segment-c6") == "combine_doubleplane_segment_c6"
    assert file_prefix("classic-c4") == "combine_c4"
    assert perf_csv_name("doubleplane-segment", 1) == "combine_doubleplane_segment_perf_rank1.csv"
