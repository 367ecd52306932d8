"""The README's "Your own OpenAI-compatible server" example, run as printed: its twin line
stands in for the server, its `bench run` line measures it, and the output begins with the
lines the README shows (issue 31). Only the port differs: the test asks for a free one."""

from __future__ import annotations

import re
import selectors
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import bench_env, finish, kill_group, new_mark

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
PRINTED_PORT = "8000"


def readme_example() -> tuple[str, str, list[str]]:
    """The twin line, the `bench run` line and the output lines shown after them."""
    text = (ROOT / "README.md").read_text("utf-8")
    section = text.split("## Your own OpenAI-compatible server", 1)[1].split("\n## ", 1)[0]
    blocks: list[list[str]] = []
    previous_code = False
    for line in section.splitlines():
        code = line.startswith("    ")
        if code and not previous_code:
            blocks.append([])
        if code:
            blocks[-1].append(line[4:])
        previous_code = code or (previous_code and line == "")
    commands, shown = blocks[0], blocks[1]
    (twin,) = [c for c in commands if " twin serve " in c]
    (run,) = [c for c in commands if " run --url " in c]
    return twin, run, shown


def _bin(word: str) -> str:
    """`.venv/bin/NAME` as printed is this virtualenv's own NAME."""
    return str(Path(sys.executable).parent / word.removeprefix(".venv/bin/"))


def _start(words: list[str], mark: str, cwd: Path) -> subprocess.Popen[str]:
    """WORDS as printed, in a process group of its own (`finish`/`kill_group` end it)."""
    return subprocess.Popen(
        [_bin(words[0]), *words[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=bench_env(mark),
        cwd=cwd,
        start_new_session=True,
    )


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise AssertionError(f"the twin printed nothing in {timeout_s:g} s")
    return proc.stdout.readline()


def test_the_readme_example_output_begins_as_printed(tmp_path: Path) -> None:
    twin_line, run_line, shown = readme_example()
    assert shown and shown[0].startswith("Plan: ")
    twin_words = shlex.split(twin_line)
    assert twin_words[-1] == "&" and twin_words[twin_words.index("--port") + 1] == PRINTED_PORT
    twin_words = twin_words[:-1]
    twin_words[twin_words.index("--port") + 1] = "0"  # a free port, printed by the twin
    mark = new_mark()
    twin = _start(twin_words, mark, tmp_path)
    try:
        listening = _first_line(twin, 30)
        m = re.search(r"http://127\.0\.0\.1:(\d+)", listening)
        assert m, listening
        port = m.group(1)
        run_words = shlex.split(run_line.replace(f"127.0.0.1:{PRINTED_PORT}", f"127.0.0.1:{port}"))
        code, out, err = finish(_start(run_words, mark, tmp_path), timeout_s=240)
    finally:
        kill_group(twin)
        twin.communicate(timeout=30)
    assert code == 0, err[-2000:]
    expected = [line.replace(f"127.0.0.1:{PRINTED_PORT}", f"127.0.0.1:{port}") for line in shown]
    assert out.splitlines()[: len(expected)] == expected
    assert (tmp_path / "results" / "my-run" / "results.json").is_file()
