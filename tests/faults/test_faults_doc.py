"""The README's fault tables name real tests: every node id points at a test that exists,
and every test under tests/faults is named."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOC = ROOT / "README.md"
NODE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)(?:\[([\w-]+)\])?`")


def test_every_test_named_in_docs_faults_md_exists() -> None:
    text = DOC.read_text()
    found = NODE.findall(text)
    assert len(found) >= 40
    missing = []
    for path, name, param in found:
        source = ROOT / path
        code = source.read_text() if source.is_file() else ""
        if not re.search(rf"^def {name}\(", code, re.MULTILINE):
            missing.append(f"{path}::{name}")
        elif param and f'"{param}"' not in code:
            missing.append(f"{path}::{name}[{param}]")
    assert missing == []


def test_every_fault_test_is_named_in_docs_faults_md() -> None:
    named = {name for _, name, _ in NODE.findall(DOC.read_text())}
    ours = {
        m.group(1)
        for path in (ROOT / "tests" / "faults").glob("test_*.py")
        if path.name != Path(__file__).name
        for m in re.finditer(r"^def (test_\w+)\(", path.read_text(), re.MULTILINE)
    }
    assert ours - named == set()
