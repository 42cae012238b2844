"""Run the lab notebooks headless with papermill (what ``combine-lab notebooks`` does).

Each notebook of ``notebooks/`` (``NN_name.ipynb``) is executed top to bottom on the lab's
Jupyter kernel (:data:`KERNEL_NAME`, this environment's Python, which ``.ci/setup`` registers
in the environment, not for the user) with ``MPLBACKEND=Agg``; the executed copies, the figures
(PNG) and what each notebook records (``<name>.record.json``, CSVs) are left in the
output folder. The params file maps notebook names to their parameters; top-level keys
that are not notebook names go to every notebook that declares them::

    loops: 3                  # every notebook with a `loops` parameter
    03_sweep:                 # or "sweep"
      bs_list: [8, 16]
      routings: [uniform, "zipf:1.2"]

A notebook's entry may instead be a list of parameter sets: the notebook runs once per set, each
run in its own folder ``<out>/<stem>.<set>/`` (:func:`param_sets`)::

    03_sweep:
      - {set_name: small, bs_list: [8]}
      - {bs_list: [64, 128]}  # named set2: its place in the list
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LabError, ParameterError
from ..folders import own_folders, usable_folder
from ..formats.files import PART_MARK, write_failed
from ..values import convert
from .nb_imports import lean_jsonschema
from .records import RECORD_SUFFIX, command_output_dir

__all__ = ["NotebookRun", "notebook_dir", "find_notebooks", "load_params", "declared_parameters", "declared_types",
           "headless_defaults", "split_params", "param_sets", "ParamSet", "SET_KEY", "run_notebooks", "require_kernel", "KERNEL_NAME",
           "KERNEL_DISPLAY_NAME"]

#: The Jupyter kernel the notebooks name and run on: this environment's Python, registered in the
#: environment itself (``.ci/setup``: ``ipykernel install --sys-prefix``), so that no other Python's
#: ``python3`` kernel (a user-wide one) is picked up instead.
KERNEL_NAME = "combine-lab"
KERNEL_DISPLAY_NAME = "Python 3 (combine_lab)"
_NAME = re.compile(r"^(\d\d)_(.+)\.ipynb$")
#: The key of a parameter set (a list item of a notebook's params) that names the set.
SET_KEY = "set_name"
_SET_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class NotebookRun:
    """Outcome of one headless notebook: ``name`` (stem), ``output`` (executed copy),
    ``seconds`` (wall time), ``ok``, ``error`` (first line of the failure, '' when ok),
    ``parameters`` (what was injected), ``record`` (its ``.record.json``, {} if none),
    ``figures`` (the PNGs of the output folder it wrote or rewrote, sorted), ``set`` (the name of
    its parameter set, :func:`param_sets`; '' for a notebook given one)."""

    name: str
    output: Path
    seconds: float
    ok: bool
    error: str = ""
    parameters: dict = field(default_factory=dict)
    record: dict = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
    set: str = ""

    @property
    def label(self) -> str:
        """``name``, or ``name[set]`` for a run of one of several parameter sets."""
        return f"{self.name}[{self.set}]" if self.set else self.name


def require_kernel(name: str = KERNEL_NAME) -> str:
    """The Python that Jupyter kernel ``name`` runs (its kernel.json ``argv[0]``).

    Raises LabError, with the command that registers it, when no kernel of that name is found on
    Jupyter's paths or its Python does not exist (registered from an environment since removed).
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    fix = (f"bash .ci/setup registers it, or: {Path(sys.executable).name} -m ipykernel install --sys-prefix "
           f"--name {name} --display-name '{KERNEL_DISPLAY_NAME}'")
    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        raise LabError(f"Jupyter kernel {name!r} is not registered for this environment; {fix}",
                       parameter="kernel_name", value=name) from None
    exe = spec.argv[0] if spec.argv else ""
    if os.path.isabs(exe) and not os.path.exists(exe):
        raise LabError(f"Jupyter kernel {name!r} ({spec.resource_dir}) runs {exe}, which does not exist; {fix}",
                       parameter="kernel_name", value=name)
    return exe


