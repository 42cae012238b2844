"""Run a case on a target: write its files, build, launch one process per PE, read back and check.

The arc of every run: case -> plan -> run -> check -> profile. A :class:`RunResult`
holds x_out per rank, the check verdicts, the perf rows (full_op, comm_only), the twin's
per-plane counters and the plan they must equal.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

import numpy as np
import pandas as pd

from ..kernels import DOUBLEPLANE
from ..case.case import Case, make_case
from ..formats.casefiles import case_dir_of, check_x_out, read_case, read_rank_file, read_x_out, write_case
from ..case.spec import CaseSpec
from ..errors import CaseFileError, ParameterError
from ..folders import usable_folder
from ..planning.capacity import check_capacity
from ..planning.cores import TWIN_DEFAULT_SOC, TWIN_SOCS, aiv_cores
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, VARIANTS, Plan
from .options import RunOptions
from ..planning.planner import plan as make_plan
from ..planning.settings import REFERENCE, KernelSettings, check_kernel_settings, driver_policy, parse_settings, variant_label
from . import build as build_mod
from .capabilities import npu_variant_refusal
from .launch import (LaunchError, bootstrap_ipport, wait_budget_s, check_ipport, host_argv, launch_pes, owned_temp_dir,
                     remove_orphans)
from ..formats.perf_csv import driver_counters_name, perf_csv_name, read_perf_csv
from ..formats.sidecars import (counter_mismatches, counters_frame, kinds_of_violations, plane_bytes, read_counters,
                                sidecar_record, write_run_files)

_MISMATCH_EXIT = 2  # the driver's status when x_out differs from golden
_REFUSED_INPUT_EXIT = 1  # the driver refused its arguments or case files, before SHMEM started


@dataclass
class PreparedCase:
    """A case whose files are on disk: ``case_root/golden/<case_id>/``."""

    case: Case
    case_root: Path
    owns_root: bool = False

    @property
    def case_dir(self) -> Path:
        return case_dir_of(self.case_root, self.case.spec.case_id)

    def golden(self, r: int) -> np.ndarray:
        """PE r's golden x_out as written in the case files (what the PEs check against), T [bs, h]."""
        return read_rank_file(self.case_dir, self.case.spec, r, "golden_x_out.bin")

    def cleanup(self) -> None:
        """Remove the case files if this object created their folder."""
        if self.owns_root:
            shutil.rmtree(self.case_root, ignore_errors=True)


CaseLike = Union[CaseSpec, Case, PreparedCase, str, os.PathLike]


def _rows_per_pe(case: Case) -> list[int]:
    """Received rows per destination PE (the last cumulative count of each)."""
    return case.segment_counts.sum(axis=1).astype(int).tolist()


def prepare_case(case: CaseLike, work_dir: str | os.PathLike | None = None, target: str = "cpu") -> PreparedCase:
    """Make ``case`` ready to run: build it from a spec, and write its files if needed.

    Args:
        case: a :class:`CaseSpec`, a :class:`Case`, an existing :class:`PreparedCase`, or the
            path of a reference case folder ``.../golden/shape_*`` (read and validated).
        work_dir: where to write the files; default a fresh temporary folder
            (``<tmp>/combine_lab_case_p<pid>_*``) that :meth:`PreparedCase.cleanup` removes, and that
            a later run removes if this process dies first; case folders of dead runs are removed
            before this one is made (:func:`combine_lab.run.launch.remove_orphans`).
        target: where it will run (``cpu``: the twin's /dev/shm heaps are counted too).

    Raises:
        SpecError, CaseFileError: invalid spec or case files, or a case folder that is not in a
            ``golden/`` folder (before anything is launched).
        capacity.CapacityError: the case does not fit /dev/shm, memory or disk (before writing).
        ParameterError: ``work_dir`` cannot hold the files (:func:`combine_lab.folders.usable_folder`).
    """
    if isinstance(case, PreparedCase):
        return case
    if isinstance(case, (str, os.PathLike)):
        path = Path(case)
        loaded = read_case(path)
        if path.resolve().parent.name != "golden":
            raise CaseFileError(f"case={path}: a case folder must sit in <root>/golden/ (docs/formats.md#1-case-files)",
                                parameter="case", value=path)
        return PreparedCase(loaded, path.resolve().parent.parent)
    if work_dir is None:
        remove_orphans()  # a dead run's case folder may be what fills the disk
    else:
        usable_folder(work_dir, "work_dir")
    if isinstance(case, CaseSpec):
        check_capacity(case, work_dir, target=target, draws_x=True)  # before drawing anything
        case = make_case(case)
    check_capacity(case.spec, work_dir, _rows_per_pe(case), target)
    owns = work_dir is None
    root = owned_temp_dir("case") if owns else Path(work_dir)
    try:
        write_case(case, root)
    except BaseException:  # Ctrl-C or a full disk while writing: no half-written case folder stays
        if owns:
            shutil.rmtree(root, ignore_errors=True)
        else:
            shutil.rmtree(case_dir_of(root, case.spec.case_id), ignore_errors=True)
        raise
    return PreparedCase(case, root, owns_root=owns)


