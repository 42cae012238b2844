"""The timing model prices the kernel's settings beyond the reference (docs/variants.md#6-what-the-model-says):
the segment layout step by hand, one SDMA call per chunk where rows lie back to back, cores per rank
as more cores per PE; suggest over settings against the reference's classic, with its bands and the tie rule;
the command line validates its flags before anything is priced."""

from __future__ import annotations

import numpy as np
import pytest

from combine_lab import CaseSpec, cli, make_case
from combine_lab.errors import ParameterError
from combine_lab.model.machines import load_model
from combine_lab.model.modelled import model_case
from combine_lab.model.replay import layout_us, replay, stage1
from combine_lab.model.stream import case_rows
from combine_lab.model.suggest import NEVER, band_sentence, band_word, suggest, suggest_settings

A3 = load_model("a3")
SPEC = CaseSpec(pes=8, bs=64, h=7168, topk=8, expert_per_pe=4, dtype="float16_t", routing="zipf:1.2")
FLAGS = ["-pes", "8", "-bs", "64", "-h", "7168", "-topk", "8", "-expertPerPe", "4", "-type", "float16_t",
         "--routing", "zipf:1.2"]


@pytest.fixture(scope="module")
def rows():
    return case_rows(make_case(SPEC), A3.soc)


def test_layout_step_by_hand():
    """pes 2, epp 2: core 0 puts 8 B of bases to PE 0 (local) and PE 1 (remote) through the two-stage
    pipeline, quiets, puts 2 ready blocks, quiets, meets the other cores; the senders start then, or
    when the last ready block to them has landed, whichever is later."""
    m = A3
    gm, remote = m["core_gm_GBps"] * 1e3, min(m["mte_remote_GBps"], m.link_values("link_GBps")[m.pair_class(2)[0, 1]]) * 1e3
    a = 8 / gm
    b_local, b_remote = 8 / gm + m["mte_put_us"], 8 / remote + m["mte_put_us"]
    pipe = max(2 * a, a + b_local) + b_remote  # the second put's UB -> GM leg after the first's
    ready = pipe + m["quiet_us"]
    own = ready + 2 * m["flag_us"] + m["quiet_us"] + m["barrier_us"]
    landed = ready + 2 * m["flag_us"] + m["flag_latency_us"]  # PE 1's ready block, the later one
    np.testing.assert_allclose(layout_us(np.array([0, 1]), 2, 2, m), [max(own, ready + m["flag_us"] +
                               m["flag_latency_us"], landed)] * 2, rtol=1e-12)


def test_settings_prices_by_construction(rows):
    """The reference's results do not move; c<N> puts more cores on the same bytes; the segment layout
    costs its step when nothing goes by SDMA and saves SDMA calls when rows do."""
    mask = rows.sdma("doubleplane", 0)
    ref = replay(rows, mask, A3)
    assert ref.block_dim == 8
    assert replay(rows.with_settings("reference"), mask, A3).comm_only.tolist() == ref.comm_only.tolist()
    c6 = rows.with_settings("c6")
    assert c6.block_dim == 48  # 8 groups of 6 on a 48-core die
    classic_ref = replay(rows, rows.sdma("classic", 0), A3).core_max("comm_only").max()
    classic_c6 = replay(c6, rows.sdma("classic", 0), A3).core_max("comm_only").max()
    assert classic_c6 < classic_ref
    seg = rows.with_settings("segment")
    none = np.zeros_like(mask)
    step = layout_us(np.arange(8), 8, 4, A3)
    # with nothing by SDMA, the segment kernel is the classic one after its layout step
    c_seg, _ = stage1(seg.counts, none, np.arange(8), 8, 8, 4, seg.row_bytes, A3, layout=True)
    c_ref, _ = stage1(rows.counts, none, np.arange(8), 8, 8, 4, rows.row_bytes, A3)
    np.testing.assert_allclose(c_seg, c_ref + step[:, None], rtol=1e-12)
    # one call per segment (rows of 14 KiB back to back) instead of one per row: fewer calls, less SDMA time
    assert seg.one_call
    plan_calls = model_case(make_case(SPEC), "doubleplane", A3, 0, settings="segment").plan.totals["sdma_calls"]
    row_calls = model_case(make_case(SPEC), "doubleplane", A3, 0).plan.totals["sdma_calls"]
    assert plan_calls.sum() == int(mask.sum()) and row_calls.sum() == int(rows.counts[mask].sum())
    # after its layout step, never slower and faster where rows go by SDMA; at bs 64 the step (14.4 us)
    # outweighs the calls saved (a card call of one row costs 1.6 us since the fits are held at the link)
    after_step = replay(seg, mask, A3).core_max("comm_only") - step
    ref_max = ref.core_max("comm_only")
    assert (after_step <= ref_max + 1e-9).all() and (after_step < ref_max - 5).sum() == 2
    assert round(float(step[0]), 2) == 14.4


