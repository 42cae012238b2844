"""What a run needs in /dev/shm, memory, disk and tasks, checked before anything is written or launched.

The twin's symmetric heap per PE mirrors host/combine_host.cpp (local_mem_size: the
window plus 1 MiB, in 2 MiB units; kernels/combine_kernel.h window_layout) and
host/twin/twin_heap.cpp (half as much again for the protocol checker's shadows). Its tasks per PE
mirror host/twin: one process per PE (combine_lab/run/launch.py) with its main thread, one thread
per AIV block of the launch (twin_kernel.cpp) and the SDMA engine's (twin_engines.cpp).
"""

from __future__ import annotations

import os
import resource
import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..case.spec import CaseSpec
from ..errors import CombineLabError
from .cores import kernel_constant, launch_block_dim

MiB = 1 << 20
GiB = 1 << 30


class CapacityError(CombineLabError, ValueError):
    """The case is valid but does not fit this machine; the message gives the resource, the
    bytes needed and the bytes available.

    Attributes (besides ``parameter``, ``value``, ``allowed``):
        resource: what did not fit: ``"x"`` (making the case: x in memory), ``"shm"`` (the twin's
            heaps in /dev/shm), ``"memory"`` (the PEs' memory), ``"disk"`` (the case files in the
            work folder) or ``"tasks"`` (the twin's processes and threads).
        needed, available: of that resource, bytes (tasks: a count).
    """

    def __init__(self, message: str, *, resource: str | None = None, needed: int | None = None,
                 available: int | None = None, **fields):  # defaults: unpickled (a cluster's) as CapacityError(message)
        super().__init__(message, **fields)
        self.resource, self.needed, self.available = resource, needed, available


#: A status slot's stride: one 64 B scalar cache line each, so that no two slots that different
#: PEs write share a line (kernels/combine_kernel.h kStatusSlotBytes; docs/hardware-rules.md#7-status-slots-and-the-scalar-cache).
STATUS_SLOT_BYTES = kernel_constant("kStatusSlotBytes")
#: What a status put writes and a wait checks: the ready value in 8 int32 words.
STATUS_FLAG_BYTES = 4 * kernel_constant("kStatusWords")


