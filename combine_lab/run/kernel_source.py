"""Your own kernel: a folder with a combine kernel written against SHMEM and Ascend C, such as
``<shmem>/examples/combine/combine_doubleplane``, built unchanged and run by the lab's driver with
every check the lab's own kernel gets (docs/own-kernel.md).

    ks = kernel_source("~/shmem/examples/combine/combine_doubleplane")
    ks.label   # reference:doubleplane: how results name it, beside the lab's doubleplane
    ks.rule    # doubleplane: the plan its twin counters are compared with

The entry contract (:data:`ENTRY_CONTRACT`, the reference's, docs/own-kernel.md#2-the-entry-contract)
is checked here, from the files' text, before anything is built: a folder that does not meet it is
refused with what is missing (:class:`KernelSourceError`). The compiler then checks the types: the
driver's call into the kernel (host/user_kernel.cpp) is compiled against the folder's own
``combine_kernel.h``. The folder's files are only read, never written.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..kernels import DOUBLEPLANE, ENTRY_SUPPORTS, REFERENCE_CHECKOUT, USER, Kernel
from ..errors import ParameterError
from ..planning.planner import VARIANTS

__all__ = ["ENTRY", "HEADER", "MAIN", "ENTRY_CONTRACT", "ENTRY_PARAMETERS", "KernelSource", "KernelSourceError",
           "kernel_source", "reference_root", "LAB_KERNEL"]

#: The function the lab's driver calls, the header that declares it, and the folder's own driver
#: (never part of the kernel: the lab builds it only for ``combine-lab build --kernel-source DIR --main``).
ENTRY, HEADER, MAIN = "combine_demo", "combine_kernel.h", "main.cpp"
#: How results name the lab's own kernel (``ResultRow.kernel``).
LAB_KERNEL = "lab"
#: The entry's parameters, in order (the reference's names).
ENTRY_PARAMETERS = ("block_dim", "stream", "fftsAddr", "expand_x", "assist_info_for_combine", "ep_recv_count",
                    "expert_ids", "expert_scales", "x_out", "shmem_window", "bs", "h", "k", "moe_expert_num", "magic",
                    "perf_mode", "full_frame_id", "comm_frame_id", "warmup_count", "loop_count")
#: The entry contract, as the refusals and docs/own-kernel.md state it.
ENTRY_CONTRACT = (
    f"{HEADER} declares `template <class T> void {ENTRY}(uint32_t block_dim, void* stream, uint64_t fftsAddr, "
    "uint8_t* expand_x, int32_t* assist_info_for_combine, int32_t* ep_recv_count, int32_t* expert_ids, "
    "float* expert_scales, uint8_t* x_out, uint8_t* shmem_window, int bs, int h, int k, int moe_expert_num, "
    "int magic, int perf_mode, int full_frame_id, int comm_frame_id, int warmup_count, int loop_count)`, and a "
    f"source in the folder (any .cpp but {MAIN}) defines it, instantiated for T = int32_t and op::fp16_t, and "
    "launches its kernel with `K<<<block_dim, nullptr, stream>>>(...)`")


class KernelSourceError(ParameterError):
    """A kernel folder that does not meet the entry contract; the message names what is missing."""


@dataclass(frozen=True)
class KernelSource:
    """A folder holding your own combine kernel, checked against the entry contract.

    Attributes:
        path: the folder (absolute, resolved).
        label: how results name it: ``reference:<name>`` for a folder of a SHMEM checkout's
            examples (``reference:doubleplane``), else ``user:<name>``; ``<name>`` is the folder's
            name without a leading ``combine_``. A ``name`` given to :func:`kernel_source` replaces it.
        rule: ``classic`` or ``doubleplane``: the decision rule whose plan the twin's counters are
            compared with; counters that differ from it fail the run (exit 1) unless asked otherwise
            (``--counters-may-differ``).
        rule_from: where the rule was declared: ``rule=`` (``--rule``), ``<file>:<line>`` (a
            ``combine-lab rule: classic`` line in the folder's CMakeLists.txt or combine_kernel.h),
            ``its folder's name`` (SHMEM's combine_classic, combine_doubleplane), or ``a guess``
            (doubleplane; declare it).
        sources: the kernel's sources (every ``.cpp`` of the folder but ``main.cpp``), sorted.
        header: the folder's ``combine_kernel.h``.
    """

    path: Path
    label: str
    rule: str
    sources: tuple[Path, ...]
    header: Path
    rule_from: str = "rule="

    @property
    def slug(self) -> str:
        """The label as a folder name (``reference-doubleplane``): where its perf files go in a compare."""
        return re.sub(r"[^A-Za-z0-9_.-]", "-", self.label)

    @property
    def main(self) -> Path | None:
        """The folder's own driver, ``main.cpp``, if it has one."""
        p = self.path / MAIN
        return p if p.is_file() else None

    def files(self) -> list[Path]:
        """Every file of the folder a build reads: the header, the sources and main.cpp (if any)."""
        return [self.header, *self.sources] + ([self.main] if self.main else [])

    def fingerprint(self) -> str:
        """SHA-256 over the folder's path and the names and bytes of :meth:`files`: a build of it is
        reused while this is unchanged."""
        h = hashlib.sha256(str(self.path).encode())
        for p in self.files():
            h.update(p.name.encode())
            h.update(p.read_bytes())
        return h.hexdigest()

    @property
    def kernel(self) -> Kernel:
        """This folder's :class:`~combine_lab.kernels.Kernel`: its label as the name, its rule, source
        ``reference`` (a SHMEM checkout's examples) or ``user``, the dtypes of the entry contract."""
        source = REFERENCE_CHECKOUT if self.label.startswith(f"{REFERENCE_CHECKOUT}:") else USER
        return Kernel(self.label, self.rule, source, path=self.path, supports=ENTRY_SUPPORTS)

    def __str__(self) -> str:
        return f"{self.label} ({self.path})"


