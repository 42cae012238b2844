"""The cluster a run's tasks go to: a LocalCluster started here, or a dask scheduler already running.

``--cluster`` takes ``local`` (one worker per two CPUs, at most 4), ``local:N`` (N workers) or
``tcp://HOST:PORT`` (the address ``dask scheduler`` prints). Before anything is submitted every
worker is asked to import the lab and find its toolchain (:func:`probe_text`), and one worker at
least must offer as many ``PE`` slots (``dask worker --resources PE=<n>``) as the largest case has
PEs; otherwise the run is refused with the fix. docs/lab.md#8-beyond-one-machine.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass, field

from ..errors import CombineLabError, ParameterError

__all__ = ["Cluster", "ClusterError", "connect", "parse_cluster", "ALLOWED_FAILURES", "PROBE", "probe_text"]

#: A task whose worker dies is run once more elsewhere; a second death makes its row a failure
#: (dask's ``distributed.scheduler.allowed-failures``: set for a LocalCluster; a scheduler you start
#: reads it from its environment, ``DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1``).
ALLOWED_FAILURES = 1
#: Seconds to reach a scheduler and for its first worker to join.
CONNECT_TIMEOUT_S = 30.0
_FIX = "run `bash .ci/setup` there (the package, the lab's toolchain: g++, clang, cmake), then restart the worker"

#: What every worker runs before the first task: the lab imported, its version and where from, and
#: the tools a twin build needs. Sent as source (a worker without the lab cannot unpickle a function
#: of it), executed there: a dict ``{"ok", "version", "file", "error"}``.
PROBE = """
def combine_lab_probe():
    import shutil, sys
    try:
        import combine_lab, combine_lab.harness
    except Exception as e:
        return {"ok": False, "error": f"import combine_lab failed on {sys.executable}: {type(e).__name__}: {e}"}
    missing = [t for t in ("cmake", "g++", "clang++") if shutil.which(t) is None]
    if missing:
        return {"ok": False, "error": f"{', '.join(missing)} not on PATH (the twin is built on the worker)"}
    return {"ok": True, "version": combine_lab.__version__, "file": combine_lab.__file__, "error": ""}