@dataclass
class RunResult:
    """What one run of one variant produced.

    Attributes:
        case_id: ``shape_{bs}_{h}_{topk}_{E}_{pes}``; routing: the routing string; dtype: T
            ('int32_t' or 'float16_t').
        variant: ``classic`` or ``doubleplane``: the lab's kernel's policy, or for your kernel the rule
            whose plan its counters are compared with; min_sdma_bytes: the SDMA floor it ran with; target.
        settings: the lab kernel's settings (docs/variants.md; the reference's by default).
        kernel, kernel_source: your kernel's label and folder (``reference:doubleplane``, ...), or ""
            and None for the lab's (:attr:`label` is what results call the run).
        x_out: per rank, ``[bs, h]`` arrays of T.
        checks: per rank, the verdict of x_out against golden (bit-exact for both dtypes).
        perf: perf rows (docs/formats.md#3-perf-csv) of the profiled PEs; times in us.
        counters: twin counters of the last launch, one row per (pe, plane): puts, bytes, quiets,
            status_writes, status_bytes (empty where nothing counts them: NPU).
        counters_total: the same summed over every launch (warmup + loops).
        plan: the planner's plan for this variant; counters must carry exactly its bytes.
        run_dir: folder with the PEs' logs and the run's CSV/JSON files (inside the case's
            folder), removed when run_case returns unless ``keep_files``: a kept work dir keeps its
            case files, not a folder per run.
        violations: the twin checker's first reports (PE, core, slot, both operations);
            violation_count: how many there were in all; violation_kinds: (how many, the first
            report) of each kind of report, all PEs together (docs/twin.md: a rule broken at one
            place is one kind, whichever PE, core or slot it names).
    """

    case_id: str
    routing: str
    dtype: str
    variant: str
    min_sdma_bytes: int
    target: str
    x_out: list[np.ndarray]
    checks: list
    perf: pd.DataFrame
    counters: pd.DataFrame
    counters_total: pd.DataFrame
    launches: int
    plan: Plan
    run_dir: Path
    driver_status: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    violation_count: int = 0
    violation_kinds: list[tuple[int, str]] = field(default_factory=list)
    spec: CaseSpec | None = None
    warmup: int = 0
    loops: int = 1
    prof_pes: list[int] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)  # the twin's counters file of every PE (empty on an NPU)
    kernel: str = ""  # your kernel's label (reference:doubleplane), or "" for the lab's (docs/own-kernel.md)
    kernel_source: Path | None = None  # its folder
    settings: KernelSettings = REFERENCE

    @property
    def variant_label(self) -> str:
        """The variant with its settings (``doubleplane-segment-c6``; ``doubleplane`` for the reference's):
        what names this run's files (docs/variants.md)."""
        return variant_label(self.variant, self.settings)

    @property
    def cores_per_rank(self) -> int:
        return self.settings.cores_per_rank

    @property
    def label(self) -> str:
        """What results call this run: your kernel's label (``reference:doubleplane``), else the
        variant with its settings (``doubleplane-segment-c6``)."""
        return self.kernel or self.variant_label

    @property
    def check_ok(self) -> bool:
        """True when every rank's x_out matches golden."""
        return all(c.ok for c in self.checks)

    @property
    def ok(self) -> bool:
        """x_out matches golden on every rank, the counters carry exactly the planned bytes (your
        kernel's: its declared rule's plan, :meth:`counter_mismatches` says how they differ), and the
        twin's protocol checker saw no violation."""
        counters = not self.counter_mismatches()
        return self.check_ok and counters and self.violation_count == 0

    def plane_bytes(self) -> pd.DataFrame:
        """Per PE what each plane carried in the last launch, as the twin counted it: payload
        ``mte_bytes``, ``sdma_bytes`` (bytes), payload ``mte_puts``, ``sdma_puts`` (one put per
        row) and ``status_writes`` (both planes; all must be MTE's). Empty without counters (NPU).
        :func:`combine_lab.formats.sidecars.plane_bytes`."""
        return plane_bytes(self.counters)

    def sent_bytes(self) -> tuple[int, int]:
        """Payload bytes (MTE, SDMA) of one launch, all PEs: the twin's counters, or the plan
        where there are none (NPU)."""
        pb = self.plane_bytes()
        src = pb if len(pb) else self.plan.totals
        return int(src["mte_bytes"].sum()), int(src["sdma_bytes"].sum())

    def sdma_share(self) -> float:
        """SDMA's share of the payload bytes of one launch, in [0, 1] (0 when nothing was sent)."""
        mte, sdma = self.sent_bytes()
        return sdma / (mte + sdma) if mte + sdma else 0.0

    def counter_mismatches(self) -> list[str]:
        """Differences between what the twin counted and what the plan says, one line each.

        Per PE: MTE and SDMA payload bytes equal the plan's, MTE puts its rows (one put per row),
        SDMA puts and SQEs its sdma_calls and sdma_sqes (one call per row, or per chunk of a
        segment in the segment variant), control writes and bytes its own; every row gets one
        status write, all by MTE. Empty when there are no counters (NPU target).
        :func:`combine_lab.formats.sidecars.counter_mismatches`.
        """
        return counter_mismatches(self.counters, self.plan.totals)

    def time_us(self, metric: str) -> float:
        """CoreMaxTime/us of ``metric`` ('full_op' or 'comm_only'): the slowest profiled PE's (the
        combine ends when every PE has; as the reference's perf summary takes the largest
        CoreMaxTime, docs/formats.md#3-perf-csv); NaN if none."""
        rows = self.perf[self.perf["Metric"] == metric] if not self.perf.empty else self.perf
        return float(rows["CoreMaxTime/us"].max()) if len(rows) else float("nan")

    def sidecar(self) -> dict:
        """The sidecar of this run (:func:`combine_lab.formats.sidecars.sidecar_record`): what the perf CSV has
        no column for: the case and how it ran, the check, planned and counted bytes, the counters."""
        return sidecar_record(spec=self.spec, variant=self.variant, target=self.target,
                              min_sdma_bytes=self.min_sdma_bytes, warmup=self.warmup, loops=self.loops,
                              launches=self.launches, prof_pes=self.prof_pes,
                              check="PASS" if self.check_ok else "FAIL", plan_totals=self.plan.totals,
                              counter_mismatches=self.counter_mismatches(), violations=self.violation_count,
                              violation_examples=self.violations, counted=self.plane_bytes(), ranks=self.ranks,
                              kernel=self.kernel or "lab", kernel_source=self.kernel_source,
                              settings=self.settings.label, cores_per_rank=self.settings.cores_per_rank)


