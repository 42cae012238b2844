"""Which AIV core of a PE sends what: the SoCs' AIV core counts, a launch's block_dim, and the
source ranks each core serves (kernels/combine_kernel.h launch_block_dim; docs/hardware-rules.md#9-cores-waves-and-barriers).

A launch has one block per source rank, but never more than the SoC's AIV cores (more would run
in waves, and blocks wait on each other's flags) nor SHMEM's 48 SDMA streams; core ``c`` then
serves source ranks ``c, c + block_dim, c + 2*block_dim, ...``.
"""

from __future__ import annotations

import functools
import re
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

#: The SoC whose AIV count and UB the CPU twin enforces when none is chosen
#: (``COMBINE_TWIN_SOC``; host/twin/twin_acl.cpp holds the same table).
TWIN_DEFAULT_SOC = "Ascend910B3"
#: What the twin models, as its refusal says (host/twin/twin_acl.cpp says the same).
TWIN_SOCS = ("the twin models Ascend910B2 (48 AIV), Ascend910B3 and Ascend910B4 (40 AIV) and Ascend910_93xx "
             "(48 AIV per die)")
#: SHMEM makes one SDMA stream per AIV block 0..47 (ACLSHMEM_MAX_AIV_PER_NPU).
MAX_SDMA_BLOCKS = kernel_constant("kMaxSdmaBlocks")


def aiv_cores(soc: str) -> int:
    """AIV (vector) cores of an A2/A3 SoC the twin models: 40 on Ascend910B3/B4, 48 on
    Ascend910B2 and on each Ascend910_93xx die (docs/hardware-rules.md#9-cores-waves-and-barriers).

    Raises:
        ValueError: a SoC the twin does not model, naming the ones it does.
    """
    s = soc or ""
    if s in ("Ascend910B3", "Ascend910B4"):
        return 40
    if s == "Ascend910B2" or s.startswith("Ascend910_93"):
        return 48
    raise ValueError(f"soc={soc!r}: {TWIN_SOCS}")


def launch_block_dim(pes: int, soc: str = TWIN_DEFAULT_SOC) -> int:
    """AIV blocks of one combine launch: min(pes, AIV cores of ``soc``, 48); core ``c`` serves the
    source ranks ``c, c + block_dim, ...`` (kernels/combine_kernel.h launch_block_dim)."""
    return min(int(pes), aiv_cores(soc), MAX_SDMA_BLOCKS)
