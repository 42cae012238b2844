"""The perf files of docs/formats.md#3-perf-csv without launching anything: the driver's row bytes
(host/perf_csv.cpp driven with hand-made frames), reading by header, the summary's rules on
hand-made rows, file names per variant, appending and clearing."""

from __future__ import annotations

import json

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from combine_lab.run.build import source_root
from combine_lab.errors import ResultFileError
from combine_lab.formats.perf_csv import (CORE_COLUMN, PERF_COLUMNS, PERF_HEADER, append_perf_csv, clear_outputs,
                                          counters_name, driver_counters_name, figure_name, file_prefix, fixed4,
                                          gib_per_s, perf_csv_name, perf_summary_name, rank_files, read_perf_csv,
                                          report_name, summary_rows, variant_dir, write_perf_csv, write_summary_csv)
from combine_lab.formats.sidecars import read_sidecar, write_sidecar
from perf_facts import HEADER, ub_size_kb

ROOT = source_root()


def test_header_is_the_19_names_once():
    assert ",".join(PERF_HEADER) == HEADER
    assert PERF_HEADER.count(CORE_COLUMN) == 1 and PERF_HEADER[:18] == PERF_COLUMNS


@pytest.mark.parametrize("variant, rank, summary, counters, figure, report", [
    ("classic", 3, "combine_perf_summary.csv", "combine_counters_shape_8_16_2_4_2.json",
     "combine_perf_comm_only.png", "combine_perf_report.md"),
    ("doubleplane", 3, "combine_doubleplane_perf_summary.csv", "combine_doubleplane_counters_shape_8_16_2_4_2.json",
     "combine_doubleplane_perf_comm_only.png", "combine_doubleplane_perf_report.md"),
])
def test_file_names_per_variant_are_the_references(variant, rank, summary, counters, figure, report):
    assert perf_csv_name(variant, rank) == f"{file_prefix(variant)}_perf_rank3.csv"
    assert perf_csv_name("classic", 3) == "combine_perf_rank3.csv"
    assert perf_csv_name("doubleplane", 3) == "combine_doubleplane_perf_rank3.csv"
    assert perf_summary_name(variant) == summary
    assert counters_name(variant, "shape_8_16_2_4_2") == counters
    assert figure_name(variant, "comm_only") == figure
    assert report_name(variant) == report
    assert driver_counters_name(perf_csv_name(variant, 3)) == f"{file_prefix(variant)}_counters_rank3.json"


def test_variant_dir_separates_variants_only_when_they_share_a_folder(tmp_path):
    assert variant_dir(tmp_path, "classic", separate=False) == tmp_path
    assert variant_dir(tmp_path, "classic", separate=True) == tmp_path / "classic"
    assert variant_dir(tmp_path, "doubleplane", separate=True) == tmp_path / "doubleplane"


def test_unknown_variant_is_refused_by_name():
    with pytest.raises(ResultFileError, match=r"^variant='mte': must be one of 'classic', 'doubleplane', or one with kernel settings such as "
                       r"'doubleplane-segment-c6'$"):
        perf_csv_name("mte", 0)


def test_rank_files_are_one_variants_in_glob_order(tmp_path):
    for name in ["combine_perf_rank2.csv", "combine_perf_rank10.csv", "combine_perf_rank0.csv",
                 "combine_doubleplane_perf_rank0.csv", "combine_perf_summary.csv", "combine_perf_rank1.csv.bak"]:
        (tmp_path / name).write_text(HEADER + "\n")
    assert [p.name for p in rank_files(tmp_path, "classic")] == [
        "combine_perf_rank0.csv", "combine_perf_rank10.csv", "combine_perf_rank2.csv"]
    assert [p.name for p in rank_files(tmp_path, "doubleplane")] == ["combine_doubleplane_perf_rank0.csv"]
    assert rank_files(tmp_path / "missing", "classic") == []


