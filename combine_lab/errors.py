"""Exception types shared by every stage of the package (a leaf: it imports nothing of it), and
what a missing package says (:func:`missing_package`).

Every one of them is a :class:`CombineLabError` (one ``except`` catches what the lab refuses or
what failed), and each class means one thing, so that a caller can tell what to fix from the
class alone:

- :class:`SpecError`: the case asked for is invalid (a :class:`~combine_lab.case.spec.CaseSpec`
  field, its routing, or a case array that does not fit the spec);
- :class:`CaseFileError`: reference case files on disk are missing or inconsistent;
- :class:`ParameterError`: a parameter of planning, running or showing a case is invalid (a
  variant, warmup/loops, the SDMA floor, a PE or core index, a metric, a list of values, a
  control name), not the case itself; the run parameters (warmup, loops, repeats, prof_pe, the SDMA
  floor, target, timeout, chaos seed, fnpu, fpe) each by its one validator in
  :mod:`combine_lab.run.options`, whatever the entry;
- :class:`LabError`: the lab's notebook run is set up wrong (no notebooks folder, a params
  file that cannot be read, a notebook or parameter that does not exist);
- :class:`Terminated`: SIGTERM, turned into the unwinding of a Ctrl-C by ``combine-lab``.

- :class:`ResultFileError`: a result file (perf CSV, sidecar, counters, sweep CSV) is missing or
  not of its format.

Others live with the stage that raises them, on the same base: ``CapacityError``
(:mod:`combine_lab.planning.capacity`, with what did not fit: ``resource``, ``needed``,
``available``), ``KernelSourceError`` (:mod:`combine_lab.run.kernel_source`), ``ClusterError``
(:mod:`combine_lab.cluster.connect`), ``NotModelled`` (:mod:`combine_lab.model.facade`),
``BuildError`` and its kinds ``TargetUnavailable``, ``VariantRefused`` (:mod:`combine_lab.run.build`),
``BrokenPatchError`` (:mod:`combine_lab.run.broken`), ``LaunchError`` (:mod:`combine_lab.run.launch`,
with ``pe``, ``timed_out``, ``wait``) and ``KernelFailed`` (:mod:`combine_lab.run.runner`).

Every raise of one of them names what it refused in ``parameter=`` (tests/test_errors_carry_parameter.py
reads the package's source and lists any that does not), except those of :data:`RUN_FAILURES`:
a build or a run that failed, where no input was refused (they name one when a limit given as a
parameter ran out: ``timeout_s``). A flag is named by its Python name, how the message says it
kept in ``said_as`` (:func:`python_name`, :func:`flag_of`). Nobody recovers what was refused from a
message's text: a caller reads the fields.
"""


import os
import sys

_UNSET = object()

#: The classes (by name, exactly these, not their subclasses) whose errors are a build or a run
#: failing rather than an input refused: ``parameter`` may be None for them. ``TargetUnavailable``
#: and ``VariantRefused`` (kinds of BuildError) refuse a target or a variant, so they name it.
RUN_FAILURES = ("BuildError", "BrokenPatchError", "LaunchError", "KernelFailed")


def missing_package(e: ModuleNotFoundError) -> None:
    """Say what to run when a package the lab needs is missing (this Python was not set up), then
    stop: a command (``combine-lab ...``, ``python3 -m combine_lab ...``) prints one line naming the
    package and ``bash .ci/setup`` and exits 2, no traceback; an import (a notebook, a script)
    raises ModuleNotFoundError with the same words. A module of combine_lab itself missing is a
    broken checkout: ``e`` is raised as it is."""
    top = (e.name or "").split(".")[0]
    if not top or top == "combine_lab":
        raise e
    text = (f"the Python package {top!r} is missing from this Python ({sys.executable}): combine_lab is not set "
            "up here; run `bash .ci/setup` in the repository (`bash .ci/setup --test` for the tests too), or "
            "`pip install -e .`")
    command = sys.argv[:1] == ["-m"] or os.path.basename(sys.argv[0] if sys.argv else "") == "combine-lab"
    if command:
        print(f"combine-lab: error: {text}", file=sys.stderr)
        raise SystemExit(2)
    raise ModuleNotFoundError(text, name=e.name) from None


