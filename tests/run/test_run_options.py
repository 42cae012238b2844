"""Issue 30 item 2/3: each run parameter has one validator (combine_lab/run/options.py) and every entry
calls it: run_case, the harness's Run, run_sweep, the all_to_all baseline, the command line (its flag
first) and the tuning app's form (the control marked with the same words); run_case is a CaseRun whose
steps each fit in 80 lines."""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np
import pytest

from combine_lab import cli, harness
from combine_lab.case.spec import CaseSpec
from combine_lab.errors import ParameterError
from combine_lab.lab import sweep
from combine_lab.lab.tuning import TuningState
from combine_lab.run import build as build_mod
from combine_lab.run import options as opts
from combine_lab.run import runner
from combine_lab.run.baseline import run_baseline
from combine_lab.run.options import RunOptions

SPEC = CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2)


@pytest.mark.parametrize("name, value, text", [
    ("warmup", -1, "warmup=-1: must be an int >= 0"),
    ("warmup", 1.0, "warmup=1.0: must be an int >= 0"),
    ("warmup", True, "warmup=True: must be an int >= 0"),
    ("loops", 0, "loops=0: must be an int >= 1"),
    ("loops", "3", "loops='3': must be an int >= 1"),
    ("repeats", 0, "repeats=0: must be an int >= 1"),
    ("min_sdma_bytes", -1, "min_sdma_bytes=-1: must be an int >= 0"),
    ("fpe", -1, "fpe=-1: must be an int >= 0"),
    ("fnpu", -2, "fnpu=-2: must be an NPU id >= 0 (PE r runs on NPU fnpu + r)"),
    ("timeout_s", 0.0, "timeout_s=0.0: must be > 0 seconds"),
    ("timeout_s", float("nan"), "timeout_s=nan: must be > 0 seconds"),
    ("timeout_s", "60", "timeout_s='60': must be > 0 seconds"),
    ("target", "gpu", "target='gpu': must be one of cpu, npu"),
    ("chaos_seed", -1, "chaos_seed=-1: must be an int >= 0, on target cpu (the twin)"),
    ("prof_pe", "last", "prof_pe='last': must be a PE number or 'all'"),
    ("prof_pe", -1, "prof_pe=-1: must be 'all' or a PE number >= 0"),
    ("perf", "yes", "perf='yes': must be True or False"),
])
def test_each_validator_names_the_parameter_the_value_and_what_is_allowed(name, value, text):
    with pytest.raises(ParameterError) as e:
        opts.CHECKS[name](value)
    assert (str(e.value), e.value.parameter, e.value.value is value) == (text, name, True)
    assert e.value.allowed == text.split(": ", 1)[1]
    if name != "repeats":  # a run's repeats are the harness's (harness.Run), not one run's
        with pytest.raises(ParameterError) as again:  # the group says the same of the same field
            RunOptions(**{name: value})
        assert str(again.value) == text


def test_the_validators_return_what_they_took_as_plain_values():
    assert opts.check_warmup(np.int64(3)) == 3 and type(opts.check_warmup(np.int64(3))) is int
    assert opts.check_prof_pe("all", 4) == "all" and opts.check_prof_pe(np.int32(3), 4) == 3
    assert opts.check_timeout_s(float("inf")) == float("inf") and opts.check_chaos_seed(None, "npu") is None
    with pytest.raises(ParameterError, match=r"^prof_pe=4: must be 'all' or a PE in \[0, 3\]$"):
        opts.check_prof_pe(4, 4)
    with pytest.raises(ParameterError, match=r"^chaos_seed=3: must be an int >= 0, on target cpu \(the twin\)$"):
        RunOptions(target="npu", chaos_seed=3)
    o = RunOptions(warmup=2, loops=3, prof_pe="all")
    assert (o.prof_pes(3), RunOptions(prof_pe="all", perf=False).prof_pes(3), RunOptions(prof_pe=1).prof_pes(2)) == (
        [0, 1, 2], [0], [1])


def _nothing_runs(monkeypatch):
    monkeypatch.setattr(build_mod, "build", lambda *a, **k: pytest.fail("built"))
    monkeypatch.setattr(runner, "prepare_case", lambda *a, **k: pytest.fail("case files written"))
    monkeypatch.setattr(harness, "prepare_case", lambda *a, **k: pytest.fail("case files written"))


