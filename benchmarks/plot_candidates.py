"""The tuning app's plan redraw drawn by each candidate plotting library, for issue 18's choice.

Each ``setup_<name>(plan)`` builds the plan views (segment map of pes x expert_per_pe x pes cells:
MTE in blues, SDMA in reds, PEs separated; plane bytes per PE; the thresholds) once and returns
``(redraw, views)``: ``redraw(plan)`` updates them in place, as the app would on a control change,
and pushes the change to the page when there is one (in a kernel, its comm messages are built and
sent). Candidates:

- ``svg``: this lab's SVG strings (:mod:`combine_lab.lab.svg`) in one ipywidgets HTML value;
- ``plotly``: two FigureWidgets, updated with ``batch_update`` (two heatmaps, bars, markers, a floor
  line);
- ``bqplot``: HeatMap colours, Bars and Scatter y under ``hold_sync``;
- ``ipympl``: the same views in matplotlib on ipympl canvases, drawn in place (Agg and the PNG
  ipympl sends when the page asks for the frame).

Run in a kernel (what the app pays, Python side): ``python benchmarks/bench_lab.py --skip-notebooks
--plot-libraries`` (the libraries are not dependencies of the lab; put them on PYTHONPATH, e.g.
``pip install --target /tmp/plotbench --no-deps plotly anywidget psygnal narwhals bqplot bqscales
traittypes ipympl`` then ``PYTHONPATH=/tmp/plotbench``). In the browser (voila, page load and slider
to redrawn page): ``python benchmarks/plot_candidates.py browser svg plotly`` (needs Debian's
chromium and playwright; JUPYTER_PATH must hold the libraries' labextensions).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from combine_lab.case.case import make_case
from combine_lab.case.spec import CaseSpec
from combine_lab.lab import svg
from combine_lab.lab.plots import byte_unit, largest_remote_segment, plan_arrays
from combine_lab.planning.planner import plan_counts

SHAPE = dict(pes=64, bs=4096, h=7168, topk=8, expert_per_pe=8)
ROUTING = "deepseek"
CANDIDATES = ("svg", "plotly", "bqplot", "ipympl")
#: the module each candidate needs beyond the lab
NEEDS = {"svg": "ipywidgets", "plotly": "anywidget", "bqplot": "bqplot", "ipympl": "ipympl"}


def setup_svg(p):
    import ipywidgets as w
    html = w.HTML()

    def redraw(p):
        html.value = svg.segment_map_svg(p, "int32_t") + svg.plane_bytes_svg(p)
        return html
    redraw(p)
    return redraw, (html,)


def _stacked_arrays(p):
    """The stacked map's cells: value (log10 when sizes span over 100x), SDMA mask, unit."""
    nbytes, _rows, sdma = plan_arrays(p)
    pes, epp = p.pes, p.expert_per_pe
    div, unit = byte_unit(nbytes.max(initial=0.0))
    flat = nbytes.reshape(pes * epp, pes) / div
    mask = sdma.reshape(pes * epp, pes)
    nz = flat[flat > 0]
    log = bool(nz.size and nz.max() / nz.min() > 100)
    z = np.where(flat > 0, np.log10(np.maximum(flat, 1e-300)) if log else flat, np.nan)
    return z, mask, unit


def _plane_arrays(p):
    t = p.totals
    div, unit = byte_unit(float((t["mte_bytes"] + t["sdma_bytes"]).max()))
    largest = largest_remote_segment(p)
    div2, unit2 = byte_unit(max(float(largest.max()), float(p.min_sdma_bytes)))
    return (t["mte_bytes"].to_numpy(float) / div, t["sdma_bytes"].to_numpy(float) / div, unit, largest / div2,
            t["remote_avg_segment_bytes"].to_numpy(float) / div2, p.min_sdma_bytes / div2, unit2)


