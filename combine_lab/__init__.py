"""combine_lab: make MoE combine cases, plan MTE/SDMA planes, run the kernel, check and plot.

The package follows the flow of every run, one folder per stage:

- :mod:`combine_lab.case`: the case (spec, routing, dispatch layout, golden, grids);
- :mod:`combine_lab.formats`: the files of the lab (case files, perf CSVs, sidecars);
- :mod:`combine_lab.planning`: the plan (decision rule, window geometry and capacity, tables
  that explain both);
- :mod:`combine_lab.run`: build, launch, run and check on a target (CPU twin or NPU), the
  capability table, the all_to_all baseline, the self-test;
- :mod:`combine_lab.results`: one result row per run, speed-up and verdict, sweep tables;
- :mod:`combine_lab.harness`: descriptions of runs in, result rows out: the one loop over cases,
  repeats and variants that the CLI, the sweep, compare and the tuning app share;
- :mod:`combine_lab.lab`: the tuning app, plots, sweeps, exercises, notebook runner;
- :mod:`combine_lab.cli`: ``combine-lab``, one module per sub-command.

The everyday API is importable from here::

    from combine_lab import CaseSpec, make_case, plan, run_case, compare, write_case, read_case
    from combine_lab import Case, case_from_arrays      # a case from your own routing, scales and x

What this package implements is described in docs/ (docs/README.md): the layout in
docs/protocol.md#2-dispatch-layout, the decision rule in docs/decision-rule.md#1-the-rule, the perf CSV in docs/formats.md#3-perf-csv.
"""

import importlib as _importlib
import importlib.util as _util

#: Where each public name lives: imported on first use (PEP 562), so ``import combine_lab`` and
#: ``combine-lab --version`` do not pay for numpy and pandas (0.2 s) before anything needs them.
_PUBLIC = {"Case": ".case.case", "case_from_arrays": ".case.case", "make_case": ".case.case",
           "read_case": ".formats.casefiles", "write_case": ".formats.casefiles", "CaseSpec": ".case.spec",
           "plan": ".planning.planner", "compare": ".harness", "run_case": ".run.runner"}

#: The packages every stage needs: looked up (not imported) here, so a Python that was not set up
#: is still told what to run at ``import combine_lab`` rather than at the first use of a name.
_NEEDED = ("numpy", "pandas", "psutil", "tomli_w")

for _name in _NEEDED:
    if _util.find_spec(_name) is None:  # None also where sys.modules holds None for it
        from .errors import missing_package
        missing_package(ModuleNotFoundError(f"No module named {_name!r}", name=_name))


def __getattr__(name: str):
    """The public names of :data:`__all__`, imported from their module on first use (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'combine_lab' has no attribute {name!r}")
    try:
        value = getattr(_importlib.import_module(_PUBLIC[name], __name__), name)
    except ModuleNotFoundError as e:  # numpy, pandas, ...: this Python was not set up
        from .errors import missing_package
        missing_package(e)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))


__version__ = "0.1.0"

__all__ = ["CaseSpec", "make_case", "plan", "run_case", "compare", "write_case", "read_case", "Case",
           "case_from_arrays"]
