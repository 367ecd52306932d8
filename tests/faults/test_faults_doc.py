"""docs/faults.md names every test under tests/faults (tests/unit/test_docs.py checks that
every test id the docs name, this page's included, points at a test that exists)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.docs_text import NODE

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "faults.md"


def test_every_fault_test_is_named_in_docs_faults_md() -> None:
    named = {name for _, name, _ in NODE.findall(DOC.read_text("utf-8"))}
    assert len(named) >= 40
    ours = {
        m.group(1)
        for path in (ROOT / "tests" / "faults").glob("test_*.py")
        if path.name != Path(__file__).name
        for m in re.finditer(r"^def (test_\w+)\(", path.read_text(), re.MULTILINE)
    }
    assert ours - named == set()
