"""``combine-lab notebooks --cluster``: each notebook with each of its parameter sets one task on dask.distributed.

What travels is the notebook's name and its parameters (checked here first, converted to their
declared types: :func:`combine_lab.lab.notebooks.param_sets`); the worker executes its own copy
of the notebook (its checkout's ``notebooks/``) with papermill into a temporary folder and returns
every file the run left there (the executed notebook, figures, record, CSVs), which land in the
driver's output folder (a set's in its own subfolder ``<stem>.<set>``, as a serial run puts them),
each whole or not at all. docs/lab.md#8-beyond-one-machine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

from ..cluster.tasks import TOKEN_VAR
from ..folders import own_folders, usable_folder
from ..formats.files import write_atomic
from .notebooks import KERNEL_NAME, NotebookRun, find_notebooks, param_sets, run_notebooks
from .records import command_output_dir

__all__ = ["run_notebooks_on_cluster", "task_pes"]

#: PE slots a notebook task asks for when its parameters name no PE count (the notebooks' own
#: cases run on 2 PEs by default).
DEFAULT_PES = 2


def task_pes(params: dict) -> int:
    """The PE slots a notebook task asks for: the largest PE count its parameters give (``pes``,
    ``pes_list``, ``skew_pes``; ``model_pes`` is only priced), else :data:`DEFAULT_PES`."""
    counts = [DEFAULT_PES]
    for name, value in params.items():
        if name in ("pes", "pes_list", "skew_pes"):
            counts += [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    return max(counts)


def _notebook_task(work) -> tuple[NotebookRun, dict[str, bytes]]:
    """On a worker: one notebook run headless into a temporary folder; its NotebookRun and the
    files it left there (name -> bytes). The folder is removed after."""
    stem, params, kernel_name, timeout_s, token = work
    # the kernel and the PEs it starts inherit the run's token: what Ctrl-C on the driver kills them by
    os.environ[TOKEN_VAR] = token
    out = Path(tempfile.mkdtemp(prefix="combine_lab_notebook_"))
    try:
        run = run_notebooks(out, {stem: params}, [stem], kernel_name=kernel_name, timeout_s=timeout_s)[0]
        files = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and not p.name.startswith(".")}
        return run, files
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_notebooks_on_cluster(cluster, out_dir: str | os.PathLike | None = None, params: dict | None = None,
                             only: list[str] | None = None, kernel_name: str = KERNEL_NAME, timeout_s: float = 600.0,
                             log=None, out_name: str = "out_dir") -> list[NotebookRun]:
    """:func:`combine_lab.lab.notebooks.run_notebooks` with each notebook a task on ``cluster``
    (text for :func:`combine_lab.cluster.connect`, or a connected Cluster), one task per notebook and
    parameter set (:func:`combine_lab.lab.notebooks.param_sets`), asking for :func:`task_pes` PE
    slots; the executed copies, figures and records land in ``out_dir`` (a set's in
    ``out_dir/<stem>.<set>``) as each task ends. Returns one NotebookRun per notebook and set, in
    that order, its paths in the driver's folders.

    Raises: LabError for bad names or parameters and ParameterError for an unusable output folder,
    before anything is sent; ClusterError when the cluster cannot take the run.
    """
    from ..cluster import Cluster, connect, map_tasks
    notebooks = find_notebooks(None, only)
    sets = param_sets(params or {}, notebooks)  # checked here: nothing sent yet
    out = usable_folder(Path(out_dir) if out_dir is not None else command_output_dir(), out_name).resolve()
    pes = [task_pes(ps.params) for ps in sets]
    own = not isinstance(cluster, Cluster)
    cl = connect(cluster, pes=max(pes)) if own else cluster
    runs: dict[int, NotebookRun] = {}
    try:
        with own_folders([out], out_name):
            token = uuid.uuid4().hex
            work = [(ps.notebook.stem, ps.params, kernel_name, timeout_s, token) for ps in sets]
            keys = [f"combine_lab-notebook-{ps.notebook.stem}{'.' + ps.set if ps.set else ''}-{i}"
                    for i, ps in enumerate(sets)]
            for d in map_tasks(cl, _notebook_task, work, keys=keys, pes=pes, progress="notebooks", unit="notebook",
                               token=token):
                ps = sets[d.index]
                nb, here = ps.notebook, ps.folder(out)
                if d.error is not None or d.fault:
                    why = d.fault or f"{type(d.error).__name__}: {str(d.error).splitlines()[0] if str(d.error) else ''}"
                    run = NotebookRun(nb.stem, here / nb.name, 0.0, False, why, ps.params, set=ps.set)
                else:
                    run, files = d.value
                    here.mkdir(exist_ok=True)
                    for name, data in files.items():
                        write_atomic(here / name, data)
                    run.output = here / run.output.name
                    run.figures = [here / Path(p).name for p in run.figures]
                    run.set = ps.set
                    run.parameters = {**run.parameters, "output_dir": str(here)}
                runs[d.index] = run
                if log is not None:
                    log(f"{run.label}: {'ok' if run.ok else 'FAILED'} in {run.seconds:.1f} s -> {run.output}"
                        + (f"\n  {run.error}" if run.error else ""))
    finally:
        if own:
            cl.close()
    return [runs[i] for i in sorted(runs)]
