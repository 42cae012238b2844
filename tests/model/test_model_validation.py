"""The timing model against published numbers it was not fitted to (docs/timing-model.md#11-validation).

1. Every fitted value of a2.toml / a3.toml is what its published table gives (the fit re-made
   from combine_lab/model/published.py), and no table a value is fitted to is a check row.
2. The one-stream tables held out for checking (HIXL's hixl_cs die pair, MemFabric's die pair,
   HIXL's two-server comm domain) are priced by the model's own SDMA call within a stated band.
3. DeepEP-Ascend's published combines (normal mode EP8-EP128 and low-latency EP8-EP32 on A3,
   low-latency EP8 on A2; none of them fits anything: the fits are the one-stream tables of 1),
   the lab's classic kernel (the MTE plane, as DeepEP-Ascend's combine) priced on the same shape,
   full_op of the slowest PE against the published time (bytes bs * topk * h * 2 over the
   published GB/s), with two structures: the lab setting closest to DeepEP-Ascend's (every AIV of
   the die on each source rank's rows: c6 on A3's 48, c5 on A2's 40) and the reference's (one core
   per source rank, min(pes, 48) cores). The target (issue 28): like for like within 25 % at every
   normal EP and the EP8 -> EP128 trend within 25 %. The trend is met (1.26 against 1.54), the level
   only at EP8 (1.22) and in low-latency mode on A3 (0.89-0.96): the bands below are what the model
   reaches with every shared limit priced (links shared by every core on them, the egress without
   the SIO's bytes and at its achieved 142 GB/s, server uplinks, HBM, the per-leg copy rate;
   docs/timing-model.md#11-validation says so and why),
   asserted as they are so that a change to the model that moves them has to say so here and there.
4. What each candidate the model might leave out would do (docs/timing-model.md#11-validation): an
   assumed per-row or per-token cost at the slow end of its range moves every EP alike, so none
   makes the published trend; the uplinks' taper does.
"""

from __future__ import annotations

import functools

import pytest

from combine_lab import CaseSpec, make_case
from combine_lab.model.costs import sdma_call_us
from combine_lab.model.machines import load_model
from combine_lab.model.published import TABLES, fit_table
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows

#: Held-out one-stream tables: the band (relative error of the block time) each must meet, why.
CHECK_BANDS = {
    "hixl_a3_die_pair": (0.12, "the same die pair through HIXL's hixl_cs path"),
    "memfabric_a3_die_pair": (0.12, "host-driven; its blocks from 1 MiB, where the host's issue no longer shows"),
    # 0.30 when it was written; since the fits are held at their links (c 3.16 us, not 3.29) its 16 KiB
    # block misses by 30.4 %: the band says so rather than hide it
    "hixl_a3_server": (0.31, "the HCCL comm-domain path, which adds its own per-block overhead (c 4.6 us, not 3.16)"),
}

#: DeepEP-Ascend's published combines (sgl-project/sgl-kernel-npu README and PR 176): machine, mode,
#: EP (PEs), tokens per rank, published GB/s.
DEEPEP = [
    ("a3", "normal", 8, 4096, 125.0), ("a3", "normal", 16, 4096, 103.0), ("a3", "normal", 32, 4096, 95.0),
    ("a3", "normal", 64, 4096, 91.0), ("a3", "normal", 128, 4096, 81.0),
    ("a3", "low-latency", 8, 128, 116.0), ("a3", "low-latency", 16, 128, 109.0), ("a3", "low-latency", 32, 128, 97.0),
    ("a2", "low-latency", 8, 256, 66.35),
]
#: The target: published / modelled within 25 % either way, like for like (the closest structure).
TARGET = 1.25
#: What the closest structure reaches, published / nominal (docs/timing-model.md#11-validation): A3
#: normal 1.22-1.48 (the model 1.2-1.5x optimistic, more so the larger the EP: the target met at
#: EP8 only), A3 low-latency 0.89-0.96 (within the target), A2 low-latency 1.58 (not met). With the
#: die's egress at its nominal 196 GB/s (before issue 28's third round): 1.56-1.93 and 1.01-1.11.
REACHED = {("a3", "normal"): (1.21, 1.49), ("a3", "low-latency"): (0.88, 0.97), ("a2", "low-latency"): (1.57, 1.58)}
#: The rows within the target, like for like (any other row within it, or one of these out of it,
#: fails: the docs' table says which).
WITHIN_TARGET = {("a3", "normal", 8), ("a3", "low-latency", 8), ("a3", "low-latency", 16), ("a3", "low-latency", 32)}
#: The reference's structure where it has 32 or more cores: published / nominal reached.
REFERENCE_REACHED = (0.96, 1.45)
#: The published EP8 -> EP128 normal-mode trend (5800 / 3758 us) and the closest structure's.
TREND_PUBLISHED, TREND_MODELLED = 1.54, 1.26


