"""The probe fit (combine_lab/model/probe_fit.py) on probe CSVs made from known parameters by the
fit's own formulas (docs/probe.md#4-the-fit): every parameter comes back exactly; rows that cannot
identify a parameter make calibrate exit 1 naming it and the rows that would; noise likewise."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from combine_lab.cli import main
from combine_lab.errors import ParameterError, ResultFileError
from combine_lab.formats.probe_csv import (OLD_PROBE_HEADER, PROBE_HEADER, ProbeRow, build_refusal, is_probe_csv, read_probe_csv,
                                          write_probe_csv)
from combine_lab.model.machines import load_model
from combine_lab.model import costs
from combine_lab.model.probe_fit import PROBE_PARAMETERS, fit_probe, probed_class

TRUE = {"quiet_us": 1.5, "sdma_quiet_us": 3.0, "wait_us": 0.5, "flag_us": 0.25, "sdma_issue_us": 0.75,
        "mte_put_us": 1.25, "mte_remote_GBps": 20.0, "flag_latency_us": 2.0, "sdma_sqe_us": 0.9, "sdma_GBps": 50.0,
        "sdma_engines": 4.0}
CORE_GM = load_model("a3")["core_gm_GBps"]  # the MTE estimate takes it from the model
MiB = 1 << 20


def synthetic(cores=(1, 2, 8, 48), sdma_bytes=(14336, MiB, 2 * MiB), row_bytes=(14336, 57344), jitter=(),
              is_max=True):
    """Rows whose times follow the fit's formulas with TRUE; ``jitter``: a factor per repeat;
    ``is_max``: the probed pair's SDMA cost form (a3's die pair: max(c, b / BW) per descriptor)."""
    p = TRUE
    reps = np.array(jitter or (1.0, 1.0, 1.0))
    rows = []

    def row(kind, cores, puts, nbytes, t, peers=1, buffering=""):
        rows.append(ProbeRow(kind, 4, 0, 1, peers, cores, puts, nbytes, buffering, t * reps, "npu", "Ascend910_9391"))

    for b in sdma_bytes:
        w = float(costs.call_us(b, p["sdma_sqe_us"], p["sdma_GBps"] * 1e3, is_max))
        for k in cores:
            for peers in (1, 3):
                n = 8
                row("sdma", k, n, b, p["sdma_issue_us"] + n * w * max(1, k / p["sdma_engines"]) + p["sdma_quiet_us"],
                    peers)
    row("sdma_issue", 1, 32, 14336, 32 * p["sdma_issue_us"])
    for b in row_bytes:
        a, bb = b / (CORE_GM * 1e3), p["mte_put_us"] + b / (p["mte_remote_GBps"] * 1e3)
        row("mte_put", 1, 32, b, 32 * (a + bb) + p["quiet_us"], buffering="single")
        row("mte_put", 1, 32, b, a + bb + 31 * max(a, bb) + p["quiet_us"], buffering="double")
    row("flag", 1, 32, 32, 32 * p["flag_us"] + p["quiet_us"])
    b = min(row_bytes)
    trip = b / (CORE_GM * 1e3) + p["mte_put_us"] + b / (p["mte_remote_GBps"] * 1e3) + p["quiet_us"] + p["flag_us"] + \
        p["flag_latency_us"] + p["wait_us"]
    row("flag_rtt", 1, 16, b, 16 * 2 * trip)
    for kind, name in (("quiet", "quiet_us"), ("sdma_quiet", "sdma_quiet_us"), ("wait", "wait_us")):
        row(kind, 1, 32, 0, 32 * p[name])
    return rows


@pytest.mark.parametrize("is_max", [True, False], ids=["max-form", "additive"])
def test_every_parameter_comes_back_from_rows_made_by_its_formula(is_max):
    model = load_model("a3")
    if not is_max:  # the die pair's SDMA cost in the additive form (a2's, and a3's between cards and servers)
        model = dataclasses.replace(model, links=tuple(dataclasses.replace(c, form="additive") for c in model.links))
    assert probed_class(synthetic(), model) == 0 and model.links[0].name == "die_pair"
    fit = fit_probe(synthetic(is_max=is_max), model, source="synthetic.csv")
    assert fit.usable and fit.unidentified == []
    for n in PROBE_PARAMETERS:
        assert fit.params[n].identified, (n, fit.params[n].how)
        assert fit.params[n].value == pytest.approx(TRUE[n], rel=1e-9), n
    # the held-out rows (double-buffered MTE, several peers, k > 1 at the other sizes) predicted exactly
    assert len(fit.held_out) == 2 + 12 * 2 - 3 - 3
    assert max(abs(h.error) for h in fit.held_out) < 1e-9
    assert "sdma_engines" in fit.params and fit.params["sdma_engines"].how == \
        "3 sdma row(s) of 48 cores: 4 of their streams at once"


def test_one_row_size_cannot_split_the_mte_put_and_calibrate_exits_1_naming_it(tmp_path, capsys):
    path = write_probe_csv(tmp_path / "p.csv", synthetic(row_bytes=(14336,)))
    rc = main(["calibrate", str(path), "--model", "a3", "--out", str(tmp_path / "m.toml")])
    out = capsys.readouterr().out
    assert rc == 1 and not (tmp_path / "m.toml").exists()
    assert "NOT usable: the data cannot identify mte_put_us, mte_remote_GBps\n" in out
    assert ("  mte_put_us: identified by single-buffered mte_put rows of one core at two or more row sizes "
            "(--row-bytes), and quiet_us") in out
    assert ("NOT identified: single-buffered rows at 1 row size(s): it and mte_remote_GBps are one sum at one "
            "size") in out
    assert "calibrate: not usable, nothing written (exit 1)" in out
    # the identified ones alone: exit 0, the model written with their values, sourced to the probe
    ok = "quiet_us,sdma_quiet_us,wait_us,flag_us,sdma_issue_us,flag_latency_us,sdma_sqe_us,sdma_GBps,sdma_engines"
    assert f"(--free {ok} fits only the identified ones)" in out
    rc = main(["calibrate", str(path), "--model", "a3", "--free", ok, "--out", str(tmp_path / "m.toml")])
    assert rc == 0
    doc = tomllib.loads((tmp_path / "m.toml").read_text())
    for n in ok.split(","):
        # a link parameter is the probed pair's class's (PE 0 -> 1: a3's die pair)
        entry = doc["links"]["die_pair"][n] if n in ("sdma_sqe_us", "sdma_GBps") else doc["params"][n]
        assert entry["value"] == pytest.approx(TRUE[n], rel=1e-4)  # the CSV keeps 4 decimals
        assert "assumed" not in entry
        assert entry["source"].startswith(f"P: measured by combine-lab probe ({path}; NPU Ascend910_9391")
    assert doc["params"]["mte_put_us"]["value"] == load_model("a3")["mte_put_us"]  # untouched
    a3 = tomllib.loads((Path(load_model("a3").path)).read_text())
    assert doc["params"]["mte_put_us"]["assumed"] == a3["params"]["mte_put_us"]["assumed"]  # still its range
    load_model(tmp_path / "m.toml")  # a model suggest can use


def test_calibrate_refuses_the_twins_data_for_an_npu_model_and_another_socs(tmp_path, capsys):
    """The field report: a probe on the twin, then calibrate --model a3, wrote an "Atlas A3" model."""
    twin = [dataclasses.replace(r, target="cpu", soc="Ascend910B3") for r in synthetic()]
    path = write_probe_csv(tmp_path / "twin.csv", twin)
    rc = main(["calibrate", str(path), "--model", "a3", "--free", "quiet_us,wait_us,flag_us",
               "--out", str(tmp_path / "m.toml")])
    out = capsys.readouterr().out
    assert rc == 1 and not (tmp_path / "m.toml").exists()
    assert out.splitlines()[0] == (
        f"calibrate: refused: {path} was measured on the CPU twin (target cpu, SoC Ascend910B3); model a3 models an "
        "NPU (Ascend910_9391): its times are not that machine's; calibrate --model host (the twin's model)")
    assert "calibrate: nothing fitted, nothing written (exit 1)" in out
    a2 = [dataclasses.replace(r, soc="Ascend910B3") for r in synthetic()]  # an NPU, but an A2's SoC
    path = write_probe_csv(tmp_path / "a2.csv", a2)
    assert main(["calibrate", str(path), "--model", "a3", "--free", "quiet_us"]) == 1
    assert capsys.readouterr().out.splitlines()[0] == (
        f"calibrate: refused: {path} was measured on SoC Ascend910B3 (target npu); model a3 is of Ascend910_9391: "
        "calibrate a model of Ascend910B3")


def test_calibrate_refuses_sdma_rows_timed_by_a_build_without_sdma(tmp_path, capsys):
    """CANN < 9.0.0: the SDMA calls are empty stand-ins (kernels/combine_platform.h); the CSV says so."""
    rows = [dataclasses.replace(r, build="mte-only") for r in synthetic()]
    path = write_probe_csv(tmp_path / "old.csv", rows)
    assert {r.build for r in read_probe_csv(path)} == {"mte-only"}
    rc = main(["calibrate", str(path), "--model", "a3", "--free", "quiet_us", "--out", str(tmp_path / "m.toml")])
    out = capsys.readouterr().out
    assert rc == 1 and not (tmp_path / "m.toml").exists()
    assert out.splitlines()[0] == (
        f"calibrate: refused: {path}: its sdma, sdma_issue, sdma_quiet rows were timed by a build without SDMA "
        "(build mte-only: CANN older than 9.0.0 or Ascend950), whose SDMA calls are empty stand-ins; probe again "
        "on a build with SDMA")
    mte = [r for r in rows if r.kind not in ("sdma", "sdma_issue", "sdma_quiet")]  # what such a probe writes
    path = write_probe_csv(tmp_path / "mte.csv", mte)
    assert build_refusal(read_probe_csv(path), path) == ""
    bad = tmp_path / "bad.csv"
    bad.write_text(path.read_text().replace(",mte-only,", ",cann8,", 1))
    with pytest.raises(ResultFileError, match=r"bad.csv: line 2, column build: 'cann8' is not one of sdma, mte-only"):
        read_probe_csv(bad)


def test_a_fit_outside_the_stated_range_is_refused_unless_allowed_and_the_model_names_its_data(tmp_path, capsys,
                                                                                              monkeypatch):
    monkeypatch.setitem(TRUE, "quiet_us", 0.0375)  # a3 states [0.2, 5]
    path = write_probe_csv(tmp_path / "p.csv", synthetic())
    rc = main(["calibrate", str(path), "--model", "a3", "--free", "quiet_us,wait_us", "--out", str(tmp_path / "m.toml")])
    out = capsys.readouterr().out
    assert rc == 1 and not (tmp_path / "m.toml").exists()
    assert ("calibrate: quiet_us = 0.0375 is outside its stated range [0.2, 5] us: the model's own range says it "
            "cannot be (--allow-outside-range to write it anyway)") in out
    rc = main(["calibrate", str(path), "--model", "a3", "--free", "quiet_us,wait_us", "--allow-outside-range",
               "--out", str(tmp_path / "m.toml")])
    assert rc == 0, capsys.readouterr().out
    doc = tomllib.loads((tmp_path / "m.toml").read_text())
    assert doc["data"] == {"files": [str(path)], "target": "npu", "soc": "Ascend910_9391"}
    assert doc["target"] == "npu" and load_model(tmp_path / "m.toml").data == doc["data"]


def test_engines_not_saturated_are_only_a_lower_bound():
    fit = fit_probe(synthetic(cores=(1, 2)), load_model("a3"))
    e = fit.params["sdma_engines"]
    assert not e.identified and e.value is None
    assert e.how == "the 2 cores' puts ran 2 at once (over 80% of 2): the engines are at least that many, not saturated"
    assert fit.unidentified == ["sdma_engines"]


def test_noise_is_not_identified():
    """Repeats that differ by 3x: the per-repeat estimates spread past the limit."""
    fit = fit_probe(synthetic(jitter=(1.0, 3.0, 1.0, 3.0)), load_model("a3"))
    q = fit.params["quiet_us"]
    assert not q.identified and q.how.startswith("its per-repeat estimates spread 100% (IQR / median, limit 50%): noise")


def test_a_parameter_a_probe_cannot_fit_is_refused():
    with pytest.raises(ParameterError, match=r"^free=\['link_GBps'\]: a probe CSV fits quiet_us, "):
        fit_probe(synthetic(), load_model("a3"), free=["link_GBps"])


def test_csv_round_trip_and_its_header(tmp_path):
    rows = synthetic()
    path = write_probe_csv(tmp_path / "p.csv", rows)
    assert path.read_text().splitlines()[0] == ",".join(PROBE_HEADER) == \
        "kind,pes,src,dst,peers,cores,puts,bytes,buffering,time_us,repeats,spread_us,times_us,GBps,target,soc,build," \
        "link_class,note"
    back = read_probe_csv(path)
    assert [r.label() for r in back] == [r.label() for r in rows]
    assert all(np.allclose(a.times_us, b.times_us, rtol=0, atol=5e-5) for a, b in zip(back, rows))  # 4 decimals
    assert is_probe_csv(path) and not is_probe_csv(tmp_path / "missing.csv")
    line = path.read_text().splitlines()[1].split(",")
    assert line[:9] == ["sdma", "4", "0", "1", "1", "1", "8", "14336", ""]
    assert float(line[13]) == pytest.approx(8 * 14336 / float(line[9]) / 1e3, rel=1e-3)  # GBps of the median
    bad = tmp_path / "bad.csv"
    bad.write_text(path.read_text().replace("sdma,4,0,1,1,1,8,14336", "sdma,4,0,1,1,1,8,lots", 1))
    with pytest.raises(ResultFileError, match=r"bad.csv: line 2, column bytes: invalid literal"):
        read_probe_csv(bad)


def test_a_file_of_the_older_header_reads_with_no_link_class(tmp_path):
    new = write_probe_csv(tmp_path / "p.csv", synthetic())
    lines = new.read_text().splitlines()
    cut = PROBE_HEADER.index("link_class")
    old = tmp_path / "old.csv"
    old.write_text("\n".join(",".join(c for i, c in enumerate(line.split(",")) if i != cut) for line in lines) + "\n")
    assert old.read_text().splitlines()[0] == ",".join(OLD_PROBE_HEADER)
    assert is_probe_csv(old)
    back = read_probe_csv(old)
    assert [r.label() for r in back] == [r.label() for r in synthetic()] and {r.link_class for r in back} == {""}


CARD = {"sdma_sqe_us": 2.0, "sdma_GBps": 30.0}  # a3's card class: the additive form


def by_class(sdma_bytes=(14336, MiB, 2 * MiB)):
    """synthetic() as a probe of 4 PEs planned on a3 writes it: the die pair's rows named, then
    the sdma rows of one core to PE 2 (another card) made with CARD in the additive form."""
    rows = [dataclasses.replace(r, link_class="die_pair" if r.peers == 1 else "die_pair+card")
            if r.kind in ("sdma", "sdma_issue", "mte_put", "flag", "flag_rtt") else r for r in synthetic()]
    for b in sdma_bytes:
        w = float(costs.call_us(b, CARD["sdma_sqe_us"], CARD["sdma_GBps"] * 1e3, False))
        n = 8 if b < MiB else 2
        t = TRUE["sdma_issue_us"] + n * w + TRUE["sdma_quiet_us"]
        rows.append(ProbeRow("sdma", 4, 0, 2, 1, 1, n, b, "", t * np.ones(3), "npu", "Ascend910_9391",
                             link_class="card"))
    return rows


def test_each_link_class_probed_is_fitted_alone_and_written_to_its_class(tmp_path, capsys):
    """A probe of 4 PEs on a3 reaches the die pair (PE 0 -> 1) and a card (PE 0 -> 2): each class's
    SDMA parameters come back exactly, in its own cost form; the server class is named as not probed."""
    model = load_model("a3")
    fit = fit_probe(by_class(), model, source="classes.csv")
    assert fit.usable, fit.report()
    assert [(c.label, c.dst, model.links[c.cls].name, c.written) for c in fit.classes] == [("card", 2, "card", True)]
    card = fit.classes[0].params
    assert {n: card[n].value for n in card} == pytest.approx(CARD, rel=1e-9)
    assert all(card[n].identified for n in card)
    assert fit.params["sdma_GBps"].value == pytest.approx(TRUE["sdma_GBps"], rel=1e-9)  # the die pair's
    assert fit.unreached == (("server", 17),)
    report = fit.report()
    assert "  (sdma_sqe_us, sdma_GBps above: link class die_pair of a3, its max form)" in report
    assert "link class card (PE 0 -> 2; a3's card, its additive form):" in report
    assert ("link class server: not probed (PE 0 -> 16: a probe of -pes 17 or more reaches it); its link "
            "parameters stay a3's") in report
    path = write_probe_csv(tmp_path / "classes.csv", by_class())
    assert {r.link_class for r in read_probe_csv(path)} == {"die_pair", "die_pair+card", "card", ""}
    rc = main(["calibrate", str(path), "--model", "a3", "--free", "sdma_sqe_us,sdma_GBps", "--out",
               str(tmp_path / "m.toml")])
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = tomllib.loads((tmp_path / "m.toml").read_text())
    for cls, want in (("die_pair", TRUE), ("card", CARD)):
        for n in ("sdma_sqe_us", "sdma_GBps"):
            assert doc["links"][cls][n]["value"] == pytest.approx(want[n], rel=1e-4), (cls, n)
            assert doc["links"][cls][n]["source"].startswith(f"P: measured by combine-lab probe ({path}; ")
    a3 = tomllib.loads(Path(model.path).read_text())
    assert doc["links"]["server"] == a3["links"]["server"]  # not probed: untouched
    # one class's rows too noisy: that class's parameters are named, nothing written
    noisy = [dataclasses.replace(r, times_us=r.times_us * np.array([1.0, 3.0, 1.0])) if r.link_class == "card" else r
             for r in by_class()]
    fit = fit_probe(noisy, model, free=["sdma_sqe_us", "sdma_GBps"])
    assert fit.unidentified == ["card.sdma_sqe_us", "card.sdma_GBps"] and not fit.usable
    assert "  card.sdma_GBps: identified by sdma rows of one core to one peer at two or more sizes" in fit.report()


def test_the_twins_one_class_model_fits_each_probed_class_and_writes_the_nearest():
    """host (the twin's model) prices every pair as one class: a probe planned on a3's rank map
    still shows a fit per class, and the model takes the nearest class's."""
    twin = [dataclasses.replace(r, target="cpu", soc="Ascend910B3") for r in by_class()]
    fit = fit_probe(twin, load_model("host"))
    assert [(c.label, c.dst, c.written) for c in fit.classes] == [("card", 2, False)]
    assert fit.classes[0].note == "host prices PE 0 -> 2 as its class all, written from die_pair"
    assert fit.classes[0].params["sdma_sqe_us"].value == pytest.approx(CARD["sdma_sqe_us"], rel=1e-9)
    assert fit.unreached == () and "link class card (PE 0 -> 2; host's all, its additive form):" in fit.report()
    assert fit.values()["all.sdma_sqe_us"] == fit.params["sdma_sqe_us"].value
