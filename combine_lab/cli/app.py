"""``combine-lab app``: the tuning app alone in the browser (voila), with the lab's kernel, until Ctrl-C.

    combine-lab app [--port 8866] [--cull-idle-timeout 60]

Prints the URL with its token once its own voila answers there (the process it started listens
on the port); a ``--port`` another process holds is refused (exit 2, naming the holder) before
anything is created. The page shows a line of context and the app, each page with its own kernel
(a warm one waits for the next page and is never culled on its way to it), stopped when the page
closes (culling: ``--cull-idle-timeout`` seconds with no page connected); a reload keeps the
page's settings and history. Ctrl-C (or SIGTERM) stops voila and every kernel. How:
:class:`combine_lab.lab.server.AppServer`.
"""

from __future__ import annotations

import argparse

from .commands import HELP
from ..lab.server import AppServer
from .lab import port_arg, serve


def _cmd_app(args: argparse.Namespace) -> int:
    server = AppServer.start(port=args.port, timeout_s=args.start_timeout, cull_idle_s=args.cull_idle_timeout,
                             cull_interval_s=args.cull_interval)
    print(f"the tuning app (voila; a closed page's kernel stops after {args.cull_idle_timeout:g} s):\n"
          f"    {server.url}\nCtrl-C stops it.", flush=True)
    return serve(server, "app", "voila")


def _positive(text: str) -> float:
    v = float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0 seconds")
    return v


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``app`` sub-command; its handler returns 0 when stopped by Ctrl-C, 143 by SIGTERM,
    2 when voila cannot start (the message says why)."""
    p = subparsers.add_parser("app", help=HELP["app"])
    p.add_argument("--port", type=port_arg, default=None, help="port on 127.0.0.1, 1-65535 (default: a free one)")
    p.add_argument("--cull-idle-timeout", type=_positive, default=60.0,
                   help="seconds after which the kernel of a page that went away is stopped (default 60)")
    p.add_argument("--cull-interval", type=_positive, default=15.0,
                   help="how often voila looks for such kernels, seconds (default 15)")
    p.add_argument("--start-timeout", type=float, default=120.0, help="seconds to wait for voila to answer")
    p.set_defaults(handler=_cmd_app)
    return p
