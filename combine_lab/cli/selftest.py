"""``combine-lab selftest``: the protocol checker and fault suite in short, one screen."""

from __future__ import annotations

import argparse

from .commands import HELP


def _selftest(args: argparse.Namespace) -> int:
    import sys

    from ..run.selftest import BROKEN_KERNELS, REFSTYLE_BUGS, run_selftest

    # the report comes at the end; without this line half a minute passes with nothing on the screen
    print(f"combine-lab selftest: {len(BROKEN_KERNELS)} broken kernels (built on the first run), "
          f"{len(REFSTYLE_BUGS)} bugs in a SHMEM-style kernel, the real kernel under {args.seeds} chaos seeds "
          "per case and variant, and the fault cases; about half a minute on 2 cores once built...",
          file=sys.stderr, flush=True)
    rep = run_selftest(seeds=args.seeds)
    print(rep.text())
    return 0 if rep.healthy else 1


def register(sub) -> None:
    """Add the ``selftest`` sub-command to ``sub`` (argparse sub-parsers)."""
    p = sub.add_parser("selftest", help=HELP["selftest"])
    p.add_argument("--seeds", type=int, default=5, help="chaos seeds per case and variant (default 5)")
    p.set_defaults(handler=_selftest)
