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
# # 01 · The dual-plane combine, from one tiny case
#
# **Who this is for:** a new team member. Read it top to bottom (about an hour with the
# exercises) and you will be able to explain the design: what the combine inputs look like,
# where every row goes, which rows the copy engine (SDMA) takes and why, why the status flags
# always go by MTE after their payload, what the kernel's two timers (`comm_only`, `full_op`)
# measure, what a masked slot does, where the SDMA floor's crossover comes from, and what two
# settings beyond the reference (one SDMA call per segment, more cores per source rank) change.
#
# **The combine.** In expert parallelism each of `pes` ranks (PEs) owns `bs` tokens and
# `expert_per_pe` experts; every token was sent to `topk` experts by *dispatch*. *Combine*
# sends the expert outputs back to the token's PE and reduces them:
#
# $$x\_out[t,:] = \sum_{k\ \text{valid}} expert\_out[t,k,:] \cdot expert\_scales[t,k]$$
#
# accumulated in float32 and cast once to the output dtype (docs/protocol.md#1-the-combine-problem). The
# reference data uses identity experts, so `expert_out[t, k] == x[t]`.
#
# Every notebook of the lab follows the same arc: **case → plan → run → check → plot**.
# Everything runs on the CPU twin (PEs are processes, AI cores are threads, SDMA is a
# copy-engine thread), so it works on any Linux machine. All logic lives in the
# `combine_lab` package; the cells only call it. Beside each step you see the kernel's own
# code, read from `kernels/combine_kernel.cpp` when the cell runs.
#
# The notebook is saved without its outputs: where the text says what a cell printed, run the
# cell (`combine-lab lab`), or read the walkthrough executed, outputs and figures included, with
# `combine-lab docs` (docs/lab.md#6-the-walkthrough-page).
#
# **Exercises.** Six exercises ask you to work something out before the notebook shows it.
# Write your answer in each `answer_N = None` and run the cell: a check says whether it holds,
# with a hint (never the answer) if not, and the table that holds the answer appears once
# yours is right. `reveal_answers` is False when you open the notebook; headless runs
# (`combine-lab notebooks`, the tests) set it True and take our answers
# (`exercises.OUR_ANSWERS`, written for seed 42) to check that nothing drifted.

# %% tags=["parameters"]
# Parameters (papermill can override them: `papermill ... -p loops 5`).
output_dir: "Optional[str]" = None  # where figures and the record go; None: <repo>/output/lab
reveal_answers: bool = False        # headless: True; False: you work the exercises; True: ours are filled in
seed: int = 42                      # case seed (our exercise answers hold for seed 42)
warmup: int = 1                     # launches before profiling
loops: int = 3                      # profiled launches
skew_pes: int = 2                   # the skewed case of section 9 (exercise 6's answer holds for
skew_bs: int = 64                   #   pes 2, bs 64, hot-expert:0.5 and any h)
skew_h: int = 16384                 # elements per row: 64 KiB rows of int32
skew_routing: str = "hot-expert:0.5"
skew_repeats: int = 3               # runs of both variants for the twin's times with their spread
model: str = "a2"                   # the machine of section 10's modelled times (a2 or a3)

# %%
# Parameters given as text (papermill -r, -p strings, YAML) become their declared types, or stop here.
from combine_lab.lab.records import check_parameters

parameters = check_parameters(globals())

# %%
import os

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from combine_lab import CaseSpec, case_from_arrays, compare, make_case, plan, run_case
from combine_lab.lab import exercises, plots, records, sweep, teach
from combine_lab.lab.tuning import floor_choice
from combine_lab.model import load_model
from combine_lab.model.replay import replay
from combine_lab.model.stream import case_rows, core_runs
from combine_lab.model.suggest import suggest, suggest_settings
from combine_lab.planning import explain
from combine_lab.planning.cores import TWIN_DEFAULT_SOC, launch_block_dim
from combine_lab.planning.planner import DEFAULT_MIN_SDMA_BYTES
from combine_lab.planning.settings import parse_settings
from combine_lab.results import tables

out = records.output_dir(output_dir)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)
record = {"seed": seed, "sections": []}
answers = {}  # exercise number -> the last check of your answer (a cell run again replaces it)
print("figures and record go to", out)
print("exercises:", "our answers filled in (reveal_answers = True)" if reveal_answers else "yours to fill in")

# %% [markdown]
# ## Glossary
#
# The words this notebook uses, each in one meaning only. *Dispatch* and *combine* move the same
# rows in opposite directions, so the two PEs of a row are named once, by their role in dispatch,
# as the reference's arrays name them:
#
# | term | meaning |
# |---|---|
# | **source PE** (`src_rank`) | the PE that owns a token: dispatch sent its rows out from here. In combine it is the **receiver**: the rows come back into its window, and it reduces them into `x_out` |
# | **destination PE** | the PE that owns an expert: dispatch's destination. In combine it is the **sender**: it holds `expand_x` and sends each row back to the row's source PE. The figures title it "PE d (expert owner, sends)" |
# | segment | the rows a destination PE holds for one `(local_expert, src_rank)`; index `local_expert * pes + src_rank` |
# | remote segment | a segment whose `src_rank` is another PE (its rows cross between PEs); a *local* segment stays on the PE |
# | slot | one `(token_id, topk_id)` of a source PE: the place in its window where that row lands (`token_id * topk + topk_id`) |
# | window | the symmetric memory every PE allocates: `bs * topk` payload slots, then `bs * topk` status slots |
# | status flag | 32 bytes at the start of a 64-byte status slot; 1 = "your payload is in your window" |
# | masked slot | a choice whose expert id is outside `[0, E)` (-1, or `E` and above): dispatch sent it nowhere |
# | MTE | the core's own memory-transfer engine: a put goes GM → UB → remote GM, driven by the core |
# | SDMA | the copy engine beside the cores: the core queues a copy and goes on |
# | quiet | wait until the puts issued so far (on that engine) have landed |
# | plane | which engine carries a segment's payload: MTE or SDMA (flags always go by MTE) |
# | SDMA floor | `min_sdma_bytes`: a segment smaller than this never goes by SDMA (2 MiB by default, docs/decision-rule.md#6-the-floor) |
# | remote average | a destination PE's remote bytes divided by its number of remote segments, empty ones included |
# | `classic`, `doubleplane` | the two combines: MTE only, and MTE + SDMA by the rule |
# | `comm_only`, `full_op` | the kernel's two profiling frames (section 6): stage 1 alone, and the whole kernel |
# | twin | the CPU stand-in for the NPU; times on it are CPU threads copying memory |
# | modelled | a time computed by the timing model for a named machine, never measured (section 10) |

