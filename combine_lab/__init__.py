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

try:
    from .case.case import Case, case_from_arrays, make_case
    from .formats.casefiles import read_case, write_case
    from .case.spec import CaseSpec
    from .planning.planner import plan
    from .harness import compare
    from .run.runner import run_case
except ModuleNotFoundError as _e:  # numpy, pandas, ...: this Python was not set up
    from .errors import missing_package
    missing_package(_e)

__version__ = "0.1.0"

__all__ = ["CaseSpec", "make_case", "plan", "run_case", "compare", "write_case", "read_case", "Case",
           "case_from_arrays"]
