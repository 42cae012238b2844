"""Every error the lab raises names what it refused as a field, and nobody reads a message back.

Read from the package's source (its AST), not from running it: every construction of a lab error
class (a subclass of :class:`~combine_lab.errors.CombineLabError`, defined anywhere in the package)
passes ``parameter=``, or is ``Class.of(parameter, value, allowed)``, unless the class is one of
:data:`~combine_lab.errors.RUN_FAILURES`; and no module recovers what was refused by matching an
error's text (``in str(e)``, ``str(e).startswith``, ``str(e).split``).
"""

import ast
import functools
from pathlib import Path

import pytest

from combine_lab import errors

PACKAGE = Path(errors.__file__).resolve().parent


@functools.cache  # each tree walked once for every test here (the walks are most of their time)
def _walk(node: ast.AST) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(node))


@functools.cache  # parsed once for every test here (a second each); the walks only read the trees
def _modules() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.fixture(scope="module", autouse=True)
def _trees_freed():
    """The parsed package is about a million objects: freed once this module's tests are done rather
    than kept to the end of the run, where the cyclic collector would walk it in every collection."""
    yield
    _walk.cache_clear()
    _modules.cache_clear()


def _base_names(cls: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases if isinstance(b, (ast.Name, ast.Attribute))}


def lab_error_classes(modules: dict[Path, ast.Module]) -> dict[str, ast.ClassDef]:
    """Class name -> its definition, for CombineLabError and every class of the package below it."""
    defs = {n.name: n for tree in modules.values() for n in _walk(tree) if isinstance(n, ast.ClassDef)}
    found = {"CombineLabError": defs["CombineLabError"]}
    grew = True
    while grew:
        grew = False
        for name, cls in defs.items():
            if name not in found and _base_names(cls) & found.keys():
                found[name] = cls
                grew = True
    return found


def _sets_its_own_parameter(cls: ast.ClassDef) -> bool:
    """The class's ``__init__`` takes no ``parameter`` (nor ``**kwargs``): it names the parameter in its
    own ``super().__init__`` call, which is checked where it stands."""
    for n in cls.body:
        if isinstance(n, ast.FunctionDef) and n.name == "__init__":
            names = {a.arg for a in n.args.args + n.args.kwonlyargs}
            return "parameter" not in names and n.args.kwarg is None
    return False


def _local_names(tree: ast.Module, classes: set[str]) -> dict[str, str]:
    """Name in this module -> the lab error class it is: classes defined here and imported from the package."""
    names = {n.name: n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.name in classes}
    for n in _walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("combine_lab")):
            names.update({a.asname or a.name: a.name for a in n.names if a.name in classes})
    return names


def _called_class(call: ast.Call, local: dict[str, str], classes: set[str]) -> tuple[str | None, bool]:
    """(the lab error class ``call`` constructs or None, whether it is the ``.of`` constructor)."""
    f = call.func
    if isinstance(f, ast.Name):
        return local.get(f.id), False
    if isinstance(f, ast.Attribute):
        if f.attr == "of":
            inner = f.value
            if isinstance(inner, ast.Name):
                return local.get(inner.id), True
            if isinstance(inner, ast.Attribute) and inner.attr in classes:
                return inner.attr, True
        elif f.attr in classes and isinstance(f.value, ast.Name):  # errors.ParameterError(...)
            return f.attr, False
    return None, False


def _names_parameter(call: ast.Call) -> bool:
    for k in call.keywords:
        if k.arg is None:  # **fields: the caller's fields, passed on
            return True
        if k.arg == "parameter":
            return not (isinstance(k.value, ast.Constant) and k.value.value is None)
    return False


def constructions(modules: dict[Path, ast.Module] | None = None):
    """Every construction of a lab error class in the package: (path, line, class, names a parameter).
    A class that names its own parameter (:func:`_sets_its_own_parameter`) is checked at its
    ``super().__init__`` call instead (the class's name, with ``.__init__``)."""
    modules = _modules() if modules is None else modules
    defs = lab_error_classes(modules)
    classes = set(defs)
    own = {name for name, cls in defs.items() if _sets_its_own_parameter(cls)}
    for path, tree in modules.items():
        local = _local_names(tree, classes)
        for node in _walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in own:
                for n in _walk(node):
                    if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__"
                            and isinstance(n.func.value, ast.Call)):
                        yield path, n.lineno, f"{node.name}.__init__", _names_parameter(n)
            if not isinstance(node, ast.Call):
                continue
            name, of = _called_class(node, local, classes)
            if name is None or name in own:
                continue
            yield path, node.lineno, name, of or _names_parameter(node)