# %% [markdown]
# ## 1 · Case: two PEs, four tokens each
#
# `CaseSpec` holds the parameters and validates them (a bad value raises `SpecError` naming
# the field). `make_case` draws the routing with the reference recipe (docs/protocol.md#3-reference-data-and-the-check): `uniform` routing, seed 42. With `pes=2` and `expert_per_pe=2` there are
# `E = 4` experts: experts 0 and 1 live on PE 0, experts 2 and 3 on PE 1. (The recipe sets every
# `expert_scales` to 1.0 for int32; section 8 uses other weights.)

# %%
spec = CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, dtype="int32_t", seed=seed, routing="uniform")
case = make_case(spec)
print(spec.case_id, "| E =", spec.moe_expert_num, "| row bytes =", spec.row_bytes)
print("expert_ids [pes, bs, topk]:")
print(case.expert_ids)

# %% [markdown]
# ### The routing, one row per (source PE, token, choice)
#
# `dest_pe = expert_id // expert_per_pe` is the destination PE that ran the expert;
# `local_expert = expert_id % expert_per_pe` is the expert's index there. The uniform recipe lets
# a token pick the same expert twice (look at PE 1's token 3): both choices are separate rows.

# %%
display(explain.routing_table(case))
record["sections"].append("case")

# %% [markdown]
# ## 2 · The dispatch layout on a destination PE
#
# Dispatch left, on every destination PE `d`, the rows it received, ordered by
# `local_expert`, then `src_rank`, then `token_id`, then `topk_id` (docs/protocol.md#2-dispatch-layout).
# In combine this PE is the sender: it sends each row back to its `src_rank`.
# A **segment** is the run of rows of one `(local_expert, src_rank)`. Three arrays describe them:
#
# | array | shape | meaning |
# |---|---|---|
# | `expand_x` | `[pes*bs*topk, h]` | the expert outputs, one row per received (token, choice); zero padding after the last |
# | `assist_info_for_combine` | `[pes*bs*topk, 3]` int32 | per row: `src_rank, token_id, topk_id` |
# | `ep_recv_count` | `[expert_per_pe*pes]` int32 | **cumulative** row counts: segment `s` spans rows `[count[s-1], count[s])` |
#
# The kernel reads a segment's bounds straight from `ep_recv_count`:

# %%
display(teach.kernel_source("SegBegin"), teach.kernel_source("SegEnd"))
inputs = case.rank_inputs(0)  # the arrays as the kernel reads them (docs/protocol.md#2-dispatch-layout)
print("PE 0's ep_recv_count:", inputs.ep_recv_count.tolist())
display(explain.segment_table(case, 0)[["segment", "local_expert", "src_rank", "ep_recv_count"]])

# %% [markdown]
# **Exercise 1.** How many rows does PE 0 hold for `local_expert = 1` from `src_rank = 0`?
# Work it out from `ep_recv_count` alone, then put your number in `answer_1` and run the cell.

# %%
answer_1 = None  # <- your answer: an int
if reveal_answers:
    answer_1 = exercises.OUR_ANSWERS[1]
answers[1] = exercises.check_segment_rows(case, pe=0, local_expert=1, src_rank=0, answer=answer_1)
display(answers[1])
if exercises.may_show(answers[1], reveal_answers):
    display(explain.segment_table(case, 0))  # start, end, rows: the answer
else:
    print("(the segment bounds appear here once your answer is right)")

# %% [markdown]
# **Exercise 2.** Row 2 of **PE 1**'s `expand_x`: which `(src_rank, token_id, topk_id)` produced it?
# Use the routing table of section 1 and the dispatch order (local_expert, src_rank, token_id,
# topk_id): which choices went to PE 1's experts, and in what order do they sit?

# %%
answer_2 = None  # <- your answer: (src_rank, token_id, topk_id)
if reveal_answers:
    answer_2 = exercises.OUR_ANSWERS[2]
answers[2] = exercises.check_row_source(case, pe=1, row=2, answer=answer_2)
display(answers[2])
if exercises.may_show(answers[2], reveal_answers):
    # row by row: each expand_x row is x[src_rank, token_id] (identity experts; x_head: its first four
    # elements), tagged by its three assist_info_for_combine fields
    display(explain.dispatch_table(case, 1, values=4)[["row", "segment", "local_expert", "expert_id", "src_rank",
                                                       "token_id", "topk_id", "x_head"]])
else:
    print("(PE 1's rows, with their assist_info_for_combine, appear here once your answer is right)")
record["sections"].append("dispatch layout")

# %% [markdown]
# ## 3 · Where each row lands: the source PE's window
#
# Combine sends row `(src_rank, token_id, topk_id)` back to PE `src_rank`, into a symmetric
# window every PE allocates (docs/protocol.md#4-the-symmetric-window):
#
# * `bs*topk` **payload slots**, one per (token, choice): slot `token_id*topk + topk_id`, at byte
#   `slot * stride` with `stride = align_up(h*sizeof(T), 32)`;
# * then, from the next 64-byte boundary, `bs*topk` **status slots** of 64 bytes, each holding a
#   32-byte flag (8 int32; ready value 1), at `status_offset + slot*64`. A slot has a 64 B line of
#   its own: the AI core's scalar cache works on 64 B lines, and a core that resets one slot and
#   cleans its line must not write back a neighbour slot another PE just made ready.
#
# So the slot does not depend on which PE sends the row nor on its position in `expand_x`:
# each (token, choice) has exactly one place to land, and the source PE knows which flags to
# wait for. The kernel computes it from `assist_info_for_combine`:

# %%
display(teach.kernel_source("RowSlot"), teach.kernel_source("SlotPayload"), teach.kernel_source("SlotStatus"))
geometry = explain.window_geometry(spec)
display(pd.Series(geometry, name="bytes (slots: count)").to_frame())
display(explain.dispatch_table(case, 0)[["row", "src_rank", "token_id", "topk_id"]])

# %% [markdown]
# **Exercise 3.** Row 6 of PE 0: into which slot of its source PE's window does it land?

# %%
answer_3 = None  # <- your answer: a slot number
if reveal_answers:
    answer_3 = exercises.OUR_ANSWERS[3]
answers[3] = exercises.check_window_slot(case, pe=0, row=6, answer=answer_3)
display(answers[3])
if exercises.may_show(answers[3], reveal_answers):
    display(explain.dispatch_table(case, 0)[["row", "src_rank", "token_id", "topk_id", "window_slot",
                                             "payload_offset", "status_offset"]])
else:
    print("(every row's slot and byte offsets appear here once your answer is right)")
record["sections"].append("window")

# %% [markdown]
# ## 4 · Plan: the decision rule on real numbers
#
# Each destination PE decides, per segment, which plane carries it (docs/decision-rule.md#1-the-rule):
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
# remote segment* do: those are the ones that would keep one core busy far longer than the
# others. The kernel's own code, and where it computes `threshold_num` and `threshold_den`:

# %%
display(teach.kernel_source("UseSdma"))
send = teach.kernel_source("SendSegments").text.splitlines()
display(Markdown("The first lines of `SendSegments`:\n\n```cpp\n" + "\n".join(send[:8]) + "\n```"))

# %% [markdown]
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

# %% [markdown]
# **Exercise 4.** With the floor at 0 bytes, which segments of **PE 1** go by SDMA? (A list of
# segment indices.) Use `explain.segment_table(case, 1)` if you like; the rule is above.

# %%
answer_4 = None  # <- your answer: a list of segment indices
if reveal_answers:
    answer_4 = exercises.OUR_ANSWERS[4]
answers[4] = exercises.check_sdma_segments(case, pe=1, min_sdma_bytes=floor, answer=answer_4)
display(answers[4])
if exercises.may_show(answers[4], reveal_answers):
    display(explain.decision_table(case, 1, floor))
    plots.show(plots.segment_map(p_tiny), out, "01_segment_map_tiny")  # both PEs, SDMA segments outlined
else:
    print("(PE 1's decision table and the segment map of both PEs appear here once your answer is right)")

# %% [markdown]
# ### Why `segment_bytes * den > num`, in integers
#
# The rule asks "is this segment strictly above the remote average, `num / den`?" without ever
# dividing. Three reasons:
#
# 1. **Exact ties.** When a segment *equals* the average, `segment_bytes * den == num` exactly,
#    and `>` says no: **a tie stays on MTE**. A divided-out average is only exact when `den`
#    divides `num`.
# 2. **No float rounding.** The bytes of a large case pass 2^24, where float32 stops holding every
#    integer. Below: a 36.6 MiB segment (h 3000 float16, pes 8, expert_per_pe 8) in an exact tie
#    with its PE's remote average. The integers keep it on MTE; a float32 average rounds 4 bytes
#    down and would send it by SDMA.
# 3. **The planner and the kernel decide alike.** The kernel's AI core compares `uint64_t`
#    products (the `UseSdma` above); the planner compares the same products in int64 (Python ints
#    past 2^62). Same inputs, same comparison, same plan, segment for segment: the counters the twin
#    keeps are checked against the plan on every run.

# %%
den = (8 - 1) * 8  # pes 8, expert_per_pe 8
row_bytes = 3000 * 2  # h 3000, float16
tie = teach.float32_tie(row_bytes, den)
print(f"the first tie float32 gets wrong: a segment of {tie[0]} rows, its PE holding {tie[1]} remote rows "
      f"({tie[1]} = {tie[0]} * {den}: exactly the average)")
arith = teach.rule_arithmetic(tie[0], tie[1], row_bytes, den)
display(arith)
assert not arith["above"].iloc[0] and arith["above"].iloc[2]  # the rule: MTE; float32: SDMA
small_tie = teach.rule_arithmetic(2, 4, 32, 2)  # the tiny case's numbers: 2 rows, average 2 rows
display(small_tie)
record["rule"] = {"tie_rows": tie, "integer_above": bool(arith["above"].iloc[0]),
                  "float32_above": bool(arith["above"].iloc[2]), "small_tie_above": bool(small_tie["above"].iloc[0])}

# %% [markdown]
# ### The remote average counts empty segments
#
# `threshold_den = max(pes - 1, 1) * expert_per_pe` is the number of remote segments a PE *could*
# hold, not the number that have rows. An empty segment pulls the average down. Here PE 0 of a
# 3-PE case holds 4 rows from PE 1 and none from PE 2: the average is 4 rows / 2 segments = 2
# rows, so the 4-row segment is above it and goes by SDMA (floor 0). Counting only non-empty
# segments it would be its own average, and stay on MTE.

# %%
spec_e = CaseSpec(pes=3, bs=4, h=8, topk=1, expert_per_pe=1, routing="external")
ids_e = np.full((3, 4, 1), -1)
ids_e[1, :, 0] = 0  # PE 1's four tokens all chose expert 0, on PE 0; PE 2's chose nothing (masked)
case_e = case_from_arrays(spec_e, np.ones((3, 4, 8)), ids_e, np.ones((3, 4, 1)))
d_e = explain.decision_table(case_e, 0, 0)
display(d_e)
nonempty = int((d_e["remote"] & (d_e["token_count"] > 0)).sum())
print(f"threshold_den = {d_e.attrs['threshold_den']} remote segments ({nonempty} of them non-empty): "
      f"remote average {d_e.attrs['remote_avg_bytes']} B")
assert d_e.attrs["threshold_den"] == 2 and nonempty == 1 and list(d_e.loc[d_e["plane"] == "SDMA", "segment"]) == [1]
record["empty_segments_counted"] = {"den": int(d_e.attrs["threshold_den"]), "nonempty": nonempty}

