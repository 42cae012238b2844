"""The package's shape: the public API from the top, folders that follow the flow with no import
cycle, and every third-party import declared where an install reads it."""

from __future__ import annotations

import ast
import functools
import importlib
import os
import pkgutil
import re
import sys
import tomllib
from pathlib import Path

import pytest

import combine_lab

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "combine_lab"

#: The stages, in the order of the flow; a module may import its own stage and those before it.
#: errors, params and folders serve every stage; the top-level __init__ and __main__ sit above all.
LAYERS = ["errors", "values", "folders", "kernels", "case", "formats", "planning", "run", "model", "results", "harness", "cluster",
          "lab", "cli"]



@functools.cache  # each file parsed and walked once for every test here
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(ast.parse(path.read_text(), str(path))))


@pytest.fixture(scope="module", autouse=True)
def _trees_freed():
    """The parsed package is about a million objects: freed once this module's tests are done rather
    than kept to the end of the run, where the cyclic collector would walk it in every collection."""
    yield
    _nodes.cache_clear()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(name: str) -> bool:
    return (ROOT / Path(*name.split(".")) / "__init__.py").is_file()


def exists(name: str) -> bool:
    return is_package(name) or (ROOT / Path(*name.split("."))).with_suffix(".py").is_file()


def from_target(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from X import ...`` in ``package`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path) -> set[str]:
    """The package modules ``path`` imports, anywhere in the file (deferred imports too), each
    resolved to the most specific module: ``from ..run import runner`` is combine_lab.run.runner."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "combine_lab"}
        elif isinstance(node, ast.ImportFrom):
            target = from_target(node, package)
            if target.split(".")[0] != "combine_lab":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if exists(sub) else target)
    out.discard(me)
    return out


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_cycle_finder_names_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_folders_follow_the_flow():
    """case -> planning -> run -> results -> lab -> cli: no stage imports a later one."""
    graph = import_graph()
    assert {m.split(".")[1] for m in graph if m.count(".")} <= set(LAYERS) | {"__main__"}
    backwards = [f"{m} imports {t}" for m, targets in graph.items() for t in targets
                 if layer_of(m) is not None and layer_of(t) is not None and layer_of(t) > layer_of(m)]
    assert not backwards, backwards


def test_public_api_from_the_top():
    from combine_lab import Case, CaseSpec, case_from_arrays, compare, make_case, plan, read_case, run_case, write_case
    assert combine_lab.__all__ == ["CaseSpec", "make_case", "plan", "run_case", "compare", "write_case", "read_case",
                                   "Case", "case_from_arrays"]
    from combine_lab.case import case, spec
    from combine_lab.formats import casefiles
    from combine_lab.planning import planner
    from combine_lab import harness
    from combine_lab.run import runner
    assert (CaseSpec, make_case, plan, run_case, compare, write_case, read_case, Case, case_from_arrays) == (
        spec.CaseSpec, case.make_case, planner.plan, runner.run_case, harness.compare, casefiles.write_case,
        casefiles.read_case, case.Case, case.case_from_arrays)


def test_the_top_and_version_and_help_import_neither_numpy_nor_pandas(monkeypatch):
    """``import combine_lab``, ``combine-lab --version`` and ``--help`` load no third-party package
    (their names are imported on first use, each sub-command's module when it runs): they took 0.45 s
    when everything was imported eagerly; ``--help`` still lists every sub-command with its help."""
    import subprocess
    monkeypatch.setenv("COLUMNS", "100")  # argparse's width, the same in this process and the child
    code = ("import sys, contextlib, io\nimport combine_lab\nfrom combine_lab.cli import main\nout = io.StringIO()\n"
            "for argv in (['--version'], ['--help']):\n"
            "    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n        main(argv)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'pandas', 'matplotlib', 'dask'}))\n"
            "print(out.getvalue())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    loaded, _, shown = proc.stdout.partition("\n")
    assert (proc.returncode, proc.stderr, loaded) == (0, "", "[]")
    from combine_lab import cli
    full = cli.build_parser()
    assert shown.startswith(f"{cli.version_text()}\nusage: combine-lab") and full.format_help() in shown
    assert list(full.subcommands) == list(cli.build_parser(only="").subcommands) == list(cli.commands.HELP)


def test_every_module_imports_and_plan_stays_the_function():
    """``combine_lab.plan`` is the planner's function, not a folder, whatever else is imported
    (a subpackage named ``plan`` would replace it the moment it is imported)."""
    names = [m.name for m in pkgutil.walk_packages(combine_lab.__path__, "combine_lab.")]
    lab_extra = {r.split(">")[0].split("=")[0].strip().lower() for r in
                 tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lab"]}
    need_lab = []
    for name in names:
        if name.endswith(".__main__"):
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            # a module of the lab that needs the lab extra, where only the test extra is installed
            # (pip install -e .[test]): it says so; with every extra installed (CI) it must import
            missing = DIST_OF.get(e.name.split(".")[0], e.name.split(".")[0]).lower()
            if os.environ.get("COMBINE_LAB_REQUIRE_EXTRAS") == "1" or missing not in lab_extra:
                raise
            need_lab.append(name)
    assert all(n.startswith("combine_lab.lab.") or n.startswith("combine_lab.cli.") for n in need_lab), need_lab
    from combine_lab.planning.planner import plan
    assert combine_lab.plan is plan
    assert len(names) >= 30


# --------------------------------------------------------------------------------- declared imports

#: Import name -> distribution name, where they differ.
DIST_OF = {"yaml": "pyyaml", "IPython": "ipython", "tomli_w": "tomli-w", "PIL": "pillow", "resvg_py": "resvg-py"}
#: Distribution -> conda-forge package, where they differ.
CONDA_OF = {"torch": "pytorch"}
#: Imported only on an NPU machine, from its own vendor install (docs/npu.md#2-prerequisites).
NPU_ONLY = {"torch_npu"}
#: Test-only helpers that live in tests/, and the benchmarks' own helper module.
LOCAL = {"conftest", "naive_case", "npu_fakes", "perf_facts", "combine_lab", "plot_candidates"}
#: Plotting libraries that benchmarks/plot_candidates.py measures against the lab's SVG and that the
#: lab chose not to use (combine_lab/lab/svg.py says why, with the numbers): no dependency of it.
MEASURED_ONLY = {"plotly", "bqplot", "ipympl", "anywidget"}


def third_party_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "notebooks").glob("*.py"),
             *(ROOT / "benchmarks").glob("*.py")]
    tests_own = {f.stem for f in (ROOT / "tests").rglob("*.py")}  # a test's helpers, imported by name
    for path in files:
        for node in _nodes(path):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LOCAL | NPU_ONLY | MEASURED_ONLY | tests_own:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement.strip(), maxsplit=1)[0].lower()


def test_every_import_is_declared_in_pyproject_and_environment():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        declared |= {_name(r) for r in extra}
    # conda-forge packages, and those its pip section installs (a package conda-forge does not have)
    conda = {_name(line.lstrip(" -")) for line in (ROOT / "environment.yml").read_text().splitlines()
             if (line.startswith("  - ") or line.startswith("      - ")) and not line.strip().startswith("- pip")
             and not line.strip().startswith("- -e")}
    missing_pip, missing_conda = [], []
    for module, where in sorted(third_party_imports().items()):
        dist = DIST_OF.get(module, module).lower()
        if dist not in declared:
            missing_pip.append(f"{dist} (imported by {sorted(where)[0]})")
        if CONDA_OF.get(dist, dist) not in conda:
            missing_conda.append(f"{CONDA_OF.get(dist, dist)} (imported by {sorted(where)[0]})")
    assert not missing_pip, f"not in pyproject.toml: {missing_pip}"
    assert not missing_conda, f"not in environment.yml: {missing_conda}"


def test_the_package_and_its_folders_are_installed():
    """pyproject's package discovery takes every folder of the package."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    folders = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    patterns = [re.compile(pat.replace(".", r"\.").replace("*", ".*") + "$") for pat in find["include"]]
    assert all(any(p.match(f) for p in patterns) for f in folders), (find, sorted(folders))


def test_docs_layout_lists_every_module():
    """docs/layout.md names every module of the package, by folder (a folder's __init__.py that
    holds only its docstring is not listed)."""
    def docstring_only(path: Path) -> bool:
        body = ast.parse(path.read_text()).body
        return len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)

    layout = (ROOT / "docs" / "layout.md").read_text()
    package = layout[layout.index("## 2. The package"):]
    listed = set(re.findall(r"\| `([a-z_/]+\.py)`", package))
    modules = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if not docstring_only(p)}
    assert modules - listed == set(), f"not in docs/layout.md: {sorted(modules - listed)}"
    assert listed - modules == set(), f"in docs/layout.md but not in the package: {sorted(listed - modules)}"


#: Modules that still spell the rules' names, each with why: the app's two modules are being split
#: (issue 30 item 3), two of the model's are migrated last. Issue 30's done-when: at most 6 in all.
_STILL_SPELLING: set[str] = set()  # every module migrated (issue 30)


def test_variant_names_spelled_in_few_modules():
    """The rules' names are strings in ``kernels.py`` only (docs/layout.md#3-adding-a-variant); a module
    that spells them fails here."""
    spelled = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if re.search(r"\"(classic|doubleplane)\"|'(classic|doubleplane)'", p.read_text())}
    assert "kernels.py" in spelled
    assert spelled - {"kernels.py"} <= _STILL_SPELLING, sorted(spelled - {"kernels.py"} - _STILL_SPELLING)
    assert len(spelled) <= 6, sorted(spelled)


#: Modules over the limit: none since the tuning app was split (issue 30 item 3).
_OVER_600: set[str] = set()


def test_no_module_over_600_lines():
    """A module fits in one's head: at most 600 lines (the project's standard)."""
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    over = {m: n for m, n in sizes.items() if n > 600 and m not in _OVER_600}
    assert over == {}, over


# ------------------------------------------------------------------------- the model's one door
#: The model's inner steps: outside combine_lab/model/ they are reached through model/facade.py.
_MODEL_INNER_NAMES = {"replay", "stage1", "Stage1", "settings_args", "model_case", "replay_recorded", "model_kernel"}
#: Modules of the model whose functions are its inner steps: imported as modules, only inside model/.
_MODEL_INNER_MODULES = {"combine_lab.model.replay", "combine_lab.model.modelled", "combine_lab.model.recorded"}
#: Modules outside model/ allowed an inner step, each with why.
_MODEL_INNER_ALLOWED = {
    # the trace draws every operation of a recorded stream at its virtual time, which only the
    # op-by-op pricer yields (a price of the whole launch, the facade's, has no operations in it)
    "combine_lab.results.trace": {"replay_recorded"},
}


def model_entries(source: str, module: str) -> set[str]:
    """The model's inner steps ``source`` (the text of package module ``module``) reaches directly:
    "<name> from <module>" for an inner name imported from any combine_lab.model module, "module
    <module>" for an inner module imported whole, ".<name>" for an inner name used as an attribute
    (``modelled.model_case(...)``)."""
    package = module.rpartition(".")[0] if not is_package(module) else module
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {f"module {a.name}" for a in node.names if a.name in _MODEL_INNER_MODULES}
        elif isinstance(node, ast.ImportFrom):
            target = from_target(node, package)
            if target != "combine_lab.model" and not target.startswith("combine_lab.model."):
                continue
            for a in node.names:
                if a.name in _MODEL_INNER_NAMES:  # its data types (ModelledTimes, ModelledResult, Op) are free
                    out.add(f"{a.name} from {target}")
                elif f"{target}.{a.name}" in _MODEL_INNER_MODULES:
                    out.add(f"module {target}.{a.name}")
        elif isinstance(node, ast.Attribute) and node.attr in _MODEL_INNER_NAMES - {"replay"}:
            out.add(f".{node.attr}")
    return out


def test_model_entries_finds_every_way_in():
    """The checker itself: each way a module could reach past the facade is named."""
    src = ("from ..model.replay import replay, ModelledTimes\nfrom ..model import modelled, facade\n"
           "from ..model.modelled import MODELLED, model_case\nimport combine_lab.model.recorded\n"
           "from ..model.suggest import suggest\nx = modelled.model_case(1)\ny = facade.times(1)\n")
    assert model_entries(src, "combine_lab.lab.sweep") == {
        "replay from combine_lab.model.replay",
        "module combine_lab.model.modelled", "model_case from combine_lab.model.modelled",
        "module combine_lab.model.recorded", ".model_case"}
    assert model_entries("from .replay import replay\n", "combine_lab.model.suggest") == \
        {"replay from combine_lab.model.replay"}  # the checker judges any module; the test skips model/


def test_the_model_is_entered_through_its_facade():
    """Outside combine_lab/model/, the model is priced through model/facade.py (issue 30 item 2):
    no module imports replay, stage1, model_case (or their modules) but the ones allowed, with why."""
    found = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        name = module_name(p)
        if name == "combine_lab.model" or name.startswith("combine_lab.model."):
            continue
        entries = {e for e in model_entries(p.read_text(), name)
                   if e.split(" ")[0].lstrip(".") not in _MODEL_INNER_ALLOWED.get(name, set())}
        if entries:
            found[name] = sorted(entries)
    assert found == {}, found
    # every allowance is still used: one that is not is a door left open for nothing
    for name, names in _MODEL_INNER_ALLOWED.items():
        path = ROOT / Path(*name.split(".")).with_suffix(".py")
        used = {e.split(" ")[0].lstrip(".") for e in model_entries(path.read_text(), name)}
        assert names <= used, (name, names - used)