def _floors_curve(p):
    """A modelled-time curve over SDMA floors for the third view (drawing cost only: its values are
    made up from the plan, 24 floors from 64 KiB to 8 GiB plus never)."""
    import pandas as pd
    floors = [-1] + [1 << e for e in range(16, 40, 1)][:24]
    base = float(p.totals["mte_bytes"].sum() + p.totals["sdma_bytes"].sum()) / 1e6
    return pd.DataFrame({"threshold_bytes": floors,
                         "modelled_us": [base * (1.0 + 0.3 * np.cos(i / 4.0)) for i in range(len(floors))]})


def _segment_rgba(z, mask, blues, reds):
    """The stacked segment map's colours: SDMA cells red, MTE blue, by bytes between the map's extremes;
    empty cells grey. Returns (rgba, lo, hi)."""
    lo, hi = np.nanmin(z), np.nanmax(z)
    f = np.nan_to_num((z - lo) / max(hi - lo, 1e-12))
    rgba = np.where(mask[..., None], reds(f), blues(f))
    rgba[np.isnan(z)] = (0.93, 0.93, 0.93, 1.0)
    return rgba, lo, hi


def _set_planes(b_mte, b_sd, mte, sd) -> None:
    """The plane-bytes bars at this plan: MTE from 0, SDMA stacked on it."""
    for r, m, s_ in zip(b_sd, mte, sd):
        r.set_y(m)
        r.set_height(s_)
    for r, m in zip(b_mte, mte):
        r.set_height(m)


def setup_mplsvg(p, in_place: bool = True):
    """matplotlib's own SVG output of the three plan views (segment map, plane bytes, modelled time over
    floors): the figures built once and their artists updated (``in_place``), or built anew each
    redraw; each redraw ends with ``savefig(format="svg")`` with the browser's text, as
    :func:`combine_lab.lab.plots.figure_svg` writes any matplotlib figure."""
    import io
    import matplotlib
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    pes, epp = p.pes, p.expert_per_pe
    blues, reds = colormaps["Blues"], colormaps["Reds"]
    rc = {"svg.fonttype": "none", "font.family": ["DejaVu Sans", "sans-serif"]}

    def build():
        fig = Figure(figsize=(9, 6.2), dpi=72)
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0.1, 0.12, 0.64, 0.76))
        img = ax.imshow(np.zeros((pes * epp, pes, 4)), aspect="auto", interpolation="nearest")
        cb = fig.colorbar(matplotlib.cm.ScalarMappable(cmap=blues), ax=ax)
        ax.set_xlabel("src_rank")
        ax.set_ylabel("PE, local_expert")
        fig2 = Figure(figsize=(11, 3.6), dpi=72)
        FigureCanvasAgg(fig2)
        a1, a2 = fig2.subplots(1, 2)
        x = np.arange(pes)
        b_mte = a1.bar(x, np.zeros(pes), color="#9ecae1", label="MTE")
        b_sd = a1.bar(x, np.zeros(pes), color="#d62728", label="SDMA")
        a1.legend(fontsize=8)
        dots, = a2.plot(x, np.zeros(pes), "o", color="black", label="largest remote segment")
        ticks, = a2.plot(x, np.zeros(pes), "_", color="#d62728", label="remote average")
        line = a2.axhline(0, color="grey", linestyle="--", label="SDMA floor")
        a2.legend(fontsize=8)
        fig3 = Figure(figsize=(9, 3.4), dpi=72)
        FigureCanvasAgg(fig3)
        a3 = fig3.add_axes((0.1, 0.16, 0.85, 0.7))
        step, = a3.step([1, 2], [1, 2], where="post", label="modelled comm_only")
        classic = a3.axhline(0, color="grey", linestyle="--", label="classic")
        a3.set_xscale("log", base=2)
        a3.legend(fontsize=8)
        return (fig, ax, img, cb), (fig2, a1, a2, b_mte, b_sd, dots, ticks, line), (fig3, a3, step, classic)

    views = [build()]

    def redraw(p):
        (fig, ax, img, cb), (fig2, a1, a2, b_mte, b_sd, dots, ticks, line), (fig3, a3, step, classic) = \
            views[0] if in_place else build()
        z, mask, unit = _stacked_arrays(p)
        rgba, lo, hi = _segment_rgba(z, mask, blues, reds)
        img.set_data(rgba)
        cb.mappable.set_clim(lo, hi)
        ax.set_title(f"Segment map, h {p.h}, floor {p.min_sdma_bytes} ({unit})")
        mte, sd, u, largest, avg, floor, u2 = _plane_arrays(p)
        _set_planes(b_mte, b_sd, mte, sd)
        a1.set_ylabel(f"payload ({u})")
        dots.set_ydata(largest)
        ticks.set_ydata(avg)
        line.set_ydata([floor, floor])
        a2.set_ylabel(f"segment payload ({u2})")
        curve = _floors_curve(p)
        pts = curve[curve["threshold_bytes"] > 0]
        step.set_data(pts["threshold_bytes"].to_numpy(float), pts["modelled_us"].to_numpy(float))
        classic.set_ydata([float(curve["modelled_us"].iloc[0])] * 2)
        for a in (a1, a2, a3):
            a.relim()
            a.autoscale_view()
        out = 0
        with matplotlib.rc_context(rc):
            for fg in (fig, fig2, fig3):
                buf = io.StringIO()
                fg.savefig(buf, format="svg")
                out += len(buf.getvalue())
        return out
    redraw(p)
    return redraw, views