def test_suggest_under_settings_curve_on_the_reference_scale_verdict_against_the_same_cores(rows):
    s = suggest(rows, A3, settings="segment-c6")
    assert s.label == "doubleplane-segment-c6"
    c6 = rows.with_settings("c6")
    classic_c6 = replay(c6, rows.sdma("classic", 0), A3).core_max("comm_only").max()
    classic_ref = replay(rows, rows.sdma("classic", 0), A3).core_max("comm_only").max()
    never = s.curve.iloc[-1]
    assert never["threshold_bytes"] == NEVER
    assert never["modelled_us"] == pytest.approx(classic_c6, rel=1e-12)
    np.testing.assert_allclose(s.curve["speedup"], classic_ref / s.curve["modelled_us"], rtol=1e-12)
    seg_c6 = rows.with_settings("segment-c6")
    floor = s.verdict.floor
    at = s.curve.loc[s.curve["threshold_bytes"] == floor, "modelled_us"].iloc[0]
    assert at == pytest.approx(replay(seg_c6, rows.sdma("doubleplane", floor), A3).core_max("comm_only").max(),
                               rel=1e-12)
    v = s.verdict
    assert v.label == "doubleplane-segment-c6" and v.low <= v.nominal <= v.high
    # one yardstick per question: does SDMA pay for these cores? against classic with the same cores
    assert v.against == "classic-c6" and v.nominal == pytest.approx(classic_c6 / at, rel=1e-12)
    assert list(v.engines["engines"]) == [1, 2, 4, 8, 16, 32, 48]
    assert " SDMA engines than classic-c6, the rest nominal: " in v.engines_line()
    assert (f"against classic-c6 (MTE only, the same cores): {v.nominal:.3f}x at the nominal values, {v.low:.3f}x - "
            f"{v.high:.3f}x over the unknowns' box: {band_sentence(v.low, v.high)}; ") in s.pick_text()
    asked = suggest(rows, A3, settings="segment-c6", baseline="reference").verdict  # unless asked
    assert asked.against == "classic" and asked.nominal == pytest.approx(classic_ref / at, rel=1e-12)
    # the reference's suggestion is what it was
    ref, same = suggest(rows, A3), suggest(rows, A3, settings="reference")
    assert ref.label == "doubleplane" and ref.curve.equals(same.curve)
    # a classic setting: one point
    k = suggest(rows, A3, settings="c6", variant="classic")
    assert k.curve["threshold_bytes"].tolist() == [NEVER] and k.verdict.label == "classic-c6"
    assert k.verdict.nominal == pytest.approx(classic_ref / classic_c6, rel=1e-12)
    with pytest.raises(ParameterError, match=r"^what_if='segment' with settings='c6'"):
        suggest(rows, A3, what_if="segment", settings="c6")
    with pytest.raises(ParameterError, match=r"^segment with variant='classic'"):
        suggest(rows, A3, settings="segment", variant="classic")


def test_band_words_by_the_tie_rule():
    assert band_word(1.06, 2.0) == "faster"
    assert band_word(0.5, 0.95) == "slower"
    assert band_word(0.96, 1.04) == "tie"
    assert band_word(0.9, 1.3) == "depends on the unknowns"
    # the sentence says which words a band that depends spans (a fresh user read "it pays nowhere in the
    # box" and "depends on the unknowns" of one band as two verdicts)
    assert band_sentence(0.875, 1.005) == "depends on the unknowns (slower to a tie: it pays nowhere in the box)"
    assert band_sentence(0.99, 1.3) == "depends on the unknowns (a tie to faster: never slower)"
    assert band_sentence(0.9, 1.3) == "depends on the unknowns (slower to faster)"
    assert band_sentence(0.96, 1.04) == "tie" and band_sentence(1.06, 2.0) == "faster"