def test_every_lab_error_names_the_parameter_it_refused():
    """A raise of SpecError(...), ParameterError(...), ... without ``parameter=`` is listed by file:line."""
    exempt = set(errors.RUN_FAILURES)
    missing = [f"{p.relative_to(PACKAGE.parent)}:{line}: {name}" for p, line, name, ok in constructions()
               if not ok and name.split(".")[0] not in exempt]
    assert missing == [], "lab errors without parameter=:\n" + "\n".join(missing)


def test_a_parameter_is_named_by_its_python_name():
    """``parameter="--variant"`` is the flag, not the parameter: a constant ``parameter=`` (or ``.of``'s first
    argument) is a Python identifier; how the message says it (a flag) is ``said_as``."""
    modules = _modules()
    classes = set(lab_error_classes(modules))
    bad = []
    for path, tree in modules.items():
        local = _local_names(tree, classes)
        for node in _walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name, of = _called_class(node, local, classes)
            if name is None:
                continue
            given = [k.value for k in node.keywords if k.arg == "parameter"] + (node.args[:1] if of else [])
            bad += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {g.value!r}" for g in given
                    if isinstance(g, ast.Constant) and not (isinstance(g.value, str) and g.value.isidentifier())]
    assert bad == []


def test_python_name_and_flag_of():
    assert [errors.python_name(w) for w in ("--output-dir", "-ipport", "pes list", "loops")] == [
        "output_dir", "ipport", "pes_list", "loops"]
    assert [errors.flag_of(w) for w in ("--output-dir", "-ipport", "pes list")] == ["--output-dir", "-ipport", None]


def test_the_run_failures_are_classes_of_the_package():
    """Each name in RUN_FAILURES is a lab error class defined in the package (the list cannot go stale),
    and none of the input errors of errors.py is among them."""
    classes = lab_error_classes(_modules())
    assert sorted(errors.RUN_FAILURES) == ["BrokenPatchError", "BuildError", "KernelFailed", "LaunchError"]
    assert set(errors.RUN_FAILURES) <= set(classes)
    assert not set(errors.RUN_FAILURES) & {"SpecError", "CaseFileError", "ParameterError", "LabError",
                                           "ResultFileError", "CombineLabError"}


def test_the_walk_finds_the_lab_errors():
    """The walk sees the package's raises (so an empty list above means something): hundreds of them,
    of every class of errors.py and of the stages' own."""
    found = list(constructions())
    names = {name for _, _, name, _ in found}
    assert len(found) > 250
    assert {"SpecError", "CaseFileError", "ParameterError", "LabError", "ResultFileError", "CapacityError",
            "ClusterError", "KernelSourceError", "NotModelled.__init__"} <= names


#: What a function calls an exception it was handed: ``def _with_flag(e: CombineLabError)``.
_ERROR_NAMES = {"e", "err", "exc", "error"}


def _error_names(tree: ast.Module) -> set[str]:
    """The names an exception goes by in this module: ``except ... as <name>``, and parameters named
    like one (:data:`_ERROR_NAMES`) or annotated with an exception class (``...Error``, ``Exception``)."""
    names = {n.name for n in _walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}
    for f in _walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for a in f.args.args + f.args.kwonlyargs + f.args.posonlyargs:
                note = ast.unparse(a.annotation) if getattr(a, "annotation", None) is not None else ""
                if a.arg in _ERROR_NAMES or note.endswith(("Error", "Exception")):
                    names.add(a.arg)
    return names


def _is_message(n: ast.AST, names: set[str], texts: frozenset[str] = frozenset()) -> bool:
    """``str(e)`` or ``e.args[0]`` for an exception's name ``e``, or a name in ``texts`` (one holding a message)."""
    if isinstance(n, ast.Name):
        return n.id in texts
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "str" and len(n.args) == 1:
        return isinstance(n.args[0], ast.Name) and n.args[0].id in names
    return (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "args"
            and isinstance(n.value.value, ast.Name) and n.value.value.id in names)