@pytest.mark.parametrize("name, value, flag, flag_text", [
    ("warmup", -1, "--warmup", "--warmup=-1: must be an int >= 0 (the reference's run script reads a negative value "
                               "as 0; here it is refused)"),
    ("loops", 0, "--loops", "--loops=0: must be an int >= 1 (the reference's run script reads 0 or less as 1; here "
                            "it is refused)"),
    ("repeats", 0, "--repeats", "--repeats=0: must be an int >= 1"),
    ("min_sdma_bytes", -1, "--min-sdma-bytes", "--min-sdma-bytes: min_sdma_bytes=-1: must be an int >= 0"),
    ("prof_pe", 5, "--prof-pe", "--prof-pe=5: must be 'all' or a PE in [0, 1] (shape_4_16_2_4_2 has 2 PEs)"),
    ("timeout_s", 0.0, "--timeout", "--timeout: timeout_s=0.0: must be > 0 seconds"),
])
def test_one_bad_value_is_refused_alike_by_every_entry(name, value, flag, flag_text, monkeypatch, capsys, tmp_path):
    """The same value through run_case, harness.execute, run_sweep, the command line and the app's
    form: the same validator, so the same words (the command line puts its flag first), and nothing
    is built or written first."""
    monkeypatch.chdir(tmp_path)  # the command line's default output folder: here, not in the checkout
    text = f"{name}={value!r}: " + {"warmup": "must be an int >= 0", "loops": "must be an int >= 1",
                                    "repeats": "must be an int >= 1", "min_sdma_bytes": "must be an int >= 0",
                                    "prof_pe": "must be 'all' or a PE in [0, 1]",
                                    "timeout_s": "must be > 0 seconds"}[name]
    _nothing_runs(monkeypatch)
    said = []
    if name != "repeats":  # a run_case is one repeat
        with pytest.raises(ParameterError) as e:
            runner.run_case(SPEC, "classic", **{name: value})
        said.append(str(e.value))
    with pytest.raises(ParameterError) as e:
        list(harness.execute([harness.Run(SPEC, "classic", **{name: value})]))
    said.append(str(e.value))
    with pytest.raises(ParameterError) as e:
        sweep.run_sweep([SPEC], progress=False, **{name: value})
    said.append(str(e.value))
    if name in ("warmup", "loops", "timeout_s"):
        with pytest.raises(ParameterError) as e:
            run_baseline(None, **{name: value})
        said.append(str(e.value))
    if name in ("warmup", "loops", "repeats", "min_sdma_bytes"):
        state = TuningState(targets=["cpu"], pes=2, bs=4, h=16, topk=2, expert_per_pe=2, dtype="int32_t", seed=1)
        state.set(**{name: value})
        said.append(str(next(p for p in state.problems if p.name == name)))
    assert said == [text] * len(said) and len(said) >= 3
    given = str(value) if name != "timeout_s" else "0"
    assert cli.main(["run", "-pes", "2", "-bs", "4", "-h", "16", "-topk", "2", "--perf", flag, given]) == 2
    assert capsys.readouterr().err == f"combine-lab: error: {flag_text}\n"


def test_the_command_line_keeps_the_fields_of_the_validators_refusal(capsys):
    """--prof-pe last: the validator's words and fields, said with the flag, never twice."""
    with pytest.raises(ParameterError) as e:
        cli.cases._prof_pe("last", [SPEC])
    assert (str(e.value), e.value.parameter, e.value.value, e.value.allowed) == (
        "--prof-pe='last': must be a PE number or 'all'", "prof_pe", "last", "must be a PE number or 'all'")
    assert cli.main(["run", "--perf", "-fnpu", "-2"]) == 2
    assert capsys.readouterr().err == "combine-lab: error: -fnpu=-2: must be an NPU id >= 0 (PE r runs on NPU fnpu + r)\n"


