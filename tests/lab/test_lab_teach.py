"""What the walkthrough shows besides tables (combine_lab.lab.teach): the kernel's source read from
kernels/ when called, the decision rule's integer arithmetic against divided-out averages, the hang
a wait for a masked slot would cause, and one segment priced by formula and by the model's replay."""

from __future__ import annotations

import numpy as np
import pytest

from combine_lab.case.case import case_from_arrays, make_case
from combine_lab.case.spec import CaseSpec
from combine_lab.errors import ParameterError
from combine_lab.lab import teach
from combine_lab.model.machines import load_model
from combine_lab.planning.planner import plan


def test_kernel_source_is_read_from_the_kernel_file_now(tmp_path):
    src = teach.kernel_source("UseSdma")
    lines = teach.KERNEL_FILE.read_text().splitlines()
    assert src.path == teach.KERNEL_FILE and src.where.startswith("kernels/combine_kernel.cpp, lines ")
    # the text is the file's own lines first..last, every one (4 columns of indentation removed)
    assert src.text.splitlines() == [ln[4:] for ln in lines[src.first - 1:src.last]]
    assert "UseSdma(" in src.text and "threshold_den_" in src.text and src.text.rstrip().endswith("}")
    # read when called: a changed file shows its change
    copy = tmp_path / "k.cpp"
    copy.write_text(teach.KERNEL_FILE.read_text().replace("segment_bytes * threshold_den_ > threshold_num_",
                                                          "segment_bytes * threshold_den_ >= threshold_num_"))
    assert "segment_bytes * threshold_den_ > threshold_num_" in src.text
    assert "segment_bytes * threshold_den_ >= threshold_num_" in teach.kernel_source("UseSdma", copy).text
    assert "```cpp" in src._repr_markdown_() and src.where in repr(src)
    with pytest.raises(ParameterError, match="no function 'NoSuchStep' defined there"):
        teach.kernel_source("NoSuchStep")


def test_kernel_source_is_the_kernel_file_as_it_is():
    """The real kernel holds no switch of the self-test's broken kernels (they are patches,
    kernels/broken/<name>.patch, docs/hardware-rules.md#12-broken-kernels), so the walkthrough shows
    the file's lines unchanged, with nothing rewritten or left out."""
    kernels = teach.KERNEL_FILE.parent
    assert not (kernels / "combine_faults.h").exists()
    for f in ("combine_kernel.cpp", "combine_kernel.h", "combine_platform.h"):
        text = (kernels / f).read_text()
        assert "fault::" not in text and "COMBINE_FAULT" not in text and "if constexpr (!" not in text, f
    lines = teach.KERNEL_FILE.read_text().splitlines()
    for name in ("SendSegments", "Process", "WaitSlot", "PutMte", "IssueLoad", "AccumulateTile", "WriteTile"):
        src = teach.kernel_source(name)
        assert src.text.splitlines() == [ln[4:] for ln in lines[src.first - 1:src.last]], name
    process = teach.kernel_source("Process").text
    assert "AscendC::InitSocState();" in process and "aclshmemi_barrier_core_soft();" in process
    assert "aclshmem_barrier_all" not in process  # the device_barrier kernel's, in its patch only
    assert "for (uint32_t w = 0; w < kStatusWords; ++w) {" in teach.kernel_source("WaitSlot").text
    assert "    PutFlags(begin, end, s.src_rank);  // this core's own chunk: the payload it put" in \
        teach.kernel_source("SendSegments").text


@pytest.mark.parametrize("name", ["SegBegin", "SegEnd", "RowSlot", "SlotPayload", "SlotStatus", "UseSdma",
                                  "SendSegments", "PutFlags", "Process", "SlotValid", "WaitSlot"])
def test_every_step_the_walkthrough_shows_is_in_the_kernel(name):
    src = teach.kernel_source(name)
    assert f"{name}(" in src.text.splitlines()[0] or any(f" {name}(" in ln for ln in src.text.splitlines()[:4])
    assert src.text.count("{") == src.text.count("}")


def test_process_holds_both_profiling_frames_around_the_stages():
    text = teach.kernel_source("Process").text
    order = [text.index(s) for s in ("SHMEMI_PROF_START(kProfFrameFullOp)", "SHMEMI_PROF_START(kProfFrameCommOnly)",
                                     "SendSegments()", "SHMEMI_PROF_END(kProfFrameCommOnly)", "ReduceTokens()",
                                     "aclshmemi_barrier_core_soft()", "SHMEMI_PROF_END(kProfFrameFullOp)")]
    assert order == sorted(order)


def test_a_tie_stays_on_mte_where_a_float32_average_would_send_it_by_sdma():
    den, row = 56, 6000  # pes 8, expert_per_pe 8; h 3000 float16
    rows, remote = teach.float32_tie(row, den)
    assert remote == rows * den  # an exact tie: the segment is the average
    t = teach.rule_arithmetic(rows, remote, row, den).set_index("method")["above"]
    assert list(t) == [False, False, True]  # integers: MTE; float64 agrees here; float32 rounds down: SDMA
    assert rows * row > 2 ** 24  # past float32's integers
    # below 2^24 bytes every tie comes out right in float32 too
    assert teach.float32_tie(32, 2, max_rows=1000) is None
    # one byte above the average is above it in integers
    t2 = teach.rule_arithmetic(3, 5, 32, 2)["above"]
    assert bool(t2.iloc[0]) and list(teach.rule_arithmetic(2, 4, 32, 2)["above"]) == [False, False, False]


