"""Per-expert load vectors measured on real MoE models (data/routing/expert_counts.csv).

A trace is named ``<model>/<domain>/<layer>`` (routing string ``trace:<model>/<domain>/<layer>``),
e.g. ``olmoe/github/7`` or ``mixtral/arxiv/15``. Only the rows that count all top-k
choices of a token (``selections_counted_per_token == top_k``) are used; the
first-choice-only rows are not traces. Provenance and the assumption that turns a
load vector into per-token choices: data/routing/README.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Folder holding expert_counts.csv (the repository's data/routing/).
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "routing"

#: CSV ``model`` column -> short name used in trace names. The short names follow
#: the source folders of allenai/OLMoE scripts/routing_output/ (olmoe, olmoe-sft,
#: olmoe-dpo = the Instruct model), except Mixtral, called ``mixtral`` here.
MODEL_SHORT_NAMES = {
    "allenai/OLMoE-1B-7B-0924": "olmoe",
    "allenai/OLMoE-1B-7B-0924-SFT": "olmoe-sft",
    "allenai/OLMoE-1B-7B-0924-Instruct": "olmoe-dpo",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral",
}


@dataclass(frozen=True)
class Trace:
    """One measured per-expert load vector.

    Attributes: ``name`` ("olmoe/github/7"), ``model`` (the CSV's model column),
    ``num_experts`` (E of the model), ``top_k`` (k of the model), ``tokens``
    (sum(counts) // top_k), ``counts`` (int64 [num_experts], how often each expert
    was chosen, read-only).
    """

    name: str
    model: str
    num_experts: int
    top_k: int
    counts: np.ndarray

    @property
    def tokens(self) -> int:
        return int(self.counts.sum()) // self.top_k

    @property
    def probabilities(self) -> np.ndarray:
        """float64 [num_experts]: p = counts / sum(counts)."""
        return self.counts / self.counts.sum()


@functools.lru_cache(maxsize=1)
def _load_traces() -> dict[str, Trace]:
    import pandas as pd  # here: a case without a trace never pays the import (docs/timing-model.md#1-what-the-model-is)

    table = pd.read_csv(DATA_DIR / "expert_counts.csv")
    table = table[table["selections_counted_per_token"] == table["top_k"]]
    traces = {}
    for (model, domain, layer), rows in table.groupby(["model", "domain", "layer"], sort=True):
        rows = rows.sort_values("expert")
        n = int(rows["num_experts"].iloc[0])
        if not np.array_equal(rows["expert"].to_numpy(), np.arange(n)):
            raise ValueError(f"{DATA_DIR / 'expert_counts.csv'}: {model}/{domain}/{layer} "
                             f"does not list experts 0..{n - 1} once each")
        counts = rows["count"].to_numpy(dtype=np.int64)
        counts.setflags(write=False)
        name = f"{MODEL_SHORT_NAMES.get(model, model)}/{domain}/{int(layer)}"
        traces[name] = Trace(name, model, n, int(rows["top_k"].iloc[0]), counts)
    return traces


def list_traces() -> list[str]:
    """Routing strings of every available trace, e.g. ``"trace:olmoe/github/7"``.

    Returns: list[str] sorted by model short name, domain, then layer number.
    Source: data/routing/expert_counts.csv (see data/routing/README.md).
    """
    names = _load_traces()
    key = lambda n: (n.split("/")[0], n.split("/")[1], int(n.split("/")[2]))  # noqa: E731
    return ["trace:" + n for n in sorted(names, key=key)]


def get_trace(name: str) -> Trace:
    """The trace called ``name`` ("olmoe/github/7", without the ``trace:`` prefix).

    Raises KeyError if there is no such trace (routing.parse_routing turns that into
    a SpecError listing what exists).
    """
    return _load_traces()[name]
