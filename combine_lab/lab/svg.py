"""The lab's figures of a plan and of the modelled time, drawn once, as SVG: the segment map,
the plane bytes and thresholds, and the modelled time over SDMA floors. The tuning app shows
them inline, the notebooks display them (:class:`SvgFigure` has ``_repr_svg_``) and
:func:`combine_lab.lab.plots.save_figure` saves them as PNG, rasterised by resvg
(:meth:`SvgFigure.png`): one drawing per view, wherever it is shown.

Why SVG and not a plotting library that updates in place in the browser (issue 18; measured by
``benchmarks/bench_lab.py --plot-libraries`` and ``benchmarks/plot_candidates.py browser``, on
pes 64, bs 4096, topk 8, expert_per_pe 8, h 7168, int32, deepseek, 2 shared cores: plan + segment
map + plane bytes redraw, in a kernel, median [quartiles] over 9-14 redraws, three runs):

- this SVG: 12.9-22.0 ms [12.7-23.0] in the kernel; in voila (preheated kernel, as
  ``combine-lab app``) the page showed in 1.8-2.8 s, and a slider step was redrawn in the page
  in 100-124 ms (median of 8, kernel and browser);
- plotly 7 FigureWidget (batch_update of two heatmaps, bars, markers): 27.3-27.6 ms [25.5-30.6]
  in the kernel, but in voila the page took 5.1 s with two FigureWidgets and 6.7-15.6 s with four
  (each carries plotly's 5 MB bundle in its own state: over the app's 5 s), the traces added
  after the widget was built never reached a page that connected later (empty axes: its synced
  state is the figure as built, changes are one-off messages), a slider step took 140 ms in the
  page, and a PNG needs kaleido driving a Chrome (2.2 s the first, 0.3 s each after);
- bqplot (HeatMap colours, Bars, Scatter under hold_sync): 4.9-8.3 ms [4.5-13.8] in the kernel,
  but it makes no PNG without a browser page showing it (the notebooks save PNGs headless);
- ipympl (the same views in matplotlib on ipympl canvases, drawn in place: Agg and the PNG it
  sends): 125-203 ms [124-207]: over the 50 ms budget.

So the live views stay SVG strings, drawn in milliseconds at the size they are shown (pixels)
with the browser's own text (sharp at any pixel density). A grid of many cells (the stacked
segment map of more than :data:`MAX_PANELS` PEs) is one PNG (Pillow) with one pixel per cell,
scaled with ``image-rendering: pixelated``: crisp blocks, never blurred.

Each ``*_svg`` function returns one ``<svg>`` element as text (class ``cl-figure`` plus its own),
with a title, axis labels and units; :func:`combine_lab.lab.plots.segment_map`,
:func:`~combine_lab.lab.plots.plane_bytes_plot` and :func:`~combine_lab.lab.plots.modelled_floors`
wrap them in an :class:`SvgFigure`.
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


__all__ = ["SvgFigure", "segment_map_svg", "plane_bytes_svg", "modelled_floors_svg", "png_cells", "floor_text",
           "WIDTH", "byte_unit", "byte_label", "plan_arrays", "largest_remote_segment", "SDMA_COLOR", "EMPTY_COLOR",
           "PE_ROLE", "MAX_PANELS", "ANNOTATE_CELLS", "MIN_CELL_PX"]

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
    step = min((abs(b - a) for a, b in zip(ticks, ticks[1:]) if b != a), default=abs(ticks[0]) or 1.0)
    digits = max(0, -int(math.floor(math.log10(step)))) if step < 1 else 0
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
            raise ParameterError(f"format={format!r}: must be 'png' or 'svg'")
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
        if title:
            cv.text(self.x + self.w / 2, self.y - 8, title, size=12.5, anchor="middle", weight="600")
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
        cv.text(x, y - 6 - 14 * (len(lines) - 1 - i), ln, size=11.5)
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


# ------------------------------------------------------------------------------------- segment map

def segment_map_svg(plan, dtype: str = "", width: int = WIDTH, max_panels: int = MAX_PANELS) -> str:
    """The segment map of ``plan`` (:class:`combine_lab.planning.planner.Plan`): per PE (the expert
    owner, which sends each segment back to its src_rank), local_expert x src_rank, colour = payload
    bytes. Up to ``max_panels`` PEs: one panel each, row counts written in the cells when there is
    room, SDMA segments outlined in red, empty ones grey. More PEs: one image whose rows are
    (PE, local_expert), MTE segments in blues and SDMA segments in reds, PEs separated by white
    lines. ``dtype`` goes in the title."""
    nbytes, rows, sdma = plan_arrays(plan)
    pes, epp = plan.pes, plan.expert_per_pe
    div, unit = byte_unit(nbytes.max(initial=0.0))
    scaled = nbytes / div
    norm = _Norm(scaled)
    title = (f"Segment map, {plan.variant}, h {plan.h}{' ' + dtype if dtype else ''}, SDMA floor "
             f"{floor_text(plan.min_sdma_bytes)}: payload per segment each PE sends back to src_rank")
    data = {"h": plan.h, "floor": plan.min_sdma_bytes, "sdma-segments": int(sdma.sum()), "pes": pes}
    cv = _Canvas()
    lines = _wrap(title, 13, width - 20)
    for i, ln in enumerate(lines):
        cv.text(width / 2, 18 + 17 * i, ln, size=13, anchor="middle", weight="600")
    top = 18 + 17 * len(lines) + 8
    if pes <= max_panels:
        return _panels(cv, scaled, rows, sdma, norm, unit, pes, epp, width, top, title, data)
    return _stacked(cv, scaled, sdma, norm, unit, pes, epp, width, top, title, data)


def _panels(cv, scaled, rows, sdma, norm, unit, pes, epp, width, top, title, data) -> str:
    bar_w = 130
    first_m, other_m, right_m = 62, 28, 12  # the first panel of a row carries the y label

    def grid_width(ncols: int) -> float:
        avail = width - bar_w - first_m - (ncols - 1) * other_m - ncols * right_m
        return min(avail / ncols, max(260.0, MIN_CELL_PX * 1.25 * pes))

    # fewer panels per row until a cell is wide enough to read (pes 8 at 860 px: two per row)
    ncols = min(pes, 4)
    while ncols > 1 and grid_width(ncols) / pes < MIN_CELL_PX:
        ncols -= 1
    nrows = math.ceil(pes / ncols)
    grid_w = grid_width(ncols)
    cell_w = grid_w / pes
    cell_h = max(22.0, min(cell_w, 40.0, 260.0 / epp))
    ph = 40 + epp * cell_h + 44
    top += 14  # room for the colour bar's label
    cmap = colormaps["viridis"]
    colours = cmap(norm(scaled))
    annotate = epp * pes <= ANNOTATE_CELLS
    font = 12.5 if cell_w >= 44 else 11 if cell_w >= 30 else 9.5
    sdma_w = 2.5 if min(cell_w, cell_h) >= 24 else 1.5  # an outline, not a filled cell
    for d in range(pes):
        r, c = divmod(d, ncols)
        ox = first_m + c * (grid_w + right_m + other_m)
        oy = top + r * ph + 36
        ax = _Axes(cv, ox, oy, grid_w, epp * cell_h, (-0.5, pes - 0.5), (epp - 0.5, -0.5))
        for le in range(epp):
            for s in range(pes):
                x, y = ox + s * cell_w, oy + le * cell_h
                empty = rows[d, le, s] == 0
                cv.rect(x, y, cell_w, cell_h, fill=EMPTY_COLOR if empty else _hex(colours[d, le, s]),
                        stroke="#8c8c8c" if empty else "none", sw=0.6)
                # a count only where it fits its cell, with a margin: never run into the next one
                fits = _text_width(str(rows[d, le, s]), font) + 6 <= cell_w and font + 4 <= cell_h
                if annotate and not empty and fits:
                    dark = float(norm(scaled[d, le, s])) < 0.6
                    cv.text(x + cell_w / 2, y + cell_h / 2 + font * 0.35, rows[d, le, s], size=font, anchor="middle",
                            weight="600", color="white" if dark else "black", cls="cl-count")
        for le in range(epp):
            for s in range(pes):
                if sdma[d, le, s]:
                    inset = sdma_w / 2 + 0.5
                    cv.rect(ox + s * cell_w + inset, oy + le * cell_h + inset, cell_w - 2 * inset,
                            cell_h - 2 * inset, stroke=SDMA_COLOR, sw=sdma_w,
                            extra=f" class='cl-sdma-cell' data-pe='{d}'")
        ax.frame(xlabel="src_rank", ylabel="local_expert" if c == 0 else "",
                 xticks=[(s, str(s)) for s in _pe_ticks(pes)],
                 yticks=[(le, str(le)) for le in range(epp)] if epp <= 16 else
                 [(le, str(le)) for le in range(0, epp, max(1, epp // 8))], grid=False)
        cv.text(ox + grid_w / 2, oy - 20, f"PE {d}", size=12.5, anchor="middle", weight="600")
        cv.text(ox + grid_w / 2, oy - 6, f"({PE_ROLE})", size=11, anchor="middle", color="#444")
    bx = width - bar_w + 10
    bh = max(min(nrows * ph - 70, 220), 60)
    _colorbar(cv, bx, top + 36, 16, bh, "viridis", norm, f"payload ({unit}); text = rows", "cl-grad-v")
    ly = top + nrows * ph + 2
    cv.rect(10, ly, 22, 14, stroke=SDMA_COLOR, sw=3)
    cv.text(38, ly + 12, "SDMA segment", size=12)
    cv.rect(160, ly, 22, 14, fill=EMPTY_COLOR, stroke="#8c8c8c")
    cv.text(188, ly + 12, "empty segment (0 rows)", size=12)
    cv.text(360, ly + 12, "src_rank: the PE the rows return to", size=12, color="#444")
    return cv.render(width, ly + 24, "cl-segment-map", title, data)


def _stacked(cv, scaled, sdma, norm, unit, pes, epp, width, top, title, data) -> str:
    n = pes * epp
    flat = scaled.reshape(n, pes)
    mask = sdma.reshape(n, pes)
    f = norm(flat)
    blues, reds = colormaps["Blues"], colormaps["Reds"]
    rgb = np.where(mask[..., None], reds(f)[..., :3], blues(f)[..., :3])
    rgb[flat == 0] = (0.93, 0.93, 0.93)
    png = png_cells(np.round(rgb * 255).astype(np.uint8))
    left, img_w = 84, width - 84 - 250
    img_h = float(min(520, max(260, 2 * n)))
    x0, y0 = left, top + 34  # room for the colour bars' labels
    cv.add(f"<image x='{x0}' y='{y0}' width='{img_w}' height='{_num(img_h)}' preserveAspectRatio='none' "
           f"style='image-rendering:pixelated' href='data:image/png;base64,{base64.b64encode(png).decode()}'/>")
    ax = _Axes(cv, x0, y0, img_w, img_h, (-0.5, pes - 0.5), (n - 0.5, -0.5))
    for d in range(1, pes):
        y = ax.py(d * epp - 0.5)
        cv.line(x0, y, x0 + img_w, y, stroke="white", sw=0.6)
    step = max(1, pes // 8)
    ax.frame(xlabel="src_rank (PE the rows return to)", ylabel=f"PE ({PE_ROLE}; {epp} local experts each)",
             xticks=[(s, str(s)) for s in range(0, pes, step)],
             yticks=[(d * epp + (epp - 1) / 2, str(d)) for d in range(0, pes, step)], grid=False)
    bx = x0 + img_w + 24
    _colorbar(cv, bx, y0, 14, img_h, "Blues", norm, f"MTE segments ({unit})", "cl-grad-b")
    _colorbar(cv, bx + 120, y0, 14, img_h, "Reds", norm, f"SDMA segments ({unit}): {int(mask.sum())}", "cl-grad-r")
    return cv.render(width, y0 + img_h + 44, "cl-segment-map", title, data)


# ------------------------------------------------------------------------------- plane bytes, rule

def plane_bytes_svg(plan, width: int = WIDTH) -> str:
    """Two panels for ``plan``: the payload each PE would send on each plane (stacked bars, SDMA
    share in the title), and the decision thresholds per PE (docs/decision-rule.md#1-the-rule): its largest
    remote segment, its remote average (which a segment must strictly exceed) and the SDMA floor."""
    t = plan.totals
    pes = plan.pes
    largest = largest_remote_segment(plan)
    mte = t["mte_bytes"].to_numpy(dtype=float)
    sd = t["sdma_bytes"].to_numpy(dtype=float)
    avg = t["remote_avg_segment_bytes"].to_numpy(dtype=float)
    share = float(sd.sum()) / max(float((mte + sd).sum()), 1.0)
    cv = _Canvas()
    pw = width / 2
    top, ph = 46, 200
    xt = [(p, str(p)) for p in _pe_ticks(pes)]

    div, unit = byte_unit(float((mte + sd).max(initial=0.0)))
    ymax = max(float((mte + sd).max(initial=0.0)) / div, 1e-9) * 1.08
    ax = _Axes(cv, 70, top, pw - 90, ph, (-0.6, pes - 0.4), (0.0, ymax))
    ax.frame(title=f"Payload per plane (SDMA share {100 * share:.1f} %)", xlabel=f"PE ({PE_ROLE})",
             ylabel=f"payload ({unit})", xticks=xt, yticks=_tick_labels(_linear_ticks(0, ymax)))
    bw = ax.w / pes * 0.8
    for p in range(pes):
        x = ax.px(p) - bw / 2
        ym, ys = ax.py(mte[p] / div), ax.py((mte[p] + sd[p]) / div)
        cv.rect(x, ym, bw, ax.py(0) - ym, fill=_MTE_COLOR)
        if sd[p] > 0:
            cv.rect(x, ys, bw, ym - ys, fill=SDMA_COLOR)
    leg1 = _legend(cv, ax.x, top + ph + 42, [("rect", _MTE_COLOR, "MTE"), ("rect", SDMA_COLOR, "SDMA")], ax.w)

    div2, unit2 = byte_unit(max(float(largest.max(initial=0.0)), float(plan.min_sdma_bytes), float(avg.max(initial=0))))
    ymax2 = max(float(largest.max(initial=0.0)), float(plan.min_sdma_bytes), float(avg.max(initial=0.0))) / div2
    ymax2 = max(ymax2, 1e-9) * 1.12
    ax2 = _Axes(cv, pw + 70, top, pw - 90, ph, (-0.6, pes - 0.4), (0.0, ymax2))
    ax2.frame(title="Decision thresholds per PE (docs/decision-rule.md#1-the-rule)", xlabel=f"PE ({PE_ROLE})",
              ylabel=f"segment payload ({unit2})", xticks=xt, yticks=_tick_labels(_linear_ticks(0, ymax2)))
    fy = ax2.py(plan.min_sdma_bytes / div2)
    cv.line(ax2.x, fy, ax2.x + ax2.w, fy, stroke="#777", sw=1.2, dash="5 4")
    tick = max(min(ax2.w / pes * 0.7, 14), 3)
    r = max(min(ax2.w / pes * 0.3, 4), 1.6)
    for p in range(pes):
        x = ax2.px(p)
        ya = ax2.py(avg[p] / div2)
        cv.line(x - tick / 2, ya, x + tick / 2, ya, stroke=SDMA_COLOR, sw=2.2)
        cv.add(f"<circle cx='{_num(x)}' cy='{_num(ax2.py(largest[p] / div2))}' r='{_num(r)}' fill='{_INK}'/>")
    leg2 = _legend(cv, ax2.x - 40, top + ph + 42, [("dot", _INK, "largest remote segment"),
                                                   ("tick", SDMA_COLOR, "remote average (must be exceeded)"),
                                                   ("dash", "#777", f"SDMA floor {plan.min_sdma_bytes:,} B")],
                   ax2.w + 40)
    return cv.render(width, top + ph + 42 + max(leg1, leg2) + 4, "cl-plane-bytes",
                     "Payload per plane and decision thresholds per PE", {"sdma-share": f"{share:.4f}"})


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


# ------------------------------------------------------------------------------ modelled over floors

def modelled_floors_svg(curve, classic_us: float, floor: int | None, floor_us: float | None, caption: str,
                        best: int | None = None, stale: bool = False, width: int = WIDTH,
                        metric: str = "comm_only", what_if: str | None = None) -> str:
    """Modelled ``metric`` (the slowest PE's CoreMaxTime, us) against the SDMA floor.

    ``curve``: a :class:`combine_lab.model.suggest.Suggestion` curve (threshold_bytes, -1 = never
    SDMA; modelled_us), or None when it is not computed for these inputs: then only the classic
    time and the current floor are drawn. The modelled time is a step function of the floor:
    floor f sends by SDMA the above-average segments of at least f bytes. ``floor``, ``floor_us``:
    the current floor and its modelled time (a marker on the curve; None: no marker); ``best``: the suggested
    floor (a star), -1 for never; ``caption``: the model's "modelled on ..." line, shown under
    the title; ``stale``: the curve belongs to other inputs (drawn grey, said in the title);
    ``what_if``: a what-if mode whose ``<what_if>_us`` column of the curve is drawn too (dash-dot:
    one SDMA call per segment, not built)."""
    cv = _Canvas()
    title = f"Modelled {metric} against the SDMA floor (modelled, not measured)"
    cv.text(width / 2, 18, title, size=13, anchor="middle", weight="600")
    cap = _wrap(caption, 11.5, width - 40)
    for i, ln in enumerate(cap):
        cv.text(width / 2, 36 + 15 * i, ln, size=11.5, anchor="middle", color="#444", cls="cl-caption")
    top = 36 + 15 * len(cap) + 14
    pts, alt = [], []
    if curve is not None and len(curve):
        th = curve["threshold_bytes"].to_numpy()
        us = curve["modelled_us"].to_numpy(dtype=float)
        pts = [(int(t), float(u)) for t, u in zip(th, us) if t >= 0]
        if what_if and f"{what_if}_us" in curve:
            alt = [(int(t), float(u)) for t, u in zip(th, curve[f"{what_if}_us"].to_numpy(dtype=float)) if t >= 0]
    sizes = [t for t, _ in pts if t > 0] + ([floor] if floor is not None and floor > 0 else [])
    lo = min(sizes) / 2 if sizes else 2 ** 20 / 4
    hi = max(sizes) * 2 if sizes else 2 ** 24
    lo = max(lo, 1.0)
    ys = [classic_us] + ([floor_us] if floor is not None else []) + [u for _, u in pts] + [u for _, u in alt]
    ys = [y for y in ys if np.isfinite(y)]
    ymin, ymax = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = max((ymax - ymin) * 0.12, ymax * 0.02, 1e-6)
    ylim = (max(0.0, ymin - pad), ymax + pad)
    never_x = width - 60
    yticks = _tick_labels(_linear_ticks(*ylim))
    left = max(84.0, 12 + _Axes.margin(yticks))
    ax = _Axes(cv, left, top, never_x - left - 40, 200, (lo, hi), ylim, xlog=True)
    ax.frame(xlabel="SDMA floor min_sdma_bytes (log scale); right: never SDMA, the classic plan",
             ylabel=f"modelled {metric} (us)", xticks=_byte_ticks(lo, hi), yticks=yticks)
    # "never SDMA" is the classic plan: a column of its own at the right
    nx = never_x
    cv.line(ax.x + ax.w, ax.py(classic_us), nx, ax.py(classic_us), stroke="#7f7f7f", sw=1.5, dash="5 4")
    cv.add(f"<circle cx='{nx}' cy='{_num(ax.py(classic_us))}' r='4' fill='#7f7f7f'/>")
    cv.text(nx, ax.y + ax.h + 16, "never", size=11, anchor="middle")
    cv.line(ax.x, ax.py(classic_us), ax.x + ax.w, ax.py(classic_us), stroke="#7f7f7f", sw=1.2, dash="5 4")
    colour = "#9a9a9a" if stale else "#1f77b4"

    def steps(points, stroke, dash, cls):
        # step: floors in (t_{i+1}, t_i] give t_i's plan; above the largest, the classic plan
        d, prev_x = [], ax.x
        for t, u in sorted(points):
            x, y = ax.px(t), ax.py(u)
            d.append(f"M{_num(prev_x)},{_num(y)} L{_num(x)},{_num(y)}")
            prev_x = x
        d.append(f"M{_num(prev_x)},{_num(ax.py(classic_us))} L{_num(ax.x + ax.w)},{_num(ax.py(classic_us))}")
        dashed = f" stroke-dasharray='{dash}'" if dash else ""
        cv.add(f"<path d='{' '.join(d)}' fill='none' stroke='{stroke}' stroke-width='2'{dashed} class='{cls}'/>")

    if alt:
        steps(alt, "#9467bd", "7 3 2 3", "cl-what-if")
    if pts:
        steps(pts, colour, "", "cl-curve")
        for t, u in sorted(pts):
            cv.add(f"<circle cx='{_num(ax.px(t))}' cy='{_num(ax.py(u))}' r='2.6' fill='{colour}'/>")
    if floor is not None:
        fx = ax.px(min(max(floor, lo), hi)) if floor <= hi else nx
        cv.line(fx, ax.y, fx, ax.y + ax.h, stroke=SDMA_COLOR, sw=1.5)
        cv.add(f"<circle cx='{_num(fx)}' cy='{_num(ax.py(floor_us))}' r='5.5' fill='none' stroke='{SDMA_COLOR}' "
               f"stroke-width='2.5' class='cl-current'/>")
    if best is not None and not stale:
        bx = nx if best < 0 else ax.px(best)
        bu = classic_us if best < 0 else dict(pts).get(best, float("nan"))
        if np.isfinite(bu):
            cv.text(bx, ax.py(bu) + 6, "\u2605", size=18, anchor="middle", color="#e6a100", cls="cl-best")
    items = [("dash", "#7f7f7f", f"classic (MTE only): {classic_us:,.1f} us")]
    if floor is not None:
        items.append(("line", SDMA_COLOR, f"current floor {floor:,} B: {floor_us:,.1f} us"))
    if pts:
        items.insert(0, ("line", colour, "doubleplane at each floor (the kernel: one SDMA call per row)"
                         + (" (other inputs)" if stale else "")))
    if alt:
        items.insert(1, ("dashdot", "#9467bd", "what-if: one SDMA call per segment, no layout step"))
    if best is not None and not stale:
        items.append(("star", "#e6a100", "never SDMA ties for best: no floor is faster" if best < 0
                      else "suggested floor"))
    leg = _legend(cv, ax.x, top + 200 + 42, items, width - ax.x - 10)
    return cv.render(width, top + 200 + 42 + leg + 4, "cl-modelled", title,
                     {"floor": "" if floor is None else floor, "floor-us": "" if floor is None else f"{floor_us:.3f}",
                      "classic-us": f"{classic_us:.3f}",
                      "stale": int(stale)})
