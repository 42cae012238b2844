"""docs/ and the README: every citation of a docs page or section resolves, nothing cites the team's
private folder, the README stays a front page, the pages say what the code does (their tables
against the code's own constants and results), and the walkthrough renders as a page with its
outputs (``combine-lab docs``)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import LAB_EXTRA, host_processes, require, twin_segments

from combine_lab import CaseSpec, cli, make_case, plan
from combine_lab.lab.pages import heading_anchor, page_anchors
from combine_lab.model.machines import LINK_PARAMETERS, PARAMETERS, load_model
from combine_lab.planning.cores import kernel_constant
from combine_lab.formats.perf_csv import PERF_HEADER
from combine_lab.formats.sidecars import SIDECAR_KEYS
from combine_lab.run.selftest import BROKEN_KERNELS, REFSTYLE_BUGS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Where citations are looked for (every text file git lists under these, or found there).
SCANNED = ["combine_lab", "tests", "notebooks", "kernels", "host", "cmake", "benchmarks", "data", ".ci", "docs",
           "README.md", "CMakeLists.txt", "pyproject.toml", "environment.yml"]
#: A citation: ``docs/<page>.md`` or ``docs/<page>.md#<anchor>``, not inside a longer path.
CITATION = re.compile(r"(?<![\w/.:-])docs/([\w-]+\.md)(?:#([\w-]+))?")
#: A Markdown link's target.
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: What must not be cited: the team's shared folder and its sheets (spelled in parts, so that this
#: file does not hold them whole).
FORBIDDEN = ["../" + "shared", "shared" + "/docs", "combine-" + "facts", "npu-model-" + "facts", "facts" + " sheet"]
README_LIMIT = 12 * 1024


def scanned_files() -> list[Path]:
    """The text files under :data:`SCANNED`: as git lists them (tracked and untracked, not ignored),
    else every file there."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *SCANNED],
                             cwd=ROOT, capture_output=True, check=True).stdout.decode()
        paths = [ROOT / n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for s in SCANNED for p in ([ROOT / s] if (ROOT / s).is_file() else (ROOT / s).rglob("*"))]
    files = []
    for p in sorted(set(paths)):
        if not p.is_file():
            continue
        try:
            p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        files.append(p)
    return files


def citations() -> list[tuple[str, str, str | None]]:
    """(where, page, anchor or None) of every docs citation in the scanned files, and of every
    Markdown link to a local .md page in the README and docs/ pages."""
    found = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        for m in CITATION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append((f"{rel}:{line}", m.group(1), m.group(2)))
        if path.suffix == ".md" and (path.parent == DOCS or path == ROOT / "README.md"):
            for m in LINK.finditer(text):
                url = m.group(1)
                if re.match(r"^[a-z]+:", url) or url.startswith("#"):
                    if url.startswith("#"):
                        found.append((f"{rel}", str(path.relative_to(DOCS)) if path.parent == DOCS else "../README.md",
                                      url[1:]))
                    continue
                target, _, anchor = url.partition("#")
                resolved = (path.parent / target).resolve()
                if resolved.suffix == ".md":
                    try:
                        page = str(resolved.relative_to(DOCS))
                    except ValueError:
                        page = os.path.relpath(resolved, DOCS)
                    found.append((f"{rel} (link {url})", page, anchor or None))
    return found


def test_heading_anchors_are_githubs():
    assert heading_anchor("5. Kernel protocol") == "5-kernel-protocol"
    assert heading_anchor("10. Ascend C vector path") == "10-ascend-c-vector-path"
    assert heading_anchor("2. Pipes and the order between them") == "2-pipes-and-the-order-between-them"
    assert heading_anchor("The `classic` and **doubleplane** variants") == "the-classic-and-doubleplane-variants"
    assert heading_anchor("combine_lab") == "combine_lab"
    assert heading_anchor("10. The all_to_all baseline") == "10-the-all_to_all-baseline"
    assert heading_anchor("_emphasis_ and __strong__") == "emphasis-and-strong"
    assert heading_anchor("1. What runs where (twin, model, NPU)") == "1-what-runs-where-twin-model-npu"


