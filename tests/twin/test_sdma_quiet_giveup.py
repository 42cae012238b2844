"""An SDMA quiet that gives up (SHMEM's polls its completion flag 1,000,000 times, then returns as
if every descriptor had run) is an error the driver reports, naming the PE, the core and the rows,
not status flags written over rows that never landed (docs/hardware-rules.md#16-sdma-quiet-receipts).
The twin models the give-up: COMBINE_TWIN_SDMA_QUIET_GIVEUP=<pe>:<core> stalls that core's SDMA
stream (host/twin/twin_engines.cpp)."""

from __future__ import annotations

import re

import pytest

from combine_lab.case.case import make_case
from combine_lab.case.spec import CaseSpec
from combine_lab.run.launch import LaunchError
from combine_lab.run.runner import run_case

SPEC = CaseSpec(pes=2, bs=4, h=16, topk=2, expert_per_pe=2)


def test_an_sdma_quiet_that_gives_up_is_reported_with_pe_core_and_rows_and_no_flag_goes_out(no_leaks):
    # PE 0's core 1 serves source rank 1 (remote): min_sdma_bytes=0 sends its segments by SDMA
    with pytest.raises(LaunchError) as e:
        run_case(SPEC, "doubleplane", min_sdma_bytes=0, timeout_s=60,
                 env={"COMBINE_TWIN_SDMA_QUIET_GIVEUP": "0:1", "COMBINE_WAIT_TIMEOUT_S": "1"})
    assert e.value.pe == 0 and e.value.returncode == 7, str(e.value)
    said = str(e.value)
    # the reason once, on the first line (it was also repeated as the first line of the log below it)
    assert said.count("SDMA quiet gave up") == 1
    assert re.search(r"^PE 0 exited with status 7: combine_host: PE 0 core 1: SDMA quiet gave up after \d+\.\d{3} s \(SHMEM's quiet returns "
                     r"after 1000000 polls as if all had landed\): expand_x rows 4\.\.7 \(4 rows, the first to PE 1\) "
                     r"went by SDMA and may not have landed; the core wrote none of its SDMA rows' flags$", said, re.M), said
    # those rows are PE 0's one SDMA segment: expert 1's rows from source rank 1 (ep_recv_count is a running
    # total over (expert, source rank)); expert 0's 2 rows from rank 1 are below the average and go by MTE
    assert make_case(SPEC).ep_recv_count[0].tolist() == [1, 3, 4, 8]
    # without the fault the same run passes: the check is on the quiet, not on the case
    assert run_case(SPEC, "doubleplane", min_sdma_bytes=0, timeout_s=60).ok
