"""The timing model is trustworthy where it can be checked without hardware: one MTE segment
alone and one SDMA segment alone equal their closed forms; more bytes never make a case
faster; without SDMA segments both variants take the same time; doubling every link never
slows a case; the crossover moves the right way with SDMA's bandwidth and its per-descriptor
cost; and the parameter files say where every value comes from."""

from __future__ import annotations

import dataclasses

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combine_lab import CaseSpec, make_case
from combine_lab.case.case import case_from_arrays
from combine_lab.errors import ParameterError
from combine_lab.model.machines import (LINK_PARAMETERS, MODELS_DIR, OPTIONAL_LINK_PARAMETERS, PARAMETERS, load_model,
                                        model_names)
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows, core_runs, Run

A2 = load_model("a2")
SOC = A2.soc


def one_segment_case(pes: int, counts: dict[int, int], h: int = 1024, dtype: str = "int32_t"):
    """A case where PE 0 receives ``counts[src]`` rows from each src (all to expert 0) and
    nothing else moves: every other slot is masked."""
    bs = max(counts.values())
    spec = CaseSpec(pes=pes, bs=bs, h=h, topk=1, expert_per_pe=1, routing="external", dtype=dtype)
    ids = np.full((pes, bs, 1), -1, dtype=np.int32)
    for src, n in counts.items():
        ids[src, :n, 0] = 0
    return case_from_arrays(spec, np.ones((pes, bs, h)), ids, np.ones((pes, bs, 1)))


def test_one_mte_segment_equals_its_closed_form():
    n, h = 37, 1024
    case = one_segment_case(2, {1: n}, h)
    rows = case_rows(case, SOC)
    sdma = rows.sdma("classic", 0)
    assert core_runs(rows, sdma, 0, 1, stage=1) == [Run("mte_put", 1, n, 4 * h, 1), Run("quiet"),
                                                    Run("flag", 1, n, 32, 1), Run("quiet")]
    t = replay(rows, sdma, A2)
    row = 4.0 * h
    a = row / (A2["core_gm_GBps"] * 1e3)
    rate = min(A2["mte_remote_GBps"], A2["link_GBps"]) * 1e3
    b = row / rate + A2["mte_put_us"]
    expect = a + b + (n - 1) * max(a, b) + A2["quiet_us"] + n * A2["flag_us"] + A2["quiet_us"]
    assert t.comm_only[0, 1] == pytest.approx(expect, rel=1e-12)
    assert t.comm_only[0, 0] == 0.0 and (t.comm_only[1] == 0.0).all()
    # PE 1's tokens: the last flag lands, then each core's block of tokens is reduced in turn.
    last_flag = a + b + (n - 1) * max(a, b) + A2["quiet_us"] + n * A2["flag_us"] + A2["flag_latency_us"]
    assert t.full_op[1, 0] >= last_flag


def test_forty_cores_on_one_link_queue_there():
    """c40 on A2: the 40 cores of PE 0 split 400 rows of 64 KiB to PE 1, all over one HCCS link.
    Alone a core would move its 10 rows in ~47 us; together they wait on the link (20.284 GB/s), so
    each ends when the link has moved all 26.2 MB, and queue_us shows the wait. One core per
    source rank (the reference) has the link to itself: no queue."""
    case = one_segment_case(2, {1: 400}, 16384)
    rows = case_rows(case, SOC)
    c40 = rows.with_settings("c40")
    t = replay(c40, c40.sdma("classic", 0), A2)
    wire = 400 * 65536 / (A2["link_GBps"] * 1e3)
    tail = 2 * A2["quiet_us"] + 10 * A2["flag_us"]
    assert t.comm_only[0] == pytest.approx(np.full(40, wire + tail), rel=1e-9)
    a = 65536 / (A2["core_gm_GBps"] * 1e3)
    b = 65536 / (min(A2["mte_remote_GBps"], A2["link_GBps"]) * 1e3) + A2["mte_put_us"]
    alone = a + b + 9 * max(a, b)
    assert t.queue_us[0] == pytest.approx(np.full(40, wire - alone), rel=1e-9)
    assert round(float(t.queue_us[0, 0]), 1) == 1249.5 and (t.queue_us[1] == 0).all()
    ref = replay(rows, rows.sdma("classic", 0), A2)
    assert ref.queue_us[0, 1] == 0.0 and ref.comm_only[0, 1] == pytest.approx(
        a + b + 399 * b + 2 * A2["quiet_us"] + 400 * A2["flag_us"], rel=1e-9)


