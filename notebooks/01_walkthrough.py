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
# # 01 · The dual-plane combine, from one tiny case
#
# **Who this is for:** a new team member. Read it top to bottom (about 45 minutes with the
# exercises) and you will be able to explain the design: what the combine inputs look like,
# where every row goes, which rows the copy engine (SDMA) takes and why the status flags
# always go by MTE, after their payload.
#
# **The combine.** In expert parallelism each of `pes` ranks (PEs) owns `bs` tokens and
# `expert_per_pe` experts; every token was sent to `topk` experts by *dispatch*. *Combine*
# sends the expert outputs back to the token's PE and reduces them:
#
# $$x\_out[t,:] = \sum_{k\ \text{valid}} expert\_out[t,k,:] \cdot expert\_scales[t,k]$$
#
# accumulated in float32 and cast once to the output dtype (combine-facts section 1). The
# reference data uses identity experts, so `expert_out[t, k] == x[t]`.
#
# Every notebook of the lab follows the same arc: **case → plan → run → check → plot**.
# Everything runs on the CPU twin (PEs are processes, AI cores are threads, SDMA is a
# copy-engine thread), so it works on any Linux machine. All logic lives in the
# `combine_lab` package; the cells only call it.
#
# **Exercises.** Six exercises ask you to work something out before the notebook shows it.
# Before you start, set `reveal_answers = False` in the parameters cell below; then write
# your answer in each `answer_N = None` and run the cell: a check says whether it holds,
# with a hint (never the answer) if not. With `reveal_answers = True`, the default so that
# the notebook runs headless (`combine-lab notebooks`, papermill, the tests), each cell
# takes our answer instead (`exercises.OUR_ANSWERS`, written for seed 42).

# %% tags=["parameters"]
# Parameters (papermill can override them: `papermill ... -p loops 5`).
output_dir = None          # where figures and the record go; None: <repo>/output/lab
reveal_answers = True      # True: the exercises take our answers (headless runs); False: work them yourself
seed = 42                  # case seed (our exercise answers hold for seed 42)
warmup = 1                 # launches before profiling
loops = 3                  # profiled launches
skew_pes = 2               # the skewed case of section 7 (exercise 6's answer holds for
skew_bs = 64               #   pes 2, bs 64, hot-expert:0.5 and any h)
skew_h = 16384             # elements per row: 64 KiB rows of int32
skew_routing = "hot-expert:0.5"
skew_repeats = 5           # runs of both variants for the times with their spread

# %%
import os

import pandas as pd
from IPython.display import display

from combine_lab import CaseSpec, compare, make_case, plan
from combine_lab.lab import exercises, plots, records, sweep
from combine_lab.planning import explain
from combine_lab.planning.planner import DEFAULT_MIN_SDMA_BYTES
from combine_lab.results import tables

out = records.output_dir(output_dir)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)
record = {"seed": seed}
answers = []
print("figures and record go to", out)
print("exercises:", "our answers filled in (reveal_answers = True)" if reveal_answers else "yours to fill in")

# %% [markdown]
# ## 1 · Case: two PEs, four tokens each
#
# `CaseSpec` holds the parameters and validates them (a bad value raises `SpecError` naming
# the field). `make_case` draws the routing with the reference recipe (combine-facts
# section 3): `uniform` routing, seed 42. With `pes=2` and `expert_per_pe=2` there are
# `E = 4` experts: experts 0 and 1 live on PE 0, experts 2 and 3 on PE 1.

# %%
spec = CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, dtype="int32_t", seed=seed, routing="uniform")
case = make_case(spec)
print(spec.case_id, "| E =", spec.moe_expert_num, "| row bytes =", spec.row_bytes)
print("expert_ids [pes, bs, topk]:")
print(case.expert_ids)

# %% [markdown]
# ### The routing, one row per (source PE, token, choice)
#
# `dest_pe = expert_id // expert_per_pe` is the PE that ran the expert; `local_expert =
# expert_id % expert_per_pe` is the expert's index there. The uniform recipe lets a token
# pick the same expert twice (look at PE 1's token 3): both choices are separate rows.
# A choice with an id outside `[0, E)` would be *masked*: sent nowhere, never waited for.

