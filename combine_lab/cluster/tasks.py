"""Tasks on a cluster: submit, stream as they finish, survive a dead worker, clean up on Ctrl-C.

:func:`map_tasks` is the one loop (one task per item, ``PE`` slots each); :func:`execute` puts the
harness's Runs on it, one task per case. What a fault becomes (docs/lab.md#8-beyond-one-machine):

- a worker that dies mid-task: dask runs the task once more on another worker
  (:data:`~combine_lab.cluster.connect.ALLOWED_FAILURES`); a second death makes the case's rows
  ERROR, naming the last worker;
- the scheduler going away: the cases that finished keep their rows, the others get ERROR rows
  saying so, and a line on stderr says what happened;
- Ctrl-C (or an error of the lab in a task): every task is cancelled and every PE process this run
  started on any worker is killed (its launcher then removes its /dev/shm segment and case folder),
  before the interrupt goes on.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from ..case.spec import CaseSpec
from ..case.case import Case
from ..errors import ParameterError
from ..formats.sidecars import write_run_files
from ..harness import BASELINE, Outcome, Run, _groups, _not_run, progress_bar
from ..harness import execute as execute_here
from ..results.rows import ERROR
from ..run.runner import RunResult
from .connect import Cluster

__all__ = ["Done", "map_tasks", "execute", "TOKEN_VAR", "stop_pes", "pes_left"]

#: Set in every PE's environment by the tasks of one run: what lets Ctrl-C find them on a worker.
TOKEN_VAR = "COMBINE_LAB_CLUSTER_RUN"
#: Seconds the scheduler may be unreachable before the run says it went away.
GONE_S = 10.0
#: Seconds to wait for a cancelled run's PEs to be gone from every worker.
STOP_S = 15.0


@dataclass
class Done:
    """One finished task: ``index`` into the items, ``value`` (what the task returned), ``error``
    (what it raised: the lab's error, re-raised by the caller) or ``fault`` (why there is neither:
    its workers died, or the scheduler went away), ``worker`` (where it last ran, when known)."""

    index: int
    value: object = None
    error: BaseException | None = None
    fault: str = ""
    worker: str = ""


def stop_pes(token: str) -> int:
    """On a worker: kill the process group of every PE (a child process of this worker) whose
    environment carries ``token`` (a notebook task's kernel too); returns how many. Their launcher (the task's thread) sees them
    die and removes its session's /dev/shm segment and case folder, as after a failed launch."""
    import psutil
    n = 0
    for p in psutil.Process().children(recursive=True):
        try:
            if p.environ().get(TOKEN_VAR) != token:
                continue
            try:
                os.killpg(p.pid, signal.SIGKILL)  # a PE leads its own session (launch_pes)
            except ProcessLookupError:  # not a group leader: a notebook's kernel
                p.kill()
            n += 1
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return n


