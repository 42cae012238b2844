"""The notebook libraries (nbformat, papermill, nbconvert) imported without the second of start-up
that jsonschema spends on a check they never make.

nbformat validates notebooks with jsonschema, whose format module registers its ``iri`` and
``iri-reference`` checks when the rfc3987-syntax package imports; that package (installed with
jupyter-events' ``jsonschema[format-nongpl]``) compiles a Lark grammar at import: 0.8 s of CPU
time alone, 2.6 s of a pytest collection (measured on the lab's 2-core machine). No notebook
schema uses either format. So jsonschema is imported with that package out of sight, once, before
the first notebook library; anything that imports rfc3987_syntax itself afterwards gets it as usual.
"""

from __future__ import annotations

import sys

__all__ = ["lean_jsonschema"]

_HIDDEN = "rfc3987_syntax"


def lean_jsonschema() -> None:
    """Import jsonschema without its IRI format checks' grammar (see the module docstring); call it
    before importing nbformat, papermill or nbconvert. Does nothing once jsonschema is imported (or
    rfc3987_syntax is)."""
    if "jsonschema" in sys.modules or _HIDDEN in sys.modules:
        return
    sys.modules[_HIDDEN] = None  # an import of it raises ImportError, which jsonschema expects of a missing extra
    try:
        import jsonschema  # noqa: F401
    except ImportError:  # without the lab extra: the notebook library's own import says what is missing
        pass
    finally:
        if _HIDDEN in sys.modules and sys.modules[_HIDDEN] is None:
            del sys.modules[_HIDDEN]
