"""One error base class: every error the lab raises on purpose is a CombineLabError carrying the
parameter and value it refused, so the command line needs one ``except`` and reads the flag from
the error, never from its message."""

from __future__ import annotations

import pytest

from combine_lab import cli
from combine_lab.errors import CaseFileError, CombineLabError, LabError, ParameterError, SpecError
from combine_lab.planning.capacity import CapacityError
from combine_lab.run.build import BuildError, TargetUnavailable, VariantRefused
from combine_lab.run.launch import LaunchError
from combine_lab.errors import ResultFileError
from combine_lab.case.spec import CaseSpec


@pytest.mark.parametrize("cls, also", [(SpecError, ValueError), (CaseFileError, ValueError), (ParameterError, ValueError),
                                       (LabError, ValueError), (CapacityError, ValueError),
                                       (ResultFileError, ValueError), (BuildError, RuntimeError),
                                       (TargetUnavailable, RuntimeError), (VariantRefused, RuntimeError),
                                       (LaunchError, RuntimeError)])
def test_every_error_of_the_lab_is_one_kind(cls, also):
    assert issubclass(cls, CombineLabError) and issubclass(cls, also)  # and what callers caught before


def test_an_error_carries_the_parameter_the_value_and_what_is_allowed():
    e = ParameterError.of("loops", 0, "must be an int >= 1")
    assert (str(e), e.parameter, e.value, e.allowed) == ("loops=0: must be an int >= 1", "loops", 0, "must be an int >= 1")
    with pytest.raises(SpecError) as s:
        CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=1, dtype="float32")
    assert (s.value.parameter, s.value.value) == ("dtype", "float32")
    plain = LaunchError("PE 1 killed by signal 9", pe=1, returncode=-9)
    assert (plain.parameter, plain.value, plain.pe) == (None, None, 1)


def test_the_command_line_names_the_flag_from_the_error_not_its_text(monkeypatch, capsys):
    """A refusal whose message does not start with its parameter still gets its flag: the CLI reads
    ``e.parameter``; an error without one (a failed run) is printed as it is; both exit 2."""
    from combine_lab.cli import compare, run

    def refuse(a, variants):
        raise ParameterError("the SDMA floor: -5 bytes is below 0", parameter="min_sdma_bytes", value=-5)

    monkeypatch.setattr(compare, "run_variants", refuse)
    assert cli.main(["compare", "-pes", "2"]) == 2
    assert capsys.readouterr().err == "combine-lab: error: --min-sdma-bytes: the SDMA floor: -5 bytes is below 0\n"

    def fail(a, variants):
        raise LaunchError("PE 0 exited with status 7:\ncombine_host: PE 0 core 0: timed out ...", pe=0, returncode=7)

    monkeypatch.setattr(run, "run_variants", fail)
    assert cli.main(["run", "-pes", "2"]) == 2
    assert capsys.readouterr().err.startswith("combine-lab: error: PE 0 exited with status 7:\n")


def test_the_flag_is_said_once_from_the_error_s_fields(monkeypatch, capsys):
    """A refusal already said as its flag (``said_as``, cli.cases.flag_check) is printed as it is; one
    that names its Python parameter gets the flag first, even when its text happens to start like a flag:
    the CLI reads ``e.said_as``, never the message."""
    from combine_lab.cli import run

    assert cli.main(["run", "-pes", "2", "--perf", "--loops", "0"]) == 2
    assert capsys.readouterr().err == ("combine-lab: error: --loops=0: must be an int >= 1 (the reference's run "
                                       "script reads 0 or less as 1; here it is refused)\n")
    assert cli.main(["run", "-pes", "2", "-gnpus", "4"]) == 2
    assert capsys.readouterr().err == ("combine-lab: error: -gnpus=4: must equal -pes=2 (one node; with --perf it "
                                       "is set to each case's -pes)\n")

    def refuse(a, variants):
        raise ParameterError("--loops=0 reads like the flag", parameter="loops", value=0)

    monkeypatch.setattr(run, "run_variants", refuse)
    assert cli.main(["run", "-pes", "2"]) == 2
    assert capsys.readouterr().err == "combine-lab: error: --loops: --loops=0 reads like the flag\n"
    e = ParameterError("loops: 0", parameter="loops", value=0, said_as="--loops")
    assert cli._with_flag(e) == "loops: 0"


def test_cores_per_rank_is_said_as_the_n_of_its_label_from_its_fields():
    """``cores_per_rank`` refused: the flag that gave the label, then the value as the label's N and what is
    allowed (``e.allowed``), not the message rewritten."""
    e = ParameterError.of("cores_per_rank", 41, "must be an int in [1, 40]")
    assert cli._with_flag(e, "run") == "--variant: cores_per_rank=41 (the N of c41): must be an int in [1, 40]"
    assert cli._with_flag(e, "compare") == "--settings: cores_per_rank=41 (the N of c41): must be an int in [1, 40]"
    bare = ParameterError("cores per rank: 41 is too many", parameter="cores_per_rank", value=41)
    assert cli._with_flag(bare, "run") == "--variant: cores per rank: 41 is too many"


def test_the_model_is_offered_by_what_did_not_fit(capsys):
    """A case too big to run is offered the timing model's command unless x itself did not fit with a
    uniform routing (the reference draws x first, on the model too): read from ``e.resource``."""
    import argparse

    args = argparse.Namespace(command="run", clock="wall", routing="uniform", argv=["run", "-pes", "64"])
    x = CapacityError("c: making the case needs x of 9 bytes", parameter="spec", value="c", resource="x",
                      needed=9, available=1)
    memory = CapacityError("c: the PEs need 9 bytes", parameter="spec", value="c", resource="memory", needed=9,
                           available=1)
    assert (x.resource, x.needed, x.available) == ("x", 9, 1)
    assert cli._model_instead(args, x) == ""
    hint = "; the timing model prices it without running it: combine-lab run -pes 64 --clock model:a3"
    assert cli._model_instead(args, memory) == hint
    args.routing = "zipf:1.2"
    assert cli._model_instead(args, x) == hint


def test_a_lab_error_keeps_its_fields_across_a_pickle():
    """A cluster worker's refusal comes back whole (parameter, value, allowed, said_as, and a
    CapacityError's resource), as dask sends exceptions."""
    import pickle

    e = pickle.loads(pickle.dumps(CapacityError("c: too big", parameter="work_dir", value="/w", resource="disk",
                                                needed=2, available=1)))
    assert (str(e), e.parameter, e.value, e.resource, e.needed, e.available) == ("c: too big", "work_dir", "/w",
                                                                                 "disk", 2, 1)
    p = pickle.loads(pickle.dumps(ParameterError("--loops=0: no", parameter="loops", value=0, said_as="--loops")))
    assert (str(p), p.parameter, p.value, p.said_as) == ("--loops=0: no", "loops", 0, "--loops")
