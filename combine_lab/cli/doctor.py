"""``combine-lab doctor``: one screen of what can run here (versions, twin, CANN, SHMEM, SDMA, NPUs, SoC).

    combine-lab doctor
"""

from __future__ import annotations

import argparse

from .commands import HELP
from ..run import capabilities

#: Packages whose versions the doctor prints, in order.
DOCTOR_PACKAGES = ("combine_lab", "numpy", "pandas", "torch", "torch_npu")

_ROW_LABELS = (("twin", "twin"), ("twin_build", "twin build"), ("cann", "CANN"), ("shmem", "SHMEM"),
               ("sdma", "SDMA"), ("npu", "NPUs"), ("soc", "SoC"))


def _status(ok: bool) -> str:
    return "yes" if ok else "no "


def doctor_lines(caps: capabilities.Capabilities, versions: dict[str, str | None]) -> list[str]:
    """The doctor's screen, one string per line.

    ``caps``: the capability table (:func:`capabilities.detect`); ``versions``: package ->
    version or None (not installed), printed in :data:`DOCTOR_PACKAGES` order.
    """
    lines = ["combine-lab doctor: what can run here",
             f"  {'python':<11} {caps['python'].detail}",
             f"  {'packages':<11} " + ", ".join(f"{p} {versions.get(p) or '-'}" for p in DOCTOR_PACKAGES)]
    for name, label in _ROW_LABELS:
        row = caps[name]
        lines.append(f"  {label:<11} {_status(row.available)} {row.detail}")
        if not row.available and row.fix:
            lines.append(f"  {'':<11}     fix: {row.fix}")
    lines.append("can run here (target variant: status):")
    for target in ("cpu", "npu"):
        for variant, fix in caps.variants(target).items():
            lines.append(f"  {target} {variant:<12} {'yes' if not fix else 'no   fix: ' + fix}")
    base = caps.baselines()
    lines.append(f"  cpu --baseline hccl (gloo stand-in) {'yes' if not base['gloo'] else 'no   fix: ' + base['gloo']}")
    lines.append(f"  npu --baseline hccl {'yes' if not base['hccl'] else 'no   fix: ' + base['hccl']}")
    return lines


def _doctor(args: argparse.Namespace) -> int:
    probes = capabilities.Probes()
    caps = capabilities.detect(probes=probes)
    print("\n".join(doctor_lines(caps, {p: probes.package_version(p) for p in DOCTOR_PACKAGES})))
    return 0


def register(sub) -> None:
    """Add ``doctor`` to ``sub`` (argparse sub-parsers)."""
    p = sub.add_parser("doctor", help=HELP["doctor"])
    p.set_defaults(handler=_doctor)
