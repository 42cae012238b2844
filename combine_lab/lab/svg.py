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

- matplotlib's own SVG output (issue 30 item 4; ``benchmarks/bench_lab.py``, ``bench_matplotlib_svg``:
  the three views, segment map, plane bytes and modelled time over floors, ``savefig(format="svg")``
  with the browser's text, as :func:`combine_lab.lab.plots.figure_svg` writes any figure; 2 shared
  cores, median over 7-9 redraws, three runs): 168-220 ms with the figures built once and their
  artists updated, 290-398 ms built anew, against 14.7-15.1 ms for these drawings of the same
  views: 3-4x over the 50 ms budget in place (6-8x built anew) before the page gets the text,
  for the same views (the segment map's 512 x 64 cells as one image, 128 bars, 64 markers twice,
  one step line).

So the live views stay SVG strings, and these three views only: every other figure of the lab is
matplotlib's (:mod:`.plots`, :mod:`.sweep_plots`), where nothing is redrawn while a slider moves. The
views stay SVG strings, drawn in milliseconds at the size they are shown (pixels)
with the browser's own text (sharp at any pixel density). A grid of many cells (the stacked
segment map of more than :data:`MAX_PANELS` PEs) is one PNG (Pillow) with one pixel per cell,
scaled with ``image-rendering: pixelated``: crisp blocks, never blurred; its cells' hover comes from
the segments it carries (:func:`~combine_lab.lab.segments.segment_cells_data`), read by the app's
bridge (``static/bridge.js``): at pes 64 epp 8 (32,768 cells) the map's text grows from 85,180 to
178,172 characters (deepseek, bs 4096: counts in uint16), 0.4 ms to encode (``bench_lab.py``'s plan
+ segment map + plane bytes redraw: 15.1-15.4 ms median against 14.5-14.9 ms without, two runs
each), no change in the page's redraw (innerHTML and layout 1.7-2.7 ms median either way,
chromium), 9-10 ms to decode at the first hover of a drawing and 0.1 ms a pointer move after it.

Each ``*_svg`` function returns one ``<svg>`` element as text (class ``cl-figure`` plus its own),
with a title, axis labels and units; :func:`combine_lab.lab.plots.segment_map`,
:func:`~combine_lab.lab.plots.plane_bytes_plot` and :func:`~combine_lab.lab.plots.modelled_floors`
wrap them in an :class:`SvgFigure`.
"""

from __future__ import annotations

import base64
import math

import numpy as np
from matplotlib import colormaps

# the drawing kit, and the names every figure shares (units, colours, the PE's role), named here as before
from .svg_parts import (ANNOTATE_CELLS, byte_label, byte_unit, EMPTY_COLOR, floor_text, largest_remote_segment, MAX_PANELS,
                        MIN_CELL_PX, PE_ROLE, plan_arrays, png_cells, SDMA_COLOR, SvgFigure, WIDTH, _Axes,
                        _byte_ticks, _Canvas, _colorbar, _hex, _INK, _legend, _linear_ticks, _MTE_COLOR,
                        _Norm, _e, _num, _pe_ticks, _text_width, _tick_labels, _wrap)
from .segments import segment_cells_data, segment_texts

__all__ = ["SvgFigure", "segment_map_svg", "plane_bytes_svg", "modelled_floors_svg", "png_cells", "floor_text",
           "WIDTH", "byte_unit", "byte_label", "plan_arrays", "largest_remote_segment", "SDMA_COLOR", "EMPTY_COLOR",
           "PE_ROLE", "MAX_PANELS", "ANNOTATE_CELLS", "MIN_CELL_PX"]


# ------------------------------------------------------------------------------------- segment map

def segment_map_svg(plan, dtype: str = "", width: int = WIDTH, max_panels: int = MAX_PANELS) -> str:
    """The segment map of ``plan`` (:class:`combine_lab.planning.planner.Plan`): per PE (the expert
    owner, which sends each segment back to its src_rank), local_expert x src_rank, colour = payload
    bytes. Up to ``max_panels`` PEs: one panel each, row counts written in the cells when there is
    room, SDMA segments outlined in red, empty ones grey. More PEs: one image whose rows are
    (PE, local_expert), MTE segments in blues and SDMA segments in reds, PEs separated by white
    lines. ``dtype`` goes in the title. Each cell says its segment on hover
    (:func:`combine_lab.lab.segments.segment_text`): a ``<title>`` per cell in the panels; the
    stacked image (class ``cl-cells``) carries :func:`~combine_lab.lab.segments.segment_cells_data`
    as ``data-*`` attributes, from which the app's bridge writes the same sentence (docs/lab.md
    section 4)."""
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
        return _panels(cv, scaled, rows, sdma, norm, unit, pes, epp, width, top, title, data, segment_texts(plan))
    return _stacked(cv, scaled, sdma, norm, unit, pes, epp, width, top, title, data, segment_cells_data(plan))


def _panels(cv, scaled, rows, sdma, norm, unit, pes, epp, width, top, title, data, tips) -> str:
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
        for le in range(epp):  # transparent, over the cells: what each holds and why its plane, on hover
            for s in range(pes):
                cv.add(f"<rect x='{_num(ox + s * cell_w)}' y='{_num(oy + le * cell_h)}' width='{_num(cell_w)}' "
                       f"height='{_num(cell_h)}' fill='none' pointer-events='all' class='cl-cell' data-pe='{d}' "
                       f"data-le='{le}' data-src='{s}'><title>{_e(tips[d, le, s])}</title></rect>")
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


def _stacked(cv, scaled, sdma, norm, unit, pes, epp, width, top, title, data, cells) -> str:
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
    x0, y0 = left, top + 40  # room for the colour bars' labels
    # too many cells for a <title> each: the image carries the plan's segments, the app's bridge says a cell's
    # segment_text on hover (combine_lab/lab/static/bridge.js)
    hover = "".join(f" data-{k}='{_e(v)}'" for k, v in (cells or {}).items())
    cv.add(f"<image x='{x0}' y='{y0}' width='{img_w}' height='{_num(img_h)}' preserveAspectRatio='none' "
           f"class='cl-cells'{hover} style='image-rendering:pixelated' "
           f"href='data:image/png;base64,{base64.b64encode(png).decode()}'/>")
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
    ax2.frame(title="Decision thresholds per PE (decision-rule.md §1)", xlabel=f"PE ({PE_ROLE})",
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