def setup_plotly(p):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    pes, epp = p.pes, p.expert_per_pe
    seg = go.FigureWidget()
    seg.add_heatmap(z=None, colorscale="Blues", name="MTE", colorbar=dict(x=1.0, len=0.9), hoverongaps=False)
    seg.add_heatmap(z=None, colorscale="Reds", name="SDMA", colorbar=dict(x=1.12, len=0.9), hoverongaps=False)
    seg.update_layout(width=860, height=560, plot_bgcolor="#eeeeee", yaxis=dict(autorange="reversed", title="PE"),
                      xaxis=dict(title="src_rank"), margin=dict(l=70, r=20, t=60, b=50),
                      shapes=[dict(type="line", x0=-0.5, x1=pes - 0.5, y0=d * epp - 0.5, y1=d * epp - 0.5,
                                   line=dict(color="white", width=0.6)) for d in range(1, pes)])
    pb = go.FigureWidget(make_subplots(rows=1, cols=2))
    pb.add_bar(x=list(range(pes)), y=[0] * pes, name="MTE", marker_color="#9ecae1", row=1, col=1)
    pb.add_bar(x=list(range(pes)), y=[0] * pes, name="SDMA", marker_color="#d62728", row=1, col=1)
    pb.add_scatter(x=list(range(pes)), y=[0] * pes, mode="markers", name="largest remote segment", row=1, col=2)
    pb.add_scatter(x=list(range(pes)), y=[0] * pes, mode="markers", marker_symbol="line-ew-open",
                   name="remote average", row=1, col=2)
    pb.update_layout(barmode="stack", width=860, height=330)

    def redraw(p):
        z, mask, unit = _stacked_arrays(p)
        lo, hi = np.nanmin(z), np.nanmax(z)
        mte, sd, u, largest, avg, floor, u2 = _plane_arrays(p)
        with seg.batch_update():
            seg.data[0].update(z=np.where(mask, np.nan, z), zmin=lo, zmax=hi, colorbar_title_text=f"MTE ({unit})")
            seg.data[1].update(z=np.where(mask, z, np.nan), zmin=lo, zmax=hi,
                               colorbar_title_text=f"SDMA ({unit}): {int(mask.sum())}")
            seg.layout.title.text = f"Segment map, h {p.h}, floor {p.min_sdma_bytes}"
        with pb.batch_update():
            pb.data[0].y, pb.data[1].y, pb.data[2].y, pb.data[3].y = mte, sd, largest, avg
            pb.layout.shapes = [dict(type="line", xref="x2 domain", x0=0, x1=1, yref="y2", y0=floor, y1=floor,
                                     line=dict(dash="dash", color="#777"))]
            pb.layout.yaxis.title.text = f"payload ({u})"
            pb.layout.yaxis2.title.text = f"segment payload ({u2})"
        return seg
    redraw(p)
    return redraw, (seg, pb)


