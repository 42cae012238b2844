"""JupyterLab on the lab notebooks, with the lab's kernel, stopped cleanly (``combine-lab lab``).

    server = LabServer.start()       # JupyterLab on notebooks/, a free port on 127.0.0.1, a fresh token
    print(server.url)                # http://127.0.0.1:<port>/lab?token=<token>
    server.stop()                    # the server, its kernels and whatever they started: gone

The server runs in its own session, so a Ctrl-C in the terminal reaches ``combine-lab`` only,
which then stops the server with SIGTERM (JupyterLab's clean shutdown: it shuts its kernels
down) and makes sure that no process it started is left: what is still running after the grace
is killed. As root it passes ``--allow-root`` (JupyterLab refuses root otherwise). The kernel is
the lab's own (:data:`combine_lab.lab.notebooks.KERNEL_NAME`, registered for this environment
by ``.ci/setup``), which the notebooks name and which is the server's default.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..errors import LabError
from ..run.launch import free_port
from .notebooks import KERNEL_NAME, notebook_dir, require_kernel

__all__ = ["LabServer", "lab_command"]


def lab_command(root_dir: Path, port: int, token: str, kernel_name: str = KERNEL_NAME) -> list[str]:
    """The JupyterLab command line: ``root_dir`` served on 127.0.0.1:``port`` with ``token``, no
    browser, no other port tried, ``kernel_name`` the default kernel, ``--allow-root`` as root."""
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.root_dir={root_dir}",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--MappingKernelManager.default_kernel_name={kernel_name}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


@dataclass
class LabServer:
    """A running JupyterLab: ``process`` (its Popen), ``port``, ``token``, ``root_dir``; ``url``
    opens the lab, ``status_url`` answers JSON when it is up. ``started`` holds every process it
    started that was seen (kernels, and what they start), so :meth:`stop` leaves none behind."""

    process: subprocess.Popen
    port: int
    token: str
    root_dir: Path
    started: dict[int, psutil.Process] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/lab?token={self.token}"

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/status?token={self.token}"

    @classmethod
    def start(cls, root_dir: str | os.PathLike | None = None, *, port: int | None = None,
              kernel_name: str = KERNEL_NAME, timeout_s: float = 120.0, log=None) -> "LabServer":
        """Start JupyterLab on ``root_dir`` (default: the notebooks folder) and wait until it answers.

        ``port``: default a free one; ``log``: a writable file for JupyterLab's own messages
        (default: this process's stderr); ``timeout_s``: how long to wait for it to answer.

        Raises:
            LabError: the notebooks folder or the lab's kernel is missing, JupyterLab is not
                installed, it exited at start (its status; its messages are in ``log``), or it did
                not answer within ``timeout_s`` (then it is stopped).
        """
        root = Path(root_dir) if root_dir is not None else notebook_dir()
        if not root.is_dir():
            raise LabError(f"{root}: no notebooks folder (a source checkout has notebooks/)")
        require_kernel(kernel_name)
        try:
            import jupyterlab  # noqa: F401
        except ImportError:
            raise LabError("JupyterLab is not installed: bash .ci/setup (or pip install -e '.[lab]')") from None
        port = port or free_port()
        token = secrets.token_hex(24)
        # JupyterLab's messages go to ``log``, else to this process's stderr (fd 2), never to its stdout
        proc = subprocess.Popen(lab_command(root, port, token, kernel_name), stdin=subprocess.DEVNULL,
                                stdout=log if log is not None else 2, stderr=log, start_new_session=True)
        server = cls(proc, port, token, root)
        try:
            server._wait_ready(timeout_s)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise LabError(f"JupyterLab exited at start with status {code} (its messages are above)")
            try:
                with urllib.request.urlopen(self.status_url, timeout=2) as r:
                    json.loads(r.read())
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise LabError(f"JupyterLab did not answer on port {self.port} within {timeout_s:.0f} s")
            time.sleep(0.2)

    def _note_children(self) -> None:
        try:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                self.started.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def wait(self, poll_s: float = 0.5) -> int:
        """Wait until the server exits by itself (it is stopped from its web page, say); returns its
        status. Keeps track of the processes it starts meanwhile. Ctrl-C and SIGTERM interrupt it
        (KeyboardInterrupt): call :meth:`stop` then."""
        while True:
            self._note_children()
            try:
                return self.process.wait(timeout=poll_s)
            except subprocess.TimeoutExpired:
                continue

    def stop(self, grace_s: float = 20.0) -> list[int]:
        """Stop the server and everything it started; returns the pids that had to be killed.

        SIGTERM first (JupyterLab shuts its kernels down and exits), then after ``grace_s`` SIGKILL
        to its process group; then every process it was seen to start that still runs is killed.
        """
        self._note_children()
        killed = []
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                killed.append(self.process.pid)
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(timeout=10)
        alive = []
        for p in self.started.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                continue
        for p in alive:  # kernels that outlived the server: it had no time to shut them down
            try:
                p.kill()
                killed.append(p.pid)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)
        return killed
