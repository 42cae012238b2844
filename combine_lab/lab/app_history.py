"""The tuning app's history of Runs: the table (the columns that fit, then all of them one click
away), sorted and filtered as asked, exported as CSV, two of its Runs compared with ``combine-lab
diff``'s verdicts, and its figure. A mixin of :class:`combine_lab.lab.app.TuningApp` (its state's
``history``; the logic is :mod:`combine_lab.lab.history`'s)."""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

import ipywidgets as widgets
import numpy as np

from .app_html import fitted_svg, speedup_spread, table
from .history import SORTABLE, compare_history_runs, history_csv, history_view, run_inputs_changed
from .tuning import HISTORY_COLUMNS

__all__ = ["HistoryView", "HISTORY_SHOWN", "SORT_LABELS"]

#: The history columns the app shows in its table (column -> heading); the others are one click
#: away ("all columns"), so that the table fits a JupyterLab column.
HISTORY_SHOWN = {"run": "run", "case_id": "case (bs, h, topk, E, pes), kernel settings", "routing": "routing",
                 "min_sdma_bytes": "SDMA floor", "comm_only_classic_us": "classic comm_only, median (us)",
                 "comm_only_doubleplane_us": "doubleplane comm_only, median (us)",
                 "comm_only_speedup_spread": "speed-up [min-max]", "comm_only_verdict": "verdict",
                 "comm_only_algbw": "algbw classic / doubleplane (GB/s)",
                 "sdma_share": "SDMA share", "check_counters": "x_out check; counters = plan"}
#: The sort selector's options: label -> history column (:data:`combine_lab.lab.history.SORTABLE`).
SORT_LABELS = {"run": "run", "case": "case_id", "routing": "routing", "SDMA floor": "min_sdma_bytes",
               "settings": "settings", "classic comm_only": "comm_only_classic_us",
               "doubleplane comm_only": "comm_only_doubleplane_us", "speed-up": "comm_only_speedup",
               "verdict": "comm_only_verdict", "SDMA share": "sdma_share", "check": "check",
               "doubleplane algbw": "comm_only_doubleplane_algbw_GBps"}
assert set(SORT_LABELS.values()) == set(SORTABLE)
#: How the shown history writes its values (short, so that the table fits; "all columns" has them exact).
_HISTORY_FORMAT = {"case_id": lambda v: html.escape(str(v).removeprefix("shape_")),
                   "min_sdma_bytes": lambda v: f"{int(v):,} B",
                   "comm_only_classic_us": lambda v: "-" if not np.isfinite(v) else f"{v:,.1f}",
                   "comm_only_doubleplane_us": lambda v: "-" if not np.isfinite(v) else f"{v:,.1f}",
                   "sdma_share": lambda v: "-" if not np.isfinite(v) else
                   "none (= classic)" if v == 0 else f"{100 * v:.1f} %"}


def _true(v) -> bool:
    """A flag of the history: True, numpy's True or 1 (NaN, a Run restored without it: not true)."""
    return bool(v == 1) if v is not None and v == v else False


def _gbps(v) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:,.2f}"


