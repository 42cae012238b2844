# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (combine_lab)
#     language: python
#     name: combine-lab
# ---

# %% [markdown]
# # 03 · Sweep: where does doubleplane win?
#
# Runs every case of a grid (pes × bs × h × topk × expert_per_pe × routing × kernel settings) for
# both variants, classic (MTE only) and doubleplane (MTE + SDMA), several times each on the chosen target; checks
# x_out and the per-plane counters of every run; writes **one tidy CSV** (the perf columns of
# docs/formats.md#3-perf-csv plus the run's result row: variant, routing, plane bytes, check verdict,
# and the repeat) and a per-case summary CSV; and draws the speed-up of doubleplane over bs × h
# per routing, the speed-up against the SDMA byte share, and the cases where doubleplane loses.
#
# **One convention throughout:** speed-up = classic time / doubleplane time, so **above 1
# means doubleplane is faster**. Every measured time is the median over `repeats` runs with its
# spread, min-max.
#
# **Measured and modelled, side by side, never mixed.** The twin measures CPU threads copying
# memory; the timing model (`combine_lab.model`) prices the same cases on a named NPU (`model`,
# default an Atlas A2) from the kernel's own operation stream. The last section draws the modelled
# speed-ups on the same axes, and what one SDMA call per segment would save if it came free (a
# what-if without the segment setting's layout step; `settings` below runs that setting itself),
# case by case; every modelled figure says "modelled on ..." and which parameters it assumed.
#
# **Kernel settings** (`settings`, docs/variants.md) are one more dimension: `reference` (the
# reference kernel's structure), `segment` (doubleplane's one SDMA call per contiguous segment),
# `c<N>` (N AIV cores per source rank) and `segment-c<N>`. Classic and doubleplane run under each
# group (`classic-c4` beside `doubleplane-segment-c4` in group `segment-c4`; classic has no segment
# layout), every table and figure below is grouped by it, and speed-ups compare the two variants
# of the same group. The model prices each group the same way, against the group's own classic;
# settings the model's SoC cannot run (more cores per rank than it has) say "not modelled for
# <label>" and why.
#
# **Only cases with SDMA traffic say anything about doubleplane.** When the decision rule picks
# no segment (all segments below `min_sdma_bytes`, or none above its PE's remote average), the
# doubleplane run sends exactly the bytes of classic, so any difference between the two times
# is noise. The default grid is chosen so that most cases do send by SDMA (skewed routings,
# rows of 32-64 KiB); the few that do not are kept as a yardstick: their spread *is* the noise.
#
# **Why 5 loops and 1 warmup launch are enough on the twin.** A run's time is the mean of its
# `loops` profiled launches; what limits it is how the PEs' threads are scheduled on a few shared
# CPUs, which changes from run to run, so the spread over `repeats` says what a time is worth, not
# the number of loops. Measured on two shared cores (the 8 zipf and hot-expert cases, 3 repeats):
# the median spread (max - min over median) was 17-51 % with 5 loops and 33-52 % with 10, most
# verdicts `within noise` or `slower` with either. One warmup launch takes the first touch of the
# window and buffers, as in the other notebooks. On an NPU give more (`-p loops 50`, the command
# line's `--loops` default).
#
# Run it headless with papermill, writing under `output/` (ignored by git), e.g.
#
#     mkdir -p output/lab
#     papermill notebooks/03_sweep.ipynb output/lab/03_sweep.ipynb -p bs_list "[64,128]" -p routings "uniform,hot-expert:0.5"
#     papermill notebooks/03_sweep.ipynb output/lab/03_sweep.ipynb -p settings '["reference","segment-c4"]'
#
# (`-p` values may be JSON lists or comma-separated; `-y "bs_list: [64, 128]"` works too.)

