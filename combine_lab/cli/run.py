"""``combine-lab run``: one variant on a case or a sweep of cases, x_out checked, perf CSVs written.

    combine-lab run -pes 8 -bs 512 -h 4096 -topk 2 -expertPerPe 1 -type int32_t --routing trace:mixtral/arxiv/15
    combine-lab run --kernel-source ~/shmem/examples/combine/combine_doubleplane -pes 4 -bs 64   # your kernel
    combine-lab run --variant doubleplane-segment-c6 -pes 8 -bs 64 -h 7168   # kernel settings (docs/variants.md)
"""

from __future__ import annotations

import argparse

from .commands import HELP
from ..kernels import CLASSIC, DOUBLEPLANE
from ..errors import ParameterError

from ..planning.settings import parse_variant_label
from .cases import add_case_flags
from .run_cases import run_variants


def _variant_flag(text: str) -> str:
    """--variant: a variant label (classic, doubleplane, doubleplane-segment-c6, ...), refused by argparse
    with the allowed forms."""
    try:
        parse_variant_label(text)
    except ParameterError as e:  # its fields: the label given and what is allowed
        raise argparse.ArgumentTypeError(f"{e.value!r}: {e.allowed}") from None
    return text.strip().lower()


def _run(a: argparse.Namespace) -> int:
    # with --kernel-source: your kernel instead of the lab's; --variant then names the rule whose plan
    # its counters are compared with (default: the kernel's own, docs/own-kernel.md)
    if a.kernel_source and a.variant and a.variant not in (CLASSIC, DOUBLEPLANE):
        raise ParameterError(f"--variant {a.variant}: with --kernel-source, --variant names the rule its counters are "
                             "compared with (classic or doubleplane); kernel settings are the lab kernel's",
                             parameter="variant", said_as="--variant", value=a.variant,
                             allowed=" or ".join((CLASSIC, DOUBLEPLANE)))
    if a.kernel_source and a.variant and a.kernel_rule and a.variant != a.kernel_rule:
        raise ParameterError(f"--variant {a.variant} and --rule {a.kernel_rule}: with --kernel-source both name the "
                             "rule its counters are compared with; give one", parameter="variant", said_as="--variant",
                             value=a.variant)
    a.only_kernels, a.rule = bool(a.kernel_source), a.variant if a.kernel_source else None
    return run_variants(a, [a.variant or DOUBLEPLANE])


def register(sub) -> None:
    """Add ``run`` to ``sub`` (argparse sub-parsers)."""
    p = sub.add_parser("run", add_help=False, help=HELP["run"])
    add_case_flags(p)
    p.add_argument("--variant", type=_variant_flag, default=None, metavar="LABEL",
                   help="classic or doubleplane (default), with kernel settings after it: -segment (doubleplane: one "
                        "SDMA call per contiguous segment) and -c<N> (N AIV cores per source rank), e.g. "
                        "doubleplane-segment-c6 (docs/variants.md); with --kernel-source the rule its counters are "
                        "compared with (default: classic for a folder named so, else doubleplane)")
    p.set_defaults(handler=_run)
