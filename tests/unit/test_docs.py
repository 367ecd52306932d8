"""The docs cannot drift from the code: in README.md and every docs/*.md, each `make` target,
`bench`/`provision` command and option, quoted message (tests/unit/docs_text.py says which
text is one) and test id named exists, and every user-facing make target and option is
documented somewhere. Pure file reading, with the parsers built in-process."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tests.unit import docs_text
from tests.unit.docs_text import ROOT, Code, Named
from tests.unit.test_maps import makefile_help

README_LINES = 150
README_WIDTH = 160


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from bench.cli import build_parser as bench_parser
    from provisioning.cli import build_parser as provision_parser  # noqa: TID251 (reads its parser)

    return {"bench": bench_parser(), "provision": provision_parser()}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        o
        for a in parser._actions
        if a.help != argparse.SUPPRESS
        for o in a.option_strings
        if o.startswith("--") and o != "--help"
    }


def _every_command(
    parsers: dict[str, argparse.ArgumentParser],
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """(program, word, ...) -> parser, for every command that takes no further subcommand."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(path: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
        subs = _subparsers(parser)
        if not subs:
            found[path] = parser
        for name, sub in subs.items():
            walk((*path, name), sub)

    for program, parser in parsers.items():
        walk((program,), parser)
    return found


def resolve(
    named: Named, parsers: dict[str, argparse.ArgumentParser]
) -> tuple[tuple[str, ...], list[str]]:
    """The command NAMED runs and what about it does not exist."""
    parser = parsers[named.program]
    path: tuple[str, ...] = (named.program,)
    for word in named.words:
        subs = _subparsers(parser)
        if not subs:
            break  # the rest are its arguments
        if word not in subs:
            return path, [f"`{' '.join(path)} {word}`: no such command"]
        parser, path = subs[word], (*path, word)
    if _subparsers(parser):
        return path, [f"`{' '.join(path)}` needs a subcommand"] if named.words else []
    have = _options(parser) | {"--help", "--version"}
    return path, [f"`{' '.join(path)}` has no {o}" for o in named.options if o not in have]


def _code() -> list[Code]:
    return [c for path in docs_text.doc_paths() for c in docs_text.code_of(path)]


def test_every_make_target_the_docs_name_exists() -> None:
    targets, _ = makefile_help((ROOT / "Makefile").read_text("utf-8"))
    wrong = [
        f"{c.where()}: make {t}"
        for c in _code()
        for t in docs_text.make_targets(c)
        if t not in targets
    ]
    assert wrong == []


def test_every_make_target_with_a_help_line_is_documented() -> None:
    _, described = makefile_help((ROOT / "Makefile").read_text("utf-8"))
    named = {t for c in _code() for t in docs_text.make_targets(c)}
    assert sorted(set(described) - named) == []


def test_every_command_and_option_the_docs_name_exists() -> None:
    parsers = _parsers()
    wrong = [
        f"{c.where()}: {problem}"
        for c in _code()
        for named in docs_text.commands(c)
        for problem in resolve(named, parsers)[1]
    ]
    assert wrong == []


def test_every_command_and_option_is_documented() -> None:
    """Each command is named somewhere, and each of its options is named with it: in a
    command line of the docs, or as a code span on a line that names the command or under a
    heading that does (docs/run.md's table of `bench run`'s options)."""
    parsers = _parsers()
    said: dict[tuple[str, ...], set[str]] = {}
    for c in _code():
        for named in docs_text.commands(c):
            path, problems = resolve(named, parsers)
            if not problems:
                said.setdefault(path, set()).update(named.options)
    for page in docs_text.doc_paths():
        for command, options in docs_text.options_by_heading(page.read_text("utf-8")):
            for named in command:
                found, problems = resolve(named, parsers)
                if not problems:
                    said.setdefault(found, set()).update(options)
    missing = [
        f"{' '.join(path)} {option}".rstrip()
        for path, parser in _every_command(parsers).items()
        for option in ([""] if path not in said else sorted(_options(parser) - said[path]))
    ]
    assert missing == []


