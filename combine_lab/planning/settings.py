"""Kernel settings beyond the reference (docs/variants.md): the segment layout (one SDMA call per
contiguous chunk of a segment) and cores per source rank, their labels and their checks.

A *settings label* names the settings alone: ``reference`` (the reference's structure),
``segment``, ``c6`` (6 cores per source rank), ``segment-c6``. A *variant label* puts the
combine in front: ``classic``, ``doubleplane``, ``classic-c6``, ``doubleplane-segment``,
``doubleplane-segment-c6``. ``segment`` is a doubleplane setting only (classic sends no SDMA).
"""

from __future__ import annotations

import dataclasses
import difflib
import re

from ..errors import ParameterError
from ..kernels import DOUBLEPLANE, DRIVER_POLICY, LAB, REFERENCE, RULES, SENDS_SDMA, Kernel, KernelSettings
from .cores import MAX_SDMA_BLOCKS, TWIN_DEFAULT_SOC, aiv_cores

__all__ = ["KernelSettings", "REFERENCE", "parse_settings", "parse_variant_label", "variant_label",
           "check_kernel_settings", "driver_policy", "lab_kernel", "group_variants", "SETTINGS_LABEL_FORM", "VARIANT_LABEL_FORM"]

#: What a settings label looks like, for error messages.
SETTINGS_LABEL_FORM = "'reference', 'segment', 'c<N>' or 'segment-c<N>' (N: cores per source rank)"
#: What a variant label looks like, for error messages.
VARIANT_LABEL_FORM = (f"{', '.join(map(repr, RULES))}, then optionally '-segment' ({DOUBLEPLANE} only) and "
                      f"'-c<N>' (N: cores per source rank), e.g. '{DOUBLEPLANE}-segment-c6'")

_SETTINGS_RE = re.compile(r"^(?:(segment)(?:-c(\d+))?|c(\d+)|reference)$")




