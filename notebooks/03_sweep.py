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
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Sweep: where does dual-plane win?
#
# Runs every case of a grid (pes × bs × h × topk × expert_per_pe × routing) for both variants,
# MTE-only (classic) and dual-plane, on the chosen target; checks x_out and the per-plane
# counters of every run; writes **one tidy CSV** (the perf columns of combine-facts section 8
# plus variant, routing, plane bytes and the check verdict); and draws the comm_only ratio
# dual / MTE-only over bs × h per routing, the speed-up against the SDMA byte share, and the
# cases where dual-plane loses.
#
# Run it headless with papermill, e.g.
#
#     papermill notebooks/03_sweep.ipynb out.ipynb -p bs_list "[8,16]" -p routings '["uniform","zipf:1.2"]'
#
# (`-p` values may be JSON lists or comma-separated; `-y "bs_list: [8, 16]"` works too.)

# %% tags=["parameters"]
# Parameters (papermill -p NAME VALUE overrides them).
output_dir = None                  # CSV, figures and record; None: <repo>/output/lab
pes_list = [2]
bs_list = [32, 64]
h_list = [8192, 16384]             # elements per row
topk_list = [2]
expert_per_pe_list = [2]
routings = ["uniform", "hot-expert:0.5", "zipf:1.5"]
dtype = "int32_t"                  # int32_t | float16_t
warmup = 1
loops = 3
target = "cpu"                     # cpu (twin) | npu
min_sdma_bytes = 2 * 1024 * 1024   # SDMA floor, bytes
prof_pe = 0                        # profiled PE, or "all"
seed = 42
csv_name = "sweep.csv"

# %%
from IPython.display import display

from combine_lab import labio, plots, sweep

out = labio.output_dir(output_dir)
prof = prof_pe if prof_pe == "all" else int(prof_pe)

# %% [markdown]
# ## Case: the grid
#
# Every combination is validated before the first run; invalid ones (e.g. `topk` above the
# number of experts for a distinct routing) are listed and skipped.

# %%
grid = sweep.make_grid(pes_list, bs_list, h_list, topk_list, expert_per_pe_list, routings, dtype=dtype,
                       seed=int(seed), skip_invalid=True)
print(f"{len(grid)} cases x 2 variants on {target}")
for params, why in grid.skipped:
    print("skipped", params, "-", why)

# %% [markdown]
# ## Plan, run and check
#
# `run_sweep` runs `runner.compare` on each case (the planner's plan travels with every
# result) and keeps one row per (case, variant, profiled PE, metric).

# %%
csv_path = out / csv_name
tidy = sweep.run_sweep(grid, warmup=int(warmup), loops=int(loops), target=target, min_sdma_bytes=int(min_sdma_bytes),
                       prof_pe=prof, csv_path=csv_path)
print(f"{len(tidy)} rows -> {csv_path}")
display(tidy.head(4))

# %% [markdown]
# Correctness before time: every run must have matched golden on every PE and carried
# exactly the planned bytes on each plane.

# %%
failed = tidy[(tidy["check"] != "PASS") | ~tidy["counters_ok"].astype(bool)]
print(f"{len(tidy) - len(failed)} of {len(tidy)} rows passed the x_out check and the counter comparison")
if len(failed):
    display(failed[["CaseId", "routing", "variant", "Metric", "check", "counters_ok", "error"]])
assert failed.empty, f"{len(failed)} rows failed the x_out check or the counter comparison"

# %% [markdown]
# ## Plot
#
# One row per case: both variants' times (CoreMaxTime, us), their ratio and the SDMA share.
# On the CPU twin both planes are threads on this machine's cores: the times show the protocol
# at work, not an NPU's speed.

# %%
summary = sweep.summarize(tidy)
display(summary)
plots.show(plots.sweep_heatmaps(summary), out, "03_comm_only_ratio_heatmaps")
plots.show(plots.sdma_share_plot(summary), out, "03_sdma_share_vs_speedup")

# %% [markdown]
# ### Where dual-plane loses (comm_only ratio above 1)

# %%
lost = sweep.losses(summary)
display(lost)

# %%
record = {"csv": csv_path, "cases": len(grid), "rows": len(tidy), "skipped": len(grid.skipped),
          "all_pass": bool((tidy["check"] == "PASS").all()), "losses": len(lost),
          "routings": sorted(set(summary["routing"]))}
print("record:", labio.write_record(out, "03_sweep", record))