def setup_ipympl(p):
    from ipympl.backend_nbagg import Canvas, FigureManager
    from matplotlib.figure import Figure
    pes, epp = p.pes, p.expert_per_pe
    fig = Figure(figsize=(9, 6.2), dpi=72)
    canvas = Canvas(fig)
    FigureManager(canvas, 1)
    ax = fig.add_axes((0.1, 0.12, 0.64, 0.76))
    img = ax.imshow(np.zeros((pes * epp, pes, 4)), aspect="auto", interpolation="nearest")
    ax.set_xlabel("src_rank")
    ax.set_ylabel("PE")
    fig2 = Figure(figsize=(11, 3.6), dpi=72)
    canvas2 = Canvas(fig2)
    FigureManager(canvas2, 2)
    a1, a2 = fig2.subplots(1, 2)
    x = np.arange(pes)
    b_mte = a1.bar(x, np.zeros(pes), color="#9ecae1")
    b_sd = a1.bar(x, np.zeros(pes), color="#d62728")
    dots, = a2.plot(x, np.zeros(pes), "o", color="black")
    ticks, = a2.plot(x, np.zeros(pes), "_", color="#d62728")
    line = a2.axhline(0, color="grey", linestyle="--")
    from matplotlib import colormaps
    blues, reds = colormaps["Blues"], colormaps["Reds"]

    def redraw(p):
        z, mask, unit = _stacked_arrays(p)
        rgba, lo, hi = _segment_rgba(z, mask, blues, reds)
        img.set_data(rgba)
        ax.set_title(f"Segment map, h {p.h}, floor {p.min_sdma_bytes}")
        mte, sd, u, largest, avg, floor, u2 = _plane_arrays(p)
        _set_planes(b_mte, b_sd, mte, sd)
        dots.set_ydata(largest)
        ticks.set_ydata(avg)
        line.set_ydata([floor, floor])
        for a in (a1, a2):
            a.relim()
            a.autoscale_view()
        for c in (canvas, canvas2):
            c.draw()  # what ipympl does when the page asks for the frame
            diff = c.get_diff_image()  # the PNG it sends
            if diff is not None:
                c.send_binary(diff)
        return fig
    redraw(p)
    return redraw, (canvas, canvas2)


def setup_bqplot(p):
    import bqplot as bq
    pes, epp = p.pes, p.expert_per_pe
    n = pes * epp
    xs, ys = bq.LinearScale(), bq.LinearScale(reverse=True)
    cb, cr = bq.ColorScale(scheme="Blues"), bq.ColorScale(scheme="Reds")
    hm1 = bq.HeatMap(x=np.arange(pes), y=np.arange(n), color=np.zeros((n, pes)), scales={"x": xs, "y": ys, "color": cb})
    hm2 = bq.HeatMap(x=np.arange(pes), y=np.arange(n), color=np.zeros((n, pes)), scales={"x": xs, "y": ys, "color": cr})
    fig = bq.Figure(marks=[hm1, hm2], title="Segment map",
                    axes=[bq.Axis(scale=xs, label="src_rank"), bq.Axis(scale=ys, orientation="vertical", label="PE"),
                          bq.ColorAxis(scale=cb, side="right"), bq.ColorAxis(scale=cr, side="right")])
    bx, by = bq.OrdinalScale(), bq.LinearScale()
    bars = bq.Bars(x=np.arange(pes), y=np.zeros((2, pes)), scales={"x": bx, "y": by}, type="stacked",
                   colors=["#9ecae1", "#d62728"])
    sx, sy = bq.LinearScale(), bq.LinearScale()
    dots = bq.Scatter(x=np.arange(pes), y=np.zeros(pes), scales={"x": sx, "y": sy})
    avg_m = bq.Scatter(x=np.arange(pes), y=np.zeros(pes), scales={"x": sx, "y": sy}, marker="rectangle")
    floor_m = bq.Lines(x=[0, pes - 1], y=[0, 0], scales={"x": sx, "y": sy})
    f2 = bq.Figure(marks=[bars], axes=[bq.Axis(scale=bx), bq.Axis(scale=by, orientation="vertical")])
    f3 = bq.Figure(marks=[dots, avg_m, floor_m], axes=[bq.Axis(scale=sx), bq.Axis(scale=sy, orientation="vertical")])

    def redraw(p):
        z, mask, unit = _stacked_arrays(p)
        mte, sd, u, largest, avg, floor, u2 = _plane_arrays(p)
        with hm1.hold_sync(), hm2.hold_sync(), fig.hold_sync():
            hm1.color = np.where(mask, np.nan, z)
            hm2.color = np.where(mask, z, np.nan)
            cb.min = cr.min = float(np.nanmin(z))
            cb.max = cr.max = float(np.nanmax(z))
            fig.title = f"Segment map, h {p.h}"
        with bars.hold_sync(), dots.hold_sync(), avg_m.hold_sync(), floor_m.hold_sync():
            bars.y = np.vstack([mte, sd])
            dots.y = largest
            avg_m.y = avg
            floor_m.y = [floor, floor]
        return fig
    redraw(p)
    return redraw, (fig, f2, f3)