def notebook_dir() -> Path:
    """``$COMBINE_LAB_NOTEBOOKS`` if set, else ``<repository>/notebooks``."""
    env = os.environ.get("COMBINE_LAB_NOTEBOOKS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "notebooks"


def find_notebooks(folder: str | os.PathLike | None = None, only: list[str] | None = None) -> list[Path]:
    """The numbered notebooks ``NN_name.ipynb`` of ``folder`` (default :func:`notebook_dir`), in order.

    ``only``: names to keep, each a stem (``03_sweep``) or the part after the number
    (``sweep``). Raises LabError when the folder holds none or a name matches none.
    """
    folder = Path(folder) if folder is not None else notebook_dir()
    found = sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb") if _NAME.match(p.name))
    if not found:
        raise LabError(f"{folder}: no notebooks NN_name.ipynb there (a source checkout has notebooks/)",
                       parameter="folder", value=folder)
    if only:
        keep = []
        for name in only:
            hits = [p for p in found if name in (p.stem, _NAME.match(p.name).group(2))]
            if not hits:
                raise LabError(f"--only {name!r}: no such notebook; have {[p.stem for p in found]}", parameter="only",
                               value=name, allowed=str([p.stem for p in found]))
            keep += [p for p in hits if p not in keep]
        found = sorted(keep)
    return found


def load_params(path: str | os.PathLike) -> dict:
    """Read a params file: JSON (``.json``) or YAML (``.yaml``/``.yml``; others: JSON, then YAML).

    Returns a dict. Raises LabError when the file is missing, unparsable or not a mapping.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise LabError(f"--params {path}: cannot read it ({e.strerror})", parameter="params", value=path) from None
    data = None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml
            try:
                data = json.loads(text) if path.suffix.lower() not in (".yaml", ".yml") else yaml.safe_load(text)
            except ValueError:
                data = yaml.safe_load(text)
    except Exception as e:  # json.JSONDecodeError, yaml.YAMLError
        raise LabError(f"--params {path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: "
                        f"{str(e).splitlines()[0]}", parameter="params", value=path) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LabError(f"--params {path}: must hold a mapping (name: value), not a {type(data).__name__}",
                       parameter="params", value=path)
    return data


def declared_parameters(nb: str | os.PathLike) -> list[str]:
    """The names a notebook declares in its ``parameters`` cell, in order, as papermill
    reads them (``papermill.inspect_notebook``)."""
    return list(declared_types(nb))


def declared_types(nb: str | os.PathLike) -> dict[str, str]:
    """Name -> declared type (the annotation's text, e.g. ``"int"``, ``"list[int]"``,
    ``"Optional[str]"``; ``"None"`` where a parameter has none) of a notebook's ``parameters``
    cell, in order, as papermill reads them (``papermill.inspect_notebook``)."""
    lean_jsonschema()
    import papermill
    return {name: p["inferred_type_name"] for name, p in papermill.inspect_notebook(str(nb)).items()}


_HEADLESS = re.compile(r"^(\w+)\s*:[^#]*#\s*headless:\s*(\S+)")


def headless_defaults(nb: str | os.PathLike) -> dict:
    """Parameters whose value differs when the notebook runs headless: a parameters-cell line
    ``name: type = default  # headless: VALUE`` (a Python literal, converted to the declared type).
    A person opening the notebook gets the default; :func:`run_notebooks` passes VALUE unless the
    params say otherwise (01_walkthrough: ``reveal_answers`` False for a reader, True headless).

    Raises LabError naming the notebook, the parameter and the text when VALUE is not a Python
    literal of the declared type."""
    import ast
    lean_jsonschema()
    import nbformat
    book = nbformat.read(str(nb), as_version=4)
    cell = next((c for c in book.cells if "parameters" in c.metadata.get("tags", [])), None)
    if cell is None:
        return {}
    types = declared_types(nb)
    out = {}
    for line in cell.source.splitlines():
        m = _HEADLESS.match(line)
        if m and m.group(1) in types:
            name, text = m.group(1), m.group(2).rstrip(";,")
            try:
                value = ast.literal_eval(text)
                out[name] = convert(value, types[name], name) if types[name] != "None" else value
            except (ValueError, SyntaxError, ParameterError) as e:
                raise LabError(f"{Path(nb).name}: parameter {name}: '# headless: {text}' is not a Python literal "
                               f"of its declared type {types[name]} ({e})", parameter="nb", value=text) from None
    return out


def _did_you_mean(name: str, allowed) -> str:
    import difflib
    close = difflib.get_close_matches(str(name), list(allowed), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _by_name(notebooks: list[Path]) -> dict[str, Path]:
    """Every name a params file may give a notebook (its stem, the part after the number)."""
    out = {}
    for nb in notebooks:
        out[nb.stem] = nb
        out[_NAME.match(nb.name).group(2)] = nb
    return out


def split_params(params: dict, notebooks: list[Path]) -> dict[str, dict]:
    """Parameters per notebook stem from a params mapping (see the module docstring), each
    converted to the type its notebook declares.

    Keys naming a notebook (stem or the part after the number) hold that notebook's
    parameters; other keys go to every notebook that declares them in its ``parameters``
    cell. Every name is checked against what papermill finds in the notebooks' parameters
    cells (:func:`declared_types`), so that a misspelt name is refused here rather than
    ignored by papermill with a warning; every value is converted to the declared type
    (:func:`combine_lab.values.convert`: ``"4096"`` -> 4096 for an ``int``, ``"False"`` -> False
    for a ``bool``), so that text from YAML is never used as a string in the notebook.

    Raises LabError (nothing has run yet) for a parameter a notebook does not declare::

        params: 'bs_lst' is not a parameter of notebook 03_sweep (did you mean 'bs_list'?); its parameters: ...

    for a value that is not of the declared type::

        params: notebook 02_tuning: parameter h='40x': expected int

    for a top-level key no notebook declares, or a notebook entry that is not a mapping.
    """
    by_name = _by_name(notebooks)
    types = {nb.stem: declared_types(nb) for nb in notebooks}
    declared = {stem: list(t) for stem, t in types.items()}
    out: dict[str, dict] = {nb.stem: {} for nb in notebooks}
    common = {}
    for key, value in params.items():
        if key in by_name:
            if not isinstance(value, dict):
                raise LabError(f"params[{key!r}]: must be a mapping of that notebook's parameters", parameter="params",
                               value=key)
            stem = by_name[key].stem
            for name in value:
                if name not in declared[stem]:
                    raise LabError(f"params: {name!r} is not a parameter of notebook {stem}"
                                    f"{_did_you_mean(name, declared[stem])}; its parameters: "
                                    f"{', '.join(declared[stem])}", parameter="params", value=name)
            out[stem].update(value)
        else:
            common[key] = value
    for key, value in common.items():
        takers = [stem for stem, names in declared.items() if key in names]
        if not takers:
            every = sorted(set().union(*declared.values()))
            raise LabError(f"params: {key!r} is not a parameter of any notebook run "
                            f"({', '.join(declared)}){_did_you_mean(key, every)}; their parameters: "
                            f"{', '.join(every)}", parameter="params", value=key)
        for stem in takers:
            out[stem].setdefault(key, value)
    for stem, values in out.items():
        for name, value in values.items():
            if types[stem][name] != "None":  # a parameter without a declared type goes as it is
                try:
                    values[name] = convert(value, types[stem][name], name)
                except ParameterError as e:
                    raise LabError(f"params: notebook {stem}: {e}", parameter="params", value=value,
                                   allowed=e.allowed) from None
    return out


@dataclass(frozen=True)
class ParamSet:
    """One run of :func:`param_sets`: ``notebook`` (its path), ``set`` (the set's name, '' when the
    notebook was given one mapping), ``params`` (checked and converted, as :func:`split_params`)."""

    notebook: Path
    set: str
    params: dict

    def folder(self, out: Path) -> Path:
        """Where this run's files go: ``out`` itself, or ``out/<stem>.<set>`` for a named set."""
        return out / f"{self.notebook.stem}.{self.set}" if self.set else out


def param_sets(params: dict, notebooks: list[Path]) -> list[ParamSet]:
    """The runs a params mapping asks for: one per notebook, or one per parameter set where the
    notebook's entry is a list of mappings (each a set: ``set_name`` names it, else ``set<N>``, N
    its place from 1); in notebook order, then set order. Each set is checked and converted as
    :func:`split_params` checks a mapping, with the top-level keys that notebook declares added.

    Raises LabError (nothing has run yet) for what :func:`split_params` refuses, and for an empty
    list, a set that is not a mapping, a set name that is not letters, digits, ``_`` or ``-``, a name
    used twice, or a notebook given twice (its stem and its short name) with a list among them::

        params['03_sweep'][1]: set_name 'a b': must be letters, digits, '_' or '-'
    """
    by_name = _by_name(notebooks)
    listed: dict[str, list[tuple[str, dict]]] = {}
    for key, value in params.items():
        if key not in by_name or not isinstance(value, list):
            continue
        stem = by_name[key].stem
        if [k for k in params if k != key and by_name.get(k) is by_name[key]]:
            raise LabError(f"params: notebook {stem} is given twice ({key!r} and its other name); give it once",
                           parameter="params", value=key)
        if not value:
            raise LabError(f"params[{key!r}]: an empty list of parameter sets; give at least one mapping",
                           parameter="params", value=key)
        sets = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise LabError(f"params[{key!r}][{i}]: a parameter set must be a mapping, not a {type(item).__name__}",
                               parameter="params", value=key)
            name = str(item.get(SET_KEY, f"set{i + 1}"))
            if not _SET_NAME.match(name):
                raise LabError(f"params[{key!r}][{i}]: {SET_KEY} {name!r}: must be letters, digits, '_' or '-'",
                               parameter="params", value=name)
            if name in [n for n, _ in sets]:
                raise LabError(f"params[{key!r}][{i}]: {SET_KEY} {name!r} is used twice; each set needs its own",
                               parameter="params", value=name)
            sets.append((name, {k: v for k, v in item.items() if k != SET_KEY}))
        listed[stem] = sets
    if not listed:
        return [ParamSet(nb, "", p) for nb, p in zip(notebooks, split_params(params, notebooks).values())]
    base = {k: v for k, v in params.items() if not (k in by_name and by_name[k].stem in listed)}
    single = split_params(base, notebooks)  # the notebooks given one mapping, and every top-level key
    out = []
    for nb in notebooks:
        if nb.stem not in listed:
            out.append(ParamSet(nb, "", single[nb.stem]))
            continue
        for name, values in listed[nb.stem]:
            out.append(ParamSet(nb, name, split_params({**base, nb.stem: values}, notebooks)[nb.stem]))
    return out


def _pngs(folder: Path) -> dict[Path, tuple[int, int]]:
    """PNG path -> (mtime in ns, size) of ``folder``: what a notebook wrote is what changed."""
    out = {}
    for path in folder.glob("*.png"):
        try:
            st = path.stat()
        except OSError:
            continue
        out[path] = (st.st_mtime_ns, st.st_size)
    return out


def _kernel_config(socket_dir: str):
    """Kernel manager settings for a headless run: the kernel talks to papermill over IPC
    sockets in ``socket_dir`` (a private folder), not TCP ports. Over TCP ipykernel warns
    at start that the traffic is unencrypted, once per notebook; over IPC there is nothing
    to warn about, and the kernel's other messages still reach stderr."""
    from traitlets.config import Config
    cfg = Config()
    cfg.KernelManager.transport = "ipc"
    cfg.KernelManager.ip = os.path.join(socket_dir, "kernel")
    return cfg


def _kernel_manager_class():
    """jupyter_client's kernel manager, except that shutting a kernel down does not interrupt it
    first. jupyter_client sends SIGINT before its shutdown request; when that lands while the kernel
    still handles a message, ipykernel logs "KeyboardInterrupt caught in kernel." to stderr, a
    harmless line that only some runs print. The shutdown request alone stops an idle kernel; a
    kernel stuck in a cell still gets SIGTERM, then SIGKILL (``shutdown_wait_time``), and a cell that
    passes ``timeout_s`` is still interrupted (nbclient calls ``interrupt_kernel``, unchanged)."""
    from jupyter_client.manager import AsyncKernelManager

    class QuietShutdownKernelManager(AsyncKernelManager):
        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return QuietShutdownKernelManager


#: How often a headless run writes its executed copy while it goes, seconds (papermill writes it at
#: every cell's start and end: 266 writes of up to 0.7 MB for the three notebooks, 1.4 s of 36 s here).
#: The last write, at the end or after a failure, is always made.
SAVE_EVERY_S = 1.0
_ENGINE = "combine-lab-nbclient"


def _engine_name() -> str:
    """papermill's nbclient engine, registered under :data:`_ENGINE`, except that it writes the executed
    copy at most every :data:`SAVE_EVERY_S` seconds while the notebook runs, and always at its end (a
    failed cell included): what papermill's own engine writes, less often."""
    lean_jsonschema()
    from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

    class ThrottledSaves(NotebookExecutionManager):
        final = False

        def save(self, **kwargs):
            if self.final or (self.now() - self.last_save_time).total_seconds() >= SAVE_EVERY_S:
                super().save(**kwargs)

        def notebook_complete(self, **kwargs):
            self.final = True  # its closing write: always
            super().notebook_complete(**kwargs)

    class Engine(NBClientEngine):
        @classmethod
        def execute_notebook(cls, nb, kernel_name, output_path=None, progress_bar=True, log_output=False,
                             autosave_cell_every=30, **kwargs):
            # papermill's Engine.execute_notebook with the manager above
            nb_man = ThrottledSaves(nb, output_path=output_path, progress_bar=progress_bar, log_output=log_output,
                                    autosave_cell_every=autosave_cell_every)
            nb_man.notebook_start()
            try:
                cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
            finally:
                nb_man.cleanup_pbar()
                nb_man.notebook_complete()
            return nb_man.nb

    papermill_engines.register(_ENGINE, Engine)
    return _ENGINE


def run_notebooks(out_dir: str | os.PathLike | None = None, params: dict | None = None,
                  only: list[str] | None = None, folder: str | os.PathLike | None = None,
                  kernel_name: str = KERNEL_NAME, timeout_s: float = 600.0, log=None,
                  out_name: str = "out_dir") -> list[NotebookRun]:
    """Execute the notebooks headless with papermill; return one :class:`NotebookRun` per
    notebook and parameter set (:func:`param_sets`), in that order.

    Args:
        out_dir: where executed copies, figures and records go (created); default
            :func:`combine_lab.lab.records.command_output_dir` (the current folder's ``output/lab``). Passed to each notebook as ``output_dir``.
        params: a params mapping (see :func:`split_params`, and :func:`param_sets` for several
            sets of one notebook: each run in ``out_dir/<stem>.<set>/``, passed as its ``output_dir``);
            a parameter it does not set takes its headless value where the notebook declares one
            (:func:`headless_defaults`).
        only: notebook names to run (default all).
        folder: notebook folder (default :func:`notebook_dir`).
        kernel_name: Jupyter kernel; timeout_s: limit per cell, seconds.
        log: callable taking one line of text per notebook (e.g. print), or None.
        out_name: how messages name ``out_dir`` (the CLI's ``--out``).

    A failing notebook is reported (``ok`` False, ``error``), and the others still run.
    Raises LabError for bad names or parameters or a kernel that is not registered (before
    anything runs or is created), then ParameterError for an output folder that cannot hold files
    (before anything runs).
    The kernel runs over IPC sockets in a private temporary folder (no TCP port, no
    unencrypted-transport warning). The executed copy is written as the notebook goes, at most every
    :data:`SAVE_EVERY_S` seconds, and once more at its end.
    """
    lean_jsonschema()
    import papermill
    notebooks = find_notebooks(folder, only)
    runs = param_sets(params or {}, notebooks)  # bad names or parameters: nothing created yet
    require_kernel(kernel_name)
    out = Path(out_dir) if out_dir is not None else command_output_dir()
    out = usable_folder(out, out_name).resolve()
    results = []
    old_backend = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "Agg"  # the kernel inherits it: no display needed
    with own_folders([out], out_name):  # this run owns the folder: a second one into it is refused
        try:
            for ps in runs:
                nb, here = ps.notebook, ps.folder(out)
                here.mkdir(exist_ok=True)
                p = {"output_dir": str(here), **headless_defaults(nb), **ps.params}
                target = here / nb.name
                # papermill saves the notebook as it goes: to a temporary name, renamed when it is done, so
                # that the folder never holds half an executed notebook (a full disk, Ctrl-C)
                # ... ending in .ipynb, the name papermill expects (else it warns of every notebook)
                partial = here / f".{nb.name}{PART_MARK}{os.getpid()}.ipynb"
                pngs_before = _pngs(here)
                t0 = time.perf_counter()
                ok, error = True, ""
                try:
                    with tempfile.TemporaryDirectory(prefix="combine_lab_kernel_") as sockets:
                        papermill.execute_notebook(str(nb), str(partial), parameters=p, kernel_name=kernel_name,
                                                   cwd=str(nb.parent), progress_bar=False, execution_timeout=timeout_s,
                                                   config=_kernel_config(sockets),
                                                   kernel_manager_class=_kernel_manager_class(),
                                                   engine_name=_engine_name())
                except papermill.PapermillExecutionError as e:
                    ok, error = False, f"cell {e.exec_count}: {e.ename}: {e.evalue}"
                except OSError as e:  # the folder is full or went read-only: nothing half-written stays
                    partial.unlink(missing_ok=True)
                    raise write_failed(target, None, e) from None
                except Exception as e:  # kernel died, timeout, missing kernel
                    ok, error = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                finally:
                    if partial.is_file() and sys.exc_info()[0] is None:
                        os.replace(partial, target)  # the executed notebook, with its error cell if it failed
                    partial.unlink(missing_ok=True)
                seconds = time.perf_counter() - t0
                record_path = here / f"{nb.stem}{RECORD_SUFFIX}"
                record = json.loads(record_path.read_text()) if ok and record_path.is_file() else {}
                made = sorted(path for path, stamp in _pngs(here).items() if pngs_before.get(path) != stamp)
                run = NotebookRun(nb.stem, target, seconds, ok, error, p, record, made, ps.set)
                results.append(run)
                if log is not None:
                    log(f"{run.label}: {'ok' if ok else 'FAILED'} in {seconds:.1f} s -> {target}"
                        + (f"\n  {error}" if error else ""))
        finally:
            if old_backend is None:
                os.environ.pop("MPLBACKEND", None)
            else:
                os.environ["MPLBACKEND"] = old_backend
    return results
