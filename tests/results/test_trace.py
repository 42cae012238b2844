"""``--trace FILE`` (combine_lab/results/trace.py, docs/formats.md#13-trace): the launch as Chrome
trace-event JSON, measured on the twin and modelled on a machine. Loaded back as a viewer would:
a named track per AIV core and per SDMA queue, slices that never overlap on a track, every flag
put after the end of the payload it releases (the flow arrow's source), and as many MTE put, SDMA
call and descriptor slices as the plan (= the twin's counters, counters=plan) has."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest

from combine_lab import CaseSpec, make_case, plan
from combine_lab.cli import main
from combine_lab.model import load_model
from combine_lab.model.modelled import model_case

SPEC = CaseSpec(pes=3, bs=12, h=40, topk=3, expert_per_pe=2, routing="zipf:1.2")
FLAGS = ["-pes", "3", "-bs", "12", "-h", "40", "-topk", "3", "-expertPerPe", "2", "--routing", "zipf:1.2",
         "--min-sdma-bytes", "0"]


def _load(path):
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ns"
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append(e)
    for v in slices.values():
        v.sort(key=lambda e: (e["ts"], e["dur"]))
    return doc, ev, procs, tracks, slices


def _enclosing(slices, pid, tid, ts):
    hits = [e for e in slices[(pid, tid)] if e["ts"] - 1e-9 <= ts <= e["ts"] + e["dur"] + 1e-9]
    assert hits, (pid, tid, ts)
    return hits[0]


def _check(path, clock_word):
    doc, ev, procs, tracks, slices = _load(path)
    case = make_case(SPEC)
    plans = {v: plan(case, v, min_sdma_bytes=0) for v in ("classic", "doubleplane")}
    assert sorted(procs.values()) == sorted(f"{v} PE {pe} ({clock})" for v in plans for pe in range(3)
                                            for clock in [procs[next(iter(procs))].split(" (", 1)[1][:-1]])
    assert all(clock_word in name for name in procs.values())
    for pid, name in procs.items():
        variant, pe = name.split()[0], int(name.split()[2])
        names = {tid: n for (p, tid), n in tracks.items() if p == pid}
        # three PEs: one core per source rank; doubleplane's SDMA segments: a queue per core that issued any
        assert names[0] == "host: launch" and [names[1 + c] for c in range(3)] == [f"AIV core {c}" for c in range(3)]
        t = plans[variant].totals.loc[pe]
        queues = sorted(n for tid, n in names.items() if tid > 1000)
        assert (len(queues) > 0) == (t["sdma_calls"] > 0)
        count = Counter(e["name"] for (p, _), v in slices.items() if p == pid for e in v)
        assert count["MTE put"] == t["mte_rows"]
        assert count["SDMA call"] == t["sdma_calls"] and count["SDMA descriptor"] == t["sdma_sqes"]
        assert count["flag put"] == t["mte_rows"] + t["sdma_rows"]  # one status flag per row sent
        for (p, tid), v in slices.items():
            if p == pid:  # a track is a sequence: no two slices overlap (ts and dur each rounded to 1e-6 us)
                assert all(a["ts"] + a["dur"] <= b["ts"] + 2e-6 for a, b in zip(v, v[1:])), tracks[(p, tid)]
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    flags = sum(1 for v in slices.values() for e in v if e["name"] == "flag put")
    assert len(starts) == len(ends) == flags and set(starts) == set(ends)
    for i, s in starts.items():
        payload = _enclosing(slices, s["pid"], s["tid"], s["ts"])
        flag = _enclosing(slices, ends[i]["pid"], ends[i]["tid"], ends[i]["ts"])
        assert payload["name"] in ("MTE put", "SDMA descriptor") and flag["name"] == "flag put"
        assert flag["args"]["dst PE"] == payload["args"]["dst PE"]
        assert flag["ts"] >= payload["ts"] + payload["dur"] - 1e-6  # released only once its payload is done
    return doc, slices, procs


def test_compare_traces_the_twin_in_measured_time(tmp_path, capsys, no_leaks):
    path = tmp_path / "t.json"
    assert main(["compare", *FLAGS, "--trace", str(path)]) == 0
    assert f"trace: {path} (measured on the CPU twin; open it in ui.perfetto.dev" in capsys.readouterr().out
    doc, slices, procs = _check(path, "measured on the CPU twin")
    assert doc["metadata"]["title"] == f"{SPEC.case_id} (zipf:1.2), 3 PEs, measured on the CPU twin"
    assert not list(tmp_path.glob(".*"))  # written whole: no temporary file left beside it


def test_compare_traces_the_model_in_modelled_time(tmp_path, capsys):
    path = tmp_path / "m.json"
    assert main(["compare", *FLAGS, "--clock", "model:a3", "--trace", str(path)]) == 0
    doc, slices, procs = _check(path, "modelled on a3")
    model = load_model("a3")
    case = make_case(SPEC)
    for pid, name in procs.items():
        variant, pe = name.split()[0], int(name.split()[2])
        times = model_case(case, variant, model, 0).times
        # stage 1 of each core ends where the model's comm_only does; the launch where its full_op does
        for c in range(times.block_dim):
            s1 = [e for e in slices[(pid, 1 + c)] if e["name"] not in ("wait", "reduce", "barrier")]
            assert max(e["ts"] + e["dur"] for e in s1) == pytest.approx(times.comm_only[pe, c], abs=1e-5)
        (launch,) = slices[(pid, 0)]
        assert launch["ts"] == 0 and launch["dur"] == pytest.approx(times.full_op[pe].max(), abs=1e-5)
    np.testing.assert_array_equal(sorted({e["name"] for v in slices.values() for e in v}),
                                  sorted(["launch", "MTE put", "quiet", "flag put", "SDMA call", "SDMA quiet",
                                          "SDMA descriptor", "wait", "reduce", "barrier"]))


def test_trace_is_refused_for_a_sweep_before_anything_runs(tmp_path, capsys):
    assert main(["run", *FLAGS, "--bs-list", "8,12", "--trace", str(tmp_path / "t.json")]) == 2
    assert f"--trace {tmp_path / 't.json'}: traces one case, the flags make 2 (a sweep)" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


def test_trace_of_the_segment_layout_on_a_model_is_refused_before_anything_is_priced(tmp_path, capsys):
    argv = ["run", *FLAGS, "--variant", "doubleplane-segment", "--clock", "model:a3", "--trace", str(tmp_path / "t.json")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "MODEL" not in out  # nothing priced, no table
    assert ("--trace on a timing model: settings 'segment' (the segment layout) are priced as a whole, not op by op; "
            "trace them on the twin (--clock wall)") in err