def test_clear_outputs_removes_that_variants_files_only(tmp_path):
    mine = ["combine_perf_rank0.csv", "combine_perf_rank12.csv", "combine_perf_summary.csv",
            "combine_counters_shape_8_16_2_4_2.json", "combine_perf_full_op.png", "combine_perf_comm_only.png",
            "combine_perf_report.md"]
    others = ["combine_doubleplane_perf_rank0.csv", "combine_doubleplane_perf_summary.csv",
              "combine_doubleplane_counters_shape_8_16_2_4_2.json", "combine_doubleplane_perf_full_op.png",
              "notes.csv", "combine_perf_rank0.csv.keep", "combine_perf_rank_old.csv"]
    for name in mine + others:
        (tmp_path / name).write_text("x")
    removed = clear_outputs(tmp_path, "classic")
    assert sorted(p.name for p in removed) == sorted(mine)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(others)
    assert clear_outputs(tmp_path / "missing", "classic") == []


def test_numbers_are_fixed_point_with_4_decimals():
    assert fixed4(3.327) == "3.3270"
    assert fixed4(0.0605307175) == "0.0605"
    assert fixed4(504.1668) == "504.1668"
    assert fixed4(0.0) == "0.0000"
    assert gib_per_s(2048, 12.5) == 0.152587890625  # 2048 B / 12.5 us = 163840000 B/s, / 2^30
    assert gib_per_s(2048, 0.0) == 0.0


