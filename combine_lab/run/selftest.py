"""``combine-lab selftest``: a short form of the protocol checker and the fault suite, with
a one-screen report (cases tried, violations, hangs, leaks: all zero when healthy).

The broken kernels are made here from the real source by moving a status-flag write in
front of the quiet that must precede it (combine-facts section 5); they are built into
their own build folders and never installed.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from ..case.case import case_from_arrays
from ..case.casefiles import rank_file
from ..case.spec import CaseSpec
from .build import build, default_build_dir, source_root
from .launch import LaunchError, tagged_host_pids, tagged_segments
from .runner import prepare_case, run_case

#: (name, text in kernels/combine_kernel.cpp, broken replacement)
BROKEN_KERNELS = {
    "mte_flag_before_quiet": (
        "            aclshmem_quiet();\n            PutFlags(begin, end, dst_pe);\n",
        "            PutFlags(begin, end, dst_pe);  // BROKEN: flags before the payload's quiet\n"
        "            aclshmem_quiet();\n"),
    "sdma_flag_before_sdma_quiet": (
        "            aclshmemx_sdma_quiet<T>(sdma_ub, kUbSdmaBytes, 0);\n"
        "            for (uint32_t e = 0; e < epp_; ++e) {\n"
        "                const uint32_t seg = e * uint32_t(pes_) + src_rank;\n"
        "                if (UseSdma(seg, threshold_num, threshold_den)) PutFlags(SegBegin(seg), SegEnd(seg), dst_pe);\n"
        "            }\n",
        "            for (uint32_t e = 0; e < epp_; ++e) {\n"
        "                const uint32_t seg = e * uint32_t(pes_) + src_rank;\n"
        "                if (UseSdma(seg, threshold_num, threshold_den)) PutFlags(SegBegin(seg), SegEnd(seg), dst_pe);\n"
        "            }\n"
        "            aclshmem_quiet();  // BROKEN: SDMA flags land before the SDMA payload's quiet\n"
        "            aclshmemx_sdma_quiet<T>(sdma_ub, kUbSdmaBytes, 0);\n"),
}

#: A small case with SDMA segments at min_sdma_bytes=0 (zipf skew puts some above average).
CHECKER_SPEC = CaseSpec(pes=3, bs=12, h=20, topk=3, expert_per_pe=2, routing="zipf:1.2", dtype="float16_t")


def build_broken_kernel(name: str, build_dir: str | os.PathLike | None = None) -> Path:
    """Build the driver with the broken kernel ``name`` (a key of :data:`BROKEN_KERNELS`); return it.

    Raises:
        KeyError: unknown name. RuntimeError: the real kernel no longer contains the text
        the mutation replaces (update :data:`BROKEN_KERNELS`).
    """
    good, bad = BROKEN_KERNELS[name]
    kernels = source_root() / "kernels"
    src = (kernels / "combine_kernel.cpp").read_text()
    if src.count(good) != 1:
        raise RuntimeError(f"kernels/combine_kernel.cpp changed: the {name} mutation no longer applies")
    folder = Path(build_dir) if build_dir is not None else default_build_dir("cpu").parent / f"broken-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    kernel = folder / "combine_kernel.cpp"
    text = src.replace(good, bad).replace('#include "combine_kernel.h"', f'#include "{kernels / "combine_kernel.h"}"')
    if not kernel.is_file() or kernel.read_text() != text:
        kernel.write_text(text)
    return build("cpu", build_dir=folder / "build", kernel_source=kernel)


@dataclass
class Report:
    """Counts of the self-test; ``lines``: one line per check, for the screen."""

    cases: int = 0
    violations: int = 0   # by the real kernel (the broken ones must have some)
    mismatches: int = 0
    hangs: int = 0        # runs that timed out when they should have finished, or hung past their limit
    leaks: int = 0
    failures: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not (self.violations or self.mismatches or self.hangs or self.leaks or self.failures)

    def text(self) -> str:
        verdict = "healthy" if self.healthy else "NOT HEALTHY"
        tail = [f"cases tried: {self.cases}, violations: {self.violations}, mismatches: {self.mismatches}, "
                f"hangs: {self.hangs}, leaks: {self.leaks} -- {verdict}"]
        return "\n".join(["combine-lab selftest (CPU twin)"] + self.lines + [f"  FAILED: {f}" for f in self.failures]
                         + tail)


def run_selftest(seeds: int = 5) -> Report:
    """Run the short checker and fault suite on the twin; returns the :class:`Report`.

    Its runs carry their own session tag, so leaks are counted for them alone, whatever
    else runs on the machine.

    Args:
        seeds: chaos seeds for the real kernel (each case x both variants x seeds runs).
    """
    old_tag = os.environ.get("COMBINE_LAB_SESSION_TAG")
    tag = f"st{os.getpid()}x"
    os.environ["COMBINE_LAB_SESSION_TAG"] = tag
    try:
        return _run_selftest(seeds, tag)
    finally:
        if old_tag is None:
            os.environ.pop("COMBINE_LAB_SESSION_TAG", None)
        else:
            os.environ["COMBINE_LAB_SESSION_TAG"] = old_tag


def _run_selftest(seeds: int, tag: str) -> Report:
    rep = Report()
    me = psutil.Process()
    segs0, pids0, fds0 = tagged_segments(tag), tagged_host_pids(tag), me.num_fds()

    # 1. The checker catches broken kernels.
    caught = []
    for name in BROKEN_KERNELS:
        binary = build_broken_kernel(name)
        variant, min_sdma = ("classic", 2 << 20) if name.startswith("mte") else ("doubleplane", 0)
        res = run_case(CHECKER_SPEC, variant, min_sdma_bytes=min_sdma, chaos_seed=1, binary=binary)
        rep.cases += 1
        if res.violation_count > 0:
            caught.append(name)
        else:
            rep.failures.append(f"broken kernel {name} was not caught")
    rep.lines.append(f"  checker      broken kernels caught: {len(caught)}/{len(BROKEN_KERNELS)} "
                     f"({', '.join(caught) or 'none'})")

    # 2. The real kernel under chaos: no violation, x_out = golden, counters = plan.
    specs = [CHECKER_SPEC, CaseSpec(pes=4, bs=8, h=33, topk=2, expert_per_pe=2, masked_fraction=0.25),
             CaseSpec(pes=2, bs=16, h=16, topk=4, expert_per_pe=2, routing="hot-expert:0.25", dtype="float16_t")]
    before = rep.violations + rep.mismatches
    for spec in specs:
        for variant, min_sdma in (("classic", 2 << 20), ("doubleplane", 0)):
            for seed in range(seeds):
                rep.cases += 1
                try:
                    res = run_case(spec, variant, min_sdma_bytes=min_sdma, chaos_seed=seed, timeout_s=60)
                except LaunchError as e:
                    rep.hangs += "timed out" in str(e)
                    rep.failures.append(f"{spec.case_id} {variant} seed {seed}: {str(e).splitlines()[0]}")
                    continue
                rep.violations += res.violation_count
                rep.mismatches += (not res.check_ok) + len(res.counter_mismatches())
    rep.lines.append(f"  real kernel  {len(specs)} cases x 2 variants x {seeds} chaos seeds: "
                     f"{rep.violations + rep.mismatches - before} violations or mismatches")

    # 3. Faults: fully masked token and PE, repeated calls, a slot nobody sends (must end, naming it).
    fault_ok = 0
    spec = CaseSpec(pes=2, bs=4, h=32, topk=2, expert_per_pe=2, dtype="float16_t", routing="external")
    ids = np.array([[[0, 2], [1, -1], [-1, -1], [3, 0]]] * 2, dtype=np.int32)
    res = run_case(case_from_arrays(spec, np.ones((2, 4, 32)), ids, np.full((2, 4, 2), .5)), "doubleplane",
                   min_sdma_bytes=0)
    rep.cases += 1
    fault_ok += res.ok and not res.x_out[0][2].any()
    res = run_case(CaseSpec(pes=2, bs=4, h=32, topk=2, expert_per_pe=2, routing="zipf:0.5"), "doubleplane",
                   min_sdma_bytes=0, warmup=2, loops=3, env={"COMBINE_HOST_REPEAT_CHECK": "1"})
    rep.cases += 1
    fault_ok += res.driver_status == [0, 0]
    with tempfile.TemporaryDirectory(prefix="combine_selftest_") as tmp:
        prepared = prepare_case(CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2), tmp)
        counts = rank_file(prepared.case_dir, 0, "ep_recv_count.bin")
        np.zeros(4, dtype=np.int32).tofile(counts)  # PE 0 sends nothing, but its owners wait
        t0 = time.monotonic()
        rep.cases += 1
        try:
            run_case(prepared, "classic", timeout_s=20, env={"COMBINE_TWIN_TIMEOUT_S": "2"})
            rep.failures.append("a case whose rows were removed did not hang")
        except LaunchError as e:
            if "timed out after" in str(e) and "status slot" in str(e) and time.monotonic() - t0 < 15:
                fault_ok += 1
            else:
                rep.hangs += 1
                rep.failures.append(f"hang not reported as expected: {str(e).splitlines()[0]}")
    rep.lines.append(f"  faults       masked slots, repeated calls, a slot nobody sends: {fault_ok}/3 as expected")
    if fault_ok != 3:
        rep.failures.append(f"{3 - fault_ok} fault cases misbehaved")

    # 4. Leaks.
    segs, pids, fds = tagged_segments(tag) - segs0, tagged_host_pids(tag) - pids0, me.num_fds() - fds0
    rep.leaks = len(segs) + len(pids) + max(fds, 0)
    rep.lines.append(f"  leaks        shared-memory segments {len(segs)}, PE processes {len(pids)}, "
                     f"open files {max(fds, 0)}")
    return rep
