"""Pages in headless Chromium: report.html's frontier image as the browser decoded and drew
it, and any page probed by a script of the test's (`probe_page`).

Chromium comes from tests/setup/chromium.sh (Debian's package, installed when missing; a
failed install fails the test that asked). report.html itself has no script (it is checked
offline elsewhere); probe_frontier adds one to a copy of it that, once the page has loaded,
reads the frontier image's natural size and counts its inked pixels through a canvas, and
writes them into the DOM, which `chromium --headless --dump-dom` prints.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """<script>
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


def chromium_path() -> str:
    """Chromium's path, installed by tests/setup/chromium.sh when missing; fails the test
    (never skips it) when it cannot be had."""
    done = subprocess.run(
        ["bash", str(ROOT / "tests" / "setup" / "chromium.sh")],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"tests/setup/chromium.sh could not provide chromium: {done.stderr[-2000:]}",
                    pytrace=False)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def dump_dom(chromium: str, page: Path, profile: Path) -> str:
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def probe_page(chromium: str, page_html: str, probe: str, work: Path) -> tuple[dict[str, Any], str]:
    """PAGE_HTML loaded in Chromium with PROBE (a <script> that, once the page has loaded,
    writes a JSON object into <pre id="probe">): (that object, the whole DOM)."""
    work.mkdir(parents=True, exist_ok=True)
    page = work / "page-probe.html"
    page.write_text(page_html.replace("</body>", probe + "</body>"), encoding="utf-8")
    dom = dump_dom(chromium, page, work / "profile")
    found = re.search(r'<pre id="probe">([^<]*)</pre>', dom)
    assert found, "the probe did not run: no load event, or scripts are off"
    text = found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    result: dict[str, Any] = json.loads(text.replace("&amp;", "&"))
    return result, dom


def probe_frontier(chromium: str, page_html: str, work: Path) -> tuple[dict[str, Any], str]:
    """PAGE_HTML loaded in Chromium with the frontier's probe: (what it found, the DOM)."""
    return probe_page(chromium, page_html, PROBE, work)
