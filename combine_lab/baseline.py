"""The baseline users would otherwise pick: ``torch.distributed.all_to_all_single`` + weighted sum.

The same case as the combine kernel, done the framework way: every PE sends each received
expert-output row back to the PE that owns its token (one ``all_to_all_single``), and the
owner reduces them with ``expert_scales`` in float32, in topk order, as the golden does
(combine-facts sections 1-3). On NPUs it runs on the HCCL backend (torch_npu); on the twin
the same code runs on the gloo backend with CPU tensors, so the path is exercised anywhere.

One Python process per PE, started and cleaned up by :func:`combine_lab.launch.launch_pes`
(same timeout and kill guarantees as the combine driver); rendezvous on a free port of
127.0.0.1, gloo bound to the loopback interface.

Times per loop (microseconds, the slowest rank of each loop): ``comm_only`` is the
all_to_all alone, ``full_op`` is reorder + all_to_all + weighted sum.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .build import TargetUnavailable
from .casefiles import CheckResult, check_x_out
from .launch import free_port, launch_pes
from .spec import DTYPES

#: target -> torch.distributed backend.
BACKENDS = {"cpu": "gloo", "npu": "hccl"}


class BaselineUnavailable(TargetUnavailable):
    """The baseline cannot run here (torch, or torch_npu and NPUs, missing); the message says how to fix it."""


@dataclass
class BaselineResult:
    """One run of the all_to_all baseline.

    Attributes:
        case_id, routing: the case; target: ``cpu`` or ``npu``; backend: ``gloo`` or ``hccl``.
        x_out: per rank, ``[bs, h]`` arrays of T.
        checks: per rank, x_out against golden (bit-exact for both dtypes).
        times: one row per profiled loop, columns ``full_op`` and ``comm_only`` (us, slowest rank).
        run_dir: the PEs' logs and outputs (removed with the case files unless kept).
    """

    case_id: str
    routing: str
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
        raise ValueError(f"target={target!r}: must be cpu or npu")
    if target == "cpu":
        try:
            import torch.distributed as dist  # noqa: F401
        except ImportError:
            raise BaselineUnavailable("--baseline hccl on target=cpu runs the same baseline on the gloo backend, "
                                      f"which needs torch: {capabilities.TORCH_FIX}") from None
        if not dist.is_available() or not dist.is_gloo_available():
            raise BaselineUnavailable("--baseline hccl on target=cpu needs torch.distributed with gloo: "
                                      "install a torch build that has it")
        return "gloo"
    fix = capabilities.detect().baselines()["hccl"]
    if fix:
        raise BaselineUnavailable(f"--baseline hccl on target=npu needs torch_npu and visible NPUs: {fix}")
    return "hccl"


def run_baseline(prepared, *, target: str = "cpu", warmup: int = 1, loops: int = 5, timeout_s: float = 120.0,
                 fnpu: int = 0, keep_files: bool = False) -> BaselineResult:
    """Run the all_to_all baseline on a prepared case (``runner.prepare_case``) and check it.

    Args:
        prepared: a :class:`combine_lab.runner.PreparedCase` (its case files are read by the PEs).
        target: ``cpu`` (gloo, CPU tensors) or ``npu`` (HCCL, device ``pe % pes + fnpu``).
        warmup, loops: iterations before and during timing (loops >= 1).
        timeout_s: limit for all PEs together, seconds (also torch.distributed's own timeout).
        keep_files: keep the run folder (logs, x_out, times) after returning.

    Raises:
        BaselineUnavailable: torch (cpu) or torch_npu and NPUs (npu) missing, before anything starts.
        ValueError: loops < 1 or warmup < 0.
        LaunchError: a PE failed or the run timed out (every PE is stopped).
    """
    if loops < 1 or warmup < 0:
        raise ValueError(f"warmup={warmup}, loops={loops}: need warmup >= 0 and loops >= 1")
    backend = require_baseline(target)
    spec = prepared.case.spec
    run_dir = Path(tempfile.mkdtemp(prefix=f"baseline_{backend}_", dir=prepared.case_root))
    port = free_port()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // spec.pes))}
    src_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = src_root + os.pathsep + os.environ.get("PYTHONPATH", "")

    def argv(r: int) -> list[str]:
        return ["-m", "combine_lab.baseline", "--rank", str(r), "--world", str(spec.pes), "--port", str(port),
                "--backend", backend, "--case-dir", str(prepared.case_dir), "--out", str(run_dir),
                "--warmup", str(warmup), "--loops", str(loops), "--first-device", str(fnpu),
                "--timeout", str(timeout_s)]

    try:
        launch_pes(Path(sys.executable), spec.pes, argv, cwd=run_dir, log_dir=run_dir / "logs", timeout_s=timeout_s,
                   env=env)
        x_out, checks = [], []
        for r in range(spec.pes):
            x = np.fromfile(run_dir / f"x_out_{r}.bin", dtype=spec.np_dtype).reshape(spec.bs, spec.h)
            x_out.append(x)
            checks.append(check_x_out(x, prepared.golden(r), spec.dtype))
        times = pd.DataFrame(json.loads((run_dir / "times.json").read_text()))
        return BaselineResult(spec.case_id, spec.routing, target, backend, x_out, checks, times, run_dir)
    finally:
        if not keep_files:
            shutil.rmtree(run_dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The worker: one process per PE

def _rank_inputs(case_dir: Path, rank: int, meta: dict) -> dict:
    """This PE's combine inputs from the reference case files (combine-facts sections 2-3)."""
    T = np.dtype(DTYPES[meta["dtype"]]).newbyteorder("<")
    d = case_dir / f"rank_{rank}"
    counts = np.fromfile(d / "ep_recv_count.bin", dtype="<i4")
    n = int(counts[-1]) if counts.size else 0
    h = int(meta["h"])
    return {
        "expand_x": np.fromfile(d / "expand_x.bin", dtype=T, count=n * h).reshape(n, h),
        "assist": np.fromfile(d / "assist_info.bin", dtype="<i4", count=n * 3).reshape(n, 3),
        "expert_ids": np.fromfile(d / "expert_ids.bin", dtype="<i4").reshape(meta["bs"], meta["topk"]),
        "expert_scales": np.fromfile(d / "expert_scales.bin", dtype="<f4").reshape(meta["bs"], meta["topk"]),
    }


def plan_exchange(assist: np.ndarray, expert_ids: np.ndarray, world: int, expert_per_pe: int) -> dict:
    """Index plan of the all_to_all (not timed: dispatch knows it already).

    ``assist``: int32 [n, 3] (src_rank, token, topk) of the rows this PE holds; ``expert_ids``:
    int32 [bs, topk] of its own tokens. Returns ``send_perm`` (rows in src_rank order, stable),
    ``send_counts`` / ``recv_counts`` (rows per peer) and ``recv_slots`` (flat token*topk+k of
    each received row: this PE's valid slots sorted by expert id, then slot, which is the order
    the peers send them in).
    """
    src = assist[:, 0].astype(np.int64)
    send_perm = np.argsort(src, kind="stable")
    ids = expert_ids.reshape(-1).astype(np.int64)
    E = world * expert_per_pe
    slots = np.flatnonzero((ids >= 0) & (ids < E))
    recv_slots = slots[np.lexsort((slots, ids[slots]))]
    return {"send_perm": send_perm, "send_counts": np.bincount(src, minlength=world)[:world],
            "recv_counts": np.bincount(ids[slots] // expert_per_pe, minlength=world)[:world],
            "recv_slots": recv_slots}


def _worker(a: argparse.Namespace) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    case_dir, out = Path(a.case_dir), Path(a.out)
    meta = json.loads((case_dir / "meta.json").read_text())
    bs, h, topk, epp = int(meta["bs"]), int(meta["h"]), int(meta["topk"]), int(meta["expert_per_pe"])
    inp = _rank_inputs(case_dir, a.rank, meta)
    plan = plan_exchange(inp["assist"], inp["expert_ids"], a.world, epp)
    if a.backend == "hccl":
        import torch_npu  # noqa: F401  (registers the npu device and the hccl backend)
        device = torch.device(f"npu:{a.rank % a.world + a.first_device}")
        torch.npu.set_device(device)
        sync = torch.npu.synchronize
    else:
        device = torch.device("cpu")
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        sync = lambda: None  # noqa: E731  (CPU ops are synchronous)
    dist.init_process_group(a.backend, init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=max(10.0, a.timeout)))
    x = torch.from_numpy(inp["expand_x"].copy()).to(device)
    perm = torch.from_numpy(plan["send_perm"]).to(device)
    recv_slots = torch.from_numpy(plan["recv_slots"]).to(device)
    send_counts = [int(c) for c in plan["send_counts"]]
    recv_counts = [int(c) for c in plan["recv_counts"]]
    valid = torch.zeros(bs * topk, dtype=torch.bool, device=device)
    valid[recv_slots] = True
    valid = valid.view(bs, topk, 1)
    scales = torch.from_numpy(inp["expert_scales"].copy()).to(device).view(bs, topk, 1)
    recv = torch.empty((int(sum(recv_counts)), h), dtype=x.dtype, device=device)
    dense = torch.zeros((bs * topk, h), dtype=torch.float32, device=device)

    def combine():
        t0 = time.perf_counter()
        send = x.index_select(0, perm)
        sync()
        t1 = time.perf_counter()
        dist.all_to_all_single(recv, send, output_split_sizes=recv_counts, input_split_sizes=send_counts)
        sync()
        t2 = time.perf_counter()
        dense.index_copy_(0, recv_slots, recv.to(torch.float32))
        d3 = dense.view(bs, topk, h)
        acc = torch.zeros((bs, h), dtype=torch.float32, device=device)
        for k in range(topk):  # topk order and float32 roundings as the golden
            acc = torch.where(valid[:, k], acc + d3[:, k] * scales[:, k], acc)
        result = acc.to(x.dtype)
        sync()
        t3 = time.perf_counter()
        return result, (t3 - t0) * 1e6, (t2 - t1) * 1e6

    for _ in range(a.warmup):
        dist.barrier()
        combine()
    times = []
    for _ in range(a.loops):
        dist.barrier()
        result, full_us, comm_us = combine()
        times.append((full_us, comm_us))
    # The slowest rank of each loop.
    t = torch.tensor(times, dtype=torch.float32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    result.cpu().numpy().tofile(out / f"x_out_{a.rank}.bin")
    if a.rank == 0:
        tt = t.cpu().numpy()
        (out / "times.json").write_text(json.dumps({"full_op": tt[:, 0].tolist(), "comm_only": tt[:, 1].tolist()}))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Worker entry point (``python -m combine_lab.baseline --rank R ...``), started by :func:`run_baseline`."""
    p = argparse.ArgumentParser(prog="combine_lab.baseline", description="all_to_all baseline worker (one per PE)")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--backend", choices=sorted(set(BACKENDS.values())), required=True)
    p.add_argument("--case-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--loops", type=int, default=5)
    p.add_argument("--first-device", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0)
    return _worker(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
