"""Detection without hardware: the capability table on faked environments (no CANN, old CANN,
no SHMEM, torch_npu missing, npu-smi present or not), the dual-plane refusal on CANN < 9.0.0
(run_case, compare, the CLI), and `combine-lab doctor` line by line."""

from __future__ import annotations

import warnings

import pytest

from combine_lab import cli
from combine_lab.run.build import VariantRefused, require_npu_toolchain
from combine_lab.run.capabilities import Capability, detect, npu_variant_refusal
from combine_lab.run.toolchain import (CANN_FIX, SHMEM_FIX, SOC_FIX, Probes, TorchNpu, parse_npu_smi, parse_version,
                                       soc_arch)
from combine_lab.cli.doctor import DOCTOR_PACKAGES, doctor_lines
from combine_lab.harness import compare
from combine_lab.run.runner import run_case
from combine_lab.case.spec import CaseSpec

from conftest import run_table
from npu_fakes import NPU_SMI_A2, make_cann, make_shmem, npu_env

SDMA_FIX = "install CANN 9.0.0 or later (toolkit and ops-legacy packages for the board) and source its set_env.sh"
NPU_FIX = "run on a machine with Ascend NPUs and their driver (npu-smi info lists them)"
TORCH_NPU_FIX = "pip install torch_npu (the release matching torch and CANN)"
VERSIONS = {"combine_lab": "0.1.0", "numpy": "2.0.1", "pandas": "2.2.2", "torch": "2.13.0+cpu"}


def probes(torch_npu: TorchNpu | None = None, versions: dict | None = None) -> Probes:
    v = dict(VERSIONS if versions is None else versions)
    if torch_npu is not None:
        v["torch_npu"] = torch_npu.version
    return Probes(torch_npu=lambda: torch_npu, package_version=v.get, python_version=lambda: "3.11.7")


def test_versions_and_socs():
    assert parse_version("9.0.0") == (9, 0, 0)
    assert parse_version("8.3.RC1") == (8, 3, 0)
    assert parse_version("9.0.0.beta1") == (9, 0, 0)
    assert parse_version("8.2.RC1.alpha003") == (8, 2, 0)
    assert parse_version("10.1") == (10, 1, 0)
    assert parse_version("RC1") is None
    assert soc_arch("Ascend910B3") == ("dav-c220", 50)       # A2
    assert soc_arch("Ascend910_9391") == ("dav-c220", 50)    # A3
    assert soc_arch("Ascend950PR") == ("dav-c310", 1000)     # Ascend950
    assert soc_arch("Ascend310P3") is None
    assert parse_npu_smi(NPU_SMI_A2) == [(0, "Ascend910B3"), (1, "Ascend910B3")]


def test_nothing_installed(tmp_path):
    caps = detect(npu_env(tmp_path, cann=None, shmem=False), probes())
    assert caps["cann"] == Capability("cann", False, "not found (ASCEND_HOME_PATH is not set)", CANN_FIX)
    assert caps["shmem"] == Capability("shmem", False, "not found (neither SHMEM_HOME nor SHMEM_HOME_PATH is set)", SHMEM_FIX)
    assert caps["sdma"] == Capability("sdma", False, "needs CANN 9.0.0 or later", SDMA_FIX)
    assert caps["torch_npu"] == Capability("torch_npu", False, "not importable", TORCH_NPU_FIX)
    assert caps["npu"] == Capability("npu", False, "neither torch_npu nor npu-smi is here (no Ascend driver)",
                                     NPU_FIX)
    assert caps["soc"] == Capability("soc", False, "unknown (no NPU visible, COMBINE_NPU_SOC not set)", SOC_FIX)
    assert caps.variants("npu") == {"classic": CANN_FIX, "doubleplane": CANN_FIX}
    assert caps.baselines() == {"gloo": "", "hccl": TORCH_NPU_FIX}
    assert "npu" not in caps.targets()


def test_old_cann_has_no_sdma_and_refuses_doubleplane(tmp_path):
    env = npu_env(tmp_path, cann=None, npu_smi=NPU_SMI_A2)
    env["ASCEND_HOME_PATH"] = str(make_cann(tmp_path / "cann", "8.3.RC1", version_file="compiler"))
    caps = detect(env, probes())
    assert caps["cann"] == Capability("cann", True, f"8.3.RC1 at {tmp_path}/cann")
    assert caps["sdma"] == Capability("sdma", False, "CANN 8.3.RC1 is older than 9.0.0", SDMA_FIX)
    assert caps.targets()[-1] == "npu"
    assert caps.variants("npu") == {"classic": "", "doubleplane": SDMA_FIX}
    assert npu_variant_refusal("classic", env) is None
    assert npu_variant_refusal("doubleplane", env) == (
        "variant=doubleplane on target=npu: refused: the dual-plane combine needs SDMA, which needs CANN 9.0.0 or "
        f"later (found CANN 8.3.RC1 at {tmp_path}/cann); the classic variant still runs")


