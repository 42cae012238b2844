"""``combine-lab notebooks``: run the lab notebooks headless with papermill.

    combine-lab notebooks [--params file.yaml|file.json] [--out folder] [--only 03_sweep ...]

What runs and how: :mod:`combine_lab.lab.notebooks`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..lab.notebooks import KERNEL_NAME, load_params, run_notebooks
from ..lab.records import default_output_dir


def _cmd_notebooks(args: argparse.Namespace) -> int:
    # a LabError (bad name, params file or parameter) is raised before anything runs: exit 2 from main
    params = load_params(args.params) if args.params else {}
    runs = run_notebooks(args.out, params, args.only, kernel_name=args.kernel, timeout_s=args.timeout, log=print)
    out = runs[0].output.parent if runs else Path(args.out or default_output_dir())
    figures = sorted(out.glob("*.png"))
    print(f"executed notebooks, {len(figures)} figures (PNG) and records in {out}")
    return 0 if all(r.ok for r in runs) else 1


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``notebooks`` sub-command to ``combine-lab``'s sub-parsers; its handler is
    ``args.handler(args) -> exit status`` (0 all ran, 1 a notebook failed, 2 bad input)."""
    p = subparsers.add_parser("notebooks", help="run the lab notebooks headless (papermill); keep executed "
                              "copies and figures")
    p.add_argument("--params", default=None, help="YAML or JSON file: {notebook: {param: value}} and/or "
                   "{param: value} for every notebook that declares it")
    p.add_argument("--out", default=None, help="output folder (default output/lab)")
    p.add_argument("--only", nargs="+", default=None, help="notebooks to run, e.g. 03_sweep or sweep (default all)")
    p.add_argument("--kernel", default=KERNEL_NAME, help=f"Jupyter kernel (default {KERNEL_NAME})")
    p.add_argument("--timeout", type=float, default=600.0, help="limit per cell, seconds (default 600)")
    p.set_defaults(handler=_cmd_notebooks)
    return p
