"""``combine-lab run``: one variant on a case or a sweep of cases, x_out checked, perf CSVs written.

    combine-lab run -pes 8 -bs 512 -h 4096 -topk 2 -expertPerPe 1 -type int32_t --routing trace:mixtral/arxiv/15
    combine-lab run --kernel-source ~/shmem/examples/combine/combine_doubleplane -pes 4 -bs 64   # your kernel
"""

from __future__ import annotations

import argparse

from ..run.runner import VARIANTS
from .cases import add_case_flags, run_variants


def _run(a: argparse.Namespace) -> int:
    # with --kernel-source: your kernel instead of the lab's; --variant then names the rule whose plan
    # its counters are compared with (default: the kernel's own, docs/own-kernel.md)
    a.only_kernels, a.rule = bool(a.kernel_source), a.variant
    return run_variants(a, [a.variant or "doubleplane"])


def register(sub) -> None:
    """Add ``run`` to ``sub`` (argparse sub-parsers)."""
    p = sub.add_parser("run", add_help=False, help="run one variant on a case or a sweep, check x_out, profile")
    add_case_flags(p)
    p.add_argument("--variant", choices=list(VARIANTS), default=None,
                   help="default doubleplane; with --kernel-source the rule its counters are compared with (default: "
                        "classic for a folder named so, else doubleplane)")
    p.set_defaults(handler=_run)
