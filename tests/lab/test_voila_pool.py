"""The app's kernel manager: a kernel handed out of voila's pool is kept until its page connects
(or the hand-out grace ends), and culled as jupyter_server does once its page has gone.

The culler is driven round by round with a fake clock and fake kernels; the decision under test
(cull or keep) is the manager's own code and jupyter_server's, unchanged."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from combine_lab.lab import voila_pool
from combine_lab.lab.voila_pool import HANDOUT_GRACE_S, HandOutKernelManager

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now

    def advance(self, s: float):
        self.now += timedelta(seconds=s)


@pytest.fixture
def manager(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(voila_pool, "_now", clock)
    import jupyter_server.services.kernels.kernelmanager as km
    monkeypatch.setattr(km, "utcnow", clock)
    m = HandOutKernelManager(cull_idle_timeout=4, cull_interval=1, cull_connected=False, cull_busy=False)
    shut: list[str] = []

    async def fake_shutdown(self_, kernel_id, *a, **k):  # the base's shutdown needs a real process
        shut.append(kernel_id)
        m._kernels.pop(kernel_id, None)

    monkeypatch.setattr(km.AsyncMappingKernelManager, "shutdown_kernel", fake_shutdown)
    m.clock, m.shut = clock, shut
    return m


def add_kernel(m, kernel_id: str, idle_since: datetime, state: str = "idle", alive: bool = True) -> None:
    m._kernels[kernel_id] = SimpleNamespace(kernel_spec=SimpleNamespace(metadata={}), last_activity=idle_since,
                                            execution_state=state, kernel_name="combine-lab", alive=alive)
    m._kernels[kernel_id].is_alive = lambda: m._kernels[kernel_id].alive


def cull_round(m, kernel_id: str) -> None:
    asyncio.run(m.cull_kernel_if_idle(kernel_id))


def test_a_handed_out_kernel_is_kept_for_the_grace_while_no_page_has_connected(manager):
    add_kernel(manager, "k1", T0 - timedelta(seconds=856))  # idled 856 s in the pool (the field report)
    cull_round(manager, "k1")  # first met outside the pool: its clock starts now
    assert manager.get_kernel("k1").last_activity == T0 and manager.shut == []
    manager.clock.advance(HANDOUT_GRACE_S - 1)  # far past the 4 s cull, the page still loading
    cull_round(manager, "k1")
    assert manager.shut == []
    manager.clock.advance(2)  # the grace is over and no page ever came
    cull_round(manager, "k1")
    assert manager.shut == ["k1"]


def test_once_its_page_connected_and_left_the_kernel_is_culled_after_the_cull_timeout(manager):
    add_kernel(manager, "k2", T0 - timedelta(seconds=100))
    cull_round(manager, "k2")
    manager.clock.advance(3)
    manager._kernel_connections["k2"] = 1  # the page's websocket
    cull_round(manager, "k2")
    manager.clock.advance(600)  # connected: never culled however idle (cull_connected=False)
    cull_round(manager, "k2")
    assert manager.shut == []
    manager._kernel_connections["k2"] = 0  # the tab closed without a goodbye
    manager.get_kernel("k2").last_activity = manager.clock.now
    manager.clock.advance(3)
    cull_round(manager, "k2")
    assert manager.shut == []  # 3 s < cull_idle_timeout 4 s
    manager.clock.advance(2)
    cull_round(manager, "k2")
    assert manager.shut == ["k2"]


def test_a_dead_handed_out_kernel_is_culled_at_once(manager):
    add_kernel(manager, "k3", T0)
    cull_round(manager, "k3")
    manager.get_kernel("k3").execution_state = "dead"
    manager.clock.advance(1)
    cull_round(manager, "k3")
    assert manager.shut == ["k3"]


def test_a_kernel_that_died_busy_is_culled_on_the_next_round(manager):
    """The browser test's flake: a page's kernel killed while it handled a message from the page stayed
    "busy" in jupyter_server's books (nothing told it otherwise), and a busy kernel is never culled."""
    add_kernel(manager, "k5", T0, state="busy")
    manager._kernel_connections["k5"] = 1  # its page still there
    cull_round(manager, "k5")
    manager.clock.advance(600)
    cull_round(manager, "k5")
    assert manager.shut == []  # alive and busy (or connected): kept, however long
    manager.get_kernel("k5").alive = False  # killed: still "busy", its page still connected
    cull_round(manager, "k5")
    assert manager.shut == ["k5"]


def test_the_apps_kernels_are_not_restarted_when_they_die():
    from combine_lab.lab.server import app_command
    assert "--KernelManager.autorestart=False" in app_command(Path("/nb/app.ipynb"), 8888, "t")


def test_a_kernel_in_the_pool_is_left_to_voila(manager, monkeypatch):
    add_kernel(manager, "k4", T0 - timedelta(seconds=900))
    monkeypatch.setattr(manager, "_in_pool", lambda kernel_id: True)
    cull_round(manager, "k4")  # jupyter_server's own rule decides (voila's manager skips its pool above this)
    assert manager.shut == ["k4"] and "k4" not in manager._met
