"""``combine-lab diff A B``: two runs compared case by case, saying which differences are beyond noise.

    combine-lab diff output/perf-before output/perf        # folders of two --perf runs (or their summaries)

What is compared and when a difference counts: :mod:`combine_lab.results.diff`.
"""

from __future__ import annotations

import argparse

from .commands import HELP
from ..formats.summaries import SUMMARY_NAME, read_run_summary
from ..results.diff import NOT_COMPARED, diff_runs


def _cmd_diff(args: argparse.Namespace) -> int:
    a, b = read_run_summary(args.a), read_run_summary(args.b)  # ResultFileError: exit 2, naming the file
    print(f"A: {args.a}: {a['command']}\n   {a['measured']}")
    print(f"B: {args.b}: {b['command']}\n   {b['measured']}")
    table = diff_runs(a, b)
    shown = table.copy()
    for c in ("a", "b"):
        shown[c] = [f"{v:.3f}" if isinstance(v, float) and v == v else "-" for v in shown[c]]
    shown["b_over_a"] = [f"{v:.3f}" if v == v else "-" for v in shown["b_over_a"]]
    if all(str(r.get("clock", "")).startswith("model") for r in (a, b)):
        print("times in us, modelled points (no spread); within the model's resolution (5 %): a tie")
    else:
        print("times in us (median of the repeats, spread min-max); beyond noise: the two spreads do not overlap")
    print(shown.to_string(index=False))
    beyond = int(table["verdict"].str.contains("beyond noise").sum())
    apart = int((table["verdict"] == NOT_COMPARED).sum())  # no verdict between them: not counted
    if apart == len(table):
        print(f"no difference compared: {NOT_COMPARED.split(': ', 1)[1]} ({apart} rows)")
    elif apart:
        print(f"{beyond} of {len(table) - apart} differences beyond noise; {apart} not compared: "
              f"{NOT_COMPARED.split(': ', 1)[1]}")
    else:
        print(f"{beyond} of {len(table)} differences beyond noise")
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``diff`` sub-command; its handler returns the exit status (0; 2 for a file that is not
    a run summary)."""
    p = subparsers.add_parser("diff", help=HELP["diff"])
    p.add_argument("a", help=f"the first run: its --output-dir, or its {SUMMARY_NAME}")
    p.add_argument("b", help="the second run, likewise")
    p.set_defaults(handler=_cmd_diff)
    return p