# %%
display(explain.routing_table(case))

# %% [markdown]
# ## 2 · The dispatch layout on a destination PE
#
# Dispatch left, on every destination PE `d`, the rows it received, ordered by
# `local_expert`, then `src_rank`, then `token_id`, then `topk_id` (combine-facts section 2).
# In combine this PE is the *sender*: it ran those experts and sends each row back to its
# `src_rank` (the figures title it "PE d (expert owner, sends)").
# A **segment** is the run of rows of one `(local_expert, src_rank)`; its index is
# `segment = local_expert * pes + src_rank`. Three arrays describe them:
#
# | array | shape | meaning |
# |---|---|---|
# | `expand_x` | `[pes*bs*topk, h]` | the expert outputs, one row per received (token, choice); zero padding after the last |
# | `assist_info_for_combine` | `[pes*bs*topk, 3]` int32 | per row: `src_rank, token_id, topk_id` |
# | `ep_recv_count` | `[expert_per_pe*pes]` int32 | **cumulative** row counts: segment `s` spans rows `[count[s-1], count[s])` |
#
# Here is PE 0's `ep_recv_count` turned into segment bounds:

# %%
display(explain.segment_table(case, 0))
inputs = case.rank_inputs(0)  # the arrays as the kernel reads them (combine-facts section 2)
n0 = int(inputs.ep_recv_count[-1])
print("ep_recv_count:", inputs.ep_recv_count.tolist(), "->", n0, "used rows of", inputs.expand_x.shape[0])
print("assist_info_for_combine[:n]:", inputs.assist_info_for_combine[:n0].tolist())

# %% [markdown]
# And row by row: each `expand_x` row is `x[src_rank, token_id]` (identity experts; `x_head`
# shows its first four elements), tagged by its three `assist_info_for_combine` fields.

# %%
display(explain.dispatch_table(case, 0, values=4)[["row", "segment", "local_expert", "expert_id", "src_rank",
                                                  "token_id", "topk_id", "x_head"]])

# %% [markdown]
# **Exercise 1.** How many rows does PE 0 hold for `local_expert = 1` from `src_rank = 0`?
# Work it out from `ep_recv_count` alone, then put your number in `answer_1` and run the cell.

# %%
answer_1 = None  # <- your answer: an int
if reveal_answers:
    answer_1 = exercises.OUR_ANSWERS[1]
answers.append(exercises.check_segment_rows(case, pe=0, local_expert=1, src_rank=0, answer=answer_1))
answers[-1]

# %% [markdown]
# **Exercise 2.** Row 2 of PE 1's `expand_x`: which `(src_rank, token_id, topk_id)` produced it?

# %%
display(explain.dispatch_table(case, 1)[["row", "segment", "src_rank", "token_id", "topk_id"]])
answer_2 = None  # <- your answer: (src_rank, token_id, topk_id)
if reveal_answers:
    answer_2 = exercises.OUR_ANSWERS[2]
answers.append(exercises.check_row_source(case, pe=1, row=2, answer=answer_2))
answers[-1]

# %% [markdown]
# ## 3 · Where each row lands: the source PE's window
#
# Combine sends row `(src_rank, token_id, topk_id)` back to PE `src_rank`, into a symmetric
# window every PE allocates (combine-facts section 5):
#
# * `bs*topk` **payload slots**, one per (token, choice): slot `token_id*topk + topk_id`, at byte
#   `slot * stride` with `stride = align_up(h*sizeof(T), 32)`;
# * then `bs*topk` **status slots** of 32 bytes (8 int32; ready value 1), at
#   `status_offset + slot*32`.
#
# So the slot does not depend on which PE sends the row nor on its position in `expand_x`:
# each (token, choice) has exactly one place to land, and the receiver knows which flags to wait for.

# %%
geometry = explain.window_geometry(spec)
display(pd.Series(geometry, name="bytes (slots: count)").to_frame())
display(explain.dispatch_table(case, 0)[["row", "src_rank", "token_id", "topk_id", "window_slot", "payload_offset",
                                         "status_offset"]])

# %% [markdown]
# **Exercise 3.** Row 6 of PE 0: into which slot of its source PE's window does it land?