# %% tags=["parameters"]
# Parameters (papermill -p NAME VALUE overrides them).
output_dir: "Optional[str]" = None     # CSVs, figures and record; None: <repo>/output/lab
pes_list: list[int] = [2]
bs_list: list[int] = [64, 128]
h_list: list[int] = [8192, 16384]      # elements per row: 32 and 64 KiB rows of int32
topk_list: list[int] = [2]
expert_per_pe_list: list[int] = [2]
routings: list[str] = ["uniform", "zipf:1.5", "hot-expert:0.5"]
settings: list[str] = ["reference"]    # kernel settings groups: reference, segment, c<N>, segment-c<N>
dtype: str = "int32_t"                 # int32_t | float16_t | bfloat16_t
warmup: int = 1                        # launches before profiling, per run
loops: int = 5                         # profiled launches per run (the time is their mean; why 5: above)
repeats: int = 3                       # runs of both variants per case: the spread of the times
target: str = "cpu"                    # cpu (twin) | npu
min_sdma_bytes: int = 2 * 1024 * 1024  # SDMA floor, bytes (the real rule: 2 MiB)
prof_pe: str = "all"                   # profiled PE, or "all" (the slowest PE counts)
seed: int = 42
csv_name: str = "sweep.csv"
model: str = "a2"                      # the machine the modelled section prices the cases on (a2, a3)
model_pes: int = 8                     # also model the same grid at this many PEs (0: only the cases above)
cluster: "Optional[str]" = None        # None: here; local, local:N or tcp://HOST:PORT: cases as dask tasks (docs/lab.md)
kernel_source: "Optional[str]" = None  # your kernel's folder (docs/own-kernel.md): run beside the lab's, one speed-up table

# %%
# Parameters given as text (papermill -r, -p strings, YAML) become their declared types, or stop here.
from combine_lab.lab.records import check_parameters

parameters = check_parameters(globals())

# %%
import os

from IPython.display import display

from combine_lab.lab import plots, records, sweep
from combine_lab.model import load_model
from combine_lab.results import rows, tables

out = records.output_dir(output_dir)
prof = prof_pe if prof_pe == "all" else int(prof_pe)
groups = sweep.check_settings(settings, target)  # a bad label stops here, before anything is built or run
print(f"{os.cpu_count()} CPUs here; {rows.SPEEDUP}")

# %% [markdown]
# ## Case: the grid, and which cases send anything by SDMA
#
# Every combination is validated before the first run; invalid ones (e.g. `topk` above the
# number of experts for a distinct routing) are listed and skipped. The planner then says,
# before anything runs, what share of each case's payload the doubleplane run will send by SDMA.
#
# The floor stays at the real rule's 2 MiB: the default rows (32-64 KiB) make segments of a
# few MiB, so the rule has something to choose. With tiny shapes (rows of a few hundred
# bytes) no segment reaches 2 MiB and every case would read 0 % below; to watch the rule
# there anyway, lower the floor (`-p min_sdma_bytes 65536`), knowing that on an NPU segments
# that small would cost more to set up on the copy engine than they save.

# %%
grid = sweep.make_grid(pes_list, bs_list, h_list, topk_list, expert_per_pe_list, routings, dtype=dtype,
                       seed=int(seed), skip_invalid=True)
print(f"{len(grid)} cases x 2 variants x {len(groups)} settings ({', '.join(groups)}) x {int(repeats)} repeats on "
      f"{target}, SDMA floor {int(min_sdma_bytes):,} B")
for params, why in grid.skipped:
    print("skipped", params, "-", why)
planned = sweep.planned_shares(grid, int(min_sdma_bytes))
with_sdma = int((planned["sdma_share"] > 0).sum())
display(planned.assign(**{"SDMA share (%)": (100 * planned["sdma_share"]).round(1)}).drop(columns="sdma_share"))
print(f"{with_sdma} of {len(planned)} cases send by SDMA; the other {len(planned) - with_sdma} send identical "
      "bytes with both variants (their speed-up is noise)")
if with_sdma == 0:
    print("WARNING: no case sends anything by SDMA: this sweep cannot tell the variants apart. "
          "Use larger bs or h, a skewed routing, or a lower min_sdma_bytes.")

