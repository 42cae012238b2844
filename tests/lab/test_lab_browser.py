"""The lab in a real browser: Debian's chromium driven by Playwright, as a user would.

1. ``combine-lab lab``: open 02_tuning at 1400 x 1000 with the file browser open, run all, move the
   h slider (the segment map changes), type an invalid value (the run views are marked stale), press
   Run (PASS with the counters line; the button comes back only with the results), double-click Run
   (one run); no control clipped and no history column out of view.
2. ``combine-lab app``: the app alone (no notebook text), loaded in under 5 s without a twin run,
   live, and a closed page's kernel stopped.

Every step leaves a screenshot under the folder the test prints (``output/browser/<test>/``, or
``$COMBINE_LAB_BROWSER_ARTIFACTS``), and the test asserts on them too (size, not blank, and the
segment map's picture changed with h), since CI keeps nothing. Any JavaScript error of the page fails
the test; the only console errors let through are resources the page asks of other hosts that this
offline machine cannot reach (voila's icon font from a CDN).
"""

from __future__ import annotations

import io
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import psutil
import pytest
from conftest import LAB_EXTRA, host_processes, kill_tree, process_tree, require, running

require("jupyterlab", "voila", "ipywidgets", reason=LAB_EXTRA)
require("playwright", reason="needs the test extra (playwright) and Debian's chromium: bash .ci/setup --test")

from playwright.sync_api import sync_playwright  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
VIEWPORT = {"width": 1400, "height": 1000}
LOAD_TARGET_S = 5.0


@pytest.fixture(scope="module")
def chromium_path() -> str:
    if not os.access(CHROMIUM, os.X_OK):
        why = "Debian's chromium is not installed (bash .ci/setup --test installs it with apt)"
        if os.environ.get("COMBINE_LAB_REQUIRE_EXTRAS") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return CHROMIUM


def artifacts(name: str) -> Path:
    base = Path(os.environ.get("COMBINE_LAB_BROWSER_ARTIFACTS") or ROOT / "output" / "browser")
    folder = base / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    print(f"\nscreenshots of {name}: {folder}", flush=True)
    return folder


