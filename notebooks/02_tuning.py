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
# # 02 · Interactive tuning
#
# Set a case with the controls and watch the plan change: the **segment map** of every PE
# (the expert owner, which sends each segment back to its src_rank: local_expert × src_rank,
# colour = bytes, row counts as text, SDMA segments outlined in red),
# the **bytes each plane would carry** and the **remote average** each segment must beat.
# Changing a control runs nothing: it draws the routing (never the activations x) and replans.
#
# **Run** builds the target if needed, runs classic (MTE only) and doubleplane on the same case
# files, checks x_out on every PE, compares the twin's per-plane counters with the plan, and
# plots comm_only and full_op per PE. Runs accumulate in the table and history plot below it.
# A bad value (say `topk` larger than the number of experts with a distinct routing) shows a
# message and launches nothing.
#
# Same arc as every notebook: **case → plan → run → check → plot**. The app's logic lives in
# `combine_lab.lab.app.TuningApp`; this notebook only shows it. The target selector offers what
# `combine_lab.run.capabilities.detect().targets()` says can run here.

# %% tags=["parameters"]
# Parameters: the values the app starts with (papermill can override them).
output_dir = None          # figures and record; None: <repo>/output/lab
pes = 4
bs = 128
h = 8192                   # elements per row: 32 KiB rows of int32
topk = 2
expert_per_pe = 2
dtype = "int32_t"
routing_model = "zipf"     # uniform | zipf | hot-expert | hot-rank | deepseek | trace
skew = 1.2                 # S for zipf, F for hot-expert / hot-rank
min_sdma_bytes = 2 * 1024 * 1024
warmup = 1
loops = 3
target = "cpu"

# %%
from IPython.display import display

from combine_lab import make_case, plan
from combine_lab.lab import plots, records
from combine_lab.lab.app import TuningApp
from combine_lab.run.capabilities import detect

out = records.output_dir(output_dir)
print("targets here:", detect().targets())

# %% [markdown]
# ## The app
#
# In JupyterLab, change the controls and press **Run**. (Run headless, the cells after this
# one drive the same app from code.)

# %%
app = TuningApp(pes=pes, bs=bs, h=h, topk=topk, expert_per_pe=expert_per_pe, dtype=dtype,
                routing_model=routing_model, skew=skew, min_sdma_bytes=min_sdma_bytes, warmup=warmup,
                loops=loops, target=target)
app

# %% [markdown]
# ## The same app, driven from code
#
# **Case and plan.** The plan shown is the planner's (combine-facts section 4): the SDMA
# segments the app lists are exactly `plan(make_case(spec)).sdma_segments(pe)` for each PE.

# %%
print(app.spec, "\nplanned in", f"{app.plan_seconds * 1e3:.0f} ms")
reference = plan(make_case(app.spec), "doubleplane", min_sdma_bytes=min_sdma_bytes)
for pe in range(app.spec.pes):
    listed = app.sdma_table.loc[app.sdma_table["pe"] == pe, "segment"].tolist()
    assert listed == reference.sdma_segments(pe).tolist()
display(app.sdma_table)

# %% [markdown]
# Doubling `h` doubles every segment's bytes but not the routing: the app reuses the drawn
# routing and only replans.

# %%
app.set(h=2 * h)
print(f"h = {2 * h}: {len(app.sdma_table)} SDMA segments, replanned in {app.plan_seconds * 1e3:.0f} ms")
app.set(h=h)

# %% [markdown]
# **A bad value** shows a message and launches nothing:

# %%
app.set(topk=app.spec.moe_expert_num + 1)
print(app.message)
assert app.run() is None and app.plan is None
app.set(topk=topk)

# %% [markdown]
# **Run and check.** Two runs: the parameters as given, then the SDMA floor halved
# (more segments qualify). Each must pass the x_out check and match the plan's counters.

# %%
for floor in (min_sdma_bytes, min_sdma_bytes // 2):
    app.set(min_sdma_bytes=floor)
    runs = app.run()
    assert runs is not None, app.message
    assert all(r.ok for r in runs.values()), "a check or counter comparison failed"
display(app.history)

# %% [markdown]
# **Plot.** The figures the app shows, saved to the output folder.

# %%
app.save_figures(out, prefix="02_")
for name in ("segment_map", "plane_bytes", "compare", "history"):
    plots.show(app.figures[name])

# %%
record = {"runs": len(app.history), "checks": app.history["check"].tolist(),
          "counters_ok": [bool(v) for v in app.history["counters_ok"]],
          "sdma_segments": int(len(app.sdma_table)), "plan_ms": app.plan_seconds * 1e3}
print("record:", records.write_record(out, "02_tuning", record))
