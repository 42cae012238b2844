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

import errno
import json
import os
import secrets
import shutil
import signal
import socket
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

__all__ = ["LabServer", "lab_command", "AppServer", "app_command", "app_notebook", "APP_NOTEBOOK", "APP_TITLE",
           "write_template", "require_free_port", "port_holder", "listens"]

#: The notebook voila serves for ``combine-lab app`` (written into a fresh folder at start).
APP_NOTEBOOK = "tuning_app.ipynb"
#: The only JupyterLab extensions voila's page loads: the widgets, and anywidget (the app's
#: browser-side part: combine_lab.lab.app).
VOILA_EXTENSIONS = ("@jupyter-widgets/jupyterlab-manager", "@voila-dashboards/widgets-manager8", "anywidget")


def check_port(port) -> int | None:
    """``port`` as given to :meth:`LabServer.start` / :meth:`AppServer.start`: None (a free one) or
    an int in 1-65535. Raises ParameterError naming the value (a port past 65535 would be taken
    modulo 65536 by the server, and the URL printed would lead nowhere)."""
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ParameterError(f"port={port!r}: must be an int in 1-65535 (or None for a free one)",
                             parameter="port", value=port, allowed="an int in 1-65535 (or None for a free one)")
    return port


def port_holder(port: int) -> str:
    """Who listens on ``port`` of this machine, for a message: "pid 123 (python3 -m http.server
    8866)", or "another process" when the system does not say (another user's)."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        conns = []
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            try:
                cmd = " ".join(psutil.Process(c.pid).cmdline())[:120]
            except psutil.Error:
                cmd = ""
            return f"pid {c.pid}" + (f" ({cmd})" if cmd else "")
    return "another process"


def require_free_port(port: int) -> None:
    """Raise LabError (exit 2) naming ``port`` and, when it can be told, the process that holds
    it, when 127.0.0.1:``port`` cannot be bound: a server started there would fail, or a URL
    printed for it would reach the other process. Checked before anything is created."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise LabError(f"port {port} on 127.0.0.1 cannot be used: {e.strerror}",
                               parameter="port", value=port) from None
            raise LabError(f"port {port} on 127.0.0.1 is in use by {port_holder(port)}: pick another --port, or leave "
                           "--port out for a free one. Nothing was started.", parameter="port", value=port) from None


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself listens on TCP ``port``: the server that answers there is the
    one this process started, not another one on the same port."""
    try:
        p = psutil.Process(pid)
        conns = p.net_connections(kind="inet") if hasattr(p, "net_connections") else p.connections(kind="inet")
    except (psutil.Error, OSError):
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


#: What a notebook saved by ``combine-lab lab`` keeps in place of the outputs it had.
STRIP_HOOK = "combine_lab.lab.server.strip_outputs_on_save"


def strip_outputs_on_save(model, path=None, contents_manager=None, **kwargs) -> None:
    """JupyterLab's pre-save hook for ``combine-lab lab``: a notebook is saved without its outputs,
    execution counts and widget state, as it is committed, so that using the lab leaves the
    tracked notebooks as they were (the tuning app's widget outputs made a +477-line diff, and
    reopened without their kernel they said "Error displaying widget: model not found"), nor the
    kernel's ``language_info``, which JupyterLab's autosave added (12 lines naming this machine's
    Python version). Run All brings every output back. Other files are saved as they are."""
    if not isinstance(model, dict) or model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    nb = model["content"]
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)
    nb.get("metadata", {}).pop("widgets", None)
    nb.get("metadata", {}).pop("language_info", None)


def lab_command(root_dir: Path, port: int, token: str, kernel_name: str = KERNEL_NAME, *,
                keep_outputs: bool = False) -> list[str]:
    """The JupyterLab command line: ``root_dir`` served on 127.0.0.1:``port`` with ``token``, no
    browser, no other port tried, ``kernel_name`` the default kernel, ``--allow-root`` as root;
    no news feed or update check (the "get notified about news?" toast covers the notebook, and
    lab machines are often offline); notebooks saved without outputs (:func:`strip_outputs_on_save`)
    unless ``keep_outputs``."""
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.root_dir={root_dir}",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--MappingKernelManager.default_kernel_name={kernel_name}",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if not keep_outputs:
        cmd.append(f"--ContentsManager.pre_save_hook={STRIP_HOOK}")
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
              kernel_name: str = KERNEL_NAME, timeout_s: float = 120.0, log=None,
              keep_outputs: bool = False) -> "LabServer":
        """Start JupyterLab on ``root_dir`` (default: the notebooks folder) and wait until it answers.

        ``port``: default a free one; ``log``: a writable file for JupyterLab's own messages
        (default: this process's stderr); ``timeout_s``: how long to wait for it to answer;
        ``keep_outputs``: save notebooks with their outputs (default: without, as committed).

        Raises:
            LabError: the notebooks folder or the lab's kernel is missing, JupyterLab is not
                installed, ``port`` is held by another process (named), it exited at start (its
                status; its messages are in ``log``), or it did not answer within ``timeout_s``
                (then it is stopped).
        """
        root = Path(root_dir) if root_dir is not None else notebook_dir()
        if not root.is_dir():
            raise LabError(f"{root}: no notebooks folder (a source checkout has notebooks/)",
                           parameter="root_dir", value=root)
        require_kernel(kernel_name)
        try:
            import jupyterlab  # noqa: F401
        except ImportError:
            raise LabError("JupyterLab is not installed: bash .ci/setup (or pip install -e '.[lab]')",
                           parameter="jupyterlab") from None
        port = check_port(port)
        if port is not None:
            require_free_port(port)
        port = port or free_port()
        token = secrets.token_hex(24)
        # JupyterLab's messages go to ``log``, else to this process's stderr (fd 2), never to its stdout
        proc = subprocess.Popen(lab_command(root, port, token, kernel_name, keep_outputs=keep_outputs),
                                stdin=subprocess.DEVNULL,
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
        """True once this server answers: the process it started listens on the port itself, and
        the status URL with its own token answers 200 with JSON (another Jupyter there would say
        403 to our token; another server would not be our process)."""
        if not listens(self.process.pid, self.port):
            return False
        try:
            with urllib.request.urlopen(self.status_url, timeout=2) as r:
                json.loads(r.read())
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return False

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise LabError(f"{self.what} exited at start with status {code} (its messages are above)",
                               parameter="port", value=self.port)
            if self._answers():
                return
            if time.monotonic() > deadline:
                raise LabError(f"{self.what} did not answer on port {self.port} within {timeout_s:.0f} s",
                               parameter="timeout_s", value=timeout_s)
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

#: The page's title (the browser tab) and its one line of context, above the app.
APP_TITLE = "combine_lab: tuning app"
APP_CONTEXT = ("**combine_lab tuning app**: set a MoE combine case, see how the decision rule splits it between "
               "MTE and SDMA, its modelled NPU time, and run both variants on the CPU twin. "
               "<span class='cl-app-loading'>The app appears below within seconds; if it does not, its kernel did "
               "not start: reload the page.</span>")


def app_notebook(folder: str | os.PathLike, kernel_name: str = KERNEL_NAME) -> Path:
    """Write the app's notebook into ``folder``: a one-line context (which says to reload when the
    app does not appear; hidden once it does) and one code cell that shows ``TuningApp()``
    (default values: a 4-PE case, planned in milliseconds; nothing runs until Run; settings and
    history kept across a reload of the page), on the lab's kernel, titled :data:`APP_TITLE`.
    Returns its path."""
    from .nb_imports import lean_jsonschema
    lean_jsonschema()
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(APP_CONTEXT),
                nbformat.v4.new_code_cell("from combine_lab.lab.app import TuningApp\n\n"
                                          "TuningApp(keep_across_reload=True)")]
    nb.metadata["kernelspec"] = {"name": kernel_name, "display_name": KERNEL_DISPLAY_NAME, "language": "python"}
    nb.metadata["title"] = APP_TITLE
    path = Path(folder) / APP_NOTEBOOK
    nbformat.write(nb, path)
    return path


#: voila's page template for the app (package files, ``lab/static/voila/``, copied at start into the
#: app's folder): voila's own "lab" template without the icon font it loads from a CDN (the app uses
#: no icons; offline the request fails twice on every load).
TEMPLATE = "combine_lab"
_TEMPLATE_FILES = ("conf.json", "index.html.j2")


def write_template(folder: str | os.PathLike) -> Path:
    """Write the app page's voila template (:data:`TEMPLATE`, the package's ``lab/static/voila/``)
    under ``<folder>/share`` (a Jupyter data folder the voila process is given); returns its folder."""
    from importlib import resources
    out = Path(folder) / "share" / "voila" / "templates" / TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    for name in _TEMPLATE_FILES:
        text = resources.files("combine_lab.lab").joinpath("static", "voila", name).read_text(encoding="utf-8")
        (out / name).write_text(text)
    return out


def app_command(notebook: Path, port: int, token: str, *, cull_idle_s: float = 60.0,
                cull_interval_s: float = 15.0) -> list[str]:
    """The voila command line: ``notebook`` alone on 127.0.0.1:``port`` with ``token``, no browser,
    no other port tried, sources stripped, the app's template; a kernel whose page is gone is shut
    down after ``cull_idle_s`` idle seconds with no page connected (checked every ``cull_interval_s``).

    One kernel is kept warm for the next page (it shows in about 2 s instead of 4), and the
    culler never takes it from the page it is handed to: voila leaves a kernel in its pool alone,
    but the one it hands out kept the idle time of its wait in the pool (856 s in the field), so
    the culler shut it down before the page could connect. The kernel manager
    (:class:`combine_lab.lab.voila_pool.HandOutKernelManager`) counts the hand-out as the
    kernel's activity: a page gets ``cull_idle_s`` to connect, and once connected its kernel is
    not culled (``cull_connected=False``)."""
    return [sys.executable, "-m", "voila", str(notebook), "--no-browser", "--Voila.ip=127.0.0.1",
            f"--port={port}", "--Voila.port_retries=0", f"--token={token}", "--strip_sources=True",
            "--VoilaConfiguration.show_tracebacks=True", f"--template={TEMPLATE}",
            "--preheat_kernel=True", "--pool_size=1",
            "--VoilaConfiguration.multi_kernel_manager_class=combine_lab.lab.voila_pool.HandOutKernelManager",
            # the widgets only: JupyterLab's own extensions in this environment (jupytext, ...) need parts of
            # JupyterLab that voila's page does not have, and fail there with a JavaScript error
            f"--VoilaConfiguration.extension_allowlist={list(VOILA_EXTENSIONS)!r}",
            f"--MappingKernelManager.cull_idle_timeout={int(cull_idle_s)}",
            f"--MappingKernelManager.cull_interval={max(1, int(cull_interval_s))}",
            "--MappingKernelManager.cull_connected=False", "--MappingKernelManager.cull_busy=False",
            # a kernel that died stays dead: voila would not run the notebook in a restarted one (the page
            # says the kernel is gone and offers a reload), and the culler shuts it down (voila_pool)
            "--KernelManager.autorestart=False"]


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
        """True once this voila answers: the process it started listens on the port itself, and
        answers HTTP there (not the page itself: that would start a kernel)."""
        if not listens(self.process.pid, self.port):
            return False
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
            LabError: the lab's kernel is missing, voila is not installed, ``port`` is held by
                another process (named; nothing is created then), it exited at start, or it did
                not answer within ``timeout_s`` (then it is stopped and its folder removed).
        """
        require_kernel(kernel_name)
        try:
            import voila  # noqa: F401
        except ImportError:
            raise LabError("voila is not installed: bash .ci/setup (or pip install -e '.[lab]')",
                           parameter="voila") from None
        port = check_port(port)
        if port is not None:
            require_free_port(port)  # before anything is created: a refused port leaves nothing behind
        port = port or free_port()
        token = secrets.token_hex(24)
        folder = Path(tempfile.mkdtemp(prefix="combine_lab_app_"))
        try:
            notebook = app_notebook(folder, kernel_name)
            write_template(folder)
            cmd = app_command(notebook, port, token, cull_idle_s=cull_idle_s, cull_interval_s=cull_interval_s)
            env = {**os.environ, "JUPYTER_PATH": os.pathsep.join(
                [str(folder / "share")] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p])}
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log if log is not None else 2, stderr=log,
                                    cwd=folder, start_new_session=True, env=env)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
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


