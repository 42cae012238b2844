"""``combine-lab probe``: microbenchmarks of the timing model's unknowns, on the twin or an NPU
(docs/probe.md). It builds the probe's driver (host/probe_host.cpp, kernels/probe_kernel.cpp),
launches one process per PE through the lab's one launcher (:func:`~.launch.launch_pes`: fresh
session, every PE's process group and the twin's segment removed whatever happens) and writes
one probe CSV (:mod:`combine_lab.formats.probe_csv`) that ``combine-lab calibrate`` fits from.

The plan (:func:`probe_plan`), per docs/probe.md#2-what-each-measurement-times: SDMA puts from
k = 1, 2, 8, 48 cores, each capped at the SoC's AIV cores (or the ``cores`` given) of 14 KiB, 1 MiB and 2 MiB each (``sdma_bytes``), to
one peer and to all the others; the issue of SDMA puts alone; MTE puts of one row (``row_bytes``),
single- and double-buffered; flag puts; the flag round trip; aclshmem_quiet and the SDMA quiet
with nothing outstanding; polls of a ready slot. A build without SDMA (CANN < 9.0.0, Ascend950)
gets no SDMA row: its SDMA calls are empty stand-ins (kernels/combine_platform.h).

With a machine model (``model=``, ``probe --model a2|a3``) the plan follows its rank map
(:meth:`~combine_lab.model.machines.NpuModel.pair_class`, docs/probe.md#6-link-classes): PE 0 sends
to the first PE of each link class a run of ``pes`` PEs reaches (:func:`probe_pairs`; on A3 PE 1,
the other die of its card, PE 2, another card, PE 16, another server); the nearest class gets the
whole plan, each farther one the SDMA rows that fit its own link parameters, and every row names
its class (the CSV's ``link_class``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import ParameterError
from ..formats.probe_csv import BUILDS, PROBE_KINDS, SDMA_KINDS, ProbeRow, write_probe_csv
from ..planning.cores import aiv_cores as soc_aiv_cores
from . import build as build_mod, toolchain
from .launch import LaunchError, bootstrap_ipport, launch_pes, owned_temp_dir
from .options import check_timeout_s

PROBE_BINARY = "probe_host"
#: Defaults: the issue's k, the SDMA sizes (one 14 KiB row: h 7168 at 2 B; whole segments), MTE rows.
DEFAULT_CORES = (1, 2, 8, 48)
DEFAULT_SDMA_BYTES = (14336, 1 << 20, 2 << 20)
DEFAULT_ROW_BYTES = (14336, 57344)
MAX_CORES = 48            # SHMEM's SDMA streams: one per AIV block 0..47 (kernels/probe_kernel.h)
MAX_ROW_BYTES = 65536     # an MTE row fits one staging buffer
MAX_SDMA_ISSUE_PUTS = 256  # the issue alone: SQEs within the assumed SDMA ring (256), no quiet between
SQE_BYTES = 1 << 20        # SHMEM cuts an SDMA put into SQEs of at most 1 MiB
MAX_SDMA_BYTES = MAX_SDMA_ISSUE_PUTS * SQE_BYTES  # one put fills the ring at most (docs/hardware-rules.md#6-sdma)
#: What the twin's times are, on every row it writes (as the lab labels twin times elsewhere).
#: The buffering column of mte_put rows, by staging buffers used.
BUFFERING = {1: "single", 2: "double"}
TWIN_NOTE = "twin: CPU threads copying memory on this machine, not an NPU's time"


@dataclass(frozen=True)
class Measurement:
    """One line of the plan (host/probe_host.cpp reads ``kind cores puts bytes peers buffers repeats warmup
    dst``): PE 0 sends to PEs ``dst`` .. ``dst + peers - 1`` in turn; ``link_class``: the class of
    those pairs in the model's rank map ('' without a model, or for a row that sends nothing;
    classes joined by '+' where the peers span several)."""

    kind: str
    cores: int
    puts: int
    bytes: int
    peers: int
    buffers: int
    repeats: int
    warmup: int
    dst: int = 1
    link_class: str = ""

    def line(self) -> str:
        return f"{self.kind} {self.cores} {self.puts} {self.bytes} {self.peers} {self.buffers} {self.repeats} " \
               f"{self.warmup} {self.dst}"


def _positive_ints(name: str, values, low: int, high: int, multiple: int = 1) -> tuple[int, ...]:
    vals = tuple(values)
    bad = [v for v in vals if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not low <= v <= high
           or v % multiple]
    if not vals or bad:
        what = f"integers in {low}..{high}" + (f", multiples of {multiple}" if multiple > 1 else "")
        raise ParameterError(f"{name}={list(vals)!r}: must be one or more {what}", parameter=name, value=list(vals))
    return tuple(sorted(set(int(v) for v in vals)))


def _one(name: str, value, low: int, high: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not low <= value <= high:
        raise ParameterError(f"{name}={value!r}: must be an integer in {low}..{high}", parameter=name, value=value)
    return int(value)


def probe_plan(pes: int, *, cores=None, sdma_bytes=None, row_bytes=DEFAULT_ROW_BYTES,
               repeats: int = 5, warmup: int = 1, sdma_puts: int = 8, mte_puts: int = 32, ops: int = 32,
               rtt: int = 16, aiv_cores: int = MAX_CORES, sdma: str = "", model=None) -> list[Measurement]:
    """The measurements of one probe run, in the order they run.

    Args:
        pes: PEs of the run, >= 2 (PE 0 sends; PE 1 answers the round trips; peers are PEs 1..pes-1).
        cores: the k of the SDMA rows (each of the k cores issues ``sdma_puts`` puts), each 1..min(aiv_cores, 48);
            default 1, 2, 8, 48, each capped at that.
        sdma_bytes: bytes per SDMA put, multiples of 32, at most 256 MiB (256 SQEs, the SDMA ring depth
            assumed) (default :data:`DEFAULT_SDMA_BYTES`); the sdma_issue row's puts are cut so that
            their SQEs fit that ring.
        row_bytes: bytes of one MTE row (mte_put and the round trip's row), multiples of 32, at most 64 KiB.
        repeats: timed launches per measurement (>= 2, for a spread); warmup: untimed ones first (>= 0).
        sdma_puts: SDMA puts per core per launch (2 MiB puts: a quarter of it, at least 1).
        mte_puts: MTE rows per launch; ops: quiets, SDMA quiets, flag puts, polls and SDMA issues per launch (<= 256);
        rtt: round trips per launch.
        aiv_cores: the SoC's AIV cores (a k above it is refused).
        sdma: '' when the build has SDMA; else why not (the plan then has no SDMA row, and
            ``cores`` or ``sdma_bytes`` given are refused with that reason).
        model: an :class:`~combine_lab.model.machines.NpuModel` whose rank map picks the pairs
            (:func:`probe_pairs`): the nearest class (PE 0 -> 1) gets every row, each farther class
            reached gets sdma rows of one core to its first PE at each of ``sdma_bytes``; None:
            every row PE 0 -> 1.., no link class named.

    Returns a list of :class:`Measurement`. Raises ParameterError naming the parameter, its value
    and what is allowed, before anything is built or launched.
    """
    if not isinstance(pes, int) or isinstance(pes, bool) or pes < 2:
        raise ParameterError(f"pes={pes!r}: the probe needs at least 2 PEs (PE 0 sends, the others receive)",
                             parameter="pes", value=pes)
    if sdma and (cores is not None or sdma_bytes is not None):
        name, value = ("cores", cores) if cores is not None else ("sdma_bytes", sdma_bytes)
        raise ParameterError(f"{name}={list(value)!r}: SDMA rows refused: {sdma}", parameter=name, value=list(value))
    sdma_bytes = DEFAULT_SDMA_BYTES if sdma_bytes is None else sdma_bytes
    top = min(int(aiv_cores), MAX_CORES)
    cores = _positive_ints("cores", sorted({min(k, top) for k in DEFAULT_CORES}) if cores is None else cores, 1, top)
    sdma_bytes = _positive_ints("sdma_bytes", sdma_bytes, 32, MAX_SDMA_BYTES, 32)
    row_bytes = _positive_ints("row_bytes", row_bytes, 32, MAX_ROW_BYTES, 32)
    repeats, warmup = _one("repeats", repeats, 2, 1000), _one("warmup", warmup, 0, 1000)
    sdma_puts, mte_puts = _one("sdma_puts", sdma_puts, 1, 4096), _one("mte_puts", mte_puts, 2, 4096)
    ops, rtt = _one("ops", ops, 1, MAX_SDMA_ISSUE_PUTS), _one("rtt", rtt, 1, 4096)
    rw = dict(repeats=repeats, warmup=warmup)
    plan = []
    peer_counts = sorted({1, pes - 1})
    for b in sdma_bytes if not sdma else ():
        n = sdma_puts if b < (1 << 20) else max(1, sdma_puts // 4)
        for k in cores:
            for p in peer_counts:
                plan.append(Measurement("sdma", k, n, b, p, 1, **rw))
    if not sdma:
        issue_puts = min(ops, MAX_SDMA_ISSUE_PUTS // -(-min(sdma_bytes) // SQE_BYTES))  # its SQEs fit the ring
        plan.append(Measurement("sdma_issue", 1, issue_puts, min(sdma_bytes), 1, 1, **rw))
    for b in row_bytes:
        for buffers in (1, 2):
            plan.append(Measurement("mte_put", 1, mte_puts, b, 1, buffers, **rw))
    plan.append(Measurement("flag", 1, ops, 32, 1, 1, **rw))
    plan.append(Measurement("flag_rtt", 1, rtt, min(row_bytes), 1, 1, **rw))
    plan.append(Measurement("quiet", 1, ops, 0, 1, 1, **rw))
    if not sdma:
        plan.append(Measurement("sdma_quiet", 1, ops, 0, 1, 1, **rw))
    plan.append(Measurement("wait", 1, ops, 0, 1, 1, **rw))
    if model is not None:
        plan = _by_link_class(plan, model, pes, sdma_bytes if not sdma else (), sdma_puts)
    assert all(m.kind in PROBE_KINDS for m in plan) and not (sdma and any(m.kind in SDMA_KINDS for m in plan))
    return plan


#: The kinds whose rows send to a peer (the others time this PE alone).
SENDING_KINDS = ("sdma", "sdma_issue", "mte_put", "flag", "flag_rtt")


@dataclass(frozen=True)
class ProbePairs:
    """The pairs a probe of ``pes`` PEs measures on ``model``: ``reached`` (link class, the first
    PE of that class from PE 0), nearest first; ``unreached`` (link class, the PEs a run needs to
    reach it)."""

    model: str
    pes: int
    reached: tuple[tuple[str, int], ...]
    unreached: tuple[tuple[str, int], ...]

    def text(self) -> str:
        """'link classes of a3 at 4 PEs: die_pair (PE 0 -> 1), card (PE 0 -> 2); not reached: server
        (PE 0 -> 16: needs -pes 17 or more)'."""
        got = ", ".join(f"{c} (PE 0 -> {d})" for c, d in self.reached)
        out = f"link classes of {self.model} at {self.pes} PEs: {got}"
        if self.unreached:
            out += "; not reached: " + ", ".join(f"{c} (PE 0 -> {n - 1}: needs -pes {n} or more)"
                                                 for c, n in self.unreached)
        return out


def probe_pairs(model, pes: int) -> ProbePairs:
    """Which link classes of ``model`` (an NpuModel) a run of ``pes`` PEs reaches from PE 0, by its
    rank map (:meth:`~combine_lab.model.machines.NpuModel.pair_class`; docs/probe.md#6-link-classes):
    the first PE of each class is PE 1 (the nearest), PE dies_per_card (another card) or PE
    dies_per_card * cards_per_server (another server). Raises ParameterError (``pes`` above what
    the model has)."""
    model.pair_class(pes)  # pes within the machine, else its ParameterError
    t = model.topology
    first: dict[int, int] = {}
    for d in sorted({1, t.dies_per_card, t.dies_per_card * t.cards_per_server}):
        if 1 <= d < t.max_pes:
            first.setdefault(int(model.pair_class(d + 1)[0, d]), d)
    order = sorted(first.items(), key=lambda kv: kv[1])
    names = [c.name for c in model.links]
    return ProbePairs(model.name, pes, tuple((names[c], d) for c, d in order if d < pes),
                      tuple((names[c], d + 1) for c, d in order if d >= pes))


def _by_link_class(plan: list[Measurement], model, pes: int, sdma_bytes, sdma_puts: int) -> list[Measurement]:
    """``plan`` with each row's link class named, then the sdma rows of each farther class reached."""
    pairs = probe_pairs(model, pes)
    cls = model.pair_class(pes)[0]
    names = [c.name for c in model.links]

    def classes(dst: int, peers: int) -> str:
        return "+".join(names[i] for i in sorted({int(cls[p]) for p in range(dst, dst + peers)}))

    out = [replace(m, link_class=classes(m.dst, m.peers) if m.kind in SENDING_KINDS else "") for m in plan]
    rw = dict(repeats=plan[0].repeats, warmup=plan[0].warmup)
    for name, dst in pairs.reached[1:]:
        for b in sdma_bytes:
            n = sdma_puts if b < (1 << 20) else max(1, sdma_puts // 4)
            out.append(Measurement("sdma", 1, n, b, 1, 1, dst=dst, link_class=name, **rw))
    return out


def _parse_stdout(text: str, plan: list[Measurement]) -> tuple[str, int, str, list[np.ndarray]]:
    """(soc, AIV cores, build, times per measurement) from PE 0's lines (host/probe_host.cpp)."""
    soc, aiv, build, times = "", 0, "", {}
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["probe_soc"] and len(parts) == 3:
            soc, aiv = parts[1], int(parts[2])
        elif parts[:1] == ["probe_build"] and len(parts) == 2:
            build = parts[1]
        elif parts[:1] == ["probe_row"] and len(parts) >= 2:
            times[int(parts[1])] = np.array([float(t) for t in parts[2:]], dtype=np.float64)
    missing = [i for i in range(len(plan)) if i not in times or len(times[i]) != plan[i].repeats]
    if missing:
        raise LaunchError(f"probe_host: PE 0 printed no (or too few) times for measurement(s) {missing} of "
                          f"{len(plan)}; its output:\n{text[-2000:]}")
    if build not in BUILDS:
        raise LaunchError(f"probe_host: PE 0 printed no build line (probe_build {'|'.join(BUILDS)}); its output:\n"
                          f"{text[-2000:]}")
    return soc, aiv, build, [times[i] for i in range(len(plan))]


def run_probe(pes: int = 2, out: str | os.PathLike = "output/probe/combine_probe.csv", *, target: str = "cpu",
              fnpu: int = 0, timeout_s: float = 300.0, build_dir: str | os.PathLike | None = None,
              env: dict[str, str] | None = None, model=None, **plan_kw) -> tuple[Path, list[ProbeRow]]:
    """Build the probe for ``target``, run the plan (:func:`probe_plan` with ``plan_kw``) on ``pes``
    PEs (on the NPU: devices ``fnpu`` .. ``fnpu + pes - 1``) and write the probe CSV to ``out``
    (whole or not at all; its folder is made). ``model`` (an NpuModel, e.g. ``load_model("a3")``):
    the rank map whose link classes the plan measures (:func:`probe_pairs`), on the twin as on the NPU.

    Returns (the CSV's path, its rows). Raises ParameterError (a bad plan parameter, before
    anything is built), TargetUnavailable / BuildError (the build), LaunchError (a PE failed or
    timed out: the message names the PE, core and slot of a wait that gave up; every PE's process
    and the twin's segment are gone), ResultFileError (the CSV cannot be written).
    """
    if target not in build_mod.TARGETS:
        raise ParameterError(f"target={target!r}: one of {', '.join(build_mod.TARGETS)}", parameter="target",
                             value=target)
    check_timeout_s(timeout_s)  # the one check of a run's limit (combine_lab.run.options)
    aiv, sdma = plan_kw.pop("aiv_cores", None), ""
    if target == "npu":
        aiv, sdma = npu_plan_facts({**os.environ, **(env or {})}, aiv)
    elif aiv is None:
        aiv = _twin_aiv(env)
    plan = probe_plan(pes, aiv_cores=aiv, sdma=sdma, model=model, **plan_kw)
    binary = build_mod.build(target, build_dir=build_dir, program=PROBE_BINARY)
    work = owned_temp_dir("probe")
    try:
        plan_file = work / "plan.txt"
        plan_file.write_text("".join(m.line() + "\n" for m in plan))
        port = bootstrap_ipport()
        argv = lambda r: [pes, r, port, pes, 0 if target == "cpu" else fnpu, plan_file]  # noqa: E731
        outcomes = launch_pes(binary, pes, argv, cwd=work, log_dir=work / "logs", timeout_s=timeout_s, env=env,
                              unnoticed_codes=(1,))
        soc, _, build, times = _parse_stdout(outcomes[0].stdout, plan)  # the build as the binary says it
    finally:
        shutil.rmtree(work, ignore_errors=True)
    note = TWIN_NOTE if target == "cpu" else ""
    rows = [ProbeRow(m.kind, pes, 0, None if m.kind in ("quiet", "sdma_quiet", "wait") else m.dst, m.peers, m.cores,
                     m.puts, m.bytes, BUFFERING[m.buffers] if m.kind == "mte_put" else "", t, target, soc, note, build,
                     m.link_class)
            for m, t in zip(plan, times)]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_probe_csv(out, rows), rows


def npu_plan_facts(env: dict[str, str], aiv: int | None = None) -> tuple[int, str]:
    """(AIV cores, '' or why there is no SDMA) of the NPU build ``env`` makes: the k of the SDMA
    rows is capped at the SoC's AIV cores (planning/cores.py; 40 on Ascend910B3/B4), ``aiv`` when
    given; a build without SDMA (CANN < 9.0.0, Ascend950) gets no SDMA row (:func:`probe_plan`).

    Raises TargetUnavailable (no NPU toolchain here), ParameterError (a SoC whose AIV cores are
    not known, with ``aiv`` not given)."""
    tc = build_mod.require_npu_toolchain(env)
    sdma = ""
    if not tc.sdma:
        why = toolchain.sdma_soc_problem(tc.soc) or f"CANN {tc.cann_version} is older than 9.0.0"
        sdma = f"this NPU build has no SDMA ({why}); its SDMA calls are empty stand-ins (kernels/combine_platform.h)"
    if aiv is None:
        try:
            aiv = soc_aiv_cores(tc.soc)
        except ValueError:
            raise ParameterError(f"aiv_cores=None: the AIV cores of {tc.soc} are not known here (planning/cores.py "
                                 "knows the A2/A3 SoCs); pass aiv_cores", parameter="aiv_cores", value=None) from None
    return aiv, sdma


def _twin_aiv(env: dict[str, str] | None) -> int:
    """The AIV cores of the SoC the twin will model (COMBINE_TWIN_SOC, else its default)."""
    from ..planning.cores import TWIN_DEFAULT_SOC, aiv_cores
    soc = (env or {}).get("COMBINE_TWIN_SOC") or os.environ.get("COMBINE_TWIN_SOC") or TWIN_DEFAULT_SOC
    return aiv_cores(soc)