def _code(text: str) -> str:
    """``text`` without comments, string literals and character literals (lengths kept, blanked),
    so that what the checks look for is code."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))
    pattern = r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'"
    return re.sub(pattern, blank, text, flags=re.S)


def _parameters(text: str, at: int) -> list[str] | None:
    """The top-level comma-separated parameters of the parenthesised list opening at ``text[at]``."""
    depth, start, out = 0, at + 1, []
    for i in range(at, len(text)):
        c = text[i]
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
                return [p.strip() for p in out if p.strip()] if any(p.strip() for p in out) else []
        elif c == "," and depth == 1:
            out.append(text[start:i])
            start = i + 1
    return None


def reference_root(path: Path) -> Path | None:
    """The SHMEM checkout holding ``path`` as one of its examples (``<root>/examples/...`` with
    ``<root>/include/shmem.h``), else None."""
    for parent in path.parents:
        if parent.name == "examples" and (parent.parent / "include" / "shmem.h").is_file():
            return parent.parent
    return None


def kernel_source(path: str | os.PathLike | KernelSource, name: str | None = None,
                  rule: str | None = None) -> KernelSource:
    """The :class:`KernelSource` of folder ``path``, checked against the entry contract.

    Args:
        path: the folder (``~`` expanded), or a KernelSource (returned as it is when ``name`` and
            ``rule`` are None).
        name: how results name it (default: ``reference:<folder>`` or ``user:<folder>``).
        rule: ``classic`` or ``doubleplane``: the plan its counters are compared with; default the
            folder's declaration (a line ``combine-lab rule: classic`` in its CMakeLists.txt or
            combine_kernel.h), else its name's (``classic`` or ``doubleplane`` in it), else
            ``doubleplane``, said to be a guess (:attr:`KernelSource.rule_from`).

    Raises:
        KernelSourceError: the folder is missing, or misses a piece of the contract: each missing
            piece is named, with the contract (:data:`ENTRY_CONTRACT`). Nothing is built or written.
    """
    if isinstance(path, KernelSource):
        if name is None and rule is None:
            return path
        path = path.path
    where = Path(os.path.expanduser(str(path)))
    given = f"kernel_source={str(path)!r}"
    if where.is_file():  # a kernel is a folder (its header, its sources, its CMakeLists.txt), not one file
        raise KernelSourceError(f"{given}: is a file, not a folder; give the folder that holds it ({where.parent})",
                                parameter="kernel_source", value=str(path))
    if not where.is_dir():
        raise KernelSourceError(f"{given}: no such folder", parameter="kernel_source", value=str(path))
    where = where.resolve()
    if rule is not None and rule not in VARIANTS:
        raise KernelSourceError(f"rule={rule!r}: the plan a kernel is compared with is one of "
                                f"{', '.join(map(repr, VARIANTS))}", parameter="rule", value=rule)
    missing: list[str] = []
    header = where / HEADER
    sources = tuple(sorted(p for p in where.glob("*.cpp") if p.name != MAIN and p.is_file()))
    if not header.is_file():
        missing.append(f"{HEADER} (it declares {ENTRY})")
    else:
        code = _code(header.read_text(errors="replace"))
        m = re.search(rf"template\s*<\s*(?:class|typename)\s+\w+\s*>\s*void\s+{ENTRY}\s*\(", code)
        if m is None:
            missing.append(f"the declaration `template <class T> void {ENTRY}(...)` in {HEADER}")
        else:
            params = _parameters(code, m.end() - 1)
            if params is None or len(params) != len(ENTRY_PARAMETERS):
                got = "an unreadable list" if params is None else f"{len(params)} parameters"
                missing.append(f"{ENTRY}'s {len(ENTRY_PARAMETERS)} parameters in {HEADER} (it declares {got})")
    code, defined = "", None  # the sources' code, and where it defines the entry
    if not sources:
        missing.append(f"a kernel source (a .cpp other than {MAIN})")
    else:
        code = "\n".join(_code(p.read_text(errors="replace")) for p in sources)
        defined = re.search(rf"\bvoid\s+{ENTRY}\s*\([^;{{]*\)\s*{{", code, flags=re.S)
        if defined is None:
            names = [p.name for p in sources]
            listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            missing.append(f"a definition of {ENTRY} (none in {listed})")
        for what, spelled in (("int32_t", r"(?:std::)?int32_t|int"), ("op::fp16_t", r"(?:op::)?fp16_t")):
            if re.search(rf"template\s+void\s+{ENTRY}\s*<\s*(?:{spelled})\s*>\s*\(", code) is None:
                missing.append(f"the instance {ENTRY}<{what}> (`template void {ENTRY}<{what}>(...);`: the "
                               f"{'int32_t' if what == 'int32_t' else 'float16_t'} cases call it)")
        if "<<<" not in code:
            missing.append("a kernel launch, `K<<<block_dim, nullptr, stream>>>(...)`")
    if not header.is_file() and defined is None and "<<<" not in code:
        raise KernelSourceError(f"{given}: holds no combine kernel: no {HEADER}, and none of its "
                                f"{len(sources)} kernel sources defines {ENTRY} or launches a kernel; give the folder "
                                "of a kernel written to the entry contract (docs/own-kernel.md#2-the-entry-contract)",
                                parameter="kernel_source", value=str(path))
    if missing:
        raise KernelSourceError(f"{given}: not a combine kernel the lab can build: missing "
                                + "; ".join(missing) + f". The entry contract: {ENTRY_CONTRACT} "
                                "(docs/own-kernel.md#2-the-entry-contract)", parameter="kernel_source",
                                value=str(path))
    base = where.name[len("combine_"):] if where.name.startswith("combine_") and len(where.name) > 8 else where.name
    label = name or f"{'reference' if reference_root(where) else 'user'}:{base}"
    if not re.fullmatch(r"[A-Za-z0-9_.:+-]+", label):
        raise KernelSourceError(f"name={label!r}: letters, digits and _ . : + - only (it names files and rows)",
                                parameter="name", value=label)
    rule_from = "rule="
    if rule is None:
        rule, rule_from = declared_rule(where)
    return KernelSource(where, label, rule, sources, header, rule_from)


#: A kernel folder's declaration of its rule, in a comment of its CMakeLists.txt or combine_kernel.h.
RULE_LINE = re.compile(r"combine-lab\s+rule:\s*(\w+)")


def declared_rule(folder: Path) -> tuple[str, str]:
    """(rule, where it was declared) of kernel folder ``folder``: a ``combine-lab rule: <rule>`` line of its
    CMakeLists.txt or combine_kernel.h (``"<file>:<line>"``), else its name's (``classic`` or ``doubleplane``
    in it: SHMEM's examples), else doubleplane, "a guess".

    Raises:
        KernelSourceError: a declaration names a rule that is not ``classic`` or ``doubleplane``.
    """
    for name in ("CMakeLists.txt", HEADER):
        f = folder / name
        if not f.is_file():
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = RULE_LINE.search(line)
            if m is None:
                continue
            if m[1] not in VARIANTS:
                raise KernelSourceError(f"{f}:{n}: combine-lab rule: {m[1]!r}: the rule is one of "
                                        f"{', '.join(map(repr, VARIANTS))}", parameter="rule", value=m[1])
            return m[1], f"{name}:{n}"
    lower = folder.name.lower()
    for rule in VARIANTS:
        if rule in lower:
            return rule, "its folder's name"
    return DOUBLEPLANE, "a guess"