def _line(n: int) -> int:
    return -(-n // STATUS_SLOT_BYTES) * STATUS_SLOT_BYTES


def segment_area(spec: CaseSpec) -> dict:
    """The segment variant's extra window area (kernels/combine_kernel.h window_layout with pes;
    docs/variants.md#3-extra-memory-and-steps), bytes: positions (int32 per slot), bases and
    cursor (int32 per expert), each on whole 64 B lines, and ``pes`` inbox slots of a 64 B ready
    line plus the line-rounded bases of one PE's experts. ``bytes``: all of it."""
    experts = spec.pes * spec.expert_per_pe
    positions, bases = _line(spec.bs * spec.topk * 4), _line(experts * 4)
    inbox_slot = STATUS_SLOT_BYTES + _line(spec.expert_per_pe * 4)
    return {"positions_bytes": positions, "bases_bytes": bases, "cursor_bytes": bases, "inbox_slot_bytes": inbox_slot,
            "inbox_bytes": spec.pes * inbox_slot, "bytes": positions + 2 * bases + spec.pes * inbox_slot}


def window_geometry(spec: CaseSpec, segment: bool = False) -> dict:
    """The symmetric window of one PE (docs/protocol.md#4-the-symmetric-window; kernels/combine_kernel.h
    window_layout), all sizes in bytes.

    Returns ``{"slots": bs*topk, "row_bytes": h*sizeof(T), "slot_stride": align_up(row_bytes, 32),
    "payload_bytes": slots*slot_stride, "status_offset": align_up(payload_bytes, 64),
    "status_slot_bytes": 64, "status_flag_bytes": 32, "window_bytes": status_offset + slots*64}``.
    Slot ``token_id*topk + topk_id`` holds that (token, choice)'s expert output at
    ``slot*slot_stride`` and its ready flag (32 B) at ``status_offset + slot*64``, alone on its
    64 B cache line. With ``segment`` (the segment variant) the window also holds
    :func:`segment_area` after the status slots: ``segment_area_bytes`` is added to the window.
    """
    slots = spec.bs * spec.topk
    stride = -(-spec.row_bytes // 32) * 32
    payload = slots * stride
    status = -(-payload // STATUS_SLOT_BYTES) * STATUS_SLOT_BYTES
    extra = segment_area(spec)["bytes"] if segment else 0
    return {"slots": slots, "row_bytes": spec.row_bytes, "slot_stride": stride, "payload_bytes": payload,
            "status_offset": status, "status_slot_bytes": STATUS_SLOT_BYTES, "status_flag_bytes": STATUS_FLAG_BYTES,
            "segment_area_bytes": extra, "window_bytes": status + slots * STATUS_SLOT_BYTES + extra}


def window_bytes(spec: CaseSpec, segment: bool = False) -> int:
    """One PE's symmetric window as the driver allocates it, bytes: the payload and status
    slots of :func:`window_geometry` (kernels/combine_kernel.h window_layout), and with
    ``segment`` the segment variant's area."""
    return window_geometry(spec, segment)["window_bytes"]


def twin_heap_bytes(spec: CaseSpec, segment: bool = False) -> int:
    """One PE's share of the twin's shared-memory segment, bytes (``segment``: the segment variant's window)."""
    user = (window_bytes(spec, segment) + MiB + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
    return user + (user // 2 + 64 * 1024 + 4095) // 4096 * 4096


@dataclass(frozen=True)
class Needs:
    """Bytes a run needs: ``shm`` (twin segment), ``memory`` (PE processes, beyond shm),
    ``disk`` (case files actually written; padding rows are a sparse tail)."""

    shm: int
    memory: int
    disk: int


def needs(spec: CaseSpec, rows_per_pe: list[int] | None = None, segment: bool = False) -> Needs:
    """Estimate what running ``spec`` takes. ``rows_per_pe``: received rows per PE (default:
    the worst case, capacity_rows for every PE); ``segment``: the segment variant's window."""
    rows = rows_per_pe if rows_per_pe is not None else [spec.capacity_rows] * spec.pes
    shm = 4096 + spec.pes * twin_heap_bytes(spec, segment)
    # Each PE holds its used expand_x rows twice (host copy, device copy) and x_out twice.
    memory = sum(2 * r * spec.row_bytes + 2 * spec.bs * spec.row_bytes for r in rows)
    small = spec.capacity_rows * 12 + spec.bs * spec.topk * 8 + spec.bs * spec.row_bytes
    disk = sum(r * spec.row_bytes + small for r in rows)
    return Needs(shm, memory, disk)


def twin_tasks_per_pe(pes: int) -> int:
    """Tasks (threads) one PE of the twin runs at once on a case of ``pes`` PEs: its main thread, one
    per AIV block of a launch (:func:`~combine_lab.planning.cores.launch_block_dim`, min(pes, AIV
    cores, 48) on the twin's SoC) and the SDMA engine's."""
    return 1 + launch_block_dim(pes) + 1


def task_room() -> dict:
    """How many more tasks (processes and threads) this machine lets start: the least of the user's
    ``RLIMIT_NPROC`` (soft) less the tasks of this user running now, and ``kernel.pid_max`` and
    ``kernel.threads-max`` less every task running now (/proc/loadavg's count), of those that are set.

    Returns ``{"limits": {name: (limit, running)}, "free": tasks}`` (``free`` None: no limit known)."""
    limits = {}
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY:
        me = os.getuid()
        mine = sum(p.info["num_threads"] or 0 for p in psutil.process_iter(["uids", "num_threads"])
                   if p.info["uids"] is not None and p.info["uids"].real == me)
        limits["RLIMIT_NPROC"] = (int(soft), mine)
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):  # not Linux: the rlimit alone
        running = None
    for name in ("pid_max", "threads-max"):
        try:
            limit = int(Path(f"/proc/sys/kernel/{name}").read_text())
        except (OSError, ValueError):
            continue
        if running is not None:
            limits[f"kernel.{name}"] = (limit, running)
    free = max(min(limit - n for limit, n in limits.values()), 0) if limits else None
    return {"limits": limits, "free": free}


def _fits_every_limit(tasks: int) -> bool:
    """Whether ``tasks`` more fit under every limit :func:`task_room` knows, told from /proc alone:
    this user's tasks are among all that run, so when all of them and ``tasks`` fit under the
    ``RLIMIT_NPROC`` soft limit too, counting the user's own (a walk over every process, ms each
    time) cannot change the answer. False where it cannot be told so cheaply."""
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
        limits = [int(Path(f"/proc/sys/kernel/{name}").read_text()) for name in ("pid_max", "threads-max")]
    except (OSError, ValueError, IndexError):
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY:
        limits.append(int(soft))
    return running + tasks <= min(limits)


def check_twin_pes(spec: CaseSpec) -> None:
    """Refuse a case with more PEs than the twin can run here, before anything is written: it starts
    one process per PE with :func:`twin_tasks_per_pe` tasks each, and a launch that cannot start them
    all fails part-way (after minutes of case files). A timing model prices any PE count.

    Raises:
        CapacityError: ``parameter="pes"``; the message names ``-pes``, the value, the bound and
            the limits it comes from (:func:`task_room`).
    """
    per = twin_tasks_per_pe(spec.pes)
    if _fits_every_limit(spec.pes * per):
        return
    room = task_room()
    if room["free"] is None or spec.pes * per <= room["free"]:
        return
    most = room["free"] // per
    limits = ", ".join(f"{k} {limit:,} less {n:,} running" for k, (limit, n) in room["limits"].items())
    allowed = f"at most {most:,} PEs on the twin here"
    raise CapacityError(f"pes={spec.pes}: {allowed} ({spec.case_id}): the twin runs one process per PE with {per} "
                        f"tasks each (its main thread, {per - 2} AIV block threads, the SDMA engine), "
                        f"{spec.pes * per:,} in all, and this machine lets {room['free']:,} more start (the least "
                        f"of {limits}); a timing-model clock launches nothing and "
                        "has no such bound", parameter="pes", value=spec.pes, allowed=allowed, resource="tasks",
                        needed=spec.pes * per, available=room["free"])


def mem_available() -> int:
    """Memory available to new processes without swapping, bytes (MemAvailable on Linux)."""
    return int(psutil.virtual_memory().available)


def check_capacity(spec: CaseSpec, work_dir: str | os.PathLike | None, rows_per_pe: list[int] | None = None,
                   target: str = "cpu", draws_x: bool = False, segment: bool = False) -> Needs:
    """Refuse a case that cannot fit, before anything is drawn, written or launched.

    Args:
        rows_per_pe: received rows per PE when the routing is known; default: the
            pes*bs*topk slots spread evenly (the total is what the memory and disk need).
        draws_x: the case is still to be made in this process, so x (T [pes, bs, h]) and
            one rank's arrays must fit in memory too.
        segment: the segment variant's window (docs/variants.md#3-extra-memory-and-steps).

    Raises:
        CapacityError: more PEs than the twin can start here (:func:`check_twin_pes`), or /dev/shm
            (twin), memory or the work folder's disk is too small; the message names the resource,
            the bytes needed and the bytes available.
    """
    if target == "cpu":
        check_twin_pes(spec)
    if rows_per_pe is None:
        rows_per_pe = [spec.bs * spec.topk] * spec.pes
    n = needs(spec, rows_per_pe, segment)
    if draws_x:
        x_bytes = spec.pes * spec.bs * spec.row_bytes
        mem = mem_available()
        if x_bytes > mem:
            raise CapacityError(f"{spec.case_id}: making the case needs x of {x_bytes} bytes "
                                f"({x_bytes / GiB:.2f} GiB: pes*bs*h*{spec.itemsize}) in memory, {mem} bytes "
                                f"({mem / GiB:.2f} GiB) available", parameter="spec", value=spec.case_id, resource="x",
                                needed=x_bytes, available=mem)
    if target == "cpu":
        shm_free = shutil.disk_usage("/dev/shm").free
        if n.shm > shm_free:
            raise CapacityError(f"{spec.case_id}: the twin's symmetric heaps need {n.shm} bytes "
                                f"({n.shm / GiB:.2f} GiB: {spec.pes} PEs x {twin_heap_bytes(spec, segment)} bytes) in /dev/shm, "
                                f"{shm_free} bytes ({shm_free / GiB:.2f} GiB) available", parameter="spec",
                                value=spec.case_id, resource="shm", needed=n.shm, available=shm_free)
        mem = mem_available()
        if n.shm + n.memory > mem:
            raise CapacityError(f"{spec.case_id}: the PEs need {n.shm + n.memory} bytes "
                                f"({(n.shm + n.memory) / GiB:.2f} GiB) of memory, {mem} bytes ({mem / GiB:.2f} GiB) "
                                f"available", parameter="spec", value=spec.case_id, resource="memory",
                                needed=n.shm + n.memory, available=mem)
    folder = Path(work_dir) if work_dir is not None else Path(os.environ.get("TMPDIR", "/tmp"))
    while not folder.exists():
        folder = folder.parent
    disk_free = shutil.disk_usage(folder).free
    if n.disk > disk_free:
        raise CapacityError(f"{spec.case_id}: the case files need {n.disk} bytes ({n.disk / GiB:.2f} GiB) in "
                            f"{folder}, {disk_free} bytes ({disk_free / GiB:.2f} GiB) available", parameter="work_dir",
                            value=work_dir, resource="disk", needed=n.disk, available=disk_free)
    return n