class KernelFailed(LaunchError):
    """Your kernel (``kernel_source=``) failed or hung on the twin or an NPU: the lab's driver and the
    twin did what they should. The message names the kernel and, for a hang, the PE, core and status
    slot it waited for (and when that slot is masked, that no PE ever sends it)."""


def _kernel_failure(e: LaunchError, ks, case: Case) -> KernelFailed:
    """``e`` (a PE of your kernel's run failed) said as your kernel's failure: for a wait that gave up,
    which slot, whose token, and whether it is masked (a kernel that waits for a masked slot hangs)."""
    text = str(e)
    first = text.splitlines()[0] if text else "failed"
    w = e.wait
    if w is None:
        return KernelFailed(f"{ks.label} ({ks.path}) failed: {first}\n{text[len(first) + 1:]}".rstrip(),
                            pe=e.pe, returncode=e.returncode, timed_out=e.timed_out, stderr=e.stderr)
    pe, core, secs, slot = w.pe, w.core, f"{w.seconds:.1f}", w.slot  # seconds as the twin prints them (%.1f)
    s = case.spec
    token, k = divmod(slot, s.topk)
    why = ""
    if 0 <= pe < s.pes and 0 <= token < s.bs:
        expert = int(case.expert_ids[pe, token, k])
        why = f" (token {token}, k {k}: expert {expert}" + (
            ", masked: no PE sends a masked slot, and this kernel waits for it)" if not 0 <= expert < s.moe_expert_num
            else f", sent by PE {expert // s.expert_per_pe})")
    return KernelFailed(f"{ks.label} ({ks.path}) hung: PE {pe} core {core} waited {secs} s for status slot "
                        f"{slot}{why}; every PE was stopped and nothing was left behind\n{text}",
                        pe=pe, returncode=e.returncode, timed_out=e.timed_out, wait=w, stderr=e.stderr)


