"""Benchmark the lab: the tuning view's replan + plan redraw, the plotting libraries it could use,
and the notebooks headless.

1. Plan view at pes 64, bs 4096, topk 8, expert_per_pe 8, h 7168, int32, routing deepseek
   (skewed; uniform would have to draw x, 7 GiB, to follow the reference recipe). The
   routing is drawn once (timed apart: it happens only when the routing's own parameters
   change); then ``plan_counts`` + the app's drawings of the segment map and the plane bytes
   (:mod:`combine_lab.lab.svg`, the same drawings the notebooks show and save) are timed
   ``--repeats`` times after one warm-up (h alternating, so every redraw shows a different plan).
   Target (issue 18): median under 50 ms. Timed too: the state's whole replan
   (:class:`combine_lab.lab.tuning.TuningState`: plan, modelled panel), the app's (plus the
   widgets' HTML) after an ``h`` change, and one segment map saved as PNG (resvg).
   Then the three plan views (with the modelled time over floors) as matplotlib's own SVG output
   (``savefig(format="svg")``, figures updated in place and built anew) against svg.py's: the
   measurement behind keeping svg.py for those views (issue 30 item 4; :mod:`combine_lab.lab.svg`).
   With ``--plot-libraries``: the same plan redraw by each candidate library in a kernel
   (``benchmarks/plot_candidates.py``: svg, plotly FigureWidget, bqplot, ipympl), those installed.
2. The three notebooks with their default parameters through ``combine-lab notebooks``
   (papermill, the lab's kernel, MPLBACKEND=Agg, headless: reveal_answers True), one after the
   other on 2 cores (this process, the kernels and the PEs they launch pinned to the first two
   CPUs when the machine has more; issue 14 item 6). Target: all three together under 60 s
   (issue 30 item 7; 90 s before), wall time with the kernel starts, printed with each notebook's share.

Run: python benchmarks/bench_lab.py [--repeats 7] [--skip-notebooks | --notebooks-only] [--out DIR]
Prints plain "name: value" lines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import importlib.util  # noqa: E402

from combine_lab.lab import plots  # noqa: E402
from combine_lab.lab.tuning import TuningState  # noqa: E402
from combine_lab.case.case import make_case  # noqa: E402
from combine_lab.lab.notebooks import run_notebooks  # noqa: E402
from combine_lab.planning.planner import plan_counts  # noqa: E402
from combine_lab.case.spec import CaseSpec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plot_candidates  # noqa: E402

PLAN_TARGET_S = 0.050
NOTEBOOKS_TARGET_S = 60.0  # issue 30 item 7 (was 90 s, issue 14)
NOTEBOOK_CORES = 2
SHAPE = dict(pes=64, bs=4096, h=7168, topk=8, expert_per_pe=8)
ROUTING = "deepseek"


def _spread(times: list[float]) -> str:
    q = statistics.quantiles(times, n=4) if len(times) > 1 else times * 3
    return (f"median {statistics.median(times) * 1e3:.1f} ms [quartiles {q[0] * 1e3:.1f}-{q[2] * 1e3:.1f}], "
            f"min {min(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms over {len(times)}")


def bench_plan_view(repeats: int, out: Path) -> bool:
    spec = CaseSpec(**SHAPE, routing=ROUTING)
    t = time.perf_counter()
    case = make_case(spec)
    print(f"plan view case: {spec.case_id} routing {ROUTING}")
    print(f"routing draw (make_case, once per routing change): {time.perf_counter() - t:.3f} s")

    def once(h):
        t0 = time.perf_counter()
        p = plan_counts(case.ep_recv_count, h, spec.itemsize, "doubleplane")
        seg, pb = plots.segment_map(p, dtype=spec.dtype), plots.plane_bytes_plot(p)
        return time.perf_counter() - t0, p, seg, len(seg.svg) + len(pb.svg)

    once(spec.h)  # warm-up: colormaps, tick locators
    times = []
    for i in range(repeats):  # alternate h so that each redraw shows a different plan
        dt, p, seg, size = once(spec.h // 2 if i % 2 else spec.h)
        times.append(dt)
    med = statistics.median(times)
    print(f"SDMA segments planned at h {p.h}: {int((p.segments['plane'] == 'SDMA').sum())} of {len(p.segments)}")
    print(f"plan + segment map + plane bytes redraw (the app's SVG, {size:,} characters): {_spread(times)} "
          f"(target < {PLAN_TARGET_S * 1e3:.0f} ms): {'PASS' if med < PLAN_TARGET_S else 'FAIL'}")
    if importlib.util.find_spec("resvg_py"):
        t0 = time.perf_counter()
        path = plots.save_figure(seg, out, "bench_segment_map_pes64")
        print(f"segment map saved as PNG (resvg, the same drawing): {(time.perf_counter() - t0) * 1e3:.1f} ms: {path}")
    state = TuningState(targets=["cpu"], **SHAPE, routing_model=ROUTING)
    state_times = []
    for h in (4096, 7168) * ((repeats + 1) // 2):
        state.set(h=h)
        state_times.append(state.plan_seconds)
    print(f"state replan after an h change (plan, SDMA table, modelled panel; no drawing): {_spread(state_times)}")
    if importlib.util.find_spec("ipywidgets"):
        from combine_lab.lab.app import TuningApp
        app = TuningApp(targets=["cpu"], **SHAPE, routing_model=ROUTING)
        app_times = []
        for h in (4096, 7168) * ((repeats + 1) // 2):
            app.set(h=h)
            app_times.append(app.plan_seconds)
        print(f"app replan after an h change (state, segment map, plane bytes and modelled figures, widgets): "
              f"{_spread(app_times)}")
    return med < PLAN_TARGET_S


def bench_matplotlib_svg(repeats: int) -> dict:
    """The three plan views (segment map, plane bytes, modelled time over floors) as matplotlib's own
    SVG output against svg.py's drawings of the same views, redrawn at pes 64 bs 4096 (h alternating):
    median seconds per redraw, plan included, of ``svg``, ``matplotlib SVG, in place`` (figures built
    once, artists updated) and ``matplotlib SVG, built anew``."""
    from combine_lab.lab import svg
    spec = CaseSpec(**SHAPE, routing=ROUTING)
    case = make_case(spec)
    p0 = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, "doubleplane")
    curve0 = plot_candidates._floors_curve(p0)
    classic0 = float(curve0["modelled_us"].iloc[0])

    def ours(p):
        curve = plot_candidates._floors_curve(p)
        return len(svg.segment_map_svg(p, spec.dtype) + svg.plane_bytes_svg(p)
                   + plots.modelled_floors(curve, "modelled on a3", p.min_sdma_bytes, classic_us=classic0).svg)

    candidates = {"svg.py": ours,
                  "matplotlib SVG, in place": plot_candidates.setup_mplsvg(p0, in_place=True)[0],
                  "matplotlib SVG, built anew": plot_candidates.setup_mplsvg(p0, in_place=False)[0]}
    out = {}
    for name, redraw in candidates.items():
        redraw(p0)  # warm-up
        times = []
        for i in range(repeats):
            t0 = time.perf_counter()
            size = redraw(plan_counts(case.ep_recv_count, spec.h // 2 if i % 2 else spec.h, spec.itemsize,
                                      "doubleplane"))
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
        print(f"three plan views, {name} ({size:,} characters): {_spread(times)} (target < "
              f"{PLAN_TARGET_S * 1e3:.0f} ms): {'PASS' if out[name] < PLAN_TARGET_S else 'FAIL'}")
    return out


def bench_plot_libraries(repeats: int) -> None:
    """The plan redraw by each candidate library in a kernel (what the app would pay, Python side)."""
    names = [n for n in plot_candidates.CANDIDATES if importlib.util.find_spec(plot_candidates.NEEDS[n])]
    for n in plot_candidates.CANDIDATES:
        if n not in names:
            print(f"plot library {n}: not installed ({plot_candidates.NEEDS[n]}), not measured")
    for r in plot_candidates.in_kernel(names, repeats=max(repeats, 5) + 1):
        if "error" in r:
            print(f"plot library {r['name']}: failed: {r['error']}")
            continue
        print(f"plot library {r['name']}: plan + plan views redraw in a kernel: median {r['median_ms']} ms "
              f"[quartiles {r['q1_ms']}-{r['q3_ms']}], min {r['min_ms']} ms, max {r['max_ms']} ms over {r['n']} "
              f"(setup {r['setup_ms']} ms; target < {PLAN_TARGET_S * 1e3:.0f} ms: "
              f"{'PASS' if r['median_ms'] < PLAN_TARGET_S * 1e3 else 'FAIL'})")


def pin_cores(n: int) -> list[int]:
    """Pin this process (and so every process it starts: kernels, PEs) to ``n`` CPUs when it may use
    more; returns the CPUs it runs on."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > n:
        os.sched_setaffinity(0, cpus[:n])
    return sorted(os.sched_getaffinity(0))