# %% [markdown]
# ### pes 2 with expert_per_pe 1 never uses SDMA
#
# With two PEs and one expert each, every destination PE has exactly one remote segment, so
# `threshold_den = 1` and `threshold_num` *is* that segment's bytes: `segment_bytes * 1 > segment_bytes`
# is never true. However skewed the routing and whatever the floor, doubleplane sends exactly what
# classic sends. (Time such a case and you measure noise.)

# %%
case_21 = make_case(CaseSpec(pes=2, bs=256, h=8192, topk=1, expert_per_pe=1, routing="hot-expert:0.9", seed=seed))
p_21 = plan(case_21, "doubleplane", min_sdma_bytes=0)
display(p_21.totals)
assert (p_21.segments["plane"] == "MTE").all()
record["pes2_epp1_sdma_segments"] = int((p_21.segments["plane"] == "SDMA").sum())
record["sections"].append("rule")

# %% [markdown]
# ## 5 · The protocol: why status goes by MTE, after the payload
#
# A destination PE launches `block_dim = min(pes, AIV cores, 48)` AI cores; core `c` serves the
# segments whose `src_rank` is `c, c + block_dim, ...`, sending them back to those source PEs.
# Stage 1 of a core (`SendSegments`, below) has three phases, numbered as the kernel's comments
# number them and as the `phase` column of the table below counts them:
#
# 1. **SDMA** puts for every row of its SDMA segments (non-blocking: the copy engine works while
#    the core goes on), with an SDMA quiet after every 256 outstanding issues;
# 2. for each MTE segment: **MTE** puts of its rows, a **quiet** (they have landed), then its
#    status flags; and after the last segment, one more quiet (the last flags have landed);
# 3. an **SDMA quiet** (every SDMA row has landed), then the status flags of the SDMA rows,
#    **by MTE**, and a quiet.
#
# Stage 2, on every PE: for each of its tokens, wait until the flag of every valid slot reads 1,
# reduce with `expert_scales` in float32, write `x_out`, reset the flags (section 6).
#
# A flag promises "your payload is in your window". MTE and SDMA are different engines with
# no ordering between them: if a flag went out before its payload's engine had completed (or
# went by SDMA, queued behind or beside other copies), the source PE could sum a row that has
# not arrived. So every flag is written by the core with MTE, only after a quiet of the engine
# that carried its payload.

# %%
display(teach.kernel_source("SendSegments"))

# %% [markdown]
# Core 1 of PE 0 (floor 0, so segment 3 goes by SDMA), step by step:

# %%
program = explain.core_program(case, p_tiny, pe=0, core=1)
display(program)
assert list(program["phase"].unique()) == [1, 2, 3]
display(teach.kernel_source("PutFlags"))

# %% [markdown]
# **Exercise 5.** Why are status flags written by MTE, and only after their payload is
# complete? Pick a letter.

# %%
for letter, text in exercises.STATUS_CHOICES.items():
    print(f"({letter}) {text}")
answer_5 = None  # <- your answer: a letter
if reveal_answers:
    answer_5 = exercises.OUR_ANSWERS[5]
answers[5] = exercises.check_status_order(answer_5)
answers[5]

# %%
record["sections"].append("protocol")

# %% [markdown]
# ## 6 · What `comm_only` and `full_op` time: the kernel's profiling frames
#
# The perf CSV reports two times per core, each between two markers the kernel itself sets
# (`SHMEMI_PROF_START` / `SHMEMI_PROF_END`, per frame id; docs/protocol.md#9-profiling-frames). Here is
# `Process`, everything a core does in one launch:

# %%
display(teach.kernel_source("Process"))

# %% [markdown]
# * **`comm_only`** starts right before `SendSegments` and ends right after it: **stage 1 of this
#   core only**: its SDMA issues, its MTE puts through the staging buffers, every quiet (so it
#   includes waiting for the copy engine to finish this core's SDMA rows), and the status flags.
#   It does *not* include the time the rows take to be reduced, nor anything other cores do.
# * **`full_op`** starts before stage 1 and ends after the core barrier (SHMEM's soft barrier): stage 1, then
#   stage 2 (`ReduceTokens`: waiting for the flags of this core's tokens, which other PEs write,
#   then reading, scaling, adding and writing `x_out`), then waiting until **every core of this
#   PE** is done. So `full_op` depends on the other PEs' stage 1 and on the slowest core of this PE.
# * Neither includes the launch, the host's stream sync or the host barrier between launches.
#   The CSV's `CoreMaxTime` is the slowest core of the profiled PE, per frame.
#
# Stage 2 waits for a slot's flag in all 8 of its words, and only for valid slots:

# %%
display(teach.kernel_source("SlotValid"), teach.kernel_source("WaitSlot"))

# %% [markdown]
# The same core as a timeline: its operations in the kernel's order, as the timing model derives
# them from the plan (`combine_lab.model.stream.core_runs`), with the two frames above them.
# (Order only: the boxes are not drawn to scale in time.)

# %%
rows_tiny = case_rows(case, TWIN_DEFAULT_SOC)
ops = core_runs(rows_tiny, rows_tiny.sdma("doubleplane", floor), pe=0, core=1)
plots.show(plots.core_timeline(ops, "PE 0, core 1 of the tiny case (floor 0): one launch, in order"), out,
           "01_core_timeline")
record["frames"] = {"stage1_ops": [r.kind for r in ops if r.kind not in ("wait", "reduce", "barrier")],
                    "ends_with": ops[-1].kind}
assert record["frames"]["ends_with"] == "barrier"
record["sections"].append("frames")

# %% [markdown]
# ## 7 · Run: classic and doubleplane on the twin, x_out checked
#
# `compare` writes the case files (the reference format, docs/formats.md#1-case-files), builds the
# twin if needed, launches one process per PE for each variant, reads `x_out` back and checks
# it against golden (int32: bit-exact), and reads the twin's counters: per PE and plane, the
# payload puts and bytes, quiets and status writes. A run is `ok` when x_out matches **and** the
# counters carry exactly what the plan says. `prof_pe="all"` profiles every PE in turn.
#
# **Before the first time: what a twin time is.** On the twin, AI cores and the copy engine are
# CPU threads of this machine, so `comm_only` and `full_op` below are CPU threads copying memory,
# and waiting for other PEs' threads to be scheduled on a few CPUs. They show that both frames
# work and what they contain, not what an NPU would take: never compare them with NPU numbers,
# and never read a speed-up from one run (section 9 repeats runs; section 10 models an NPU).

