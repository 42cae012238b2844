"""The kernels the lab runs, described once: a :class:`Kernel` is a name, a source (the lab's own,
a SHMEM checkout's example, a user's folder), a rule (the decision rule its plan follows), the
lab kernel's settings and what it supports (dtypes, SoCs, targets).

This is the only module that spells the rules' names; every other module takes :data:`CLASSIC`,
:data:`DOUBLEPLANE` and :data:`RULES` from here, with what goes with each rule (:data:`RULE_TITLES`,
:data:`RULE_COLORS`, :data:`DRIVER_POLICY`, :data:`FILE_PREFIX`). Adding a variant is one more
rule here plus its kernel code (docs/layout.md#3-adding-a-variant).

    k = lab_kernel("doubleplane", "segment-c6")   # planning.settings.lab_kernel parses labels
    k.name, k.baseline                            # 'doubleplane-segment-c6', 'classic-c6'

The speed-up of a kernel is of a pair: by default each kernel against its same-settings classic
(:attr:`Kernel.baseline`: classic keeps the cores per rank, drops the segment layout, which it
cannot use); ``compare --baseline NAME`` takes another (docs/cli.md#9-repeats-spread-and-verdicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import ParameterError

__all__ = ["CLASSIC", "DOUBLEPLANE", "RULES", "RULE_TITLES", "RULE_COLORS", "DRIVER_POLICY", "FILE_PREFIX",
           "SENDS_SDMA", "LAB", "REFERENCE_CHECKOUT", "USER", "SOURCES", "KernelSettings", "REFERENCE", "Supports",
           "ENTRY_SUPPORTS",
           "Kernel", "check_rule", "rule_of"]

#: The decision rules (docs/decision-rule.md): classic sends every row by MTE; doubleplane sends a
#: segment of at least the SDMA floor by SDMA and the rest by MTE.
CLASSIC = "classic"
DOUBLEPLANE = "doubleplane"
#: Every rule, in the order tables and figures show them (the baseline first).
RULES = (CLASSIC, DOUBLEPLANE)
#: How a figure's legend names a rule's run.
RULE_TITLES = {CLASSIC: "classic (MTE only)", DOUBLEPLANE: "doubleplane (MTE + SDMA)"}
#: One colour per rule, the same in every figure.
RULE_COLORS = {CLASSIC: "#7f7f7f", DOUBLEPLANE: "#1f77b4"}
#: The host driver's policy argument of each rule (host/host_args.cpp).
DRIVER_POLICY = {CLASSIC: "mte_only", DOUBLEPLANE: "dual_plane"}
#: The perf files' name prefix of each rule (docs/formats.md#3-perf-csv, the reference's names).
FILE_PREFIX = {CLASSIC: "combine", DOUBLEPLANE: "combine_doubleplane"}
#: Whether a rule's plan may send anything by SDMA (the segment layout needs it).
SENDS_SDMA = {CLASSIC: False, DOUBLEPLANE: True}

#: Where a kernel's code comes from: the lab's ``kernels/``, a SHMEM checkout's examples, a user's folder.
LAB, REFERENCE_CHECKOUT, USER = "lab", "reference", "user"
SOURCES = (LAB, REFERENCE_CHECKOUT, USER)


def check_rule(rule: str, parameter: str = "rule") -> str:
    """``rule`` when it is one of :data:`RULES`.

    Raises:
        ParameterError: naming ``parameter``, the value and the rules.
    """
    if rule not in RULES:
        raise ParameterError(f"{parameter}={rule!r}: must be one of {', '.join(map(repr, RULES))}",
                             parameter=parameter, value=rule, allowed=", ".join(RULES))
    return rule


def rule_of(label: str) -> str:
    """The rule of a variant label (its first word: ``doubleplane-segment-c6`` is doubleplane's);
    another label (your kernel's ``user:mine``, the baseline's) comes back as it is."""
    return str(label).split("-")[0]


@dataclass(frozen=True)
class KernelSettings:
    """How the lab's kernel is built to run (docs/variants.md).

    ``segment``: the receiver's layout by expert, one SDMA call per contiguous chunk of an SDMA
    segment (the driver's policy ``dual_plane_segment``; doubleplane only). ``cores_per_rank``:
    AIV cores per source rank, 1 (the reference's structure) to the SoC's AIV cores.
    """

    segment: bool = False
    cores_per_rank: int = 1

    @property
    def label(self) -> str:
        """``reference``, ``segment``, ``c<N>`` or ``segment-c<N>``."""
        parts = (["segment"] if self.segment else []) + ([f"c{self.cores_per_rank}"] if self.cores_per_rank != 1 else [])
        return "-".join(parts) or "reference"

    @property
    def is_reference(self) -> bool:
        return not self.segment and self.cores_per_rank == 1


#: The reference's structure: one core per source rank, one SDMA call per row.
REFERENCE = KernelSettings()


@dataclass(frozen=True)
class Supports:
    """What a kernel can run: element types (``-type``), SoCs (None: every SoC the twin models) and
    targets (``cpu``: the twin, ``npu``)."""

    dtypes: tuple[str, ...] = ("int32_t", "float16_t", "bfloat16_t")
    socs: tuple[str, ...] | None = None
    targets: tuple[str, ...] = ("cpu", "npu")

    def refusal(self, dtype: str | None = None, target: str | None = None, soc: str | None = None) -> str | None:
        """Why a kernel with these supports cannot run ``dtype`` on ``target`` / ``soc``; None when it can."""
        for what, value, allowed in (("dtype", dtype, self.dtypes), ("target", target, self.targets),
                                     ("soc", soc, self.socs)):
            if value is not None and allowed is not None and value not in allowed:
                return f"{what}={value!r}: this kernel supports {', '.join(allowed)}"
        return None


#: A kernel folder meets the entry contract for these types only (docs/own-kernel.md#2-the-entry-contract).
ENTRY_SUPPORTS = Supports(dtypes=("int32_t", "float16_t"))


@dataclass(frozen=True)
class Kernel:
    """One kernel the lab can run and compare (docs/layout.md#3-adding-a-variant).

    Attributes:
        name: how results name it: a variant label for the lab's (``doubleplane-segment-c6``),
            ``reference:<name>`` / ``user:<name>`` for a folder (docs/own-kernel.md).
        rule: :data:`CLASSIC` or :data:`DOUBLEPLANE`: the plan its counters are compared with.
        source: :data:`LAB`, :data:`REFERENCE_CHECKOUT` or :data:`USER`.
        settings: the lab kernel's :class:`KernelSettings` (a folder's kernel: the reference's).
        path: a folder's path (None for the lab's kernel).
        supports: the dtypes, SoCs and targets it runs.

    Raises:
        ParameterError: a rule not in :data:`RULES`, a source not in :data:`SOURCES`, or settings
            other than the reference's for a folder's kernel.
    """

    name: str
    rule: str
    source: str = LAB
    settings: KernelSettings = REFERENCE
    path: Path | None = None
    supports: Supports = field(default_factory=Supports)

    def __post_init__(self):
        check_rule(self.rule)
        if self.source not in SOURCES:
            raise ParameterError(f"source={self.source!r}: must be one of {', '.join(map(repr, SOURCES))}",
                                 parameter="source", value=self.source, allowed=", ".join(SOURCES))
        if self.source != LAB and not self.settings.is_reference:
            raise ParameterError(f"settings={self.settings.label!r}: kernel settings are the lab kernel's "
                                 f"(not {self.name}'s)", parameter="settings", value=self.settings.label)

    @property
    def is_lab(self) -> bool:
        return self.source == LAB

    @property
    def baseline(self) -> str:
        """The name of the kernel its speed-up is measured against by default: the lab's classic with
        the same cores per rank (``classic``, ``classic-c6``); the lab's classic itself has none ('')."""
        if self.is_lab and self.rule == CLASSIC:
            return ""
        cores = self.settings.cores_per_rank
        return CLASSIC if cores == 1 else f"{CLASSIC}-c{cores}"