def test_one_sdma_segment_equals_its_closed_form():
    n1, n2, h = 300, 10, 2048  # PE 0 gets 300 rows from PE 1 and 10 from PE 2: the first is above average
    case = one_segment_case(3, {1: n1, 2: n2}, h)
    rows = case_rows(case, SOC)
    sdma = rows.sdma("doubleplane", 0)
    assert sdma[0].tolist() == [False, True, False]
    assert core_runs(rows, sdma, 0, 1, stage=1) == [Run("sdma_put", 1, 256, 4 * h, 1), Run("sdma_quiet"),
                                                    Run("sdma_put", 1, n1 - 256, 4 * h, 1), Run("sdma_quiet"),
                                                    Run("flag", 1, n1, 32, 1), Run("quiet")]
    t = replay(rows, sdma, A2)
    row = 4.0 * h
    svc = math.ceil(row / (1 << 20)) * A2["sdma_sqe_us"] + row / (A2["sdma_GBps"] * 1e3)
    done = lambda k: A2["sdma_issue_us"] + k * svc / A2["sdma_engines"]  # noqa: E731 (one issuer)
    t1 = max(256 * A2["sdma_issue_us"], done(256)) + A2["sdma_quiet_us"]
    t1 += (n1 - 256) * A2["sdma_issue_us"]
    link_bound = n1 * row / (A2["link_GBps"] * 1e3)  # the link 0 -> 1 carries these rows alone
    egress_bound = (n1 + n2) * row / (A2["egress_GBps"] * 1e3)  # the engine and core 2 share egress fairly
    expect = max(t1, done(n1), link_bound, egress_bound) + A2["sdma_quiet_us"] + n1 * A2["flag_us"] + A2["quiet_us"]
    assert t.comm_only[0, 1] == pytest.approx(expect, rel=1e-12)


def test_without_sdma_segments_both_variants_take_the_same_time():
    case = make_case(CaseSpec(pes=4, bs=64, h=512, topk=2, expert_per_pe=2, routing="zipf:1.0"))
    rows = case_rows(case, SOC)
    huge = 1 << 40
    assert not rows.sdma("doubleplane", huge).any()
    a = replay(rows, rows.sdma("classic", huge), A2)
    b = replay(rows, rows.sdma("doubleplane", huge), A2)
    assert np.array_equal(a.comm_only, b.comm_only) and np.array_equal(a.full_op, b.full_op)


cases = st.builds(
    lambda pes, bs, h, topk, epp, routing, seed: make_case(
        CaseSpec(pes=pes, bs=bs, h=h, topk=min(topk, pes * epp), expert_per_pe=epp, routing=routing, seed=seed)),
    st.integers(2, 6), st.integers(1, 48), st.sampled_from([8, 100, 1024, 4096]), st.integers(1, 4),
    st.integers(1, 3), st.sampled_from(["uniform", "zipf:1.2", "zipf:2.0"]),
    st.integers(0, 10_000))


@settings(max_examples=40, deadline=None)
@given(cases, st.sampled_from(["classic", "doubleplane"]), st.sampled_from([0, 1 << 16, 2 << 20]))
def test_more_bytes_never_make_a_case_faster(case, variant, floor):
    rows = case_rows(case, SOC)
    sdma = rows.sdma(variant, floor)
    before = replay(rows, sdma, A2)
    # The same plan with one more row in the largest segment of every PE, and with wider rows.
    grown = case_rows(case, SOC)
    grown.counts = grown.counts.copy()
    grown.counts[np.arange(case.spec.pes), grown.counts.argmax(axis=1)] += 1
    for after in (replay(grown, sdma, A2), replay(wider(rows), sdma, A2)):
        for metric in ("comm_only", "full_op"):  # the times a case reports: CoreMaxTime per PE
            assert (after.core_max(metric) >= before.core_max(metric) - 1e-9).all(), metric


def wider(rows):
    """The same rows, each twice as wide."""
    return dataclasses.replace(rows, h=rows.h * 2)


@settings(max_examples=40, deadline=None)
@given(cases, st.sampled_from(["classic", "doubleplane"]), st.sampled_from([0, 1 << 16]))
def test_doubling_every_link_never_slows_a_case(case, variant, floor):
    rows = case_rows(case, SOC)
    sdma = rows.sdma(variant, floor)
    slow = replay(rows, sdma, A2)
    fast = replay(rows, sdma, A2.with_values(link_GBps=2 * A2["link_GBps"], egress_GBps=2 * A2["egress_GBps"]))
    for metric in ("comm_only", "full_op"):
        assert (fast.core_max(metric) <= slow.core_max(metric) + 1e-9).all(), metric