# %%
runs = compare(case, warmup=warmup, loops=loops, min_sdma_bytes=floor, prof_pe="all")
print("times: the twin's (CPU threads copying memory), CoreMaxTime of the slowest core on the slowest profiled PE "
      "(one run: no spread)")
for variant, res in runs.items():
    print(f"{variant:12s} x_out {'PASS' if res.check_ok else 'FAIL'} on every PE | counters = plan: "
          f"{not res.counter_mismatches()} | comm_only {res.time_us('comm_only'):9.1f} us | "
          f"full_op {res.time_us('full_op'):9.1f} us (measured on the twin)")
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
record["sections"].append("run")

# %% [markdown]
# ## 8 · Masked slots and the weights
#
# Dispatch sends a choice nowhere when its expert id is outside `[0, E)`: `-1` (a dropped
# choice), or `E` and above (a common "not routed" padding). Combine must neither sum such a slot
# nor wait for it. Here is a case written by hand (`case_from_arrays`): masked slots of both
# kinds, a token whose every choice is masked (token 2 of each PE), and weights other than 1 so
# that the weighting shows. x is small integers; x_out is int32, reduced in float32 and cast once
# (toward zero).

# %%
spec_m = CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, dtype="int32_t", routing="external")
E = spec_m.moe_expert_num
ids_m = np.array([[[0, 3], [1, -1], [-1, E], [2, 2]], [[3, 1], [0, 2], [E, -1], [1, 0]]])
scales_m = np.array([[[0.5, 0.25], [2.0, 1.0], [1.0, 1.0], [0.75, 0.5]],
                     [[1.5, 0.5], [0.25, 0.25], [1.0, 1.0], [3.0, 0.5]]])
x_m = np.arange(2 * 4 * 8).reshape(2, 4, 8) % 7 - 3
case_m = case_from_arrays(spec_m, x_m, ids_m, scales_m)
display(explain.routing_table(case_m, src_rank=0))

# %% [markdown]
# PE 0's token 0 chose experts 0 and 3 with weights 0.5 and 0.25, and identity experts return
# `x[0, 0]` both times, so its row is `trunc(0.75 * x[0, 0])`. Token 1 has one valid choice
# (weight 2.0). Token 2 has none: the sum over no rows is **the all-zero row**.

# %%
by_hand = np.trunc((0.5 + 0.25) * x_m[0, 0].astype(np.float32)).astype(np.int32)
print("x[0, 0]           =", x_m[0, 0])
print("0.75 * x[0, 0]    =", (0.75 * x_m[0, 0]).tolist(), "-> toward zero:", by_hand)
print("golden of PE 0:\n", case_m.golden(0))
assert (case_m.golden(0)[0] == by_hand).all() and not case_m.golden(0)[2].any()
runs_m = compare(case_m, warmup=0, loops=1, min_sdma_bytes=0)
for variant, res in runs_m.items():
    print(f"{variant:12s} x_out {'PASS' if res.check_ok else 'FAIL'}; token 2 of PE 0: {res.x_out[0][2].tolist()}")
assert all(r.ok for r in runs_m.values()) and not runs_m["doubleplane"].x_out[0][2].any()

# %% [markdown]
# Nobody sends a masked slot, so its flag never becomes 1. The kernel skips it (`SlotValid`,
# section 6). What if it did not? Below, PE 0's case file says its token 1, choice 1 went to a
# valid expert, as a kernel that ignored the mask would believe, while no PE holds that row. PE 0
# waits for a flag no one will write: **a hang**. The twin gives up after 2 s and names the PE,
# core and status slot; on an NPU it would wait forever.

# %%
hang = teach.unsent_slot_wait(case_m, src_rank=0, token=1, k=1, wait_s=2.0)
print(hang)
assert "timed out after 2" in hang and "status slot 3" in hang
record["masked"] = {"zero_row": not runs_m["doubleplane"].x_out[0][2].any(),
                    "weighted_row_by_hand": bool((runs_m["doubleplane"].x_out[0][0] == by_hand).all()),
                    "hang": next(ln for ln in hang.splitlines() if "timed out" in ln)[:200]}
record["sections"].append("masked")

# %% [markdown]
# ## 9 · A skewed case: SDMA takes bytes off the busiest remote core
#
# Real routings are skewed: some experts are much more popular than others. With
# `hot-expert:0.5`, half of all choices go to one expert, so the destination PE that owns it holds
# one large segment from every source PE. Now the rows are 64 KiB and the real 2 MiB floor
# applies.

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
answers[6] = exercises.check_core_rows(case2, pe=1, core=0, answer=answer_6)
answers[6]

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
worst = {"classic": int(busy.iloc[:, 0].max()), "doubleplane": int(busy.iloc[:, 1].max())}
if exercises.may_show(answers[6], reveal_answers):  # its bytes / row bytes are exercise 6's answer
    display(busy)
    print(f"busiest remote core over all PEs drives {worst['classic'] / 2**20:.2f} MiB by MTE with classic and "
          f"{worst['doubleplane'] / 2**20:.2f} MiB with doubleplane")
else:
    print("(the busiest remote cores' bytes appear here once your answer to exercise 6 is right)")
record["skewed_busiest_core_mte_bytes"] = worst

# %% [markdown]
# Both variants on the twin: x_out checked on every PE, counters against the plan, then
# `skew_repeats` runs of both for the times with their spread: median [min-max] of
# the slowest PE, and the speed-up classic / doubleplane of each repeat (above 1: doubleplane
# faster), summarized by its median: the median of the per-repeat speed-ups, not the ratio of the
# median times, which can differ (the cell says by how much). The times are the twin's, measured:
# CPU threads, as section 7 says.