@pytest.fixture(scope="module")
def perf_row_driver(tmp_path_factory) -> Path:
    """tests/formats/cpp/perf_row_check.cpp compiled with host/perf_csv.cpp (the driver's row writer)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++ (the twin's compiler)")
    exe = tmp_path_factory.mktemp("perf_row") / "perf_row_check"
    subprocess.run([gxx, "-std=c++17", "-I", str(ROOT / "host"), "-I", str(ROOT / "kernels"),
                    "-I", str(ROOT / "host" / "twin" / "include"),
                    str(ROOT / "tests" / "formats" / "cpp" / "perf_row_check.cpp"),
                    str(ROOT / "host" / "perf_csv.cpp"), "-o", str(exe)], check=True, capture_output=True)
    return exe


def test_driver_writes_the_hand_computed_row_bytes(perf_row_driver, tmp_path):
    """4 cores, core 1 idle; 1000 cycles/us. Core times: 6654/2/1000 = 3.3270, 26034/10/1000 =
    2.6034, 1/3/1000 = 0.0003; CoreMaxTime 3.3270; Bandwidth 4096 B / 3.327 us * 1e6 / 2^30 =
    1.14659 -> 1.1466; PerPeBandwidth 1024 B -> 0.28665 -> 0.2866. Every core idle: zeros, no core field."""
    path = tmp_path / "combine_perf_rank1.csv"
    for _ in range(2):  # a second run appends rows, not another header
        subprocess.run([str(perf_row_driver), str(path)], check=True)
    ub = ub_size_kb()
    comm = (f"1024,4,4,{ub},1.1466,3.3270,comm_only,4096,0.2866,8,16,2,2,int32_t,5,50,1,shape_8_16_2_8_4,"
            "3.3270,2.6034,0.0003")
    full = f"1024,4,4,{ub},0.0000,0.0000,full_op,4096,0.0000,8,16,2,2,int32_t,5,50,1,shape_8_16_2_8_4"
    assert path.read_bytes() == f"{HEADER}\n{comm}\n{full}\n{comm}\n{full}\n".encode()


def test_a_reader_keyed_by_header_gets_every_cores_time(perf_row_driver, tmp_path):
    path = tmp_path / "combine_perf_rank1.csv"
    subprocess.run([str(perf_row_driver), str(path)], check=True)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    # The first core's time is under SingleCoreTime/us, the others are the row's extra fields.
    assert [[r[CORE_COLUMN]] + r.get(None, []) for r in rows] == [["3.3270", "2.6034", "0.0003"], [None]]
    assert [(r["Metric"], r["CoreMaxTime/us"], r["ProfPe"], r["UBsize/KB"]) for r in rows] == [
        ("comm_only", "3.3270", "1", str(ub_size_kb())), ("full_op", "0.0000", "1", str(ub_size_kb()))]
    df = read_perf_csv(path)
    assert [tuple(t) for t in df["core_times_us"]] == [(3.327, 2.6034, 0.0003), ()]
    assert df["ProfPe"].tolist() == [1, 1] and df["Blocks"].tolist() == [4, 4]


def test_python_writer_gives_the_drivers_bytes_back(perf_row_driver, tmp_path):
    src = tmp_path / "combine_perf_rank1.csv"
    subprocess.run([str(perf_row_driver), str(src)], check=True)
    out = write_perf_csv(read_perf_csv(src), tmp_path / "again" / "combine_perf_rank1.csv")
    assert out.read_bytes() == src.read_bytes()


def _rank_file(path: Path, rows: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in [HEADER, *rows]))
    return path


#: Hand-made per-rank rows (bandwidths deliberately wrong: the summary recomputes them).
RANK0 = [
    "1024,2,2,80,9.9999,10.0000,comm_only,2048,9.9999,8,16,2,2,int32_t,5,50,0,shape_8_16_2_4_2,10.0000,4.0000",
    "1024,2,2,80,9.9999,100.0000,full_op,2048,9.9999,8,16,2,2,int32_t,5,50,0,shape_8_16_2_4_2,100.0000,90.0000",
    "512,2,2,80,9.9999,5.0000,comm_only,1024,9.9999,4,16,2,2,int32_t,5,50,0,shape_4_16_2_4_2,5.0000,1.0000",
    "1024,16,16,80,9.9999,20.0000,comm_only,16384,9.9999,8,16,2,2,int32_t,5,50,0,shape_8_16_2_32_16",
]
RANK1 = [
    "1024,2,2,80,9.9999,12.5000,comm_only,2048,9.9999,8,16,2,2,int32_t,5,50,1,shape_8_16_2_4_2,3.0000,12.5000",
    "1024,2,2,80,9.9999,80.0000,full_op,2048,9.9999,8,16,2,2,int32_t,5,50,1,shape_8_16_2_4_2,80.0000,1.0000",
    "512,2,2,80,9.9999,5.0000,comm_only,1024,9.9999,4,16,2,2,int32_t,5,50,1,shape_4_16_2_4_2,2.0000,5.0000",
    "1024,16,16,80,9.9999,30.0000,comm_only,16384,9.9999,8,16,2,2,int32_t,0,50,1,shape_8_16_2_32_16,30.0000",
]
#: The summary by hand: per group the slowest row (a tie: the first read), bandwidths from its
#: CoreMaxTime (e.g. 2048 B / 12.5 us -> 0.1526, 1024 B / 12.5 us -> 0.0763), ProfPe max, the
#: first core's time only; sorted by Metric, Npus as a number (2 before 16), DataSize as a number
#: (512 before 1024), CaseId; Warmup 0 and 5 are two groups, in the order read.
SUMMARY = [
    "512,2,2,80,0.1907,5.0000,comm_only,1024,0.0954,4,16,2,2,int32_t,5,50,max,shape_4_16_2_4_2,5.0000",
    "1024,2,2,80,0.1526,12.5000,comm_only,2048,0.0763,8,16,2,2,int32_t,5,50,max,shape_8_16_2_4_2,3.0000",
    "1024,16,16,80,0.7629,20.0000,comm_only,16384,0.0477,8,16,2,2,int32_t,5,50,max,shape_8_16_2_32_16,",
    "1024,16,16,80,0.5086,30.0000,comm_only,16384,0.0318,8,16,2,2,int32_t,0,50,max,shape_8_16_2_32_16,30.0000",
    "1024,2,2,80,0.0191,100.0000,full_op,2048,0.0095,8,16,2,2,int32_t,5,50,max,shape_8_16_2_4_2,100.0000",
]


def two_rank_files(folder: Path) -> list[Path]:
    """RANK0 and RANK1 as combine_perf_rank0.csv and combine_perf_rank1.csv in ``folder``."""
    return [_rank_file(folder / "combine_perf_rank0.csv", RANK0), _rank_file(folder / "combine_perf_rank1.csv", RANK1)]


def test_summary_follows_section8_on_hand_made_rows(tmp_path):
    files = two_rank_files(tmp_path)
    assert [",".join(r) for r in summary_rows(files)] == SUMMARY


def test_summary_file_bytes(tmp_path):
    files = two_rank_files(tmp_path)
    out = tmp_path / "combine_perf_summary.csv"
    df = write_summary_csv(files, out)
    # Lines end in \r\n, as Python's csv writer ends them in the reference's summary.
    assert out.read_bytes() == "".join(line + "\r\n" for line in [HEADER, *SUMMARY]).encode()
    assert df["ProfPe"].tolist() == ["max"] * 5
    assert df["CoreMaxTime/us"].tolist() == [5.0, 12.5, 20.0, 30.0, 100.0]
    assert [tuple(t) for t in df["core_times_us"]] == [(5.0,), (3.0,), (), (30.0,), (100.0,)]


def test_append_writes_the_header_once_and_refuses_another_format(tmp_path):
    src = _rank_file(tmp_path / "src.csv", RANK0[:2])
    dst = tmp_path / "out" / "combine_perf_rank0.csv"
    append_perf_csv(src, dst)
    append_perf_csv(src, dst)
    assert dst.read_text() == "".join(line + "\n" for line in [HEADER, *RANK0[:2], *RANK0[:2]])
    old = tmp_path / "combine_doubleplane_perf_rank0.csv"
    old.write_text(",".join(PERF_COLUMNS + [CORE_COLUMN] * 2) + "\n")
    with pytest.raises(ResultFileError, match=r"not a docs/formats.md#3-perf-csv perf CSV .*remove it or choose another"):
        append_perf_csv(src, old)


def test_reader_refuses_a_header_that_repeats_the_core_column(tmp_path):
    path = tmp_path / "combine_perf_rank0.csv"
    path.write_text(HEADER + ",SingleCoreTime/us\n" + RANK0[0] + "\n")
    with pytest.raises(ResultFileError) as e:
        read_perf_csv(path)
    assert str(e.value).startswith(f"{path}: line 1: header is 'DataSize/B,Npus,")
    assert str(e.value).endswith("a perf CSV starts with the 19 names of docs/formats.md#3-perf-csv "
                                 "(DataSize/B,Npus,Blocks,...,SingleCoreTime/us), once")


def test_reader_refuses_short_rows_and_bad_numbers(tmp_path):
    path = _rank_file(tmp_path / "a.csv", ["1024,2,2"])
    with pytest.raises(ResultFileError, match=r"a\.csv: line 2: 3 fields, expected at least 18$"):
        read_perf_csv(path)
    path = _rank_file(tmp_path / "b.csv", [RANK0[0].replace("10.0000,comm_only", "ten,comm_only")])
    with pytest.raises(ResultFileError, match=r"b\.csv: shape_8_16_2_4_2 comm_only: could not convert"):
        read_perf_csv(path)


def test_sidecar_round_trip_and_missing_keys(tmp_path):
    data = {k: None for k in ["case_id", "variant", "routing", "dtype", "seed", "target", "min_sdma_bytes", "warmup",
                              "loops", "launches", "prof_pes", "check", "counters_ok", "counter_mismatches",
                              "violations", "violation_examples", "planned", "counted", "ranks", "kernel",
                              "settings"]}
    data.update(case_id="shape_8_16_2_4_2", variant="classic")
    path = write_sidecar(tmp_path / counters_name("classic", "shape_8_16_2_4_2"), data)
    assert read_sidecar(path) == data
    del data["ranks"]
    with pytest.raises(ResultFileError, match=r"sidecar without ranks$"):
        write_sidecar(tmp_path / "x.json", data)
    # a sidecar written before results named their kernel reads as the lab's
    old = json.loads(path.read_text())
    del old["kernel"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert read_sidecar(tmp_path / "old.json")["kernel"] == {"name": "lab"}
    # and one written before kernel settings as the reference's (docs/variants.md)
    del old["settings"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert read_sidecar(tmp_path / "old.json")["settings"] == {"label": "reference", "cores_per_rank": 1}


def test_analysis_figures_and_tables_from_hand_made_files(tmp_path):
    from matplotlib.container import BarContainer

    from combine_lab.results.analysis import markdown_report, perf_figure, perf_rows, write_figures, write_report

    ranks = two_rank_files(tmp_path)
    write_summary_csv(ranks, tmp_path / "combine_perf_summary.csv")
    rows, summary = perf_rows(tmp_path, "classic")
    fig = perf_figure(rows, summary, "classic", "comm_only")
    left, right = fig.axes
    assert fig._suptitle.get_text() == ("combine: comm_only, classic (MTE only), 3 case(s), 2, 16 PEs; bars: median "
                                        "over repeats, error bars: min-max")
    assert (left.get_title(), left.get_ylabel()) == ("Bandwidth/GB/s per case",
                                                     "bandwidth (GB/s = 2^30 B/s, all PEs' data)")
    assert (right.get_title(), right.get_ylabel()) == ("CoreMaxTime/us per case", "CoreMaxTime (us)")
    assert right.get_xlabel() == "case (shape_bs_h_topk_E_pes)"
    assert [t.get_text() for t in right.get_xticklabels()] == ["shape_8_16_2_4_2", "shape_4_16_2_4_2",
                                                               "shape_8_16_2_32_16"]
    # PE 1's bars: CoreMaxTime 12.5, 5.0 and (Warmup 0 row) 30.0 us.
    bars = [c for c in right.containers if isinstance(c, BarContainer)]  # each with its error bar (one row: none)
    pe1 = [p.get_height() for p in bars[1]]
    assert [list(s[:, 1]) for s in bars[1].errorbar.lines[2][0].get_segments()] == [[12.5, 12.5], [5.0, 5.0],
                                                                                    [30.0, 30.0]]
    assert pe1 == [12.5, 5.0, 30.0]
    paths = write_figures(tmp_path, "classic")
    assert [p.name for p in paths] == ["combine_perf_full_op.png", "combine_perf_comm_only.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)

    text = markdown_report(tmp_path, "classic")
    assert text.startswith(f"# combine perf: classic (MTE only)\n\nFrom `{tmp_path}`: combine_perf_rank0.csv, "
                           "combine_perf_rank1.csv, combine_perf_summary.csv.\n")
    assert ("## comm_only\n\n| CaseId | ProfPe | Npus | Blocks | DataSize/B | GlobalDataSize/B | Bandwidth/GB/s | "
            "PerPeBandwidth/GB/s | CoreMaxTime/us | cores |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            "| shape_8_16_2_4_2 | 0 | 2 | 2 | 1024 | 2048 | 9.9999 | 9.9999 | 10.0000 | 2 |\n"
            "| shape_8_16_2_4_2 | 1 | 2 | 2 | 1024 | 2048 | 9.9999 | 9.9999 | 12.5000 | 2 |\n") in text
    assert "| shape_8_16_2_32_16 | 0 | 16 | 16 | 1024 | 16384 | 9.9999 | 9.9999 | 20.0000 | 0 |\n" in text
    assert ("### comm_only: summary (per case the slowest profiled PE)\n\n| CaseId | ProfPe | Npus | Blocks | "
            "DataSize/B | GlobalDataSize/B | Bandwidth/GB/s | PerPeBandwidth/GB/s | CoreMaxTime/us |\n") in text
    assert "| shape_8_16_2_4_2 | max | 2 | 2 | 1024 | 2048 | 0.1526 | 0.0763 | 12.5000 |\n" in text
    assert write_report(tmp_path, "classic").read_text() == text
    with pytest.raises(ResultFileError, match=r"no combine_doubleplane_perf_rank<r>\.csv to analyse$"):
        perf_rows(tmp_path, "doubleplane")
