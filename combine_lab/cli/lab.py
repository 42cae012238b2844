"""``combine-lab lab``: JupyterLab on the lab notebooks, with the lab's kernel, until Ctrl-C.

    combine-lab lab [--port 8888]

Prints the URL with its token once its own JupyterLab answers there (the process it started
listens on the port, and its token gets a 200); a ``--port`` another process holds is refused
(exit 2, naming the holder) before anything starts. Notebooks are saved without their outputs
(as committed; ``--keep-outputs`` keeps them). Ctrl-C (or SIGTERM) stops it and every kernel it
started. Root-safe (``--allow-root`` as root), on 127.0.0.1, a free port by default.
How: :class:`combine_lab.lab.server.LabServer`.
"""

from __future__ import annotations

import argparse

from .commands import HELP
from ..errors import ParameterError, Terminated
from ..lab.notebooks import KERNEL_NAME
from ..lab.server import LabServer, check_port


def port_arg(text: str) -> int:
    """argparse type of ``--port``: an int in 1-65535 (lab.server.check_port)."""
    try:
        return check_port(int(text))
    except (ValueError, ParameterError):
        raise argparse.ArgumentTypeError(f"{text!r}: must be an int in 1-65535") from None


def serve(server, command: str, what: str) -> int:
    """Wait on a started ``server`` (LabServer or AppServer) until Ctrl-C, SIGTERM or its exit;
    stop it and everything it started. Returns 0 (Ctrl-C), 143 (SIGTERM), or 2 when ``what``
    (JupyterLab, voila) exited by itself with a non-zero status; ``command`` names the sub-command."""
    try:
        code = server.wait()
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated)
        server.stop()
        how = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
        print(f"combine-lab {command}: stopped ({how}); {what} and its kernels are gone", flush=True)
        return 143 if isinstance(e, Terminated) else 0
    server.stop()
    print(f"combine-lab {command}: {what} exited with status {code}", flush=True)
    return 0 if code == 0 else 2


def _cmd_lab(args: argparse.Namespace) -> int:
    server = LabServer.start(args.dir, port=args.port, timeout_s=args.start_timeout, keep_outputs=args.keep_outputs)
    print(f"JupyterLab on {server.root_dir} with the {KERNEL_NAME} kernel:\n    {server.url}\nCtrl-C stops it.",
          flush=True)
    return serve(server, "lab", "JupyterLab")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``lab`` sub-command; its handler returns 0 when stopped by Ctrl-C, 143 by SIGTERM,
    2 when JupyterLab cannot start (the message says why)."""
    p = subparsers.add_parser("lab", help=HELP["lab"])
    p.add_argument("--port", type=port_arg, default=None, help="port on 127.0.0.1, 1-65535 (default: a free one)")
    p.add_argument("--dir", default=None, help="folder to serve (default: the notebooks folder)")
    p.add_argument("--start-timeout", type=float, default=120.0, help="seconds to wait for JupyterLab to answer")
    p.add_argument("--keep-outputs", action="store_true",
                   help="save notebooks with their outputs (default: without, as they are committed)")
    p.set_defaults(handler=_cmd_lab)
    return p