# %%
runs2 = compare(case2, warmup=warmup, loops=loops, prof_pe="all")
problems = [f"{v}: x_out FAIL" for v, r in runs2.items() if not r.check_ok]
problems += [f"{v}: {m}" for v, r in runs2.items() for m in r.counter_mismatches()]
assert not problems, "the skewed runs failed their checks: " + "; ".join(problems)
plots.show(plots.compare_per_pe(runs2), out, "01_compare_skewed")
record["skewed"] = {v: {"check_ok": r.check_ok, "counters_ok": not r.counter_mismatches(),
                        "comm_only_us": r.time_us("comm_only"), "sdma_bytes": int(r.plane_bytes()["sdma_bytes"].sum())}
                    for v, r in runs2.items()}
spread = tables.summarize(sweep.run_sweep([spec2], warmup=warmup, loops=loops, repeats=int(skew_repeats),
                                          prof_pe="all", progress=False))
display(tables.readable(spread))
print(f"{os.cpu_count()} CPUs here run {skew_pes} PE processes, each with {skew_pes} AI-core threads and a "
      "copy-engine (SDMA) thread")
record["skewed_speedup"] = {k: spread[f"comm_only_{k}"].iloc[0] for k in ("speedup", "speedup_lo", "speedup_hi",
                                                                             "verdict")}
ratio_of_medians = spread["comm_only_classic_us"].iloc[0] / spread["comm_only_doubleplane_us"].iloc[0]
print(f"The speed-up column is the median over the {int(spread['repeats'].iloc[0])} repeats of each repeat's own "
      f"classic / doubleplane ({spread['comm_only_speedup'].iloc[0]:.2f}), the lab's one convention "
      "(combine_lab.results.tables); it is not the ratio of the two median times "
      f"({spread['comm_only_classic_us'].iloc[0]:.0f} / {spread['comm_only_doubleplane_us'].iloc[0]:.0f} us = "
      f"{ratio_of_medians:.2f}): a ratio per repeat compares two runs made side by side, and its median can "
      "differ from the ratio of medians, which may take each median from a different repeat.")
record["sections"].append("skewed")

# %% [markdown]
# **What the twin shows, and what it does not.** It shows the plan at work: doubleplane
# produced the same x_out as classic, bit for bit, with exactly the planned bytes on each
# plane, and the busiest remote core drove far fewer bytes by MTE (the table above). It does
# **not** show a speed win, and you should not expect one: handing rows from a core thread to
# the SDMA thread adds no copy bandwidth on a CPU, it adds one more thread competing for the
# same CPUs (and a quiet that waits for it), so doubleplane's comm_only is often *slower* here.
# On an NPU the copy engine is separate hardware running beside the cores. Whether that pays off
# there is measured there (`03_sweep` with `target = "npu"`), and estimated without one by the
# timing model, next.

# %% [markdown]
# ## 10 · Modelled NPU time: where the crossover comes from
#
# The timing model (`combine_lab.model`) replays the operations the kernel issues, the ones of
# section 6's timeline, in virtual time on a named machine's parameters. Every time it gives is
# **modelled, not measured**, and says on what, with which of its parameters are assumed (nobody
# has published them for these chips).

# %%
machine = load_model(model)
print(machine.caption())
display(pd.DataFrame([{"parameter": p.name, "value": p.value, "unit": p.unit,
                       "from": "assumed" if p.assumed else p.source} for p in machine.params.values()]))

# %% [markdown]
# ### One segment alone, by formula
#
# Take one remote segment of `n` rows and nothing else. The model prices the core that sends it:
#
# * **by MTE**, the core moves each row GM → UB (`a = row / core_gm`) and UB → the other PE
#   (`b = row / min(mte_remote, link) + mte_put_us`), through its two staging buffers in turn:
#   `a + b + (n - 1) * max(a, b)`, then a quiet, `n` flags, a quiet;
# * **by SDMA**, the core only issues `n` calls (`sdma_issue_us` each); the engine serves each in
#   `sdma_sqe_us + row / sdma_GBps` (or their max, on a link class whose tables say the fixed cost
#   overlaps the bytes: the A3 die pair); the core waits at the SDMA quiet,
#   then writes the `n` flags by MTE and quiets.
#
# So SDMA pays a fixed cost up front (issue, the SDMA quiet) and wins per row only where the
# engine's per-row cost is below the core's `max(a, b)`. The formula and the model's replay of the
# kernel's stream agree, size by size (`teach.segment_formula`, `teach.one_segment`):

# %%
seg = teach.one_segment(machine, [1, 2, 4, 8, 16, 32, 64, 128, 255], h=skew_h, itemsize=spec2.itemsize)
display(seg)
assert np.allclose(seg["mte_formula_us"], seg["mte_replay_us"]) and np.allclose(seg["sdma_formula_us"],
                                                                                 seg["sdma_replay_us"])
plots.show(plots.segment_crossover(seg, machine.caption(), floor=DEFAULT_MIN_SDMA_BYTES), out,
           "01_segment_crossover")
first_sdma = seg.loc[seg["faster"] == "SDMA", "rows"]
print(f"{machine.caption()}:\n" + teach.crossover_text(seg, machine, spec2.row_bytes))

# %% [markdown]
# ### The skewed case
#
# A whole case is more than one segment: a core's SDMA rows go to an engine that the PE's cores
# share, while the core works through its MTE segments; the slowest core of the slowest PE sets
# `comm_only`. Below, section 9's case priced at every floor where its plan changes
# (`combine-lab suggest`), on the model chosen above and on the other machine: the crossover is a
# property of the machine (its links, its engine), not of the rule. The what-if column prices one
# SDMA call per segment instead of one per row, as if it came free: section 11 builds that idea,
# with the layout step it needs.

# %%
curves = {}
for name in dict.fromkeys([model, "a3" if model == "a2" else "a2"]):
    m = load_model(name)
    s = suggest(case_rows(case2, m.soc), m, what_if="segment")
    curves[name] = s
    print(s.caption)
    display(s.curve)
    choice = floor_choice(s)  # a tie with never SDMA is called a tie, not a best floor
    print(f"on {name}: {choice.text()} (modelled)")
    if s.verdict is not None:  # over the unknowns' ranges: a floor is best only above the resolution throughout
        print(s.verdict.text())
        print(s.pick_text(), "\n")