def test_every_quoted_message_is_one_the_code_writes() -> None:
    strings = docs_text.code_strings("bench", "provisioning", "tools")
    wrong = [
        f"{c.where()}: {message}"
        for c in _code()
        for message in docs_text.quoted_messages(c)
        if not docs_text.message_in_code(message, strings)
        or not docs_text.hint_in_code(message, strings)
    ]
    assert wrong == []


def unresolved_test_ids(texts: list[str], root: Path = ROOT) -> list[str]:
    missing = []
    for path, name, param in {n for text in texts for n in docs_text.NODE.findall(text)}:
        source = root / path
        code = source.read_text("utf-8") if source.is_file() else ""
        if not re.search(rf"^(?:async )?def {name}\(", code, re.MULTILINE):
            missing.append(f"{path}::{name}")
        elif param and f'"{param}"' not in code and f"'{param}'" not in code:
            missing.append(f"{path}::{name}[{param}]")
    return sorted(missing)


def test_every_test_id_the_docs_name_resolves() -> None:
    texts = [p.read_text("utf-8") for p in docs_text.doc_paths()]
    assert sum(len(docs_text.NODE.findall(t)) for t in texts) >= 40
    assert unresolved_test_ids(texts) == []


def readme_problems(text: str) -> list[str]:
    lines = text.splitlines()
    problems = (
        [f"{len(lines)} lines, more than {README_LINES}"] if len(lines) > README_LINES else []
    )
    fenced = False
    for number, line in enumerate(lines, 1):
        if docs_text.FENCE.match(line):
            fenced = not fenced
        elif not fenced and not line.startswith("    ") and len(line) > README_WIDTH:
            problems.append(f"line {number}: {len(line)} characters")
    return problems


def test_the_readme_is_short() -> None:
    assert readme_problems((ROOT / "README.md").read_text("utf-8")) == []


# --- each check sees its own breakage -------------------------------------------------------


def _page(tmp_path: Path, text: str) -> list[Code]:
    page = tmp_path / "page.md"
    page.write_text(text, "utf-8")
    return list(docs_text.code_of(page))


def test_the_checks_read_targets_commands_and_options_from_code_only(tmp_path: Path) -> None:
    code = _page(
        tmp_path,
        "Prose: make itself exits 2, bench run --nope.\n\n"
        "    make bench HOST=x && .venv/bin/bench run --url U --cellz 1 -- --x\n\n"
        "| a | What you see |\n|---|---|\n| `make nope` | `bench: error: no such thing at all` |\n",
    )
    assert [t for c in code for t in docs_text.make_targets(c)] == ["bench", "nope"]
    (named,) = [n for c in code for n in docs_text.commands(c)]
    assert named == Named("bench", ("run",), ("--url", "--cellz"))
    assert resolve(named, _parsers())[1] == ["`bench run` has no --cellz"]
    assert resolve(Named("bench", ("twin", "run"), ()), _parsers())[1] == [
        "`bench twin run`: no such command"
    ]
    assert [m for c in code for m in docs_text.quoted_messages(c)] == ["no such thing at all"]


def test_a_quoted_message_must_start_a_string_of_the_code() -> None:
    strings = [
        ("--url must not carry a user name or password (given for ", ")"),
        ("cannot write ", ": ", ""),
    ]
    assert docs_text.message_in_code("--url must not carry a user name or password (…)", strings)
    assert docs_text.message_in_code("cannot write /x/y: No space left on device", strings)
    assert not docs_text.message_in_code("--url must not carry a password", strings)
    assert not docs_text.message_in_code("cannot read /x/y: No space left on device", strings)


