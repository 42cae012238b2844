"""The baseline users would otherwise pick: ``torch.distributed.all_to_all_single`` + weighted sum.

The same case as the combine kernel, done the framework way: every PE sends each received
expert-output row back to the PE that owns its token (one ``all_to_all_single``), and the
owner reduces them with ``expert_scales`` in float32, in topk order, as the golden does
(docs/protocol.md#1-the-combine-problem, docs/protocol.md#2-dispatch-layout and docs/protocol.md#3-reference-data-and-the-check). On NPUs it runs on the HCCL backend (torch_npu); on the twin
the same code runs on the gloo backend with CPU tensors, so the path is exercised anywhere.

One Python process per PE, started and cleaned up by :func:`combine_lab.run.launch.launch_pes`
(same timeout and kill guarantees as the combine driver); rendezvous on a free port of
127.0.0.1, gloo bound to the loopback interface.

Times per loop (microseconds, the slowest rank of each loop): ``comm_only`` is the
all_to_all alone, ``full_op`` is reorder + all_to_all + weighted sum.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..formats.casefiles import CheckResult, check_x_out, read_x_out
from ..errors import ParameterError
from .build import TargetUnavailable
from .launch import free_port, launch_pes
from .options import check_fnpu, check_loops, check_timeout_s, check_warmup

#: target -> torch.distributed backend.
BACKENDS = {"cpu": "gloo", "npu": "hccl"}


class BaselineUnavailable(TargetUnavailable):
    """The baseline cannot run here (torch, or torch_npu and NPUs, missing); the message says how to fix it."""


@dataclass
class BaselineResult:
    """One run of the all_to_all baseline.

    Attributes:
        case_id, routing, dtype: the case; target: ``cpu`` or ``npu``; backend: ``gloo`` or ``hccl``.
        x_out: per rank, ``[bs, h]`` arrays of T.
        checks: per rank, x_out against golden (bit-exact for both dtypes).
        times: one row per profiled loop, columns ``full_op`` and ``comm_only`` (us, slowest rank).
        run_dir: the PEs' logs and outputs (removed with the case files unless kept).
    """

    case_id: str
    routing: str
    dtype: str
    target: str
    backend: str
    x_out: list[np.ndarray]
    checks: list[CheckResult]
    times: pd.DataFrame
    run_dir: Path

    @property
    def variant(self) -> str:
        """Label in tables: ``hccl-a2a`` or ``gloo-a2a``."""
        return f"{self.backend}-a2a"

    @property
    def check_ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def time_us(self, metric: str) -> float:
        """Mean over loops of ``metric`` ('full_op' or 'comm_only'), microseconds."""
        return float(self.times[metric].mean()) if len(self.times) else float("nan")

    def spread_us(self, metric: str) -> float:
        """Standard deviation over loops of ``metric``, microseconds (0 for one loop)."""
        return float(self.times[metric].std(ddof=0)) if len(self.times) else float("nan")


def require_baseline(target: str) -> str:
    """The backend for ``target``, or :class:`BaselineUnavailable` with the fix."""
    from . import capabilities

    if target not in BACKENDS:
        raise ParameterError(f"target={target!r}: must be cpu or npu",
                             parameter="target", value=target, allowed="cpu or npu")
    if target == "cpu":
        try:
            import torch.distributed as dist  # noqa: F401
        except ImportError:
            raise BaselineUnavailable("--baseline hccl on target=cpu runs the same baseline on the gloo backend, "
                                      f"which needs torch: {capabilities.TORCH_FIX}",
                                      parameter="baseline", value="hccl") from None
        if not dist.is_available() or not dist.is_gloo_available():
            raise BaselineUnavailable("--baseline hccl on target=cpu needs torch.distributed with gloo: "
                                      "install a torch build that has it", parameter="baseline", value="hccl")
        return "gloo"
    fix = capabilities.detect().baselines()["hccl"]
    if fix:
        raise BaselineUnavailable(f"--baseline hccl on target=npu needs torch_npu and visible NPUs: {fix}",
                                  parameter="baseline", value="hccl")
    return "hccl"


def run_baseline(prepared, *, target: str = "cpu", warmup: int = 1, loops: int = 5, timeout_s: float = 120.0,
                 fnpu: int = 0, keep_files: bool = False) -> BaselineResult:
    """Run the all_to_all baseline on a prepared case (``runner.prepare_case``) and check it.

    Args:
        prepared: a :class:`combine_lab.run.runner.PreparedCase` (its case files are read by the PEs).
        target: ``cpu`` (gloo, CPU tensors) or ``npu`` (HCCL, device ``pe % pes + fnpu``).
        warmup, loops: iterations before and during timing (loops >= 1).
        timeout_s: limit for all PEs together, seconds (also torch.distributed's own timeout).
        keep_files: keep the run folder (logs, x_out, times) after returning.

    Raises:
        BaselineUnavailable: torch (cpu) or torch_npu and NPUs (npu) missing, before anything starts.
        ParameterError: warmup, loops, timeout_s or fnpu refused by :mod:`combine_lab.run.options`.
        LaunchError: a PE failed or the run timed out (every PE is stopped).
    """
    # the run parameters by their one validators (combine_lab.run.options), as run_case checks them
    warmup, loops = check_warmup(warmup), check_loops(loops)
    check_timeout_s(timeout_s)
    fnpu = check_fnpu(fnpu)
    backend = require_baseline(target)
    spec = prepared.case.spec
    run_dir = Path(tempfile.mkdtemp(prefix=f"baseline_{backend}_", dir=prepared.case_root))
    port = free_port()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // spec.pes))}
    src_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src_root + os.pathsep + os.environ.get("PYTHONPATH", "")

    def argv(r: int) -> list[str]:
        return ["-m", "combine_lab.run.baseline_worker", "--rank", str(r), "--world", str(spec.pes),
                "--port", str(port), "--backend", backend, "--case-dir", str(prepared.case_dir), "--out", str(run_dir),
                "--warmup", str(warmup), "--loops", str(loops), "--first-device", str(fnpu),
                "--timeout", str(timeout_s)]

    try:
        launch_pes(Path(sys.executable), spec.pes, argv, cwd=run_dir, log_dir=run_dir / "logs", timeout_s=timeout_s,
                   env=env)
        x_out, checks = [], []
        for r in range(spec.pes):
            x = read_x_out(run_dir, spec, r)
            x_out.append(x)
            checks.append(check_x_out(x, prepared.golden(r), spec.dtype))
        times = pd.DataFrame(json.loads((run_dir / "times.json").read_text()))
        return BaselineResult(spec.case_id, spec.routing, spec.dtype, target, backend, x_out, checks, times, run_dir)
    finally:
        if not keep_files:
            shutil.rmtree(run_dir, ignore_errors=True)