# %% [markdown]
# ## Plan, run and check
#
# `run_sweep` writes each case's files once, then runs both variants under each settings group
# `repeats` times on them (alternating which goes first), the planner's plan travelling with every
# result; it keeps one row per (case, settings group, repeat, variant, profiled PE, metric).

# %%
csv_path = out / csv_name
tidy = sweep.run_sweep(grid, warmup=int(warmup), loops=int(loops), repeats=int(repeats), target=target,
                       min_sdma_bytes=int(min_sdma_bytes), prof_pe=prof, csv_path=csv_path, settings=groups,
                       cluster=cluster, kernel_source=kernel_source)
print(f"{len(tidy)} rows -> {csv_path}")
display(tidy.head(4))

# %% [markdown]
# Correctness before time: every run must have matched golden on every PE and carried
# exactly the planned bytes on each plane.

# %%
failed = tidy[(tidy["check"] != "PASS") | ~tidy["counters_ok"].astype(bool)]
print(f"{len(tidy) - len(failed)} of {len(tidy)} rows passed the x_out check and the counter comparison")
if len(failed):
    display(failed[["CaseId", "routing", "settings", "repeat", "variant", "Metric", "check", "counters_ok", "reason"]])
assert failed.empty, f"{len(failed)} rows failed the x_out check or the counter comparison"

# %% [markdown]
# ## Summary: times with their spread
#
# One row per case and settings group: both variants' comm_only times (CoreMaxTime of the slowest profiled PE,
# us) as median [min-max] over the repeats, the speed-up of the same repeat's pair likewise,
# and a verdict: `no SDMA: identical traffic`, `faster` or `slower` (every repeat agrees), or
# `within noise` (the spread covers 1).
# The full summary (full_op too) goes to a CSV beside the tidy one.

# %%
summary = tables.summarize(tidy)
summary_path = out / (csv_path.stem + "_summary.csv")
summary.to_csv(summary_path, index=False)
display(tables.readable(summary))
print("summary ->", summary_path)

# %% [markdown]
# ### Every kernel's speed-up, in one table
#
# Each kernel against its same-settings classic (baseline time / kernel time of the same repeat, above 1: the
# kernel faster): the lab's doubleplane of each settings group and, with `kernel_source`, your kernel on the
# same case files (docs/own-kernel.md). `pairs.pair_speedups(tidy, "doubleplane")` measures every kernel
# against the lab's doubleplane instead (docs/cli.md#9-repeats-spread-and-verdicts).

# %%
from combine_lab.results import pairs

display(pairs.pair_table(pairs.pair_speedups(tidy)))

# %% [markdown]
# ## Plot
#
# Left: the comm_only speed-up over bs × h per routing (blue: doubleplane faster, red: slower;
# hatched grey: no SDMA traffic, nothing to compare). Right: the speed-up against the SDMA
# share, with min-max bars (one marker per settings group); the grey band spans the no-SDMA cases, i.e. how far two runs of
# identical traffic drift apart on this machine. A verdict "faster" or "slower" says every repeat of its case agreed;
# a point inside the band still differs no more than identical traffic does between cases here: no result beyond
# this machine's noise (the line below the plots counts them).

# %%
plots.show(plots.sweep_heatmaps(summary, where=f"measured on {target}" + (" (the twin)" if target == "cpu" else "")),
           out, "03_comm_only_speedup_heatmaps")
plots.show(plots.sdma_share_plot(summary), out, "03_sdma_share_vs_speedup")
if len(groups) > 1:  # what each setting changes on the same case files
    plots.show(plots.settings_times(summary, where=f"measured on {target}"), out, "03_comm_only_per_settings")
band, inside = tables.noise_band(summary), tables.inside_noise(summary)
judged = tables.judged(summary)
print("no case without SDMA traffic: no noise band to judge the others by" if band is None else
      f"noise band (identical traffic): {band[0]:.2f}-{band[1]:.2f}; {len(inside)} of the {len(judged)} verdicts "
      "'faster'/'slower' lie inside it: " + (", ".join(f"{r.case_id} {r.routing} {r.comm_only_speedup:.2f}"
                                                      for r in inside.itertuples()) or "none"))

