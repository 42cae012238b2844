"""The tuning app's browser-side part (an anywidget, :func:`make_bridge`) and its page files: the
CSS and the bridge's JavaScript live in ``combine_lab/lab/static/`` (package data, so an installed
package has them). What the bridge does is what widgets cannot: the width the figures have,
settings and history kept in the tab across a reload, the focus back on Run after a Run, the
notebook's shortcuts off inside the app, each control's reasons at the control, the stacked
segment map's cells said on hover (a tooltip, ``.cl-cell-tip``, with
:func:`combine_lab.lab.segments.segment_text`'s sentence, written from the segments the map's image
carries), and a word on the page when the kernel stops answering (:data:`KERNEL_SILENT_S`, fed by a
heartbeat thread)."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from importlib import resources

from traitlets import Int, Unicode

__all__ = ["make_bridge", "static_text", "css_html", "KERNEL_SILENT_S", "HEARTBEAT_S", "HEARTBEAT_AFTER_PING_S"]

#: How long the page goes without the kernel's heartbeat before it says the kernel stopped (s). The
#: heartbeat comes from a thread of its own once a second (:data:`HEARTBEAT_S`), so a kernel busy on
#: its main thread (a Suggest at 64 PEs) still beats, and a dead one is said within 3-4.5 s.
KERNEL_SILENT_S = 3
#: How often the kernel's heartbeat thread tells the page it is alive (s).
HEARTBEAT_S = 1.0
#: How long after the page's last ping (every 2 s) the kernel goes on beating (s): a page that went
#: away stops pinging, and its kernel then goes idle, for voila's culler to end.
HEARTBEAT_AFTER_PING_S = 10.0


@functools.lru_cache(maxsize=None)
def static_text(name: str) -> str:
    """The text of ``combine_lab/lab/static/<name>`` (``app.css``, ``bridge.js``): package data.
    Raises FileNotFoundError for a name the package does not ship."""
    return resources.files("combine_lab.lab").joinpath("static", name).read_text(encoding="utf-8")


def css_html() -> str:
    """The app's CSS as the ``<style>`` element its first widget holds."""
    return "<style>\n" + static_text("app.css") + "</style>"


def make_bridge():
    """The anywidget of the browser's part, or None where anywidget is missing (the app works
    without it: no width, no keeping across a reload, no word when the kernel stops)."""
    try:
        import anywidget
    except ImportError:  # pragma: no cover - anywidget ships with the lab extra
        return None

    class _Bridge(anywidget.AnyWidget):
        """What the page does in the browser for the app (module docstring): width, storage,
        focus after Run, the notebook's shortcuts off inside the app, the stacked segment map's hover,
        a word when the kernel stops."""
        _esm = static_text("bridge.js")
        key = Unicode("").tag(sync=True)
        stored = Unicode("").tag(sync=True)
        restore = Unicode("").tag(sync=True)
        width = Int(0).tag(sync=True)
        silent_s = Int(KERNEL_SILENT_S).tag(sync=True)
        tips = Unicode("{}").tag(sync=True)  # JSON: control name -> [tooltip, reasons it is marked ('')]

    bridge = _Bridge()
    # the tests shorten it (COMBINE_LAB_KERNEL_SILENT_S): a person's page waits KERNEL_SILENT_S
    bridge.silent_s = int(os.environ.get("COMBINE_LAB_KERNEL_SILENT_S") or KERNEL_SILENT_S)
    bridge.last_ping = time.monotonic()

    def answer(w, content, buffers) -> None:
        if isinstance(content, dict) and "ping" in content:
            w.last_ping = time.monotonic()
            w.send({"pong": content.get("ping")})
    bridge.on_msg(answer)
    _start_heartbeat(bridge)
    return bridge


def _start_heartbeat(bridge) -> threading.Thread:
    """Tell the page once every :data:`HEARTBEAT_S` that this kernel is alive, from a daemon thread
    (ipykernel sends from any thread), while the page pings (within :data:`HEARTBEAT_AFTER_PING_S`
    of its last ping the main thread handled) and until the bridge is closed or collected: a dead
    kernel is then said within ``silent_s`` plus a beat, one busy on its main thread for up to
    :data:`HEARTBEAT_AFTER_PING_S` not at all. Every beat is kernel activity, so beating with no page
    there would keep voila's culler from ever ending the kernel of a closed page."""
    ref = weakref.ref(bridge)

    def beat() -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            b = ref()
            if b is None or getattr(b, "comm", None) is None:
                return
            if time.monotonic() - b.last_ping < HEARTBEAT_AFTER_PING_S:
                with contextlib.suppress(Exception):  # a closing comm: the next round ends the thread
                    b.send({"alive": time.time()})
            del b
    t = threading.Thread(target=beat, name="combine-lab-heartbeat", daemon=True)
    t.start()
    return t

