"""docs/verdicts.md is a page a user reads (issue 44): at most 300 lines, its prose lines at
most 160 characters, and every figure it quotes comes from a file in docs/measured/, held
equal to it here. On that page:

- a table after a paragraph that links measured/NAME.md quotes NAME.md: every row is a line
  of it (`tests/unit/test_docs.py` checks that on every page of docs/; here also on the
  pages of docs/measured/, which quote each other as ../measured/NAME.md);
- a code block after such a paragraph quotes NAME.md: every line is a line of it;
- a block quote (`> ` lines) after or in such a paragraph quotes NAME.md: its text, cut
  at each `…`, is NAME.md's text piece by piece in order (line breaks and indentation
  aside);
- any other figure (a number of %, s, h or min) in a paragraph is one that NAME.md writes,
  for a NAME.md the paragraph links, or a setting the code makes (the margin, alpha, the
  budget's targets, the power, the tolerances: `_settings`, read from the code here); so
  is a figure in a table that quotes no file.

Pure file reading."""

from __future__ import annotations

import argparse
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.unit.docs_text import FENCE, MEASURED_LINK, ROOT
from tests.unit.test_docs import quoted_rows_not_in

PAGE = ROOT / "docs" / "verdicts.md"
MEASURED = ROOT / "docs" / "measured"
MAX_LINES = 300
MAX_WIDTH = 160
FIGURE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?\s?(%|h|s|min)(?![\w])")


@dataclass
class Block:
    """A piece of a page: prose (a paragraph, a list item, a heading), a code block, a
    block quote or a table, with the measured files it links or quotes."""

    kind: str  # "prose", "code", "quote", "table"
    line: int
    lines: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(x.strip() for x in self.lines)


def _kind(line: str, fenced: bool) -> str:
    if fenced or (line.startswith("    ") and not line.lstrip().startswith(("|", "-", "*"))):
        return "code"
    if line.startswith(">"):
        return "quote"
    if line.startswith("|"):
        return "table"
    return "prose"


def blocks(text: str) -> list[Block]:
    """TEXT's blocks in order. A code block, block quote or table quotes the measured files
    its own lines link, or those of the prose block before it (other quotes between)."""
    out: list[Block] = []
    fenced, gap = False, True
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced, gap = not fenced, True
            continue
        if not line.strip() and not fenced:
            gap = True
            continue
        kind = _kind(line, fenced)
        item = kind == "prose" and re.match(r"\s*(?:[-*]|\d+\.)\s|#", line) is not None
        last = out[-1] if out else None
        if last is None or last.kind != kind or gap or item or last.lines[-1].startswith("#"):
            out.append(Block(kind, number, sources=_quoting(out) if kind != "prose" else []))
        block = out[-1]
        block.lines.append(line)
        block.sources += [s for s in MEASURED_LINK.findall(line) if s not in block.sources]
        gap = False
    return out


def _quoting(before: list[Block]) -> list[str]:
    """The files the prose block before a quote links, when only quotes come between."""
    for b in reversed(before):
        if b.kind == "prose":
            return list(b.sources)
    return []


def _settings() -> set[tuple[float, str]]:
    from bench import stats
    from bench.cli import build_parser
    from bench.verdict import budget, compare, equivalence, sequential

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    reproduce = sub.choices["reproduce"]
    tolerances = {
        a.default
        for a in reproduce._actions
        if a.dest in ("tolerance_throughput", "tolerance_latency")
    }
    level = inspect.signature(stats.mean_ci).parameters["level"].default
    percent = {
        compare.ALPHA * 100,
        compare.ALPHA / 2 * 100,
        compare.POWER * 100,
        equivalence.DEFAULT_MARGIN_PCT,
        sequential.EQUIVALENCE_ALPHA * 100,
        level * 100,
        *budget.TARGETS_PCT,
        *tolerances,
    }
    return {(round(v, 6), "%") for v in percent} | {(budget.START_ESTIMATE_S, "s")}


def _value(number: str, decimals: str | None) -> float:
    return round(float(number.replace(",", "") + (decimals or "")), 6)


def _written(path: Path, number: str, decimals: str | None, unit: str) -> bool:
    text = path.read_text("utf-8") if path.is_file() else ""
    shown = re.escape(number + (decimals or ""))
    return re.search(rf"(?<![\w.,]){shown}\s?{re.escape(unit)}(?![\w])", text) is not None


def _flat(text: str) -> str:
    return " ".join(text.split())


def _lines_of(names: list[str], measured: Path) -> set[str]:
    paths = [measured / n for n in names]
    return {x.strip() for p in paths if p.is_file() for x in p.read_text("utf-8").splitlines()}


