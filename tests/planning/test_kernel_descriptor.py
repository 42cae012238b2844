"""The kernel descriptor (combine_lab/kernels.py, docs/layout.md#3-adding-a-variant): name, source,
rule, settings, supports and the default speed-up baseline of every kernel the lab runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from combine_lab import CaseSpec
from combine_lab.errors import ParameterError
from combine_lab.harness import Run
from combine_lab.kernels import CLASSIC, DOUBLEPLANE, RULES, Kernel, KernelSettings, Supports
from combine_lab.planning.settings import driver_policy, lab_kernel, parse_settings
from combine_lab.run.kernel_source import kernel_source

REFSTYLE = Path(__file__).resolve().parents[1] / "kernels" / "combine_refstyle"


def test_lab_kernels_name_and_baseline():
    assert RULES == ("classic", "doubleplane")
    got = [(k.name, k.rule, k.settings.label, k.baseline) for k in
           (lab_kernel(CLASSIC), lab_kernel(DOUBLEPLANE), lab_kernel("classic-c4"), lab_kernel("doubleplane-segment-c6"),
            lab_kernel(DOUBLEPLANE, "segment"))]
    assert got == [("classic", "classic", "reference", ""), ("doubleplane", "doubleplane", "reference", "classic"),
                   ("classic-c4", "classic", "c4", ""), ("doubleplane-segment-c6", "doubleplane", "segment-c6", "classic-c6"),
                   ("doubleplane-segment", "doubleplane", "segment", "classic")]


def test_driver_policy_from_the_descriptor():
    seg = parse_settings("segment-c2")
    assert [driver_policy(CLASSIC, seg), driver_policy(DOUBLEPLANE, seg), driver_policy(DOUBLEPLANE, KernelSettings())] \
        == ["mte_only", "dual_plane_segment", "dual_plane"]


def test_a_bad_rule_or_source_names_the_parameter():
    with pytest.raises(ParameterError) as e:
        Kernel("mine", "dualplane")
    assert (str(e.value), e.value.parameter, e.value.value, e.value.allowed) == (
        "rule='dualplane': must be one of 'classic', 'doubleplane'", "rule", "dualplane", "classic, doubleplane")
    with pytest.raises(ParameterError) as e:
        Kernel("user:mine", CLASSIC, "user", parse_settings("c2"))
    assert (str(e.value), e.value.parameter) == ("settings='c2': kernel settings are the lab kernel's (not user:mine's)",
                                                 "settings")


def test_a_folder_is_a_kernel_too():
    k = kernel_source(REFSTYLE).kernel
    assert (k.name, k.rule, k.source, k.path, k.supports.dtypes, k.baseline) == (
        "user:refstyle", "classic", "user", REFSTYLE.resolve(), ("int32_t", "float16_t"), "classic")
    assert k.supports.refusal(dtype="bfloat16_t") == "dtype='bfloat16_t': this kernel supports int32_t, float16_t"
    assert Supports().refusal(dtype="bfloat16_t", target="npu") is None


def test_a_run_names_its_kernel():
    spec = CaseSpec(pes=2, bs=8, h=64, topk=2, expert_per_pe=1)
    assert Run(spec, DOUBLEPLANE, settings="segment-c2").descriptor == lab_kernel("doubleplane-segment-c2")
    assert Run(spec, kernel=REFSTYLE).descriptor.name == "user:refstyle"
    assert Run(spec, "baseline").descriptor is None
