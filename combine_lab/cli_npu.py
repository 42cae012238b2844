"""``combine-lab doctor`` and ``compare --baseline hccl``: what can run here, and the baseline row.

    combine-lab doctor                     # one screen: versions, twin, CANN, SHMEM, SDMA, NPUs, SoC, what runs
    combine-lab compare ... --baseline hccl   # + torch.distributed all_to_all (HCCL; gloo on the twin)
"""

from __future__ import annotations

import argparse
import sys

from . import capabilities
from .build import VariantRefused

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
    """Add ``doctor`` to ``sub`` (argparse sub-parsers) and ``--baseline`` to its ``compare`` parser."""
    p = sub.add_parser("doctor", help="versions, CANN, SHMEM, SDMA, NPUs, SoC: which targets and variants run here")
    p.set_defaults(handler=_doctor)
    if "compare" in sub.choices:
        sub.choices["compare"].add_argument(
            "--baseline", choices=["hccl"], default=None,
            help="also run torch.distributed all_to_all + weighted sum (HCCL on npu; gloo, CPU tensors, on cpu)")


# ---------------------------------------------------------------------------------------------
# Hooks of the run/compare loop (cli._cmd_run)

#: Columns of the run table (cli._row) that a refused variant or a baseline does not have.
_NO_VALUE = {"comm_only/us": "-", "full_op/us": "-", "MTE bytes": "-", "SDMA bytes": "-", "planned SDMA": "-",
             "counters=plan": "-"}

def runnable(variants: list[str], a: argparse.Namespace, spec, rows: list[dict]):
    """Yield the variants of ``variants`` that can run on ``a.target`` here, in order.

    A refused one (doubleplane on an NPU with CANN < 9.0.0) gets a ``REFUSED`` row in its place
    and its reason on stderr, and the others still run; when the only variant asked for is
    refused, raises :class:`build.VariantRefused`. With ``--baseline``, checks first that the
    baseline can run here (:class:`baseline.BaselineUnavailable` otherwise).
    """
    if getattr(a, "baseline", None):
        from .baseline import require_baseline
        require_baseline(a.target)
    for v in variants:
        why = capabilities.npu_variant_refusal(v) if a.target == "npu" else None
        if why is None:
            yield v
            continue
        if len(variants) == 1:
            raise VariantRefused(why)
        print(f"combine-lab: {why}", file=sys.stderr)
        rows.append({"case": spec.case_id, "routing": spec.routing, "variant": v, "check": "REFUSED", **_NO_VALUE})


def baseline_rows(prepared, a: argparse.Namespace, rows: list[dict]) -> int:
    """With ``--baseline hccl``: run the all_to_all baseline on ``prepared``, append its row;
    return 1 when its x_out differs from golden (printed on stderr), else 0."""
    if not getattr(a, "baseline", None):
        return 0
    from .baseline import run_baseline

    res = run_baseline(prepared, target=a.target, warmup=a.warmup, loops=a.loops, timeout_s=a.timeout, fnpu=a.fnpu)
    rows.append({**_NO_VALUE, "case": res.case_id, "routing": res.routing, "variant": res.variant,
                 "check": "PASS" if res.check_ok else "FAIL",
                 "comm_only/us": round(res.time_us("comm_only"), 3), "full_op/us": round(res.time_us("full_op"), 3)})
    for r, c in enumerate(res.checks):
        if not c.ok:
            print(f"x_out mismatch on PE {r} ({res.variant}): {c}", file=sys.stderr)
    return 0 if res.check_ok else 1
