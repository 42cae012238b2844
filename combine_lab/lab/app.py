"""The tuning app: ipywidgets to set a case, a live plan view, and a Run button that compares both variants.

    from combine_lab.lab.app import TuningApp
    app = TuningApp()
    app                      # in a notebook: shows the controls, plan view and run panel

Changing a control replans at once and runs nothing: the routing is drawn with
:func:`combine_lab.case.case.make_case` (never x: the plan path does not touch ``case.x``)
and planned with :func:`combine_lab.planning.planner.plan_counts`; controls that only change
bytes (h, dtype for skewed routings, min_sdma_bytes) reuse the drawn routing. The Run
button builds the target if needed and runs classic and doubleplane through
:func:`combine_lab.run.runner.compare`, then shows the x_out verdict, per-plane counters,
per-PE times and a history of runs. A variant the target refuses (doubleplane on an NPU
with CANN older than 9.0.0) shows as REFUSED with its reason, and classic still runs.

Everything a browser would do can be done from Python, which is how the tests drive it:
set ``app.controls[name].value`` (or :meth:`TuningApp.set`), call :meth:`TuningApp.run`
or ``app.run_button.click()``, then read ``app.plan``, ``app.sdma_table``,
``app.message``, ``app.history``, ``app.rows``, ``app.last_runs``. Bad values never raise: they show
a readable message (``app.message``) and nothing is planned or launched.
"""

from __future__ import annotations

import contextlib
import html
import time
import warnings
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..case.case import Case, make_case
from ..case.routing import parse_routing
from ..case.spec import CaseSpec
from ..case.traces import list_traces
from ..errors import CaseFileError, ParameterError, SpecError
from ..planning.capacity import CapacityError, window_geometry
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, Plan, plan_counts
from ..results.rows import COMPARISON_COLUMNS, REFUSED, ROW_COLUMNS, NotRun, ResultRow, compare_rows, result_row
from ..run import build as build_mod
from ..run import runner
from ..run.capabilities import detect
from ..run.launch import LaunchError
from ..run.outputs import ResultFileError
from . import plots

__all__ = ["ROUTING_MODELS", "routing_string", "TuningApp", "HISTORY_COLUMNS", "ROWS_COLUMNS"]

#: Routing models offered by the app -> (name of the skew parameter, its default), None when
#: the model takes no number; "trace" takes a trace name from the trace selector.
ROUTING_MODELS: dict[str, tuple[str, float] | None] = {
    "uniform": None,
    "zipf": ("S", 1.2),
    "hot-expert": ("F", 0.1),
    "hot-rank": ("F", 0.5),
    "deepseek": None,
    "trace": None,
}

#: Columns of ``TuningApp.history``, one row per Run: the case and settings, then
#: :func:`combine_lab.results.rows.compare_rows` of the run's rows: times in us (CoreMaxTime,
#: mean over profiled PEs), ``<metric>_speedup`` = classic time / doubleplane time (above 1:
#: doubleplane faster, :data:`combine_lab.results.rows.SPEEDUP`), sdma_share, check,
#: counters_ok and the reason of a variant that did not run.
HISTORY_COLUMNS = ["run", "case_id", "routing", "dtype", "target", "min_sdma_bytes", "warmup", "loops",
                   *COMPARISON_COLUMNS]
#: Columns of ``TuningApp.rows``: the Run number, then one :class:`~combine_lab.results.rows.ResultRow`
#: per variant (the schema of the CLI table and the sweep CSV).
ROWS_COLUMNS = ["run", *ROW_COLUMNS]

_INT_FIELDS = ("pes", "bs", "h", "topk", "expert_per_pe", "seed", "min_sdma_bytes", "warmup", "loops")
_CASE_FIELDS = ("pes", "bs", "h", "topk", "expert_per_pe", "seed")
#: Errors a run can end with that the app shows as a message.
_RUN_ERRORS = (SpecError, ParameterError, CaseFileError, ResultFileError, build_mod.BuildError, LaunchError, OSError,
               ValueError)


