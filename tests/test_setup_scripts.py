""".ci/setup and .ci/run, run against stand-ins for pip, apt and pytest: the main setup installs what
the main job and the lab need and nothing else, the baseline's torch is CPU-only and only on
request, the lab's kernel is registered in the environment (not user-wide), setup says what it
does, and CI installs everything the tests need and fails when pytest collects nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import combine_lab

ROOT = Path(__file__).resolve().parents[1]

#: python3 / $PYTHON for the scripts: pip, ipykernel and pytest are logged and answered; anything
#: else (setup's own small Python snippets) runs on the real interpreter.
FAKE_PYTHON = """#!/bin/bash
echo "$*" >> "$FAKE_LOG"
case "$1 $2" in
  "-m pip")
    if [ "$3" = config ]; then echo "global.find-links='$FAKE_LINKS'"; exit 0; fi
    echo "Requirement already satisfied: numpy in /x"; echo "Successfully installed combine_lab"; exit 0 ;;
  "-m ipykernel") echo "Installed kernelspec combine-lab in $FAKE_PREFIX/share/jupyter/kernels/combine-lab"; exit 0 ;;
  "-m pytest") echo "pytest with COMBINE_LAB_REQUIRE_EXTRAS=$COMBINE_LAB_REQUIRE_EXTRAS" >> "$FAKE_LOG"
               echo "no tests ran in 0.01s"; exit "${FAKE_PYTEST_STATUS:-0}" ;;
