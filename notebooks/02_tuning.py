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
# # 02 · Interactive tuning
#
# Set a case with the controls and watch the plan change: the **segment map** of every PE
# (the expert owner, which sends each segment back to its src_rank: local_expert × src_rank,
# colour = bytes, row counts as text, SDMA segments outlined in red),
# the **bytes each plane would carry** and the **remote average** each segment must beat.
# Changing a control runs nothing: it draws the routing (never the activations x) and replans,
# in milliseconds (the figures are drawn as SVG, sharp at any zoom: the same drawings this
# notebook shows below and saves as PNG).
#
# **Modelled NPU time** prices the current plan on a model of an Atlas A2 or A3 (the *model*
# selector): the slowest PE's `comm_only` with classic and at the current floor, and, for small
# cases at once or with **Suggest** for large ones, the curve over every floor where the plan
# changes, with the best floor starred; **Use it** sets the floor control to it. These times are
# modelled, not measured: the panel names the machine and the parameters it had to assume.
#
# **Run** builds the target if needed, runs classic (MTE only) and doubleplane on the same case
# files, checks x_out on every PE, compares the twin's per-plane counters with the plan, and
# plots comm_only and full_op per PE, `repeats` times with the two variants alternating. Runs
# accumulate in the table and history plot below it: the times are medians over the repeats
# (the slowest profiled PE's), the speed-up the median of each repeat's own classic /
# doubleplane with its min-max, and the verdict (faster, slower, within noise) the one the CLI's
# compare and 03_sweep give (combine_lab.results.tables.summarize).
# A bad value (say `topk` larger than the number of experts with a distinct routing) shows a
# message, with every problem of the inputs at once, and launches nothing.
#
# Same arc as every notebook: **case → plan → run → check → plot**. The app's logic lives in
# `combine_lab.lab.tuning.TuningState` (no widgets: `app.state`), which
# `combine_lab.lab.app.TuningApp` shows; this notebook only drives it. The target selector offers what
# `combine_lab.run.capabilities.detect().targets()` says can run here. For the app alone in a
# browser tab, without this notebook around it: `combine-lab app`.

# %% tags=["parameters"]
# Parameters: the values the app starts with (papermill can override them).
output_dir: "Optional[str]" = None  # figures and record; None: <repo>/output/lab
pes: int = 4
bs: int = 128
h: int = 8192                       # elements per row: 32 KiB rows of int32
topk: int = 2
expert_per_pe: int = 2
dtype: str = "int32_t"
routing_model: str = "zipf"         # uniform | zipf | hot-expert | hot-rank | deepseek | trace
skew: float = 1.2                   # S for zipf, F for hot-expert / hot-rank
min_sdma_bytes: int = 2 * 1024 * 1024
warmup: int = 1
loops: int = 3
repeats: int = 3                    # paired runs of both variants per Run: the spread of the times
target: str = "cpu"

# %%
# Parameters given as text (papermill -r, -p strings, YAML) become their declared types, or stop here.
from combine_lab.lab.records import check_parameters

parameters = check_parameters(globals())

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
# one drive the same app from code.) **No app below? Press Run All** (Run > Run All Cells): the
# notebook is saved without its outputs, as it is committed, so a reopened notebook shows the
# app again only once its cells run.

# %%
app = TuningApp(pes=pes, bs=bs, h=h, topk=topk, expert_per_pe=expert_per_pe, dtype=dtype,
                routing_model=routing_model, skew=skew, min_sdma_bytes=min_sdma_bytes, warmup=warmup,
                loops=loops, repeats=repeats, target=target)
app

# %% [markdown]
# ## The same app, driven from code
#
# **Case and plan.** The plan shown is the planner's (docs/decision-rule.md#1-the-rule): the SDMA
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
# **Modelled time and the suggested floor.** The same numbers the panel shows, from code: the
# model's comm_only at the current floor, the best floor over the whole curve, and the floor
# control set to it. Modelled on the machine the caption names, never measured.

# %%
print(app.modelled["caption"])
print(f"at floor {app.modelled['floor']:,} B: modelled comm_only classic {app.modelled['classic_us']:.1f} us, "
      f"doubleplane {app.modelled['doubleplane_us']:.1f} us (modelled)")
suggestion = app.suggest()
choice = app.state.floor_choice()  # the interval of floors that reach the best, or a tie with never SDMA
print(choice.text(), "(modelled)")
best_floor = app.use_suggestion()
print(f"Use it sets min_sdma_bytes = {best_floor:,} B: modelled comm_only {app.modelled['doubleplane_us']:.1f} us "
      f"({app.modelled['speedup']:.3f} x classic, modelled)")
display(suggestion.curve)
app.set(min_sdma_bytes=min_sdma_bytes)

# %% [markdown]
# **Bad values** show one message with every problem, and launch nothing; the values stay as
# given (never clamped), each problem named in `app.state.problems`:

# %%
app.set(topk=app.spec.moe_expert_num + 1, loops=0)
print(app.message)
assert app.run() is None and app.plan is None and [p.name for p in app.state.problems] == ["loops", "topk"]
app.set(topk=topk, loops=loops)

# %% [markdown]
# **Run and check.** Two runs: the SDMA floor halved (more segments qualify), then the
# parameters as given, so that the app above is left at the parameters' floor with its Run
# current. Each must pass the x_out check and match the plan's counters.

# %%
for floor in (min_sdma_bytes // 2, min_sdma_bytes):
    app.set(min_sdma_bytes=floor)
    runs = app.run()  # the Run goes on a thread of its own; run() waits for it
    assert runs is not None, app.message
    assert all(r.ok for r in runs.values()), "a check or counter comparison failed"
display(app.history)

# %% [markdown]
# **Plot.** The figures the app shows (the same drawings), saved to the output folder as PNG.

# %%
app.save_figures(out, prefix="02_")
for name in ("segment_map", "plane_bytes", "modelled", "compare", "history"):
    plots.show(app.figures[name])

# %%
record = {"runs": len(app.history), "checks": app.history["check"].tolist(),
          "counters_ok": [bool(v) for v in app.history["counters_ok"]],
          "repeats": app.history["repeats"].tolist(), "verdicts": app.history["comm_only_verdict"].tolist(),
          "speedup_spread": app.history[["comm_only_speedup_lo", "comm_only_speedup", "comm_only_speedup_hi"]]
          .to_numpy().tolist(),
          "sdma_segments": int(len(app.sdma_table)), "plan_ms": app.plan_seconds * 1e3,
          "modelled": {"caption": app.modelled["caption"], "suggested_floor": best_floor,
                       "floor_interval": [choice.lo, choice.hi], "tie_with_never_sdma": choice.never,
                       "floors": len(suggestion.curve)}}
print("record:", records.write_record(out, "02_tuning", record))