def _message_names(tree: ast.Module, names: set[str]) -> set[str]:
    """Names that hold a message in this module: ``text = str(e)``, and a parameter of a function of the
    module that a call hands ``str(e)`` (``self._blame(str(e))`` -> ``_blame``'s ``text``)."""
    held = {t.id for n in _walk(tree) if isinstance(n, ast.Assign) and _is_message(n.value, names)
            for t in n.targets if isinstance(t, ast.Name)}
    defs = {f.name: f for f in _walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for call in _walk(tree):
        if not isinstance(call, ast.Call):
            continue
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
        f = defs.get(name)
        if f is None:
            continue
        params = [a.arg for a in f.args.args]
        if isinstance(call.func, ast.Attribute) and params[:1] in (["self"], ["cls"]):
            params = params[1:]
        held |= {params[i] for i, a in enumerate(call.args) if i < len(params) and _is_message(a, names)}
    return held


#: What reads a text back: a test of what it holds or starts with, or a cut of it.
_READERS = {"startswith", "endswith", "split", "rsplit", "partition", "rpartition", "find", "rfind", "index",
            "count", "removeprefix", "removesuffix"}


def message_readers(modules: dict[Path, ast.Module] | None = None) -> list[str]:
    """file:line of each place that reads an exception's message back: ``... in str(e)``,
    ``str(e).startswith(...)`` / ``.split(...)`` / ``.partition(...)``, ``str(e) == "..."``, a regular
    expression searched in it; ``e`` an exception's name in that module (:func:`_error_names`)."""
    modules = _modules() if modules is None else modules
    found = []
    for path, tree in modules.items():
        names = _error_names(tree)
        texts = frozenset(_message_names(tree, names))
        for n in _walk(tree):
            hit = False
            if isinstance(n, ast.Compare):
                sides = [n.left, *n.comparators]
                hit = any(_is_message(c, names, texts) for c in sides) and any(
                    isinstance(op, (ast.In, ast.NotIn, ast.Eq, ast.NotEq)) for op in n.ops)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                hit = (n.func.attr in _READERS and _is_message(n.func.value, names, texts)) or (
                    n.func.attr in {"match", "search", "fullmatch", "findall"}
                    and any(_is_message(a, names, texts) for a in n.args))
            if hit:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{n.lineno}")
    return sorted(set(found), key=lambda t: (t.split(":")[0], int(t.split(":")[1])))


def test_no_module_reads_an_error_message_back():
    """What was refused comes from the exception's fields (parameter, value, allowed, ...), never from
    matching its text: no ``in str(e)``, ``str(e).startswith(...)``, ``str(e).split(...)`` in an except."""
    assert message_readers() == []


def test_the_message_reader_search_finds_the_forms_it_forbids():
    """The forms the package no longer has are found (so an empty list above means something);
    showing a message (``f"... {e}"``, ``str(e).splitlines()[0]``) is not reading it back."""
    tree = ast.parse("try:\n    pass\nexcept ValueError as e:\n    a = 'x' in str(e)\n    b = str(e).startswith('y')\n"
                     "    c = str(e).split(': ')[0]\n    d = str(e)\n    f = str(e).splitlines()[0]\n"
                     "def _with_flag(err: CombineLabError):\n    return re.match('x', str(err)) or str(err) == 'y'\n"
                     "def show(text):\n    return 'x' in str(text)\n")
    assert message_readers({PACKAGE / "x.py": tree}) == ["combine_lab/x.py:4", "combine_lab/x.py:5",
                                                         "combine_lab/x.py:6", "combine_lab/x.py:10"]


def test_the_parsing_sites_of_main_are_what_it_finds():
    """Read against the sites this replaced (their lines as they were): each form is one the search sees."""
    old = {"lab/tuning.py": "def _check(self):\n    try:\n        pass\n    except SpecError as e:\n"
                            "        return self._blame(str(e))\n"
                            "def _blame(self, text: str):\n    head = text.split('=', 1)[0].strip()\n",
           "cli/__init__.py": "def _with_flag(e: CombineLabError, command=None):\n"
                              "    said = flag is not None and str(e).startswith(f'{flag}=')\n"
                              "def _model_instead(args, e: CombineLabError):\n"
                              "    if 'making the case needs x' in str(e):\n        return ''\n"}
    found = message_readers({PACKAGE / k: ast.parse(v) for k, v in old.items()})
    assert found == ["combine_lab/cli/__init__.py:2", "combine_lab/cli/__init__.py:4", "combine_lab/lab/tuning.py:7"]