# %% [markdown]
# ### Where doubleplane loses (comm_only speed-up below 1)
#
# Only cases with SDMA traffic; the verdict says whether every repeat agreed.

# %%
lost = tables.losses(summary)
display(tables.readable(lost))

# %% [markdown]
# **Reading the result.** On the CPU twin both planes are threads on this machine's CPUs:
# the "copy engine" competes with the AI-core threads for the same few cores, so doubleplane
# is not expected to be faster here, and with few CPUs it usually is not. What the twin does
# show is that both variants produce the same x_out with exactly the planned bytes on each
# plane, how much the rule moves to SDMA for each shape and routing, and how noisy the
# measurement is. The speed-up SDMA was designed for (a separate engine beside the cores)
# can only be measured on an NPU: rerun this notebook there with `-p target npu`.

# %% [markdown]
# ## Modelled NPU time for the same cases
#
# The same grid priced on the model instead of run (`sweep.model_grid`): classic and doubleplane
# at the same floor, from the operations the kernel issues, in milliseconds per case and without
# launching anything. One deterministic value per case (no repeats): modelled, not measured. Its
# uncertainty is the model's unknowns: `comm_only_speedup_lo` and `_hi` are the speed-up's range
# when every assumed parameter moves over its range (how many SDMA engines run at once, 1 to 48,
# first), and the outcome line says how many cases win or lose throughout that range and how many
# turn on it (a win needs more than the model's resolution, 5 %). Same axes as the twin's heatmaps
# above; then the same grid at `model_pes` PEs, where a PE's engines serve many cores. The
# reference's settings are always priced, and each other settings group its SoC can run
# (`sweep.model_settings`; the what-if of one SDMA call per segment is the reference's only); a
# group it cannot run says "not modelled for <label> yet" and why.

# %%
machine = load_model(model)
print(machine.caption())
modelled, not_modelled = sweep.model_settings(grid, machine, int(min_sdma_bytes), groups)
for why in not_modelled.values():
    print(why)
modelled_path = out / (csv_path.stem + f"_modelled_{machine.name}.csv")
modelled.to_csv(modelled_path, index=False)
display(modelled[["case_id", "routing", "settings", "sdma_share", "comm_only_classic_us", "comm_only_doubleplane_us",
                  "comm_only_speedup", "comm_only_speedup_lo", "comm_only_speedup_hi", "full_op_speedup"]].round(3))
for group, m in modelled.groupby("settings", sort=False):  # ties are called ties
    print(f"settings {group}:", sweep.modelled_outcomes(m, machine.name))
plots.show(plots.sweep_heatmaps(modelled, where=machine.caption()), out, "03_comm_only_speedup_heatmaps_modelled")
grids = {"cases": (grid, modelled)}
if int(model_pes) > 0:
    grid_n = sweep.make_grid([int(model_pes)], bs_list, h_list, topk_list, expert_per_pe_list, routings, dtype=dtype,
                             seed=int(seed), skip_invalid=True)
    modelled_n, _ = sweep.model_settings(grid_n, machine, int(min_sdma_bytes), groups)
    modelled_n.to_csv(out / (csv_path.stem + f"_modelled_{machine.name}_pes{int(model_pes)}.csv"), index=False)
    plots.show(plots.sweep_heatmaps(modelled_n, where=f"{machine.caption()}; pes {int(model_pes)}"), out,
               f"03_comm_only_speedup_heatmaps_modelled_pes{int(model_pes)}")
    grids[f"pes {int(model_pes)}"] = (grid_n, modelled_n)
print("modelled CSV ->", modelled_path)

# %% [markdown]
# ### The speed-up against SDMA engines
#
# The unknown the model ranks first, for the case of the last grid above that sends the most by
# SDMA: the modelled speed-up with 1 to 48 SDMA engines running at once, at this sweep's floor
# and at the default 2 MiB (`combine_lab.lab.unknowns_plot`; `combine-lab suggest --out DIR`
# draws the same for one case). Where the line crosses the band around 1 is how many engines the
# hardware must run at once for doubleplane to pay. Modelled, not measured.