# %%
answer_3 = None  # <- your answer: a slot number
if reveal_answers:
    answer_3 = exercises.OUR_ANSWERS[3]
answers.append(exercises.check_window_slot(case, pe=0, row=6, answer=answer_3))
answers[-1]

# %% [markdown]
# ## 4 · Plan: the decision rule on real numbers
#
# Each destination PE decides, per segment, which plane carries it (combine-facts section 4):
#
# ```
# segment_bytes = token_count * h * sizeof(T)
# threshold_num = (rows of all remote segments on this PE) * h * sizeof(T)
# threshold_den = max(pes - 1, 1) * expert_per_pe
# use_sdma = src_rank != my_pe and token_count > 0
#            and segment_bytes >= 2 MiB
#            and segment_bytes * threshold_den > threshold_num     # above the remote average, in integers
# ```
#
# Local segments never go by SDMA (they stay in the PE's own memory), small ones neither (the
# copy engine's set-up cost dominates), and only segments *strictly above the PE's average
# remote segment* do: those are the ones that would keep one core busy far longer than the others.
#
# With the real floor of 2 MiB, our 32-byte rows never qualify:

# %%
d_real = explain.decision_table(case, 0, DEFAULT_MIN_SDMA_BYTES)
display(d_real)
print("threshold_num =", d_real.attrs["threshold_num"], "B, threshold_den =", d_real.attrs["threshold_den"],
      "-> remote average", d_real.attrs["remote_avg_bytes"], "B")

# %% [markdown]
# To watch the second half of the rule on these numbers, lower the floor to 0 bytes
# (`min_sdma_bytes` is a parameter of the planner and of the kernel). With seed 42, PE 0 has two remote
# segments, 1 (64 B) and 3 (96 B): `threshold_num = 5 rows * 32 B = 160`, `threshold_den = 1 * 2 = 2`,
# so the average is 80 B. Segment 3 (96 B, `96*2 = 192 > 160`) goes by SDMA; segment 1
# (`128 > 160` is false) stays on MTE; segments 0 and 2 are local.

# %%
floor = 0
p_tiny = plan(case, "doubleplane", min_sdma_bytes=floor)
d0 = explain.decision_table(case, 0, floor)
display(d0)
# The table above is the rule written out segment by segment; the planner computes it vectorised.
assert list(d0["plane"]) == list(p_tiny.segments.query("pe == 0")["plane"])
plots.show(plots.segment_map(p_tiny), out, "01_segment_map_tiny")

# %% [markdown]
# **Exercise 4.** With the floor at 0 bytes, which segments of **PE 1** go by SDMA? (A list of
# segment indices.) Use `explain.segment_table(case, 1)` if you like; the rule is above.

# %%
answer_4 = None  # <- your answer: a list of segment indices
if reveal_answers:
    answer_4 = exercises.OUR_ANSWERS[4]
answers.append(exercises.check_sdma_segments(case, pe=1, min_sdma_bytes=floor, answer=answer_4))
answers[-1]

# %% [markdown]
# ## 5 · The protocol: why status goes by MTE, after the payload
#
# Each destination PE launches one AI core per source rank (`block_dim = pes`); core `c`
# serves the segments whose `src_rank` is `c`, sending them back to PE `c`. Stage 1 of a core:
#
# 1. issue **SDMA** puts for every row of its SDMA segments (non-blocking; the copy engine works
#    while the core goes on), with an SDMA quiet after every 256 outstanding issues;
# 2. for each MTE segment: **MTE** puts of its rows, **quiet** (they have landed), then its status flags;
# 3. **SDMA quiet** (every SDMA row has landed), then the status flags of the SDMA rows, **by MTE**, and quiet.
#
# Stage 2, on every PE: for each token, wait until the flag of every valid slot reads 1, reduce
# with `expert_scales` in float32, write `x_out`, reset the flags.
#
# A flag promises "your payload is in your window". MTE and SDMA are different engines with
# no ordering between them: if a flag went out before its payload's engine had completed (or
# went by SDMA, queued behind or beside other copies), the receiver could sum a row that has
# not arrived. So every flag is written by the core with MTE, only after a quiet of the engine
# that carried its payload. Here is core 1 of PE 0 (floor 0, so segment 3 goes by SDMA):