"""


class ClusterError(CombineLabError):
    """The cluster cannot take this run: no scheduler at the address, no worker, a worker without
    the lab's setup or without PE slots for the largest case, or the scheduler went away. The
    message names the address or worker and the fix."""


def parse_cluster(text: str) -> tuple[str, int | str]:
    """``--cluster`` as ("local", workers) or ("tcp", address).

    Raises:
        ParameterError: neither ``local``, ``local:N`` (N >= 1) nor ``tcp://HOST:PORT``.
    """
    text = str(text).strip()
    if text == "local":
        return "local", max(1, min(4, (os.cpu_count() or 2) // 2))
    m = re.fullmatch(r"local:(\d+)", text)
    if m and int(m.group(1)) >= 1:
        return "local", int(m.group(1))
    m = re.fullmatch(r"tcp://([^\s:/]+):(\d+)", text)
    if m and 1 <= int(m.group(2)) <= 65535:
        return "tcp", text
    raise ParameterError(f"--cluster={text!r}: must be local, local:N (N >= 1 workers here) or tcp://HOST:PORT "
                         "(a dask scheduler's address)", parameter="cluster", value=text)


def probe_text() -> dict:
    """:data:`PROBE` run here (what a worker answers); for tests and ``combine-lab doctor``."""
    space: dict = {"__name__": "combine_lab_worker_probe"}
    exec(PROBE, space)
    return space["combine_lab_probe"]()


@dataclass
class Cluster:
    """A connected cluster: ``client`` (distributed.Client), ``address`` (the scheduler's),
    ``local`` (the LocalCluster this process started, else None), ``workers`` (address -> PE slots)
    and ``dashboard`` (its link, '' without one). Close it (or use it as a context manager): a
    LocalCluster stops with it, and what its workers' PEs left in /dev/shm is removed."""

    client: object
    address: str
    local: object = None
    workers: dict = field(default_factory=dict)
    dashboard: str = ""
    quieted: dict = field(default_factory=dict)  # logger -> level before: restored by close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Disconnect; stop a LocalCluster. What launchers that died (a killed worker) left on each
        worker's machine (/dev/shm segments, case folders) is removed first, and on this machine after
        a LocalCluster stops (:func:`combine_lab.run.launch.remove_orphans`)."""
        from ..run.launch import remove_orphans
        try:
            if self.client.status == "running":
                self.client.run(remove_orphans, on_error="ignore")
            self.client.close(timeout=10)
        except Exception:  # a scheduler already gone: nothing to close
            pass
        for name, level in self.quieted.items():
            logging.getLogger(name).setLevel(level)
        self.quieted = {}
        if self.local is not None:
            self.local.close(timeout=30)
            remove_orphans()  # a worker killed mid-case left its session's segment


def connect(text: str, pes: int = 2, log=None, timeout_s: float = CONNECT_TIMEOUT_S) -> Cluster:
    """Start or reach the cluster ``text`` names (:func:`parse_cluster`) and check that it can run a
    case of ``pes`` PEs; print the dashboard link through ``log`` (default: stderr). ``timeout_s``:
    how long to wait for the scheduler and its first worker, and for the scheduler to come back
    when it goes away mid-run (then the run ends: docs/lab.md#8-beyond-one-machine).

    A LocalCluster (``local[:N]``) listens on 127.0.0.1 only; each of its N worker processes gets
    ``max(pes, cpus // N)`` PE slots and as many threads (one case per slot budget at once).

    Raises:
        ParameterError: a bad ``text``.
        ClusterError: no scheduler answers at the address, no worker joins within
            :data:`CONNECT_TIMEOUT_S`, a worker cannot import the lab or lacks its toolchain, or no
            worker has ``pes`` PE slots; each with the fix.
    """
    kind, where = parse_cluster(text)
    log = log or (lambda line: print(line, file=sys.stderr))
    import dask
    from distributed import Client, LocalCluster
    dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES})
    local = None
    if kind == "local":
        slots = max(1, int(pes), (os.cpu_count() or 2) // int(where))
        local = LocalCluster(n_workers=int(where), threads_per_worker=slots, processes=True, host="127.0.0.1",
                             dashboard_address="127.0.0.1:0", resources={"PE": slots},
                             silence_logs=logging.ERROR)
        client = Client(local)
        address = local.scheduler_address
    else:
        address = where
        try:
            client = Client(address, timeout=timeout_s)
        except (OSError, TimeoutError) as e:
            raise ClusterError(f"--cluster {address}: no dask scheduler answers there within {timeout_s:g} s "
                               f"({type(e).__name__}); start one with `dask scheduler` and workers with "
                               f"`dask worker {address} --resources PE=<n>`", parameter="cluster",
                               value=address) from None
    # the client's own tracebacks when the scheduler goes away say less than the line the run prints
    quiet = {name: logging.getLogger(name).level for name in ("distributed.client", "distributed.utils")}
    for name in quiet:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    cluster = Cluster(client, address, local, quieted=quiet)
    try:
        _check_workers(cluster, int(pes), timeout_s)
    except OSError as e:  # the scheduler stopped answering while the workers were asked
        cluster.close()
        raise ClusterError(f"--cluster {address}: the dask scheduler stopped answering ({e}); is it still "
                           "running?", parameter="cluster", value=address) from None
    except BaseException:
        cluster.close()
        raise
    cluster.dashboard = client.dashboard_link if _has_dashboard(client) else ""
    log(f"combine-lab: cluster {address}: {len(cluster.workers)} worker(s), PE slots "
        f"{', '.join(str(v) for v in cluster.workers.values())}"
        + (f"; dashboard {cluster.dashboard}" if cluster.dashboard else "; no dashboard (pip install bokeh)"))
    return cluster


def _has_dashboard(client) -> bool:
    try:
        return "dashboard" in client.scheduler_info().get("services", {})
    except Exception:
        return False


def _check_workers(cluster: Cluster, pes: int, timeout_s: float) -> None:
    """Every worker imports the lab (one version) and one has ``pes`` PE slots, or ClusterError."""
    client = cluster.client
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError:
        raise ClusterError(f"--cluster {cluster.address}: no worker joined within {timeout_s:g} s; start one "
                           f"with `dask worker {cluster.address} --resources PE={pes}`", parameter="cluster",
                           value=cluster.address) from None
    space: dict = {"__name__": "combine_lab_worker_probe"}
    exec(PROBE, space)
    answers = client.run(space["combine_lab_probe"], on_error="return")
    from .. import __version__
    bad = []
    for worker, a in sorted(answers.items()):
        if isinstance(a, BaseException):
            bad.append(f"{worker}: {type(a).__name__}: {a}")
        elif not a["ok"]:
            bad.append(f"{worker}: {a['error']}")
        elif a["version"] != __version__:
            bad.append(f"{worker}: combine_lab {a['version']} ({a['file']}), this driver runs {__version__}")
    if bad:
        raise ClusterError(f"--cluster {cluster.address}: {len(bad)} worker(s) cannot run the lab: {'; '.join(bad)}; "
                           f"{_FIX}", parameter="cluster", value=cluster.address)
    info = client.scheduler_info()["workers"]
    cluster.workers = {w: int(i.get("resources", {}).get("PE", 0)) for w, i in sorted(info.items())}
    if max(cluster.workers.values(), default=0) < pes:
        raise ClusterError(f"--cluster {cluster.address}: no worker has {pes} PE slots for the largest case (PE slots "
                           f"per worker: {cluster.workers}); start workers with `dask worker {cluster.address} "
                           f"--resources PE={pes}` (or more)", parameter="cluster", value=cluster.address)
