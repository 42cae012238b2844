"""``combine-lab``: the command line, one module per sub-command.

    combine-lab run -pes 8 -bs 512 -h 4096 -topk 2 -expertPerPe 1 -type int32_t --routing trace:mixtral/arxiv/15
    combine-lab compare -pes 8 -bs 512 -h 4096 -topk 2 -expertPerPe 1 --routing trace:mixtral/arxiv/15
    combine-lab suggest -pes 64 -bs 4096 -h 7168 -topk 8 -expertPerPe 4 -type bfloat16_t --routing deepseek --model a3
    combine-lab calibrate output/perf/combine_perf_rank0.csv --model a3 --out fitted.toml
    combine-lab probe [-pes 2] [--target npu]      # then calibrate its CSV (docs/probe.md)
    combine-lab build [--kernel-source DIR [--main]]
    combine-lab doctor | selftest | notebooks | docs | lab | app
    combine-lab --version

Sub-commands: :mod:`.run`, :mod:`.compare` (both on :mod:`.cases`), :mod:`.suggest`,
:mod:`.calibrate`, :mod:`.probe`, :mod:`.build`, :mod:`.doctor`, :mod:`.selftest`, :mod:`.notebooks`, :mod:`.docs`, :mod:`.lab`, :mod:`.app`. Each registers its parser and a handler
``args.handler(args) -> exit status``; :func:`main` turns the lab's errors into exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import re
import shlex
import signal
import sys

from .. import __version__
from ..errors import CombineLabError, Terminated, missing_package
from .commands import HELP


def version_text() -> str:
    """``combine-lab <version> (<package folder>)``: the folder tells which checkout an editable
    install runs."""
    from pathlib import Path
    return f"combine-lab {__version__} ({Path(__file__).resolve().parents[1]})"


class _Parser(argparse.ArgumentParser):
    """argparse's parser, saying "did you mean" for a misspelt flag or choice (Python 3.14's
    suggest_on_error, which 3.10-3.13 lack), each refusal with its own command's usage; a value that
    is not a number is one line naming the flag and the value."""

    def error(self, message: str):
        bad = re.fullmatch(r"argument (\S+?)(?:/\S+)?: invalid (int|float) value: '(.*)'", message)
        if bad:  # a value of a known flag: one line, as the lab's own checks say it (no usage block)
            kind = "an integer" if bad[2] == "int" else "a number"
            self.exit(2, f"{self.prog}: error: {bad[1]}: {bad[3]!r} is not {kind}\n")
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            near = difflib.get_close_matches(m[1], re.findall(r"'([^']*)'", m[2]), n=1, cutoff=0.5)
            if near:
                message += f"; did you mean {near[0]!r}?"
        super().error(message)

    def refuse_unknown(self, extra: list[str]):
        """Refuse arguments this (sub-)command does not know, naming the closest flag of each."""
        flags = [o for a in self._actions for o in a.option_strings]
        near = []
        for tok in extra:
            if tok.startswith("-"):
                # 0.65: --kernel still finds --kernel-source (0.70), --bogus no longer -gnpus (0.62)
                got = difflib.get_close_matches(tok.split("=", 1)[0], flags, n=1, cutoff=0.65)
                near += [(got[0], tok.split("=", 1)[0])] if got else []
        said = near[0][0] if len(near) == 1 else ", ".join(f"{flag} (for {tok})" for flag, tok in near)
        hint = f"; did you mean {said}?" if near else f" (see combine-lab {self.prog.split()[-1]} --help)"
        self.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


def _command_module(name: str):
    """The module of sub-command ``name`` (:data:`~.commands.HELP`), imported now: each pulls in
    what it runs (numpy, pandas, the harness), which ``--help`` and the other commands need not."""
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:  # a package the command needs: this Python was not set up
        missing_package(e)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser of ``combine-lab`` (sub-commands run, compare, suggest, calibrate, build,
    selftest, doctor, notebooks, docs, lab, app); its ``subcommands`` maps each name to its parser.

    ``only``: a sub-command name, or ``""`` for none: only that sub-command gets its flags (its module is
    imported); the others are there by name and help (for ``--help`` and "did you mean"), so that
    ``combine-lab --version`` or ``combine-lab doctor`` import no more than they use. None: all of them."""
    parser = _Parser(prog="combine-lab", description="MoE combine lab: doubleplane (MTE+SDMA) vs "
                     "classic (MTE only) combine on the CPU twin or an Ascend NPU")
    parser.add_argument("--version", action="version", version=version_text(),
                        help="show the version of combine_lab and where it is installed from, and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in HELP:
        if only is None or name == only:
            _command_module(name).register(sub)
        else:
            sub.add_parser(name, help=HELP[name])
    parser.subcommands = dict(sub.choices)
    # no abbreviations: "--pes 4" was read as --pes-list 4, "-pe 4" as -pes, "--topk 2" as --topk-list
    # (right by luck); a flag is spelled whole, and a near miss gets "did you mean"
    for p in (parser, *parser.subcommands.values()):
        p.allow_abbrev = False
    return parser


def _on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup short
    raise Terminated()


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """While ``combine-lab`` runs, SIGTERM raises :class:`Terminated` (in the main thread only,
    where Python delivers signals; elsewhere nothing changes)."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: The command-line flag of each case or run parameter whose name differs from it: a refusal
#: raised by the Python API ("dtype='float32': ...") reads "-type: dtype='float32': ..." here.
FLAG_OF = {"dtype": "-type", "pes": "-pes", "bs": "-bs", "h": "-h", "topk": "-topk", "expert_per_pe": "-expertPerPe",
           "masked_fraction": "--masked-fraction", "min_sdma_bytes": "--min-sdma-bytes", "timeout_s": "--timeout",
           "warmup": "--warmup", "loops": "--loops", "prof_pe": "--prof-pe", "chaos_seed": "--chaos",
           "seed": "--seed", "routing": "--routing", "fnpu": "-fnpu", "gnpus": "-gnpus", "fpe": "-fpe",
           "kernel_source": "--kernel-source", "repeats": "--repeats", "model": "--model"}


def _with_flag(e: CombineLabError, command: str | None = None) -> str:
    """The error's message, with the flag named first where the error names a parameter the
    command line spells otherwise (:data:`FLAG_OF`); cores_per_rank is the N of a settings label,
    given by ``compare --settings`` or ``run --variant``."""
    if e.said_as is not None:  # the message names it as the command line does already
        return str(e)
    if e.parameter == "cores_per_rank":
        flag = "--settings" if command == "compare" else "--variant"
        if e.allowed is None:  # not said as "cores_per_rank=N: <allowed>": as it is, after the flag
            return f"{flag}: {e}"
        return f"{flag}: cores_per_rank={e.value!r} (the N of c{e.value}): {e.allowed}"
    flag = FLAG_OF.get(e.parameter) if e.parameter else None
    return f"{flag}: {e}" if flag else str(e)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 a check failed, 2 bad input or failed run,
    130 Ctrl-C, 143 SIGTERM: both after stopping every PE and removing what the run made)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[-1:] == ["-h"]:  # -h is the hidden size, as in the reference drivers
        print("combine-lab: -h is the hidden size (-h 7168); for help use --help", file=sys.stderr)
        return 2
    parser = build_parser(only=argv[0] if argv[:1] and argv[0] in HELP else "")
    args, extra = parser.parse_known_args(argv)
    if extra:  # refused by the sub-command's own parser: its usage, and the closest flag
        parser.subcommands.get(getattr(args, "command", None), parser).refuse_unknown(extra)
    args.argv = argv  # what was typed: a refusal may give the command to type instead
    with _sigterm_as_interrupt():
        return _handle(args)


def _model_instead(args: argparse.Namespace, e: CombineLabError) -> str:
    """For a case too big for this machine (run, compare on the wall clock): the same command priced
    on the model, which launches nothing and writes no payload (docs/cli.md). Not where x itself does
    not fit and the routing is uniform: the reference's recipe draws x before the ids, on the model too."""
    if getattr(args, "command", None) not in ("run", "compare") or getattr(args, "clock", "wall") != "wall":
        return ""
    if e.resource == "x" and getattr(args, "routing", "uniform") == "uniform":
        return ""
    argv, kept = list(getattr(args, "argv", [])), []
    while argv:
        tok = argv.pop(0)
        if tok in ("--clock", "--model"):
            argv[:1] = []
        elif not tok.startswith(("--clock=", "--model=")):
            kept.append(tok)
    return ("; the timing model prices it without running it: combine-lab "
            + " ".join(shlex.quote(t) for t in kept) + " --clock model:a3")


def _handle(args: argparse.Namespace) -> int:
    try:
        return args.handler(args)
    except CombineLabError as e:  # what the lab refused or what failed: it says which and why
        from ..planning.capacity import CapacityError
        hint = _model_instead(args, e) if isinstance(e, CapacityError) else ""
        print(f"combine-lab: error: {_with_flag(e, getattr(args, 'command', None))}{hint}", file=sys.stderr)
        return 2
    except MemoryError as e:
        print(f"combine-lab: error: out of memory making or reading the case ({e}); use a smaller shape",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated): say only what is true
        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        from ..run.launch import leftovers
        left = leftovers()
        if left:
            print(f"combine-lab: {what}; these could not be removed: {'; '.join(left)}", file=sys.stderr)
        else:
            print(f"combine-lab: {what}; nothing of the run is left: no PE running, no shared memory, no case "
                  "files, no partial result files", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