def test_settings_side_by_side(rows):
    c = suggest_settings(rows, A3, ["doubleplane", "classic-c6", "doubleplane-segment-c6"])
    t = c.table.set_index("variant")
    assert list(t.index) == ["doubleplane", "classic-c6", "doubleplane-segment-c6"]
    assert t.loc["classic-c6", "best_floor"] == NEVER and t.loc["classic-c6", "pays_from"] is None
    one = suggest(rows, A3, settings="segment-c6", baseline="reference")  # the table: the reference's scale
    assert t.loc["doubleplane-segment-c6", "best_floor"] == one.verdict.floor
    assert t.loc["doubleplane-segment-c6", "speedup"] == pytest.approx(one.verdict.nominal, rel=1e-12)
    for lb, r in t.iterrows():
        assert r["verdict"] == band_word(r["low"], r["high"]), lb


def run_cli(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_suggest_cli_prices_a_setting_with_its_bands(capsys):
    code, out, err = run_cli(["suggest", *FLAGS, "--variant", "doubleplane-segment", "--cores-per-rank", "6",
                              "--model", "a3"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == A3.caption() and "modelled on a3" in lines[1] and "assumed parameters: " in lines[1]
    assert lines[2] == ("priced: doubleplane-segment-c6 (docs/variants.md); speed-up = the reference's classic "
                        "(one core per source rank) / this")
    s = suggest(case_rows(make_case(SPEC), A3.soc), A3, settings="segment-c6")
    assert lines[-1] == s.pick_text()
    assert lines[-1].startswith(f"doubleplane-segment-c6 at min_sdma_bytes={s.verdict.floor}: ")
    assert any(ln.startswith("doubleplane-segment-c6 at floor ") and " SDMA engines than classic-c6, the rest nominal: "
               in ln and ln.endswith(" at once") for ln in lines)
    # the segment layout's step also reads the flag latency and the barrier: 9 unknowns, 512 vertices
    assert ("what moves the verdict most, jointly (measure first; the speed-up's geometric mean with the parameter "
            "at each end over the 512 vertices of the unknowns):") in lines
    assert set(s.verdict.vertices.columns) >= {"flag_latency_us", "barrier_us"}
    assert any(ln.split()[:4] == ["never", "SDMA", "(classic-c6)", "0"] for ln in lines)


def test_suggest_cli_lists_settings_side_by_side(capsys):
    code, out, err = run_cli(["suggest", *FLAGS, "--variant", "classic,doubleplane-segment", "--cores-per-rank", "1,6"],
                             capsys)
    assert code == 0, err
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["variant", "best_floor"])
    assert [ln.split()[0] for ln in lines[head + 1:]] == ["classic", "classic-c6", "doubleplane-segment",
                                                          "doubleplane-segment-c6"]
    assert "speed-up = the reference's classic (MTE only, one core per source rank) / the setting" in lines[head - 1]
    classic = lines[head + 1].split()
    assert classic[1:3] == ["never", "SDMA"] and classic[4] == "1.000"  # the reference's classic itself
    assert classic[5:] == ["1.000x", "-", "1.000x", "tie", "-", "-"]


@pytest.mark.parametrize("flags, message", [
    (["--variant", "classic-segment"], "--variant 'classic-segment': must be 'classic', 'doubleplane', then optionally "
                                       "'-segment'"),
    (["--variant", "dp"], "--variant 'dp': must be 'classic', 'doubleplane'"),
    (["--cores-per-rank", "49"], "--cores-per-rank '49': must be an int in [1, 48] (the 48 AIV cores of Ascend910_93"),
    (["--cores-per-rank", "0"], "--cores-per-rank '0': must be an int in [1, 48]"),
    (["--variant", "doubleplane-c6", "--cores-per-rank", "4"],
     "--variant 'doubleplane-c6' with --cores-per-rank 4: give cores per rank in one of them"),
    (["--variant", "doubleplane-segment", "--what-if", "segment-sdma"],
     "--what-if segment-sdma with --variant doubleplane-segment: the what-if prices the reference's doubleplane"),
])
def test_suggest_cli_refuses_bad_flags_before_pricing(flags, message, capsys, monkeypatch):
    monkeypatch.setattr("combine_lab.cli.suggest.make_case", lambda *a, **k: pytest.fail("nothing may be priced"))
    code, out, err = run_cli(["suggest", *FLAGS, *flags], capsys)
    assert code != 0 and message in err, err