def _lengths(cls_or_fn) -> dict[str, int]:
    """Lines of each function (each method of a class), docstring included."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls_or_fn)))
    return {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_run_case_is_a_thin_call_of_a_case_run_in_steps_of_at_most_80_lines():
    body = ast.parse(textwrap.dedent(inspect.getsource(runner.run_case))).body[0].body
    assert [type(n).__name__ for n in body] == ["Expr", "Assign", "Return"]  # docstring, the options, the run
    steps = _lengths(runner.CaseRun)
    assert {"__post_init__", "run", "_plan", "_launch_all", "_collect"} <= set(steps)
    assert max(steps.values()) <= 80, steps
    fields = set(inspect.signature(runner.run_case).parameters)
    assert set(RunOptions.__dataclass_fields__) <= fields  # each run parameter grouped, none lost


def test_no_module_but_the_options_checks_warmup_or_loops_itself():
    """The words of the warmup/loops refusal are written once, in combine_lab/run/options.py."""
    from pathlib import Path

    package = Path(runner.__file__).resolve().parents[1]
    own = [str(p.relative_to(package)) for p in package.rglob("*.py")
           if "must be an int >= {lo}" in p.read_text() or "need warmup >= 0" in p.read_text()]
    assert own == ["run/options.py"] or sorted(own) == ["run/options.py"], own


def test_the_harness_run_has_the_options_fields_once_and_refuses_a_bad_one_when_made():
    """Run's option fields are RunOptions's (one list: names, defaults, checks), and a bad one is
    refused as the Run is made, in RunOptions's words and ``parameter``."""
    import dataclasses

    own = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    assert opts.OPTION_FIELDS == ("warmup", "loops", "perf", "prof_pe", "min_sdma_bytes", "target", "timeout_s",
                                  "chaos_seed", "fnpu", "fpe")
    assert issubclass(harness.Run, RunOptions)
    assert {f.name: f.default for f in dataclasses.fields(harness.Run) if f.name in own} == own
    assert "warmup" not in harness.Run.__dict__["__annotations__"]  # written in RunOptions only
    run = harness.Run(SPEC, "classic", harness.WALL, 3, warmup=2, loops=7, prof_pe="all")
    assert (run.repeats, run.warmup, run.loops, run.prof_pe, run.min_sdma_bytes) == (3, 2, 7, "all", 2097152)
    assert run.options == RunOptions(warmup=2, loops=7, prof_pe="all") and run.prof_pes(2) == [0, 1]
    for name, value in [("warmup", -1), ("loops", 0), ("timeout_s", 0.0), ("target", "gpu"), ("fnpu", -2),
                        ("perf", "yes"), ("prof_pe", "last"), ("chaos_seed", -1)]:
        with pytest.raises(ParameterError) as alone:
            RunOptions(**{name: value})
        with pytest.raises(ParameterError) as made:
            harness.Run(SPEC, "classic", **{name: value})
        assert (str(made.value), made.value.parameter) == (str(alone.value), name)
    with pytest.raises(ParameterError) as e:
        harness.Run(SPEC, "classic", repeats=0)
    assert (str(e.value), e.value.parameter) == ("repeats=0: must be an int >= 1", "repeats")
    with pytest.raises(ParameterError) as e:  # against the case's PEs, as the Run is made
        harness.Run(SPEC, "classic", prof_pe=2)
    assert (str(e.value), e.value.parameter) == ("prof_pe=2: must be 'all' or a PE in [0, 1]", "prof_pe")


def test_a_bad_prof_pe_is_refused_alike_on_every_clock(monkeypatch, capsys):
    """prof_pe=9 on a 2-PE case: the same words and ``parameter`` from a wall-clock Run, a model-clock
    Run, the model's own entries (model_case, model_kernel: run/options.py's check, not copies) and the
    command line on the twin and on --clock model:a3 (its flag first, the case after)."""
    from pathlib import Path

    from combine_lab.case.case import make_case
    from combine_lab.model.machines import load_model
    from combine_lab.model.modelled import model_case
    from combine_lab.model.recorded import model_kernel

    text = "prof_pe=9: must be 'all' or a PE in [0, 1]"
    a3 = load_model("a3")
    refstyle = Path(__file__).resolve().parents[1] / "kernels" / "combine_refstyle"
    with pytest.raises(ParameterError) as e:  # its case files are written (and removed), nothing is launched
        model_kernel(SPEC, refstyle, a3, prof_pe=9)
    said = [(str(e.value), e.value.parameter, e.value.value)]
    _nothing_runs(monkeypatch)
    for make in (lambda: harness.Run(SPEC, "classic", prof_pe=9),
                 lambda: harness.Run(SPEC, "doubleplane", clock=a3, prof_pe=9),
                 lambda: model_case(make_case(SPEC), "doubleplane", a3, prof_pe=9)):
        with pytest.raises(ParameterError) as e:
            make()
        said.append((str(e.value), e.value.parameter, e.value.value))
    assert said == [(text, "prof_pe", 9)] * 4
    for clock in ([], ["--clock", "model:a3"]):
        argv = ["run", "-pes", "2", "-bs", "4", "-h", "16", "-topk", "2", "--perf", "--prof-pe", "9"] + clock
        assert cli.main(argv) == 2
        assert capsys.readouterr().err == ("combine-lab: error: --prof-pe=9: must be 'all' or a PE in [0, 1] "
                                           "(shape_4_16_2_4_2 has 2 PEs)\n")
