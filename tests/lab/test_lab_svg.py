"""The app's live figures (SVG): what they show is the plan's, with titles, labels and units, and
a grid of many cells is an exact one-pixel-per-cell image."""

from __future__ import annotations

import base64
import io
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from matplotlib import image as mpimg

from combine_lab import CaseSpec, make_case, plan
from combine_lab.errors import ParameterError
from combine_lab.lab import svg
from combine_lab.model.machines import load_model
from combine_lab.model.stream import case_rows
from combine_lab.model.suggest import suggest

NS = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)  # well-formed XML, or this raises
    assert root.tag == f"{NS}svg" and "cl-figure" in root.get("class")
    assert int(root.get("width")) <= svg.WIDTH and root.find(f"{NS}title").text
    return root


def texts(root: ET.Element) -> str:
    return " | ".join("".join(t.itertext()) for t in root.iter(f"{NS}text"))


@pytest.fixture(scope="module")
def small():
    case = make_case(CaseSpec(pes=2, bs=64, h=8192, topk=2, expert_per_pe=2, routing="hot-expert:0.5"))
    return case, plan(case)


def test_png_cells_is_an_exact_png():
    rgb = np.random.default_rng(1).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    back = mpimg.imread(io.BytesIO(svg.png_cells(rgb)), format="png")
    assert back.shape[:2] == (5, 7) and np.array_equal(np.round(back[..., :3] * 255).astype(np.uint8), rgb)


def test_an_svg_figure_is_shown_and_saved_as_the_same_drawing(small, tmp_path):
    pytest.importorskip("resvg_py", reason="the lab extra (resvg-py) renders the PNG")
    _, p = small
    fig = svg.SvgFigure(svg.segment_map_svg(p, "int32_t"), "segment map")
    assert fig._repr_svg_() == fig.svg and fig.size[0] == svg.WIDTH
    png = fig.png(zoom=1.5)
    img = mpimg.imread(io.BytesIO(png), format="png")
    w, h = fig.size
    assert img.shape[:2] == (round(1.5 * h), round(1.5 * w))
    assert float(img[..., :3].std()) > 0.05  # drawn, not blank: cells, text and frame
    fig.savefig(tmp_path / "m.svg", format="svg")
    assert (tmp_path / "m.svg").read_text() == fig.svg
    with pytest.raises(ParameterError, match="format='pdf'"):
        fig.savefig(tmp_path / "m.pdf", format="pdf")


def test_segment_map_panels_show_the_plan(small):
    case, p = small
    root = parse(svg.segment_map_svg(p, "int32_t"))
    assert "cl-segment-map" in root.get("class") and root.get("data-h") == "8192"
    words = texts(root)
    assert "h 8192 int32_t" in words and "SDMA floor 2 MiB" in words
    assert "PE 0" in words and "PE 1" in words and "src_rank" in words and "local_expert" in words
    assert "payload (MiB)" in words  # the colour bar's unit
    rows = p.segments["token_count"].to_numpy()
    cells = [t for t in root.iter(f"{NS}text") if t.get("class") == "cl-count"]
    assert sorted(int(t.text) for t in cells) == sorted(int(r) for r in rows if r)
    outlined = [r for r in root.iter(f"{NS}rect") if r.get("class") == "cl-sdma-cell"]
    assert len(outlined) == int((p.segments["plane"] == "SDMA").sum()) == int(root.get("data-sdma-segments")) > 0
    for pe in range(p.pes):  # each panel outlines exactly its PE's SDMA segments
        assert sum(r.get("data-pe") == str(pe) for r in outlined) == len(p.sdma_segments(pe))


