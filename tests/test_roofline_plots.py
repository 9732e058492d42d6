"""The figures of spec/roofline.md: regenerated from the tables, they must equal the
committed files byte for byte (`llm-ref roofline --plots spec/img` rewrites
them), parse as SVG, and show what they claim."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ref.roofline.hardware import HARDWARE
from ref.roofline.plots import PREFERENCE, batch_sweep_svg, main, roofline_svg

IMG = Path(__file__).resolve().parents[1] / "spec" / "img"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("name, draw", [("roofline.svg", roofline_svg), ("batch_sweep.svg", batch_sweep_svg)])
def test_committed_figure_is_the_regenerated_one(name, draw):
    text = draw()
    assert text == draw()  # deterministic
    assert (IMG / name).read_text(encoding="utf-8") == text, \
        f"spec/img/{name} is stale: run `llm-ref roofline --plots spec/img`"


def test_roofline_marks_every_ridge_and_the_three_phases():
    root = ET.fromstring(roofline_svg())
    rated = [name for name, hw in HARDWARE.items() if any(f in hw.flops for f in PREFERENCE)]
    assert len(list(root.iter(f"{SVG}circle"))) == len(rated)
    assert len([r for r in root.iter(f"{SVG}rect") if r.get("width") == "8"]) == 3
    titles = " ".join(t.text or "" for t in root.iter(f"{SVG}title"))
    assert all(name in titles for name in rated)
    text = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert all(name in text for name in set(HARDWARE) - set(rated))  # named as without a figure


def test_batch_sweep_has_two_lines_per_series():
    root = ET.fromstring(batch_sweep_svg())
    assert len(list(root.iter(f"{SVG}polyline"))) == 2 * 4  # tokens/s and memory; 2 models x 2 KV formats
    ends = [t.text for c in root.iter(f"{SVG}circle") for t in c.iter(f"{SVG}title")]
    assert len(ends) == 4 and all("sequences fit" in e for e in ends)  # each line ends where the batch stops fitting


def test_main_writes_both_files(tmp_path):
    written = main(tmp_path / "img")
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == ["batch_sweep.svg", "roofline.svg"]
    assert sorted(p.name for p in written) == ["batch_sweep.svg", "roofline.svg"]