s = curves[model]
plots.show(plots.modelled_floors(s.curve, s.caption, floor=DEFAULT_MIN_SDMA_BYTES, what_if="segment"), out,
           "01_modelled_floors_skewed")
at_floor = {name: float(c.curve.loc[c.curve["threshold_bytes"] == DEFAULT_MIN_SDMA_BYTES, "speedup"].iloc[0])
            for name, c in curves.items()}
record["modelled"] = {"model": model, "caption": machine.caption(),
                      "segment_formula_equals_replay": True,
                      "first_sdma_rows": int(first_sdma.iloc[0]) if len(first_sdma) else None,
                      "speedup_at_2MiB": at_floor}
print("modelled speed-up at the 2 MiB floor:", {k: round(v, 3) for k, v in at_floor.items()},
      "(modelled, not measured)")
record["sections"].append("modelled")

# %% [markdown]
# Why the two machines differ, core by core: the modelled comm_only of every core of this case
# (PE, core), classic and doubleplane at the 2 MiB floor.

# %%
per_core, slowest = [], {}
for name in curves:
    m = load_model(name)
    r = case_rows(case2, m.soc)
    for variant in ("classic", "doubleplane"):
        t = replay(r, r.sdma(variant, DEFAULT_MIN_SDMA_BYTES), m)
        for pe in range(spec2.pes):
            per_core += [{"machine": name, "PE": pe, "core": c,
                          "sends to": f"PE {c} (local)" if c == pe else f"PE {c} (remote)",
                          "variant": variant, "us": round(float(v), 1)} for c, v in enumerate(t.comm_only[pe])]
        pe, core = (int(i) for i in np.unravel_index(np.argmax(t.comm_only), t.comm_only.shape))
        slowest[f"{name} {variant}"] = "local" if pe == core else "remote"
        print(f"{name}, {variant}: the slowest core is core {core} of PE {pe} ("
              + (f"local: its rows stay on PE {pe}" if pe == core else f"remote: it sends to PE {core}")
              + f"), modelled comm_only {float(t.comm_only.max()):.1f} us")
# one row per core, one column per variant: every core of every PE has both (no empty cells)
per_core_table = pd.DataFrame(per_core).pivot(index=["machine", "PE", "core", "sends to"], columns="variant",
                                               values="us")
per_core_table.columns = [f"{v} comm_only (us, modelled)" for v in per_core_table.columns]
assert not per_core_table.isna().any().any()
display(per_core_table)
print("modelled, not measured:", "; ".join(load_model(n).caption() for n in curves))
record["modelled"]["slowest_core"] = slowest

# %% [markdown]
# **Where the crossover comes from.** Alone, a segment goes faster by SDMA only where the engine's
# cost per row (its descriptors plus the bytes) beats the core's own `max(a, b)`; what the
# one-segment figure's cell prints says from which size on this machine, or that there is no
# crossover at all and why (when the engine's cost per row, descriptors included, is above MTE's).
# In a whole case that is not the question: `comm_only` is the slowest core's stage 1, and SDMA
# pays when it takes enough bytes off *that* core while the engine copies them beside it. The
# cell's output above says which core that is (run it, or see it in `combine-lab docs`). With
# this notebook's parameters, on both machines classic's slowest core is a remote one, driving the
# hot expert's rows across the link, and handing its big segment to the engines shortens it:
# where links are fast (a3's die pair), until the local core (local rows go by MTE, always) sets
# `comm_only`; where they are slow (a2, one HCCS link at 20.3 GB/s that the engines and the cores
# share), not that far: the remote core stays the slowest, only less so. Neither is a verdict on its own: what that
# cell prints under each curve gives the speed-up over the unknowns' ranges (how many SDMA engines
# run at once first), and a floor is called best only when it wins by more than the model's
# resolution over all of them (docs/timing-model.md#8-choosing-the-floor). So the best
# floor is a property of the machine and the routing, not a constant: the default 2 MiB (docs/decision-rule.md#6-the-floor)
# is a rule of thumb. `02_tuning` shows this curve live for any case, with a Suggest button;
# `03_sweep` draws it over a grid of cases.

# %% [markdown]
# ## 11 · Beyond the reference: one SDMA call per segment, more cores per source rank
#
# The kernel so far has the reference's structure: every SDMA row goes in its own SDMA put
# call, and each source rank has one AIV core (so at `pes = 8`, 8 of the SoC's
# 40-48 cores drive MTE). Two settings of the lab's kernel change that; they change how rows
# travel, never which plane carries them, so the decision rule, its floor and `x_out` stay the
# same (docs/variants.md):
#
# * **`segment`** (doubleplane only). In the reference a segment's rows land in the slots of their
#   tokens (`token * topk + k`), scattered over the receiver's window, so no call can carry more
#   than one row. With the segment layout the receiver lays its window out by expert: a
#   segment's rows land back to back and go in one call per segment (SHMEM cuts it into 1 MiB
#   SQEs). The protocol gains a step before any payload: core 0 of each PE tells every PE where
#   its experts' rows start (its *bases*), by MTE, with a ready block after them; a sender waits,
#   bounded, for that before it puts anything into that PE's layout; stage 2 reads slot `(t, k)`
#   at its layout row (docs/variants.md#1-one-sdma-call-per-segment).
# * **`c<N>`**, cores per source rank. `N` cores share each source rank's segments; core `j` sends
#   the `j`-th chunk of every segment's rows, from its own UB, and writes the status flags of
#   **its own chunk only**, after its own quiet: a quiet completes the calling core's puts, not a
#   neighbour's (docs/variants.md#2-cores-per-source-rank).
#
# Status still goes by MTE after its payload in both. **What the twin proves**: section 9's case
# under each setting, x_out against classic's bit for bit, and the twin's counters against the
# plan, now including the SDMA calls and SQEs and the layout step's control writes.