def test_cann_9_has_sdma_and_everything_runs(tmp_path):
    env = npu_env(tmp_path, npu_smi=NPU_SMI_A2)
    caps = detect(env, probes())
    assert caps["cann"] == Capability("cann", True, f"9.0.0 at {tmp_path}/cann")
    assert caps["shmem"] == Capability("shmem", True, f"1.0.0 at {tmp_path}/shmem/shmem")
    assert caps["sdma"] == Capability("sdma", True, "CANN 9.0.0 >= 9.0.0")
    assert caps["npu"] == Capability("npu", True, "2 visible (npu-smi)")  # torch_npu missing: npu-smi
    assert caps["soc"] == Capability("soc", True, "Ascend910B3 (dav-c220, 50 cycles/us)")
    assert caps.targets()[-1] == "npu"
    assert caps.variants("npu") == {"classic": "", "doubleplane": ""}
    assert npu_variant_refusal("doubleplane", env) is None


def test_ascend950_refuses_sdma_with_shmems_reason(tmp_path):
    """SHMEM's examples/sdma/README.md: Ascend950 has SDMA get only; the kernel sends by SDMA put."""
    env = npu_env(tmp_path, npu_smi=NPU_SMI_A2.replace("910B3", "950PR"))
    why = "SHMEM does not support SDMA put on Ascend950PR (Ascend950: SDMA get only, hicann/shmem " \
          "examples/sdma/README.md)"
    fix = "run doubleplane on an A2/A3 NPU (Ascend910B*, Ascend910_93*); classic runs on this SoC"
    caps = detect(env, probes())
    assert caps["soc"] == Capability("soc", True, "Ascend950PR (dav-c310, 1000 cycles/us)")
    assert caps["sdma"] == Capability("sdma", False, why, fix)
    assert caps.variants("npu") == {"classic": "", "doubleplane": fix}
    refused = f"variant=doubleplane on target=npu: refused: the dual-plane combine needs SDMA put, and {why}; " \
              "the classic variant still runs"
    assert npu_variant_refusal("doubleplane", env) == refused  # the SoC from npu-smi
    assert npu_variant_refusal("classic", env) is None
    assert npu_variant_refusal("doubleplane", dict(env, COMBINE_NPU_SOC="Ascend910B4")) is None  # the override
    p = probes()
    lines = doctor_lines(caps, {name: p.package_version(name) for name in DOCTOR_PACKAGES})
    assert lines[9:11] == [f"  SDMA        no  {why}", f"                  fix: {fix}"]
    assert f"  npu doubleplane  no   fix: {fix}" in lines
    assert require_npu_toolchain(env).sdma is False  # built MTE-only
    assert require_npu_toolchain(env, soc="Ascend910_9391").sdma is True


def test_cann_problems(tmp_path):
    env = npu_env(tmp_path, cann=None)
    env["ASCEND_HOME_PATH"] = str(tmp_path / "gone")
    assert detect(env, probes())["cann"] == Capability("cann", False, f"ASCEND_HOME_PATH={tmp_path}/gone: "
                                                                      "no such folder", CANN_FIX)
    env["ASCEND_HOME_PATH"] = str(make_cann(tmp_path / "noversion", None))
    row = detect(env, probes())["cann"]
    assert row.detail == (f"cannot read the CANN version from {tmp_path}/noversion/<arch>-linux/"
                          f"ascend_toolkit_install.info or {tmp_path}/noversion/compiler/version.info")
    for variant in ("classic", "doubleplane"):  # without a usable CANN nothing runs, and the reason says so
        assert npu_variant_refusal(variant, env) == (
            f"variant={variant} on target=npu: refused: no usable CANN here ({row.detail}), and every variant needs "
            f"it: {CANN_FIX}")


