"""The shipped package holds the product only: the wheel `pip` builds from this checkout
(what the images install) carries no developer harness, and the images' build context
(`.dockerignore`) lets no `tools/` in."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESSES = ("tools/", "bench/perf/", "calibrate", "reproduce_twin", "compare_twin", "power.py")


@pytest.mark.subprocess
def test_the_wheel_carries_bench_and_no_harness(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = tmp_path.glob("bench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "bench/cli.py" in names and "bench/run/sweep.py" in names
    assert "bench/twin/server.py" in names  # the twin ships: the twin image runs it
    harness = [n for n in names if any(h in n for h in HARNESSES)]
    assert harness == []


def test_the_image_context_admits_bench_but_not_tools() -> None:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert rules[0] == "*"  # everything out, then what the images install back in
    assert "!bench/" in rules
    assert not [r for r in rules if r.startswith("!tools")]