class HistoryView:
    """The history panel of :class:`~combine_lab.lab.app.TuningApp`: sort, filter, CSV, compare."""

    def _build_history_widgets(self) -> None:
        wide = widgets.Layout(width="100%")
        self.history_html = widgets.HTML(layout=wide)
        self.history_html.add_class("cl-history")
        self.history_all_html = widgets.HTML(layout=wide)
        self.history_plot_html = widgets.HTML(layout=wide)
        style = {"description_width": "initial"}
        self.history_sort = widgets.Dropdown(options=list(SORT_LABELS), value="run", description="sort by",
                                             style=style, layout=widgets.Layout(width="260px"))
        self.history_descending = widgets.Checkbox(value=False, description="descending", indent=False,
                                                   layout=widgets.Layout(width="120px"))
        self.history_filter = widgets.Text(value="", description="filter", continuous_update=False, style=style,
                                           placeholder="words (zipf segment-c4 faster), run=N",
                                           tooltip="rows whose case, routing, settings, verdict or check hold "
                                                   "every word", layout=widgets.Layout(width="340px"))
        self.history_csv_html = widgets.HTML()
        for w, cls in ((self.history_sort, "cl-history-sort"), (self.history_descending, "cl-history-descending"),
                       (self.history_filter, "cl-history-filter"), (self.history_csv_html, "cl-history-csv")):
            w.add_class(cls)
        for w in (self.history_sort, self.history_descending, self.history_filter):
            w.observe(self._on_history_control, names="value")
        self.compare_a = widgets.Dropdown(options=[], description="compare run", style=style,
                                          layout=widgets.Layout(width="170px"))
        self.compare_b = widgets.Dropdown(options=[], description="with run", style=style,
                                          layout=widgets.Layout(width="150px"))
        self.compare_a.add_class("cl-compare-a")
        self.compare_b.add_class("cl-compare-b")
        for w in (self.compare_a, self.compare_b):
            w.observe(self._on_history_control, names="value")
        self.history_compare_html = widgets.HTML(layout=wide)
        self.history_compare_html.add_class("cl-history-compare")

    def _on_history_control(self, change) -> None:
        if self._hold:
            return
        with self._lock:
            if change["owner"] in (self.compare_a, self.compare_b):
                self._render_history_compare()
            else:
                self._render_history()

    def _history_tools(self) -> list:
        """The rows above and below the history table: sort and filter with the CSV link; compare."""
        row = widgets.HBox([self.history_sort, self.history_descending, self.history_filter, self.history_csv_html],
                           layout=widgets.Layout(flex_flow="row wrap", width="100%", align_items="center"))
        row.add_class("cl-history-tools")
        pick = widgets.HBox([self.compare_a, self.compare_b], layout=widgets.Layout(flex_flow="row wrap",
                                                                                 width="100%"))
        pick.add_class("cl-history-pick")
        return [row, self.history_html, pick, self.history_compare_html]

    def history_shown(self):
        """The history rows the table shows: :func:`~combine_lab.lab.history.history_view` of the
        sort and filter controls (DataFrame, :data:`~combine_lab.lab.history.HISTORY_COLUMNS`)."""
        return history_view(self.state.history, SORT_LABELS[self.history_sort.value], self.history_descending.value,
                            self.history_filter.value)

    def export_history(self, path: str | os.PathLike | None = None) -> Path:
        """Write the rows the table shows (sorted and filtered as it is) as CSV, every column
        (:func:`~combine_lab.lab.history.history_csv`), to ``path`` (default
        ``tuning_history.csv`` in the current folder); returns the path. Raises OSError when it
        cannot be written."""
        out = Path(path if path is not None else "tuning_history.csv")
        out.write_text(history_csv(self.history_shown()))
        return out

    def _render_history(self) -> None:
        st = self.state
        view = self.history_shown()
        settings = view["settings"].fillna("reference").astype(str)
        shown = view.assign(case_id=[c if g == "reference" else f"{c}, {g}"  # the settings beside the case
                                     for c, g in zip(view["case_id"], settings)],
                            comm_only_speedup_spread=[
            speedup_spread(r["comm_only_speedup"], r["comm_only_speedup_lo"], r["comm_only_speedup_hi"], r["repeats"])
            for _, r in view.iterrows()],
                            comm_only_algbw=[f"{_gbps(r['comm_only_classic_algbw_GBps'])} / "
                                             f"{_gbps(r['comm_only_doubleplane_algbw_GBps'])}"
                                             for _, r in view.iterrows()],
                            check_counters=[f"{r['check']}; {'yes' if _true(r['counters_ok']) else 'NO'}"
                                            for _, r in view.iterrows()])
        self.history_html.value = table(shown, HISTORY_SHOWN, "cl-history-table", _HISTORY_FORMAT,
                                        label="history") + (
            "" if len(view) == len(st.history) else
            f"<div class='cl-note cl-history-count'>{len(view)} of {len(st.history)} runs shown (filter "
            f"<code>{html.escape(self.history_filter.value)}</code>)</div>")
        self.history_all_html.value = table(view, {c: c for c in HISTORY_COLUMNS}, "cl-history-all",
                                            label="history, all columns")
        # a download in the page (a data: URL; Tab reaches it, Enter saves it), of the rows shown
        data = base64.b64encode(history_csv(view).encode()).decode()
        self.history_csv_html.value = (
            f"<a class='cl-csv-link' download='tuning_history.csv' href='data:text/csv;base64,{data}'>"
            f"Export CSV ({len(view)} run{'s' if len(view) != 1 else ''})</a>" if len(view) else "")
        runs = [int(r) for r in st.history["run"]]
        for w, default in ((self.compare_a, runs[-2] if len(runs) > 1 else None),
                           (self.compare_b, runs[-1] if runs else None)):
            if list(w.options) != runs:  # a new Run: the last two compared, the newest as B
                with self._held():
                    w.options = runs
                    w.value = default
        self.history_plot_html.value = (fitted_svg(st.figures["history"], st.figure_width) if "history" in st.figures
                                        else "")
        self._render_history_compare()

    def _render_history_compare(self) -> None:
        """Two Runs of the history compared as ``combine-lab diff`` compares two runs."""
        a, b, st = self.compare_a.value, self.compare_b.value, self.state
        if a is None or b is None or a == b or len(st.history) < 2:
            self.history_compare_html.value = ("<div class='cl-note'>Pick two runs to compare them as "
                                               "<code>combine-lab diff</code> does.</div>" if len(st.history) >= 2
                                               else "")
            return
        d = compare_history_runs(st.history, a, b)
        rows = {int(r["run"]): r for _, r in st.history.iterrows()}
        changed = run_inputs_changed(rows[a], rows[b])
        fmt = {"a": lambda v: "-" if v is None or not np.isfinite(v) else f"{v:,.3f}",
               "b": lambda v: "-" if v is None or not np.isfinite(v) else f"{v:,.3f}",
               "b_over_a": lambda v: "-" if not np.isfinite(v) else f"{v:.3f}"}
        heads = {"variant": "variant", "metric": "metric", "a": f"run {a}", "a_spread": f"run {a} min-max",
                 "b": f"run {b}", "b_spread": f"run {b} min-max", "b_over_a": f"run {b} / run {a}",
                 "verdict": "verdict (B = run %d)" % b}
        self.history_compare_html.value = (
            f"<div class='cl-note'>Run {b} against run {a} (A = run {a}, B = run {b}), as <code>combine-lab diff</code> "
            f"judges two runs: beyond noise only where the spreads (min-max over the repeats) do not overlap. "
            + (html.escape("Inputs: " + "; ".join(changed)) if changed else "The same inputs.") + "</div>"
            + table(d, heads, "cl-history-diff", fmt, label=f"run {b} against run {a}"))
