"""Which AIV core of a PE sends what: the SoCs' AIV core counts, a launch's block_dim, and the
source ranks each core serves (kernels/combine_kernel.h launch_block_dim; docs/hardware-rules.md#9-cores-waves-and-barriers).

A launch has one block per source rank, but never more than the SoC's AIV cores (more would run
in waves, and blocks wait on each other's flags) nor SHMEM's 48 SDMA streams; core ``c`` then
serves source ranks ``c, c + block_dim, c + 2*block_dim, ...``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

KERNEL_HEADER = Path(__file__).resolve().parents[2] / "kernels" / "combine_kernel.h"


@functools.cache
def kernel_constant(name: str) -> int:
    """An integer ``constexpr`` of kernels/combine_kernel.h (e.g. ``kSdmaQuietEvery``), read from the
    header itself so that Python and the kernel never disagree. ``N * 1024`` forms are evaluated.

    Raises:
        KeyError: the header defines no such integer constant.
    """
    m = re.search(rf"constexpr u?int\d+_t {name} = (\d+)(?: \* (\d+))?;", KERNEL_HEADER.read_text())
    if not m:
        raise KeyError(f"{KERNEL_HEADER}: no integer constexpr {name}")
    return int(m.group(1)) * int(m.group(2) or 1)

#: The twin's SoC table (AIV cores and UB per SoC), read from the header itself so that Python
#: and the twin never disagree.
TWIN_SOC_HEADER = Path(__file__).resolve().parents[2] / "host" / "twin" / "twin_socs.h"


@dataclass(frozen=True)
class TwinSoc:
    """One row of host/twin/twin_socs.h: ``name`` (with ``per_die``: the prefix of its dies' names),
    AIV cores and UB bytes per AIV core."""

    name: str
    per_die: bool
    aiv: int
    ub_bytes: int

    def matches(self, soc: str) -> bool:
        return soc.startswith(self.name) if self.per_die else soc == self.name


@functools.cache
def twin_socs() -> tuple[TwinSoc, ...]:
    """The SoCs the twin models, in the header's order (host/twin/twin_socs.h kSocs).

    Raises:
        KeyError: the header has no such table.
    """
    text = TWIN_SOC_HEADER.read_text()
    ints = {m[1]: int(m[2]) * int(m[3] or 1)
            for m in re.finditer(r"constexpr uint32_t (\w+) = (\d+)(?: \* (\d+))?;", text)}
    table = re.search(r"constexpr SocRow kSocs\[\] = \{(.*?)\n\};", text, flags=re.S)
    if not table:
        raise KeyError(f"{TWIN_SOC_HEADER}: no kSocs table")
    return tuple(TwinSoc(m[1], m[2] == "true", int(m[3]), ints[m[4]] if m[4] in ints else int(m[4]))
                 for m in re.finditer(r'\{"(\w+)", (true|false), (\d+), (\w+)\}', table[1]))


def _twin_default_soc() -> str:
    m = re.search(r'constexpr const char\* kDefaultSoc = "(\w+)";', TWIN_SOC_HEADER.read_text())
    if not m:
        raise KeyError(f"{TWIN_SOC_HEADER}: no kDefaultSoc")
    return m[1]


def _twin_socs_text(socs: tuple[TwinSoc, ...]) -> str:
    """What the twin models, in words, as its refusal says it (host/twin/twin_core.cpp builds the
    same sentence from the same table): neighbouring rows with the same counts named together."""
    groups: list[list[TwinSoc]] = []
    for s in socs:
        if groups and (groups[-1][0].aiv, groups[-1][0].per_die) == (s.aiv, s.per_die):
            groups[-1].append(s)
        else:
            groups.append([s])
    parts = [" and ".join(s.name + ("xx" if s.per_die else "") for s in g)
             + f" ({g[0].aiv} AIV{' per die' if g[0].per_die else ''})" for g in groups]
    return "the twin models " + (", ".join(parts[:-1]) + " and " if len(parts) > 1 else "") + parts[-1]


#: The SoC whose AIV count and UB the CPU twin enforces when none is chosen (``COMBINE_TWIN_SOC``).
TWIN_DEFAULT_SOC = _twin_default_soc()
#: What the twin models, as its refusal says.
TWIN_SOCS = _twin_socs_text(twin_socs())
#: SHMEM makes one SDMA stream per AIV block 0..47 (ACLSHMEM_MAX_AIV_PER_NPU).
MAX_SDMA_BLOCKS = kernel_constant("kMaxSdmaBlocks")


def twin_soc(soc: str) -> TwinSoc:
    """The row of the twin's table that models ``soc`` (host/twin/twin_socs.h).

    Raises:
        ValueError: a SoC the twin does not model, naming the ones it does.
    """
    row = next((s for s in twin_socs() if s.matches(soc or "")), None)
    if row is None:
        raise ValueError(f"soc={soc!r}: {TWIN_SOCS}")
    return row


def aiv_cores(soc: str) -> int:
    """AIV (vector) cores of an A2/A3 SoC the twin models: 40 on Ascend910B3/B4, 48 on
    Ascend910B2 and on each Ascend910_93xx die (host/twin/twin_socs.h;
    docs/hardware-rules.md#9-cores-waves-and-barriers).

    Raises:
        ValueError: a SoC the twin does not model, naming the ones it does.
    """
    return twin_soc(soc).aiv


def launch_block_dim(pes: int, soc: str = TWIN_DEFAULT_SOC, cores_per_rank: int = 1) -> int:
    """AIV blocks of one combine launch (kernels/combine_kernel.h launch_block_dim): groups of
    ``cores_per_rank`` cores, one group per source rank but never more groups than fit in
    min(AIV cores of ``soc``, 48); with 1: min(pes, AIV cores, 48), core ``c`` serving the source
    ranks ``c, c + block_dim, ...`` (docs/variants.md#2-cores-per-source-rank)."""
    cap = min(aiv_cores(soc), MAX_SDMA_BLOCKS)
    cpr = max(int(cores_per_rank), 1)
    return min(int(pes), max(cap // cpr, 1)) * cpr


def chunk_bounds(begin: int, end: int, cores_per_rank: int) -> list[tuple[int, int]]:
    """The rows [begin, end) of one segment split over a group's cores, as the kernel's
    ChunkBegin/ChunkEnd: chunk j is [begin + n*j // c, begin + n*(j+1) // c), n = end - begin."""
    n, c = end - begin, max(int(cores_per_rank), 1)
    return [(begin + n * j // c, begin + n * (j + 1) // c) for j in range(c)]
