"""Benchmark the timing model against the tuning view it must keep up with.

On pes 64, bs 4096, h 7168, topk 8, expert_per_pe 8, float16, routing deepseek (the issue's
case), measured side by side in one run (the machine is shared and noisy):

1. the plan-view redraw (plan_counts + the segment map and plane bytes as the app's SVG), the
   unit of "live";
2. modelled comm_only and full_op from the plan (one replay of both variants on ``a3``);
3. ``suggest`` over every floor where the plan changes (comm_only), with the verdict over the
   model's unknowns it prints (combine_lab/model/unknowns.py: the band searched over the box, at
   the best floor with the joint factorial ranking, and at 2 MiB);
4. the README's ``combine-lab suggest`` command as a user runs it (its first one, read from
   README.md: pes 64, expertPerPe 4, bfloat16; a fresh process each time: the import, the case, the
   rows, all of 3), the median of ``--repeats`` runs' wall and CPU seconds, and where the CPU time
   goes: the import of the command line (a fresh process), the routing draw (``make_case``, on the
   issue's case above), the model's rows. Python's bytecode cache is whatever the environment
   says (``PYTHONDONTWRITEBYTECODE=1`` compiles every module each run: about 0.1 s).

Targets (issue 28): a replay at pes 64 within 100 ms, the README's suggest within 2 s wall. The
machine is shared: each is printed with its CPU time too (process time; on a loaded machine the
wall clock is several times that), and as a ratio to the plan-view redraw.

Run: python benchmarks/bench_model.py [--repeats 5]
Prints plain "name: value" lines.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("MPLBACKEND", "Agg")

from combine_lab import CaseSpec, make_case  # noqa: E402
from combine_lab.lab import plots  # noqa: E402
from combine_lab.model.machines import load_model  # noqa: E402
from combine_lab.model.replay import replay  # noqa: E402
from combine_lab.model.stream import case_rows  # noqa: E402
from combine_lab.model.suggest import suggest  # noqa: E402
from combine_lab.planning.planner import plan_counts  # noqa: E402

SHAPE = dict(pes=64, bs=4096, h=7168, topk=8, expert_per_pe=8, dtype="float16_t", routing="deepseek")
REPLAY_TARGET_S, SUGGEST_TARGET_S = 0.100, 2.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_suggest() -> list[str]:
    """The arguments of README.md's first ``combine-lab suggest`` command (the tour's), read from the
    README so that the benchmark times what a reader runs."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        for line in f:
            words = line.split()
            if words[:2] == ["combine-lab", "suggest"]:
                return words[1:]
    raise SystemExit("README.md: no 'combine-lab suggest' command")


README = readme_suggest()


def median_time(fn, repeats: int, clock=time.perf_counter) -> float:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t = clock()
        fn()
        out.append(clock() - t)
    return statistics.median(out)


def cli_times(repeats: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the README's suggest in a fresh process, each the median of
    ``repeats`` runs."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "combine_lab", *README], check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(walls), statistics.median(cpus)


def import_cpu() -> float:
    """CPU seconds of ``import combine_lab.cli`` in a fresh process (what every command pays)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import combine_lab.cli"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    spec = CaseSpec(**SHAPE)
    from combine_lab.case import routing
    routing.clear_cache()  # the draw, not its in-process cache
    t = time.process_time()
    case = make_case(spec)
    draw_cpu = time.process_time() - t
    model = load_model("a3")
    t = time.perf_counter()
    rows = case_rows(case, model.soc)
    print(f"case: {spec.case_id} routing {spec.routing}; model rows (once per case): {time.perf_counter() - t:.3f} s")
    def redraw_once():
        p = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, "doubleplane")
        return plots.segment_map(p, dtype=spec.dtype).svg + plots.plane_bytes_plot(p).svg
    redraw = median_time(redraw_once, a.repeats)
    masks = {v: rows.sdma(v, 2 << 20) for v in ("classic", "doubleplane")}
    replays = lambda: [replay(rows, m, model) for m in masks.values()]  # noqa: E731
    one = median_time(replays, a.repeats) / 2
    one_cpu = median_time(replays, a.repeats, time.process_time) / 2
    sug = median_time(lambda: suggest(rows, model), max(1, a.repeats // 2))
    sug_cpu = median_time(lambda: suggest(rows, model), max(1, a.repeats // 2), time.process_time)
    wall, cpu = cli_times(a.repeats)
    imp = import_cpu()
    print(f"plan-view redraw: {redraw * 1e3:.1f} ms")
    print(f"modelled comm_only+full_op (one replay): {one * 1e3:.1f} ms wall, {one_cpu * 1e3:.1f} ms CPU = "
          f"{one / redraw:.2f} x redraw (target {REPLAY_TARGET_S * 1e3:.0f} ms: "
          f"{'met' if one <= REPLAY_TARGET_S else 'NOT met'})")
    print(f"suggest over every floor, with its verdicts: {sug:.2f} s wall, {sug_cpu:.2f} s CPU = {sug / redraw:.1f} x redraw")
    print(f"README suggest (fresh process, median of {a.repeats}; {' '.join(README[1:])}): {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU (target {SUGGEST_TARGET_S:.0f} s wall: "
          f"{'met' if wall <= SUGGEST_TARGET_S else 'NOT met'})")
    print(f"  of which (CPU): import {imp:.2f} s, routing draw {draw_cpu:.2f} s, model rows (above), suggest {sug_cpu:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
