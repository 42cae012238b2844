"""Shared fixtures: the twin binary and the broken kernels, each built once, and a leak check
after every test that launches PEs: no combine_host process and no /dev/shm segment of the
twin may remain.

Builds go to a cache outside the checkout (``COMBINE_LAB_BUILD_DIR``, inherited by every
process the tests start: notebook kernels, subprocess runs, ``combine-lab selftest``), one
folder per checkout; ``build`` reuses a folder until a source under kernels/, host/, cmake/
changes (its fingerprint), so each kernel is compiled once, not once per test run, and a
checkout of sources another checkout built copies the executables from the store.

This test run tags what it starts (COMBINE_LAB_SESSION_TAG, inherited by every process it
launches), so the checks see only this run's PEs and segments, not another run's beside it."""

from __future__ import annotations

import gc
import importlib.util
import os
import signal
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from combine_lab.run import build as build_mod
from combine_lab.run.build import build, source_root
from combine_lab.run.launch import tagged_host_pids, tagged_segments
from combine_lab.lab.nb_imports import lean_jsonschema

lean_jsonschema()  # as the lab imports the notebook libraries (the test modules import nbformat at their top)


def build_cache() -> Path:
    """``$COMBINE_LAB_TEST_BUILD_DIR``, else the lab's own cache folder of this checkout
    (:func:`combine_lab.run.build.cache_root`)."""
    if os.environ.get("COMBINE_LAB_TEST_BUILD_DIR"):
        return Path(os.environ["COMBINE_LAB_TEST_BUILD_DIR"])
    return build_mod.cache_root()


os.environ["COMBINE_LAB_BUILD_DIR"] = str(build_cache())
# A shell starts a background job (`pytest ... &`, a CI step's `cmd &`) with SIGINT ignored, and
# a process started with it ignored keeps ignoring it: the Ctrl-C tests' processes would never see
# theirs. Caught here, it is the default again in every process the tests start (exec resets it).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The store of finished twin executables (combine_lab/run/store.py): the user's own, shared with
# every checkout, so that a worktree's or a fresh clone's test run copies what another checkout
# built from the same sources instead of compiling it again (~1 min). The suite puts nothing there
# that `combine-lab build` would not (the same sources, the same executables; the tests that fake
# a build step set COMBINE_LAB_STORE=off), and the store keeps only its newest entries. A run
# given its own build folder (COMBINE_LAB_TEST_BUILD_DIR, CI's) gets its own store there too, so
# that it stays apart from this machine's other builds.
if os.environ.get("COMBINE_LAB_TEST_BUILD_DIR"):
    os.environ.setdefault("COMBINE_LAB_STORE", str(build_cache() / "store"))
# Bytecode beside the builds, never in the checkout: this process's (pytest's rewritten test modules
# too) and every process the tests start. Kept there even where PYTHONDONTWRITEBYTECODE is set to
# keep checkouts clean: without it each of the suite's Python processes compiles the package again
# and pytest rewrites every test module again (seconds of every run).
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(build_cache() / "pycache"))
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
sys.dont_write_bytecode = False

# hypothesis keeps its example database and caches beside the builds, not in the checkout's
# .hypothesis/ (docs/cli.md section 1: nothing a run or the tests write lands in the checkout)
try:
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(str(build_mod.cache_root() / "hypothesis"))
except ImportError:  # the test extra is not installed: the modules that need hypothesis skip
    pass

#: Why lab and baseline tests skip where their extra is not installed (pytest.importorskip's reason).
LAB_EXTRA = "needs the lab extra: bash .ci/setup"
BASELINE_EXTRA = "needs the baseline extra (CPU torch): bash .ci/setup --baseline"


def require(*modules: str, reason: str) -> None:
    """Skip the calling test module unless every one of ``modules`` is installed; ``reason`` says how
    to install them. With ``COMBINE_LAB_REQUIRE_EXTRAS=1`` (CI, which installs every extra) a missing
    module fails instead: an extra that did not install must not pass as skipped tests.

    Installed means importlib finds the module, without importing it: jupyterlab and torch take
    seconds to import, and collecting a module that is then deselected must not pay for them."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    if os.environ.get("COMBINE_LAB_REQUIRE_EXTRAS") == "1":
        pytest.fail(f"{', '.join(missing)} not installed; {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


RUN_TAG = f"t{uuid.uuid4().hex[:8]}"
os.environ["COMBINE_LAB_SESSION_TAG"] = RUN_TAG


def twin_segments() -> set[str]:
    """This test run's twin shared-memory segments."""
    return tagged_segments(RUN_TAG)


def host_processes() -> list[int]:
    """PIDs of running combine_host processes started by this test run."""
    return sorted(tagged_host_pids(RUN_TAG))


def process_tree(pid: int) -> list[psutil.Process]:
    """Every descendant of ``pid`` now (none when it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def running(p) -> bool:
    """Still there and not a zombie; a process gone between two questions counts as gone (Jupyter
    starts short-lived helpers, so a listed process may vanish before it is asked)."""
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_tree(proc) -> None:
    """After a failed check: a still-running ``proc`` (a Popen) and every descendant killed."""
    if proc.poll() is None:
        for p in process_tree(proc.pid):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def twin_binary() -> Path:
    """The twin's host driver, built (or found up to date) once per test run."""
    return build("cpu")