# %%
labels = ["reference", "segment", "c2", "segment-c2"]
settings_rows = []
for label in labels:  # the reference's is section 9's doubleplane run: the counters of its last launch
    r = runs2["doubleplane"] if label == "reference" else run_case(case2, "doubleplane", settings=label, warmup=0,
                                                                    loops=1, perf=False)
    same = all(np.array_equal(r.x_out[pe], runs2["classic"].x_out[pe]) for pe in range(spec2.pes))
    assert r.ok and same, (label, r.checks, r.counter_mismatches())
    pb = r.plane_bytes()
    settings_rows.append({"settings": label, "x_out = classic's": same, "counters = plan": not r.counter_mismatches(),
                          "SDMA bytes": int(pb["sdma_bytes"].sum()), "SDMA calls": int(pb["sdma_puts"].sum()),
                          "SQEs": int(pb["sdma_sqes"].sum()), "MTE puts": int(pb["mte_puts"].sum()),
                          "control writes": int(pb["control_writes"].sum()),
                          "AIV cores per PE": launch_block_dim(spec2.pes, TWIN_DEFAULT_SOC,
                                                               parse_settings(label).cores_per_rank)})
settings_table = pd.DataFrame(settings_rows).set_index("settings")
display(settings_table)
calls = settings_table["SDMA calls"]
print(f"one SDMA call per row (reference): {calls['reference']} calls; one per segment: {calls['segment']}; "
      f"per chunk with 2 cores per rank: {calls['segment-c2']}; the same {settings_table['SDMA bytes'].iloc[0]:,} "
      "SDMA bytes in each")
record["settings"] = {"labels": labels, "x_out_equal": bool(settings_table["x_out = classic's"].all()),
                      "counters_ok": bool(settings_table["counters = plan"].all()),
                      "sdma_calls": {k: int(v) for k, v in calls.items()},
                      "control_writes": {k: int(v) for k, v in settings_table["control writes"].items()}}

# %% [markdown]
# The self-test (`combine-lab selftest`) has a broken version of each idea and the twin catches
# every one: a segment's status flag before its SDMA quiet (`segment_flag_before_sdma_quiet`), a
# sender that does not wait for the receiver's bases (`no_bases_wait`), a core that writes the
# flag of a row another core of its group put (`other_group_flag`); docs/hardware-rules.md#12-broken-kernels.
#
# **What the model says.** Twin times cannot say whether either idea is faster on an NPU (section
# 7). The model can price them, on a case the size they are meant for: 8 PEs, 256 tokens of 7168
# float16, topk 8, 8 experts per PE, Zipf routing. Each setting at its best floor, against the
# reference's classic, with its band over the unknowns' ranges (docs/variants.md#6-what-the-model-says):

# %%
spec8 = CaseSpec(pes=8, bs=256, h=7168, topk=8, expert_per_pe=8, dtype="float16_t", routing="zipf:1.2", seed=seed)
case8 = make_case(spec8)
variant_labels = ["classic", "classic-c6", "doubleplane", "doubleplane-segment", "doubleplane-segment-c6"]
by_setting = {}
for name in dict.fromkeys([model, "a3" if model == "a2" else "a2"]):
    m = load_model(name)
    cmp = suggest_settings(case_rows(case8, m.soc), m, variant_labels)
    by_setting[name] = cmp.table.set_index("variant")
    print(cmp.text(), "\n")
record["settings"]["modelled"] = {
    name: {v: {"speedup": float(t.loc[v, "speedup"]), "low": float(t.loc[v, "low"]), "high": float(t.loc[v, "high"]),
               "verdict": str(t.loc[v, "verdict"])} for v in variant_labels} for name, t in by_setting.items()}
for name, t in by_setting.items():
    sp = t["speedup"]
    layout = t.loc["doubleplane-segment", "modelled_us"] - t.loc["doubleplane", "modelled_us"]
    cores = launch_block_dim(spec8.pes, load_model(name).soc, 6)
    print(f"{name}: 6 cores per source rank make {cores} AIV cores per PE at pes {spec8.pes} (1 per rank: {spec8.pes})")
    print(f"{name} (modelled, not measured): classic-c6 alone {sp['classic-c6']:.2f}x, doubleplane-segment alone "
          f"{sp['doubleplane-segment']:.2f}x, both {sp['doubleplane-segment-c6']:.2f}x the reference's classic; "
          f"doubleplane-segment vs doubleplane at the same floor: {layout:+.1f} us (its layout step against the "
          "per-row SDMA cost it saves)")
    # the prose below says the cores pay over every unknown's range: it must hold for the case shown
    assert t.loc["classic-c6", "verdict"] == "faster", (name, t.loc["classic-c6"].to_dict())
record["sections"].append("settings")

# %% [markdown]
# Read it with its bands, not its nominal column. On this case the model's largest gain comes from
# the cores, not from SDMA: with 6 cores per source rank the MTE rows spread over more cores than 8
# (the cell's output above says how many on each SoC), and `classic-c6` alone is faster over every unknown's
# range, on both machines. The segment layout saves the per-row SDMA cost but pays for its layout
# step (a bases exchange and a barrier; the cell's output above gives the balance at this size), and
# whether SDMA pays at all hinges on what nobody has published: the `measure_first` column names
# the parameter that moves each verdict most (read it per row: it differs by setting and machine).
# Combined with 6 cores the verdict differs by machine, so no verdict on the planes holds without
# measuring.
#
# **What only hardware can show.** The model assumes what nobody has published: how many SDMA
# engines serve one PE's calls at once, the cost of one MTE put from a core and how far `N`
# cores per rank share a link's bandwidth before they contend, and what the layout step's flags
# cost on a real fabric. The twin cannot show these either: it proves the protocol (every row's
# status after its own payload, no two cores sharing a UB range or a flag, the bounded waits), not
# the speed. `combine-lab probe --target npu` measures the unknowns on an NPU, and `03_sweep` with
# `target = "npu"` measures the settings themselves (docs/probe.md).

# %% [markdown]
# ## Your exercises

# %%
for number in sorted(answers):
    print(answers[number])
record["exercises"] = exercises.summary(answers)
record["reveal_answers"] = bool(reveal_answers)
print("record:", records.write_record(out, "01_walkthrough", record))
if reveal_answers:  # our answers must hold: a headless run fails if the case or the checks drifted
    assert record["exercises"]["all_ok"], f"only {exercises.score_text(answers)}: our answers must all hold"
else:
    print(exercises.score_text(answers))