def closest(machine: str) -> str:
    """The lab setting closest to DeepEP-Ascend's structure: every AIV of the die (48 on A3, 40 on A2)."""
    return f"c{min(load_model(machine).aiv_cores, 48) // 8}"


def corner(model, fast: bool):
    """``model`` with every assumed parameter at the end of its range that makes it fastest (or slowest)."""
    return model.with_values(**{n: (p.range[0] if p.cost == fast else p.range[1])
                                for n, p in model.params.items() if p.assumed})


def test_every_fitted_value_is_its_tables_fit_and_no_check_row_fits_anything():
    fitted = set()
    for name in ("a2", "a3"):
        m = load_model(name)
        for n, p in m.params.items():
            if p.derivation is None:
                continue
            d = p.derivation
            t = TABLES[d["table"]]
            assert t.use == "fit" and t.chip == name and n.split(".")[0] == t.link, (n, d)
            f = fit_table(d["table"], d["form"], d.get("BW_cap_GBps"))
            assert (round(f.c_us, 3), round(f.bw_GBps, 2), round(f.worst_error_pct, 1), f.rows) == (
                d["c_us"], d["BW_GBps"], d["worst_error_pct"], d["rows"]), n
            # one stream never outruns its link: the cap is the class's link_GBps
            assert d["BW_cap_GBps"] == m[f"{t.link}.link_GBps"] and f.bw_GBps <= d["BW_cap_GBps"], n
            assert p.value == (d["c_us"] if n.endswith("sdma_sqe_us") else d["BW_GBps"])
            assert m.links[[c.name for c in m.links].index(t.link)].form == d["form"]
            fitted.add(d["table"])
    assert fitted == {n for n, t in TABLES.items() if t.use == "fit"}
    assert set(CHECK_BANDS) == {n for n, t in TABLES.items() if t.use == "check"}


@pytest.mark.parametrize("table", sorted(CHECK_BANDS))
def test_held_out_one_stream_tables_are_priced_within_their_band(table):
    t, (band, _why) = TABLES[table], CHECK_BANDS[table]
    m = load_model(t.chip)
    cls = [c.name for c in m.links].index(t.link)
    rows = [(b, r) for b, r in t.rows if t.min_block <= b <= t.max_block]
    assert len(rows) >= 3
    for b, rate in rows:
        modelled, published = float(sdma_call_us(m, cls, b)), b / (rate * 1e3)
        assert abs(modelled / published - 1) <= band, (table, b, modelled, published)


