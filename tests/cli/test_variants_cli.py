"""``run --variant LABEL`` and ``compare --settings LABELS`` (docs/cli.md#10-kernel-settings): the lab's
kernel with settings beyond the reference, from the command line."""

from __future__ import annotations

import json

import pytest
from conftest import run_table

from combine_lab import cli

#: PE 0 and 1 each send their hot expert's rows by SDMA at floor 0, 16 rows of 256 B back to back.
CASE = ["-pes", "2", "-bs", "16", "-h", "128", "-topk", "1", "-expertPerPe", "2", "--routing", "hot-expert:1.0",
        "--min-sdma-bytes", "0"]


def test_run_variant_label_prints_cores_and_sdma_calls(capsys, twin_binary):
    assert cli.main(["run", *CASE, "--variant", "doubleplane-segment-c2"]) == 0
    out = capsys.readouterr().out
    header = next(ln for ln in out.splitlines() if ln.split()[:1] == ["case"]).split()
    (row,) = run_table(out)
    assert row[2:4] == ["doubleplane-segment-c2", "PASS"]
    assert header[-3:] == ["cores/rank", "SDMA", "calls"] and row[-2] == "2"
    assert int(row[-1]) < 32  # fewer SDMA calls than the 32 SDMA rows (one per chunk of 8 rows)


def test_bad_labels_refused_before_anything_runs(capsys):
    for argv, want in ((["run", *CASE, "--variant", "classic-segment"], "'segment' is a doubleplane setting"),
                       (["compare", *CASE, "--settings", "reference,c0"],
                        "'c0': N must be >= 1 (cores per source rank; c1 is the reference's one core)"),
                       (["compare", *CASE, "--settings", "segment-c0"],
                        "'segment-c0': N must be >= 1 (cores per source rank; c1 is the reference's one core)"),
                       (["compare", *CASE, "--settings", "segmnt"], "did you mean 'segment'?")):
        with pytest.raises(SystemExit) as e:  # argparse refuses it
            cli.main(argv)
        assert e.value.code == 2 and want in capsys.readouterr().err
    assert cli.main(["run", *CASE, "--variant", "doubleplane-c41"]) == 2  # the SoC's bound, before building
    assert capsys.readouterr().err.startswith("combine-lab: error: --variant: cores_per_rank=41 (the N of c41): must "
                                              "be an int in [1, 40]")
    assert cli.main(["compare", *CASE, "--settings", "c99"]) == 2  # the field report: the flag named
    assert capsys.readouterr().err.startswith("combine-lab: error: --settings: cores_per_rank=99 (the N of c99): "
                                              "must be an int in [1, 40] (the 40 AIV cores of Ascend910B3")


def test_compare_settings_one_speedup_row_per_group_and_files_per_label(tmp_path, capsys, twin_binary):
    out_dir = tmp_path / "perf"
    code = cli.main(["compare", *CASE, "--settings", "reference,segment", "--perf", "--repeats", "1", "--warmup", "0",
                     "--loops", "1", "--output-dir", str(out_dir)])
    assert code == 0
    out = capsys.readouterr().out
    assert [r[2] for r in run_table(out)] == ["classic", "doubleplane", "doubleplane-segment"]
    groups = [ln.split()[1] for ln in out.splitlines()[out.splitlines().index(
        next(ln for ln in out.splitlines() if ln.split()[:2] == ["case", "settings"])) + 1:]
        if ln.strip().startswith("shape_")]
    assert groups == ["reference", "segment"]  # one classic run serves both groups
    # the summary keeps each group's speed-up (`speedup`: the reference group's), as the table shows it
    at = out.splitlines().index(next(ln for ln in out.splitlines() if ln.split()[:2] == ["case", "settings"]))
    shown = {ln.split()[1]: ln.split() for ln in out.splitlines()[at + 1:at + 3]}
    [case] = json.loads((out_dir / "combine_lab_summary.json").read_text())["cases"]
    by_group = case["speedup_by_settings"]
    assert list(by_group) == ["reference", "segment"] and case["speedup"] == by_group["reference"]
    for g, row in shown.items():
        sp = by_group[g]["comm_only"]
        assert row[4] == f"{sp['median']:.3f}" and " ".join(row[6:11]) == sp["verdict"] == \
            f"{'faster' if sp['median'] > 1 else 'slower' if sp['median'] < 1 else 'tie'} (1 repeat: no spread)"
    # diff compares each group's speed-up, labelled
    assert cli.main(["diff", str(out_dir), str(out_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[2:4] + [ln.split()[4]] for ln in lines if "speed-up" in ln.split()] == [
        ["speed-up", "reference", m] for m in ("comm_only", "full_op")] + [
        ["speed-up", "segment", m] for m in ("comm_only", "full_op")]
    assert lines[-1] == "0 of 10 differences beyond noise"  # 3 variants x 2 metrics, 2 groups x 2 metrics
    side = json.loads((out_dir / "doubleplane-segment" /
                       "combine_doubleplane_segment_counters_shape_16_128_1_4_2.json").read_text())
    assert side["settings"] == {"label": "segment", "cores_per_rank": 1} and side["counters_ok"] is True
    assert (out_dir / "doubleplane-segment" / "combine_doubleplane_segment_perf_rank0.csv").is_file()
