"""``combine-lab docs``: the walkthrough executed and rendered as a page, with the docs pages.

    combine-lab docs [--out output/docs] [--params file.yaml|file.json]

What it writes and how: :mod:`combine_lab.lab.pages`.
"""

from __future__ import annotations

import argparse

from .commands import HELP
from ..lab.notebooks import KERNEL_NAME, load_params
from ..lab.pages import build_pages

DEFAULT_OUT = "output/docs"


def _cmd_docs(args: argparse.Namespace) -> int:
    # a LabError (params, kernel) or a ParameterError (the folder) is raised before anything runs: exit 2
    params = load_params(args.params) if args.params else {}
    built = build_pages(args.out, params, kernel_name=args.kernel, timeout_s=args.timeout, log=print,
                        out_name="--out")
    if not built.ok:
        print(f"combine-lab docs: the walkthrough failed ({built.walkthrough.error}); no walkthrough page written")
        return 1
    print(f"docs in {built.out}: open {built.out / 'index.html'}; the walkthrough with its outputs: "
          f"{built.walkthrough_html}")
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``docs`` sub-command to ``combine-lab``'s sub-parsers; its handler is
    ``args.handler(args) -> exit status`` (0 written, 1 the walkthrough failed, 2 bad input)."""
    p = subparsers.add_parser("docs", help=HELP["docs"])
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--params", default=None, help="YAML or JSON params file, as for combine-lab notebooks")
    p.add_argument("--kernel", default=KERNEL_NAME, help=f"Jupyter kernel (default {KERNEL_NAME})")
    p.add_argument("--timeout", type=float, default=600.0, help="limit per cell, seconds (default 600)")
    p.set_defaults(handler=_cmd_docs)
    return p
