"""The timing model prices a RECORDED operation stream (combine_lab/model/recorded.py): what a
kernel really issued on the twin (COMBINE_TWIN_OPS). For the lab's kernel, whose recorded stream is
the plan-derived one, that price is the plan-derived price (replay.replay); a kernel that issues
another stream (put + quiet + status + quiet per row) is priced as it works."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from combine_lab import CaseSpec, make_case, run_case
from combine_lab.cli import main
from combine_lab.model import load_model
from combine_lab.model.modelled import model_case
from combine_lab.model.recorded import model_kernel, read_stream, replay_recorded
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows

REFSTYLE = Path(__file__).resolve().parents[2] / "tests" / "kernels" / "combine_refstyle"

CASES = [
    (CaseSpec(pes=3, bs=12, h=40, topk=3, expert_per_pe=2, routing="zipf:1.2"), "doubleplane", 0),
    (CaseSpec(pes=4, bs=16, h=2100, topk=2, expert_per_pe=2, dtype="float16_t", masked_fraction=0.25),
     "doubleplane", 0),
    (CaseSpec(pes=2, bs=8, h=64, topk=4, expert_per_pe=2, routing="zipf:2.0"), "classic", 2 << 20),
    # PE 1 issues 1199 SDMA rows: an SDMA quiet after every 256, each waiting for the engines alone
    (CaseSpec(pes=3, bs=1500, h=8, topk=1, expert_per_pe=1, routing="hot-rank:0.8"), "doubleplane", 0),
]


@pytest.mark.parametrize("spec, variant, floor", CASES, ids=[f"{c[0].case_id}-{c[1]}" for c in CASES])
def test_the_labs_recorded_stream_prices_as_its_plan(spec, variant, floor, tmp_path, no_leaks):
    case = make_case(spec)
    for name in ("a3", "a2") if spec is CASES[0][0] else ("a3",):  # a2's other SoC and parameters: once
        model = load_model(name)
        ops = tmp_path / name
        ops.mkdir()
        res = run_case(case, variant, min_sdma_bytes=floor, perf=False,
                       env={"COMBINE_TWIN_OPS": str(ops), "COMBINE_TWIN_SOC": model.soc})
        assert res.ok
        recorded = replay_recorded(read_stream(ops, spec.pes), case, model)
        rows = case_rows(case, model.soc)
        planned = replay(rows, rows.sdma(variant, floor), model)
        assert recorded.block_dim == planned.block_dim
        np.testing.assert_allclose(recorded.comm_only, planned.comm_only, rtol=1e-9, atol=0)
        np.testing.assert_allclose(recorded.full_op, planned.full_op, rtol=1e-9, atol=0)


def test_your_kernel_is_priced_from_the_stream_it_records(tmp_path, capsys, no_leaks):
    """The test kernel puts a row, quiets, puts its status flag and quiets again, row after row: its
    stage 1 costs a quiet and a flag per row where the lab's pipelines a segment and quiets once, so it
    is modelled slower, from its own stream; the CLI says so."""
    spec = CaseSpec(pes=4, bs=32, h=4096, topk=4, expert_per_pe=2, dtype="float16_t")
    model = load_model("a3")
    mine = model_kernel(spec, REFSTYLE, model, loops=5)
    lab = model_case(make_case(spec), "doubleplane", model)
    assert mine.label == "user:refstyle" and mine.kernel_source == REFSTYLE
    assert mine.time_us("comm_only") > 1.5 * lab.time_us("comm_only") > 0
    assert "user:refstyle's recorded operation stream modelled on a3" in mine.caption
    status = main(["run", "--kernel-source", str(REFSTYLE), "-pes", "4", "-bs", "32", "-h", "4096", "-topk", "4",
                   "-expertPerPe", "2", "-type", "float16_t", "--clock", "model:a3", "--perf", "--output-dir",
                   str(tmp_path / "perf")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "user:refstyle: priced from the operation stream it recorded in one launch on the twin" in out
    row = next(r for r in (ln.split() for ln in out.splitlines() if ln.startswith(spec.case_id)) if r[3] == "MODEL")
    slowest = float(mine.times.core_max("comm_only").max())  # a model profiles the slowest PE by default
    assert row[2:4] == ["user:refstyle", "MODEL"] and float(row[4]) == pytest.approx(slowest, rel=1e-3)


SETTINGS_CASES = [
    (CaseSpec(pes=4, bs=16, h=40, topk=3, expert_per_pe=2, routing="zipf:1.2"), "doubleplane", "c3"),
    pytest.param(CaseSpec(pes=8, bs=6, h=16, topk=2, expert_per_pe=1, routing="zipf:1.2"), "classic", "c6",
                 marks=pytest.mark.slow),  # 8 PEs; the quick suite has c3 and c2 of the same path
    # 1199 SDMA rows of PE 1 over 2 cores: SDMA quiets every 256 calls of each core
    (CaseSpec(pes=3, bs=1500, h=8, topk=1, expert_per_pe=1, routing="hot-rank:0.8"), "doubleplane", "c2"),
]


@pytest.mark.parametrize("spec, variant, settings", SETTINGS_CASES,
                         ids=[f"{v[0].case_id}-{v[1]}-{v[2]}" for v in (getattr(c, "values", c) for c in SETTINGS_CASES)])
def test_cores_per_rank_recorded_stream_prices_as_its_plan(spec, variant, settings, tmp_path, no_leaks):
    """Several cores per source rank: the chunks the plan-derived replay prices, core by core, are what
    the kernel issued on the twin (a3's SoC: 48 cores per die, c6 at pes 8 is 8 groups of 6)."""
    case = make_case(spec)
    model = load_model("a3")
    res = run_case(case, variant, settings=settings, min_sdma_bytes=0, perf=False,
                   env={"COMBINE_TWIN_OPS": str(tmp_path), "COMBINE_TWIN_SOC": model.soc})
    assert res.ok
    recorded = replay_recorded(read_stream(tmp_path, spec.pes), case, model)
    rows = case_rows(case, model.soc, settings)
    planned = replay(rows, rows.sdma(variant, 0), model)
    assert recorded.block_dim == planned.block_dim == {"c3": 12, "c6": 48, "c2": 6}[settings]
    np.testing.assert_allclose(recorded.comm_only, planned.comm_only, rtol=1e-9, atol=0)
    np.testing.assert_allclose(recorded.full_op, planned.full_op, rtol=1e-9, atol=0)


@pytest.mark.parametrize("settings", ["reference", "c2"])
def test_shared_limits_price_the_same_op_by_op(settings):
    """Where HBM, the server uplinks and a link shared by a source rank's cores bind (a3 at 32 PEs,
    two servers, with a slow HBM and tapered uplinks), the op-by-op price of the plan-derived stream
    is the plan-derived price (no twin run: the stream the lab's kernel records, derived)."""
    from combine_lab.results.trace import derived_stream

    spec = CaseSpec(pes=32, bs=64, h=2048, topk=4, expert_per_pe=2, dtype="float16_t", routing="zipf:1.2")
    case = make_case(spec)
    m = load_model("a3").with_values(**{"hbm_GBps": 30.0, "server.uplink_GBps": 200.0, "egress_GBps": 5000.0})
    rows = case_rows(case, m.soc).with_settings(settings)
    for variant in ("classic", "doubleplane"):
        sdma = rows.sdma(variant, 0)
        planned = replay(rows, sdma, m)
        stream, _ = derived_stream(rows, sdma)
        recorded = replay_recorded(stream, case, m)
        np.testing.assert_allclose(recorded.comm_only, planned.comm_only, rtol=1e-9, atol=0)
        np.testing.assert_allclose(recorded.full_op, planned.full_op, rtol=1e-9, atol=0)
    classic = replay(rows, rows.sdma("classic", 0), m)
    nominal = replay(rows, rows.sdma("classic", 0), load_model("a3"))
    assert classic.core_max("comm_only").max() > 3 * nominal.core_max("comm_only").max()  # the limits bind
    # at a3's nominal values only the die's egress (142 GB/s) queues c2's 6 cores of a source rank, by 4 us
    assert classic.queue_us.max() > 190
    assert nominal.queue_us.max() == {"reference": 0.0, "c2": pytest.approx(4.0475, abs=1e-3)}[settings]