def test_segment_map_of_many_pes_is_one_pixel_per_cell():
    case = make_case(CaseSpec(pes=16, bs=64, h=4096, topk=4, expert_per_pe=4, routing="zipf:1.2"))
    p = plan(case, min_sdma_bytes=0)
    root = parse(svg.segment_map_svg(p))
    (img,) = root.iter(f"{NS}image")
    assert "pixelated" in img.get("style")
    # what the app's hover needs, on the image (decoded and checked in tests/lab/test_lab_segments.py)
    from combine_lab.lab.segments import segment_cells_data
    assert "cl-cells" in img.get("class") and {k: img.get(f"data-{k}") for k in segment_cells_data(p)} == \
        segment_cells_data(p)
    assert img.get("data-pes") == "16" and img.get("data-epp") == "4" and img.get("data-floor") == "0"
    data = base64.b64decode(img.get("href").split(",", 1)[1])
    assert mpimg.imread(io.BytesIO(data), format="png").shape[:2] == (16 * 4, 16)
    words = texts(root).replace(" | ", " ")  # colour bar labels wrap onto two lines
    assert "MTE segments (KiB)" in words and f"SDMA segments (KiB): {int((p.segments.plane == 'SDMA').sum())}" in words


def test_plane_bytes_shows_shares_thresholds_and_units(small):
    _, p = small
    root = parse(svg.plane_bytes_svg(p))
    share = p.totals["sdma_bytes"].sum() / (p.totals["mte_bytes"] + p.totals["sdma_bytes"]).sum()
    assert float(root.get("data-sdma-share")) == pytest.approx(share, abs=1e-4)
    words = texts(root)
    for label in (f"SDMA share {100 * share:.1f} %", "payload (MiB)", "segment payload (MiB)", "PE (expert owner, sends)",
                  "remote average (must be exceeded)", "SDMA floor 2,097,152 B", "largest remote segment"):
        assert label in words, label


def test_modelled_floors_marks_the_floor_and_says_modelled(small):
    case, p = small
    model = load_model("a3")
    s = suggest(case_rows(case, model.soc), model)
    classic = float(s.curve["modelled_us"].iloc[-1])
    root = parse(svg.modelled_floors_svg(s.curve, classic, 2 << 20, 123.5, model.caption(),
                                         best=int(s.best["threshold_bytes"])))
    words = texts(root)
    assert "modelled, not measured" in words and "measured on" not in words
    assert "modelled on a3" in words and "assumed parameters" in words
    assert "modelled comm_only (us)" in words and "SDMA floor min_sdma_bytes" in words and "never" in words
    assert "2 MiB" in words and f"classic (MTE only): {classic:,.1f} us" in words
    assert root.get("data-floor") == str(2 << 20) and root.get("data-floor-us") == "123.500"
    assert len([c for c in root.iter(f"{NS}text") if c.get("class") == "cl-best"]) == 1
    # without a curve: the classic time and the current floor only
    root = parse(svg.modelled_floors_svg(None, classic, 0, 100.0, model.caption()))
    assert not [pth for pth in root.iter(f"{NS}path") if pth.get("class") == "cl-curve"]
    assert re.search(r"current floor 0 B: 100\.0 us", texts(root))
    # no floor of its own: no marker; a what-if curve drawn beside the kernel's
    s = suggest(case_rows(case, model.soc), model, what_if="segment")
    root = parse(svg.modelled_floors_svg(s.curve, classic, None, None, model.caption(), what_if="segment"))
    assert not [c for c in root.iter(f"{NS}circle") if c.get("class") == "cl-current"]
    assert [pth.get("class") for pth in root.iter(f"{NS}path")] == ["cl-what-if", "cl-curve"]
    assert "what-if: one SDMA call per segment, no layout step" in texts(root) and "current floor" not in texts(root)


def test_tick_labels_write_every_tick_exactly_in_one_format():
    """Tryout: ticks at 2.5 and 7.5 were written "2" and "8" (the step's decimals, not the ticks')."""
    from combine_lab.lab.svg_parts import _tick_labels
    assert [lab for _, lab in _tick_labels([0.0, 2.5, 5.0, 7.5, 10.0])] == ["0.0", "2.5", "5.0", "7.5", "10.0"]
    assert [lab for _, lab in _tick_labels([0.0, 4000.0, 8000.0, 12000.0])] == ["0", "4,000", "8,000", "12,000"]
    assert [lab for _, lab in _tick_labels([0.0, 0.05, 0.1])] == ["0.00", "0.05", "0.10"]