_CASE = {}


def _case():
    if "case" not in _CASE:
        spec = CaseSpec(**SHAPE, routing=ROUTING)
        _CASE["spec"], _CASE["case"] = spec, make_case(spec)
    return _CASE["spec"], _CASE["case"]


def measure(name: str, repeats: int = 15) -> dict:
    """Median, quartiles, min and max (ms) of plan + ``name``'s redraw over ``repeats`` - 1 timed
    redraws (h alternating, so each shows a different plan; the first after setup is not counted)."""
    spec, case = _case()
    p = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, "doubleplane")
    t0 = time.perf_counter()
    redraw, _views = globals()[f"setup_{name}"](p)
    setup = time.perf_counter() - t0
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        redraw(plan_counts(case.ep_recv_count, spec.h // 2 if i % 2 else spec.h, spec.itemsize, "doubleplane"))
        times.append((time.perf_counter() - t0) * 1e3)
    times = times[1:]
    q = statistics.quantiles(times, n=4)
    return {"name": name, "setup_ms": round(setup * 1e3, 1), "median_ms": round(statistics.median(times), 1),
            "q1_ms": round(q[0], 1), "q3_ms": round(q[2], 1), "min_ms": round(min(times), 1),
            "max_ms": round(max(times), 1), "n": len(times)}


def in_kernel(names, repeats: int = 15, timeout_s: float = 600.0) -> list[dict]:
    """:func:`measure` for each of ``names`` in one fresh python3 kernel (jupyter_client): the
    widgets' comms are real there, so each redraw's messages are serialised and sent."""
    import os
    import subprocess
    from pathlib import Path

    from jupyter_client.manager import start_new_kernel
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here.parent), str(here), os.environ.get("PYTHONPATH", "")])
    km, kc = start_new_kernel(kernel_name="python3", env={**os.environ, "PYTHONPATH": path},
                              stderr=subprocess.DEVNULL)  # its "running over TCP" warning is not a result
    out = []
    try:
        def run(code):
            got = []

            def hook(msg):
                if msg["msg_type"] == "stream":
                    got.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    got.append(json.dumps({"error": msg["content"]["evalue"]}))
            kc.execute_interactive(code, output_hook=hook, timeout=timeout_s)
            return "".join(got)
        run("import json, plot_candidates as pc")
        for name in names:
            text = run(f"print(json.dumps(pc.measure({name!r}, {repeats})))")
            res = json.loads(text.strip().splitlines()[-1])
            out.append({"name": name, **res})
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return out