def problems(text: str, measured: Path, allowed: set[tuple[float, str]]) -> list[str]:
    """What on the page TEXT is not quoted from the measured files it names (module
    docstring): code lines, block quotes and figures; the tables are test_docs's."""
    wrong = []
    for b in blocks(text):
        if b.kind == "code" and b.sources:
            have = _lines_of(b.sources, measured)
            wrong += [
                f"line {b.line + i}: `{x.strip()}` is in none of {b.sources}"
                for i, x in enumerate(b.lines)
                if x.strip() not in have
            ]
        elif b.kind == "quote":
            quoted = _flat(" ".join(re.sub(r"^>\s?", "", x) for x in b.lines))
            paths = [p for p in (measured / s for s in b.sources) if p.is_file()]
            if not any(_pieces_in(quoted, _flat(p.read_text("utf-8"))) for p in paths):
                wrong.append(f"line {b.line}: the quote is in none of {b.sources}")
        elif b.kind in ("prose", "code") or (b.kind == "table" and not b.sources):
            for m in FIGURE.finditer(b.text):
                number, decimals, unit = m.groups()
                if (_value(number, decimals), unit) in allowed or any(
                    _written(measured / s, number, decimals, unit) for s in b.sources
                ):
                    continue
                wrong.append(
                    f"line {b.line}: {m.group(0)} is no setting and in none of {b.sources}"
                )
    return wrong


def _pieces_in(quoted: str, source: str) -> bool:
    at = 0
    for piece in (p.strip() for p in quoted.split("…")):
        if not piece:
            continue
        found = source.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def shape_problems(text: str) -> list[str]:
    lines = text.splitlines()
    wrong = [f"{len(lines)} lines, more than {MAX_LINES}"] if len(lines) > MAX_LINES else []
    return wrong + [
        f"line {b.line + i}: {len(x)} characters"
        for b in blocks(text)
        if b.kind in ("prose", "quote")
        for i, x in enumerate(b.lines)
        if len(x) > MAX_WIDTH
    ]


def test_the_verdicts_page_is_short() -> None:
    assert shape_problems(PAGE.read_text("utf-8")) == []


def test_every_figure_the_verdicts_page_quotes_is_its_measured_files() -> None:
    assert problems(PAGE.read_text("utf-8"), MEASURED, _settings()) == []


def test_every_table_a_measured_page_quotes_is_its_artifacts() -> None:
    wrong = [
        f"{page.relative_to(ROOT)} {problem}"
        for page in sorted(MEASURED.glob("*.md"))
        for problem in quoted_rows_not_in(page.read_text("utf-8"), MEASURED)
    ]
    assert wrong == []


# --- each check sees its own breakage -------------------------------------------------------


def test_a_quote_or_figure_that_differs_from_its_file_is_seen(tmp_path: Path) -> None:
    (tmp_path / "x-2026-12-06.md").write_text(
        "A run took 47 s and\nflagged 4.7% of 150.\n\n    NOT RESOLVED: CHANGES UNDER 378 %\n"
    )
    allowed = {(5.0, "%"), (600.0, "s")}
    page = (
        "From [the run](measured/x-2026-12-06.md), where a sweep took 47 s:\n\n"
        "    NOT RESOLVED: CHANGES UNDER {under} %\n\n"
        "> A run took 47 s … flagged {rate} of 150.\n\n"
        "A margin of 5 % and a start of 600 s are settings; {loose} is not.\n"
    )
    good = page.format(under="378", rate="4.7%", loose="a figure")
    assert problems(good, tmp_path, allowed) == []
    bad = page.format(under="379", rate="4.8%", loose="3.2 %")
    assert problems(bad, tmp_path, allowed) == [
        "line 3: `NOT RESOLVED: CHANGES UNDER 379 %` is in none of ['x-2026-12-06.md']",
        "line 5: the quote is in none of ['x-2026-12-06.md']",
        "line 7: 3.2 % is no setting and in none of []",
    ]
    # A fenced block quotes as an indented one does.
    fenced = (
        "From [it](measured/x-2026-12-06.md):\n\n```text\nNOT RESOLVED: CHANGES UNDER {} %\n```\n"
    )
    assert problems(fenced.format("378"), tmp_path, allowed) == []
    assert problems(fenced.format("37"), tmp_path, allowed) == [
        "line 4: `NOT RESOLVED: CHANGES UNDER 37 %` is in none of ['x-2026-12-06.md']"
    ]
    # The figure a paragraph states must be one its linked file writes.
    assert problems("From [it](measured/x-2026-12-06.md): 48 s.\n", tmp_path, allowed) == [
        "line 1: 48 s is no setting and in none of ['x-2026-12-06.md']"
    ]


def test_a_long_page_and_a_long_prose_line_are_seen() -> None:
    text = "# T\n\n" + "x\n" * 299 + "y" * 161 + "\n\n| " + "z" * 200 + " |\n"
    assert shape_problems(text) == ["304 lines, more than 300", "line 302: 161 characters"]


def test_the_settings_are_read_from_the_code() -> None:
    allowed = _settings()
    assert {(5.0, "%"), (10.0, "%"), (80.0, "%"), (95.0, "%"), (4.0, "%"), (600.0, "s")} <= allowed