def run_case(case: CaseLike, variant: str | None = None, *, min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES,
             warmup: int = 0, loops: int = 1, perf: bool = True, prof_pe: int | str = 0, target: str = "cpu",
             timeout_s: float = 120.0, work_dir: str | os.PathLike | None = None,
             output_dir: str | os.PathLike | None = None, fnpu: int = 0, fpe: int = 0,
             ipport: str | Callable[[], str] | None = None, keep_files: bool = False, chaos_seed: int | None = None,
             binary: str | os.PathLike | None = None, env: dict[str, str] | None = None,
             on_launch: Callable[[int], None] | None = None, kernel_source=None,
             settings: KernelSettings | str | None = None) -> RunResult:
    """Run ``case`` with one ``variant`` on ``target`` and check it.

    Args:
        case: spec, case, prepared case or reference case folder (see :func:`prepare_case`).
        variant: ``classic`` (MTE only) or ``doubleplane`` (MTE + SDMA); default doubleplane, or with
            ``kernel_source`` the rule that kernel is compared with (its :attr:`KernelSource.rule`).
        min_sdma_bytes: smallest segment (bytes) that may go by SDMA (docs/decision-rule.md#1-the-rule: 2 MiB).
        warmup, loops: launches before and during profiling; loops >= 1.
        perf: record perf rows for the profiled PE(s).
        prof_pe: the PE whose cores are profiled, or ``"all"`` to run once per PE (with ``perf``
            only: without it, one run).
        target: ``cpu`` (twin) or ``npu``.
        timeout_s: limit for each launch of all PEs, seconds.
        output_dir: if given, the perf rows of profiled PE r are appended to
            ``<output_dir>/combine_perf_rank<r>.csv`` (classic) or
            ``combine_doubleplane_perf_rank<r>.csv`` (header once, as docs/formats.md#3-perf-csv),
            once every launch succeeded, and the case's sidecar is written beside them
            (``<prefix>_counters_<case_id>.json``): :func:`combine_lab.formats.sidecars.write_run_files`.
        fnpu, fpe: first NPU (PE r on NPU ``r % pes + fnpu``) and first PE id passed to the driver.
        ipport: SHMEM bootstrap address for every launch, or a function called once per launch
            (each profiled PE's run) that returns it; default a free 127.0.0.1 port per launch.
        keep_files: keep case files that this call wrote to a temporary folder, and the run's folder
            of logs (``run_dir``).
        chaos_seed: twin only: run under chaos mode with this seed (puts land as late and in
            as odd an order as their semantics allow); protocol violations are reported in
            ``RunResult.violations``. None: normal completion order.
        binary: a host driver to use instead of building one (tests of broken kernels).
        env: extra environment for every PE (e.g. ``COMBINE_HOST_REPEAT_CHECK=1``: call i
            sends rows of value i+1 and checks its own x_out).
        on_launch: called with the profiled PE after each launch of all PEs has ended (a progress count).
        kernel_source: your own kernel instead of the lab's: a folder with a combine kernel written
            against SHMEM and Ascend C (``<shmem>/examples/combine/combine_doubleplane``), or a
            :class:`~combine_lab.run.kernel_source.KernelSource`; checked against the entry contract,
            built unchanged, launched by the lab's driver with every check (docs/own-kernel.md).
        settings: the lab kernel's settings (KernelSettings or a label: ``reference``, ``segment``,
            ``c6``, ``segment-c6``; docs/variants.md), checked against the SoC before anything runs.

    The run parameters are checked as :class:`~combine_lab.run.options.RunOptions` (one validator
    each, shared with the harness, the command line and the app), the rest as :class:`CaseRun` is made.

    Returns:
        A :class:`RunResult`; x_out mismatches are reported in ``checks``, not raised.

    Raises:
        SpecError: an invalid case spec (before anything is written).
        ParameterError: bad variant, loops, warmup, min_sdma_bytes, prof_pe, chaos_seed, timeout, fnpu,
            ipport, or an output_dir / work_dir that cannot hold files (before launching).
        CaseFileError: invalid case files.
        build.BuildError / build.TargetUnavailable: the target cannot be built.
        build.VariantRefused: ``doubleplane`` on ``npu`` with CANN older than 9.0.0 or on Ascend950 (before anything runs).
        LaunchError: a PE failed (other than an x_out mismatch) or the run timed out.
        KernelSourceError: ``kernel_source`` does not meet the entry contract (before anything runs).
        KernelFailed: your kernel failed or hung (a LaunchError that names the kernel and the slot).
    """
    options = RunOptions(warmup=warmup, loops=loops, perf=perf, prof_pe=prof_pe, min_sdma_bytes=min_sdma_bytes,
                         target=target, timeout_s=timeout_s, chaos_seed=chaos_seed, fnpu=fnpu, fpe=fpe)
    return CaseRun(case, variant, options, kernel_source=kernel_source, settings=settings, binary=binary, env=env,
                   ipport=ipport, on_launch=on_launch).run(work_dir=work_dir, output_dir=output_dir,
                                                           keep_files=keep_files)