esac
exec "$REAL_PYTHON" "$@"
"""


@pytest.fixture
def fake(tmp_path):
    """A PATH where python3 is FAKE_PYTHON and the C++ tools exist, and apt-get / sudo fail the
    test if called; returns a function running a script, giving (status, stdout, logged calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    for tool in ("g++", "cmake", "ninja", "clang++", "chromium", "pyenv"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
    for tool in ("apt-get", "sudo"):  # fail unless a test says otherwise (FAKE_APT_OK=1)
        (bin_dir / tool).write_text(f"#!/bin/sh\necho \"{tool} $*\" >> \"$FAKE_LOG\"\n[ \"$FAKE_APT_OK\" = 1 ]\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    links = tmp_path / "wheels"
    links.mkdir()
    log = tmp_path / "calls.log"

    def run(script: str, *args: str, **env: str):
        log.write_text("")
        full = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path),
                "FAKE_LOG": str(log), "FAKE_LINKS": str(links), "FAKE_PREFIX": str(tmp_path / "env"),
                "REAL_PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", **env}
        # (no bytecode: the scripts' own `import combine_lab` must not write into the checkout)
        proc = subprocess.run(["bash", str(ROOT / script), *args], env=full, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        calls = [line for line in log.read_text().splitlines() if not line.startswith(("-c ", "- "))]
        return proc.returncode, proc.stdout + proc.stderr, calls

    run.links = links
    return run


PIP = "-m pip install --disable-pip-version-check --progress-bar off"
KERNEL = "-m ipykernel install --sys-prefix --name combine-lab --display-name Python 3 (combine_lab)"


def test_main_setup_installs_the_package_and_the_lab_and_nothing_else(fake, tmp_path):
    """The field report: a fresh setup installed the CUDA build of torch with about 18 nvidia packages
    (5.9 GB, about 5.5 minutes of silent pip) for a baseline the main job never runs."""
    status, out, calls = fake(".ci/setup")
    assert status == 0, out
    assert calls == [f"{PIP} -e .[lab]", KERNEL]  # no torch, no test tools, no user-wide kernel
    lines = out.splitlines()
    assert lines[0] == "setup [0 s]: C++ toolchain present (g++, clang, cmake, ninja)"
    assert lines[1].startswith("setup [") and lines[1].endswith(
        "s]: pip install -e .[lab] (the package; lab: JupyterLab, papermill, ipywidgets, voila)")
    assert "Requirement already satisfied" not in out and "Successfully installed combine_lab" in out
    assert f"Jupyter kernel combine-lab registered in {tmp_path}/env/share/jupyter/kernels/combine-lab" in out
    assert lines[-1].endswith(f"s]: done: combine-lab {combine_lab.__version__} in {sys.prefix}")


def test_test_setup_adds_the_test_extra(fake):
    status, out, calls = fake(".ci/setup", "--test")
    assert status == 0, out
    assert calls == [f"{PIP} -e .[lab,test,cluster]", KERNEL]
    assert "C++ toolchain present (g++, clang, cmake, ninja; chromium for the browser tests)" in out
    assert "pip install -e .[lab,test,cluster] (the package, pytest, playwright, dask; lab: JupyterLab, papermill, ipywidgets, voila)" \
        in out


def test_test_setup_installs_debians_chromium_when_missing(fake):
    """The browser tests drive Debian's chromium: installed with apt, never Playwright's own download."""
    status, out, calls = fake(".ci/setup", "--test", CHROMIUM="no-such-chromium", FAKE_APT_OK="1")
    assert status == 0, out
    assert "apt-get install chromium (the C++ toolchain of the CPU twin, chromium for the tests)" in out
    apt = [c for c in calls if c.startswith(("apt-get", "sudo"))]
    assert apt[-1].endswith("apt-get install -y -qq chromium") and "playwright install" not in " ".join(calls)
    status, out, calls = fake(".ci/setup", CHROMIUM="no-such-chromium")  # the main setup needs no browser
    assert status == 0 and not [c for c in calls if c.startswith(("apt-get", "sudo"))], calls


def test_baseline_setup_installs_a_local_cpu_only_torch_first(fake):
    for name in ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",  # PyPI's CUDA build: never
                 "torch-2.15.0+cpu-cp39-cp39-manylinux_2_28_x86_64.whl"):  # another Python: never
        (fake.links / name).write_text("")
    status, out, calls = fake(".ci/setup", "--test", "--baseline", PYTHON="python3")
    assert status == 0, out
    want = "torch==2.13.0+cpu" if sys.version_info[:2] == (3, 11) else None
    if want is None:
        pytest.skip("the fake wheels are for Python 3.11")
    assert calls[0] == "-m pip config list"
    assert calls[1:] == [f"{PIP} {want}", f"{PIP} -e .[lab,test,cluster,baseline]", KERNEL]
    assert f"pip install {want} (CPU-only torch for the baseline, a local wheel)" in out


def test_baseline_setup_without_a_local_wheel_uses_the_cpu_index(fake):
    status, out, calls = fake(".ci/setup", "--baseline")
    assert status == 0, out
    assert calls[1:] == [f"{PIP} torch --index-url https://download.pytorch.org/whl/cpu", f"{PIP} -e .[lab,baseline]",
                         KERNEL]


def test_setup_refuses_an_unknown_option(fake):
    status, out, calls = fake(".ci/setup", "--everything")
    assert status == 2 and "setup: unknown option --everything (use --test, --baseline)" in out and calls == []


def test_ci_installs_what_the_tests_need_and_fails_when_pytest_collects_nothing(fake):
    status, out, calls = fake(".ci/run", FAKE_PYTEST_STATUS="0")
    assert status == 0, out
    # the whole suite, an extra that did not install failing its tests rather than skipping them
    assert calls[-2:] == ["-m pytest -q -p no:cacheprovider -n 2 --dist loadgroup", "pytest with COMBINE_LAB_REQUIRE_EXTRAS=1"]
    assert f"{PIP} -e .[lab,test,cluster,baseline]" in calls and KERNEL in calls
    status, out, calls = fake(".ci/run", FAKE_PYTEST_STATUS="5")  # exit 5: no tests collected
    assert status == 1 and "CI: pytest collected no tests" in out
    status, _, _ = fake(".ci/run", FAKE_PYTEST_STATUS="1")
    assert status == 1
