"""report.html of a real twin run, rendered by headless Chromium: the frontier is there and drawn.

Chromium comes from tests/setup/chromium.sh (Debian's package, installed when missing; a
failed install fails this test). The page itself has no script (it is checked offline
elsewhere); the test adds a probe to a copy of it that, once the page has loaded, reads
the frontier image's natural size and counts its inked pixels through a canvas, and
writes them into the DOM, which `chromium --headless --dump-dom` prints.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
_PROBE = """<script>
window.addEventListener("load", () => {
  const img = document.getElementById("frontier");
  const out = {found: !!img};
  if (img) {
    out.complete = img.complete; out.width = img.naturalWidth; out.height = img.naturalHeight;
    const canvas = document.createElement("canvas");
    canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
    const g = canvas.getContext("2d");
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, canvas.width, canvas.height).data;
    let ink = 0, series = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) ink++;
      // matplotlib's first colour, #1f77b4: the points and the front of a single run.
      const near = (v, c) => Math.abs(v - c) < 12;
      if (near(d[i], 31) && near(d[i + 1], 119) && near(d[i + 2], 180)) series++;
    }
    out.ink = ink; out.series = series; out.pixels = d.length / 4;
  }
  const pre = document.createElement("pre");
  pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "tests" / "setup" / "chromium.sh")],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"tests/setup/chromium.sh could not provide chromium: {done.stderr[-2000:]}",
                    pytrace=False)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def _dump_dom(chromium: str, page: Path, profile: Path) -> str:
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_chromium_shows_the_frontier_of_a_twin_run_drawn(
    chromium: str, twin_run: Path, tmp_path: Path
) -> None:
    page = (twin_run / "report.html").read_text(encoding="utf-8")
    png = (twin_run / "plots" / "frontier.png").read_bytes()
    # The page inlines exactly the PNG written beside it.
    inline = re.search(r'<img id="frontier" alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)
    assert inline is not None, "report.html has no frontier image"
    assert base64.b64decode(inline.group(1)) == png
    probe_page = tmp_path / "report-probe.html"
    probe_page.write_text(page.replace("</body>", _PROBE + "</body>"), encoding="utf-8")

    dom = _dump_dom(chromium, probe_page, tmp_path / "profile")

    found = re.search(r'<pre id="probe">([^<]*)</pre>', dom)
    assert found, "the probe did not run: no load event, or scripts are off"
    probe = json.loads(found.group(1).replace("&quot;", '"'))
    assert probe["found"] and probe["complete"]
    # Chromium decoded the image at its real size ...
    assert (probe["width"], probe["height"]) == _png_size(png)
    assert probe["width"] > 300 and probe["height"] > 200
    # ... and it is drawn: axes, text and the series, not a blank or broken image.
    assert probe["ink"] > 0.02 * probe["pixels"]
    assert probe["series"] > 200  # the points and the Pareto front in the series' colour
    # The axes are named and defined on the page; a twin has no GPUs, so it is per server.
    assert "per-user output tok/s" in dom and "total output tok/s per server" in dom
    assert "a twin: no GPUs" in dom
