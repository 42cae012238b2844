"""The tuning app's Sweep: the app's case over lists of PEs and tokens per PE, both variants run
on every point, here or as tasks on dask.distributed (docs/lab.md#8-beyond-one-machine).

A view over :func:`combine_lab.lab.sweep.run_sweep` with the app's other values (h, topk,
experts per PE, dtype, routing, seed, floor, warmup, loops, repeats, target): the lists are read
as typed (``"2,4"``, ``"[8, 16]"``), every point and the cluster address are checked before
anything runs, and the sweep goes on a thread of its own, so the app's controls stay free. The
readable table (:func:`combine_lab.results.tables.readable`: times median [min-max], speed-up and
verdict per case) replaces the panel's last one when the sweep ends; a failure is said in the
panel, whole.
"""

from __future__ import annotations

import html
import threading
from typing import Any, Callable

import ipywidgets as widgets

from ..case.grid import make_grid
from ..errors import CombineLabError, ParameterError
from ..results.tables import readable, summarize
from ..values import as_list
from . import sweep

#: What the Sweep's boxes hold when the app starts.
DEFAULT_PES, DEFAULT_BS = "2,4", "8,16"


class SweepPanel:
    """The Sweep of a :class:`~combine_lab.lab.app.TuningApp`: boxes for the PE and tokens lists
    and the cluster, a **Run sweep** button, a status line and the readable table.

    Args:
        values: a callable returning the app's current values (``TuningApp.state.values()``:
            the case, the run settings).
        spec: a callable returning the app's current CaseSpec, or None while a value cannot be used
            (the sweep takes its routing, h, topk, experts per PE, dtype and seed).

    Attributes:
        box: the panel's widget. pes_list, bs_list, cluster: its text boxes. button, status,
        table_html: its button, status line and table. result: the last sweep's summary
        DataFrame (:func:`~combine_lab.results.tables.summarize`), or None. error: the last
        sweep's failure text ('' when none).
    """

    def __init__(self, values: Callable[[], dict], spec: Callable[[], Any]):
        self._values, self._spec = values, spec
        lay = widgets.Layout(width="236px")
        style = {"description_width": "80px"}
        self.pes_list = widgets.Text(value=DEFAULT_PES, description="pes list", style=style, layout=lay,
                                     continuous_update=False)
        self.bs_list = widgets.Text(value=DEFAULT_BS, description="bs list", style=style, layout=lay,
                                    continuous_update=False)
        self.cluster = widgets.Text(value="", description="cluster", placeholder="here, one after another",
                                    style=style, layout=widgets.Layout(width="352px"), continuous_update=False)
        self.button = widgets.Button(description="Run sweep", tooltip="run both variants at every point of the lists")
        self.button.add_class("cl-sweep-run")
        self.button.on_click(lambda _b: self.start())
        self.status = widgets.HTML()
        self.status.add_class("cl-sweep-status")
        self.table_html = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.table_html.add_class("cl-sweep-table")
        self.box = widgets.VBox([
            widgets.HTML("<div class='cl-note'>the app's case at every (pes, bs) of the lists; cluster: empty (here), "
                         "<code>local</code>, <code>local:N</code> or <code>tcp://HOST:PORT</code> "
                         "(docs/lab.md, section 8)</div>"),
            widgets.HBox([self.pes_list, self.bs_list, self.cluster, self.button],
                         layout=widgets.Layout(flex_flow="row wrap", width="100%")),
            self.status, self.table_html], layout=widgets.Layout(width="100%"))
        self.result = None
        self.error = ""
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True while a sweep goes on."""
        return self._thread is not None and self._thread.is_alive()

    def grid(self):
        """The sweep's points as a :class:`~combine_lab.case.grid.Grid` of the lists and the app's
        other values. Raises SpecError or ParameterError naming the list or the point, or the app's
        values when they cannot be used."""
        spec = self._spec()
        if spec is None:
            raise ParameterError("the app's values cannot be used (marked above): fix them, then sweep",
                                 parameter="sweep")
        return make_grid(as_list(self.pes_list.value, int, "pes list"), as_list(self.bs_list.value, int, "bs list"),
                         spec.h, spec.topk, spec.expert_per_pe, [spec.routing], dtype=spec.dtype, seed=spec.seed)

    def start(self) -> bool:
        """Check the lists and start the sweep on a thread; False (the status says why, nothing
        launched) when a sweep goes on or a value cannot be used."""
        if self.running:
            self.status.value = "<div class='cl-note'>A sweep goes on: not queued (press it once it ends).</div>"
            return False
        try:
            specs = self.grid().specs
            cluster = self.cluster.value.strip() or None
            if cluster is not None:
                from ..cluster.connect import parse_cluster
                parse_cluster(cluster)
        except CombineLabError as e:
            self._fail(f"Not run: {e}")
            return False
        v = self._values()
        kw = dict(warmup=v["warmup"], loops=v["loops"], repeats=v["repeats"], target=v["target"],
                  min_sdma_bytes=v["min_sdma_bytes"], progress=False, cluster=cluster)
        self.error, self.button.disabled = "", True
        where = f"on {html.escape(cluster)}" if cluster else "here"
        self.status.value = f"<div class='cl-note cl-pending'>Sweeping {len(specs)} cases {where}...</div>"
        self._thread = threading.Thread(target=self._run, args=(specs, kw), name="combine-lab-sweep", daemon=True)
        self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the sweep going on; True when none goes on now."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self, specs, kw: dict[str, Any]) -> None:
        try:
            tidy = sweep.run_sweep(specs, **kw)
            self.result = summarize(tidy)
            table = readable(self.result)
            self.table_html.value = ("<div class='cl-scroll' tabindex='0' aria-label='sweep'>"
                                     + table.to_html(index=False, classes="cl-table", border=0) + "</div>")
            self.status.value = (f"<div class='cl-note' role='status'>Sweep done: {len(specs)} cases "
                                 "(measured; speed-up = classic / doubleplane, median [min-max] over repeats).</div>")
        except Exception as e:  # noqa: BLE001 - said in the panel, whole, never a silent thread death
            self._fail(f"Sweep failed: {type(e).__name__}: {e}")
        finally:
            self.button.disabled = False

    def _fail(self, text: str) -> None:
        self.error = text
        self.status.value = failure_html(text)


def failure_html(text: str, lead: str = "", tail: str = "") -> str:
    """A failure as the app says it: its first line (after ``lead``, HTML, and before ``tail``) in
    red, the rest (a PE's log) below it in a scrolling box; ``text`` escaped."""
    first, _, rest = text.partition("\n")
    log = f"<pre class='cl-run-log'>{html.escape(rest)}</pre>" if rest.strip() else ""
    return (f"<div class='cl-run-failed' role='alert' style='color:#b00020'>{lead}{html.escape(first)}{tail}"
            f"{log}</div>")
