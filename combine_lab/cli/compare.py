"""``combine-lab compare``: classic and doubleplane on the same case files, side by side.

    combine-lab compare -pes 8 -bs 512 -h 4096 -topk 2 -expertPerPe 1 --routing trace:mixtral/arxiv/15
    combine-lab compare ... --baseline hccl   # + torch.distributed all_to_all (HCCL; gloo on the twin)
    combine-lab compare ... --kernel-source ~/shmem/examples/combine/combine_doubleplane   # + your kernel
    combine-lab compare ... --settings reference,segment-c6   # classic and doubleplane under each (docs/variants.md)

With ``--perf`` each variant's files go to their own folder, ``<output-dir>/classic/`` and
``<output-dir>/doubleplane/`` (a kernel of yours: ``<output-dir>/reference-doubleplane/``, ...), so
that a summariser reading one folder never mixes them.
"""

from __future__ import annotations

import argparse

from .commands import HELP
from ..errors import ParameterError
from ..planning.settings import SETTINGS_LABEL_FORM, parse_settings
from ..run.runner import VARIANTS
from .cases import add_case_flags
from .run_cases import run_variants


def _settings_flag(text: str) -> list[str]:
    """--settings: comma-separated settings labels, each checked (argparse refuses a bad one)."""
    labels = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not labels:
        raise argparse.ArgumentTypeError(f"{text!r}: must be one or more of {SETTINGS_LABEL_FORM}, comma-separated")
    for t in labels:
        try:
            parse_settings(t)
        except ParameterError as e:  # parse_settings' own words (its allowed): N >= 1, the closest label
            raise argparse.ArgumentTypeError(f"{t!r}: {e.allowed}") from None
    return list(dict.fromkeys(labels))


def _compare(a: argparse.Namespace) -> int:
    return run_variants(a, list(VARIANTS))


def register(sub) -> None:
    """Add ``compare`` to ``sub`` (argparse sub-parsers)."""
    p = sub.add_parser("compare", add_help=False,
                       help=HELP["compare"])
    add_case_flags(p)
    p.add_argument("--settings", type=_settings_flag, default=None, metavar="LABELS",
                   help="kernel settings to compare under, comma-separated: reference (default), segment (doubleplane's "
                        "one SDMA call per contiguous segment), c<N> (N AIV cores per source rank), segment-c<N>; "
                        "classic and doubleplane run under each, the speed-up per case and settings "
                        "(docs/variants.md)")
    p.add_argument("--baseline", default=None, metavar="hccl|NAME",
                   help="hccl: also run torch.distributed all_to_all + weighted sum (HCCL on npu; gloo, CPU tensors, "
                        "on cpu); NAME: the kernel every speed-up is against, one this command runs (doubleplane, "
                        "classic-c6, a --kernel-source label such as user:mine; default: each kernel against its "
                        "same-settings classic)")
    p.set_defaults(handler=_compare)
