"""A full disk under every command that writes a file (issue 29, H9/L7): one line,
`cannot write PATH: No space left on device`, exit 8, and nothing half-made left behind
(no 0-byte output, no temporary file): bench.writes writes to a unique temporary name and
renames it at the end. A real tmpfs, filled before the command runs."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.bundle import seal, sign
from bench.card.parse import read_card
from bench.errors import Exit
from tests.faults.test_sweep_faults import _fill, _tmpfs
from tests.support.procs import assert_one_line_error, bench_env, capped_python, new_mark
from tests.support.runs import write_run_dir
from tests.support.synth import make_results

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
CARD = next((ROOT / "bench" / "cards").glob("*.txt"))


def _bench(*args: str) -> tuple[int, str]:
    got = subprocess.run(
        [*capped_python(), "bench", *args], capture_output=True, text=True, timeout=120,
        cwd=ROOT, env=bench_env(new_mark()), check=False,
    )  # fmt: skip
    return got.returncode, got.stderr


def _runs(tmp: Path) -> list[Path]:
    card = read_card(CARD)
    out = []
    for seed in (1, 2):
        root = tmp / f"run{seed}"
        root.mkdir()
        (root / "results.json").write_text(make_results(card, seed=seed).model_dump_json())
        out.append(root)
    return out


@pytest.mark.parametrize(
    "command", ["card-import", "card-launch", "compare-html", "report", "sign", "pack"]
)
def test_a_full_disk_is_one_line_exit_8_and_leaves_nothing_half_made(
    tmp_path: Path, command: str
) -> None:
    with _tmpfs(tmp_path / "fs", "1m") as fs:
        key = tmp_path / "key"
        if command in ("sign", "pack"):
            sign.keygen(key, comment="disk-full@test")
        signed = write_run_dir(tmp_path / "signed")
        if command == "pack":
            seal.seal(signed, key, now=datetime.now(UTC))
        run = write_run_dir(fs / "run")
        before = {p.relative_to(run).as_posix(): p.stat().st_size for p in run.rglob("*")}
        filler = _fill(fs)
        target = {
            "card-import": fs / "card.json",
            "card-launch": fs / "launch.toml",
            "compare-html": fs / "c.html",
            "report": fs / "run" / "report.html",
            "sign": fs / "run" / "manifest.json",
            "pack": fs / "signed.tar.gz",
        }[command]
        argv = {
            "card-import": ["card", "import", str(CARD), "-o", str(target)],
            "card-launch": ["card", "launch", str(CARD), "-o", str(target)],
            "compare-html": ["compare", *map(str, _runs(tmp_path)), "--html", str(target)],
            "report": ["report", str(fs / "run")],
            "sign": ["sign", str(fs / "run"), "--key", str(key)],
            "pack": ["pack", str(signed), "--out", str(target)],
        }[command]
        rc, stderr = _bench(*argv)
        # Read before the tmpfs goes: nothing new anywhere on it (no 0-byte target, no
        # temporary file), nothing in the run directory emptied.
        left = sorted(p.relative_to(fs).as_posix() for p in fs.rglob("*") if p != filler)
        after = {p.relative_to(run).as_posix(): p.stat().st_size for p in run.rglob("*")}
        os.remove(filler)
    assert rc == Exit.DISK, stderr[-2000:]
    line = assert_one_line_error(stderr, "cannot write ", "No space left on device")
    assert "Traceback" not in stderr and line
    assert after == before
    assert left == ["run", *sorted(f"run/{name}" for name in before)], left
