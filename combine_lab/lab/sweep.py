"""Sweeps: run every case of a grid for both variants, repeatedly, and collect one tidy table.

    grid = make_grid(pes=[2], bs=[64, 128], h=[8192, 16384], topk=[2], expert_per_pe=[2],
                     routings=["uniform", "hot-expert:0.5"])
    planned_shares(grid)                       # which cases send anything by SDMA, before running
    tidy = run_sweep(grid, warmup=2, loops=20, repeats=5, prof_pe="all", csv_path="out/sweep.csv")
    summary = tables.summarize(tidy); tables.losses(summary)   # from combine_lab.results import tables
    modelled = model_grid(grid, load_model("a3"))   # the same cases priced on a model: modelled, not measured

The tidy table, its summary and the speed-up convention (classic time / doubleplane time,
above 1 when doubleplane is faster) belong to :mod:`combine_lab.results.tables`: each tidy
row is a perf row with the run's :class:`~combine_lab.results.rows.ResultRow` beside it.
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np
import pandas as pd

from ..kernels import CLASSIC, DOUBLEPLANE
from ..case.case import make_case
from ..case.grid import Grid, make_grid
from ..errors import ParameterError
from ..model import facade
from ..model.machines import NpuModel
from ..model.unknowns import RESOLUTION
from ..planning.cores import TWIN_DEFAULT_SOC
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, VARIANTS, plan
from ..planning.settings import SETTINGS_LABEL_FORM, check_kernel_settings, group_variants, parse_settings
from ..values import as_list
from ..run.kernel_source import kernel_source as kernel_source_of
from ..run.options import RunOptions, check_repeats
from ..harness import Run, execute, progress_bar
from .pricing import NotModelled, not_modelled_text
from ..results.tables import TIDY_COLUMNS, tidy_rows, write_sweep_csv
from ..run import build as build_mod
from ..run import runner

__all__ = ["Grid", "make_grid", "planned_shares", "check_settings", "run_sweep", "progress_bar", "model_grid", "MODELLED_COLUMNS",
           "modelled_outcomes", "what_if_text", "model_settings"]

#: Columns of :func:`model_grid`: the case, then per metric the modelled classic and doubleplane
#: times (the slowest PE's CoreMaxTime, us) and the speed-up (classic / doubleplane; the ``_lo`` /
#: ``_hi`` columns repeat it: one deterministic value, no spread), the SDMA share of the plan, the
#: what-if of one SDMA call per segment (comm_only, us) and its saving against the kernel's one call
#: per row (us and % of doubleplane's comm_only), and the model's name and caption. ``settings``: the
#: kernel settings group priced (docs/variants.md; :func:`model_grid`). Every column but the what-if's,
#: ``model`` and ``caption`` is a summary's (:data:`combine_lab.results.tables.SUMMARY_COLUMNS`), with the
#: value a summary of the harness's model clock gives (tests/lab/test_lab_model_door.py). The grid
#: prices through the model's facade, not the harness: the harness's clock plans each variant
#: (the planner's segment table) and makes perf rows per PE, about 20x the time a case here takes
#: (72 cases: 4.3 s against 0.19 s), which a grid of 10,000 cases cannot spend (benchmarks/bench_model_grid.py).
MODELLED_COLUMNS = (["case_id", "routing", "dtype", "pes", "bs", "h", "topk", "expert_per_pe", "min_sdma_bytes",
                     "settings", "repeats"]
                    + [c for m in ("comm_only", "full_op") for c in (f"{m}_classic_us", f"{m}_doubleplane_us",
                                                                     f"{m}_speedup", f"{m}_speedup_lo",
                                                                     f"{m}_speedup_hi")]
                    + ["sdma_share", "sdma_bytes", "segment_sdma_comm_only_us", "what_if_saving_us",
                       "what_if_saving_pct", "model", "caption"])


def planned_shares(specs, min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES) -> pd.DataFrame:
    """What the planner would send by SDMA in each case, before anything runs.

    ``specs``: CaseSpecs or a :class:`Grid`. One row per case: case_id, routing, pes, bs,
    h, topk, expert_per_pe, payload_bytes, sdma_bytes (doubleplane plan, summed over PEs)
    and sdma_share in [0, 1]. A case with sdma_share 0 sends exactly the same bytes with
    both variants: a sweep learns nothing about doubleplane from it but the timing noise.
    Draws the routing only (never the activations x), so it is quick.
    """
    if isinstance(specs, Grid):
        specs = specs.specs
    rows = []
    for spec in specs:
        t = plan(make_case(spec), DOUBLEPLANE, min_sdma_bytes=int(min_sdma_bytes)).totals
        sdma, total = int(t["sdma_bytes"].sum()), int((t["mte_bytes"] + t["sdma_bytes"]).sum())
        rows.append({"case_id": spec.case_id, "routing": spec.routing, "pes": spec.pes, "bs": spec.bs, "h": spec.h,
                     "topk": spec.topk, "expert_per_pe": spec.expert_per_pe, "payload_bytes": total,
                     "sdma_bytes": sdma, "sdma_share": sdma / total if total else 0.0})
    return pd.DataFrame(rows, columns=["case_id", "routing", "pes", "bs", "h", "topk", "expert_per_pe",
                                       "payload_bytes", "sdma_bytes", "sdma_share"])


def check_settings(settings, target: str = "cpu") -> list[str]:
    """The settings dimension of a sweep as settings labels (docs/variants.md), checked before anything
    runs: a list of labels or one text (``"reference,segment-c4"``, ``'["reference", "c4"]'``), each
    written as :func:`combine_lab.planning.settings.parse_settings` reads it, repeats dropped, in order.
    On the twin (``target`` cpu) ``c<N>`` must also fit its SoC (``COMBINE_TWIN_SOC``, default
    :data:`~combine_lab.planning.cores.TWIN_DEFAULT_SOC`; docs/variants.md#4-limits).

    Raises:
        ParameterError: naming ``settings``, the value given and the allowed form.
    """
    labels = as_list(settings, str, "settings")
    soc = os.environ.get("COMBINE_TWIN_SOC") or TWIN_DEFAULT_SOC
    out = []
    for text in labels:
        try:
            st = parse_settings(text)
        except ParameterError:
            raise ParameterError(f"settings={settings!r}: {text!r} is not a settings label; each must be "
                                 f"{SETTINGS_LABEL_FORM}", parameter="settings", value=settings) from None
        if target == "cpu":
            try:
                check_kernel_settings(st, DOUBLEPLANE if st.segment else CLASSIC, soc)
            except (ParameterError, ValueError) as e:
                raise ParameterError(f"settings={settings!r}: {text!r}: {e}", parameter="settings",
                                     value=settings) from None
        if st.label not in out:
            out.append(st.label)
    return out


def run_sweep(specs, *, warmup: int = 0, loops: int = 2, repeats: int = 1, target: str = "cpu",
              min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES, prof_pe: int | str = 0, timeout_s: float = 120.0,
              csv_path: str | os.PathLike | None = None, progress: bool = True, kernel_source=None,
              settings=("reference",), cluster=None) -> pd.DataFrame:
    """Run classic and doubleplane on every spec under every kernel ``settings`` group, ``repeats``
    times, and tidy the results; with ``kernel_source``, your kernels beside them.

    One :func:`combine_lab.harness.execute` of both variants of every spec: each case's files are
    written once; each repeat launches both variants on them, the order alternating between
    repeats (classic first, then doubleplane first, ...) so that neither always runs second.
    The spread over repeats (min-max) is what :func:`combine_lab.results.tables.summarize`
    reports with every time; every repeat's times stay in the tidy table.

    Args:
        specs: CaseSpecs (e.g. ``make_grid(...).specs``) or a :class:`Grid`.
        warmup, loops: launches before and during profiling, per run (loops >= 1).
        repeats: runs of both variants per case (>= 1; 3 or more for a spread worth reading).
        target: ``cpu`` (twin) or ``npu``; built once before the first case.
        min_sdma_bytes: SDMA floor, bytes.
        prof_pe: the PE profiled, or ``"all"`` (one launch per PE: pes times slower;
            the summary then takes the slowest PE, which ends the combine).
        timeout_s: limit per launch of all PEs, seconds.
        csv_path: if given, the tidy table is written there (:func:`combine_lab.results.tables.write_sweep_csv`).
        progress: show a progress bar (one step per case; :func:`combine_lab.harness.progress_bar`).
        kernel_source: a folder with your own kernel, a KernelSource, or a list of them
            (docs/own-kernel.md): each runs on the same case files in every repeat, its rows named by
            its label (``variant`` ``reference:doubleplane``, ``kernel`` its folder); one that fails or
            hangs gets ERROR rows saying what it did and is not run again for that case.
        settings: the kernel settings to run under (:func:`check_settings`: labels ``reference``,
            ``segment``, ``c<N>``, ``segment-c<N>``; docs/variants.md), one more grid dimension:
            classic and doubleplane run under each (``classic-c4`` and ``doubleplane-segment-c4`` in
            group ``segment-c4``; classic without the segment layout, which is doubleplane's, so one
            classic run serves ``reference`` and ``segment`` alike). Each tidy row's ``settings``
            names its group, ``variant`` the run (``doubleplane-segment-c4``); a run serving two
            groups has rows in each. Your kernels run once per case, in group ``reference``.
        cluster: None (here, one case after another), or ``local``, ``local:N``, ``tcp://HOST:PORT``
            or a connected :class:`combine_lab.cluster.Cluster`: each case a task on dask.distributed
            (docs/lab.md#8-beyond-one-machine), built on its worker; the same tidy rows, in the same order.

    Returns:
        The tidy DataFrame (:data:`~combine_lab.results.tables.TIDY_COLUMNS`), one row per
        (case, settings group, repeat, variant, profiled PE, metric). A case whose run fails gets rows with
        check ``ERROR`` for that repeat and the message in ``reason``, and no further repeats;
        the sweep goes on. A variant this target refuses (doubleplane on an NPU with CANN <
        9.0.0) gets rows with check ``REFUSED`` and the reason, once per case, and a warning.

    Raises:
        ParameterError: bad warmup/loops/repeats/prof_pe/settings (before anything runs or is built).
        build.BuildError / TargetUnavailable: the target cannot be built.
    """
    if isinstance(specs, Grid):
        specs = specs.specs
    # every run parameter by its one validator (combine_lab.run.options), before anything is built
    check_repeats(repeats)
    options = RunOptions(warmup=warmup, loops=loops, prof_pe=prof_pe, min_sdma_bytes=min_sdma_bytes, target=target,
                         timeout_s=timeout_s)
    specs = list(specs)
    for spec in specs:  # the profiled PE against every case's PEs
        options.prof_pes(spec.pes)
    entries = group_variants(list(VARIANTS), check_settings(settings, target))
    if cluster is None:
        build_mod.build(target)  # on a cluster each worker builds (cached by the sources' hash)
    for why in runner.refusals(target).values():  # said once; each case gets its REFUSED rows
        warnings.warn(why, stacklevel=2)
    kernels = [] if kernel_source is None else list(kernel_source) if isinstance(kernel_source, (list, tuple)) \
        else [kernel_source]
    kernels = [kernel_source_of(k) for k in kernels]  # each checked before anything runs
    for k in kernels if cluster is None else []:
        build_mod.build(target, kernel=k)
    fixed = dict(repeats=int(repeats), warmup=int(warmup), loops=int(loops), target=target,
                 min_sdma_bytes=int(min_sdma_bytes), prof_pe=prof_pe, timeout_s=timeout_s)
    runs = []
    for spec in specs:
        runs += [Run(spec, v, settings=st, group=groups[0], **fixed) for v, st, groups in entries.values()]
        runs += [Run(spec, k.rule, kernel=k, **fixed) for k in kernels]
    rows: list[dict] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for o in _execute(runs, cluster, progress="sweep" if progress else None):
            groups = entries[o.run.label][2] if o.run.kernel is None else [o.row.settings]
            perf = o.perf if o.result is not None else None
            for g in groups:  # a run shared by several settings groups (classic in reference and segment)
                rows += tidy_rows(dataclasses.replace(o.row, settings=g), o.spec, perf, o.repeat)
    tidy = pd.DataFrame(rows, columns=TIDY_COLUMNS)
    if csv_path is not None:
        write_sweep_csv(tidy, csv_path)
    return tidy


def _execute(runs: list[Run], cluster, progress: str | None):
    """The harness's execute (failures as rows), or on ``cluster`` (a Cluster, or text to connect to,
    closed after)."""
    if cluster is None:
        yield from execute(runs, progress=progress, on_error="row")
        return
    from ..cluster import Cluster, connect
    from ..cluster import execute as on_cluster
    own = not isinstance(cluster, Cluster)
    cl = connect(cluster, pes=max((r.case.pes for r in runs), default=2)) if own else cluster
    try:
        yield from on_cluster(runs, cl, progress=progress, on_error="row")
    finally:
        if own:
            cl.close()


def model_grid(specs, model: NpuModel, min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES,
               settings: str | None = None, cluster=None, chunk: int = 200, band: bool = True) -> pd.DataFrame:
    """The cases of a sweep priced on ``model`` instead of run (:mod:`combine_lab.model`): for each,
    classic and doubleplane (the rule at ``min_sdma_bytes``) replayed from the kernel's operation
    stream, and the what-if of one SDMA call per segment (one descriptor per MiB of a segment laid
    out contiguously) instead of one per row. Draws the routing only; no launch, no payload.

    ``settings``: one settings group (a label, docs/variants.md; None: ``reference``), priced as
    the sweep runs it (classic without the segment layout). Settings other than the reference's
    are priced only where the model takes them (:mod:`combine_lab.model.facade`).

    Returns a DataFrame of :data:`MODELLED_COLUMNS`, one row per case, in the order of ``specs``
    (CaseSpecs or a :class:`Grid`). Every time in it is modelled, never measured: its ``caption``
    says on what, with the assumed parameters. ``comm_only_speedup_lo`` / ``_hi``: the speed-up's
    range over the model's unknowns (:func:`combine_lab.model.unknowns.verdict`: every assumed
    parameter over its range, the SDMA engine count 1-48 among them) for a case with SDMA traffic;
    full_op's are its point; NaN where the model gives no range for these settings (the what-if
    columns likewise where it prices no what-if for them), or where ``band`` is False: the range
    is not searched (a box search, about 0.2 s a case with SDMA traffic, against milliseconds for
    the rest: what a grid of thousands of cases leaves out to be priced in seconds,
    benchmarks/bench_model_grid.py).

    ``cluster``: None (priced in this process, the default: milliseconds a case), or as
    :func:`run_sweep`'s: the cases priced in tasks of ``chunk`` cases each, no PE slots asked
    (docs/lab.md#8-beyond-one-machine); the same rows in the same order.

    Raises:
        ParameterError: a bad settings label; :class:`~combine_lab.lab.pricing.NotModelled` (one)
            when the model does not price these settings yet.
    """
    if isinstance(specs, Grid):
        specs = specs.specs
    group = check_settings([settings or "reference"], target="model")[0]
    if cluster is not None:
        return _model_grid_on(cluster, list(specs), model, min_sdma_bytes, group, int(chunk), bool(band))
    st = {v: s for v, s, _ in group_variants(list(VARIANTS), [group]).values()}
    out = []
    nan = float("nan")
    for spec in specs:
        rows = facade.rows_of(make_case(spec), model)
        masks = {CLASSIC: rows.sdma(CLASSIC, 0), DOUBLEPLANE: rows.sdma(DOUBLEPLANE, int(min_sdma_bytes))}
        # no SDMA row and the same settings: doubleplane replays classic's inputs, so its times are classic's
        same = st[DOUBLEPLANE] == st[CLASSIC] and np.array_equal(masks[DOUBLEPLANE], masks[CLASSIC])
        try:
            t = {CLASSIC: facade.times(rows, masks[CLASSIC], model, settings=st[CLASSIC])}
            t[DOUBLEPLANE] = t[CLASSIC] if same else facade.times(rows, masks[DOUBLEPLANE], model,
                                                                  settings=st[DOUBLEPLANE])
        except NotModelled as e:  # said of the group asked for (its classic may be classic-c4)
            raise NotModelled(group, e.why) from None
        # the what-if of one SDMA call per segment is the reference's (a settings group is built, not a what-if)
        seg = float(facade.times(rows, masks[DOUBLEPLANE], model, what_if="segment").core_max("comm_only").max()) \
            if st[DOUBLEPLANE].is_reference else nan
        rec = {"case_id": spec.case_id, "routing": spec.routing, "dtype": spec.dtype, "pes": spec.pes, "bs": spec.bs,
               "h": spec.h, "topk": spec.topk, "expert_per_pe": spec.expert_per_pe,
               "min_sdma_bytes": int(min_sdma_bytes), "settings": group, "repeats": 1}
        for metric in ("comm_only", "full_op"):
            c, d = (float(t[v].core_max(metric).max()) for v in (CLASSIC, DOUBLEPLANE))
            rec.update({f"{metric}_classic_us": c, f"{metric}_doubleplane_us": d, f"{metric}_speedup": c / d,
                        f"{metric}_speedup_lo": c / d, f"{metric}_speedup_hi": c / d})
        if not band:
            rec.update({"comm_only_speedup_lo": nan, "comm_only_speedup_hi": nan})
        elif masks[DOUBLEPLANE].any():  # the verdict over the unknowns
            try:
                # the band against this group's own classic, as its speed-up column
                v = facade.unknowns(rows, model, int(min_sdma_bytes), settings=st[DOUBLEPLANE], baseline=st[CLASSIC],
                                    joint=False)  # the band alone: no ranking
                rec.update({"comm_only_speedup_lo": v.low, "comm_only_speedup_hi": v.high})
            except ParameterError:  # no range over the unknowns for these settings: none shown
                rec.update({"comm_only_speedup_lo": nan, "comm_only_speedup_hi": nan})
        sdma_bytes = int((rows.counts * masks[DOUBLEPLANE]).sum() * rows.row_bytes)
        total = int(rows.counts.sum() * rows.row_bytes)
        dual = rec["comm_only_doubleplane_us"]
        rec.update({"sdma_share": sdma_bytes / total if total else 0.0, "sdma_bytes": sdma_bytes,
                    "segment_sdma_comm_only_us": seg, "what_if_saving_us": dual - seg,
                    "what_if_saving_pct": 100 * (dual - seg) / dual if dual > 0 else 0.0,
                    "model": model.name, "caption": model.caption()})
        out.append(rec)
    return pd.DataFrame(out, columns=MODELLED_COLUMNS)


def _model_chunk(work) -> pd.DataFrame:
    specs, model, min_sdma_bytes, group, band = work
    return model_grid(specs, model, min_sdma_bytes, group, band=band)


def _model_grid_on(cluster, specs: list, model: NpuModel, min_sdma_bytes: int, group: str, chunk: int,
                   band: bool = True) -> pd.DataFrame:
    """:func:`model_grid` with the cases in tasks of ``chunk`` on ``cluster`` (a Cluster, or text to
    connect to, closed after); a task's error (NotModelled) is raised here."""
    from ..cluster import Cluster, ClusterError, connect, map_tasks
    if chunk < 1:
        raise ParameterError(f"chunk={chunk!r}: must be an int >= 1", parameter="chunk", value=chunk)
    own = not isinstance(cluster, Cluster)
    cl = connect(cluster, pes=0) if own else cluster
    parts = [specs[i:i + chunk] for i in range(0, len(specs), chunk)]
    frames: dict[int, pd.DataFrame] = {}
    try:
        work = [(p, model, min_sdma_bytes, group, band) for p in parts]
        keys = [f"combine_lab-model-{model.name}-{group}-{i}" for i in range(len(parts))]
        for d in map_tasks(cl, _model_chunk, work, keys=keys, pes=[0] * len(parts), progress=None):
            if d.error is not None:
                raise d.error
            if d.fault:
                raise ClusterError(f"model_grid: {d.fault}", parameter="cluster", value=str(cl.address))
            frames[d.index] = d.value
    finally:
        if own:
            cl.close()
    return pd.concat([frames[i] for i in range(len(parts))], ignore_index=True) if parts else \
        pd.DataFrame(columns=MODELLED_COLUMNS)


def model_settings(specs, model: NpuModel, min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES,
                   settings=("reference",)) -> tuple[pd.DataFrame, dict[str, str]]:
    """:func:`model_grid` for the reference's settings and each group of ``settings`` the model
    prices (:mod:`combine_lab.model.facade`), one after the other in one DataFrame (its
    ``settings`` column names the group); the reference's always, the baseline of every modelled
    comparison. Returns (that DataFrame, {label: "not modelled for <label> yet (...)"} for each group
    the model does not price yet).

    Raises:
        ParameterError: a bad settings label (:func:`check_settings`), before anything is priced.
    """
    labels = check_settings(settings, target="model")
    frames, refused = [], {}
    for label in ["reference"] + [g for g in labels if g != "reference"]:
        try:
            frames.append(model_grid(specs, model, min_sdma_bytes, settings=label))
        except NotModelled as e:
            refused[label] = not_modelled_text(label, e.why)
    return pd.concat(frames, ignore_index=True), refused


def modelled_outcomes(modelled: pd.DataFrame, machine: str, metric: str = "comm_only", rel: float = 1e-9) -> str:
    """What a modelled grid (:func:`model_grid`) came to, in words: how many cases doubleplane is
    faster, slower, or ties (the same modelled ``metric`` within ``rel``: SDMA took bytes off a core
    that does not set the time), and how many send nothing by SDMA (doubleplane = classic). A tie
    is said to be one, never a win."""
    sp = modelled[f"{metric}_speedup"].to_numpy(dtype=float)
    share = modelled["sdma_share"].to_numpy(dtype=float)
    sends = share > 0
    tie = sends & (abs(sp - 1) <= rel)
    faster, slower = sends & ~tie & (sp > 1), sends & ~tie & (sp < 1)
    n = len(modelled)
    parts = [f"{int(faster.sum())} faster", f"{int(slower.sum())} slower", f"{int(tie.sum())} tie"]
    out = f"modelled on {machine}, of {n} cases with doubleplane: " + ", ".join(parts) + " (SDMA traffic)"
    if (~sends).any():
        out += f"; {int((~sends).sum())} with no SDMA traffic: doubleplane = classic"
    if tie.any():
        out += (f". A tie: SDMA takes bytes off a core that does not set {metric} (the slowest core keeps its "
                "time), so no floor helps there")
    if metric == "comm_only" and sends.any():
        lo, hi = (modelled[f"{metric}_speedup_{k}"].to_numpy(dtype=float) for k in ("lo", "hi"))
        ranged = sends & np.isfinite(lo) & np.isfinite(hi)
        win, loss = ranged & (lo > 1 + RESOLUTION), ranged & (hi < 1 - RESOLUTION)
        if ranged.any():
            out += (f". Over the unknowns' ranges (the SDMA engine count 1-48 first): {int(win.sum())} faster "
                    f"throughout, {int(loss.sum())} slower throughout, {int((ranged & ~win & ~loss).sum())} turn on "
                    f"the unknowns (a win needs more than the model's resolution, {RESOLUTION:.0%})")
        if (sends & ~ranged).any():
            out += f"; {int((sends & ~ranged).sum())} without a range over the unknowns (not modelled for them)"
    return out + "."


def what_if_text(modelled: pd.DataFrame, label: str, machine: str) -> str:
    """The what-if's saving in one sentence: the median over the cases with SDMA traffic, or, when
    no case sends anything by SDMA, that there is nothing to save (never "nan %")."""
    with_sdma = modelled[modelled["sdma_share"] > 0]
    if with_sdma.empty:
        return (f"{label}: no SDMA traffic in any case: doubleplane = classic, so one call per segment has "
                f"nothing to save (modelled on {machine})")
    return (f"{label}: one call per segment would save a median {with_sdma['what_if_saving_pct'].median():.1f} % of "
            f"doubleplane's comm_only over the {len(with_sdma)} cases with SDMA traffic (modelled on {machine})")