def pes_left(token: str) -> list[int]:
    """On a worker: the pids of PE processes of run ``token`` still alive (none once it stopped)."""
    import psutil
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.environ().get(TOKEN_VAR) == token and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def map_tasks(cluster: Cluster, fn: Callable, items: Sequence, *, keys: Sequence[str], pes: Sequence[int],
              progress: str | None = None, unit: str = "case", token: str | None = None,
              log: Callable[[str], None] | None = None) -> Iterator[Done]:
    """Run ``fn(item)`` for every item as a task asking for ``pes[i]`` PE slots, named ``keys[i]``
    (what the dashboard and the workers' logs show); yield a :class:`Done` per task as each ends,
    with a progress bar labelled ``progress`` (None: none).

    ``token``: the run's :data:`TOKEN_VAR` value in its PEs' environment: when the loop is left
    early (Ctrl-C, an error, the caller stops iterating) the remaining tasks are cancelled and those
    PEs killed on every worker. ``log``: where the scheduler's loss is said (default stderr).
    """
    from asyncio import CancelledError
    from distributed import KilledWorker, wait
    from distributed.client import FuturesCancelledError
    client = cluster.client
    log = log or (lambda line: print(line, file=sys.stderr))
    # the bar first: making it may import IPython (seconds), and a Ctrl-C then must find nothing sent yet
    bar = progress_bar(range(len(items)), progress, disable=progress is None, unit=unit)
    futures: list = []
    away_since = None
    finished = False
    try:
        for item, key, p in zip(items, keys, pes):
            futures.append(client.submit(fn, item, key=key, resources={"PE": int(p)} if p else None, pure=False))
        index = {f.key: i for i, f in enumerate(futures)}
        pending = set(futures)
        while pending:
            try:
                done, pending = wait(pending, timeout=1.0, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            except (FuturesCancelledError, CancelledError, OSError):  # the client gave up on the scheduler
                break
            lost = {f for f in done if f.status == "cancelled"}  # cancelled by no one here: the scheduler is gone
            pending |= lost
            done -= lost
            if not done and (lost or client.status != "running"):
                away_since = away_since or time.monotonic()
                if time.monotonic() - away_since > GONE_S or client.status == "closed":
                    break
                time.sleep(0.5)
                continue
            away_since = None
            for f in done:
                bar.update(1)
                if f.status == "finished":
                    yield Done(index[f.key], value=f.result())
                    continue
                exc = f.exception()
                if isinstance(exc, KilledWorker):
                    worker = exc.last_worker.address
                    yield Done(index[f.key], worker=worker,
                               fault=f"worker {worker} died running this case, and so did the worker it was "
                                     f"rescheduled to ({exc.allowed_failures + 1} workers in all); see their logs")
                else:
                    yield Done(index[f.key], error=exc)
        if pending:  # the scheduler went away: the tasks not finished get rows that say so
            log(f"combine-lab: error: the dask scheduler at {cluster.address} went away (the client could not "
                f"reconnect); {len(futures) - len(pending)} of {len(futures)} tasks had finished and keep their "
                "rows, the rest are ERROR rows")
            for f in sorted(pending, key=lambda f: index[f.key]):
                yield Done(index[f.key], fault=f"the dask scheduler at {cluster.address} went away before this "
                                               "task finished")
            pending = set()
        finished = True
    finally:
        bar.close()
        if not finished:
            _cancel(cluster, futures, token)


def _cancel(cluster: Cluster, futures: list, token: str | None) -> None:
    """Cancel ``futures`` and kill the PEs of run ``token`` on every worker, waiting until none is left."""
    client = cluster.client
    try:
        client.cancel(futures, force=True)
        if token is None:
            return
        deadline = time.monotonic() + STOP_S
        while time.monotonic() < deadline:
            client.run(stop_pes, token, on_error="ignore")
            left = {w: p for w, p in client.run(pes_left, token, on_error="ignore").items() if p}
            if not left:
                return
            time.sleep(0.2)
        print(f"combine-lab: PEs of this run still alive after {STOP_S:g} s: {left}", file=sys.stderr)
    except Exception as e:  # the scheduler is gone too: each worker's next run removes what is left
        print(f"combine-lab: could not reach the workers to stop this run's PEs ({type(e).__name__}: {e}); "
              "each PE dies with its worker's task", file=sys.stderr)


def _run_case(runs: list[Run], on_error: str) -> list[tuple[int, Outcome]]:
    """On a worker: one case's Runs through the harness (the case files made here from the spec and
    seed, in a temporary folder removed after); returns (index into ``runs``, Outcome) in the order
    the harness yields them, x_out left out (checked here; it is the case's size)."""
    log = logging.getLogger("distributed.worker")
    spec = runs[0].case
    labels = ", ".join(dict.fromkeys(r.label for r in runs))
    log.info("combine_lab: case %s (%s) started", spec.case_id, labels)
    where = {id(r): i for i, r in enumerate(runs)}
    out = []
    for o in execute_here(runs, on_error=on_error):
        if isinstance(o.result, RunResult):
            o.result = dataclasses.replace(o.result, x_out=[])
        out.append((where[id(o.run)], o))
    log.info("combine_lab: case %s finished: %s", spec.case_id,
             ", ".join(f"{o.run.label} {o.row.check}" for _, o in out))
    return out


def _case_spec(run: Run) -> CaseSpec:
    if isinstance(run.case, CaseSpec):
        return run.case
    if isinstance(run.case, Case) and run.case.spec.routing != "external":
        return run.case.spec
    raise ParameterError(f"case={run.case!r}: a cluster run takes CaseSpecs (what travels is the spec and its seed; "
                         "each worker makes the case files), not case files", parameter="case", value=run.case)


def execute(runs: Iterable[Run], cluster: Cluster, *, progress: str | None = None,
            outputs: Mapping[str, str | os.PathLike] | None = None, on_error: str = "raise", ordered: bool = True,
            models_here: bool = True) -> Iterator[Outcome]:
    """:func:`combine_lab.harness.execute` with each case a task on ``cluster``: the same Outcomes
    (the same rows and checks; x_out stays on the worker), the same files in ``outputs`` (written
    here, in case order, by :func:`combine_lab.formats.sidecars.write_run_files`).

    Args:
        runs: harness Runs on CaseSpecs (or Cases drawn from one); checked before anything is sent.
        cluster: from :func:`combine_lab.cluster.connect`.
        progress: the progress bar's label (one step per case as its task ends), None for none.
        outputs: label -> the driver's folder for that run's perf CSVs and sidecars.
        on_error: as the harness's: ``"raise"`` re-raises a task's LaunchError here (every other
            task cancelled first), ``"row"`` makes it an ERROR row. A dead worker (twice) or a lost
            scheduler always gives ERROR rows.
        ordered: yield in the order of the runs (a serial run's order); False: as tasks finish.
        models_here: runs that only price a timing model (cheap) are priced in this process.

    Raises:
        ParameterError: a Run that cannot be made, or cannot travel (case files, a prebuilt
            ``binary``, an ``on_launch`` callback), before anything is sent.
    """
    runs = list(runs)
    if on_error not in ("raise", "row"):
        raise ParameterError(f"on_error={on_error!r}: 'raise' or 'row'",
                             parameter="on_error", value=on_error, allowed="raise or row")
    for r in runs:
        r.check()
    if models_here and all(r.modelled and r.kernel is None for r in runs):
        yield from execute_here(runs, progress=progress, outputs=outputs, on_error=on_error)
        return
    groups = _groups(runs)
    specs = []
    for g in groups:
        specs.append(_case_spec(g[0]))
        for r in g:
            for name in ("binary", "on_launch"):
                if getattr(r, name) is not None:
                    raise ParameterError(f"{name}={getattr(r, name)!r}: stays on this machine; a cluster run builds "
                                         "on each worker and reports when its task ends", parameter=name,
                                         value=getattr(r, name))
    token = uuid.uuid4().hex
    shipped = [[dataclasses.replace(r, case=s, env={**(r.env or {}), TOKEN_VAR: token}) for r in g]
               for g, s in zip(groups, specs)]
    keys = [f"combine_lab-{s.case_id}-{s.routing}-{i}-{token[:8]}" for i, s in enumerate(specs)]
    results: dict[int, list[Outcome]] = {}
    nxt = 0
    work = [(g, on_error) for g in shipped]
    for d in map_tasks(cluster, _run_task, work, keys=keys, pes=[s.pes for s in specs], progress=progress,
                       token=token):
        if d.error is not None:
            raise d.error
        group = groups[d.index]
        if d.fault:
            outs = [_not_run(r, specs[d.index], ERROR, d.fault, 0) for r in group]
        else:
            outs = [dataclasses.replace(o, run=group[i]) for i, o in d.value]
        results[d.index] = outs
        if not ordered:
            yield from outs
        while nxt in results:  # files in case order, as a serial run appends them
            for o in results[nxt]:
                _write(o, outputs)
            if ordered:
                yield from results[nxt]
            del results[nxt]
            nxt += 1


def _run_task(work) -> list[tuple[int, Outcome]]:
    runs, on_error = work
    return _run_case(runs, on_error)


def _write(o: Outcome, outputs) -> None:
    """The files of one outcome, as the harness's serial path writes them (not for the baseline)."""
    if outputs is None or o.result is None or o.run.variant == BASELINE or o.run.label not in outputs:
        return
    write_run_files(outputs[o.run.label], o.result, o.perf if o.run.perf else None)