class Lines:
    """A process's stdout lines, read in the background."""

    def __init__(self, proc: subprocess.Popen):
        self.queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stream):
        for line in stream:
            self.queue.put(line)
        self.queue.put("")

    def until(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = self.queue.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                break
            seen.append(line)
            m = re.search(pattern, line)
            if m:
                return m
            if line == "":
                break
        raise AssertionError(f"no line matching {pattern!r}; got {seen}")


class Session:
    """One browser page with its error log and numbered screenshots."""

    def __init__(self, browser, folder: Path):
        self.page = browser.new_page(viewport=VIEWPORT)
        self.folder = folder
        self.shots: list[Path] = []
        self.errors: list[str] = []
        self.failed_requests: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("console", self._console)
        self.page.on("requestfailed", lambda r: self.failed_requests.append(r.url))

    def _console(self, msg) -> None:
        if msg.type == "error":
            self.errors.append(f"console.error: {msg.text}")

    def failure_shot(self) -> None:
        """The page as it was when a step failed (not one of the steps' screenshots)."""
        try:
            self.page.screenshot(path=str(self.folder / "failure.png"))
            print(f"failure screenshot: {self.folder / 'failure.png'}", flush=True)
        except Exception:  # noqa: BLE001 - the page may be gone; the failure itself is what matters
            pass

    def dismiss_news(self) -> None:
        """JupyterLab's "get notified about news?" toast would cover the lower right of every shot."""
        news = self.page.locator(".Toastify__toast button:text-is('No')")
        if news.count():
            news.first.click()

    def shot(self, name: str, element=None) -> Path:
        self.dismiss_news()
        path = self.folder / f"{len(self.shots) + 1:02d}_{name}.png"
        (element or self.page).screenshot(path=str(path))
        self.shots.append(path)
        return path

    def js_errors(self) -> list[str]:
        """The page's JavaScript errors. A console error that only reports a resource of another
        host that failed to load (this machine is offline) is not one."""
        offline = all(urlparse(u).hostname not in ("127.0.0.1", "localhost") for u in self.failed_requests)
        return [e for e in self.errors
                if not (offline and self.failed_requests and e.startswith("console.error: Failed to load resource"))]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def assert_screenshots(shots: list[Path], names: list[str]) -> None:
    """Each step's screenshot exists, is the viewport's size (or an element's) and shows something."""
    from matplotlib import image as mpimg
    assert [re.sub(r"^\d\d_", "", p.stem) for p in shots] == names
    for p in shots:
        w, h = png_size(p)
        assert w > 100 and h > 50, (p, w, h)
        img = mpimg.imread(io.BytesIO(p.read_bytes()), format="png")
        assert float(img[..., :3].std()) > 0.02, f"{p} is blank"


def _kernels(pid: int) -> list[psutil.Process]:
    out = []
    for p in process_tree(pid):
        try:
            if "ipykernel_launcher" in " ".join(p.cmdline()) and running(p):
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _stop(proc: subprocess.Popen, what: str) -> None:
    """Ctrl-C, as a user stops it: exit 0 and nothing of it left running."""
    family = process_tree(proc.pid)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0, f"{what} did not stop cleanly"
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not [p for p in alive if running(p)], alive


# ------------------------------------------------------------------------------------ JupyterLab

LAYOUT_JS = """() => {
  const app = document.querySelector('.cl-app');
  const out = app.closest('.jp-OutputArea-output') || app.parentElement;
  const scroller = app.closest('.jp-WindowedPanel-outer') || app.closest('.jp-Notebook');
  const o = out.getBoundingClientRect(), s = scroller.getBoundingClientRect();
  const left = Math.max(o.left, s.left), right = Math.min(o.right, s.right);
  const clipped = [];
  for (const el of app.querySelectorAll('.cl-control')) {
    const r = el.getBoundingClientRect();
    const name = [...el.classList].find(c => c.startsWith('cl-control-'));
    if (r.left < left - 0.5 || r.right > right + 0.5) clipped.push(`${name} at ${r.left}-${r.right} outside ${left}-${right}`);
    for (const lab of el.querySelectorAll('.widget-label')) {
      if (lab.scrollWidth > lab.clientWidth + 1) clipped.push(`${name}: label "${lab.textContent}" cut`);
    }
  }
  const fb = document.querySelector('#filebrowser');
  return {clipped, left, right, width: o.width, controls: app.querySelectorAll('.cl-control').length,
          sidebar: !!fb && fb.offsetWidth > 100 && fb.getBoundingClientRect().right <= o.left};
}"""

HISTORY_JS = """() => {
  const table = document.querySelector('.cl-app .cl-history-table');
  if (!table) return null;
  const out = table.closest('.jp-OutputArea-output');
  const scroller = table.closest('.jp-WindowedPanel-outer') || table.closest('.jp-Notebook');
  const right = Math.min(out.getBoundingClientRect().right, scroller.getBoundingClientRect().right);
  const box = table.closest('.cl-scroll');
  const heads = [...table.querySelectorAll('th')].map(th => [th.textContent, th.getBoundingClientRect().right]);
  return {heads, right, overflow: box.scrollWidth - box.clientWidth, rows: table.querySelectorAll('tr').length - 1};
}"""

WATCH_RUN_JS = """() => {
  const button = document.querySelector('.cl-app .cl-run');
  const rows = () => { const t = document.querySelector('.cl-app .cl-history-table');
                       return t ? t.querySelectorAll('tr').length - 1 : 0; };
  window.__runLog = [{disabled: button.disabled, rows: rows()}];
  new MutationObserver(() => window.__runLog.push({disabled: button.disabled, rows: rows()}))
    .observe(button, {attributes: true, attributeFilter: ['disabled']});
}"""


def _history_rows(page) -> int:
    return page.evaluate("() => { const t = document.querySelector('.cl-app .cl-history-table');"
                         " return t ? t.querySelectorAll('tr').length - 1 : 0; }")


def _wait_run_done(page, rows_before: int, timeout_ms: int = 180_000) -> None:
    page.wait_for_function(
        "(n) => { const b = document.querySelector('.cl-app .cl-run');"
        " const t = document.querySelector('.cl-app .cl-history-table');"
        " return b && !b.disabled && t && t.querySelectorAll('tr').length - 1 > n; }", arg=rows_before,
        timeout=timeout_ms)


def _kernel_idle(base: str, token: str, notebook: str) -> bool:
    """The server's own word: the notebook's session has a kernel, and it is idle."""
    import json
    import urllib.request
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.loads(r.read())
    return any(sess.get("path", "").endswith(notebook) and sess.get("kernel", {}).get("execution_state") == "idle"
               for sess in sessions)


def _open_notebook(page, base: str, token: str, notebook: str) -> None:
    page.goto(f"{base}/lab/tree/{notebook}?token={token}")
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # JupyterLab may ask which kernel, or start the notebook's at once
        if page.locator(".jp-Dialog button.jp-mod-accept").count():
            page.click(".jp-Dialog button.jp-mod-accept")
        if _kernel_idle(base, token, notebook) and \
                page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count():
            break
        time.sleep(0.3)
    else:
        raise AssertionError("the notebook's kernel never became idle")
    if not page.locator("#filebrowser").is_visible():  # the sidebar open, as the field report had it
        page.click(".jp-SideBar [data-id='filebrowser']")


def _run_all(page) -> None:
    """Run > Run All Cells, as a user does; pressed once more if no cell started within 30 s (a
    kernel that said idle before its page was connected to it)."""
    for attempt in range(2):
        page.click("li.lm-MenuBar-item:has-text('Run')")
        page.click("li.lm-Menu-item:has-text('Run All Cells')")
        try:
            page.wait_for_selector(".jp-InputPrompt:has-text('[1]')", state="attached", timeout=30_000)
            return
        except Exception:  # noqa: BLE001 - nothing ran: press again
            if attempt:
                raise


def test_tuning_notebook_in_jupyterlab(chromium_path, tmp_path, twin_binary):
    folder = artifacts("jupyterlab_02_tuning")
    notebooks = tmp_path / "notebooks"  # a copy: the run marks them dirty, autosave must not touch the checkout
    shutil.copytree(ROOT / "notebooks", notebooks, ignore=shutil.ignore_patterns("*.py", ".ipynb_checkpoints"))
    env = {**os.environ, "COMBINE_LAB_OUTPUT": str(tmp_path / "out")}
    log = open(tmp_path / "jupyter.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "combine_lab", "lab", "--dir", str(notebooks)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        m = Lines(proc).until(r"(http://127\.0\.0\.1:\d+)/lab\?token=([0-9a-f]+)", 150)
        base, token = m.group(1), m.group(2)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
            s = Session(browser, folder)
            page = s.page
            try:
                _open_notebook(page, base, token, "02_tuning.ipynb")

                # run all: the notebook drives the app, two runs on the twin, and prints its record last
                _run_all(page)
                page.wait_for_selector(".jp-OutputArea-output:has-text('record:')", state="attached", timeout=120_000)
                assert page.locator("[data-mime-type='application/vnd.jupyter.error']").count() == 0
                s.shot("run_all")

                page.locator(".cl-app .cl-controls").first.scroll_into_view_if_needed()
                page.wait_for_selector(".cl-app .cl-segment-map", state="visible")
                layout = page.evaluate(LAYOUT_JS)
                assert layout["sidebar"], "the file browser should be open beside the notebook"
                assert layout["controls"] == 14 and layout["clipped"] == [], layout
                assert 850 < layout["width"] < 1000, layout  # a JupyterLab column beside the sidebar at 1400 px
                s.shot("app_controls")

                # the h slider: the segment map (and the plane bytes with it) follow at once
                before = page.get_attribute(".cl-app .cl-segment-map", "data-h")
                figures_before = page.inner_html(".cl-app .cl-plan-figures")
                map_before = s.shot("segment_map_before", page.locator(".cl-app .cl-segment-map"))
                handle = page.locator(".cl-app .cl-control-h .noUi-handle").first
                box = handle.bounding_box()
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                page.mouse.down()
                page.mouse.move(box["x"] - 45, box["y"] + box["height"] / 2, steps=6)
                page.mouse.up()
                page.wait_for_function(
                    "(h) => { const m = document.querySelector('.cl-app .cl-segment-map');"
                    " return m && m.getAttribute('data-h') !== h; }", arg=before, timeout=30_000)
                after = page.get_attribute(".cl-app .cl-segment-map", "data-h")
                readout = page.inner_text(".cl-app .cl-control-h .widget-readout").replace(",", "").strip()
                assert int(after) < int(before) and after == readout, (before, after, readout)
                assert page.inner_html(".cl-app .cl-plan-figures") != figures_before
                assert page.locator(".cl-app .cl-plan-figures svg").count() == 2
                map_after = s.shot("segment_map_after", page.locator(".cl-app .cl-segment-map"))
                assert map_after.read_bytes() != map_before.read_bytes()

                # an invalid value: no plan, and the last run's verdict marked stale
                topk = page.locator(".cl-app .cl-control-topk input")
                topk.fill("99")
                topk.press("Enter")
                page.wait_for_selector(".cl-app .cl-message:has-text('Cannot plan this case')", timeout=30_000)
                assert page.locator(".cl-app .cl-segment-map").count() == 0
                stale = page.locator(".cl-app .cl-stale")
                stale.wait_for(state="visible")
                assert "the inputs cannot be planned" in stale.inner_text()
                stale.scroll_into_view_if_needed()
                s.shot("invalid_value_stale")
                topk.fill("2")
                topk.press("Enter")
                page.wait_for_selector(".cl-app .cl-segment-map", state="visible", timeout=30_000)

                # Run: PASS with the counters line; the button comes back only with the results
                rows = _history_rows(page)
                page.evaluate(WATCH_RUN_JS)
                page.locator(".cl-app .cl-run").scroll_into_view_if_needed()
                page.click(".cl-app .cl-run")
                _wait_run_done(page, rows)
                verdict = page.inner_text(".cl-app .cl-verdict")
                assert verdict.count("PASS on every PE; counters = plan") == 2, verdict
                assert page.locator(".cl-app .cl-stale").count() == 0
                log_ = page.evaluate("() => window.__runLog")
                assert log_[0] == {"disabled": False, "rows": rows} and log_[1]["disabled"] is True, log_
                back = [e for e in log_[1:] if not e["disabled"]]
                assert back and back[0]["rows"] == rows + 1, log_  # enabled again only with the new history row
                page.locator(".cl-app .cl-verdict").scroll_into_view_if_needed()
                s.shot("run_pass")

                # a double-click: one run
                rows = _history_rows(page)
                page.dblclick(".cl-app .cl-run")
                _wait_run_done(page, rows)
                time.sleep(4)  # a second run would have started by now
                assert _history_rows(page) == rows + 1
                assert not page.locator(".cl-app .cl-run").is_disabled()
                s.shot("double_click_one_run")

                # the history: every shown column in view, no sideways scrolling
                page.locator(".cl-app .cl-history").scroll_into_view_if_needed()
                hist = page.evaluate(HISTORY_JS)
                assert hist["rows"] == rows + 1 and hist["overflow"] <= 1, hist
                out_of_view = [name for name, right in hist["heads"] if right > hist["right"] + 0.5]
                assert not out_of_view and len(hist["heads"]) == 11, (out_of_view, hist)
                assert {"speed-up", "SDMA share", "check", "counters = plan"} <= {h for h, _ in hist["heads"]}
                s.shot("history_in_view")

                assert s.js_errors() == [], s.js_errors()
            except BaseException:
                s.failure_shot()
                raise
            browser.close()
        assert_screenshots(s.shots, ["run_all", "app_controls", "segment_map_before", "segment_map_after",
                                     "invalid_value_stale", "run_pass", "double_click_one_run", "history_in_view"])
        _stop(proc, "combine-lab lab")
        assert not host_processes()
    finally:
        kill_tree(proc)
        log.close()


# ------------------------------------------------------------------------------------------ voila

def test_app_alone_with_voila(chromium_path, tmp_path, twin_binary):
    folder = artifacts("voila_app")
    log = open(tmp_path / "voila.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "combine_lab", "app", "--cull-idle-timeout", "8",
                             "--cull-interval", "1"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        url = Lines(proc).until(r"(http://127\.0\.0\.1:\d+/\?token=[0-9a-f]+)", 150).group(1)
        t0 = time.monotonic()
        while not _kernels(proc.pid) and time.monotonic() - t0 < 60:  # voila warms a kernel up for the first page
            time.sleep(0.2)
        time.sleep(3)
        waiting = {p.pid for p in _kernels(proc.pid)}
        assert len(waiting) == 1, waiting
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
            s = Session(browser, folder)
            page = s.page
            try:
                t = time.monotonic()
                page.goto(url)
                page.wait_for_selector(".cl-app .cl-run", state="visible", timeout=60_000)
                page.wait_for_selector(".cl-app .cl-segment-map", state="visible", timeout=60_000)
                page.wait_for_selector(".cl-app .cl-modelled", state="visible", timeout=60_000)
                load_s = time.monotonic() - t
                print(f"app page loaded in {load_s:.2f} s", flush=True)
                assert load_s < LOAD_TARGET_S, f"the app page took {load_s:.1f} s to show"
                # the app alone: nothing on the page outside it, no code, no printed output
                outside = page.evaluate("() => document.body.innerText.replace(document.querySelector('.cl-app')"
                                        ".innerText, '').trim()")
                assert outside == "", outside
                assert page.locator(".jp-InputArea, .jp-MarkdownOutput, .jp-RenderedText").count() == 0
                # nothing ran on the twin to show it
                assert not host_processes() and page.inner_text(".cl-app .cl-run-status").strip() == ""
                assert _history_rows(page) == 0
                s.shot("app_page")
                # live: the page's own kernel answers the slider
                before = page.get_attribute(".cl-app .cl-segment-map", "data-h")
                box = page.locator(".cl-app .cl-control-h .noUi-handle").first.bounding_box()
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                page.mouse.down()
                page.mouse.move(box["x"] + 60, box["y"] + box["height"] / 2, steps=6)
                page.mouse.up()
                page.wait_for_function(
                    "(h) => document.querySelector('.cl-app .cl-segment-map').getAttribute('data-h') !== h", arg=before,
                    timeout=30_000)
                s.shot("app_page_h_moved")
                mine = waiting & {p.pid for p in _kernels(proc.pid)}
                assert mine, "the page took the kernel voila had warmed up"
                assert s.js_errors() == [], s.js_errors()
                page.close()  # no goodbye from the page (as a crashed or killed tab): culling must stop its kernel
                t = time.monotonic()
                while mine & {p.pid for p in _kernels(proc.pid)} and time.monotonic() - t < 45:
                    time.sleep(0.5)
                left = mine & {p.pid for p in _kernels(proc.pid)}
                assert not left, f"the closed page's kernel still runs after {time.monotonic() - t:.0f} s"
                assert len(_kernels(proc.pid)) <= 1  # the one voila keeps warm for the next page
            except BaseException:
                s.failure_shot()
                raise
            browser.close()
        assert_screenshots(s.shots, ["app_page", "app_page_h_moved"])
        _stop(proc, "combine-lab app")
    finally:
        kill_tree(proc)
        log.close()
