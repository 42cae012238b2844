"""Facts of docs/formats.md#3-perf-csv that the perf tests share, written from that page (not
from combine_lab): the header line and the UB size the kernel is launched with."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The header line of every perf CSV: the 19 names, once.
HEADER = ("DataSize/B,Npus,Blocks,UBsize/KB,Bandwidth/GB/s,CoreMaxTime/us,Metric,GlobalDataSize/B,"
          "PerPeBandwidth/GB/s,BS,H,TopK,ExpertPerPe,Dtype,Warmup,Loops,ProfPe,CaseId,SingleCoreTime/us")


def ub_size_kb() -> int:
    """UBsize/KB as the kernel is launched with it: kUbMteStageBytes in kernels/combine_kernel.h
    (read from there, so the tests follow the one definition)."""
    text = (ROOT / "kernels" / "combine_kernel.h").read_text()
    m = re.search(r"kUbMteStageBytes = (\d+) \* 1024;", text)
    assert m, "kernels/combine_kernel.h: kUbMteStageBytes = N * 1024 not found"
    return int(m.group(1))
