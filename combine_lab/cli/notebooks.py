"""``combine-lab notebooks``: run the lab notebooks headless with papermill.

    combine-lab notebooks [--params file.yaml|file.json] [--out folder] [--only 03_sweep ...]
    combine-lab notebooks --cluster tcp://HOST:PORT   # each notebook (and parameter set) a task on dask.distributed

What runs and how: :mod:`combine_lab.lab.notebooks`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .commands import HELP
from ..lab.notebooks import KERNEL_NAME, load_params, run_notebooks
from ..lab.records import command_output_dir
from .cluster import add_cluster_flag


def _cmd_notebooks(args: argparse.Namespace) -> int:
    # a LabError (bad name, params file or parameter) is raised before anything runs: exit 2 from main
    params = load_params(args.params) if args.params else {}
    if args.cluster is not None:  # each notebook a task (combine_lab.lab.batch)
        from ..lab.batch import run_notebooks_on_cluster
        runs = run_notebooks_on_cluster(args.cluster, args.out, params, args.only, kernel_name=args.kernel,
                                        timeout_s=args.timeout, log=print, out_name="--out")
    else:
        runs = run_notebooks(args.out, params, args.only, kernel_name=args.kernel, timeout_s=args.timeout, log=print,
                             out_name="--out")
    # the folder above every run's (a parameter set's run is in its own subfolder)
    out = Path(os.path.commonpath([r.output.parent for r in runs])) if runs else Path(args.out or command_output_dir())
    figures = sorted({p for r in runs for p in r.figures})  # this run's, not what the folder held before
    print(f"executed notebooks, {len(figures)} figures (PNG) and records in {out}")
    return 0 if all(r.ok for r in runs) else 1


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``notebooks`` sub-command to ``combine-lab``'s sub-parsers; its handler is
    ``args.handler(args) -> exit status`` (0 all ran, 1 a notebook failed, 2 bad input)."""
    p = subparsers.add_parser("notebooks", help=HELP["notebooks"])
    p.add_argument("--params", default=None, help="YAML or JSON file: {notebook: {param: value}} and/or "
                   "{param: value} for every notebook that declares it; a notebook given a list of "
                   "mappings runs once per set, into <out>/<notebook>.<set_name or setN>/")
    p.add_argument("--out", default=None, help="output folder (default: the current folder's output/lab, or $COMBINE_LAB_OUTPUT)")
    p.add_argument("--only", nargs="+", default=None, help="notebooks to run, e.g. 03_sweep or sweep (default all)")
    p.add_argument("--kernel", default=KERNEL_NAME, help=f"Jupyter kernel (default {KERNEL_NAME})")
    p.add_argument("--timeout", type=float, default=600.0, help="limit per cell, seconds (default 600)")
    add_cluster_flag(p, "notebook with its parameters", "the PE slots of its largest pes / pes_list (default 2)")
    p.set_defaults(handler=_cmd_notebooks)
    return p
