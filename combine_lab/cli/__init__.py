"""``combine-lab``: the command line, one module per sub-command.

    combine-lab run -pes 8 -bs 512 -h 4096 -topk 2 -expertPerPe 1 -type int32_t --routing trace:mixtral/arxiv/15
    combine-lab compare -pes 8 -bs 512 -h 4096 -topk 2 -expertPerPe 1 --routing trace:mixtral/arxiv/15
    combine-lab suggest -pes 64 -bs 4096 -h 7168 -topk 8 -expertPerPe 8 --routing deepseek --model a3
    combine-lab calibrate output/perf/combine_perf_rank0.csv --model a3 --out fitted.toml
    combine-lab doctor | selftest | notebooks

Sub-commands: :mod:`.run`, :mod:`.compare` (both on :mod:`.cases`), :mod:`.suggest`,
:mod:`.calibrate`, :mod:`.doctor`, :mod:`.selftest`, :mod:`.notebooks`. Each registers its parser and a handler
``args.handler(args) -> exit status``; :func:`main` turns the lab's errors into exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import CaseFileError, LabError, ParameterError, SpecError
from ..planning.capacity import CapacityError
from ..run.build import BuildError
from ..run.launch import LaunchError
from ..run.outputs import ResultFileError
from . import calibrate, compare, doctor, notebooks, run, selftest, suggest


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``combine-lab`` (sub-commands run, compare, suggest, calibrate, selftest,
    doctor, notebooks)."""
    parser = argparse.ArgumentParser(prog="combine-lab", description="MoE combine lab: doubleplane (MTE+SDMA) vs "
                                     "classic (MTE only) combine on the CPU twin or an Ascend NPU")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (run, compare, suggest, calibrate, selftest, doctor, notebooks):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 a check failed, 2 bad input or failed run)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[-1:] == ["-h"]:  # -h is the hidden size, as in the reference drivers
        print("combine-lab: -h is the hidden size (-h 7168); for help use --help", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (SpecError, ParameterError, CaseFileError, CapacityError, LabError, ResultFileError, BuildError,
            LaunchError) as e:
        print(f"combine-lab: error: {e}", file=sys.stderr)
        return 2
    except MemoryError as e:
        print(f"combine-lab: error: out of memory making or reading the case ({e}); use a smaller shape",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("combine-lab: interrupted; every PE was stopped and its shared memory removed", file=sys.stderr)
        return 130
