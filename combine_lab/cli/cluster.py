"""``--cluster local[:N] | tcp://HOST:PORT`` on ``run`` and ``compare``: the cases as tasks on dask.distributed.

    combine-lab compare --pes-list 2,4 --bs-list 8,16 -h 64 --cluster local:2
    combine-lab compare --pes-list 2,4 --bs-list 8,16 -h 64 --cluster tcp://10.0.0.5:8786

Each case (its spec and seed, every variant and repeat on it) is one task asking for as many PE
slots as it has PEs (:mod:`combine_lab.cluster`); the table, the summary and the perf files are
the serial run's (docs/lab.md#8-beyond-one-machine).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ParameterError

#: The value of ``--cluster`` given without one: a LocalCluster on this machine.
LOCAL = "local"


def add_cluster_flag(group, what: str = "case", slots: str = "its -pes PE slots") -> None:
    """Add ``--cluster [local[:N] | tcp://HOST:PORT]`` to an argparse group; ``what`` is one task."""
    group.add_argument("--cluster", nargs="?", const=LOCAL, default=None, metavar="local[:N]|tcp://HOST:PORT",
                       help=f"run each {what} as a task on dask.distributed (pip install -e .[cluster]): alone or "
                            "local: a LocalCluster here (local:N: N workers); tcp://HOST:PORT: a running `dask "
                            f"scheduler` whose workers were started with --resources PE=<n>; each {what} asks for "
                            f"{slots} (docs/lab.md#8-beyond-one-machine)")


def executor(a: argparse.Namespace, pes: int, default_ipport: str):
    """``harness.execute`` for the flags ``a``, or with ``--cluster`` the same on the cluster it names,
    connected now (refused now, before any folder is touched, when it cannot run a ``pes``-PE case).

    Raises:
        ParameterError: ``--cluster`` with ``--work-dir`` (case files are made on each worker) or
            without the cluster extra installed.
        ClusterError: the cluster cannot take the run (:func:`combine_lab.cluster.connect`).
    """
    from ..harness import execute
    text = getattr(a, "cluster", None)
    if text is None:
        return execute
    if getattr(a, "clock", "wall") != "wall" and not getattr(a, "kernel_source", None):
        print(f"combine-lab: note: --cluster {text} not used: a timing model prices a case in milliseconds, here "
              "(nothing to send)", file=sys.stderr)
        return execute
    if a.work_dir is not None:
        raise ParameterError(f"--work-dir={a.work_dir}: with --cluster each worker makes its cases' files in its own "
                             "temporary folder (what travels is the spec and seed)", parameter="cluster", value=text)
    if a.ipport != default_ipport:
        print(f"combine-lab: note: -ipport {a.ipport} has no effect with --cluster: each launch takes a free "
              "127.0.0.1 port on its worker", file=sys.stderr)
    try:
        from ..cluster import connect, execute as on_cluster
    except ModuleNotFoundError as e:
        raise ParameterError(f"--cluster={text}: needs dask.distributed ({e.name} is not installed): "
                             "pip install -e .[cluster]", parameter="cluster", value=text) from None
    cluster = connect(text, pes=pes)

    def run_all(runs, *, progress=None, ipport=None, work_dir=None, outputs=None):
        try:
            yield from on_cluster(runs, cluster, progress=progress, outputs=outputs)
        finally:
            cluster.close()
    return run_all