def test_every_cited_docs_page_and_section_exists():
    """Code, tests, notebooks, the C++ and CMake files, the README and the pages themselves cite
    docs/ pages and sections that exist (the anchor of a heading, as GitHub makes it)."""
    found = citations()
    assert len(found) >= 150, len(found)  # the tree cites docs/ throughout; a scan that finds few is broken
    anchors: dict[str, list[str]] = {}
    missing = []
    for where, page, anchor in found:
        path = (DOCS / page).resolve()
        if not path.is_file():
            missing.append(f"{where}: docs/{page}: no such page")
            continue
        if anchor is None:
            continue
        if page not in anchors:
            anchors[page] = page_anchors(path)
        if anchor not in anchors[page]:
            missing.append(f"{where}: docs/{page}#{anchor}: no such section")
    assert not missing, "\n".join(missing)


def test_docs_sections_are_numbered_and_unique():
    """Every page has one title and numbered sections 1, 2, 3, ... in order: the stable anchors
    docs/README.md section 2 promises."""
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        titles = re.findall(r"^# (.+)$", text, re.M)
        numbers = [int(n) for n in re.findall(r"^## (\d+)\. ", text, re.M)]
        assert len(titles) == 1, (page.name, titles)
        assert numbers == list(range(1, len(numbers) + 1)) and numbers, (page.name, numbers)
        assert len(set(page_anchors(page))) == len(page_anchors(page)), page.name


def test_nothing_cites_the_private_shared_folder():
    """A clone has none of the team's private folder: no file of the tree points a reader there."""
    hits = []
    for path in scanned_files():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for word in FORBIDDEN:
                if word in line:
                    hits.append(f"{path.relative_to(ROOT)}:{i}: {word!r}: {line.strip()[:120]}")
    assert not hits, "\n".join(hits)


def test_readme_is_a_front_page():
    """Under 12 KB; the two commands exactly as CI and the tests run them; a link to every docs page."""
    data = (ROOT / "README.md").read_bytes()
    assert len(data) < README_LIMIT, f"README.md is {len(data)} bytes; keep it under {README_LIMIT}"
    text = data.decode()
    assert ("    bash .ci/setup && python3 -m combine_lab compare -pes 8 -bs 512 -h 4096 -topk 2 -expertPerPe 1 "
            "-type int32_t --routing trace:mixtral/arxiv/15 --perf --output-dir ~/combine_lab_runs/main\n") in text
    assert "    bash .ci/setup --test && python3 -m pytest -n 2 --dist loadgroup\n" in text
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name}" in text, f"README does not link docs/{page.name}"
    for word in ("`classic`", "`doubleplane`", "**MTE**", "**SDMA**", "CPU twin"):
        assert word in text, word
    from combine_lab.run.selftest import BROKEN_KERNELS
    assert f"self-test ({len(BROKEN_KERNELS)} broken kernels, each caught)" in text  # the count is the code's


def test_commands_the_readme_and_the_cli_page_show_parse():
    """Every complete ``combine-lab ...`` example line of the README and the docs pages (not a
    synopsis with ``[...]``, ``<...>`` or ``...``, nor a line of printed output) is a valid command
    line (parsed, not run)."""
    parser = cli.build_parser()
    lines = []
    for page in (ROOT / "README.md", *sorted(DOCS.glob("*.md"))):
        for line in page.read_text(encoding="utf-8").splitlines():
            m = re.match(r"^    (?:python3 -m combine_lab|combine-lab) (.+)$", line)
            if m and not any(c in line for c in ("...", "<", "[", "(", "#")):
                lines.append(m.group(1))
    assert len(lines) >= 9, lines
    for line in lines:
        parser.parse_args(line.split())  # argparse exits (status 2) on a flag that does not exist


# ------------------------------------------------------------- the pages against the code they describe