def test_the_crossover_moves_the_right_way():
    # PE 0's busiest remote core sends 400 rows of 64 KiB; SDMA takes it off the core.
    case = one_segment_case(3, {1: 400, 2: 20}, h=16384)
    rows = case_rows(case, SOC)
    mte, dual = rows.sdma("classic", 0), rows.sdma("doubleplane", 0)
    assert dual[0, 1] and not dual[0, 2]
    slow_core = A2.with_values(mte_remote_GBps=10.0, link_GBps=100.0, egress_GBps=400.0)
    quick_engine = slow_core.with_values(sdma_GBps=60.0, sdma_sqe_us=0.5)
    costly_engine = slow_core.with_values(sdma_GBps=60.0, sdma_sqe_us=500.0)
    t = lambda m, s: replay(rows, s, m).time_us("comm_only", 0)  # noqa: E731
    assert t(quick_engine, dual) < t(quick_engine, mte)
    assert t(costly_engine, dual) > t(costly_engine, mte)
    assert t(quick_engine, mte) == t(costly_engine, mte)  # MTE-only never touches the engine


def test_the_same_inputs_give_identical_times():
    case = make_case(CaseSpec(pes=4, bs=32, h=256, topk=2, expert_per_pe=2, routing="zipf:1.2"))
    rows = case_rows(case, SOC)
    a = replay(rows, rows.sdma("doubleplane", 0), A2)
    b = replay(case_rows(case, SOC), rows.sdma("doubleplane", 0), A2)
    assert np.array_equal(a.comm_only, b.comm_only) and np.array_equal(a.full_op, b.full_op)


@pytest.mark.parametrize("name", ["a2", "a3", "host"])
def test_every_parameter_has_a_unit_and_a_source_or_is_assumed(name):
    m = load_model(name)
    assert [n for n in m.params if "." not in n] == list(PARAMETERS)
    optional = {"a3": ["server.uplink_GBps"]}.get(name, [])  # OPTIONAL_LINK_PARAMETERS: a3's server uplinks
    assert [n for n in m.params if "." in n] == [f"{c.name}.{p}" for c in m.links for p in LINK_PARAMETERS] + optional
    for n, p in m.params.items():
        assert p.unit == (PARAMETERS.get(n) or {**LINK_PARAMETERS, **OPTIONAL_LINK_PARAMETERS}[n.split(".")[1]])
        assert p.source or (p.assumed and p.rationale and p.range and p.range[0] <= p.value <= p.range[1]), p
    assert m.caption().startswith(f"modelled on {name} (")
    assert m.caption().endswith("assumed parameters: " + ", ".join(m.assumed))


def test_published_values_carry_their_grade_and_their_fit():
    a2, a3 = load_model("a2"), load_model("a3")
    # A2's link is the most one stream WROTE over it (the combine writes), not the read maximum 26.81
    assert a2["link_GBps"] == 20.284 and a2.param("link_GBps").source.startswith("M: hicann/hixl")
    assert "D2rD write at 2 MiB" in a2.param("link_GBps").source
    # a die's egress is its HCCS ports at the link's achieved rate: 7 x the A2 link's 20.284 (a3: 196 x 20.284 / 28)
    for m in (a2, a3):
        assert m["egress_GBps"] == round(7 * 20.284, 1) == 142.0 and m.param("egress_GBps").source.startswith("D: ")
    # the free fit's BW (20.6) is above the link: held at it, c fitted (one stream never outruns its link)
    assert a2.param("sdma_sqe_us").derivation == {"table": "hixl_a2_write", "form": "additive", "c_us": 0.99,
                                                  "BW_GBps": 20.28, "worst_error_pct": 2.3, "rows": 8,
                                                  "BW_cap_GBps": 20.284}
    for m in (a2, a3):  # every one-stream fit at most its link
        assert (m.link_values("sdma_GBps") <= m.link_values("link_GBps")).all()
    assert a3.link_values("sdma_GBps").tolist() == [167.31, 133.87, 125.17]
    # the per-leg copy rate prices the profiling sample (190 KiB put + signal, 4.40-4.95 us) at its mean
    sample = 2 * 194560 / (a3["core_gm_GBps"] * 1e3) + a3["mte_put_us"] + a3["flag_us"]
    assert 4.40 <= sample <= 4.95 and abs(sample - 4.675) < 0.001
    assert (a2["hbm_GBps"], a3["hbm_GBps"]) == (1200.0, 1420.0) and a3.param("hbm_GBps").source.startswith("D: ")
    up = a3.param("server.uplink_GBps")
    assert (up.value, up.range, up.assumed) == (16 * 142.0, (16 * 142.0 / 4, 16 * 142.0), True)  # no taper .. 4:1
    assert [(c.name, c.pair, c.form) for c in a3.links] == [("die_pair", "same_card", "max"),
                                                            ("card", "same_server", "additive"),
                                                            ("server", "other_server", "additive")]
    # nothing published: these stay assumed, each with its range
    assert {"mte_put_us", "flag_latency_us", "quiet_us", "sdma_engines", "sdma_issue_us"} <= set(a2.assumed)
    assert a3.params["sdma_engines"].range == (1.0, 48.0)
    assert model_names() == ["a2", "a3", "host"]


