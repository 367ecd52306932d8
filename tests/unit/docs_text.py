"""What README.md and docs/*.md name, read from their text (tests/unit/test_docs.py holds
the checks): the `make` targets, the `bench`/`provision` commands with their options, the
quoted messages and the test ids.

Only text marked as code is read: a `code span` or a line of a fenced or indented code
block. Prose may say "make itself exits 2"; a code span saying `make itself` names a target.

A **quoted message** (the convention the docs follow) is one of:
- a code span in a table column headed "What you see" that starts with `bench: error: `,
  `provision: error: ` (the CLI's one line) or `invalid: ` (a cell's Status reason);
- a line of a code block that starts with `bench: error: ` or `provision: error: `.
Its text up to the first `…` (anything may follow) or ` (` must be the start of a string the
code writes, an f-string's fields standing for any text. When it ends in a parenthesised
group, that is the hint the CLI appends (`bench.errors.BenchError`: `message (hint)`), and
its text up to a `…` must be the start of a string the code writes too, or be written by
the code in parentheses as part of the message (`not valid JSON ({what})`); a field does not
swallow it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^\s*```")
NODE = re.compile(r"(tests/[\w/]+\.py)::(\w+)(?:\[([\w.-]+)\])?")
MAKE = re.compile(r"(?:^|[\s(;&|])make ([a-z][a-z0-9-]*)")
# `bench SUB [SUB2] ...`, `provision SUB ...` or `python -m provisioning SUB ...`, not a path
# (`bench/run`) and not `make bench`.
COMMAND = re.compile(
    r"(?<![\w.-])(?<!make )(?<!vllm )(bench|provision|-m provisioning) ([a-z][a-z-]*)"
)
MESSAGE_START = r"(?:bench|provision): error: |invalid: "
ERROR_LINE = re.compile(r"^\s*(?:bench|provision): error: (.*)$")
# Words a code span may put after `make`/`bench` that are no target or command: make's own
# line after a failed recipe ("make itself exits 2", "bench exited 5").
NOT_A_TARGET = {"itself"}
NOT_A_COMMAND = {"exited"}


def doc_paths(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Code:
    """A piece of text marked as code, and where it is."""

    path: Path
    line: int
    text: str
    column: str = ""  # the header of the table column it sits in, if any

    def where(self) -> str:
        shown = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{shown}:{self.line}"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def code_of(path: Path, text: str | None = None) -> Iterator[Code]:
    """Every code span and code-block line of a page, with the table column it sits in."""
    lines = (path.read_text("utf-8") if text is None else text).splitlines()
    fenced, header = False, list[str]()
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or (line.startswith("    ") and not line.lstrip().startswith(("|", "-", "*"))):
            yield Code(path, number, line.strip())
            continue
        if line.startswith("|"):
            cells = _cells(line)
            if number < len(lines) and re.match(r"^\|[\s:|-]+\|?$", lines[number]):
                header = cells
            for i, cell in enumerate(cells):
                column = header[i] if i < len(header) else ""
                for m in SPAN.finditer(cell):
                    yield Code(path, number, m.group(1), column)
            continue
        header = []
        for m in SPAN.finditer(line):
            yield Code(path, number, m.group(1))


def make_targets(code: Code) -> list[str]:
    return [t for t in MAKE.findall(code.text) if t not in NOT_A_TARGET]


@dataclass(frozen=True)
class Named:
    """A command a doc names: the words after the program, and the options after them."""

    program: str  # "bench" or "provision"
    words: tuple[str, ...]
    options: tuple[str, ...]


def commands(code: Code) -> list[Named]:
    """The commands in one piece of code; a command ends at `;`, `&&`, `|`, `)` or `--`."""
    found = []
    for m in COMMAND.finditer(code.text):
        if m.group(2) in NOT_A_COMMAND:
            continue
        program = "bench" if m.group(1) == "bench" else "provision"
        tail = re.split(r"\s(?:;|&&|\|\|?|--)(?:\s|$)|[;)]|`", code.text[m.start(2) :])[0]
        words, options = [], []
        for word in tail.split():
            token = word.rstrip(",.:'\"")
            if token.startswith("--"):
                options.append(token.split("=", 1)[0].split("[", 1)[0])
            elif not options and re.fullmatch(r"[a-z][a-z-]*", token):
                words.append(token)
        found.append(Named(program, tuple(words), tuple(o for o in options if len(o) > 2)))
    return found


def quoted_messages(code: Code) -> list[str]:
    """The message CODE quotes under the convention above, or none."""
    m = ERROR_LINE.match(code.text)
    if m:
        return [m.group(1)]
    if code.column.lower() == "what you see" and re.match(MESSAGE_START, code.text):
        return [re.sub(MESSAGE_START, "", code.text, count=1)]
    return []


def head(message: str) -> str:
    """The part of a quoted message checked against the code."""
    return re.split(r"…| \(", message, maxsplit=1)[0].rstrip()


def hint(message: str) -> str | None:
    """The hint MESSAGE ends in, up to a `…` in it: its last parenthesised group, when the
    message ends with it and a space comes before it."""
    split = _split_hint(message)
    return None if split is None else split[1]


def _split_hint(message: str) -> tuple[str, str] | None:
    """The text before the hint MESSAGE ends in, and the hint (as `hint` says)."""
    text = message.rstrip()
    if not text.endswith(")"):
        return None
    depth = 0
    for at in range(len(text) - 1, 0, -1):
        depth += {")": 1, "(": -1}.get(text[at], 0)
        if depth == 0:
            if text[at - 1] != " ":
                return None
            return text[: at - 1], re.split(r"…", text[at + 1 : -1], maxsplit=1)[0].rstrip()
    return None


def code_strings(*tops: str, root: Path = ROOT) -> list[tuple[str, ...]]:
    """Every string the code under TOPS writes, as its literal parts (an f-string's fields
    between them)."""
    found: list[tuple[str, ...]] = []
    for top in tops:
        for source in sorted((root / top).rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text("utf-8"))):
                if isinstance(node, ast.JoinedStr):
                    parts, literal = [], ""
                    for value in node.values:
                        if isinstance(value, ast.Constant) and isinstance(value.value, str):
                            literal += value.value
                        else:
                            parts.append(literal)
                            literal = ""
                    found.append((*parts, literal))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.append((node.value,))
    return found


def literal_match(text: str, parts: tuple[str, ...]) -> int:
    """How many characters of TEXT the literal parts match when TEXT is the start of the
    string PARTS make (each field between them any 1 to 120 characters); -1 if it is not."""
    first, rest = parts[0], parts[1:]
    if first.startswith(text):
        return len(text)
    if not text.startswith(first):
        return -1
    text = text[len(first) :]
    if not rest:
        return len(first) if text == "" else -1
    if text == "":
        return len(first)
    best = -1
    for cut in range(1, min(len(text), 120) + 1):
        if cut == len(text):
            best = max(best, len(first))  # the text ends inside a field
        elif rest[0] == "" or text.startswith(rest[0][:1], cut):
            got = literal_match(text[cut:], rest)
            if got >= 0:
                best = max(best, len(first) + got)
    return best


def message_in_code(message: str, strings: list[tuple[str, ...]]) -> bool:
    """Whether the head of MESSAGE starts a string of the code, its literal parts making 12
    characters of it or more (a field may hold a long OS error)."""
    text = head(message)
    if len(text) < 10:
        return True  # too short to tell a message from a value
    # A string can match only if the text holds the start of one of its literal parts, or is the
    # start of its first (a cheap test that leaves the slow one few strings to try).
    return any(
        min(len(text), 12) <= literal_match(text, parts)
        for parts in strings
        if _starts(text, parts)
    )


def _starts(text: str, parts: tuple[str, ...]) -> bool:
    """The cheap test of `message_in_code`: whether a string of these PARTS can start TEXT."""
    return parts[0].startswith(text) or any(len(p) >= 4 and p[:12] in text for p in parts)


def _in_parentheses(text: str, parts: tuple[str, ...]) -> bool:
    """Whether PARTS write TEXT in parentheses themselves: a literal part holds `(` and the
    start of TEXT, and the parts from there make TEXT's start (12 characters or more)."""
    for i, part in enumerate(parts):
        at = part.find("(" + text[:12])
        if at >= 0 and literal_match(text, (part[at + 1 :], *parts[i + 1 :])) >= min(len(text), 12):
            return True
    return False