def test_a_quoted_hint_must_start_a_string_of_the_code_or_be_the_message_own() -> None:
    strings = [
        ("interrupted; finished cells are in ", ""),
        ("continue with: bench run --resume ", ""),
        ("", ": not valid JSON (", ")"),
        ("another bench run is writing ", ""),
        ("wait until it ends, or remove ", " if no bench run is alive"),
        (" (incomplete chunked read)",),
    ]
    said = "interrupted; finished cells are in DIR (continue with: bench run --resume DIR)"
    assert docs_text.hint(said) == "continue with: bench run --resume DIR"
    assert docs_text.hint_in_code(said, strings)
    # A stale hint behind a head that still matches: the head check alone passes it.
    stale = "interrupted; finished cells are in DIR (start again with: bench run --out DIR)"
    assert docs_text.message_in_code(stale, strings)
    assert not docs_text.hint_in_code(stale, strings)
    # The parenthesis the code writes as part of the message is no hint to look up...
    assert docs_text.hint_in_code("results.json: not valid JSON (Expecting value: line 1)", strings)
    assert docs_text.hint_in_code("N requests failed: … (incomplete chunked read)", strings)
    assert not docs_text.hint_in_code("N requests failed: … (incomplete chunked write)", strings)
    # ...but a trailing field does not swallow a hint the code does not write.
    assert not docs_text.hint_in_code(
        "interrupted; finished cells are in DIR (wait for the other run first)", strings
    )
    # Cut with a `…` inside the hint: the text before it is checked; nested parentheses hold.
    assert docs_text.hint_in_code(
        "another bench run is writing DIR (wait until it ends …)", strings
    )
    assert not docs_text.hint_in_code(
        "another bench run is writing DIR (kill the other one (…))", strings
    )
    assert (
        docs_text.hint("another bench run is writing DIR (kill the other one (…))")
        == "kill the other one ("
    )
    # No hint: nothing in parentheses at the end, or none with a space before it.
    assert docs_text.hint("a message with (a part) inside it") is None
    assert docs_text.hint("f(x)") is None


def test_a_missing_test_id_and_a_long_readme_are_seen(tmp_path: Path) -> None:
    text = (
        "`tests/unit/test_docs.py::test_the_readme_is_short`, `tests/unit/test_docs.py::test_gone`"
    )
    assert unresolved_test_ids([text]) == ["tests/unit/test_docs.py::test_gone"]
    assert readme_problems("x\n" * 151 + "y" * 161 + "\n```\n" + "z" * 200 + "\n```\n") == [
        "155 lines, more than 150",
        "line 152: 161 characters",
    ]


def test_the_commands_page_is_what_the_makefile_and_the_parsers_say() -> None:
    from tools import commands_doc

    committed = (ROOT / "docs" / "commands.md").read_text("utf-8")
    assert committed == commands_doc.page(), "docs/commands.md is stale: run `make commands-doc`"


def quoted_rows_not_in(text: str, measured: Path) -> list[str]:
    """Rows of the tables TEXT quotes that their artifact does not hold, word for word."""
    wrong = []
    for name, line, rows in docs_text.quoted_tables(text):
        artifact = measured / name
        have = set(artifact.read_text("utf-8").splitlines()) if artifact.is_file() else set()
        if not have:
            wrong.append(f"line {line}: quotes measured/{name}, which is not there")
            continue
        wrong += [f"line {line}: {row}" for row in rows if row not in have]
    return wrong


def test_every_measured_table_the_docs_quote_is_its_artifacts() -> None:
    measured = ROOT / "docs" / "measured"
    wrong = [
        f"{page.relative_to(ROOT)} {problem}"
        for page in docs_text.doc_paths()
        for problem in quoted_rows_not_in(page.read_text("utf-8"), measured)
    ]
    assert wrong == []


def test_a_quoted_figure_that_differs_from_its_artifact_is_seen(tmp_path: Path) -> None:
    (tmp_path / "x-2026-12-04.md").write_text(
        "<!-- make x -->\n\n| a | b |\n|---|---|\n| 1 | 2.5% |\n"
    )
    doc = "From [the run](measured/x-2026-12-04.md):\n\n| a | b |\n|---|---|\n| 1 | {} |\n"
    assert quoted_rows_not_in(doc.format("2.5%"), tmp_path) == []
    assert quoted_rows_not_in(doc.format("2.6%"), tmp_path) == ["line 3: | 1 | 2.6% |"]
    assert quoted_rows_not_in(doc.replace("x-", "y-").format("2.5%"), tmp_path) == [
        "line 3: quotes measured/y-2026-12-04.md, which is not there"
    ]
    # A table after a paragraph without the link quotes nothing.
    assert quoted_rows_not_in("Prose.\n\n| a |\n|---|\n| 9 |\n", tmp_path) == []