def test_a_model_file_from_before_hbm_was_priced_still_loads(tmp_path):
    text = (MODELS_DIR / "a2.toml").read_text()
    start = text.index("[params.hbm_GBps]")
    old = tmp_path / "old.toml"
    old.write_text(text[:start] + text[text.index("[params.barrier_us]"):])
    m = load_model(old)
    assert m["hbm_GBps"] == 1e9 and not m.params["hbm_GBps"].fit and "older" in m.params["hbm_GBps"].rationale
    case = one_segment_case(2, {1: 37}, 1024)
    rows = case_rows(case, SOC)
    assert replay(rows, rows.sdma("classic", 0), m).comm_only.tolist() == \
        replay(rows, rows.sdma("classic", 0), A2).comm_only.tolist()


def test_the_rank_map_gives_each_pe_pair_its_link_class():
    a3 = load_model("a3")
    cls = a3.pair_class(64)
    names = [c.name for c in a3.links]
    assert names[cls[0, 1]] == "die_pair" and names[cls[0, 2]] == "card" and names[cls[0, 15]] == "card"
    assert names[cls[0, 16]] == "server" and names[cls[17, 16]] == "die_pair" and names[cls[63, 48]] == "card"
    assert (cls == cls.T).all()
    with pytest.raises(ParameterError) as e:
        load_model("a2").pair_class(16)
    assert str(e.value) == ("pes=16: a2 models at most 8 PEs (one A2 server: 8 cards in an HCCS full mesh; between "
                            "A2 servers (RoCE) no one-stream table is published, so the model stops at 8 PEs (a3 "
                            "models more))")


def test_link_class_is_the_rank_map_by_name():
    """The public rank map (machines.link_class): a name per PE pair, the same as pair_class."""
    from combine_lab.model.machines import link_class, rank_place

    a3 = load_model("a3")
    assert [link_class(a3, 0, d) for d in (0, 1, 2, 15, 16, 767)] == ["die_pair", "die_pair", "card", "card",
                                                                       "server", "server"]
    r = np.arange(64)
    names = np.array([c.name for c in a3.links], dtype=object)
    assert (link_class(a3, r[:, None], r[None, :]) == names[a3.pair_class(64)]).all()
    assert a3.link_class(17, 16) == "die_pair" and link_class(load_model("a2"), 3, 5) == "hccs"
    assert [x.tolist() for x in rank_place(a3, [0, 1, 2, 17, 767])] == [[0, 0, 0, 1, 47], [0, 0, 1, 0, 7],
                                                                       [0, 1, 0, 1, 1]]
    with pytest.raises(ParameterError) as e:
        link_class(load_model("a2"), 0, 8)
    assert e.value.parameter == "dst" and str(e.value).startswith("dst=8: a rank of a2 in [0, 7] (")


def test_a_far_link_class_prices_its_own_parameters():
    """One SDMA segment from PE 0 to PE 1 (the die pair) and to PE 16 (another server): each is
    priced by its class's descriptor cost, bandwidth and form."""
    a3 = load_model("a3").with_values(sdma_engines=1.0)
    for dst, cls in ((1, "die_pair"), (16, "server")):
        case = one_segment_case(17, {dst: 300, 2 if dst != 2 else 3: 10}, 2048)
        rows = case_rows(case, a3.soc)
        sdma = rows.sdma("doubleplane", 0)
        assert sdma[0].tolist() == [d == dst for d in range(17)]
        t = replay(rows, sdma, a3).comm_only[0, dst]
        row = 4.0 * 2048
        c, bw = a3[f"{cls}.sdma_sqe_us"], a3[f"{cls}.sdma_GBps"] * 1e3
        svc = max(c, row / bw) if cls == "die_pair" else c + row / bw
        engine = a3["sdma_issue_us"] + 300 * svc  # one core issues all 300: the engine's work is its
        assert t >= engine + a3["sdma_quiet_us"]
        assert t == pytest.approx(max(engine, 256 * a3["sdma_issue_us"] + a3["sdma_quiet_us"] + 44 * a3["sdma_issue_us"])
                                  + a3["sdma_quiet_us"] + 300 * a3["flag_us"] + a3["quiet_us"], rel=1e-9)


def test_an_unknown_model_is_refused():
    with pytest.raises(ParameterError) as e:
        load_model("a9")
    assert str(e.value) == "model='a9': one of a2, a3, host, or a .toml file"


def test_a_written_model_reads_back(tmp_path):
    m = load_model("a3").with_values(**{"card.sdma_GBps": 77.0})
    back = load_model(m.to_toml(tmp_path / "fit.toml"))
    assert back.params == m.params and back.name == "a3" and back.links == m.links and back.topology == m.topology