def routing_string(model: str, skew: float | None = None, trace: str | None = None) -> str:
    """The routing string of :mod:`combine_lab.routing` for a model and its skew strength.

    ``model``: a key of :data:`ROUTING_MODELS`; ``skew``: S (zipf) or F (hot-expert,
    hot-rank), ignored otherwise; ``trace``: MODEL/DOMAIN/LAYER for model 'trace'.
    Raises SpecError for an unknown model or a missing trace name.
    """
    if model not in ROUTING_MODELS:
        raise SpecError(f"routing model={model!r}: must be one of {', '.join(ROUTING_MODELS)}")
    if model == "trace":
        if not trace:
            raise SpecError("routing model='trace': pick a trace (MODEL/DOMAIN/LAYER)")
        return f"trace:{trace}"
    if ROUTING_MODELS[model] is None:
        return model
    return f"{model}:{float(skew):g}"


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    return get_ipython() is not None


def _fmt_bytes(n: float) -> str:
    div, unit = plots.byte_unit(float(n))
    return f"{n / div:,.2f} {unit}" if unit != "B" else f"{int(n):,} B"


class TuningApp:
    """Controls, plan view and run panel for one combine case.

    Args:
        targets: targets offered by the target selector; default
            ``capabilities.detect().targets()`` ('cpu', plus 'npu' where it can run).
        max_uniform_x_bytes: uniform routing draws x with it (the reference recipe,
            combine-facts section 3); above this many bytes of x (pes*bs*h*sizeof(T)) the
            app refuses to plan it and says so. Skewed routings never draw x to plan.
        max_run_bytes: a Run is refused when the case files plus windows would exceed this
            many bytes (estimate: (pes*bs*topk + 2*pes*bs) rows of h*sizeof(T) plus the windows).
        prof_all_max_pes: up to this many PEs every PE is profiled (per-PE times); above it PE 0 only.
        timeout_s: limit per launch of all PEs, seconds.
        **initial: starting values of the controls (names as in :attr:`controls`).

    Attributes:
        controls: dict name -> widget for pes, bs, h, topk, expert_per_pe, dtype,
            routing_model, skew, trace, seed, min_sdma_bytes, warmup, loops, target.
        spec: the CaseSpec of the current values, or None when they are invalid.
        plan: the doubleplane :class:`~combine_lab.planning.planner.Plan` shown, or None.
        sdma_table: DataFrame of the SDMA segments listed (pe, segment, local_expert,
            src_rank, token_count, bytes), as in ``plan.segments``.
        message: the text of the message shown ('' when none).
        history: DataFrame (:data:`HISTORY_COLUMNS`), one row per completed run.
        rows: DataFrame (:data:`ROWS_COLUMNS`), one result row per variant of every completed run.
        last_runs: the :class:`~combine_lab.run.runner.Comparison` of the last run (variant ->
            RunResult, and ``refused``: variant -> reason), or None.
        figures: the last Figure of each view ("segment_map", "plane_bytes", "compare", "history").
        replans: how many times the plan view was recomputed; plan_seconds: the last one's time.
    """

    def __init__(self, targets: list[str] | None = None, *, max_uniform_x_bytes: int = 256 * 2 ** 20,
                 max_run_bytes: int = 2 * 2 ** 30, prof_all_max_pes: int = 8, timeout_s: float = 120.0,
                 **initial: Any):
        self.targets = list(targets) if targets is not None else detect().targets()
        if not self.targets:
            self.targets = ["cpu"]
        self.max_uniform_x_bytes = max_uniform_x_bytes
        self.max_run_bytes = max_run_bytes
        self.prof_all_max_pes = prof_all_max_pes
        self.timeout_s = timeout_s
        self.spec: CaseSpec | None = None
        self.plan: Plan | None = None
        self.sdma_table = pd.DataFrame(columns=["pe", "segment", "local_expert", "src_rank", "token_count", "bytes"])
        self.message = ""
        self.history = pd.DataFrame(columns=HISTORY_COLUMNS)
        self._history_rows: list[dict] = []
        self.rows = pd.DataFrame(columns=ROWS_COLUMNS)
        self._rows_data: list[dict] = []
        self.last_runs: dict | None = None
        self.figures: dict = {}
        self.replans = 0
        self.plan_seconds = float("nan")
        self._case_key = None
        self._case: Case | None = None
        self._hold = 0
        self._map_view = plots.SegmentMapView()
        self._build_widgets()
        self.set(**initial)

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self) -> None:
        style = {"description_width": "110px"}
        lay = widgets.Layout(width="230px")

        def int_box(desc, value, tip):
            return widgets.IntText(value=value, description=desc, tooltip=tip, style=style, layout=lay)

        traces = [t.removeprefix("trace:") for t in list_traces()]  # MODEL/DOMAIN/LAYER
        default_trace = "mixtral/arxiv/15" if "mixtral/arxiv/15" in traces else (traces[0] if traces else None)
        c = {
            "pes": int_box("pes", 4, "PEs (ranks)"),
            "bs": int_box("bs", 256, "tokens per PE"),
            "h": int_box("h", 8192, "hidden size, elements per row"),
            "topk": int_box("topk", 2, "experts per token"),
            "expert_per_pe": int_box("expert_per_pe", 2, "experts per PE"),
            "dtype": widgets.Dropdown(options=["int32_t", "float16_t"], value="int32_t", description="dtype",
                                      style=style, layout=lay),
            "routing_model": widgets.Dropdown(options=list(ROUTING_MODELS), value="zipf", description="routing",
                                              style=style, layout=lay),
            "skew": widgets.FloatText(value=1.2, description="skew (S or F)", style=style, layout=lay),
            "trace": widgets.Dropdown(options=traces, value=default_trace, description="trace", style=style,
                                      layout=widgets.Layout(width="300px")),
            "seed": int_box("seed", 42, "case seed"),
            "min_sdma_bytes": int_box("min_sdma_bytes", DEFAULT_MIN_SDMA_BYTES, "SDMA floor, bytes"),
            "warmup": int_box("warmup", 1, "launches before profiling"),
            "loops": int_box("loops", 3, "profiled launches"),
            "target": widgets.Dropdown(options=self.targets, value=self.targets[0], description="target",
                                       style=style, layout=lay),
        }
        self.controls = c
        for name, w in c.items():
            w.observe(self._on_change, names="value")
        self.message_html = widgets.HTML()
        self.plan_summary = widgets.HTML()
        self.segment_image = widgets.Image(format="png")
        self.plane_image = widgets.Image(format="png")
        self.sdma_html = widgets.HTML()
        self.run_button = widgets.Button(description="Run", button_style="primary", icon="play",
                                         tooltip="build if needed, run classic and doubleplane, check x_out")
        self.run_button.on_click(lambda _b: self.run())
        self.progress = widgets.IntProgress(value=0, min=0, max=4, description="", layout=widgets.Layout(width="200px"))
        self.status = widgets.Label(value="")
        self.verdict_html = widgets.HTML()
        self.counters_html = widgets.HTML()
        self.compare_image = widgets.Image(format="png")
        self.history_html = widgets.HTML()
        self.history_image = widgets.Image(format="png")
        self._sync_model_widgets()

    @property
    def widget(self) -> widgets.Widget:
        """The whole app as one widget (controls, plan view, run panel)."""
        c = self.controls
        grid = widgets.GridBox(list(c.values()), layout=widgets.Layout(
            grid_template_columns="repeat(4, 240px)", grid_gap="2px 8px"))
        sdma = widgets.Accordion(children=[self.sdma_html], titles=("SDMA segments listed by the planner",))
        plan_box = widgets.VBox([widgets.HTML("<h4>Plan (nothing runs)</h4>"), self.plan_summary,
                                 self.segment_image, self.plane_image, sdma])
        run_box = widgets.VBox([widgets.HTML("<h4>Run</h4>"),
                                widgets.HBox([self.run_button, self.progress, self.status]),
                                self.verdict_html, self.counters_html, self.compare_image,
                                widgets.HTML("<h4>History</h4>"), self.history_html, self.history_image])
        return widgets.VBox([grid, self.message_html, plan_box, run_box])

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)

    # ------------------------------------------------------------------ state
    def values(self) -> dict:
        """Current control values by name."""
        return {k: w.value for k, w in self.controls.items()}

    @contextlib.contextmanager
    def _held(self):
        self._hold += 1
        try:
            yield
        finally:
            self._hold -= 1

    def set(self, **values: Any) -> None:
        """Set several controls at once, then replan once. Unknown names raise ParameterError
        (a programming error, not a user value); a value a Dropdown does not offer shows a
        message. Returns None, so that a notebook cell ending with it does not show the app again."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ParameterError(f"unknown controls {sorted(unknown)}; known: {sorted(self.controls)}")
        bad = None
        # the model first: choosing one resets the skew to its default
        ordered = sorted(values.items(), key=lambda kv: kv[0] != "routing_model")
        with self._held():
            for k, v in ordered:
                try:
                    self.controls[k].value = v
                except Exception as e:  # traitlets TraitError: e.g. a target the selector does not offer
                    bad = f"{k}={v!r}: not offered here ({e})"
        self.refresh()
        if bad:
            self._show_message(bad)

    def _on_model(self, model: str) -> None:
        """A new routing model: its default skew, and only the selectors it uses enabled."""
        param = ROUTING_MODELS.get(model)
        if param is not None:
            with self._held():
                self.controls["skew"].value = param[1]
        self._sync_model_widgets()

    def _sync_model_widgets(self) -> None:
        model = self.controls["routing_model"].value
        self.controls["skew"].disabled = ROUTING_MODELS.get(model) is None
        self.controls["trace"].disabled = model != "trace"
        param = ROUTING_MODELS.get(model)
        self.controls["skew"].description = f"skew ({param[0]})" if param else "skew (n/a)"

    def _on_change(self, change) -> None:
        if change["owner"] is self.controls["routing_model"]:
            self._on_model(change["new"])
        if not self._hold:
            self.refresh()

    def make_spec(self) -> CaseSpec:
        """The CaseSpec of the current values. Raises SpecError (a case field) or ParameterError
        (floor, warmup, loops) with a readable message."""
        v = self.values()
        for k in _INT_FIELDS:
            if not isinstance(v[k], int):
                error = SpecError if k in _CASE_FIELDS else ParameterError
                raise error(f"{k}={v[k]!r}: must be an integer")
        routing = routing_string(v["routing_model"], v["skew"], v["trace"])
        spec = CaseSpec(pes=v["pes"], bs=v["bs"], h=v["h"], topk=v["topk"], expert_per_pe=v["expert_per_pe"],
                        dtype=v["dtype"], seed=v["seed"], routing=routing)
        for k, lo in (("min_sdma_bytes", 0), ("warmup", 0), ("loops", 1)):
            if v[k] < lo:
                raise ParameterError(f"{k}={v[k]}: must be an int >= {lo}")
        return spec

    def _show_message(self, text: str, kind: str = "error") -> None:
        self.message = text
        colour = {"error": "#b00020", "info": "#0b5394"}[kind]
        self.message_html.value = (f"<div style='border-left:4px solid {colour};padding:4px 8px;color:{colour}'>"
                                   f"{html.escape(text)}</div>") if text else ""

    def _case_for(self, spec: CaseSpec) -> Case:
        """The drawn routing for ``spec``, reused while only bytes-per-row change (skewed routings
        draw their routing independently of h and dtype, uniform does not)."""
        uniform = parse_routing(spec.routing).name == "uniform"
        key = (spec.pes, spec.bs, spec.topk, spec.expert_per_pe, spec.routing, spec.seed, spec.masked_fraction,
               spec.dtype, spec.h if uniform else None)
        if key != self._case_key:
            self._case, self._case_key = make_case(spec), key
        return self._case

    def refresh(self) -> Plan | None:
        """Validate the values, replan and redraw the plan view; runs nothing.

        Returns the new Plan, or None (with ``message`` set) when the values are invalid.
        """
        t0 = time.perf_counter()
        self.plan = None
        self.spec = None
        self.sdma_table = self.sdma_table.iloc[0:0]
        try:
            spec = self.make_spec()
            if parse_routing(spec.routing).name == "uniform":
                x_bytes = spec.pes * spec.bs * spec.row_bytes
                if x_bytes > self.max_uniform_x_bytes:
                    raise CapacityError(
                        f"routing 'uniform' follows the reference recipe, which draws x before the routing: "
                        f"{_fmt_bytes(x_bytes)} of x at this shape, over the app's limit of "
                        f"{_fmt_bytes(self.max_uniform_x_bytes)}; pick a skewed routing (it never draws x to plan) "
                        f"or a smaller shape")
            case = self._case_for(spec)
            p = plan_counts(case.ep_recv_count, spec.h, spec.itemsize, "doubleplane",
                            self.controls["min_sdma_bytes"].value)
        except (SpecError, ParameterError, CapacityError) as e:
            self._show_message(f"Cannot plan this case: {e}. Nothing was run.")
            self.run_button.disabled = True
            self.plan_summary.value = ""
            self.sdma_html.value = ""
            return None
        self.spec, self.plan = spec, p
        self.run_button.disabled = False
        self._show_message("")
        seg = p.segments
        self.sdma_table = seg.loc[seg["plane"] == "SDMA", ["pe", "segment", "local_expert", "src_rank",
                                                           "token_count", "bytes"]].reset_index(drop=True)
        self._draw_plan(spec, p)
        self.replans += 1
        self.plan_seconds = time.perf_counter() - t0
        return p

    def _draw_plan(self, spec: CaseSpec, p: Plan) -> None:
        t = p.totals
        mte, sdma = int(t["mte_bytes"].sum()), int(t["sdma_bytes"].sum())
        avg = t["remote_avg_segment_bytes"]
        self.plan_summary.value = (
            f"<b>{spec.case_id}</b>, routing <code>{html.escape(spec.routing)}</code>, {spec.dtype}: "
            f"MTE would carry {_fmt_bytes(mte)}, SDMA {_fmt_bytes(sdma)} "
            f"({100 * sdma / max(mte + sdma, 1):.1f} %) in {len(self.sdma_table)} SDMA segments; "
            f"remote average segment {_fmt_bytes(avg.min())} to {_fmt_bytes(avg.max())} per PE "
            f"(SDMA floor {p.min_sdma_bytes:,} B).")
        limit = 40
        shown = self.sdma_table.head(limit)
        more = f"<p>... and {len(self.sdma_table) - limit} more</p>" if len(self.sdma_table) > limit else ""
        self.sdma_html.value = (shown.to_html(index=False) + more) if len(shown) else "<p>none: every segment goes by MTE</p>"
        fig = self._map_view.draw(p)
        self.figures["segment_map"] = fig
        self.segment_image.value = plots.figure_png(fig)
        fig2 = plots.plane_bytes_plot(p)
        self.figures["plane_bytes"] = fig2
        self.plane_image.value = plots.figure_png(fig2)

    # ------------------------------------------------------------------ run
    def _run_bytes(self, spec: CaseSpec) -> int:
        rows = spec.pes * spec.bs * spec.topk + 2 * spec.pes * spec.bs
        return rows * spec.row_bytes + spec.pes * window_geometry(spec)["window_bytes"]

    def run(self) -> "runner.Comparison | None":
        """Build if needed, run classic and doubleplane on the chosen target, check, plot, record.

        Returns the :class:`~combine_lab.run.runner.Comparison` (``{"classic": RunResult,
        "doubleplane": RunResult}``; a variant the target refuses is left out, with its reason in
        ``.refused``, and recorded as a REFUSED row), or None when the values are invalid, the
        case is too large for ``max_run_bytes``, or the run failed: then ``message`` says why
        and (for the first two) nothing was launched.
        """
        plan_now = self.refresh()
        if plan_now is None or self.spec is None:
            return None
        spec = self.spec
        v = self.values()
        need = self._run_bytes(spec)
        if need > self.max_run_bytes:
            self._show_message(f"Not run: this case needs about {_fmt_bytes(need)} of case files and windows, over "
                               f"the app's limit of {_fmt_bytes(self.max_run_bytes)} (TuningApp(max_run_bytes=...)). "
                               "Nothing was launched.")
            return None
        prof_pe = "all" if spec.pes <= self.prof_all_max_pes else 0
        self.run_button.disabled = True
        self.progress.value = 0
        try:
            self.status.value = f"building target {v['target']} (if needed)..."
            build_mod.build(v["target"])
            self.progress.value = 1
            launches = 2 * (spec.pes if prof_pe == "all" else 1) * (v["warmup"] + v["loops"])
            self.status.value = f"running classic and doubleplane ({launches} launches of {spec.pes} PEs)..."
            case = Case(spec, self._case.expert_ids, self._case.expert_scales)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a refusal is shown as a row with its reason, not a warning
                runs = runner.compare(case, warmup=v["warmup"], loops=v["loops"], target=v["target"],
                                      min_sdma_bytes=v["min_sdma_bytes"], prof_pe=prof_pe, timeout_s=self.timeout_s)
            self.progress.value = 3
        except _RUN_ERRORS as e:
            self.status.value = "failed"
            self._show_message(f"Run failed: {type(e).__name__}: {e}")
            return None
        finally:
            self.run_button.disabled = self.plan is None
        self.status.value = "checking x_out and counters..."
        self.last_runs = runs
        self._record(runs, v)
        self.progress.value = 4
        self.status.value = "done"
        return runs

    def _result_rows(self, runs, v: dict) -> list[ResultRow]:
        """The run's rows, in variant order: one per RunResult, one per refused variant."""
        refused = getattr(runs, "refused", {})
        rows = []
        for variant in ("classic", "doubleplane"):
            if variant in runs:
                rows.append(result_row(runs[variant]))
            elif variant in refused:
                rows.append(result_row(NotRun.of(self.spec, variant, v["target"], REFUSED, refused[variant],
                                                 v["min_sdma_bytes"])))
        return rows

    def _record(self, runs, v: dict) -> None:
        rows = self._result_rows(runs, v)
        lines = []
        for row in rows:
            res = runs.get(row.variant)
            name = {"classic": "classic (MTE only)", "doubleplane": "doubleplane (MTE + SDMA)"}[row.variant]
            if res is None:
                lines.append(f"<li><b>{name}</b>: <span style='color:#b35900'>{row.check}</span>: "
                             f"{html.escape(row.reason)}</li>")
                continue
            bad = [r for r, chk in enumerate(res.checks) if not chk.ok]
            mism = res.counter_mismatches()
            lines.append(f"<li><b>{name}</b>: x_out "
                         + ("<span style='color:#1a7f37'>PASS on every PE</span>" if not bad else
                            f"<span style='color:#b00020'>FAIL on PE {bad}</span>")
                         + ("; counters = plan" if not mism else
                            "; counters differ from the plan: " + html.escape("; ".join(mism[:4])))
                         + "</li>")
        first = rows[0]
        self.verdict_html.value = (f"<p><b>{first.case_id}</b> {html.escape(first.routing)} on {first.target}:</p>"
                                   f"<ul>{''.join(lines)}</ul>")
        frames = []
        for res in runs.values():
            pb = res.plane_bytes()
            if len(pb):
                frames.append(pb.reset_index().assign(variant=res.variant))
        if frames:
            counters = pd.concat(frames, ignore_index=True)[["variant", "pe", "mte_bytes", "sdma_bytes", "mte_puts",
                                                            "sdma_puts", "status_writes"]]
            self.counters_html.value = ("<p>Per-plane counters (last launch; bytes, puts):</p>"
                                        + counters.to_html(index=False))
        else:
            self.counters_html.value = "<p>No per-plane counters on this target.</p>"
        fig = plots.compare_per_pe(runs)
        self.figures["compare"] = fig
        self.compare_image.value = plots.figure_png(fig)
        number = len(self.history) + 1
        self._rows_data.extend({"run": number, **r.as_dict()} for r in rows)
        self.rows = pd.DataFrame(self._rows_data, columns=ROWS_COLUMNS)
        self._history_rows.append({"run": number, "case_id": first.case_id, "routing": first.routing,
                                   "dtype": first.dtype, "target": first.target,
                                   "min_sdma_bytes": v["min_sdma_bytes"], "warmup": v["warmup"], "loops": v["loops"],
                                   **compare_rows(rows)})
        self.history = pd.DataFrame(self._history_rows, columns=HISTORY_COLUMNS)
        self.history_html.value = self.history.to_html(index=False, float_format=lambda x: f"{x:.3f}")
        hfig = plots.history_plot(self.history)
        self.figures["history"] = hfig
        self.history_image.value = plots.figure_png(hfig)

    # ------------------------------------------------------------------ output
    def save_figures(self, out_dir, prefix: str = "tuning_") -> list:
        """Save the current figures as ``<out_dir>/<prefix><view>.png``; returns the paths."""
        return [plots.save_figure(fig, out_dir, f"{prefix}{name}") for name, fig in self.figures.items()]
