"""A modelled run: what ``combine-lab run|compare --clock model:<name>`` shows instead of a
launch. Nothing is launched and no payload is made (only the routing is drawn), so any shape
the planner takes is priced; the times are the model's (:mod:`.replay`) and say so.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..kernels import CLASSIC, DOUBLEPLANE
from ..case.case import Case
from ..planning.cores import kernel_constant
from ..planning.planner import DEFAULT_MIN_SDMA_BYTES, Plan
from ..planning.planner import plan as make_plan
from ..planning.settings import REFERENCE, KernelSettings, check_kernel_settings, parse_settings, variant_label
from ..formats.perf_csv import PERF_COLUMNS, gib_per_s
from ..formats.sidecars import sidecar_record
from ..run.options import check_loops, check_warmup, profiled_pes
from .machines import NpuModel
from .replay import ModelledTimes, replay
from .stream import case_rows

#: ``ResultRow.check`` of a modelled run: nothing ran, so nothing was checked.
MODELLED = "MODEL"


@dataclass
class ModelledResult:
    """One variant of one case on a model: ``times`` (per PE and core, us), the ``plan``, the
    ``model``, the run parameters a perf row records (prof_pes, warmup, loops) and the kernel's
    ``settings`` (docs/variants.md)."""

    case: Case
    variant: str
    min_sdma_bytes: int
    model: NpuModel
    plan: Plan
    times: ModelledTimes
    prof_pes: list[int]
    warmup: int
    loops: int
    kernel: str = ""  # your kernel's label, priced from the operation stream it recorded on the twin
    kernel_source: object = None  # its folder
    ub_kb: int | None = None  # UBsize/KB of its perf rows (None: the lab's kernel's)
    settings: KernelSettings = REFERENCE

    @property
    def variant_label(self) -> str:
        """The variant with its settings (``doubleplane-segment-c6``): what names its files."""
        return variant_label(self.variant, self.settings)

    @property
    def label(self) -> str:
        """What results call it: your kernel's label, else :attr:`variant_label`."""
        return self.kernel or self.variant_label

    @property
    def caption(self) -> str:
        what = f"{self.kernel}'s recorded operation stream " if self.kernel else ""
        return f"{what}{self.model.caption()}" if what else self.model.caption()

    def time_us(self, metric: str) -> float:
        """CoreMaxTime/us of ``metric``: the slowest profiled PE's (as RunResult reports it)."""
        return float(max(self.times.time_us(metric, pe) for pe in self.prof_pes))

    def sidecar(self) -> dict:
        """The sidecar of this priced case (:func:`combine_lab.formats.sidecars.sidecar_record`): how it was
        priced (routing, seed, SDMA floor: what calibrate reads back), check ``MODEL``; nothing ran, so
        no counters, violations or launches."""
        return sidecar_record(spec=self.case.spec, variant=self.variant, target=f"model:{self.model.name}",
                              min_sdma_bytes=self.min_sdma_bytes, warmup=self.warmup, loops=self.loops, launches=0,
                              prof_pes=self.prof_pes, check=MODELLED, plan_totals=self.plan.totals,
                              kernel=self.kernel or "lab",
                              kernel_source=None if self.kernel_source is None else str(self.kernel_source),
                              settings=self.settings.label, cores_per_rank=self.settings.cores_per_rank,
                              soc=self.model.soc)

    def perf_rows(self, pe: int) -> pd.DataFrame:
        """The perf rows (full_op, comm_only) of profiled PE ``pe`` in :func:`read_perf_csv` form, as
        the driver would write them (docs/formats.md#3-perf-csv), with the modelled per-core times."""
        s = self.case.spec
        data = s.bs * s.topk * s.h * s.itemsize
        recs = []
        for metric in ("full_op", "comm_only"):
            cores = getattr(self.times, metric)[pe]
            core_max = float(cores.max())
            recs.append({"DataSize/B": data, "Npus": s.pes, "Blocks": self.times.block_dim, "UBsize/KB": self.ub_kb if self.ub_kb is not None else kernel_constant("kUbMteStageBytes") // 1024,
                         "Bandwidth/GB/s": gib_per_s(data * s.pes, core_max), "CoreMaxTime/us": core_max,
                         "Metric": metric, "GlobalDataSize/B": data * s.pes,
                         "PerPeBandwidth/GB/s": gib_per_s(data, core_max), "BS": s.bs, "H": s.h, "TopK": s.topk,
                         "ExpertPerPe": s.expert_per_pe, "Dtype": s.dtype, "Warmup": self.warmup, "Loops": self.loops,
                         "ProfPe": pe, "CaseId": s.case_id, "core_times_us": tuple(float(t) for t in cores)})
        return pd.DataFrame(recs, columns=PERF_COLUMNS + ["core_times_us"])


def model_case(case: Case, variant: str, model: NpuModel, min_sdma_bytes: int = DEFAULT_MIN_SDMA_BYTES,
               prof_pe: int | str = 0, warmup: int = 5, loops: int = 50, *,
               settings: KernelSettings | str | None = None) -> ModelledResult:
    """Price ``variant`` of ``case`` on ``model`` (a run_case without the run) with the lab kernel's
    ``settings`` (KernelSettings or a settings label, default the reference's; docs/variants.md):
    the plan-derived stream of those settings (:func:`.stream.core_runs`) replayed by :func:`.replay.replay`.

    Raises:
        ParameterError: a variant other than classic/doubleplane (the planner's), a prof_pe
            that is not 'all' or a PE of the case (:func:`~combine_lab.run.options.check_prof_pe`'s
            words, as every entry's), settings that are no settings label or that the
            model's SoC cannot run (``segment`` with classic; more cores per rank than
            min(AIV cores, 48): :func:`~combine_lab.planning.settings.check_kernel_settings`).
    """
    settings = parse_settings(settings)
    check_kernel_settings(settings, variant if variant in (CLASSIC, DOUBLEPLANE) else DOUBLEPLANE, model.soc)
    plan = make_plan(case, variant, min_sdma_bytes=min_sdma_bytes, settings=settings)
    pes = case.spec.pes
    prof_pes = profiled_pes(prof_pe, pes)  # the one check of each run option (combine_lab.run.options)
    warmup, loops = check_warmup(warmup), check_loops(loops)
    rows = case_rows(case, model.soc, settings)
    sdma = (plan.segments["plane"].to_numpy() == "SDMA").reshape(pes, -1)
    return ModelledResult(case, variant, int(min_sdma_bytes), model, plan, replay(rows, sdma, model), prof_pes,
                          warmup, loops, settings=settings)
