"""Figures a doc quotes from a committed result file are that file's, line for line.

A doc marks such a block with `<!-- measured: PATH -->` ... `<!-- end measured -->`; every
table row inside it (a line starting with `| ` other than a header rule) must be a line of
PATH, the output of the run the doc names. Re-running and pasting only one of the two
fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- measured: (\S+) -->\n(.*?)<!-- end measured -->", re.S)


def quoted_rows(doc: Path) -> list[tuple[str, str]]:
    """(result file, table row) for every row inside the doc's measured blocks."""
    out = []
    for m in BLOCK.finditer(doc.read_text()):
        for line in m.group(2).splitlines():
            if line.startswith("| ") and not line.startswith("|---"):
                out.append((m.group(1), line))
    return out


def test_the_verdict_tables_are_the_committed_run_output() -> None:
    rows = quoted_rows(ROOT / "docs" / "verdicts.md")
    assert len(rows) >= 20  # the corpus, sequential and twin tables of issue 27
    for path, row in rows:
        measured = (ROOT / path).read_text().splitlines()
        assert row in measured, f"{path} has no line {row[:80]!r}"


def test_a_row_changed_in_the_doc_only_is_caught(tmp_path: Path) -> None:
    result = tmp_path / "out.md"
    result.write_text("| k |\n|---|\n| 5 | 30/600 = 5.0% |\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        f"<!-- measured: {result} -->\n| k |\n|---|\n| 5 | 3/600 = 0.5% |\n<!-- end measured -->\n"
    )
    rows = quoted_rows(doc)
    assert [row for _, row in rows] == ["| k |", "| 5 | 3/600 = 0.5% |"]
    measured = result.read_text().splitlines()
    assert [row in measured for _, row in rows] == [True, False]
