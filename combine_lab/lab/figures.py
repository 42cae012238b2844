"""What every figure of the lab shares: a pyplot-free matplotlib Figure (:func:`new_figure`), the
colours and axis words of the variants and planes, a log2 byte axis, and one way to render, save and
show a figure of either kind (a matplotlib Figure, or the plan views' :class:`~combine_lab.lab.svg.SvgFigure`).

Bytes are plotted in the binary unit that suits the largest value (B, KiB, MiB, GiB); times in
microseconds (us), as in the perf CSV (docs/formats.md#3-perf-csv).
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from ..formats.files import write_atomic
from ..kernels import CLASSIC, DOUBLEPLANE, RULE_COLORS, RULE_TITLES
from .svg import SDMA_COLOR, byte_label

__all__ = ["VARIANT_COLORS", "new_figure", "figure_png", "figure_svg", "save_figure", "show"]

#: Bar/line colour per variant (classic = MTE only, doubleplane = MTE + SDMA).
VARIANT_COLORS = dict(RULE_COLORS)
_VARIANT_LABEL = dict(RULE_TITLES)
_PLANE_COLORS = {"MTE": "#9ecae1", "SDMA": SDMA_COLOR}
_PLAIN = FuncFormatter(lambda v, _pos: f"{v:g}")
_EMPTY_EDGE = "#8c8c8c"
_SPEEDUP_AXIS = f"speed-up {CLASSIC} / {DOUBLEPLANE} (1)"


def _byte_log_axis(ax, values, max_ticks: int = 8) -> None:
    """A log2 x axis of byte values (plotted in bytes) whose ticks are powers of two covering
    ``values``, labelled plainly ("256 KiB", "2 MiB"); no minor ticks, so no "2x10^0" labels."""
    v = np.asarray([x for x in np.asarray(values, dtype=float).ravel() if x > 0])
    lo, hi = (math.floor(math.log2(v.min())), math.ceil(math.log2(v.max()))) if v.size else (0, 1)
    hi = max(hi, lo + 1)
    step = max(1, math.ceil((hi - lo + 1) / max_ticks))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(lo, hi + 1, step)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: byte_label(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(2.0 ** lo / 1.15, 2.0 ** hi * 1.15)


def new_figure(width: float, height: float, dpi: int = 72) -> Figure:
    """A pyplot-free Figure of ``width`` x ``height`` inches with an Agg canvas attached."""
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig



def _is_svg(fig) -> bool:
    return hasattr(fig, "svg") and hasattr(fig, "png")


def figure_png(fig, dpi: int | None = None) -> bytes:
    """The figure rendered as PNG bytes: a matplotlib Figure at ``dpi`` (default its own), an
    :class:`~combine_lab.lab.svg.SvgFigure` at ``dpi`` per 96 CSS pixels (default 144)."""
    if _is_svg(fig):
        return fig.png((dpi or 144) / 96)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi)
    return buf.getvalue()


def figure_svg(fig) -> str:
    """The figure as an inline ``<svg>`` element (class ``cl-figure``), its text left to the browser
    (sharp at any pixel density), shown at its own size (1 inch = 96 px) or narrower when the page is.
    An :class:`~combine_lab.lab.svg.SvgFigure` is that already: its text is returned."""
    if _is_svg(fig):
        return fig.svg
    import matplotlib
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none",
                                "font.family": ["DejaVu Sans", "Liberation Sans", "Arial", "sans-serif"]}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    return text.replace("<svg ", "<svg class=\"cl-figure\" style=\"max-width:100%;height:auto;display:block\" ", 1)


def save_figure(fig, out_dir: str | os.PathLike, name: str, dpi: int | None = None) -> Path:
    """Save ``fig`` (a matplotlib Figure, or an :class:`~combine_lab.lab.svg.SvgFigure`) as
    ``<out_dir>/<name>.png`` (folder created) and return the path. ``dpi``: a Figure's (default 100),
    an SvgFigure's device pixels per 96 CSS pixels (default 144: sharp text). Raises OSError when
    the folder cannot be written."""
    path = Path(out_dir) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, figure_png(fig, dpi if _is_svg(fig) else dpi or 100))


def show(fig, out_dir: str | os.PathLike | None = None, name: str | None = None) -> None:
    """Display ``fig`` in IPython: a matplotlib Figure as a PNG (any matplotlib backend), an
    :class:`~combine_lab.lab.svg.SvgFigure` as its SVG (the drawing the app shows) with its PNG
    beside it (shown where SVG is not: an untrusted notebook); when
    ``out_dir`` and ``name`` are given, save it there as ``<name>.png`` (see :func:`save_figure`).
    Returns None, so that a notebook cell ending with it shows only the figure."""
    path = save_figure(fig, out_dir, name) if out_dir is not None and name else None
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:  # pragma: no cover - IPython ships with the lab extra
        return None
    if get_ipython() is not None:
        if _is_svg(fig):  # SVG (sharp, the browser's text) and, for an untrusted notebook, the PNG
            display(fig.mimebundle(path.read_bytes() if path else None), raw=True)
        else:
            display(Image(data=path.read_bytes() if path else figure_png(fig, 100), format="png"))
    return None