def python_name(what: str) -> str:
    """The Python name of a parameter from how a message names it: ``"--output-dir"`` ->
    ``"output_dir"``, ``"pes list"`` -> ``"pes_list"`` (a refusal's ``parameter``; its message keeps
    ``what`` as given, and ``said_as`` records a flag)."""
    return what.lstrip("-").replace("-", "_").replace(" ", "_")


def flag_of(what: str) -> str | None:
    """``what`` when it is a command-line flag (``"--bs-list"``), else None: a refusal's ``said_as``."""
    return what if what.startswith("-") else None


class CombineLabError(Exception):
    """Every error the lab raises on purpose: what was wrong, named, and what is allowed.

    Attributes:
        parameter: the Python name of the parameter or field that was refused (``"loops"``,
            ``"dtype"``, ``"routing"``); for a file or folder, the parameter that named it
            (``"case_dir"``, ``"path"``, ``"params"``, ``"model"``); for a package that is missing,
            its import name (``"jupyterlab"``). None only for :data:`RUN_FAILURES`.
        value: the value given (for a file: the file found wrong), or None.
        allowed: what is allowed instead, when it was given apart from the message; a message made
            by :meth:`of` (``"<parameter>=<value!r>: <allowed>"``) ends with it, and a SpecError's is
            what the message says after its field (the tuning form shows it at that field).
        said_as: how the message names the parameter when not by its Python name: the command-line
            flag it starts with (``"--loops"`` in ``"--loops=0: must be an int >= 1"``), else None.

    The message (``str(e)``) always names the parameter or file, the value and what is allowed;
    the fields let a caller say it in its own terms without reading the message (the command
    line puts the flag first: ``-type: dtype='float32': ...``, unless ``said_as`` says the message
    already does).
    """

    def __init__(self, message: str | None = None, *, parameter: str | None = None, value=_UNSET,
                 allowed: str | None = None, said_as: str | None = None):
        if message is None:
            message = f"{parameter}={value!r}: {allowed}"
        super().__init__(message)
        self.parameter = parameter
        self.value = None if value is _UNSET else value
        self.allowed = allowed
        self.said_as = said_as

    @classmethod
    def of(cls, parameter: str, value, allowed: str):
        """The error ``"<parameter>=<value!r>: <allowed>"``, with its fields."""
        return cls(parameter=parameter, value=value, allowed=allowed)


class SpecError(CombineLabError, ValueError):
    """A case parameter is invalid.

    The message names the field, the value given and what is allowed, e.g.
    ``"topk=9: must be <= moe_expert_num=8 when choices are distinct (routing 'zipf:1.2')"``.
    """


class CaseFileError(CombineLabError, ValueError):
    """A reference case directory (docs/formats.md#1-case-files) is missing a file or
    holds data inconsistent with its meta.json.

    The message names the file (path), what was found and what was expected.
    """


class ParameterError(CombineLabError, ValueError):
    """A parameter other than the case's own is invalid: how to plan, run, sweep or show a case.

    The message names the parameter, the value given and what is allowed, e.g.
    ``"loops=0: must be an int >= 1"`` or ``"settings='segmnt': must be 'reference', 'segment', ..."``.
    """


class LabError(CombineLabError, ValueError):
    """The headless notebook run cannot start: no notebooks folder, an unreadable params
    file, a notebook or a notebook parameter that does not exist. Nothing has run yet.

    The message names the folder, file, notebook or parameter and what exists instead.
    """

class ResultFileError(CombineLabError, ValueError):
    """A perf CSV or counters file is missing or not in the expected format (message names the file)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwound as Ctrl-C is: every ``finally`` runs (PEs killed, shared memory and case
    folders removed, JupyterLab stopped), then ``combine-lab`` exits with 143 (128 + SIGTERM)."""