# ---------------------------------------------------------------------- process control of an app's kernel
def end_children() -> None:
    """End the processes this kernel started (a Run's PEs, a build): the kernel of a page that
    was reloaded has nothing else of its own running. Processes that are already gone are skipped."""
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for k in kids:
        try:
            k.kill()
        except psutil.Error:
            pass


def on_stop_signal(handler) -> None:
    """Call ``handler(signum, frame)`` on SIGUSR1, the signal :func:`stop_other_kernel` sends: the
    kernel of a reloaded page's new page asks this one to stop its Run. Python takes signal
    handlers on the main thread only, so elsewhere nothing is installed."""
    import threading
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, handler)


def stop_other_kernel(data: dict) -> str:
    """Ask the kernel of the page before the reload (``data["pid"]``) to stop its Run (SIGUSR1),
    when it is a kernel beside this one (the same server started both); returns what was done
    ('' when nothing was: no pid, this process, or not an ipykernel sibling)."""
    pid = data.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return ""
    try:
        other, me = psutil.Process(pid), psutil.Process()
        if other.ppid() != me.ppid() or "ipykernel" not in " ".join(other.cmdline()):
            return ""
        other.send_signal(signal.SIGUSR1)
    except (psutil.Error, OSError):
        return ""
    return "The Run the page before the reload was making was stopped."
