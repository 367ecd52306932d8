"""Real make on the real Makefile with `bench` and `python` in BIN as stand-ins that write
down their arguments, so nothing else runs: `stand_ins` writes them, `make_argv` runs a
target through them and gives back the one command it ran."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).parents[2]

# A stand-in: appends its name and arguments to LOG, one JSON list a line.
STUB = """#!{python}
import json, sys
with open({log!r}, "a") as f:
    f.write(json.dumps([sys.argv[0].rsplit("/", 1)[-1], *sys.argv[1:]]) + "\\n")
"""


def stand_ins(folder: Path, log: Path) -> Path:
    """FOLDER/bin holding `bench` and `python` stand-ins that write to LOG; that bin."""
    stubs = folder / "bin"
    stubs.mkdir(exist_ok=True)
    for name in ("bench", "python"):
        path = stubs / name
        path.write_text(STUB.format(python=sys.executable, log=str(log)))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return stubs


def make_argv(tmp_path: Path, target: str, *words: str, unset: Iterable[str]) -> list[str]:
    """The one command `make TARGET WORDS` ran, as the stand-in in TMP_PATH wrote it down;
    the variables UNSET (and make's own flags) taken out of the environment it runs in."""
    log = tmp_path / "argv.jsonl"
    log.unlink(missing_ok=True)
    stubs = stand_ins(tmp_path, log)
    stamp = tmp_path / "stamp"
    stamp.touch()  # newer than pyproject.toml: `setup` has nothing to do
    drop = {"MAKEFLAGS", "MFLAGS", *unset}
    got = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), target, f"BIN={stubs}",
         f"STAMP={stamp}", *words],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if k not in drop},
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 1
    argv: list[str] = json.loads(lines[0])
    return argv
