"""What the walkthrough shows besides tables: the kernel's own source, the decision rule's
arithmetic, what a wait for a slot nobody sends does, and one segment priced by formula.

    kernel_source("UseSdma")                 # the function as it is in kernels/ now, character for character
    rule_arithmetic(6393, 358008, 6000, 56)  # integer rule vs float averages on one segment
    float32_tie(6000, 56)                    # the first exact tie float32 would send by SDMA
    unsent_slot_wait(case, src_rank=0, token=1, k=1)   # the twin's message when a PE waits for a masked slot
    one_segment(load_model("a3"), [1, 16, 256], h=7168, itemsize=2)   # formula and replay, MTE and SDMA

Everything here reads or runs the real thing when called (the kernel file, the planner's rule,
the twin, the model's replay), so the walkthrough cannot drift from them.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..kernels import CLASSIC
from ..case.case import Case, case_from_arrays
from ..formats.casefiles import rank_file
from ..case.spec import CaseSpec
from ..errors import ParameterError
from ..model import facade
# the per-operation costs themselves: segment_formula writes the model's arithmetic out by hand, the
# walkthrough's point, and one_segment checks it against the facade's replay of the kernel's stream
from ..model.costs import link_rate, mte_remote_rate, sdma_call_us
from ..model.machines import NpuModel
from ..model.stream import SQE_BYTES
from ..run.launch import LaunchError
from ..run.runner import prepare_case, run_case

__all__ = ["KERNEL_FILE", "KernelSource", "kernel_source", "rule_arithmetic", "float32_tie", "unsent_slot_wait", "segment_per_row", "crossover_text",
           "one_segment", "segment_formula"]

#: The kernel's source file, read whenever :func:`kernel_source` is called.
KERNEL_FILE = Path(__file__).resolve().parents[2] / "kernels" / "combine_kernel.cpp"


@dataclass(frozen=True)
class KernelSource:
    """Lines ``first``..``last`` (1-based) of ``path``: the function ``name`` as the file has it
    (``text``, its lines as they are, only the common indentation removed). Shown in a notebook as
    a C++ block under its file and line numbers."""

    name: str
    path: Path
    first: int
    last: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}, lines {self.first}-{self.last}"

    def _repr_markdown_(self) -> str:
        return f"`{self.where}`:\n\n```cpp\n{self.text}\n```"

    def __repr__(self) -> str:  # a plain-text view (a saved notebook, a terminal) shows the code too
        return f"// {self.where}\n{self.text}"

    def __str__(self) -> str:
        return self.text


def kernel_source(name: str, path: str | Path | None = None) -> KernelSource:
    """The definition of function ``name`` in the kernel file (default :data:`KERNEL_FILE`), read now,
    with the comment lines right above it, as the file has them: the real kernel holds no switch of
    the self-test's broken kernels (those are patches, kernels/broken/, docs/hardware-rules.md#12-broken-kernels),
    so nothing is left out.

    Raises ParameterError when the file has no definition of ``name``.
    """
    p = Path(path) if path is not None else KERNEL_FILE
    lines = p.read_text().splitlines()
    head = re.compile(rf"^\s*(template\s*<.*>\s*)?(__aicore__|static|inline|void|bool|uint\w*|int\w*|auto)\b.*"
                      rf"\b{re.escape(name)}\s*\(")
    start = next((i for i, ln in enumerate(lines) if head.match(ln) and not ln.rstrip().endswith(";")), None)
    if start is None:
        raise ParameterError(f"{p}: no function {name!r} defined there", parameter="name", value=name)
    depth, end, seen = 0, start, False
    for i in range(start, len(lines)):
        code = lines[i].split("//", 1)[0]
        depth += code.count("{") - code.count("}")
        seen = seen or "{" in code
        if seen and depth <= 0:
            end = i
            break
    first = start
    if first > 0 and lines[first - 1].strip().startswith("template"):  # a template's own line above it
        first -= 1
    while first > 0 and lines[first - 1].strip().startswith("//"):
        first -= 1
    body = lines[first:end + 1]
    indent = min((len(ln) - len(ln.lstrip()) for ln in body if ln.strip()), default=0)
    return KernelSource(name, p, first + 1, end + 1, "\n".join(ln[indent:] for ln in body))


# ------------------------------------------------------------------------------ the rule's arithmetic

def rule_arithmetic(segment_rows: int, remote_rows: int, row_bytes: int, den: int) -> pd.DataFrame:
    """Is a segment of ``segment_rows`` rows strictly above its PE's remote average, where the PE holds
    ``remote_rows`` remote rows and ``den = max(pes - 1, 1) * expert_per_pe`` remote segments (empty
    ones included)? Decided three ways: the rule as the planner and the kernel compute it
    (``segment_bytes * den > num`` in integers), and against the average divided out in float64 and
    in float32. Columns: method, average_bytes (as that method has it), above (bool).

    Raises ParameterError when ``den`` < 1 or a count is negative."""
    for name, value in (("segment_rows", segment_rows), ("remote_rows", remote_rows), ("row_bytes", row_bytes)):
        if int(value) < 0:
            raise ParameterError(f"{name}={value}: must be >= 0", parameter=name, value=value)
    if int(den) < 1:
        raise ParameterError(f"den={den}: must be >= 1 (max(pes - 1, 1) * expert_per_pe)",
                             parameter="den", value=den, allowed=">= 1")
    seg, num = int(segment_rows) * int(row_bytes), int(remote_rows) * int(row_bytes)
    f64 = float(num) / den
    f32 = np.float32(num) / np.float32(den)
    return pd.DataFrame({
        "method": ["integers: segment_bytes * den > num (planner and kernel)", "float64: segment_bytes > num / den",
                   "float32: segment_bytes > num / den"],
        "average_bytes": [f"{num // den} + {num % den}/{den}", repr(f64), repr(float(f32))],
        "above": [seg * den > num, float(seg) > f64, bool(np.float32(seg) > f32)],
    })


def float32_tie(row_bytes: int, den: int, max_rows: int = 1 << 16) -> tuple[int, int] | None:
    """The smallest segment (rows r) in an exact tie with its PE's remote average (r * den remote
    rows) that a float32 average would send by SDMA although the rule keeps it on MTE:
    ``(r, r * den)``, or None up to ``max_rows``."""
    r = np.arange(1, max_rows + 1, dtype=np.int64)
    seg, num = (r * row_bytes).astype(np.float32), (r * den * row_bytes).astype(np.float32)
    wrong = np.flatnonzero(seg > num / np.float32(den))
    return (int(r[wrong[0]]), int(r[wrong[0]] * den)) if len(wrong) else None


# --------------------------------------------------------------------------------- a slot nobody sends

def unsent_slot_wait(case: Case, src_rank: int, token: int, k: int, wait_s: float = 2.0) -> str:
    """What the twin says when PE ``src_rank`` waits for its slot (``token``, ``k``), which is masked, so
    dispatch sent it nowhere and no PE will ever send it back: the case's files are written, that one
    expert id is changed to a valid expert (as if the kernel did not skip masked slots), and classic
    runs with the twin's wait limit at ``wait_s`` seconds. Returns the message of the launch error
    (the PE, core and status slot that never became ready).

    Raises ParameterError when ``src_rank``, ``token`` or ``k`` is outside the case or ``wait_s`` is not
    positive, when the slot is not masked, or when the run does not hang.
    """
    s = case.spec
    for name, value, bound in (("src_rank", src_rank, s.pes), ("token", token, s.bs), ("k", k, s.topk)):
        if not 0 <= int(value) < bound:
            raise ParameterError(f"{name}={value}: must be in [0, {bound}) for this case", parameter=name, value=value)
    if not wait_s > 0:
        raise ParameterError(f"wait_s={wait_s}: must be > 0 seconds",
                             parameter="wait_s", value=wait_s, allowed="> 0 seconds")
    if 0 <= int(case.expert_ids[src_rank, token, k]) < s.moe_expert_num:
        raise ParameterError(f"slot (PE {src_rank}, token {token}, k {k}) is not masked: it is sent, nothing hangs",
                             parameter="case", value=(src_rank, token, k))
    with tempfile.TemporaryDirectory(prefix="combine_lab_unsent_") as tmp:
        prepared = prepare_case(case, tmp)
        path = rank_file(prepared.case_dir, src_rank, "expert_ids.bin")
        ids = np.fromfile(path, dtype=np.int32).reshape(s.bs, s.topk)
        ids[token, k] = 0  # "valid" now: the PE waits for it, but no PE holds its row
        ids.tofile(path)
        try:
            run_case(prepared, CLASSIC, timeout_s=10 * wait_s + 20, env={"COMBINE_TWIN_TIMEOUT_S": f"{wait_s:g}"})
        except LaunchError as e:
            return str(e)
    raise ParameterError("the run ended although a PE waited for a slot nobody sends",
                         parameter="case", value=(src_rank, token, k))


# ------------------------------------------------------------------------- one segment, by formula

def segment_formula(model: NpuModel, n: int, row_bytes: int, plane: str) -> float:
    """comm_only (us) of the one core that sends a single remote segment of ``n`` rows of ``row_bytes``
    and nothing else, on ``plane`` ('MTE' or 'SDMA'), as the model prices it, written out:

    - MTE: each row GM -> UB (``a = row / core_gm``) then UB -> the other PE (``b = row / min(mte_remote,
      link) + mte_put_us``), through two staging buffers in turn: ``a + b + (n - 1) * max(a, b)``; then a
      quiet, ``n`` status flags, and the closing quiet.
    - SDMA (n < 256: no SDMA quiet in between): the core issues ``n`` calls (``sdma_issue_us`` each); the
      PE's engines serve them, each call priced by the link class of PE 0 -> PE 1
      (:func:`combine_lab.model.costs.sdma_call_us`: ``ceil(row / 1 MiB)`` descriptors of ``sdma_sqe_us``
      and the bytes at ``sdma_GBps``, added or overlapped by the class's form); the payload also
      needs its link and the PE's egress; then the SDMA quiet, ``n`` flags by MTE and a quiet.
    """
    m, row = model, float(row_bytes)
    cls = int(m.pair_class(2)[0, 1])
    link = float(link_rate(m, cls))
    if plane == "MTE":
        a = row / (m["core_gm_GBps"] * 1e3)
        b = row / float(mte_remote_rate(m, cls)) + m["mte_put_us"]
        return a + b + (n - 1) * max(a, b) + m["quiet_us"] + n * m["flag_us"] + m["quiet_us"]
    if plane == "SDMA":
        if n >= 256:
            raise ParameterError(f"n={n}: the formula is written for fewer than 256 rows (one SDMA quiet, at the end)",
                                 parameter="n", value=n, allowed="fewer than 256 rows")
        service = float(sdma_call_us(m, cls, row))
        engines = m["sdma_issue_us"] + n * service / m["sdma_engines"]
        wire = n * row / min(link, m["egress_GBps"] * 1e3)
        return max(n * m["sdma_issue_us"], engines, wire) + m["sdma_quiet_us"] + n * m["flag_us"] + m["quiet_us"]
    raise ParameterError(f"plane={plane!r}: MTE or SDMA", parameter="plane", value=plane, allowed="MTE or SDMA")


def one_segment(model: NpuModel, sizes, h: int, itemsize: int = 2) -> pd.DataFrame:
    """One remote segment alone, of each of ``sizes`` rows (fewer than 256) (h elements of ``itemsize`` bytes): PE 0
    holds it and sends it back to PE 1 (a 2-PE case where every other slot is masked), priced by
    :func:`segment_formula` and by the model replaying the kernel's stream, once on each plane.

    Columns: rows, bytes, mte_formula_us, mte_replay_us, sdma_formula_us, sdma_replay_us,
    faster ('MTE' or 'SDMA'). The two ways agree to rounding; the replay is what the model does for
    whole cases.

    Raises ParameterError for an itemsize other than 2 or 4, h < 1, or a size outside 1..255 rows."""
    if itemsize not in (2, 4):
        raise ParameterError(f"itemsize={itemsize!r}: 2 (float16_t) or 4 (int32_t)",
                             parameter="itemsize", value=itemsize, allowed="2 (float16_t) or 4 (int32_t)")
    if int(h) < 1:
        raise ParameterError(f"h={h!r}: must be >= 1 element", parameter="h", value=h)
    out = []
    dtype = {2: "float16_t", 4: "int32_t"}[itemsize]
    for n in sizes:
        n = int(n)
        if not 1 <= n < 256:
            raise ParameterError(f"sizes: {n} rows: each size must be 1 to 255 rows (one SDMA quiet, at the end)",
                                 parameter="sizes", value=n, allowed="1 to 255 rows each")
        spec = CaseSpec(pes=2, bs=n, h=h, topk=1, expert_per_pe=1, routing="external", dtype=dtype)
        ids = np.full((2, n, 1), -1, dtype=np.int32)
        ids[1, :, 0] = 0  # PE 1's tokens went to expert 0 on PE 0, which sends them back
        case = case_from_arrays(spec, np.zeros((2, n, h)), ids, np.ones((2, n, 1)))
        rows = facade.rows_of(case, model)
        times = {}
        for plane in ("MTE", "SDMA"):
            mask = np.zeros(rows.counts.shape, dtype=bool)
            mask[0, 1] = plane == "SDMA"  # the model prices any plan, not only the rule's
            times[plane] = float(facade.times(rows, mask, model).comm_only[0, 1])
        row = h * itemsize
        f = {plane: segment_formula(model, n, row, plane) for plane in ("MTE", "SDMA")}
        out.append({"rows": n, "bytes": n * row, "mte_formula_us": f["MTE"], "mte_replay_us": times["MTE"],
                    "sdma_formula_us": f["SDMA"], "sdma_replay_us": times["SDMA"],
                    "faster": "SDMA" if times["SDMA"] < times["MTE"] else "MTE"})
    return pd.DataFrame(out)


def segment_per_row(model: NpuModel, row_bytes: int) -> dict:
    """What one more row of a lone remote segment costs its core on each plane, as
    :func:`segment_formula` prices it (us): ``mte`` = ``max(a, b)`` (the busier of GM -> UB and
    UB -> the other PE), ``sdma`` = the largest of the core's issue (``sdma_issue_us``), the engines'
    service (``ceil(row / 1 MiB) * sdma_sqe_us`` per descriptor plus the bytes at ``sdma_GBps``, by the class's form,
    shared by ``sdma_engines``) and the wire (``row / min(link, egress)``); ``sdma_bound`` names which
    of the three; ``sdma_fixed`` = what SDMA pays once and MTE does not (``sdma_quiet_us`` -
    ``quiet_us``). Both planes write the same flags, so they cancel."""
    m, row = model, float(row_bytes)
    cls = int(m.pair_class(2)[0, 1])
    link = float(link_rate(m, cls))
    a = row / (m["core_gm_GBps"] * 1e3)
    b = row / float(mte_remote_rate(m, cls)) + m["mte_put_us"]
    descriptors = math.ceil(row / SQE_BYTES) * m.link_values("sdma_sqe_us")[cls]
    service = float(sdma_call_us(m, cls, row)) / m["sdma_engines"]
    parts = {"issue": m["sdma_issue_us"], "engine service": service,
             "wire": row / min(link, m["egress_GBps"] * 1e3)}
    bound = max(parts, key=parts.get)
    return {"mte": max(a, b), "sdma": parts[bound], "sdma_bound": bound, "sdma_parts": parts,
            "descriptor_us": descriptors, "sdma_fixed": m["sdma_quiet_us"] - m["quiet_us"]}


def crossover_text(table: pd.DataFrame, model: NpuModel, row_bytes: int) -> str:
    """One sentence, from :func:`one_segment`'s ``table`` (same ``model``, rows of ``row_bytes``), that
    says at which sizes a lone segment is faster by SDMA, and, when SDMA never wins there, why: its
    cost per row (:func:`segment_per_row`) against MTE's, and the fixed cost it must pay back."""
    lo, hi = int(table["rows"].min()), int(table["rows"].max())
    span = f"{lo} to {hi} rows ({int(table['bytes'].min()):,} B to {int(table['bytes'].max()):,} B)"
    sdma = table.loc[table["faster"] == "SDMA", "rows"].astype(int).tolist()
    c = segment_per_row(model, row_bytes)
    per_row = (f"per row of {int(row_bytes):,} B, SDMA costs {c['sdma']:.2f} us (bound by its {c['sdma_bound']}; "
               f"descriptors {c['descriptor_us']:.2f} us of it) against MTE's {c['mte']:.2f} us")
    if not sdma:
        if c["sdma"] >= c["mte"]:
            why = (f"{per_row}, so SDMA falls further behind with every row and never catches up "
                   f"its fixed cost ({c['sdma_fixed']:.2f} us more of quiet)")
        else:
            why = (f"{per_row}: cheaper per row, but its fixed cost ({c['sdma_fixed']:.2f} us more of quiet, plus "
                   f"the first issue) is not paid back within {hi} rows")
        return (f"No crossover on this machine: one segment alone is faster by MTE at every size from {span}; "
                f"SDMA never wins on its own. Why: {why}.")
    if len(sdma) == len(table):
        return f"One segment alone is faster by SDMA at every size from {span}: {per_row}."
    first = sdma[0]
    nbytes = int(table.loc[table["rows"] == first, "bytes"].iloc[0])
    tail = "" if sdma == [r for r in table["rows"].astype(int) if r >= first] else \
        f" (SDMA faster at {', '.join(map(str, sdma))} rows only)"
    return (f"Crossover at {first} rows ({nbytes:,} B): one segment alone is faster by MTE below that and by "
            f"SDMA from there up to {hi} rows{tail}; {per_row}.")
