"""nccl-tests' bandwidths (combine_lab/results/bandwidth.py, docs/formats.md#14-bandwidths): algbw =
bytes a PE receives / its comm_only time in decimal GB/s, busbw = algbw * (n-1)/n, per PE and the
slowest PE's, beside the reference's comm_only GB/s (GiB/s of all PEs' bytes), in the run table,
the summary JSON and the sweep's summary; per link class on a model."""

from __future__ import annotations

import json

import pytest

from combine_lab import CaseSpec, make_case
from combine_lab.cli import main
from combine_lab.harness import compare
from combine_lab.model import load_model
from combine_lab.model.modelled import model_case
from combine_lab.results import tables
from combine_lab.results.bandwidth import algbw_gbps, busbw_factor

SPEC = CaseSpec(pes=16, bs=64, h=7168, topk=8, expert_per_pe=2, routing="zipf:1.2")
DATA = 64 * 8 * 7168 * 4  # bs * topk * h * sizeof(int32_t): what a PE receives


def test_factor_and_units():
    assert busbw_factor(16) == 15 / 16 and busbw_factor(2) == 0.5 and busbw_factor(1) == 0.0
    assert algbw_gbps(14_680_064, 100.0) == pytest.approx(146.80064)  # decimal: 1e9 B/s, not 2^30


def test_run_table_and_summary_give_algbw_and_busbw_of_the_slowest_pe(tmp_path, capsys):
    out_dir = tmp_path / "perf"
    argv = ["compare", "-pes", "16", "-bs", "64", "-h", "7168", "-topk", "8", "--routing", "zipf:1.2",
            "--min-sdma-bytes", "0", "--clock", "model:a3", "--perf", "--output-dir", str(out_dir)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    header = next(ln for ln in out.splitlines() if ln.lstrip().startswith("case"))
    assert "comm_only GB/s  algbw GB/s  busbw GB/s" in header
    model = load_model("a3")
    case = make_case(SPEC)
    doc = json.loads((tmp_path / "perf-model-a3" / "combine_lab_summary.json").read_text())
    for variant in ("classic", "doubleplane"):
        res = model_case(case, variant, model, 0)
        t = res.times.core_max("comm_only")
        slow = int(t.argmax())
        line = next(ln.split() for ln in out.splitlines() if ln.startswith(SPEC.case_id) and f" {variant} " in ln)
        gib, alg, bus = map(float, line[8:11])
        assert gib == pytest.approx(DATA * 16 / t[0] * 1e6 / 2**30, abs=1e-3)  # kept: the reference's column
        assert alg == pytest.approx(DATA / t[slow] / 1e3, abs=1e-3) and alg < gib
        assert bus == pytest.approx(alg * 15 / 16, abs=1e-3)
        bw = doc["cases"][0]["variants"][variant]["bandwidth"]
        assert bw["slowest_pe"] == slow and bw["busbw_factor"] == 15 / 16
        assert [bw["algbw_GBps"][str(pe)] for pe in range(16)] == pytest.approx(DATA / t / 1e3)
        # per link class of the slowest PE: its bytes over each class (the plan's), summed: all it receives
        seg = res.plan.segments
        got = seg.loc[seg["src_rank"] == slow, "bytes"].sum()
        classes = bw["by_link_class"]
        assert set(classes) == {c.name for c in model.links} | {"local"}
        assert sum(classes.values()) == pytest.approx(got / t[slow] / 1e3)
        assert classes["local"] == pytest.approx(seg.loc[(seg["src_rank"] == slow) & (seg["pe"] == slow),
                                                         "bytes"].sum() / t[slow] / 1e3)
    assert "busbw = algbw * (n-1)/n, nccl-tests' alltoall" in out


def test_sweep_summary_and_its_readable_table_have_them():
    spec = CaseSpec(pes=4, bs=16, h=256, topk=2, expert_per_pe=1, routing="zipf:1.2")
    model = load_model("a3")
    cmp = compare(spec, clock=model, min_sdma_bytes=0, perf=True, prof_pe="all")
    summary = tables.summarize(cmp.tidy())
    assert list(summary.columns) == tables.SUMMARY_COLUMNS
    r = summary.iloc[0]
    data = 16 * 2 * 256 * 4
    for v in ("classic", "doubleplane"):
        slowest = float(cmp[v].times.core_max("comm_only").max())
        assert r[f"comm_only_{v}_algbw_GBps"] == pytest.approx(data / slowest / 1e3)
        assert r[f"comm_only_{v}_busbw_GBps"] == pytest.approx(data / slowest / 1e3 * 0.75)
    text = tables.readable(summary)["algbw classic / doubleplane (GB/s)"].iloc[0]
    assert text == f"{r['comm_only_classic_algbw_GBps']:.1f} / {r['comm_only_doubleplane_algbw_GBps']:.1f}"