def browser(names) -> list[dict]:  # pragma: no cover - a measurement, run by hand
    """Each candidate alone in voila (preheated kernel, as ``combine-lab app``) opened in Debian's
    chromium: seconds to the first drawn view, and ms from a slider key press to the new h in
    the page (median of 8)."""
    import os
    import secrets
    import subprocess
    import tempfile
    from pathlib import Path

    import nbformat
    from playwright.sync_api import sync_playwright
    here = Path(__file__).resolve().parent
    folder = Path(tempfile.mkdtemp(prefix="plot_candidates_"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here), os.environ.get("PYTHONPATH", "")])}
    selector = {"svg": ".cl-segment-map", "plotly": ".js-plotly-plot .main-svg", "bqplot": ".bqplot",
                "ipympl": ".jupyter-matplotlib"}
    allow = ["@jupyter-widgets/jupyterlab-manager", "@voila-dashboards/widgets-manager8", "anywidget", "bqplot",
             "jupyter-matplotlib"]
    results = []
    for k, name in enumerate(names):
        code = ("import ipywidgets as w, plot_candidates as pc\nfrom combine_lab.planning.planner import plan_counts\n"
                "spec, case = pc._case()\np = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, 'doubleplane')\n"
                f"redraw, views = pc.setup_{name}(p)\n"
                "label = w.HTML(f\"<span class='done'>h={spec.h}</span>\")\n"
                "slider = w.IntSlider(value=spec.h, min=64, max=16384, step=64, continuous_update=False)\n"
                "def on(c):\n    redraw(plan_counts(case.ep_recv_count, c['new'], spec.itemsize, 'doubleplane'))\n"
                "    label.value = f\"<span class='done'>h={c['new']}</span>\"\n"
                "slider.observe(on, names='value')\nw.VBox([slider, label, *views])\n")
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, folder / f"{name}.ipynb")
        token, port = secrets.token_hex(8), 18800 + k
        proc = subprocess.Popen([sys.executable, "-m", "voila", str(folder / f"{name}.ipynb"), "--no-browser",
                                 "--Voila.ip=127.0.0.1", f"--port={port}", f"--token={token}",
                                 "--preheat_kernel=True", "--pool_size=1",
                                 f"--VoilaConfiguration.extension_allowlist={allow!r}"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(25)  # voila preheats a kernel: the routing draw and the views are built before the page
            with sync_playwright() as pw:
                b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
                page = b.new_page(viewport={"width": 1400, "height": 1000})
                t = time.monotonic()
                page.goto(f"http://127.0.0.1:{port}/?token={token}", timeout=120_000)
                page.wait_for_selector(selector[name], state="visible", timeout=120_000)
                load = time.monotonic() - t
                time.sleep(1.0)
                page.locator(".noUi-handle").first.focus()
                h, lat = SHAPE["h"], []
                for i in range(8):
                    key = "ArrowLeft" if i % 2 == 0 else "ArrowRight"
                    h += -64 if key == "ArrowLeft" else 64
                    t0 = time.monotonic()
                    page.keyboard.press(key)
                    page.wait_for_function(f"() => document.body.innerHTML.includes('h {h}') || "
                                           f"document.body.innerHTML.includes(\"data-h='{h}'\")", timeout=30_000)
                    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                    lat.append((time.monotonic() - t0) * 1e3)
                    time.sleep(0.3)
                page.screenshot(path=str(folder / f"{name}.png"))
                b.close()
            results.append({"name": name, "load_s": round(load, 2), "redraw_ms": round(statistics.median(lat), 1),
                            "min_ms": round(min(lat), 1), "max_ms": round(max(lat), 1),
                            "screenshot": str(folder / f"{name}.png")})
        except Exception as e:  # noqa: BLE001 - a candidate that never showed is a result too
            results.append({"name": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"})
        finally:
            proc.terminate()
            proc.wait(30)
    return results


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) > 1 and sys.argv[1] == "browser":
        for r in browser(sys.argv[2:] or ["svg"]):  # noqa: B007
            print(json.dumps(r))
    else:
        for r in in_kernel(sys.argv[1:] or list(CANDIDATES)):
            print(json.dumps(r))
