"""The tuning app's HTML pieces: number boxes read exactly (:func:`parse_number`), values and
tables as the page writes them, notes, and a section that opens and closes (:class:`Disclosure`)."""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np
import pandas as pd

__all__ = ["parse_number", "number_text", "cell", "table", "speedup_spread", "note", "Disclosure", "fitted_svg"]


def parse_number(text):
    """What a number box holds, read exactly: an int for an integer ("8192", "-64", " 12 "), a
    float for any other number ("1.5", "1e3"), else the text itself (a bad value the state names).
    Never rounded or clamped: "100.5" stays 100.5 (and is then said not to be an integer)."""
    if not isinstance(text, str):
        return text
    t = text.strip().replace("_", "")
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return text


def number_text(v) -> str:
    """A value as its number box shows it."""
    if isinstance(v, (bool, np.bool_)):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}" if abs(float(v)) < 1e15 else repr(float(v))
    return "" if v is None else str(v)



def cell(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return "-" if not np.isfinite(v) else f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    return html.escape(str(v))


def table(df: pd.DataFrame, headings: dict[str, str], cls: str, fmt: dict | None = None, label: str = "",
           wide: tuple = ()) -> str:
    """A compact HTML table of ``df``'s ``headings`` columns (column -> heading); ``fmt``: column ->
    function writing a value (as HTML), else :func:`cell`. The table sits in a box that scrolls
    sideways when it is wider than the page, reachable with Tab (``label`` names it) and scrolled
    with the arrow keys; ``wide``: columns that wrap their text at a readable width."""
    fmt = fmt or {}
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings.values())
    body = "".join("<tr>" + "".join(f"<td{' class=cl-wide' if c in wide else ''}>{fmt.get(c, cell)(r[c])}</td>"
                                    for c in headings) + "</tr>" for r in df.to_dict("records"))
    name = html.escape(label or cls, quote=True)
    return (f"<div class='cl-scroll' tabindex='0' role='region' aria-label='{name}'>"
            f"<table class='cl-table {cls}'><tr>{head}</tr>{body}</table></div>")


def speedup_spread(mid: float, lo: float, hi: float, repeats) -> str:
    """A Run's speed-up as the history shows it: "1.234 [1.10-1.31]" (median [min-max] over its
    repeats), the median alone after one repeat, "-" when nothing was compared."""
    if not np.isfinite(mid):
        return "-"
    if int(repeats) < 2 or not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{mid:.3f}"
    return f"{mid:.3f} [{lo:.2f}-{hi:.2f}]"


def note(text_html: str) -> str:
    return f"<div class='cl-note'>{text_html}</div>"


def fitted_svg(fig, width_px: int) -> str:
    """A matplotlib Figure as inline SVG (:func:`combine_lab.lab.plots.figure_svg`) drawn ``width_px``
    CSS pixels wide (1 inch = 96 px), its height and font sizes kept: the comparison and history
    figures fill the app's width (issue 32: 845 px in a 1250 px app) instead of being scaled, which
    would grow their text. The figure's own size is restored after, so a saved PNG is unchanged.
    An :class:`~combine_lab.lab.svg.SvgFigure` is drawn to its width already: its text is returned."""
    from . import plots
    if not hasattr(fig, "set_size_inches"):
        return plots.figure_svg(fig)
    w, h = fig.get_size_inches()
    fig.set_size_inches(max(float(width_px), 480.0) / 96.0, h)
    try:
        return plots.figure_svg(fig)
    finally:
        fig.set_size_inches(w, h)


class Disclosure:
    """A section that opens and closes: a toggle button (Tab reaches it, Enter or Space opens
    it) over its content, which is hidden while closed. ``box`` is the widget to lay out."""

    def __init__(self, title: str, content: widgets.Widget, cls: str):
        self.title = title
        self.content = content
        self.button = widgets.ToggleButton(value=False, description=f"\u25b8 {title}", tooltip=f"show {title}",
                                           layout=widgets.Layout(width="auto", max_width="100%"))
        self.button.add_class("cl-toggle")
        self.button.add_class(f"cl-toggle-{cls}")
        content.layout = widgets.Layout(width="100%", display="none")  # its own: layouts may be shared
        self.button.observe(self._toggled, names="value")
        self.box = widgets.VBox([self.button, content], layout=widgets.Layout(width="100%"))
        self.box.add_class(f"cl-section-{cls}")

    def _toggled(self, change) -> None:
        self.content.layout.display = "" if change["new"] else "none"
        self.button.description = f"{chr(0x25be) if change['new'] else chr(0x25b8)} {self.title}"

    def set_title(self, title: str) -> None:
        self.title = title
        self.button.description = f"{chr(0x25be) if self.button.value else chr(0x25b8)} {title}"

    @property
    def open(self) -> bool:
        return bool(self.button.value)