def parse_settings(label: str | KernelSettings | None) -> KernelSettings:
    """A settings label (``reference``, ``segment``, ``c6``, ``segment-c6``) as KernelSettings; None
    and KernelSettings pass through (None: the reference).

    Raises:
        ParameterError: not a settings label (the message shows the allowed forms and the closest
            label); c0 or segment-c0 (N must be >= 1).
    """
    if label is None:
        return REFERENCE
    if isinstance(label, KernelSettings):
        return label
    text = str(label).strip().lower()
    m = _SETTINGS_RE.match(text)
    if m and int(m[2] or m[3] or 1) < 1:
        raise ParameterError.of("settings", label, "N must be >= 1 (cores per source rank; c1 is the reference's "
                                f"one core); the labels are {SETTINGS_LABEL_FORM}")
    if not m:
        near = difflib.get_close_matches(text, ["reference", "segment"], n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ParameterError.of("settings", label, f"must be {SETTINGS_LABEL_FORM}{hint}")
    return KernelSettings(segment=bool(m[1]), cores_per_rank=int(m[2] or m[3] or 1))


def variant_label(variant: str, settings: KernelSettings | str | None = None) -> str:
    """``classic`` / ``doubleplane`` with its settings: ``doubleplane-segment-c6``; the reference
    settings add nothing (``doubleplane``)."""
    s = parse_settings(settings)
    return variant if s.is_reference else f"{variant}-{s.label}"


def parse_variant_label(label: str) -> tuple[str, KernelSettings]:
    """A variant label (``classic``, ``doubleplane-segment``, ``classic-c4``,
    ``doubleplane-segment-c6``) as (variant, KernelSettings).

    Raises:
        ParameterError: not a variant label, or ``segment`` with classic (it sends no SDMA).
    """
    text = str(label).strip().lower()
    variant, _, rest = text.partition("-")
    if variant not in RULES:
        raise ParameterError.of("variant", label, f"must be {VARIANT_LABEL_FORM}")
    try:
        settings = parse_settings(rest or None)
    except ParameterError:
        raise ParameterError.of("variant", label, f"must be {VARIANT_LABEL_FORM}") from None
    if rest == "reference":
        raise ParameterError.of("variant", label, f"must be {VARIANT_LABEL_FORM}")
    if settings.segment and not SENDS_SDMA[variant]:
        raise ParameterError.of("variant", label, "'segment' is a doubleplane setting (classic sends nothing by "
                                "SDMA); use doubleplane-segment")
    return variant, settings


def check_kernel_settings(settings: KernelSettings, variant: str, soc: str = TWIN_DEFAULT_SOC) -> KernelSettings:
    """Refuse settings the kernel cannot run, before anything launches (docs/variants.md#4-limits).

    ``cores_per_rank`` must be an int in [1, AIV cores of ``soc``] and, since only AIV blocks
    0..47 have an SDMA stream, no launch may have more than 48 blocks issuing SDMA (the kernel's
    launch_block_dim keeps whole groups within min(AIV, 48)); ``segment`` needs doubleplane.

    Raises:
        ParameterError: naming the parameter, its value and the allowed range.
        ValueError: a SoC the twin does not model.
    """
    cpr = settings.cores_per_rank
    aiv = aiv_cores(soc)
    limit = min(aiv, MAX_SDMA_BLOCKS)
    if not isinstance(cpr, int) or isinstance(cpr, bool) or not 1 <= cpr <= limit:
        raise ParameterError.of("cores_per_rank", cpr, f"must be an int in [1, {limit}] (the {aiv} AIV cores of {soc}; "
                                                     f"at most {MAX_SDMA_BLOCKS} cores issue SDMA)")
    if settings.segment and not SENDS_SDMA.get(variant, False):
        raise ParameterError(f"segment with variant={variant!r}: the segment layout is a doubleplane setting (classic "
                             "sends nothing by SDMA)", parameter="variant", value=variant)
    return settings


def driver_policy(variant: str, settings: KernelSettings) -> str:
    """The host driver's policy argument (host/host_args.cpp): mte_only, dual_plane or dual_plane_segment."""
    policy = DRIVER_POLICY[variant]
    return f"{policy}_segment" if settings.segment and SENDS_SDMA[variant] else policy


def group_variants(variants: list[str], groups: list | None) -> dict[str, tuple]:
    """The lab's runs of ``variants`` (variant labels: ``classic``, ``doubleplane``, ...) under each
    settings group of ``groups`` (settings labels; None: the reference's, or for a variant label with
    settings, the label's own): variant label -> (variant, KernelSettings, [groups it serves]), in
    order. In a group with the segment layout classic runs without it (classic sends nothing by
    SDMA), so one classic run can serve several groups (``reference`` and ``segment``).

    Raises:
        ParameterError: a bad variant or settings label (the allowed forms in the message).
    """
    out: dict[str, tuple] = {}
    for group in groups or [None]:
        for v in variants:
            base, st = parse_variant_label(v)
            if group is not None:
                st = parse_settings(group)
                if not SENDS_SDMA[base]:
                    st = dataclasses.replace(st, segment=False)
            g = st.label if group is None else parse_settings(group).label
            label = variant_label(base, st)
            if label not in out:
                out[label] = (base, st, [])
            if g not in out[label][2]:
                out[label][2].append(g)
    return out


def lab_kernel(variant: str, settings: KernelSettings | str | None = None) -> Kernel:
    """The lab's kernel as a :class:`~combine_lab.kernels.Kernel`: ``variant`` a rule or a variant
    label (``doubleplane-segment-c6``), ``settings`` a settings label or KernelSettings (None: the
    label's own). Its name is the variant label, its baseline the same-settings classic.

    Raises:
        ParameterError: a bad variant or settings label (the allowed forms in the message).
    """
    rule, st = parse_variant_label(variant)
    if settings is not None:
        st = parse_settings(settings)
    return Kernel(variant_label(rule, st), rule, LAB, st)
