"""The unknown the lab ranks first as a figure: the modelled speed-up of doubleplane over classic
against the number of SDMA engines that run at once (combine_lab/model/unknowns.py's engines
curve, 1 to 48), at the floor ``suggest`` picks and at the default 2 MiB floor, with the model's
resolution around parity (docs/timing-model.md#8-choosing-the-floor). Modelled, never measured:
the title says so, with the case, its PEs and the machine. Written by ``combine-lab suggest --out``;
``03_sweep`` draws it for a case of its grid."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..model.unknowns import RESOLUTION
from .plots import new_figure

__all__ = ["engines_plot", "ENGINES_FIGURE"]

#: The file name (without .png) ``combine-lab suggest --out DIR`` writes the figure under.
ENGINES_FIGURE = "suggest_engines"


def engines_plot(curves: dict[str, pd.DataFrame], case: str, pes: int, caption: str, dpi: int = 72) -> Figure:
    """Speed-up (classic / doubleplane comm_only of the slowest PE, above 1: doubleplane faster)
    against SDMA engines, one line per entry of ``curves`` (a legend label, e.g. "doubleplane at floor
    4,521,984 B", -> an :func:`~combine_lab.model.unknowns.engines_curve` DataFrame: engines, speedup);
    x on a log2 axis at the engine counts priced; parity and the resolution band shaded. ``case``:
    its id and routing; ``caption``: the model's "modelled on ..." line."""
    fig = new_figure(8.8, 3.8, dpi)
    ax = fig.subplots()
    engines = sorted({int(e) for c in curves.values() for e in c["engines"]})
    for (label, c), marker in zip(curves.items(), "osd^v"):
        ax.plot(c["engines"].to_numpy(dtype=float), c["speedup"].to_numpy(dtype=float), marker=marker, label=label)
    ax.axhspan(1 - RESOLUTION, 1 + RESOLUTION, color="grey", alpha=0.15,
               label=f"parity within the model's resolution ({RESOLUTION:.0%})")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    if engines:
        ax.set_xticks(engines, [str(e) for e in engines])
        ax.minorticks_off()
    ax.set_xlabel("SDMA engines running at once (of the 48 SQs SHMEM creates; not published)")
    ax.set_ylabel("speed-up, classic / doubleplane (1)")
    ax.grid(alpha=0.3)
    top = max([float(np.nanmax(c["speedup"])) for c in curves.values()] + [1 + RESOLUTION])
    ax.set_ylim(0, top * 1.4)  # room for the legend above the curves
    ax.legend(fontsize=8, loc="best")
    fig.suptitle(f"{case}, {pes} PEs: speed-up of doubleplane against SDMA engines (MODELLED, not measured)\n"
                 + "\n".join(textwrap.wrap(caption, 130)), fontsize=8.5)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.14, top=0.78)
    return fig
