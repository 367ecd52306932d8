"""report.html of a real twin run, rendered by headless Chromium: the frontier is there and drawn
(the probe: tests/support/chromium.py)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from tests.support.chromium import chromium_path, png_size, probe_frontier

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_path()


def test_chromium_shows_the_frontier_of_a_twin_run_drawn(
    chromium: str, twin_run: Path, tmp_path: Path
) -> None:
    page = (twin_run / "report.html").read_text(encoding="utf-8")
    png = (twin_run / "plots" / "frontier.png").read_bytes()
    # The page inlines exactly the PNG written beside it.
    inline = re.search(r'<img id="frontier" alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)
    assert inline is not None, "report.html has no frontier image"
    assert base64.b64decode(inline.group(1)) == png

    probe, dom = probe_frontier(chromium, page, tmp_path)

    assert probe["found"] and probe["complete"]
    # Chromium decoded the image at its real size ...
    assert (probe["width"], probe["height"]) == png_size(png)
    assert probe["width"] > 300 and probe["height"] > 200
    # ... and it is drawn: axes, text and the series, not a blank or broken image.
    assert probe["ink"] > 0.02 * probe["pixels"]
    assert probe["series"] > 200  # the points and the Pareto front in the series' colour
    # The axes are named and defined on the page; a twin has no GPUs, so it is per server.
    assert "per-user output tok/s" in dom and "total output tok/s per server" in dom
    assert "a twin: no GPUs" in dom