# %%
from combine_lab.case.case import make_case
from combine_lab.lab.unknowns_plot import engines_plot
from combine_lab.model.stream import case_rows
from combine_lab.model.unknowns import engines_curve

g_last, m_last = list(grids.values())[-1]
ref = m_last[m_last["settings"] == "reference"].reset_index(drop=True)
if len(ref):
    top = ref.loc[ref["sdma_share"].idxmax()]
    spec = next(sp for sp in g_last.specs if sp.case_id == top["case_id"] and sp.routing == top["routing"])
    rows_ = case_rows(make_case(spec), machine.soc)
    floors = dict.fromkeys([int(min_sdma_bytes), 2 << 20])
    curves = {f"doubleplane at floor {f:,} B" + (" (this sweep's)" if f == int(min_sdma_bytes) else " (the default)"):
              engines_curve(rows_, machine, f) for f in floors}
    plots.show(engines_plot(curves, f"{spec.case_id} ({spec.routing})", spec.pes, machine.caption()), out,
               "03_speedup_vs_sdma_engines")

# %% [markdown]
# ### What-if: one SDMA call per segment
#
# The reference kernel issues one SDMA call per row (one descriptor each). Laid out by segment, a
# window lets one call (one descriptor per MiB) carry a whole segment: the `segment` setting, which
# the twin runs above. The model prices it here as a what-if on the reference's stream: how much
# modelled comm_only it would save, per case, against one call per row. A case without SDMA
# traffic saves nothing.

# %%
for label, (_g, m) in grids.items():
    m = m[m["settings"] == "reference"]  # the what-if is against the reference's one call per row
    display(m[["case_id", "routing", "sdma_share", "comm_only_doubleplane_us", "segment_sdma_comm_only_us",
               "what_if_saving_us", "what_if_saving_pct"]].round(3))
    name = "03_what_if_segment_sdma" + ("" if label == "cases" else "_" + label.replace(" ", ""))
    plots.show(plots.what_if_saving(m, machine.caption() + ("" if label == "cases" else f"; {label}")), out, name)
    print(sweep.what_if_text(m, label, machine.name))

# %% [markdown]
# **Reading the modelled figures.** They are the model's answer for the named machine, with the
# parameters it had to assume listed in every title: a question to put to hardware, not a
# measurement. Where they and the twin disagree, believe neither blindly: the twin's copy engine
# is a CPU thread, and the model has not been validated on hardware (docs/timing-model.md#7-calibration:
# how a team with NPUs calibrates it).

# %%
record = {"csv": csv_path, "summary_csv": summary_path, "cases": len(grid), "rows": len(tidy),
          "skipped": len(grid.skipped), "repeats": int(repeats), "cases_with_sdma": int((summary["sdma_share"] > 0).sum()),
          "all_pass": bool((tidy["check"] == "PASS").all()), "losses": len(lost),
          "routings": sorted(set(summary["routing"])), "speedup": rows.SPEEDUP, "settings": groups,
          "speedup_by_settings": {g: [round(float(v), 4) for v in summary.loc[summary["settings"] == g,
                                                                              "comm_only_speedup"]] for g in groups},
          "not_modelled": not_modelled,
          "modelled": {label: {"model": machine.name, "caption": machine.caption(),
                               "cases": int((m["settings"] == "reference").sum()),
                               "settings": list(dict.fromkeys(m["settings"])),
                               "speedup": [round(float(v), 4) for v in m.loc[m["settings"] == "reference",
                                                                             "comm_only_speedup"]],
                               "what_if_saving_us": [round(float(v), 3) for v in m.loc[m["settings"] == "reference",
                                                                                       "what_if_saving_us"]]}
                       for label, (_g, m) in grids.items()},
          "modelled_csv": modelled_path}
print("record:", records.write_record(out, "03_sweep", record))
