"""Grids and notebook batches as tasks on dask.distributed (``--cluster local[:N] | tcp://HOST:PORT``).

    with connect("local:2", pes=4) as cluster:          # or "tcp://10.0.0.5:8786": a running scheduler
        for o in execute(runs, cluster, progress="combine"):   # harness Runs in, harness Outcomes out
            print(o.row.case_id, o.row.variant, o.row.check)

One task is one case: its spec (with its seed) and the Runs on it (variants, settings, repeats).
The worker makes the case files from the spec (the same seed gives the same files), runs it through
:func:`combine_lab.harness.execute` and returns the outcomes; the driver writes the perf CSVs and
sidecars into its own output folders, in case order, through the one writer the serial run uses.
A task asks for as many ``PE`` slots (dask worker resources) as the case has PEs. What travels,
where outputs land and how to start workers: docs/lab.md#8-beyond-one-machine.

:mod:`.connect` finds or starts the cluster and refuses workers that cannot run the lab;
:mod:`.tasks` submits, streams and cleans up.
"""

from .connect import Cluster, ClusterError, connect, parse_cluster
from .tasks import execute, map_tasks

__all__ = ["Cluster", "ClusterError", "connect", "parse_cluster", "execute", "map_tasks"]