# %%
display(explain.core_program(case, p_tiny, pe=0, core=1))

# %% [markdown]
# **Exercise 5.** Why are status flags written by MTE, and only after their payload is
# complete? Pick a letter.

# %%
for letter, text in exercises.STATUS_CHOICES.items():
    print(f"({letter}) {text}")
answer_5 = None  # <- your answer: a letter
if reveal_answers:
    answer_5 = exercises.OUR_ANSWERS[5]
answers.append(exercises.check_status_order(answer_5))
answers[-1]

# %% [markdown]
# ## 6 · Run: classic and doubleplane on the twin, x_out checked
#
# `compare` writes the case files (the reference format, combine-facts section 3), builds the
# twin if needed, launches one process per PE for each variant, reads `x_out` back and checks
# it against golden (int32: bit-exact), and reads the twin's counters: per PE and plane, the
# payload puts and bytes, quiets and status writes. A run is `ok` when x_out matches **and** the
# counters carry exactly what the plan says. `prof_pe="all"` profiles every PE in turn.

# %%
runs = compare(case, warmup=warmup, loops=loops, min_sdma_bytes=floor, prof_pe="all")
for variant, res in runs.items():
    print(f"{variant:12s} x_out {'PASS' if res.check_ok else 'FAIL'} on every PE | counters = plan: "
          f"{not res.counter_mismatches()} | comm_only {res.time_us('comm_only'):9.1f} us | "
          f"full_op {res.time_us('full_op'):9.1f} us")
assert all(r.ok for r in runs.values()), "a check or counter comparison failed"
dual = runs["doubleplane"]
display(dual.plane_bytes())

# %% [markdown]
# Every row got exactly one status write, and the counters record who wrote them: all by MTE.

# %%
c = dual.counters.set_index(["pe", "plane"])["status_writes"].unstack()
display(c)
assert (c["SDMA"] == 0).all()
print("x_out of PE 0:\n", dual.x_out[0], "\ngolden of PE 0:\n", case.golden(0))
record["tiny"] = {v: {"check_ok": r.check_ok, "counters_ok": not r.counter_mismatches(),
                      "sdma_bytes": int(r.plane_bytes()["sdma_bytes"].sum())} for v, r in runs.items()}

# %% [markdown]
# ## 7 · A skewed case: SDMA takes bytes off the busiest remote core
#
# Real routings are skewed: some experts are much more popular than others. With
# `hot-expert:0.5`, half of all choices go to one expert, so the PE that owns it holds one
# large segment from every source rank. Now the rows are 64 KiB and the real 2 MiB floor
# applies. (The panels are titled by the PE that ran the experts: in combine it *sends*
# each segment back to its `src_rank`.)

# %%
spec2 = CaseSpec(pes=skew_pes, bs=skew_bs, h=skew_h, topk=2, expert_per_pe=2, routing=skew_routing, seed=seed)
case2 = make_case(spec2)
p2 = plan(case2)  # the real floor: 2 MiB
plots.show(plots.segment_map(p2), out, "01_segment_map_skewed")
plots.show(plots.plane_bytes_plot(p2), out, "01_plane_bytes_skewed")

# %% [markdown]
# Local rows stay in the PE's own memory; the cores that drive rows *across* PEs are the
# remote ones, and the slowest of them sets the end of stage 1. Core `c` of a PE serves the
# segments whose `src_rank` is `c` (section 5).
#
# **Exercise 6.** Core 0 of PE 1 sends rows back to PE 0. How many rows does it put by MTE
# *itself* with classic (MTE only), and with doubleplane? Read the row counts off the segment
# map (text = rows; SDMA segments outlined in red) and answer `(classic_rows, doubleplane_rows)`.

# %%
answer_6 = None  # <- your answer: (classic rows, doubleplane rows)
if reveal_answers:
    answer_6 = exercises.OUR_ANSWERS[6]
answers.append(exercises.check_core_rows(case2, pe=1, core=0, answer=answer_6))
answers[-1]

# %% [markdown]
# The same count for every remote core, in bytes: with doubleplane the large segments go to
# the copy engine, so the busiest remote core drives far fewer bytes by MTE itself.