@dataclass
class CaseRun:
    """One run of one variant of a case, as :func:`run_case` makes it, in steps: made (everything that
    can be refused before a file is written is refused: :meth:`__post_init__`), then :meth:`run`:
    the case's files, the plan and the profiled PEs (:meth:`_plan`), one launch of all PEs per profiled
    PE (:meth:`_launch_all`), and what they left read back and checked (:meth:`_collect`).

    Attributes: ``case``, ``variant``, ``kernel_source``, ``settings``, ``binary``, ``env``, ``ipport``
    and ``on_launch`` as :func:`run_case` takes them; ``options``: how it runs (a
    :class:`~combine_lab.run.options.RunOptions`, checked when made). After it is made, ``variant``
    and ``settings`` are resolved and ``ks`` is your kernel's KernelSource (None: the lab's).
    """

    case: CaseLike
    variant: str | None = None
    options: RunOptions = field(default_factory=RunOptions)
    kernel_source: object = None
    settings: KernelSettings | str | None = None
    binary: str | os.PathLike | None = None
    env: dict[str, str] | None = None
    ipport: str | Callable[[], str] | None = None
    on_launch: Callable[[int], None] | None = None
    ks: object = field(default=None, init=False)

    def __post_init__(self):
        if self.kernel_source is not None:
            from .kernel_source import kernel_source as as_kernel
            self.ks = as_kernel(self.kernel_source)
        ks, target = self.ks, self.options.target
        if self.variant is None:
            self.variant = ks.rule if ks is not None else DOUBLEPLANE
        if self.variant not in VARIANTS:
            raise ParameterError(f"variant={self.variant!r}: must be one of {', '.join(map(repr, VARIANTS))}",
                                 parameter="variant", value=self.variant, allowed=", ".join(map(repr, VARIANTS)))
        self.settings = settings = parse_settings(self.settings)
        if ks is not None and not settings.is_reference:
            raise ParameterError(f"settings={settings.label!r}: kernel settings are the lab kernel's; your kernel "
                                 f"({ks.label}) runs as it is written", parameter="settings", value=settings.label)
        if self.ipport is not None and not callable(self.ipport):  # a function's addresses are checked as it makes them
            check_ipport(self.ipport, "ipport")
        twin_soc = (self.env or {}).get("COMBINE_TWIN_SOC") or os.environ.get("COMBINE_TWIN_SOC")
        if target == "cpu" and twin_soc:
            try:
                aiv_cores(twin_soc)
            except ValueError:
                raise ParameterError(f"COMBINE_TWIN_SOC={twin_soc!r}: {TWIN_SOCS}", parameter="COMBINE_TWIN_SOC",
                                     value=twin_soc, allowed=TWIN_SOCS) from None
        if target == "cpu":
            check_kernel_settings(settings, self.variant, twin_soc or TWIN_DEFAULT_SOC)
        elif settings.segment and self.variant != DOUBLEPLANE:
            check_kernel_settings(settings, self.variant)
        if self.binary is None:
            why = refusals(target, [self.variant]).get(self.variant)
            if why:
                raise build_mod.VariantRefused(why, parameter="variant", value=self.variant)
        known = self.case.case.spec if isinstance(self.case, PreparedCase) else getattr(self.case, "spec", self.case)
        if isinstance(known, CaseSpec):  # a spec or a Case: its PEs and dtype are refused before writing
            self.options.prof_pes(known.pes)
            _own_kernel_dtype(ks, known.dtype)

    def run(self, work_dir: str | os.PathLike | None = None, output_dir: str | os.PathLike | None = None,
            keep_files: bool = False) -> RunResult:
        """Write the case's files (in ``work_dir``), launch, read back and check; the perf rows and the
        sidecar go to ``output_dir`` once every launch succeeded. Arguments, result and errors as
        :func:`run_case`'s."""
        if output_dir is not None:
            usable_folder(output_dir, "output_dir")
        prepared = prepare_case(self.case, work_dir, self.options.target)
        run_dir = None
        try:
            prof_pes, the_plan = self._plan(prepared)
            binary = Path(self.binary) if self.binary is not None else build_mod.build(self.options.target,
                                                                                         kernel=self.ks)
            run_dir = Path(tempfile.mkdtemp(prefix=f"combine_{self.label}_", dir=prepared.case_root))
            status, perf_frames = self._launch_all(prepared, binary, run_dir, prof_pes)
            result = self._collect(prepared, run_dir, the_plan, prof_pes, status, perf_frames)
            if output_dir is not None:  # only once every launch succeeded: a failed run adds no rows
                write_run_files(output_dir, result, result.perf if self.options.perf else None)
            return result
        finally:
            if not keep_files:  # a kept work dir keeps the case files, not a folder per run
                if run_dir is not None:
                    shutil.rmtree(run_dir, ignore_errors=True)
                if prepared is not self.case:
                    prepared.cleanup()

    @property
    def label(self) -> str:
        """The variant with its settings (``doubleplane-segment-c6``): what names the run's files."""
        return variant_label(self.variant, self.settings)

    def _plan(self, prepared: PreparedCase) -> tuple[list[int], Plan]:
        """The profiled PEs of the written case and the planner's plan its counters must equal; raises
        ParameterError (a PE past the case's), CapacityError (the variant's layout does not fit)."""
        spec = prepared.case.spec
        _own_kernel_dtype(self.ks, spec.dtype)  # case files: once read
        prof_pes = self.options.prof_pes(spec.pes)
        check_capacity(spec, prepared.case_root, _rows_per_pe(prepared.case), self.options.target,
                       segment=self.settings.segment)
        return prof_pes, make_plan(prepared.case, self.variant, min_sdma_bytes=self.options.min_sdma_bytes,
                                   settings=self.settings)

    def _env(self, spec: CaseSpec) -> dict[str, str]:
        """The PEs' environment: ``env``, the twin's wait budget of this case, its chaos seed."""
        env = dict(self.env or {})
        if self.options.target == "cpu":
            env.setdefault("COMBINE_TWIN_WAIT_S", str(case_wait_budget_s(spec, self.options.timeout_s)))
        if self.options.chaos_seed is not None:
            env["COMBINE_TWIN_CHAOS"] = str(int(self.options.chaos_seed))
        return env

    def _launch_all(self, prepared: PreparedCase, binary: Path, run_dir: Path,
                    prof_pes: list[int]) -> tuple[list[int], list[pd.DataFrame]]:
        """One launch of all PEs per profiled PE; returns each PE's worst driver status and the perf rows
        of each profiled PE. Raises LaunchError (KernelFailed for your kernel)."""
        o, spec, env = self.options, prepared.case.spec, self._env(prepared.case.spec)
        csv_of = lambda r: run_dir / perf_csv_name(self.label, r)  # noqa: E731
        perf_frames, status = [], [0] * spec.pes
        for ppe in prof_pes:
            port = (check_ipport(self.ipport(), "ipport") if callable(self.ipport) else self.ipport) \
                or bootstrap_ipport()
            argv = lambda r: host_argv(pe_size=spec.pes, pe_id=r, ipport=port, g_npus=spec.pes,  # noqa: E731
                                       first_pe=o.fpe, first_npu=o.fnpu, dtype=spec.dtype, bs=spec.bs, h=spec.h,
                                       topk=spec.topk, expert_per_pe=spec.expert_per_pe, perf=o.perf,
                                       warmup=launch_warmup(o.target, o.warmup, o.loops),
                                       loops=o.loops, csv=csv_of(r), case_id=spec.case_id, variant=self.variant,
                                       min_sdma_bytes=o.min_sdma_bytes, case_root=prepared.case_root,
                                       policy=driver_policy(self.variant, self.settings),
                                       cores_per_rank=self.settings.cores_per_rank)
            try:
                outcomes = launch_pes(binary, spec.pes, argv, cwd=prepared.case_root,
                                      log_dir=run_dir / f"logs_pe{ppe}", timeout_s=o.timeout_s,
                                      env={**env, "SHMEM_CYCLE_PROF_PE": str(ppe)}, tolerated_codes=(_MISMATCH_EXIT,),
                                      unnoticed_codes=(_REFUSED_INPUT_EXIT,))
            except LaunchError as e:
                if self.ks is None:
                    raise
                raise _kernel_failure(e, self.ks, prepared.case) from None
            status = [max(s, out.returncode) for s, out in zip(status, outcomes)]
            if self.on_launch is not None:
                self.on_launch(ppe)
            if o.perf and csv_of(ppe).is_file():
                perf_frames.append(read_perf_csv(csv_of(ppe)))
                csv_of(ppe).rename(run_dir / f"prof{ppe}_{csv_of(ppe).name}")  # the next run writes afresh
        return status, perf_frames

    def _collect(self, prepared: PreparedCase, run_dir: Path, the_plan: Plan, prof_pes: list[int],
                 status: list[int], perf_frames: list[pd.DataFrame]) -> RunResult:
        """What the launches left, read back: every PE's x_out checked against its golden file, the
        twin's counters (none on an NPU), the perf rows; as a RunResult."""
        o, spec, ks = self.options, prepared.case.spec, self.ks
        counters = [read_counters(run_dir / driver_counters_name(perf_csv_name(self.label, r)))
                    for r in range(spec.pes)] if o.target == "cpu" else []
        x_out = [read_x_out(prepared.case_root, spec, r) for r in range(spec.pes)]
        checks = [check_x_out(x, prepared.golden(r), spec.dtype) for r, x in enumerate(x_out)]  # what the PEs checked
        perf_df = pd.concat(perf_frames, ignore_index=True) if perf_frames else pd.DataFrame()
        return RunResult(case_id=spec.case_id, routing=spec.routing, dtype=spec.dtype, variant=self.variant,
                         min_sdma_bytes=o.min_sdma_bytes, target=o.target, x_out=x_out, checks=checks, perf=perf_df,
                         counters=counters_frame(counters, "last") if counters else pd.DataFrame(),
                         counters_total=counters_frame(counters, "total") if counters else pd.DataFrame(),
                         launches=int(counters[0]["launches"]) if counters else o.warmup + o.loops,
                         plan=the_plan, run_dir=run_dir, driver_status=status,
                         violations=[m for c in counters for m in c.get("violation_examples", [])],
                         violation_count=sum(int(c.get("violations", 0)) for c in counters),
                         violation_kinds=kinds_of_violations(counters), spec=spec,
                         warmup=o.warmup, loops=o.loops, prof_pes=prof_pes, ranks=counters,
                         kernel=ks.label if ks is not None else "", kernel_source=ks.path if ks is not None else None,
                         settings=self.settings)