@functools.lru_cache(maxsize=None)
def priced(machine: str, ep: int, tokens: int, settings: str = "reference") -> tuple[float, float, float]:
    """full_op of the slowest PE (us), classic under ``settings``, at the nominal values, the fast and
    the slow corner (a time, not a ratio: monotone in each parameter, so the corners bound it).
    Routing: top-8 of 256 experts, distinct and uniform per token (DeepEP-Ascend's test draws)."""
    m = load_model(machine)
    spec = CaseSpec(pes=ep, bs=tokens, h=7168, topk=8, expert_per_pe=256 // ep, dtype="float16_t", routing="zipf:0")
    rows = case_rows(make_case(spec), m.soc).with_settings(settings)
    mask = rows.sdma("classic", 0)
    return tuple(float(replay(rows, mask, mm).core_max("full_op").max())
                 for mm in (m, corner(m, True), corner(m, False)))


def published_us(tokens: int, gbps: float) -> float:
    return tokens * 8 * 7168 * 2 / (gbps * 1e3)


def marks(ep: int):
    return [pytest.mark.slow] if ep >= 128 else []


ROWS = [pytest.param(*r, id=f"{r[0]}-{r[1]}-EP{r[2]}", marks=marks(r[2])) for r in DEEPEP]


@pytest.mark.parametrize("machine, mode, ep, tokens, gbps", ROWS)
def test_deepep_ascend_like_for_like_with_the_closest_structure(machine, mode, ep, tokens, gbps):
    published = published_us(tokens, gbps)
    nominal, fast, slow = priced(machine, ep, tokens, closest(machine))
    assert fast < nominal < slow and fast <= published <= slow, (published, fast, slow)
    lo, hi = REACHED[machine, mode]
    assert lo <= published / nominal <= hi, (published, nominal)
    assert (1 / TARGET <= published / nominal <= TARGET) == ((machine, mode, ep) in WITHIN_TARGET), (published, nominal)


@pytest.mark.slow  # EP128
def test_the_ep8_to_ep128_trend_is_within_25_percent():
    """The target's second half, met since the SIO's bytes are off the die's egress: the cross-card
    share grows from 6/8 of a die's rows at EP8 to 126/128 at EP128."""
    published = published_us(4096, 81.0) / published_us(4096, 125.0)
    modelled = priced("a3", 128, 4096, "c6")[0] / priced("a3", 8, 4096, "c6")[0]
    assert (round(published, 2), round(modelled, 2)) == (TREND_PUBLISHED, TREND_MODELLED)
    assert 1 / TARGET <= modelled / published <= TARGET  # 0.81


@pytest.mark.parametrize("machine, mode, ep, tokens, gbps", ROWS)
def test_deepep_ascend_with_the_reference_structure(machine, mode, ep, tokens, gbps):
    published = published_us(tokens, gbps)
    nominal, fast, slow = priced(machine, ep, tokens)
    assert fast < nominal < slow
    if ep >= 32:  # 32 or 48 cores against 48: near; the published time within the box
        assert fast <= published <= slow, (published, fast, slow)
        assert REFERENCE_REACHED[0] <= published / nominal <= REFERENCE_REACHED[1], (published, nominal)
    else:  # the lab's min(pes, 48) cores against DeepEP-Ascend's 48: the lab's kernel is the slower
        assert nominal > published, (published, nominal)


#: docs/timing-model.md#11-validation, the candidates: each assumed per-row or per-token cost at the
#: slow end of its range (the rest nominal), the closest structure's EP8 -> EP64 trend (published
#: 5162 / 3758 us = 1.37): every die sends and receives the same 32768 rows at every EP (683 per
#: core), so these move every EP together and none makes the trend; the uplinks' 4:1 taper does
#: (too much). Range ends for the argument, not fitted values: the model keeps its nominals.
TREND_CANDIDATES = {"mte_put_us": (3.0, 1.22), "mte_remote_GBps": (10.0, 1.24), "vec_elems_per_us": (10000.0, 1.21),
                    "wait_us": (3.0, 1.15), "server.uplink_GBps": (568.0, 3.43)}


def test_no_per_row_or_per_token_cost_makes_the_published_trend():
    m = load_model("a3")
    rows = {ep: case_rows(make_case(CaseSpec(pes=ep, bs=4096, h=7168, topk=8, expert_per_pe=256 // ep,
                                             dtype="float16_t", routing="zipf:0")), m.soc).with_settings("c6")
            for ep in (8, 64)}
    published = published_us(4096, 91.0) / published_us(4096, 125.0)
    assert round(published, 2) == 1.37
    for name, (value, trend) in TREND_CANDIDATES.items():
        mm = m.with_values(**{name: value})
        t = {ep: float(replay(r, r.sdma("classic", 0), mm).core_max("full_op").max()) for ep, r in rows.items()}
        assert round(t[64] / t[8], 2) == trend, name
        assert (t[64] / t[8] < published) == (name != "server.uplink_GBps"), name
