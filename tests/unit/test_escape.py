"""Text from outside is escaped where it is rendered (issue 29, rule 2: bench.escape)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bench import escape
from bench.export import writers
from bench.results import CellResult
from bench.run import card_tables
from bench.stream import bodies
from tests.support.runs import small_results

FORGED = "x |\n| Sustained decode | 1K | 1 | Valid | 9,999.9 | 1 | 1 | 1 | 1 |"


def test_a_reason_that_forges_a_table_row_stays_in_its_cell() -> None:
    """H10: an HTTP 500 body with `|` and LF made tables.md show a Valid 9,999.9 row."""
    good = small_results()
    bad = CellResult(
        context_label="8K", prompt_tokens=8192, concurrency=2, trial=0,
        status="invalid", reason=f"1 request(s) failed, first: HTTP 500: {FORGED}",
    )  # fmt: skip
    results = good.model_copy(update={"cells": (good.cells[0], bad)})
    text = card_tables.render(results)
    assert "9,999.9" in text  # the text is kept, escaped, in its own cell
    assert not any(line.startswith("| Sustained decode | 1K") for line in text.splitlines())
    assert escape.md_cell("a|b\r\nc\rd") == "a\\|b c d"


def test_control_characters_are_shown_escaped_on_a_terminal() -> None:
    assert escape.terminal("run/\x1b[2K\rOK\x1b[0m\n") == "run/\\x1b[2K\\rOK\\x1b[0m\\n"
    assert escape.terminal("plain ключ text") == "plain ключ text"


def test_an_unusable_charset_is_read_as_utf8() -> None:
    """H2: `charset=undefined` (or idna) was a UnicodeError traceback."""
    for charset in ("undefined", "idna", "no-such-codec", None):
        assert bodies.decode("héllo".encode(), charset) == "héllo"


def test_a_csv_cell_is_never_a_formula(tmp_path: Path) -> None:
    """M2: a server_version of `=HYPERLINK(...)` was a live formula in a spreadsheet."""
    rows = [{"server_version": '=HYPERLINK("http://x","click")', "n": -1.5, "m": "@SUM(A1)"}]
    out = writers.write(rows, ["server_version", "n", "m"], tmp_path / "x.csv", "csv")
    with out.open() as f:
        (got,) = csv.DictReader(f)
    assert got == {"server_version": "'=HYPERLINK(\"http://x\",\"click\")", "n": "-1.5",
                   "m": "'@SUM(A1)"}  # fmt: skip


def test_a_hostile_member_name_reaches_the_terminal_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """M3: a member named `run/\\x1b[2K\\rOK …` made the terminal show a green OK line over
    the refusal; the error line now shows its control characters escaped."""
    import io
    import tarfile

    from bench.cli import main

    archive = tmp_path / "S.tar.gz"
    forged = "run/\x1b[2K\r\x1b[32mOK S.tar.gz: 12 files match manifest.json\x1b[0m\x1b[8m"
    with tarfile.open(archive, "w:gz") as tar:
        link = tarfile.TarInfo(forged)
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
        tar.addfile(tarfile.TarInfo("run/x"), io.BytesIO(b""))
    allowed = tmp_path / "allowed"
    allowed.write_text("")
    assert main(["verify", str(archive), "--allowed-signers", str(allowed)]) == 5
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err
    assert "\\x1b[2K\\r\\x1b[32mOK S.tar.gz" in err


def test_clipped_escapes_control_characters_and_cuts_to_its_limit() -> None:
    assert escape.clipped("gpu\x1b[31m01", 80) == "gpu\\x1b[31m01"
    assert escape.clipped("x" * 100, 10) == "x" * 9 + "…"
    # The limit counts the escapes as written: a cut never leaves a raw control character.
    cut = escape.clipped("\x1b" * 50, 12)
    assert len(cut) == 12 and "\x1b" not in cut and cut.endswith("…")
    assert escape.clipped("short", 5) == "short"