def test_the_rule_arithmetic_is_the_planners_rule():
    """The integer line of rule_arithmetic decides as the planner does, segment by segment."""
    spec = CaseSpec(pes=3, bs=16, h=8, topk=2, expert_per_pe=2, routing="zipf:1.5", seed=3)
    case = make_case(spec)
    p = plan(case, "doubleplane", min_sdma_bytes=0)
    for pe in range(spec.pes):
        segs = p.segments.query("pe == @pe").reset_index(drop=True)
        remote = int(segs.loc[segs["src_rank"] != pe, "token_count"].sum())
        den = (spec.pes - 1) * spec.expert_per_pe
        for _, s in segs[segs["src_rank"] != pe].iterrows():
            above = bool(teach.rule_arithmetic(int(s["token_count"]), remote, spec.row_bytes, den)["above"].iloc[0])
            assert (s["plane"] == "SDMA") == (above and s["token_count"] > 0), (pe, s.to_dict())


def test_one_segment_formula_equals_the_models_replay():
    for name in ("a2", "a3"):
        m = load_model(name)
        t = teach.one_segment(m, [1, 3, 16, 100, 255], h=7168, itemsize=2)
        assert np.allclose(t["mte_formula_us"], t["mte_replay_us"], rtol=1e-9)
        assert np.allclose(t["sdma_formula_us"], t["sdma_replay_us"], rtol=1e-9)
        assert (np.diff(t["mte_replay_us"]) > 0).all() and (np.diff(t["sdma_replay_us"]) > 0).all()
        assert set(t["faster"]) <= {"MTE", "SDMA"}
    with pytest.raises(ParameterError, match="plane='PCIe': MTE or SDMA"):
        teach.segment_formula(load_model("a2"), 4, 1024, "PCIe")
    with pytest.raises(ParameterError, match="n=256"):
        teach.segment_formula(load_model("a2"), 256, 1024, "SDMA")


def test_a_wait_for_a_masked_slot_hangs_and_the_twin_names_it(no_leaks):
    spec = CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, dtype="int32_t", routing="external")
    ids = np.array([[[0, 3], [1, -1], [-1, 4], [2, 2]], [[3, 1], [0, 2], [4, -1], [1, 0]]])
    case = case_from_arrays(spec, np.ones((2, 4, 8)), ids, np.ones((2, 4, 2)))
    said = teach.unsent_slot_wait(case, src_rank=0, token=1, k=1, wait_s=1.0)
    assert "timed out after 1" in said and "status slot 3" in said  # slot token 1 * topk 2 + k 1
    with pytest.raises(ParameterError, match=r"slot \(PE 0, token 0, k 0\) is not masked"):
        teach.unsent_slot_wait(case, src_rank=0, token=0, k=0)


def test_bad_input_is_refused_naming_the_parameter():
    m = load_model("a2")
    with pytest.raises(ParameterError, match=r"itemsize=3: 2 \(float16_t\) or 4 \(int32_t\)"):
        teach.one_segment(m, [1], h=8, itemsize=3)
    with pytest.raises(ParameterError, match="sizes: 256 rows: each size must be 1 to 255 rows"):
        teach.one_segment(m, [1, 256], h=8)
    with pytest.raises(ParameterError, match=r"den=0: must be >= 1"):
        teach.rule_arithmetic(1, 2, 32, 0)
    with pytest.raises(ParameterError, match="remote_rows=-1: must be >= 0"):
        teach.rule_arithmetic(1, -1, 32, 2)
    case = make_case(CaseSpec(pes=2, bs=4, h=8, topk=2, expert_per_pe=2, seed=42))
    with pytest.raises(ParameterError, match=r"token=4: must be in \[0, 4\) for this case"):
        teach.unsent_slot_wait(case, src_rank=0, token=4, k=0)
    with pytest.raises(ParameterError, match="wait_s=0: must be > 0 seconds"):
        teach.unsent_slot_wait(case, src_rank=0, token=0, k=0, wait_s=0)


def test_crossover_text_says_when_there_is_none_and_why():
    from combine_lab.model.machines import load_model
    # a2 with one engine and a quick put: no crossover (at the nominal put, MTE and one engine's SDMA tie
    # per row since both run at A2's write link, 20.284 GB/s)
    a2, a3 = load_model("a2").with_values(sdma_engines=1.0, mte_put_us=0.5), load_model("a3")
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 255]
    seg = teach.one_segment(a2, sizes, h=16384, itemsize=4)
    assert (seg["faster"] == "MTE").all()
    c = teach.segment_per_row(a2, 65536)
    # the formula's own per-row step: SDMA's engine cost per row is above MTE's max(a, b)
    step = seg.set_index("rows")
    assert np.isclose(step.loc[2, "mte_formula_us"] - step.loc[1, "mte_formula_us"], c["mte"] + a2["flag_us"])
    assert np.isclose(step.loc[2, "sdma_formula_us"] - step.loc[1, "sdma_formula_us"], c["sdma"] + a2["flag_us"])
    assert c["sdma"] > c["mte"] and c["sdma_bound"] == "engine service"
    text = teach.crossover_text(seg, a2, 65536)
    assert text.startswith("No crossover on this machine") and "SDMA never wins on its own" in text
    assert f"{c['sdma']:.2f} us" in text and f"{c['mte']:.2f} us" in text and "from no size" not in text
    seg3 = teach.one_segment(a3, sizes, h=7168, itemsize=2)
    text3 = teach.crossover_text(seg3, a3, 14336)
    first = int(seg3.loc[seg3["faster"] == "SDMA", "rows"].iloc[0])
    assert first == 4 and text3.startswith("Crossover at 4 rows (57,344 B)")  # 2 rows before the per-leg copy rate
