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
