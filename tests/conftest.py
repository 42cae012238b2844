"""Shared fixtures: the twin binary (built once), and a leak check after every test that
launches PEs: no combine_host process and no /dev/shm segment of the twin may remain.

This test run tags what it starts (COMBINE_LAB_SESSION_TAG, inherited by every process it
launches), so the checks see only this run's PEs and segments, not another run's beside it."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from combine_lab.run.build import build
from combine_lab.run.launch import tagged_host_pids, tagged_segments


RUN_TAG = f"t{uuid.uuid4().hex[:8]}"
os.environ["COMBINE_LAB_SESSION_TAG"] = RUN_TAG


def twin_segments() -> set[str]:
    """This test run's twin shared-memory segments."""
    return tagged_segments(RUN_TAG)


def host_processes() -> list[int]:
    """PIDs of running combine_host processes started by this test run."""
    return sorted(tagged_host_pids(RUN_TAG))


@pytest.fixture(scope="session")
def twin_binary() -> Path:
    return build("cpu")


@pytest.fixture
def no_leaks(twin_binary):
    """Fails the test if it leaves a PE process or a twin shared-memory segment behind."""
    before = twin_segments()
    yield
    leaked = twin_segments() - before
    procs = host_processes()
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"
    assert not procs, f"combine_host processes left running: {procs}"


@pytest.fixture
def short_twin_timeout(monkeypatch):
    """Twin waits give up after 2 s so that hang tests end quickly."""
    monkeypatch.setenv("COMBINE_TWIN_TIMEOUT_S", "2")
    return 2.0


def pytest_collection_modifyitems(config, items):
    """Tests marked ``npu`` need an Ascend NPU with CANN and SHMEM: skipped, with the reason the
    capability table gives, where the NPU target cannot run (combine_lab.capabilities)."""
    npu_items = [item for item in items if item.get_closest_marker("npu")]
    if not npu_items:
        return
    from combine_lab.run.capabilities import detect

    caps = detect()
    if "npu" in caps.targets():
        return
    skip = pytest.mark.skip(reason=f"needs an Ascend NPU with CANN and SHMEM; here: {caps.npu_fix()}")
    for item in npu_items:
        item.add_marker(skip)
