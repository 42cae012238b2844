"""`combine-lab build --kernel-source DIR --main --target npu` builds the folder's own main.cpp by
bisheng (cmake/npu.cmake COMBINE_KERNEL_MAIN), as docs/own-kernel.md#8-on-an-npu says; it used to be
refused as twin-only while the NPU build made it."""

from __future__ import annotations

import shutil
from pathlib import Path

from combine_lab import cli


def test_build_main_for_the_npu_builds_the_folders_main_by_bisheng(tmp_path, capsys, monkeypatch):
    from combine_lab.run import build as build_mod
    root = Path(__file__).resolve().parents[2]
    folder = tmp_path / "combine_doubleplane"
    shutil.copytree(root / "tests" / "kernels" / "combine_refstyle", folder)
    fake = tmp_path / "built" / "driver"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    calls = []
    monkeypatch.setattr(build_mod, "build", lambda target, **k: calls.append((target, k["main"])) or fake)
    rc = cli.main(["build", "--kernel-source", str(folder), "--main", "--target", "npu", "--bin-dir",
                   str(tmp_path / "bin")])
    out = capsys.readouterr().out
    assert rc == 0 and calls == [("npu", "combine_doubleplane")]
    assert (f"driver: {tmp_path / 'bin' / 'combine_doubleplane'} ({folder / 'main.cpp'} and its kernel, built "
            "unchanged against CANN and SHMEM by bisheng)") in out
