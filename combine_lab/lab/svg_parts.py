"""The drawing kit of the lab's SVG figures (:mod:`.svg`): an SVG canvas and axes with ticks, a
colour bar, legends, wrapped text, byte labels in the binary unit that suits them, and
:class:`SvgFigure`: one drawing shown inline (``_repr_svg_``) and rasterised to PNG by resvg.
Why the plan views are SVG at all is measured in :mod:`.svg`.
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.ticker import LogLocator, MaxNLocator

from ..formats.files import write_atomic

__all__ = ["SvgFigure", "png_cells", "floor_text", "WIDTH", "byte_unit", "byte_label", "plan_arrays",
           "largest_remote_segment", "SDMA_COLOR", "EMPTY_COLOR", "PE_ROLE", "MAX_PANELS", "ANNOTATE_CELLS", "MIN_CELL_PX"]

#: Width of the app's figures in CSS pixels: fits a JupyterLab column beside an open sidebar at
#: 1400 px (about 960 px wide) with room for the output prompt.
WIDTH = 860
_MTE_COLOR = "#9ecae1"
_FONT = "font-family:DejaVu Sans,Liberation Sans,Arial,Helvetica,sans-serif"  # unquoted: inside style='...'
_INK = "#222"
_GRID = "#e3e3e3"

#: Outline colour of SDMA segments.
SDMA_COLOR = "#d62728"
#: Colour of empty segments (no rows) and of cases without SDMA traffic.
EMPTY_COLOR = "#eeeeee"
#: How the figures name the PE a segment map shows: it ran the experts and, in combine, sends
#: their rows back to each src_rank (dispatch's destination PE).
PE_ROLE = "expert owner, sends"
#: Panel layout up to this many destination PEs; above it one stacked image.
MAX_PANELS = 8
#: Annotate cells with their row count when a panel has at most this many cells (and only the
#: counts that fit their cell are written).
ANNOTATE_CELLS = 64
#: The segment map's panels go fewer per row until a cell is at least this wide (CSS pixels):
#: three digits at 11 px fit, and an SDMA outline leaves the colour visible.
MIN_CELL_PX = 30


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """``(divisor, unit)`` for plotting byte values whose largest is ``max_bytes``:
    B below 1 KiB, then KiB, MiB, GiB (powers of 1024)."""
    for div, unit in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if max_bytes >= div:
            return float(div), unit
    return 1.0, "B"


def byte_label(n: float, digits: int = 3) -> str:
    """``n`` bytes as a plain label in the binary unit that suits it: "512 B", "256 KiB", "1 MiB",
    "1.5 MiB" (at most ``digits`` significant digits, no scientific notation)."""
    div, unit = byte_unit(abs(float(n)))
    return f"{float(n) / div:.{digits}g} {unit}"


def plan_arrays(plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bytes, token_count, sdma mask, each [pes, expert_per_pe, pes] = [d, local_expert, src_rank]."""
    shape = (plan.pes, plan.expert_per_pe, plan.pes)
    seg = plan.segments
    nbytes = seg["bytes"].to_numpy(dtype=np.float64).reshape(shape)
    rows = seg["token_count"].to_numpy(dtype=np.int64).reshape(shape)
    sdma = (seg["plane"].to_numpy() == "SDMA").reshape(shape)
    return nbytes, rows, sdma


def largest_remote_segment(plan) -> np.ndarray:
    """float64 [pes]: each PE's largest remote segment in bytes (segments to src_rank != pe), the
    point the rule's thresholds are drawn against (0 where a PE has no remote rows)."""
    nbytes, _, _ = plan_arrays(plan)
    pes = plan.pes
    remote = np.ones((pes, plan.expert_per_pe, pes), dtype=bool)
    remote[np.arange(pes), :, np.arange(pes)] = False
    return np.where(remote, nbytes, 0.0).reshape(pes, -1).max(axis=1)


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".") if abs(v - round(v)) > 1e-9 else str(int(round(v)))


def _label(v: float) -> str:
    """A tick label: plain, short."""
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-2:
        return f"{v:.3g}"
    return f"{v:.6g}"


def _tick_labels(ticks: list[float]) -> list[tuple[float, str]]:
    """Ticks of one axis, all in one plain format: thousands separated, as many decimals as the
    step needs (9,000 and 12,000 on one axis, never 9000 beside 1.2e+04)."""
    if not ticks:
        return []
    # the fewest decimals that write every tick exactly (2.5 and 7.5 were written "2" and "8")
    digits = next((d for d in range(7) if all(abs(round(t, d) - t) <= 1e-9 * max(1.0, abs(t)) for t in ticks)), 6)
    return [(t, f"{t:,.{digits}f}") for t in ticks]