# %%
load_mte = explain.core_load(plan(case2, "classic"))
load_dual = explain.core_load(p2)
busy = pd.DataFrame({
    "classic: MTE bytes": load_mte[load_mte["remote"]].groupby("pe")["mte_bytes"].max(),
    "doubleplane: MTE bytes": load_dual[load_dual["remote"]].groupby("pe")["mte_bytes"].max(),
    "doubleplane: SDMA bytes": load_dual[load_dual["remote"]].groupby("pe")["sdma_bytes"].sum(),
})
busy.index.name = "busiest remote core of PE"
display(busy)
worst = {"classic": int(busy.iloc[:, 0].max()), "doubleplane": int(busy.iloc[:, 1].max())}
print(f"busiest remote core over all PEs drives {worst['classic'] / 2**20:.2f} MiB by MTE with classic and "
      f"{worst['doubleplane'] / 2**20:.2f} MiB with doubleplane")
record["skewed_busiest_core_mte_bytes"] = worst

# %% [markdown]
# Now both variants on the twin: x_out checked on every PE, counters against the plan, and
# comm_only and full_op of this one run per profiled PE.

# %%
runs2 = compare(case2, warmup=warmup, loops=loops, prof_pe="all")
problems = [f"{v}: x_out FAIL" for v, r in runs2.items() if not r.check_ok]
problems += [f"{v}: {m}" for v, r in runs2.items() for m in r.counter_mismatches()]
assert not problems, "the skewed runs failed their checks: " + "; ".join(problems)
plots.show(plots.compare_per_pe(runs2), out, "01_compare_skewed")
record["skewed"] = {v: {"check_ok": r.check_ok, "counters_ok": not r.counter_mismatches(),
                        "comm_only_us": r.time_us("comm_only"), "sdma_bytes": int(r.plane_bytes()["sdma_bytes"].sum())}
                    for v, r in runs2.items()}

# %% [markdown]
# One run says little about time. Repeating both variants `skew_repeats` times gives each
# time with its spread: median [first-third quartile] of the slowest PE, and the speed-up
# classic / doubleplane of each repeat (above 1: doubleplane faster), with how many repeats agree.

# %%
spread = tables.summarize(sweep.run_sweep([spec2], warmup=warmup, loops=loops, repeats=int(skew_repeats),
                                          prof_pe="all", progress=False))
display(tables.readable(spread))
print(f"{os.cpu_count()} CPUs here run {skew_pes} PE processes, each with {skew_pes} AI-core threads and a "
      "copy-engine (SDMA) thread")
record["skewed_speedup"] = {k: spread[f"comm_only_{k}"].iloc[0] for k in ("speedup", "speedup_lo", "speedup_hi",
                                                                             "verdict")}

# %% [markdown]
# **What the twin shows, and what it does not.** It shows the plan at work: doubleplane
# produced the same x_out as classic, bit for bit, with exactly the planned bytes on each
# plane, and the busiest remote core drove far fewer bytes by MTE (the table above). It does **not** show
# a speed win, and you should not expect one: on the twin, the AI cores *and* the copy engine
# are CPU threads copying memory on this machine's few CPUs. Handing rows from a core thread
# to the SDMA thread adds no copy bandwidth, it adds one more thread competing for the same
# CPUs (and a quiet that waits for it), so doubleplane's comm_only is often *slower* here; the
# plot above shows what this run measured, once, without a spread. On an NPU the copy engine is separate hardware running beside the
# cores; whether taking these bytes off the busiest core pays off there can only be measured
# there (`03_sweep` with `target = "npu"`, many cases with their spread). Use `02_tuning` to
# explore shapes and routings.

# %%
for a in answers:
    print(a)
record["exercises"] = exercises.summary(answers)
record["reveal_answers"] = bool(reveal_answers)
print("record:", records.write_record(out, "01_walkthrough", record))
right = sum(bool(a) for a in answers)
if reveal_answers:  # our answers must hold: a headless run fails if the case or the checks drifted
    assert record["exercises"]["all_ok"], f"only {right} of {len(answers)} of our answers hold"
else:
    print(f"{right} of {len(answers)} exercises right")
