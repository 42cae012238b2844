"""JupyterLab on the lab notebooks (``combine-lab lab``) and the tuning app alone in the browser
(``combine-lab app``, with voila), each with the lab's kernel, stopped cleanly.

    server = LabServer.start()       # JupyterLab on notebooks/, a free port on 127.0.0.1, a fresh token
    print(server.url)                # http://127.0.0.1:<port>/lab?token=<token>
    server.stop()                    # the server, its kernels and whatever they started: gone

    app = AppServer.start()          # voila on a one-cell notebook that shows TuningApp(), and nothing else
    print(app.url)                   # http://127.0.0.1:<port>/?token=<token>
    app.stop()

The server runs in its own session, so a Ctrl-C in the terminal reaches ``combine-lab`` only,
which then stops the server with SIGTERM (JupyterLab's clean shutdown: it shuts its kernels
down) and makes sure that no process it started is left: what is still running after the grace
is killed. As root it passes ``--allow-root`` (JupyterLab refuses root otherwise). The kernel is
the lab's own (:data:`combine_lab.lab.notebooks.KERNEL_NAME`, registered for this environment
by ``.ci/setup``), which the notebooks name and which is the server's default.

The app page (:class:`AppServer`) runs a notebook written for it at start (:func:`app_notebook`):
one code cell that builds the app, no text, so voila's page is the app alone; nothing runs on
the twin until Run is pressed. Each page gets its own kernel; voila stops it when the page
says goodbye, and culling stops it when the page went away without a word (a closed tab, a
crashed browser): a kernel with no page connected for ``cull_idle_s`` is shut down.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..errors import LabError, ParameterError
from ..run.launch import free_port
from .notebooks import KERNEL_DISPLAY_NAME, KERNEL_NAME, notebook_dir, require_kernel

__all__ = ["LabServer", "lab_command", "AppServer", "app_command", "app_notebook", "APP_NOTEBOOK"]

#: The notebook voila serves for ``combine-lab app`` (written into a fresh folder at start).
APP_NOTEBOOK = "tuning_app.ipynb"
#: The only JupyterLab extensions voila's page loads: the widgets.
VOILA_EXTENSIONS = ("@jupyter-widgets/jupyterlab-manager", "@voila-dashboards/widgets-manager8")


def check_port(port) -> int | None:
    """``port`` as given to :meth:`LabServer.start` / :meth:`AppServer.start`: None (a free one) or
    an int in 1-65535. Raises ParameterError naming the value (a port past 65535 would be taken
    modulo 65536 by the server, and the URL printed would lead nowhere)."""
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ParameterError(f"port={port!r}: must be an int in 1-65535 (or None for a free one)")
    return port


def lab_command(root_dir: Path, port: int, token: str, kernel_name: str = KERNEL_NAME) -> list[str]:
    """The JupyterLab command line: ``root_dir`` served on 127.0.0.1:``port`` with ``token``, no
    browser, no other port tried, ``kernel_name`` the default kernel, ``--allow-root`` as root;
    no news feed or update check (the "get notified about news?" toast covers the notebook, and
    lab machines are often offline)."""
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.root_dir={root_dir}",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--MappingKernelManager.default_kernel_name={kernel_name}",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
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
        port = check_port(port) or free_port()
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

    #: What the server is called in messages.
    what = "JupyterLab"

    def _answers(self) -> bool:
        """True once the server answers its status URL with JSON."""
        try:
            with urllib.request.urlopen(self.status_url, timeout=2) as r:
                json.loads(r.read())
                return True
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return False

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise LabError(f"{self.what} exited at start with status {code} (its messages are above)")
            if self._answers():
                return
            if time.monotonic() > deadline:
                raise LabError(f"{self.what} did not answer on port {self.port} within {timeout_s:.0f} s")
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


# ------------------------------------------------------------------------------------ the app alone

def app_notebook(folder: str | os.PathLike, kernel_name: str = KERNEL_NAME) -> Path:
    """Write the app's notebook into ``folder``: one code cell that shows ``TuningApp()`` (default
    values: a 4-PE case, planned in milliseconds; nothing runs until Run), on the lab's kernel.
    Returns its path."""
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from combine_lab.lab.app import TuningApp\n\nTuningApp()")]
    nb.metadata["kernelspec"] = {"name": kernel_name, "display_name": KERNEL_DISPLAY_NAME, "language": "python"}
    path = Path(folder) / APP_NOTEBOOK
    nbformat.write(nb, path)
    return path


def app_command(notebook: Path, port: int, token: str, *, cull_idle_s: float = 60.0,
                cull_interval_s: float = 15.0) -> list[str]:
    """The voila command line: ``notebook`` alone on 127.0.0.1:``port`` with ``token``, no browser,
    no other port tried, sources stripped; a kernel whose page is gone is shut down after
    ``cull_idle_s`` idle seconds with no page connected (checked every ``cull_interval_s``)."""
    return [sys.executable, "-m", "voila", str(notebook), "--no-browser", "--Voila.ip=127.0.0.1",
            f"--port={port}", "--Voila.port_retries=0", f"--token={token}", "--strip_sources=True",
            "--VoilaConfiguration.show_tracebacks=True",
            # a warm kernel waits for the next page: it shows in about 2 s instead of 4
            "--preheat_kernel=True", "--pool_size=1",
            # the widgets only: JupyterLab's own extensions in this environment (jupytext, ...) need parts of
            # JupyterLab that voila's page does not have, and fail there with a JavaScript error
            f"--VoilaConfiguration.extension_allowlist={list(VOILA_EXTENSIONS)!r}",
            f"--MappingKernelManager.cull_idle_timeout={int(cull_idle_s)}",
            f"--MappingKernelManager.cull_interval={max(1, int(cull_interval_s))}",
            "--MappingKernelManager.cull_connected=False", "--MappingKernelManager.cull_busy=False"]


@dataclass
class AppServer(LabServer):
    """voila serving the tuning app alone (``combine-lab app``); ``url`` opens it. The app's
    notebook lives in ``root_dir``, a folder made for it and removed by :meth:`stop`."""

    what = "voila"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/voila/static/?token={self.token}"

    def _answers(self) -> bool:
        """True once voila answers HTTP at all (a 404 included): its page itself would start a kernel."""
        try:
            with urllib.request.urlopen(self.status_url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    @classmethod
    def start(cls, *, port: int | None = None, kernel_name: str = KERNEL_NAME, timeout_s: float = 120.0,
              cull_idle_s: float = 60.0, cull_interval_s: float = 15.0, log=None) -> "AppServer":
        """Start voila on the app's notebook and wait until it answers.

        Raises:
            LabError: the lab's kernel is missing, voila is not installed, it exited at start, or
                it did not answer within ``timeout_s`` (then it is stopped).
        """
        require_kernel(kernel_name)
        try:
            import voila  # noqa: F401
        except ImportError:
            raise LabError("voila is not installed: bash .ci/setup (or pip install -e '.[lab]')") from None
        folder = Path(tempfile.mkdtemp(prefix="combine_lab_app_"))
        notebook = app_notebook(folder, kernel_name)
        port = check_port(port) or free_port()
        token = secrets.token_hex(24)
        cmd = app_command(notebook, port, token, cull_idle_s=cull_idle_s, cull_interval_s=cull_interval_s)
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log if log is not None else 2, stderr=log,
                                cwd=folder, start_new_session=True)
        server = cls(proc, port, token, folder)
        try:
            server._wait_ready(timeout_s)
        except BaseException:
            server.stop()
            raise
        return server

    def kernels(self) -> list[psutil.Process]:
        """The kernels voila runs now (its child processes that still run)."""
        try:
            kids = psutil.Process(self.process.pid).children(recursive=False)
        except psutil.NoSuchProcess:
            return []
        out = []
        for k in kids:
            try:
                if k.status() != psutil.STATUS_ZOMBIE:
                    self.started.setdefault(k.pid, k)
                    out.append(k)
            except psutil.NoSuchProcess:
                continue
        return out

    def stop(self, grace_s: float = 20.0) -> list[int]:
        killed = super().stop(grace_s)
        shutil.rmtree(self.root_dir, ignore_errors=True)
        return killed