def _text_width(text: str, size: float) -> float:
    """About how wide ``text`` is at font ``size`` (DejaVu Sans: 0.6 em per character, digits and
    separators a little less): enough to keep labels apart and inside the figure."""
    return sum(0.45 if c in ",.:;il1 " else 0.62 for c in str(text)) * size


def _hex(rgba) -> str:
    r, g, b = (int(round(255 * float(c))) for c in rgba[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def png_cells(rgb: np.ndarray) -> bytes:
    """A PNG of ``rgb`` (uint8 [height, width, 3]), one pixel per cell (Pillow): a grid of
    cells is a few KiB and takes a millisecond."""
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8), "RGB").save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def _fonts_dir() -> str:
    """matplotlib's own DejaVu fonts: the PNG looks the same on any machine, fonts installed or not."""
    import matplotlib
    return str(Path(matplotlib.get_data_path()) / "fonts" / "ttf")


class SvgFigure:
    """One drawn view: its ``<svg>`` text (:attr:`svg`) and ``title``. Shown by a notebook as
    SVG (``_repr_svg_``), by the app inline, and saved as PNG by :meth:`png` /
    :meth:`savefig` (resvg, with matplotlib's DejaVu fonts)."""

    def __init__(self, svg: str, title: str = ""):
        self.svg = svg
        self.title = title

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in CSS pixels."""
        head = self.svg[:self.svg.index(">")]
        get = lambda key: int(head.split(f" {key}='", 1)[1].split("'", 1)[0])  # noqa: E731
        return get("width"), get("height")

    def png(self, zoom: float = 1.5) -> bytes:
        """The figure as PNG bytes, ``zoom`` device pixels per CSS pixel (1.5: 1290 px wide for
        the app's 860). Raises ImportError naming the lab extra when resvg-py is missing, and
        ValueError when the SVG cannot be rendered."""
        try:
            import resvg_py
        except ImportError as e:  # pragma: no cover - resvg-py ships with the lab extra
            raise ImportError("saving a lab figure as PNG needs resvg-py: pip install -e '.[lab]'") from e
        return bytes(resvg_py.svg_to_bytes(svg_string=self.svg, background="white", zoom=zoom,
                                           skip_system_fonts=True, font_dirs=[_fonts_dir()],
                                           font_family="DejaVu Sans", sans_serif_family="DejaVu Sans"))

    def savefig(self, path, format: str = "png", dpi: float | None = None) -> None:
        """Write the figure to ``path`` as PNG (``format`` "png") or as the SVG text ("svg");
        ``dpi``: device pixels per inch of 96 CSS pixels (default 144, :meth:`png`'s zoom 1.5).
        Raises ParameterError for another format."""
        if format == "svg":
            write_atomic(path, self.svg)
            return
        if format != "png":
            from ..errors import ParameterError
            raise ParameterError(f"format={format!r}: must be 'png' or 'svg'",
                                 parameter="format", value=format, allowed="png or svg")
        write_atomic(path, self.png((dpi or 144) / 96))

    def _repr_svg_(self) -> str:
        return self.svg

    def mimebundle(self, png: bytes | None = None) -> dict:
        """The figure for a notebook output: its SVG, and a PNG (``png``, else rendered) for where
        SVG is not shown (JupyterLab renders an untrusted notebook's SVG as text, not its PNG)."""
        return {"image/svg+xml": self.svg,
                "image/png": base64.b64encode(png if png is not None else self.png()).decode("ascii")}

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return self.mimebundle()

    def __repr__(self) -> str:
        w, h = self.size
        return f"SvgFigure({self.title!r}, {w}x{h} px)"


class _Canvas:
    """SVG elements in order; :meth:`render` wraps them in the ``<svg>`` of a size in pixels."""

    def __init__(self):
        self.parts: list[str] = []

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", color=_INK, rotate=None, baseline="auto",
             cls="") -> None:
        rot = f" transform='rotate({rotate} {_num(x)} {_num(y)})'" if rotate is not None else ""
        c = f" class='{cls}'" if cls else ""
        self.add(f"<text x='{_num(x)}' y='{_num(y)}' font-size='{size}' text-anchor='{anchor}' font-weight='{weight}' "
                 f"fill='{color}' dominant-baseline='{baseline}'{rot}{c}>{_e(s)}</text>")

    def rect(self, x, y, w, h, fill="none", stroke="none", sw=1.0, extra="") -> None:
        self.add(f"<rect x='{_num(x)}' y='{_num(y)}' width='{_num(max(w, 0))}' height='{_num(max(h, 0))}' "
                 f"fill='{fill}' stroke='{stroke}' stroke-width='{sw}'{extra}/>")

    def line(self, x1, y1, x2, y2, stroke=_INK, sw=1.0, dash="") -> None:
        d = f" stroke-dasharray='{dash}'" if dash else ""
        self.add(f"<line x1='{_num(x1)}' y1='{_num(y1)}' x2='{_num(x2)}' y2='{_num(y2)}' stroke='{stroke}' "
                 f"stroke-width='{sw}'{d}/>")

    def render(self, width: float, height: float, cls: str, title: str, data: dict | None = None) -> str:
        attrs = "".join(f" data-{k}='{_e(v)}'" for k, v in (data or {}).items())
        return (f"<svg xmlns='http://www.w3.org/2000/svg' class='cl-figure {cls}' width='{int(width)}' "
                f"height='{int(math.ceil(height))}' viewBox='0 0 {int(width)} {int(math.ceil(height))}' role='img' "
                f"style='{_FONT};max-width:100%;height:auto;display:block'{attrs}><title>{_e(title)}</title>"
                + "".join(self.parts) + "</svg>")


def _wrap(text: str, size: float, width: float) -> list[str]:
    """Lines of ``text`` that fit ``width`` pixels at font ``size`` (about 0.55 em per character)."""
    per = max(10, int(width / (0.6 * size)))
    lines, cur = [], ""
    for word in text.split():
        if cur and len(cur) + 1 + len(word) > per:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return lines + ([cur] if cur else [])


class _Axes:
    """A plot area at (x, y, w, h) in pixels with data limits; maps data to pixels and draws
    ticks, grid, labels and title."""

    def __init__(self, cv: _Canvas, x, y, w, h, xlim, ylim, xlog=False, ylog=False):
        self.cv, self.x, self.y, self.w, self.h = cv, x, y, w, h
        self.xlim, self.ylim, self.xlog, self.ylog = xlim, ylim, xlog, ylog

    def _f(self, v, lim, log):
        lo, hi = lim
        if log:
            v, lo, hi = math.log10(max(v, 1e-300)), math.log10(lo), math.log10(hi)
        return (v - lo) / (hi - lo) if hi != lo else 0.5

    def px(self, v) -> float:
        return self.x + self.w * self._f(v, self.xlim, self.xlog)

    def py(self, v) -> float:
        return self.y + self.h * (1 - self._f(v, self.ylim, self.ylog))

    @staticmethod
    def margin(yticks, size=11) -> float:
        """The room left of the plot area that its y tick labels and the y axis title take (pixels)."""
        widest = max((_text_width(lab, size) for _, lab in (yticks or [])), default=0.0)
        return widest + 10 + 24

    def frame(self, title="", xlabel="", ylabel="", xticks=None, yticks=None, grid=True, size=11) -> None:
        cv = self.cv
        widest = max((_text_width(lab, size) for _, lab in (yticks or [])), default=0.0)
        for v, lab in (yticks or []):
            y = self.py(v)
            if grid:
                cv.line(self.x, y, self.x + self.w, y, stroke=_GRID)
            cv.line(self.x - 4, y, self.x, y)
            cv.text(self.x - 6, y + 4, lab, size=size, anchor="end")
        for v, lab in (xticks or []):
            x = self.px(v)
            cv.line(x, self.y + self.h, x, self.y + self.h + 4)
            cv.text(x, self.y + self.h + 16, lab, size=size, anchor="middle")
        cv.rect(self.x, self.y, self.w, self.h, stroke="#555")
        if title:  # a long title gets a smaller font, never cut off at the figure's edge (at most the frame + 40 px)
            fit = min(12.5, max(8.0, 12.5 * (self.w + 40) / max(_text_width(title, 12.5) * 1.05, 1.0)))
            cv.text(self.x + self.w / 2, self.y - 8, title, size=round(fit, 1), anchor="middle", weight="600")
        if xlabel:
            cv.text(self.x + self.w / 2, self.y + self.h + 34, xlabel, size=12, anchor="middle")
        if ylabel:  # beside the widest tick label, never over it
            cv.text(self.x - widest - 18, self.y + self.h / 2, ylabel, size=12, anchor="middle", rotate=-90)


def _linear_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    return [float(t) for t in MaxNLocator(n).tick_values(lo, hi) if lo - 1e-9 <= t <= hi + 1e-9]


def _log_ticks(lo: float, hi: float) -> list[float]:
    ticks = [float(t) for t in LogLocator(base=10).tick_values(lo, hi) if lo * 0.999 <= t <= hi * 1.001]
    if len(ticks) < 3:
        ticks = [float(t) for t in LogLocator(base=10, subs=(1.0, 2.0, 5.0)).tick_values(lo, hi)
                 if lo * 0.999 <= t <= hi * 1.001]
    return ticks


def _byte_ticks(lo: float, hi: float, most: int = 7) -> list[tuple[float, str]]:
    """Ticks at powers of two bytes in [lo, hi], each labelled in its own unit (512 KiB, 2 MiB)."""
    k = np.arange(math.ceil(math.log2(max(lo, 1.0))), math.floor(math.log2(max(hi, 1.0))) + 1)
    k = k[::max(1, math.ceil(len(k) / most))]
    return [(float(2.0 ** i), floor_text(int(2 ** i))) for i in k]


def _pe_ticks(pes: int) -> list[int]:
    return list(range(pes)) if pes <= 16 else list(range(0, pes, max(1, pes // 8)))


# ------------------------------------------------------------------------------------------ colours

class _Norm:
    """Bytes to [0, 1]: linear from 0, or logarithmic when the non-zero values span over 100x
    (the segment map's colour scale)."""

    def __init__(self, values: np.ndarray):
        nz = values[values > 0]
        self.log = bool(nz.size and nz.max() / nz.min() > 100)
        self.lo = float(nz.min()) if self.log else 0.0
        self.hi = max(float(nz.max()) if nz.size else 0.0, 1e-12)

    def __call__(self, v):
        v = np.asarray(v, dtype=np.float64)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = (np.log(np.maximum(v, self.lo)) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        else:
            out = v / self.hi
        return np.clip(out, 0.0, 1.0)

    def ticks(self) -> list[float]:
        return _log_ticks(self.lo, self.hi) if self.log else _linear_ticks(0.0, self.hi)


def _colorbar(cv: _Canvas, x, y, w, h, cmap_name: str, norm: _Norm, label: str, gid: str) -> None:
    """A vertical colour bar at (x, y), ``label`` written above it (wrapped to 120 px)."""
    lines = _wrap(label, 11.5, 120)
    for i, ln in enumerate(lines):
        cv.text(x, y - 11 - 14 * (len(lines) - 1 - i), ln, size=11.5)  # clear of a tick's text at the top
    cmap = colormaps[cmap_name]
    stops = "".join(f"<stop offset='{i / 16:.4f}' stop-color='{_hex(cmap(i / 16))}'/>" for i in range(17))
    cv.add(f"<defs><linearGradient id='{gid}' x1='0' y1='1' x2='0' y2='0'>{stops}</linearGradient></defs>")
    cv.rect(x, y, w, h, fill=f"url(#{gid})", stroke="#555")
    ticks = norm.ticks()
    labels = [_label(t) for t in ticks] if norm.log else [lab for _, lab in _tick_labels(ticks)]
    for t, lab in zip(ticks, labels):
        ty = y + h * (1 - float(norm(t)))
        cv.line(x + w, ty, x + w + 4, ty)
        cv.text(x + w + 6, ty + 4, lab, size=10.5)


def floor_text(n: int) -> str:
    """A floor in the binary unit that suits it, shortest form up to 6 digits: 2 MiB, 512 KiB,
    1.5 MiB, 0 B (:func:`byte_label`)."""
    return byte_label(n, 6)




def _legend(cv: _Canvas, x, y, items, max_width: float = 1e9) -> float:
    """Legend entries in rows from (x, y), wrapping at ``max_width``; returns the height used."""
    cx, yy = x, y + 12
    for kind, colour, label in items:
        w = 30 + len(label) * 0.6 * 11.5 + 14
        if cx > x and cx + w > x + max_width:
            cx, yy = x, yy + 17
        _legend_item(cv, cx, yy, kind, colour, label)
        cx += w
    return yy - y + 8


def _legend_item(cv: _Canvas, x, yy, kind, colour, label) -> None:
    if kind == "rect":
        cv.rect(x + 6, yy - 8, 16, 10, fill=colour)
    elif kind == "dot":
        cv.add(f"<circle cx='{_num(x + 14)}' cy='{_num(yy - 3)}' r='3.5' fill='{colour}'/>")
    elif kind == "tick":
        cv.line(x + 6, yy - 3, x + 22, yy - 3, stroke=colour, sw=2.2)
    elif kind == "dash":
        cv.line(x + 6, yy - 3, x + 22, yy - 3, stroke=colour, sw=1.2, dash="4 3")
    elif kind == "dashdot":
        cv.line(x + 6, yy - 3, x + 22, yy - 3, stroke=colour, sw=2, dash="7 3 2 3")
    elif kind == "line":
        cv.line(x + 6, yy - 3, x + 22, yy - 3, stroke=colour, sw=2)
    elif kind == "star":
        cv.text(x + 14, yy + 2, "\u2605", size=13, anchor="middle", color=colour)
    cv.text(x + 28, yy + 1, label, size=11.5)


