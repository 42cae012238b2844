"""``combine-lab selftest``: the protocol checker and fault suite in short, one screen."""

from __future__ import annotations

import argparse

from .commands import HELP


def _selftest(args: argparse.Namespace) -> int:
    from ..run.selftest import run_selftest

    rep = run_selftest(seeds=args.seeds)
    print(rep.text())
    return 0 if rep.healthy else 1


def register(sub) -> None:
    """Add the ``selftest`` sub-command to ``sub`` (argparse sub-parsers)."""
    p = sub.add_parser("selftest", help=HELP["selftest"])
    p.add_argument("--seeds", type=int, default=5, help="chaos seeds per case and variant (default 5)")
    p.set_defaults(handler=_selftest)