def _section(page: str, anchor: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    parts = re.split(r"^(?=## )", text, flags=re.M)
    return next(p for p in parts if p.startswith("## ") and heading_anchor(p.splitlines()[0][3:]) == anchor)


def test_formats_page_has_the_perf_header_and_the_sidecar_keys_of_the_code():
    perf = _section("formats.md", "3-perf-csv")
    assert "    " + ",".join(PERF_HEADER) + "\n" in perf
    sidecar = _section("formats.md", "5-sidecar")
    listed = [k for row in re.findall(r"^\| (`.+?`) \|", sidecar, re.M) for k in re.findall(r"`(\w+)`", row)]
    assert listed == SIDECAR_KEYS


def test_hardware_rules_list_every_broken_kernel_of_the_selftest():
    table = _section("hardware-rules.md", "12-broken-kernels")
    listed = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert listed == list(BROKEN_KERNELS) + list(REFSTYLE_BUGS) and len(listed) == 24 + 5


def test_timing_model_table_gives_the_values_of_the_model_files():
    table = _section("timing-model.md", "4-machines-and-parameters")
    rows = {m.group(1): m for m in re.finditer(r"^\| `(\w+)` \| ([\w/]+) \| ([\d.]+) \| ([\d.]+) \|", table, re.M)}
    assert sorted(rows) == sorted(PARAMETERS)
    a2, a3 = (load_model(m) for m in ("a2", "a3"))
    for name, m in rows.items():
        assert m.group(2) == PARAMETERS[name], name
        assert float(m.group(3)) == a2[name] and float(m.group(4)) == a3[name], name
        row = table[m.start():table.index("\n", m.start())]
        assumed = a2.params[name].assumed or a3.params[name].assumed
        assert ("| assumed" in row) == assumed, (name, row)
    links = re.findall(r"^\| `(\w+)` \| (a2|a3) \| [^|]+ \| (additive|max) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|",
                       table, re.M)
    want = [(c.name, m.name, c.form, *(f"{m[f'{c.name}.{p}']:g}" for p in LINK_PARAMETERS))
            for m in (a2, a3) for c in m.links]
    assert [(n, mach, form, *(f"{float(v):g}" for v in vals)) for n, mach, form, *vals in links] == want


def test_decision_rule_example_is_what_the_planner_plans():
    spec = CaseSpec(pes=8, bs=512, h=4096, topk=2, expert_per_pe=1, routing="trace:mixtral/arxiv/15")
    p = plan(make_case(spec), "doubleplane")
    seg = p.segments[p.segments["pe"] == 0]
    table = _section("decision-rule.md", "3-a-worked-example")
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \| (\d+) \| .*\| (MTE|SDMA) \|$", table, re.M)
    assert [tuple(r) for r in rows] == [(str(s), str(r), str(n), str(b), plane) for s, r, n, b, plane in
                                        seg[["segment", "src_rank", "token_count", "bytes", "plane"]].itertuples(index=False)]
    totals = p.totals.loc[0]
    assert f"PE 0 sends {int(totals.sdma_bytes)} B by SDMA and {int(totals.mte_bytes)} B by MTE" in " ".join(table.split())
    assert f"plan sends {int(p.totals.sdma_bytes.sum())} B by SDMA" in " ".join(table.split())


def test_protocol_ub_map_and_window_are_the_kernels():
    ub = _section("protocol.md", "8-ub-map-and-event-ids")
    kib = 1024
    assert kernel_constant("kUbSdmaBytes") == 64 and "| `[0, 64)` |" in ub
    assert kernel_constant("kUbStatusOff") == 64 and "| `[64, 96)` |" in ub
    assert kernel_constant("kUbMteOff") == kib and kernel_constant("kUbMteStageBytes") == 64 * kib
    assert "| `[1 KiB, 129 KiB)` |" in ub and "two buffers of 64 KiB" in ub
    assert kernel_constant("kReduceTile") == 2048 and "2048 elements" in ub
    assert (kernel_constant("kStageEvent0"), kernel_constant("kReduceEvent0")) == (2, 4)
    window = _section("protocol.md", "4-the-symmetric-window")
    assert kernel_constant("kStatusSlotBytes") == 64 and "slots of **64 B**" in window
    assert kernel_constant("kStatusWords") == 8 and "8 int32" in window


def test_cli_page_names_every_sub_command():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    text = _section("cli.md", "1-commands")
    for name in sub.choices:
        assert f"`combine-lab {name}" in text, name


# --------------------------------------------------------------------------------- the rendered pages

@pytest.mark.slow  # the whole walkthrough on the twin, then nbconvert (~12 s)
def test_docs_command_renders_the_walkthrough_with_its_outputs(tmp_path, twin_binary, capsys):
    require("nbformat", "nbconvert", "mistune", "papermill", "ipykernel", "yaml", reason=LAB_EXTRA)
    params = tmp_path / "params.yaml"
    params.write_text("warmup: 0\nloops: 1\nwalkthrough:\n  skew_h: 8192\n  skew_repeats: 1\n")
    out = tmp_path / "docs"
    before = twin_segments()
    assert cli.main(["docs", "--out", str(out), "--params", str(params)]) == 0, capsys.readouterr()
    assert not twin_segments() - before and not host_processes()
    page = (out / "walkthrough.html").read_text(encoding="utf-8")
    # the outputs a reader must see: figures, tables, and what the tiny case computes (seed 42)
    # matplotlib figures as PNG, the plan views as the SVG the app draws (nbconvert embeds both as images)
    assert page.count('src="data:image/png;base64,') + page.count('src="data:image/svg+xml;base64,') >= 6
    assert page.count("<table") >= 15
    assert "PE 0&#39;s ep_recv_count: [2, 4, 8, 11]" in page or "PE 0's ep_recv_count: [2, 4, 8, 11]" in page
    assert "exercise 1 (segment rows): correct - segment 2 of PE 0 spans 4 rows" in page
    assert "x_out PASS" in page and "Traceback" not in page
    # its docs citations link to the rendered pages, and the page links back to the docs
    assert '<a href="protocol.html#2-dispatch-layout">docs/protocol.md#2-dispatch-layout</a>' in page
    assert 'href="contents.html"' in page
    md = (out / "walkthrough.md").read_text(encoding="utf-8")
    figures = re.findall(r"!\[(?:png|svg)\]\((walkthrough_files/[\w.]+\.(?:png|svg))\)", md)
    assert len(figures) >= 6 and all((out / f).stat().st_size > 1000 for f in figures)
    assert "PE 0's ep_recv_count: [2, 4, 8, 11]" in md
    # the Markdown pages, with GitHub's anchors and links between the rendered pages
    protocol = (out / "protocol.html").read_text(encoding="utf-8")
    assert '<h2 id="5-kernel-protocol">' in protocol and 'href="decision-rule.html"' in protocol
    front = (out / "index.html").read_text(encoding="utf-8")
    assert 'href="npu.html#1-what-runs-where"' in front and 'href="contents.html"' in front
    assert {p.name for p in out.glob("*.html")} >= {"index.html", "contents.html", "walkthrough.html"} | {
        f"{p.stem}.html" for p in DOCS.glob("*.md") if p.name != "README.md"}
    said = capsys.readouterr().out
    assert "01_walkthrough: ok" in said and str(out / "walkthrough.html") in said


def test_docs_command_refuses_a_bad_output_folder_before_running(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["docs", "--out", str(blocker / "docs")]) == 2
    assert "--out" in capsys.readouterr().err


def test_docs_command_refuses_several_walkthrough_parameter_sets_before_running(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text("walkthrough:\n  - {seed: 1}\n  - {seed: 2}\n")
    assert cli.main(["docs", "--out", str(tmp_path / "docs"), "--params", str(params)]) == 2
    assert capsys.readouterr().err == ("combine-lab: error: params: walkthrough is given several parameter sets; "
                                       "the docs build one walkthrough page: give it one mapping\n")
    assert not (tmp_path / "docs").exists()
