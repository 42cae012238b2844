"""A run from a clean copy of the checkout writes nothing into it: ``git status --ignored`` stays
empty (docs/cli.md#1-commands: every command writes into its output flag or the current folder)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_compare_from_a_clean_copy_leaves_git_status_ignored_clean(tmp_path):
    """compare --perf -a plot on a timing model (nothing built or launched: cheap), run from another
    folder with the copy as the package: its files land in that folder, none in the copy (builds, your
    kernel's too, go to the cache folder: run.build.cache_root)."""
    clone = tmp_path / "clone"
    files = [f for f in _git(ROOT, "ls-files", "-co", "--exclude-standard").splitlines() if (ROOT / f).is_file()]
    for f in files:
        (clone / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, clone / f)
    _git(clone, "init", "-q")
    _git(clone, "add", "-A")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clean")
    here = tmp_path / "here"
    here.mkdir()
    env = {**os.environ, "PYTHONPATH": str(clone), "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"}
    env.pop("COMBINE_LAB_OUTPUT", None)
    cmd = [sys.executable, "-m", "combine_lab", "compare", "-pes", "2", "-bs", "8", "-h", "64", "-topk", "2",
           "-expertPerPe", "1", "--clock", "model:a3", "--perf", "-a", "plot"]
    res = subprocess.run(cmd, cwd=here, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert _git(clone, "status", "--ignored", "--porcelain") == ""
    assert sorted(p.name for p in (here / "output").iterdir()) == ["perf-model-a3"]  # no empty output/perf
    assert (here / "output" / "perf-model-a3" / "combine_compare_comm_only.png").is_file()