def hint_in_code(message: str, strings: list[tuple[str, ...]]) -> bool:
    """Whether the hint MESSAGE ends in is the start of a string of the code, its literal
    parts making 12 characters of it or more; or is written by the code in parentheses as
    part of the message: a literal part holds `(` and the hint's start (`" (incomplete
    chunked read)"`), or the message, not cut with a `…` before the hint, is a string of the
    code with a literal ` (` right after the text before the hint (`not valid JSON ({what})`).
    True when there is no hint, or when the hint (or the message's head) is too short to tell."""
    split = _split_hint(message)
    if split is None or len(split[1]) < 10 or len(head(message)) < 10:
        return True
    before, text = split
    if any(
        min(len(text), 12) <= literal_match(text, parts)
        for parts in strings
        if _starts(text, parts)
    ):
        return True
    if any(_in_parentheses(text, parts) for parts in strings if any("(" in p for p in parts)):
        return True
    whole = message.rstrip()
    return "…" not in before and any(
        literal_match(whole, parts) >= literal_match(before, parts) + 2 >= 2
        for parts in strings
        if _starts(before, parts) and any(" (" in p for p in parts)
    )


def options_by_heading(text: str) -> list[tuple[list[Named], set[str]]]:
    """For each section, the commands its heading names and the `--options` code spans in it
    name; for each line, the commands and options it names."""
    found: list[tuple[list[Named], set[str]]] = []
    section: list[Named] = []
    options: set[str] = set()
    path = Path("page.md")
    for number, line in enumerate(text.splitlines(), 1):
        spans = [Code(path, number, m.group(1)) for m in SPAN.finditer(line)]
        named = [n for c in spans for n in commands(c)]
        said = {o for c in spans for o in re.findall(r"(?<![\w-])--[a-z][a-z-]*", c.text)}
        if line.startswith("#"):
            found.append((section, options))
            section, options = named, set()
            continue
        options |= said
        if named:
            found.append((named, said))
    found.append((section, options))
    return found


MEASURED_LINK = re.compile(r"\bmeasured/([\w.-]+\.md)\b")


def quoted_tables(text: str) -> list[tuple[str, int, list[str]]]:
    """The tables TEXT quotes from a committed artifact: a table whose paragraph before it
    (or whose own first lines) link to docs/measured/NAME.md, as (NAME.md, line, rows)."""
    found: list[tuple[str, int, list[str]]] = []
    source: str | None = None
    rows: list[str] = []
    start = 0
    lines = [*text.splitlines(), ""]
    for number, line in enumerate(lines, 1):
        if line.startswith("|"):
            if not rows:
                start = number
            rows.append(line)
            continue
        if rows:
            if source is not None:
                found.append((source, start, rows))
            rows, source = [], None
        if line.startswith("#"):
            source = None
        links = MEASURED_LINK.findall(line)
        if links:
            source = links[-1]
        elif line == "" and source is not None and not "".join(lines[number:][:1]).startswith("|"):
            source = None  # a paragraph that does not end in a table quotes nothing
    return found
