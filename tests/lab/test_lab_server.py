"""``combine-lab lab``: JupyterLab on the notebooks with the lab's kernel, root-safe, a free port, the
URL with its token printed, and nothing left running after Ctrl-C."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import LAB_EXTRA, kill_tree, process_tree, require, running

require("jupyterlab", "jupyter_server", "ipykernel", reason=LAB_EXTRA)

from combine_lab import cli  # noqa: E402
from combine_lab.lab import notebooks  # noqa: E402
from combine_lab.lab.server import lab_command  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Lines:
    """The lines a process prints on stdout, read in the background (a read never blocks the test)."""

    def __init__(self, proc: subprocess.Popen):
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        self.thread.start()

    def _pump(self, stream):
        for line in stream:
            self.queue.put(line)
        self.queue.put("")

    def next(self, deadline: float) -> str:
        try:
            return self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return ""

    def rest(self, timeout: float) -> str:
        self.thread.join(timeout)
        out = []
        while not self.queue.empty():
            out.append(self.queue.get())
        return "".join(out)


def _get(url: str, token: str, method: str = "GET", body: dict | None = None):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read()


def _children_of(pid: int, family: list[psutil.Process]) -> list[psutil.Process]:
    """The direct children among ``family``; a short-lived helper process that is gone by the
    time it is asked (Jupyter starts some) is not one."""
    out = []
    for p in family:
        try:
            if p.ppid() == pid:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.slow  # JupyterLab and a kernel start (~15 s on 2 cores); the fast set checks its command line
def test_lab_serves_the_notebooks_with_the_lab_kernel_and_ctrl_c_leaves_nothing(tmp_path):
    err = open(tmp_path / "jupyter.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "combine_lab", "lab"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=err, text=True, env={**os.environ})
    try:
        lines = Lines(proc)
        deadline = time.monotonic() + 150
        first = lines.next(deadline)
        url_line = lines.next(deadline).strip()
        assert first == f"JupyterLab on {ROOT / 'notebooks'} with the {notebooks.KERNEL_NAME} kernel:\n", \
            (first, (tmp_path / "jupyter.log").read_text()[-2000:])
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]{48})", url_line)
        assert m, url_line
        base, token = f"http://127.0.0.1:{m.group(1)}", m.group(2)
        assert lines.next(deadline) == "Ctrl-C stops it.\n"
        status, body = _get(f"{base}/api/status", token)
        assert status == 200 and "started" in json.loads(body)
        status, body = _get(f"{base}/lab", token)
        assert status == 200 and b"JupyterLab" in body
        # no "get notified about news?" toast over the notebooks, no update check: the page says so
        page = json.loads(re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                    body, re.S).group(1))
        assert page["news"] == {"disabled": True}
        status, body = _get(f"{base}/api/contents", token)
        names = {c["name"] for c in json.loads(body)["content"]}
        assert {"01_walkthrough.ipynb", "02_tuning.ipynb", "03_sweep.ipynb"} <= names
        specs = json.loads(_get(f"{base}/api/kernelspecs", token)[1])
        assert specs["default"] == notebooks.KERNEL_NAME and notebooks.KERNEL_NAME in specs["kernelspecs"]
        # a kernel, as opening a notebook starts one: it must go with the server
        status, body = _get(f"{base}/api/kernels", token, "POST", {"name": notebooks.KERNEL_NAME})
        assert status == 201
        t0 = time.monotonic()
        while len(process_tree(proc.pid)) < 2 and time.monotonic() - t0 < 30:  # the server, then its kernel
            time.sleep(0.1)
        family = process_tree(proc.pid)
        assert len(family) >= 2, family
        server = _children_of(proc.pid, family)
        assert len(server) == 1 and server[0].cmdline()[1:3] == ["-m", "jupyterlab"]
        assert ("--allow-root" in server[0].cmdline()) == (os.geteuid() == 0)  # root-safe: refused as root without
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(timeout=60) == 0
        assert lines.rest(10) == "combine-lab lab: stopped (Ctrl-C); JupyterLab and its kernels are gone\n"
        gone, alive = psutil.wait_procs(family, timeout=5)
        assert not [p for p in alive if running(p)], alive
    finally:
        kill_tree(proc)
        err.close()


def test_lab_command_is_root_safe_and_on_loopback(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    cmd = lab_command(Path("/nb"), 8899, "tok")
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"] and cmd[-1] == "--allow-root"
    assert {"--ServerApp.ip=127.0.0.1", "--ServerApp.port=8899", "--ServerApp.port_retries=0",
            "--IdentityProvider.token=tok", "--ServerApp.root_dir=/nb",
            f"--MappingKernelManager.default_kernel_name={notebooks.KERNEL_NAME}", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"} <= set(cmd)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--allow-root" not in lab_command(Path("/nb"), 8899, "tok")


def test_a_missing_kernel_is_refused_with_the_fix(capsys, monkeypatch):
    monkeypatch.setattr(notebooks, "KERNEL_NAME", "combine-lab-nowhere")
    from combine_lab.lab import server
    monkeypatch.setattr(server, "KERNEL_NAME", "combine-lab-nowhere")
    with pytest.raises(Exception) as e:
        notebooks.require_kernel("combine-lab-nowhere")
    assert str(e.value) == ("Jupyter kernel 'combine-lab-nowhere' is not registered for this environment; bash "
                            f".ci/setup registers it, or: {Path(sys.executable).name} -m ipykernel install --sys-prefix "
                            "--name combine-lab-nowhere --display-name 'Python 3 (combine_lab)'")


def test_the_notebooks_name_the_lab_kernel():
    import nbformat
    for nb in notebooks.find_notebooks():
        spec = nbformat.read(nb, as_version=4).metadata["kernelspec"]
        assert spec == {"name": notebooks.KERNEL_NAME, "display_name": notebooks.KERNEL_DISPLAY_NAME,
                        "language": "python"}


# ---- issue 14 item 3: combine-lab app, the tuning app alone with voila ----

def test_app_notebook_is_the_app_alone(tmp_path):
    import nbformat
    from combine_lab.lab.server import APP_NOTEBOOK, app_notebook
    path = app_notebook(tmp_path)
    assert path == tmp_path / APP_NOTEBOOK
    nb = nbformat.read(path, as_version=4)
    # one line of context (issue 19 item 10), then one code cell that shows the app, no twin run at load
    assert [c.cell_type for c in nb.cells] == ["markdown", "code"]
    assert "tuning app" in nb.cells[0].source and "reload the page" in nb.cells[0].source
    assert nb.cells[1].source.splitlines()[-1] == "TuningApp(keep_across_reload=True)"
    assert "run(" not in nb.cells[1].source
    assert nb.metadata["kernelspec"]["name"] == notebooks.KERNEL_NAME
    assert nb.metadata["title"] == "combine_lab: tuning app"  # the browser tab's title


def test_app_command_culls_closed_pages_and_loads_only_the_widgets():
    from combine_lab.lab.server import VOILA_EXTENSIONS, app_command
    cmd = app_command(Path("/x/tuning_app.ipynb"), 8866, "tok", cull_idle_s=45, cull_interval_s=5)
    assert cmd[:4] == [sys.executable, "-m", "voila", "/x/tuning_app.ipynb"]
    assert {"--no-browser", "--Voila.ip=127.0.0.1", "--port=8866", "--Voila.port_retries=0", "--token=tok",
            "--strip_sources=True", "--MappingKernelManager.cull_idle_timeout=45",
            "--MappingKernelManager.cull_interval=5", "--MappingKernelManager.cull_connected=False",
            "--preheat_kernel=True", "--pool_size=1"} <= set(cmd)
    allow = next(c for c in cmd if c.startswith("--VoilaConfiguration.extension_allowlist="))
    assert eval(allow.split("=", 1)[1]) == list(VOILA_EXTENSIONS)  # noqa: S307 - our own literal


def test_app_cli_refuses_a_bad_cull_timeout(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["app", "--cull-idle-timeout", "0"])
    assert e.value.code == 2 and "must be > 0 seconds" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["lab", "app"])
@pytest.mark.parametrize("port", ["99999", "0", "-1", "http"])
def test_a_port_outside_1_65535_is_refused_before_anything_starts(command, port, capsys):
    """The field report: `combine-lab lab --port 99999` printed http://127.0.0.1:99999/... while
    JupyterLab listened on 99999 mod 65536 = 34463."""
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--port", port])
    assert e.value.code == 2
    assert f"argument --port: '{port}': must be an int in 1-65535" in capsys.readouterr().err
    # this process's own children only: under pytest -n 2 the other worker may be running a server
    assert not [p for p in psutil.Process().children(recursive=True) if "jupyter" in " ".join(p.cmdline())]


def test_the_servers_refuse_a_bad_port_naming_it():
    from combine_lab.errors import ParameterError
    from combine_lab.lab.server import AppServer, LabServer, check_port

    assert check_port(None) is None and check_port(1) == 1 and check_port(65535) == 65535
    for bad in (65536, 0, True, 8888.0):
        with pytest.raises(ParameterError, match=rf"port={bad!r}: must be an int in 1-65535"):
            check_port(bad)
    with pytest.raises(ParameterError, match="port=99999"):
        LabServer.start(port=99999)
    with pytest.raises(ParameterError, match="port=99999"):
        AppServer.start(port=99999)


# ---- issue 20 item 4: a URL only for our own server; a port another process holds is refused ----

class _OtherServer:
    """Another HTTP server on a port of 127.0.0.1 (as the field report had: it answers 404 to all)."""

    def __init__(self):
        import http.server
        import socketserver

        class Quiet(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                self.send_error(404)

            def log_message(self, *a):
                pass
        self.httpd = socketserver.TCPServer(("127.0.0.1", 0), Quiet)
        self.port = self.httpd.server_address[1]
        # shutdown() waits for serve_forever's next poll: every 10 ms, not its default 0.5 s (4 tests x 0.5 s)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _app_folders() -> set[str]:
    import glob
    import tempfile
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "combine_lab_app_*")))


@pytest.mark.parametrize("command", ["lab", "app"])
def test_a_port_another_server_holds_is_refused_naming_it_and_nothing_is_left(command, capsys, tmp_path,
                                                                            monkeypatch):
    """The field report: `combine-lab app --port P` beside another HTTP server printed a URL for a
    server it never started (its probe took the other's 404 for an answer), and a refused start
    left a /tmp/combine_lab_app_* folder behind (one per suite run)."""
    import tempfile
    # a temp folder of this test's own: an app another xdist worker starts makes its folder in /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    other = _OtherServer()
    before = _app_folders()
    try:
        t0 = time.monotonic()
        code = cli.main([command, "--port", str(other.port)])
        out, err = capsys.readouterr()
        assert code == 2, (out, err)
        assert "http://" not in out and "token=" not in out  # no URL for a server we did not start
        assert f"port {other.port} on 127.0.0.1 is in use by pid {os.getpid()}" in err, err
        assert "Nothing was started" in err
        assert time.monotonic() - t0 < 10  # refused before JupyterLab or voila was started
        assert not [p for p in psutil.Process().children(recursive=True)
                    if "jupyter" in " ".join(p.cmdline()) or "voila" in " ".join(p.cmdline())]
    finally:
        other.close()
    assert _app_folders() == before  # nothing created before the port was checked


def test_the_readiness_probe_wants_our_own_process_listening(tmp_path):
    """A server that answers on the port is ours only when the process we started listens there."""
    from combine_lab.lab.server import AppServer, LabServer, listens
    other = _OtherServer()
    try:
        assert listens(os.getpid(), other.port)  # this process holds it
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not listens(child.pid, other.port)
            for cls in (LabServer, AppServer):
                probe = cls(child, other.port, "tok", tmp_path)
                assert not probe._answers()  # the other server's 404 is not our server answering
        finally:
            child.kill()
            child.wait()
    finally:
        other.close()


def test_refused_starts_leave_no_app_folder():
    """AppServer.start refused for a bad port or a held one creates nothing."""
    from combine_lab.errors import LabError, ParameterError
    from combine_lab.lab.server import AppServer
    before = _app_folders()
    with pytest.raises(ParameterError):
        AppServer.start(port=99999)
    other = _OtherServer()
    try:
        with pytest.raises(LabError, match=f"port {other.port} on 127.0.0.1 is in use by pid"):
            AppServer.start(port=other.port)
    finally:
        other.close()
    assert _app_folders() == before


def test_a_saved_notebook_keeps_no_outputs_or_widget_state():
    """Issue 19 item 6: using the app left 02_tuning.ipynb as a +477-line diff of widget outputs,
    and reopening it said "Error displaying widget: model not found"."""
    import copy
    import nbformat
    from combine_lab.lab.server import STRIP_HOOK, lab_command, strip_outputs_on_save
    nb = nbformat.read(ROOT / "notebooks" / "02_tuning.ipynb", as_version=4)
    used = copy.deepcopy(nb)
    for cell in used.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output(
                "display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "ab", "version_major": 2,
                                                                                    "version_minor": 0}})]
            cell.execution_count = 7
    used.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    used.metadata["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python",
                                      "file_extension": ".py", "codemirror_mode": {"name": "ipython", "version": 3}}
    model = {"type": "notebook", "content": json.loads(nbformat.writes(used))}
    strip_outputs_on_save(model, path="02_tuning.ipynb", contents_manager=None)
    assert model["content"] == json.loads(nbformat.writes(nb))  # as committed
    other = {"type": "file", "content": "x"}
    strip_outputs_on_save(other)
    assert other == {"type": "file", "content": "x"}
    assert f"--ContentsManager.pre_save_hook={STRIP_HOOK}" in lab_command(Path("/nb"), 1, "t")
    assert not [c for c in lab_command(Path("/nb"), 1, "t", keep_outputs=True) if "pre_save_hook" in c]


def test_the_app_page_files_are_package_files(tmp_path):
    """Issue 30 item 3: the app's CSS, JavaScript and voila's page template are files of the package
    (lab/static/, package data), the template without the CDN icon font voila's own would load."""
    from importlib import resources

    from combine_lab.lab.app_bridge import css_html, static_text
    from combine_lab.lab.server import write_template
    static = resources.files("combine_lab.lab").joinpath("static")
    assert css_html() == "<style>\n" + static.joinpath("app.css").read_text() + "</style>"
    assert static_text("bridge.js").rstrip().endswith("export default { render };")
    out = write_template(tmp_path)
    assert out == tmp_path / "share" / "voila" / "templates" / "combine_lab"
    assert json.loads((out / "conf.json").read_text()) == {"base_template": "lab"}
    index = (out / "index.html.j2").read_text()
    assert index == static.joinpath("voila", "index.html.j2").read_text()
    assert index.startswith("{%- extends 'lab/index.html.j2' -%}") and index.count("fontawesome-free") == 2
    with open(ROOT / "pyproject.toml", "rb") as f:
        import tomllib
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["combine_lab.lab"]
    assert data == ["static/*.css", "static/*.js", "static/voila/*.j2", "static/voila/*.json"]