@pytest.fixture(scope="session")
def broken_kernels(twin_binary) -> dict[str, Path]:
    """name -> driver of each broken kernel of the self-test (combine_lab.run.selftest), built once
    into the shared build folder where ``combine-lab selftest`` finds them too."""
    from combine_lab.run.selftest import build_broken_kernels

    return build_broken_kernels()


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
def short_stop_grace(monkeypatch):
    """The launcher kills the other PEs 0.3 s after one fails instead of 2 s: for tests where a PE
    fails before the others can notice (a driver refusing its files), so they would only wait."""
    monkeypatch.setenv("COMBINE_LAB_STOP_GRACE_S", "0.3")
    return 0.3


@pytest.fixture
def short_twin_timeout(monkeypatch):
    """Twin waits give up after 2 s so that hang tests end quickly."""
    monkeypatch.setenv("COMBINE_TWIN_TIMEOUT_S", "2")
    return 2.0


#: Fixtures that cost tens of seconds once per process (all three notebooks run, every broken kernel
#: built): the tests that use one run on one pytest-xdist worker (``--dist loadgroup``), not on each.
GROUPED_FIXTURES = ("lab_out", "broken_kernels")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the group marks into the node ids
def pytest_collection_modifyitems(config, items):
    """Tests marked ``npu`` need an Ascend NPU with CANN and SHMEM: skipped, with the reason the
    capability table gives, where the NPU target cannot run (combine_lab.capabilities). Tests
    that share a costly fixture (:data:`GROUPED_FIXTURES`) are one xdist group each."""
    for item in items:
        for name in GROUPED_FIXTURES:
            if name in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(name))
                break
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


# Collection imports the package, its libraries and every test module: objects that live to the end
# of the run, not garbage. The cyclic collector is off while they are made and they are frozen out of
# it after (pytest_collection_finish), so that none of the run's thousands of collections walks them
# again (the quick suite spent 8 s of 98 s in the collector before).
gc.disable()


def pytest_configure(config):
    """pytest-xdist's controller collects nothing (its workers do): its collector on again at once."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        gc.enable()


def pytest_collection_finish(session):
    """What collection made is frozen out of the cyclic collector, which is on again from here; its
    young generation is collected every 10,000 allocations, not 700 (fewer walks of what a test holds)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    gc.enable()


@pytest.fixture(autouse=True)
def _close_widgets():
    """ipywidgets keeps every widget it made until it is closed (its registry of instances), and with
    a tuning app's widgets everything they reach: its state, plans, frames and figures, test after
    test. Closed after each test that imported ipywidgets, so that they can be collected."""
    yield
    widgets = sys.modules.get("ipywidgets")
    if widgets is not None:
        widgets.Widget.close_all()


@pytest.fixture
def old_cann_npu(tmp_path, monkeypatch, twin_binary):
    """An NPU machine whose CANN (8.3) has no SDMA, faked: os.environ with CANN 8.3 and SHMEM, and
    build(target='npu') returning the twin's driver, so that classic really runs (as it would on
    an NPU) and the refusal of doubleplane is observable. Returns the targets build was asked for."""
    from npu_fakes import npu_env

    env = npu_env(tmp_path, cann="8.3.RC1", soc="Ascend910B3")
    for k, v in env.items():
        if k not in ("PATH", "COMBINE_LAB_BUILD_DIR"):
            monkeypatch.setenv(k, v)
    built = []
    monkeypatch.setattr(build_mod, "build", lambda target="cpu", **kw: built.append(target) or twin_binary)
    return built


def run_table(out: str) -> list[list[str]]:
    """The rows of the run table ``combine-lab run|compare`` printed in ``out``, each split on white
    space: the lines under the header that starts with ``case`` and names ``variant``, up to the
    first line that is not a row (the speed-up table, the files written)."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["case"] and "variant" in ln.split())
    rows = []
    for ln in lines[start + 1:]:
        if not ln.strip().startswith("shape_"):
            break
        rows.append(ln.split())
    return rows


def speedup_table(out: str) -> list[list[str]]:
    """The rows of compare's speed-up table in ``out`` (under the header that starts with ``case``
    and names ``repeats``), each as its cells: pandas right-aligns every cell to the end of its
    column title, so the cells are cut at the titles' ends (a verdict such as "within noise" holds
    a space)."""
    from combine_lab.cli.case_tables import SPEEDUP_COLUMNS

    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["case"] and "repeats" in ln.split())
    header, ends, at = lines[start], [], 0
    for title in SPEEDUP_COLUMNS:
        at = header.index(title, at) + len(title)
        ends.append(at)
    return [[ln[b:e].strip() for b, e in zip([0, *ends[:-1]], ends)]
            for ln in lines[start + 1:] if ln.strip().startswith("shape_")]
