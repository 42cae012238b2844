"""combine-lab probe on the twin: the CSV it writes parses, has one row per planned measurement
with a time per repeat, and calibrate fits from it (exit 0 exactly when every parameter asked for
is identified, else 1 naming them); nothing is left behind. Bad plans are refused before anything
builds. The probe's NPU branch compiles against the public declarations (tests/npu_decls)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

from combine_lab.cli import main
from combine_lab.errors import ParameterError
from combine_lab.formats.probe_csv import read_probe_csv
from combine_lab.model.machines import load_model
from combine_lab.model.probe_fit import PROBE_PARAMETERS, fit_probe_csv
from combine_lab.run.probe import TWIN_NOTE, probe_plan

ROOT = Path(__file__).resolve().parents[2]


def test_probe_runs_on_the_twin_and_calibrate_fits_from_its_csv(tmp_path, capsys, no_leaks):
    out = tmp_path / "probe.csv"
    rc = main(["probe", "-pes", "3", "--cores", "1,2", "--sdma-bytes", "4096,65536", "--row-bytes", "4096,16384",
               "--repeats", "3", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = read_probe_csv(out)
    plan = probe_plan(3, cores=(1, 2), sdma_bytes=(4096, 65536), row_bytes=(4096, 16384), repeats=3)
    assert [r.label() for r in rows] == [
        f"{m.kind} cores={m.cores} puts={m.puts} bytes={m.bytes} peers={m.peers}"
        + ({1: " single", 2: " double"}[m.buffers] if m.kind == "mte_put" else "") for m in plan]
    assert len(rows) == 2 * 2 * 2 + 1 + 4 + 5
    assert all(len(r.times_us) == 3 and (r.times_us > 0).all() for r in rows)
    assert {(r.target, r.soc, r.build, r.note, r.pes) for r in rows} == {("cpu", "Ascend910B3", "sdma", TWIN_NOTE, 3)}
    assert f"probe CSV: {out}" in text and "measured on the CPU twin" in text
    fit = fit_probe_csv(out, load_model("host"))
    rc = main(["calibrate", str(out), "--model", "host", "--out", str(tmp_path / "m.toml")])
    report = capsys.readouterr().out
    assert rc == (0 if fit.usable else 1)
    for n in PROBE_PARAMETERS:
        assert f"  {n} " in report
    ok = [n for n in PROBE_PARAMETERS if fit.params[n].identified]
    from combine_lab.model.calibrate import outside_ranges
    outside = [t.split(" = ")[0] for t in outside_ranges(load_model("host"), {n: fit.params[n].value for n in ok})]
    if ok:  # the ones this run identified, alone: usable and written, unless one lies outside its range
        rc = main(["calibrate", str(out), "--model", "host", "--free", ",".join(ok), "--out", str(tmp_path / "m.toml")])
        said = capsys.readouterr().out
        if outside:  # e.g. sdma_engines 2 on a loaded machine, where the twin has one SDMA thread per PE
            assert rc == 1 and f"calibrate: {outside[0]} = " in said and "outside its stated range" in said, said
            assert not (tmp_path / "m.toml").exists()
            return
        assert rc == 0, said
        doc = tomllib.loads((tmp_path / "m.toml").read_text())
        assert {n: round(doc["params"][n]["value"], 9) for n in ok} == {n: round(fit.params[n].value, 9) for n in ok}


def test_probe_on_a3s_rank_map_reaches_two_link_classes_on_the_twin_and_calibrate_fits_each(tmp_path, capsys,
                                                                                           no_leaks):
    """The issue's done-when: probe -pes 4 --model a3 on the twin writes rows of the die pair and
    card classes (PE 0 -> 1, PE 0 -> 2), says the server class needs 17 PEs; calibrate shows a fit
    per class with the twin's model and still refuses the twin's data for a3."""
    out = tmp_path / "probe.csv"
    rc = main(["probe", "-pes", "4", "--model", "a3", "--cores", "1,2", "--sdma-bytes", "4096,65536",
               "--row-bytes", "4096,16384", "--repeats", "3", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert text.splitlines()[0] == ("probe: link classes of a3 at 4 PEs: die_pair (PE 0 -> 1), card (PE 0 -> 2); "
                                    "not reached: server (PE 0 -> 16: needs -pes 17 or more) "
                                    "(docs/probe.md#6-link-classes)")
    rows = read_probe_csv(out)
    plan = probe_plan(4, cores=(1, 2), sdma_bytes=(4096, 65536), row_bytes=(4096, 16384), repeats=3,
                      model=load_model("a3"))
    assert [(r.kind, r.dst, r.peers, r.link_class) for r in rows] == [
        (m.kind, None if m.kind in ("quiet", "sdma_quiet", "wait") else m.dst, m.peers, m.link_class) for m in plan]
    assert [(r.dst, r.bytes) for r in rows if r.link_class == "card"] == [(2, 4096), (2, 65536)]
    assert {r.link_class for r in rows} == {"die_pair", "die_pair+card", "card", ""}
    assert all(len(r.times_us) == 3 and (r.times_us > 0).all() for r in rows)
    rc = main(["calibrate", str(out), "--model", "host"])
    report = capsys.readouterr().out
    assert "  (sdma_sqe_us, sdma_GBps above: link class all of host, its additive form)" in report
    assert "link class card (PE 0 -> 2; host's all, its additive form):" in report
    assert "  not written: host prices PE 0 -> 2 as its class all, written from die_pair" in report
    rc = main(["calibrate", str(out), "--model", "a3", "--out", str(tmp_path / "a3.toml")])
    said = capsys.readouterr().out
    assert rc == 1 and not (tmp_path / "a3.toml").exists()
    assert said.splitlines()[0].startswith(f"calibrate: refused: {out} was measured on the CPU twin (target cpu")


@pytest.mark.parametrize("kw, msg", [
    ({"pes": 1}, "pes=1: the probe needs at least 2 PEs (PE 0 sends, the others receive)"),
    ({"pes": 2, "cores": (1, 41)}, "cores=[1, 41]: must be one or more integers in 1..40"),
    ({"pes": 2, "row_bytes": (70000,)}, "row_bytes=[70000]: must be one or more integers in 32..65536, multiples of 32"),
    ({"pes": 2, "repeats": 1}, "repeats=1: must be an integer in 2..1000"),
    ({"pes": 9, "model": "a2"}, "pes=9: a2 models at most 8 PEs (one A2 server: 8 cards in an HCCS full mesh; "
                                "between A2 servers (RoCE) no one-stream table is published, so the model stops at "
                                "8 PEs (a3 models more))"),
])
def test_bad_plans_are_refused_before_anything_builds(kw, msg):
    assert [m.cores for m in probe_plan(2, aiv_cores=40) if m.kind == "sdma"][:4] == [1, 2, 8, 40]  # k capped
    if "model" in kw:
        kw = {**kw, "model": load_model(kw["model"])}
    with pytest.raises(ParameterError) as e:
        probe_plan(aiv_cores=40, **kw)
    assert str(e.value) == msg


def _syntax_check():
    spec = importlib.util.spec_from_file_location("npu_syntax_helpers", ROOT / "tests" / "run" / "test_npu_syntax.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("sdma", [True, False], ids=["cann9-sdma", "mte-only"])
def test_probe_npu_branch_compiles_against_the_public_declarations(sdma):
    syn = _syntax_check()
    if syn.CLANG is None:
        pytest.skip("needs clang++")
    jobs = syn.kernel_jobs(source="kernels/probe_kernel.cpp") + [("host/probe_host.cpp", ["-x", "c++",
                                                                                          "host/probe_host.cpp"])]
    results = syn.run_compiles(ROOT, jobs, sdma)
    assert len(results) == 5
    for what, rc, err in results:
        assert rc == 0 and err == "", f"{what}:\n{err}"


def test_an_npu_build_without_sdma_plans_no_sdma_row_and_k_follows_the_socs_aiv_cores(tmp_path):
    """CANN < 9.0.0 (or Ascend950): SDMA calls are empty stand-ins, so nothing SDMA is timed; an
    A2's 40 AIV cores cap k (48 would make every PE exit 1)."""
    from npu_fakes import npu_env
    from combine_lab.run.probe import npu_plan_facts
    assert npu_plan_facts(npu_env(tmp_path / "a2", soc="Ascend910B3")) == (40, "")
    assert npu_plan_facts(npu_env(tmp_path / "a3", soc="Ascend910_9391")) == (48, "")
    aiv, why = npu_plan_facts(npu_env(tmp_path / "old", cann="8.3.RC1", soc="Ascend910B4"))
    assert (aiv, why) == (40, "this NPU build has no SDMA (CANN 8.3.RC1 is older than 9.0.0); its SDMA calls are "
                              "empty stand-ins (kernels/combine_platform.h)")
    assert npu_plan_facts(npu_env(tmp_path / "950", soc="Ascend950PR"), aiv=64)[1] == (
        "this NPU build has no SDMA (SHMEM does not support SDMA put on Ascend950PR (Ascend950: SDMA get only, "
        "hicann/shmem examples/sdma/README.md)); its SDMA calls are empty stand-ins (kernels/combine_platform.h)")
    with pytest.raises(ParameterError, match=r"^aiv_cores=None: the AIV cores of Ascend950PR are not known here"):
        npu_plan_facts(npu_env(tmp_path / "950b", soc="Ascend950PR"))
    plan = probe_plan(4, aiv_cores=aiv, sdma=why)
    assert [m.kind for m in plan] == ["mte_put"] * 4 + ["flag", "flag_rtt", "quiet", "wait"]
    with pytest.raises(ParameterError) as e:
        probe_plan(4, aiv_cores=aiv, sdma=why, cores=(1, 2))
    assert str(e.value) == f"cores=[1, 2]: SDMA rows refused: {why}"
    with pytest.raises(ParameterError) as e:
        probe_plan(4, aiv_cores=aiv, sdma=why, sdma_bytes=(4096,))
    assert str(e.value) == f"sdma_bytes=[4096]: SDMA rows refused: {why}"


def test_probe_on_a_build_without_sdma_says_only_the_nearest_class_was_probed(tmp_path, capsys, monkeypatch):
    """An MTE-only build plans no SDMA row, and a farther class's rows are SDMA rows: the probe says so."""
    import combine_lab.cli.probe as cli_probe
    from combine_lab.formats.probe_csv import ProbeRow
    import numpy as np
    row = ProbeRow("quiet", 4, 0, None, 1, 1, 32, 0, "", np.array([1.0, 1.0]), "npu", "Ascend910B4", "", "mte-only")
    monkeypatch.setattr(cli_probe, "run_probe", lambda *a, **k: (tmp_path / "p.csv", [row]))
    assert main(["probe", "-pes", "4", "--model", "a3", "--target", "npu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("probe: link classes of a3 at 4 PEs: die_pair (PE 0 -> 1), card (PE 0 -> 2); ")
    assert out[1] == ("probe: this build has no SDMA: only die_pair was probed (the farther classes' rows are SDMA "
                      "rows)")