def test_shmem_layouts_and_problems(tmp_path):
    env = npu_env(tmp_path, shmem=False)
    env["SHMEM_HOME"] = str(tmp_path / "nothing")
    row = detect(env, probes())["shmem"]
    assert row == Capability("shmem", False, f"SHMEM_HOME={tmp_path}/nothing: no include/shmem.h and "
                                             "lib/libshmem.so there or in its shmem/ or install/shmem/ folder",
                             SHMEM_FIX)
    make_shmem(tmp_path / "src", version="1.2.0", layout="source")
    env.pop("SHMEM_HOME")
    env["SHMEM_HOME_PATH"] = str(tmp_path / "src")  # what SHMEM's set_env.sh exports
    assert detect(env, probes())["shmem"] == Capability("shmem", True, f"1.2.0 at {tmp_path}/src/install/shmem")


def test_torch_npu_counts_npus_and_names_the_soc(tmp_path):
    env = npu_env(tmp_path, npu_smi=NPU_SMI_A2)  # npu-smi is ignored when torch_npu imports
    caps = detect(env, probes(TorchNpu("2.6.0.post1", 16, "Ascend950PR")))
    assert caps["torch_npu"] == Capability("torch_npu", True, "2.6.0.post1")
    assert caps["npu"] == Capability("npu", True, "16 visible (torch_npu)")
    assert caps["soc"] == Capability("soc", True, "Ascend950PR (dav-c310, 1000 cycles/us)")
    assert caps.baselines() == {"gloo": "", "hccl": ""}
    caps = detect(env, probes(TorchNpu("2.6.0.post1", 0, "")))
    assert caps["npu"] == Capability("npu", False, "torch_npu sees no NPU (torch.npu.device_count() == 0)", NPU_FIX)


def test_npu_smi_failing_and_soc_override(tmp_path):
    env = npu_env(tmp_path, npu_smi="no table here\n", soc="Ascend310P3")
    caps = detect(env, probes())
    assert caps["npu"] == Capability("npu", False, "`npu-smi info` lists no NPU", NPU_FIX)
    assert caps["soc"] == Capability("soc", False, "Ascend310P3: not an A2/A3 (Ascend910B*, Ascend910_93*) or "
                                                   "Ascend950 SoC", SOC_FIX)
    assert detect(dict(env, PATH=str(tmp_path)), probes(versions={}))["torch"] == Capability(
        "torch", False, "not installed", "bash .ci/setup --baseline (CPU-only torch)")


def test_doctor_screen_line_by_line(tmp_path):
    env = npu_env(tmp_path, cann="8.3.RC1", npu_smi=NPU_SMI_A2, twin_tools=True)
    p = probes()
    lines = doctor_lines(detect(env, p), {name: p.package_version(name) for name in DOCTOR_PACKAGES})
    build_now = "python3 -c 'from combine_lab.run.build import build; build()'"
    assert lines == [
        "combine-lab doctor: what can run here",
        "  python      3.11.7",
        "  packages    combine_lab 0.1.0, numpy 2.0.1, pandas 2.2.2, torch 2.13.0+cpu, torch_npu -",
        f"  twin        yes clang++ {tmp_path}/bin/clang++, cmake {tmp_path}/bin/cmake",
        f"  twin build  no  not built ({tmp_path}/builds/cpu)",
        f"                  fix: built on the first run, or now: {build_now}",
        f"  CANN        yes 8.3.RC1 at {tmp_path}/cann",
        f"  SHMEM       yes 1.0.0 at {tmp_path}/shmem/shmem",
        "  SDMA        no  CANN 8.3.RC1 is older than 9.0.0",
        f"                  fix: {SDMA_FIX}",
        "  NPUs        yes 2 visible (npu-smi)",
        "  SoC         yes Ascend910B3 (dav-c220, 50 cycles/us)",
        "can run here (target variant: status):",
        "  cpu classic      yes",
        "  cpu doubleplane  yes",
        "  npu classic      yes",
        f"  npu doubleplane  no   fix: {SDMA_FIX}",
        "  cpu --baseline hccl (gloo stand-in) yes",
        f"  npu --baseline hccl no   fix: {TORCH_NPU_FIX}",
    ]
    assert len(lines) <= 24  # one screen


