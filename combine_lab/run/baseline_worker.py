"""The all_to_all baseline's worker: one process per PE, started by :func:`combine_lab.run.baseline.run_baseline`.

    python -m combine_lab.run.baseline_worker --rank R --world N --port P --backend gloo|hccl --case-dir D --out O

Reads its rank's combine inputs from the reference case files, sends each received expert-output
row back to the PE that owns its token with one ``all_to_all_single`` and reduces them with
``expert_scales`` in float32, in topk order, as the golden does (docs/protocol.md#1-the-combine-problem, docs/protocol.md#2-dispatch-layout and docs/protocol.md#3-reference-data-and-the-check).
Writes ``<out>/output/x_out_<rank>.bin`` and (rank 0) ``times.json``: per loop, the slowest rank's
``full_op`` and ``comm_only`` in microseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..case.case import receive_order
from ..formats.casefiles import read_meta, read_rank_file, x_out_path
from ..case.spec import CaseSpec
from .launch import die_with_launcher

BACKENDS = ("gloo", "hccl")


def _rank_inputs(case_dir: Path, spec: CaseSpec, rank: int) -> dict:
    """This PE's combine inputs from the reference case files (docs/protocol.md#2-dispatch-layout and docs/formats.md#1-case-files): its
    used expand_x rows (T [n, h]) and assist rows (int32 [n, 3]), n = ep_recv_count[-1], and its
    own expert_ids (int32 [bs, topk]) and expert_scales (float32 [bs, topk])."""
    counts = read_rank_file(case_dir, spec, rank, "ep_recv_count.bin")
    n = int(counts[-1]) if counts.size else 0
    return {
        "expand_x": read_rank_file(case_dir, spec, rank, "expand_x.bin", rows=n),
        "assist": read_rank_file(case_dir, spec, rank, "assist_info.bin", rows=n),
        "expert_ids": read_rank_file(case_dir, spec, rank, "expert_ids.bin"),
        "expert_scales": read_rank_file(case_dir, spec, rank, "expert_scales.bin"),
    }


def plan_exchange(assist: np.ndarray, expert_ids: np.ndarray, world: int, expert_per_pe: int) -> dict:
    """Index plan of the all_to_all (not timed: dispatch knows it already).

    ``assist``: int32 [n, 3] (src_rank, token, topk) of the rows this PE holds; ``expert_ids``:
    int32 [bs, topk] of its own tokens. Returns ``send_perm`` (rows in src_rank order, stable),
    ``send_counts`` / ``recv_counts`` (rows per peer) and ``recv_slots`` (flat token*topk+k of
    each received row: :func:`combine_lab.case.case.receive_order` of this PE's own slots, the
    order in which the expert owners hold them and so send them back).
    """
    src = assist[:, 0].astype(np.int64)
    send_perm = np.argsort(src, kind="stable")
    recv_slots = receive_order(expert_ids, world * expert_per_pe)
    owners = expert_ids.reshape(-1)[recv_slots].astype(np.int64) // expert_per_pe
    return {"send_perm": send_perm, "send_counts": np.bincount(src, minlength=world)[:world],
            "recv_counts": np.bincount(owners, minlength=world)[:world], "recv_slots": recv_slots}


def _worker(a: argparse.Namespace) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    case_dir, out = Path(a.case_dir), Path(a.out)
    _, spec = read_meta(case_dir)
    bs, h, topk, epp = spec.bs, spec.h, spec.topk, spec.expert_per_pe
    inp = _rank_inputs(case_dir, spec, a.rank)
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
    x_out_file = x_out_path(out, a.rank)
    x_out_file.parent.mkdir(exist_ok=True)
    result.cpu().numpy().tofile(x_out_file)
    if a.rank == 0:
        tt = t.cpu().numpy()
        (out / "times.json").write_text(json.dumps({"full_op": tt[:, 0].tolist(), "comm_only": tt[:, 1].tolist()}))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Worker entry point (``python -m combine_lab.run.baseline_worker --rank R ...``); dies with
    its launcher (:func:`combine_lab.run.launch.die_with_launcher`)."""
    die_with_launcher()
    p = argparse.ArgumentParser(prog="combine_lab.run.baseline_worker",
                                description="all_to_all baseline worker (one per PE)")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--backend", choices=BACKENDS, required=True)
    p.add_argument("--case-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--loops", type=int, default=5)
    p.add_argument("--first-device", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0)
    return _worker(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