def _own_kernel_dtype(ks, dtype) -> None:
    """Your kernel takes the entry contract's two instances (docs/own-kernel.md#2-the-entry-contract):
    a bfloat16_t case is refused for it (ParameterError), which the lab's kernel runs."""
    if ks is not None and dtype == "bfloat16_t":
        raise ParameterError(f"dtype='bfloat16_t': refused for your kernel ({ks.label}): the entry contract "
                             "instantiates combine_demo for int32_t and op::fp16_t only; the lab's kernel runs "
                             "bfloat16_t (docs/own-kernel.md#2-the-entry-contract)", parameter="dtype",
                             value="bfloat16_t")


def launch_warmup(target: str, warmup: int, loops: int) -> int:
    """The untimed launches a run makes: ``warmup``, and on the twin enough more that it launches at
    least twice, so that a status flag left ready by one launch is caught in the next
    (docs/hardware-rules.md#15-launch-epochs)."""
    return max(int(warmup), 2 - int(loops)) if target == "cpu" else int(warmup)


def case_wait_budget_s(spec: CaseSpec, timeout_s: float) -> float:
    """The twin's wait budget of ``spec`` under a run limit of ``timeout_s`` (:func:`combine_lab.run.launch.wait_budget_s`
    of the bytes of every row the case moves: pes * bs * topk * h * itemsize)."""
    return wait_budget_s(spec.pes * spec.bs * spec.topk * spec.row_bytes, timeout_s)


def refusals(target: str, variants=VARIANTS) -> dict[str, str]:
    """Variant -> why ``target`` refuses it here, for each of ``variants`` that it refuses.

    The one place a refusal is decided: doubleplane on an NPU whose CANN is older than 9.0.0 or
    whose SoC has no SDMA put (Ascend950) (:func:`combine_lab.run.capabilities.npu_variant_refusal`). The twin refuses
    nothing. :func:`run_case` raises ``VariantRefused`` with the reason; the harness
    (:func:`combine_lab.harness.execute`: the CLI, the sweep, compare and the tuning app) turns it
    into a row that says why.
    """
    if target != "npu":
        return {}
    out = {}
    for v in variants:
        why = npu_variant_refusal(v)
        if why:
            out[v] = why
    return out


__all__ = ["VARIANTS", "PreparedCase", "RunResult", "CaseLike", "CaseRun", "RunOptions", "prepare_case", "run_case",
           "refusals", "LaunchError", "KernelFailed"]