def bench_notebooks(out: Path) -> bool:
    cpus = pin_cores(NOTEBOOK_CORES)
    t0 = time.perf_counter()
    runs = run_notebooks(out)
    wall = time.perf_counter() - t0
    total = sum(r.seconds for r in runs)
    for r in runs:
        print(f"notebook {r.name}: {r.seconds:.1f} s ({100 * r.seconds / total:.0f} % of the three) "
              f"{'ok' if r.ok else 'FAILED: ' + r.error}")
    ok = all(r.ok for r in runs) and wall < NOTEBOOKS_TARGET_S
    print(f"notebooks headless, default parameters, on CPUs {cpus}: {total:.1f} s in the notebooks, {wall:.1f} s "
          f"wall with kernel starts ({wall / NOTEBOOKS_TARGET_S:.2f} of the {NOTEBOOKS_TARGET_S:.0f} s target): "
          f"{'PASS' if ok else 'FAIL'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed plan-view redraws (default 7)")
    ap.add_argument("--skip-notebooks", action="store_true", help="only the plan view")
    ap.add_argument("--notebooks-only", action="store_true", help="only the notebooks (section 2)")
    ap.add_argument("--plot-libraries", action="store_true",
                    help="also the plan redraw by each candidate plotting library installed, in a kernel")
    ap.add_argument("--out", default=None, help="folder for figures and executed notebooks (default a temp folder)")
    args = ap.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_lab_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"cpus: {os.cpu_count()}")
    ok = True
    if not args.notebooks_only:
        ok = bench_plan_view(args.repeats, out)
        bench_matplotlib_svg(args.repeats)
    if args.plot_libraries:
        bench_plot_libraries(args.repeats)
    if not args.skip_notebooks:
        ok = bench_notebooks(out) and ok
    print(f"output: {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
