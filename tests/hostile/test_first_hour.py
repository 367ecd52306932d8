"""What a new user meets first (issue 15): every document the code and docs cite is in
the repository. No sockets."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CITED = re.compile(r"(?<![\w/.-])((?:docs/|bench/|provisioning/|tests/)?[\w./-]*[A-Z_a-z-]+\.md)\b")

OUTPUTS = ("tables.md",)  # written into every run directory, not a document of the repo


def test_every_markdown_file_the_code_and_docs_cite_exists() -> None:
    sources = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("bench/**/*.py"),
               *ROOT.glob("provisioning/**/*.py"), *ROOT.glob("bench/**/*.md")]  # fmt: skip
    missing = []
    for source in sources:
        for m in CITED.finditer(source.read_text(encoding="utf-8")):
            name = m.group(1)
            if "://" in name or name.startswith(("http", ".")) or name.endswith(OUTPUTS):
                continue
            candidates = [ROOT / name, source.parent / name, ROOT / "docs" / name]
            if not any(c.is_file() for c in candidates):
                missing.append(f"{source.relative_to(ROOT)}: {name}")
    assert missing == []


def test_every_option_of_bench_run_and_bench_local_says_what_it_does_and_its_default() -> None:
    import argparse

    from bench.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("run", "local"):
        command = sub.choices[name]
        # This formatter shows "(default: X)" after every option's help.
        assert command.formatter_class is argparse.ArgumentDefaultsHelpFormatter
        for action in command._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, f"bench {name} {action.option_strings[0]} has no help"


def test_bench_local_ends_saying_where_the_bundle_key_and_page_are_and_how_to_verify() -> None:
    from bench.local_cmd import closing_lines

    lines = closing_lines(
        Path("/r/run1.tar.gz"), 9, "me@host", key=Path("/k/signing_ed25519"),
        allowed=Path("/k/allowed_signers"), page=Path("/r/run1-reproduce.html"),
    )  # fmt: skip
    text = "\n".join(lines)
    assert "bundle: /r/run1.tar.gz (9 files, signed by me@host)" in text
    assert "signing key: /k/signing_ed25519 (made on first use; public half " in text
    assert "-m bench verify /r/run1.tar.gz --allowed-signers /k/allowed_signers" in text
    assert "verdict against the card, as a page: /r/run1-reproduce.html" in text
    assert (
        "  mkdir /r/run1-check && tar -xzf /r/run1.tar.gz -C /r/run1-check && cd /r/run1-check/run1"
        in text
    )
    assert "  ssh-keygen -Y verify -f /k/allowed_signers -I me@host -n vllm-bench-bundle@v1" in text


def test_bench_local_without_ssh_keygen_stops_before_the_sweep(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from bench.errors import Exit

    empty = tmp_path / "bin"
    empty.mkdir()
    got = subprocess.run(
        [sys.executable, "-m", "bench", "local", "--out", str(tmp_path / "r"),
         "--key", str(tmp_path / "key")],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
        env={**os.environ, "PATH": str(empty)},
    )  # fmt: skip
    assert got.returncode == Exit.TOOL_MISSING, got.stderr[-2000:]
    assert got.stderr.strip() == (
        "bench: error: ssh-keygen is not installed (install OpenSSH (Debian: apt-get install "
        "openssh-client))"
    )
    assert list(tmp_path.iterdir()) == [empty]


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen")
def test_the_first_hour_walk_through_runs_as_printed(tmp_path: Path) -> None:
    """docs/first-hour.md step 1 (bench local, what `make bench` runs, on a short sweep) and
    step 2: the verification lines the tool printed, run as printed, in one shell."""
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "BENCH_LOG_FORMAT": "json"}
    env.pop("VLLM_API_KEY", None)
    env.pop("BENCH_API_KEY", None)
    out = tmp_path / "results" / "run1"
    got = subprocess.run(
        [sys.executable, "-m", "bench", "local", "--speed", "20", "--out", str(out), "--",
         "--contexts", "8K", "--concurrencies", "1", "--prefill-only-contexts",
         "--duration", "10"],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=ROOT,
    )  # fmt: skip
    # The verdict's own code: this short sweep (a 10 s window, one cell) is not the card's
    # setting, so NOT COMPARABLE, or PARTIAL when accepted; never a crash.
    from bench.errors import Exit

    verdicts = (Exit.OK, Exit.NOT_REPRODUCED, Exit.PARTIAL, Exit.NOT_COMPARABLE)
    assert got.returncode in verdicts, got.stderr[-3000:]
    lines = got.stdout.splitlines()
    assert f"signing key: {home}/.config/bench/signing_ed25519" in got.stdout
    start = lines.index("verify the bundle:")
    printed = [x[2:] for x in lines[start + 1 :] if x.startswith("  ")]
    assert len(printed) == 4, lines[start:]
    assert lines.count("## Prefill") == 1  # the tables once
    assert lines.count("or with stock OpenSSH and coreutils, in a new directory:") == 1
    script = "set -euo pipefail\n" + "\n".join(printed) + "\n"
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                         check=False, env=env, cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    both = ran.stdout + ran.stderr
    assert 'Good "vllm-bench-bundle@v1" signature for ' in both
    assert both.count(": OK") >= 5 and "FAILED" not in both
    assert (tmp_path / "results" / "run1-check" / "run1" / "manifest.json").is_file()
