"""voila's kernel manager for ``combine-lab app``: a pre-heated kernel is never culled on its way
to the page it was handed to.

voila keeps ``pool_size`` kernels warm for the next page and leaves them alone while they wait
(``VoilaKernelManager.cull_kernel_if_idle``), but the kernel it hands out keeps the idle time of
its wait: the culler, on its next round, found a kernel idle for longer than ``cull_idle_timeout``
with no page connected yet (the page was still loading) and shut it down; the page's websocket
then hung and failed with "Kernel does not exist" (issue 19 item 1). :class:`HandOutKernelManager`
is the base voila builds its manager on (``--VoilaConfiguration.multi_kernel_manager_class``): the
first time the culler meets a kernel outside the pool, its idle clock starts then, and until a
page has connected to it the kernel is given ``max(cull_idle_timeout, HANDOUT_GRACE_S)``: a
page on a loaded machine can take longer than a short cull timeout to render and open its
websocket (a 4 s cull lost the race in CI). A connected page's kernel is never culled
(``cull_connected=False``); a kernel whose page went away is culled as before, and one whose page
never connected is culled after the grace.

A kernel whose process has died is shut down on the culler's next round, whatever jupyter_server
last recorded of it: one that died while busy (a message from its page in hand) stayed "busy" in
its books for ever, and the culler never takes a busy kernel (``cull_busy=False``). The app's
kernels are not restarted when they die (``--KernelManager.autorestart=False``, :func:`~combine_lab.
lab.server.app_command`): voila runs the notebook once, when the page opens, so a restarted kernel
has no app in it; the page says the kernel is gone and offers a reload, which gets a fresh one.
Restarted, it was such a "busy" kernel (its activity watch still on the old ports), never culled.
"""

from __future__ import annotations

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from jupyter_server.utils import ensure_async

__all__ = ["HandOutKernelManager", "HANDOUT_GRACE_S"]

HANDOUT_GRACE_S = 60.0  # s: the least a handed-out kernel waits for its page's first connection


def _now():
    from jupyter_server._tz import utcnow
    return utcnow()


class HandOutKernelManager(AsyncMappingKernelManager):
    """AsyncMappingKernelManager whose culler gives a kernel just handed out of voila's pool a
    fresh idle clock (see the module docstring)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._met: dict[str, object] = {}  # kernel_id -> when the culler first met it outside the pool
        self._connected: set[str] = set()  # handed-out kernels a page has connected to

    def _in_pool(self, kernel_id: str) -> bool:
        for pool in getattr(self, "_pools", {}).values():
            for f in pool:
                try:
                    if f.done() and f.result().get("kernel_id") == kernel_id:
                        return True
                except Exception:  # noqa: BLE001 - a kernel that failed to start is not in the pool
                    continue
        return False

    async def cull_kernel_if_idle(self, kernel_id: str):
        """Cull ``kernel_id`` as jupyter_server does, except for a kernel just handed out of the
        pool: its idle clock starts when the culler first meets it, and until a page has connected
        it is kept for ``max(cull_idle_timeout, HANDOUT_GRACE_S)`` seconds from then."""
        if self._in_pool(kernel_id):
            return await ensure_async(super().cull_kernel_if_idle(kernel_id))  # voila's own: left alone
        try:
            kernel = self.get_kernel(kernel_id)
        except KeyError:
            return None
        if not await ensure_async(kernel.is_alive()):  # its process is gone: "busy" or not, nobody is there
            self.log.warning("Culling kernel %s: its process has ended", kernel_id)
            return await ensure_async(self.shutdown_kernel(kernel_id))
        now = _now()
        if kernel_id not in self._met:
            self._met[kernel_id] = now
            kernel.last_activity = now
            self.log.debug("kernel %s handed out of the pool: its idle time starts now", kernel_id)
            return None
        if self._kernel_connections.get(kernel_id, 0):
            self._connected.add(kernel_id)
        if kernel_id not in self._connected and getattr(kernel, "execution_state", None) != "dead":
            grace = max(float(self.cull_idle_timeout), HANDOUT_GRACE_S)
            if (now - self._met[kernel_id]).total_seconds() < grace:
                return None  # its page may still be on its way
        return await ensure_async(super().cull_kernel_if_idle(kernel_id))

    async def shutdown_kernel(self, kernel_id: str, *args, **kwargs):
        self._met.pop(kernel_id, None)
        self._connected.discard(kernel_id)
        return await ensure_async(super().shutdown_kernel(kernel_id, *args, **kwargs))
