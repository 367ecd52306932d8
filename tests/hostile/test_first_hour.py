"""What a new user meets first (issue 15): every document the code and docs cite is in
the repository. No sockets."""

from __future__ import annotations

import re
from pathlib import Path

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
        Path("results/local/r.tar.gz"), 9, "me@host", key=Path("/k/signing_ed25519"),
        allowed=Path("/k/allowed_signers"), page=Path("results/local/r-reproduce.html"),
    )  # fmt: skip
    text = "\n".join(lines)
    assert "bundle: results/local/r.tar.gz (9 files, signed by me@host)" in text
    assert "signing key: /k/signing_ed25519 (made on first use; public half " in text
    assert (
        "verify it: bench verify results/local/r.tar.gz --allowed-signers /k/allowed_signers"
        in text
    )
    assert "verdict against the card, as a page: results/local/r-reproduce.html" in text
    assert "Checking a bundle with stock OpenSSH" in (ROOT / "README.md").read_text()


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
