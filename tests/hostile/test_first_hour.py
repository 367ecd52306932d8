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
