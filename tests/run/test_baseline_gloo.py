"""The all_to_all baseline (compare --baseline hccl) on the twin: the same code path with the
gloo backend on CPU tensors, x_out checked against the same golden as the combine kernel."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BASELINE_EXTRA, require, run_table

require("torch", reason=BASELINE_EXTRA)

from combine_lab import cli  # noqa: E402
from combine_lab.run.baseline import run_baseline  # noqa: E402
from combine_lab.run.baseline_worker import plan_exchange  # noqa: E402
from combine_lab.run.runner import prepare_case  # noqa: E402
from combine_lab.case.spec import CaseSpec  # noqa: E402


def test_exchange_plan_matches_the_receive_layout():
    spec = CaseSpec(pes=3, bs=5, h=4, topk=3, expert_per_pe=2, masked_fraction=0.2, seed=7)
    prepared = prepare_case(spec)
    try:
        case = prepared.case
        plans = [plan_exchange(case.rank_rows(d), case.expert_ids[d], spec.pes, spec.expert_per_pe)
                 for d in range(spec.pes)]
        for me in range(spec.pes):
            # What PE d sends to `me`, in the order it sends it, must be `me`'s recv_slots order.
            got = []
            for d in range(spec.pes):
                rows = case.rank_rows(d)[plans[d]["send_perm"]]
                rows = rows[rows[:, 0] == me]
                got += [int(t) * spec.topk + int(k) for _, t, k in rows]
                assert plans[d]["send_counts"][me] == plans[me]["recv_counts"][d]
            assert got == plans[me]["recv_slots"].tolist()
    finally:
        prepared.cleanup()


@pytest.mark.slow  # about 5 s each; the CLI test below runs the same baseline in the fast set
@pytest.mark.parametrize("dtype, masked", [("int32_t", 0.0), ("float16_t", 0.25)])
def test_gloo_baseline_equals_golden(dtype, masked, no_leaks):
    spec = CaseSpec(pes=3, bs=8, h=48, topk=3, expert_per_pe=2, dtype=dtype, masked_fraction=masked,
                    routing="zipf:1.2")
    prepared = prepare_case(spec)
    try:
        res = run_baseline(prepared, warmup=1, loops=3, timeout_s=60)
        assert (res.backend, res.variant, res.target) == ("gloo", "gloo-a2a", "cpu")
        assert res.check_ok, res.checks
        for r in range(spec.pes):
            np.testing.assert_array_equal(res.x_out[r], prepared.case.golden(r))  # same rounding as the golden
        assert len(res.times) == 3 and (res.times > 0).all().all()
        assert res.time_us("full_op") >= res.time_us("comm_only") > 0 and res.spread_us("full_op") >= 0
        assert not res.run_dir.exists()
    finally:
        prepared.cleanup()


@pytest.mark.slow  # three gloo processes with torch imported
def test_cli_compare_baseline_hccl_runs_gloo_on_the_twin(capsys, no_leaks):
    code = cli.main(["compare", "-pes", "2", "-bs", "8", "-h", "32", "-topk", "2", "-expertPerPe", "2",
                     "--warmup", "1", "--loops", "2", "--baseline", "hccl"])
    out = capsys.readouterr()
    assert code == 0, out.err
    table = run_table(out.out)
    assert [t[2:4] for t in table] == [["classic", "PASS"], ["doubleplane", "PASS"], ["gloo-a2a", "PASS"]]
    # without --perf the variants are not timed; the baseline times its loops (one repeat: no spread)
    assert [t[4:9] for t in table[:2]] == [["-"] * 5] * 2
    assert float(table[2][4]) > 0 and float(table[2][6]) > 0 and table[2][5] == table[2][7] == "-"
    # integers where they apply, "-" where they do not (the baseline has no planes, plan or checker)
    assert [t[9:11] for t in table] == [["-", "-"]] * 3  # algbw, busbw: nothing of the kernel's timed
    assert [t[11:] for t in table] == [[t[11], "0", "0", "yes", "0"] for t in table[:2]] + [["-"] * 5]
    assert all(t[11].isdigit() for t in table[:2])
