"""The tuning app's history of Runs: the table (the columns that fit, then all of them one click
away) and its figure. A mixin of :class:`combine_lab.lab.app.TuningApp` (its state's ``history``)."""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np

from . import svg
from .app_html import fitted_svg, speedup_spread, table
from .tuning import HISTORY_COLUMNS

__all__ = ["HistoryView", "HISTORY_SHOWN"]

#: The history columns the app shows in its table (column -> heading); the others are one click
#: away ("all columns"), so that the table fits a JupyterLab column.
HISTORY_SHOWN = {"run": "run", "case_id": "case (bs, h, topk, E, pes), kernel settings", "routing": "routing",
                 "min_sdma_bytes": "SDMA floor", "comm_only_classic_us": "classic comm_only, median (us)",
                 "comm_only_doubleplane_us": "doubleplane comm_only, median (us)",
                 "comm_only_speedup_spread": "speed-up [min-max]", "comm_only_verdict": "verdict",
                 "sdma_share": "SDMA share", "check": "check", "counters_ok": "counters = plan"}
#: How the shown history writes its values (short, so that the table fits; "all columns" has them exact).
_HISTORY_FORMAT = {"case_id": lambda v: html.escape(str(v).removeprefix("shape_")),
                   "min_sdma_bytes": lambda v: html.escape(svg.floor_text(int(v))),
                   "comm_only_classic_us": lambda v: "-" if not np.isfinite(v) else f"{v:,.1f}",
                   "comm_only_doubleplane_us": lambda v: "-" if not np.isfinite(v) else f"{v:,.1f}",
                   "sdma_share": lambda v: "-" if not np.isfinite(v) else
                   "none (= classic)" if v == 0 else f"{100 * v:.1f} %"}


class HistoryView:
    """The history panel of :class:`~combine_lab.lab.app.TuningApp`."""

    def _build_history_widgets(self) -> None:
        wide = widgets.Layout(width="100%")
        self.history_html = widgets.HTML(layout=wide)
        self.history_html.add_class("cl-history")
        self.history_all_html = widgets.HTML(layout=wide)
        self.history_plot_html = widgets.HTML(layout=wide)

    def _render_history(self) -> None:
        st = self.state
        settings = st.history["settings"].fillna("reference").astype(str)
        shown = st.history.assign(case_id=[c if g == "reference" else f"{c}, {g}"  # the settings beside the case
                                           for c, g in zip(st.history["case_id"], settings)],
                                  comm_only_speedup_spread=[
            speedup_spread(r["comm_only_speedup"], r["comm_only_speedup_lo"], r["comm_only_speedup_hi"], r["repeats"])
            for _, r in st.history.iterrows()])
        self.history_html.value = table(shown, HISTORY_SHOWN, "cl-history-table", _HISTORY_FORMAT,
                                         label="history")
        self.history_all_html.value = table(st.history, {c: c for c in HISTORY_COLUMNS}, "cl-history-all",
                                             label="history, all columns")
        self.history_plot_html.value = (fitted_svg(st.figures["history"], st.figure_width) if "history" in st.figures
                                        else "")