def test_doctor_command_runs_here(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "combine-lab doctor: what can run here"
    assert out[-6:-4] == ["  cpu classic      yes", "  cpu doubleplane  yes"]


# ---- the doubleplane variant refused on CANN < 9.0.0, classic still runs (fixture old_cann_npu: conftest) ----

SMALL = CaseSpec(pes=2, bs=4, h=32, topk=2, expert_per_pe=2)
REFUSED = ("variant=doubleplane on target=npu: refused: the dual-plane combine needs SDMA, which needs CANN 9.0.0 "
           "or later (found CANN 8.3.RC1 at {}/cann); the classic variant still runs")


def test_run_case_refuses_doubleplane_before_anything(tmp_path, old_cann_npu, no_leaks):
    with pytest.raises(VariantRefused) as e:
        run_case(SMALL, "doubleplane", target="npu", work_dir=tmp_path / "case")
    assert str(e.value) == REFUSED.format(tmp_path)
    assert old_cann_npu == [] and not (tmp_path / "case").exists()  # nothing built, written or launched


def test_compare_keeps_classic(tmp_path, old_cann_npu, no_leaks):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = compare(SMALL, target="npu")
    assert list(res) == ["classic"] and res["classic"].check_ok
    assert [str(x.message) for x in w] == [REFUSED.format(tmp_path)]
    assert old_cann_npu == ["npu"]


def test_cli_compare_and_run_on_old_cann(tmp_path, old_cann_npu, capsys, no_leaks):
    args = ["-pes", "2", "-bs", "4", "-h", "32", "-topk", "2", "-expertPerPe", "2", "--warmup", "0", "--loops", "1",
            "--target", "npu"]
    assert cli.main(["compare", *args]) == 0
    out = capsys.readouterr()
    table = run_table(out.out)
    assert [t[2:4] for t in table] == [["classic", "PASS"], ["doubleplane", "REFUSED"]]
    assert out.err.strip() == "combine-lab: " + REFUSED.format(tmp_path)
    assert cli.main(["run", *args, "--variant", "doubleplane"]) == 2
    assert capsys.readouterr().err.strip() == "combine-lab: error: " + REFUSED.format(tmp_path)


def test_builds_go_to_the_users_cache_folder_never_the_checkout(tmp_path):
    """Issue 30 item 6: the default build folder was ``<checkout>/build/<target>``."""
    import hashlib
    from pathlib import Path

    from combine_lab.run.build import cache_root, default_build_dir, kernel_build_dir, source_root
    from combine_lab.run.kernel_source import kernel_source
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    tag = hashlib.sha256(str(source_root()).encode()).hexdigest()[:12]
    assert cache_root(env) == tmp_path / "cache" / "combine_lab" / f"builds-{tag}"
    assert default_build_dir("cpu", env=env) == cache_root(env) / "cpu"
    assert default_build_dir("npu", "Ascend910B3", env=env) == cache_root(env) / "npu-Ascend910B3"
    assert default_build_dir("cpu", env={**env, "COMBINE_LAB_BUILD_DIR": str(tmp_path / "b")}) == tmp_path / "b" / "cpu"
    home = default_build_dir("cpu", env={})
    assert home == Path.home() / ".cache" / "combine_lab" / f"builds-{tag}" / "cpu"
    assert source_root() not in home.parents
    folder = kernel_build_dir(kernel_source(source_root() / "tests" / "kernels" / "combine_refstyle"))
    assert source_root() not in folder.parents and folder.parent == default_build_dir("cpu").parent


def test_a_driver_build_does_not_vouch_for_a_stale_probe(tmp_path, monkeypatch):
    """The driver's build (cmake's "all") does not build probe_host, yet its stamp vouched for it:
    a probe_host from older sources ran ("printed no build line"). One stamp per program now."""
    from combine_lab.run import build as b
    fp = ["v1"]
    built: list = []

    def fake_logged(cmd, cwd, log):  # cmake: configure does nothing, a build makes what it is asked for
        if "--build" in cmd:
            names = [cmd[cmd.index("--target") + 2]] if "--target" in cmd else [b.BINARY_NAME]
            for n in names:
                (tmp_path / n).write_text(fp[0])
                built.append((n, fp[0]))
    monkeypatch.setattr(b, "_logged", fake_logged)
    monkeypatch.setattr(b, "_fingerprint", lambda root, target, config="": fp[0])
    monkeypatch.setenv("COMBINE_LAB_STORE", "off")  # its fake executables must not be stored, nor any fetched
    b.build("cpu", build_dir=tmp_path, program="probe_host")
    fp[0] = "v2"  # a source changed
    b.build("cpu", build_dir=tmp_path)  # the driver: rebuilt, the probe not
    assert (tmp_path / "probe_host").read_text() == "v1"
    b.build("cpu", build_dir=tmp_path, program="probe_host")  # so the probe is rebuilt when asked for
    assert (tmp_path / "probe_host").read_text() == "v2"
    assert built == [("probe_host", "v1"), (b.BINARY_NAME, "v2"), ("probe_host", "v2")]
    b.build("cpu", build_dir=tmp_path, program="probe_host")  # and then reused
    assert len(built) == 3 and b.build_status("cpu", tmp_path)[0] == "up to date"
