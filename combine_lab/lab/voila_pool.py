"""voila's kernel manager for ``combine-lab app``: a pre-heated kernel is never culled on its way
to the page it was handed to.

voila keeps ``pool_size`` kernels warm for the next page and leaves them alone while they wait
(``VoilaKernelManager.cull_kernel_if_idle``), but the kernel it hands out keeps the idle time of
its wait: the culler, on its next round, found a kernel idle for longer than ``cull_idle_timeout``
with no page connected yet (the page was still loading) and shut it down; the page's websocket
then hung and failed with "Kernel does not exist" (issue 19 item 1). :class:`HandOutKernelManager`
is the base voila builds its manager on (``--VoilaConfiguration.multi_kernel_manager_class``): the
first time the culler meets a kernel outside the pool, it counts that as activity, so a handed
out kernel gets a whole ``cull_idle_timeout`` for its page to connect; a connected page's kernel
is never culled (``cull_connected=False``), a kernel whose page went away is culled as before.
"""

from __future__ import annotations

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from jupyter_server.utils import ensure_async

__all__ = ["HandOutKernelManager"]


def _now():
    from jupyter_server._tz import utcnow
    return utcnow()


class HandOutKernelManager(AsyncMappingKernelManager):
    """AsyncMappingKernelManager whose culler gives a kernel just handed out of voila's pool a
    fresh idle clock (see the module docstring)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._met: set[str] = set()  # kernels the culler has met outside the pool

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
        """Cull ``kernel_id`` as jupyter_server does, except the first time it is met outside the
        pool: then its idle clock starts now (it was just handed to a page)."""
        if kernel_id not in self._met and not self._in_pool(kernel_id):
            self._met.add(kernel_id)
            try:
                self.get_kernel(kernel_id).last_activity = _now()
            except KeyError:
                return None
            self.log.debug("kernel %s handed out of the pool: its idle time starts now", kernel_id)
            return None
        return await ensure_async(super().cull_kernel_if_idle(kernel_id))

    async def shutdown_kernel(self, kernel_id: str, *args, **kwargs):
        self._met.discard(kernel_id)
        return await ensure_async(super().shutdown_kernel(kernel_id, *args, **kwargs))
