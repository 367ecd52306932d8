"""The recording step every flow ends with (bench.history.recording): when a history is
configured, and what one line says when the database cannot take the bundle.

Unit tier: the bundle's verification (ssh-keygen) is the one part stood in for, by the
`ingest_one` seam; the database is a real SQLite file, opened, upgraded and written by the
code the flows run. tests/history/test_recording_flows.py runs the real flow end to end."""

from __future__ import annotations

import io
import pathlib
import shlex
from collections.abc import Callable

import pytest

from bench import cli
from bench.card.model import Card
from bench.errors import HistoryError, UsageError
from bench.history import database, ingest, recording
from bench.history.database import Connection, Target
from bench.verdict.run_source import Verification
from tests.history.conftest import count, unsigned_record
from tests.support.synth import make_results

URL = "postgresql://bench@db.example.org:5432/history"
RUN_ID = "20261204-221500-abc123"


def test_nothing_is_configured_unless_the_command_or_the_setting_names_a_history() -> None:
    assert recording.choice(None, None) is None
    assert recording.choice(None, URL) == Target("postgresql", URL)
    assert recording.choice("h.sqlite3", URL) == Target("sqlite", "h.sqlite3")  # --history wins
    assert recording.choice("sqlite:///var/h.db", None) == Target("sqlite", "/var/h.db")
    assert recording.choice("h.sqlite3", URL, off=True) is None  # --no-history
    assert recording.choice(None, URL, off=True) is None


def test_a_url_with_a_password_is_refused_before_the_run_without_showing_it() -> None:
    with pytest.raises(UsageError) as caught:
        recording.choice("postgresql://bench:hunter2@db/history", None)
    assert "hunter2" not in caught.value.one_line()


def test_each_recording_command_has_history_and_no_history() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["local", "--history", URL, "--", "--duration", "5"])
    assert (args.history, args.no_history) == (URL, False)
    assert parser.parse_args(["local", "--no-history"]).no_history is True


Ingest = Callable[[Connection, pathlib.Path, Verification], ingest.Ingested]


def _writes(card: Card, seen: list[Verification]) -> Ingest:
    """ingest.ingest with the bundle's rows made here instead of read from a signed bundle."""
    results = make_results(card, contexts={"8K"}).model_copy(update={"run_id": RUN_ID})
    record = unsigned_record(results)

    def ingest_one(conn: Connection, path: pathlib.Path, how: Verification) -> ingest.Ingested:
        seen.append(how)
        outcome = ingest.write(conn, record)
        run = record.run
        return ingest.Ingested(path, run["run_id"], run["manifest_sha256"], "signed", outcome)

    return ingest_one


def _never(conn: Connection, path: pathlib.Path, how: Verification) -> ingest.Ingested:
    raise AssertionError("nothing is recorded without a history")


def _bundle(tmp_path: pathlib.Path) -> pathlib.Path:
    bundle = tmp_path / "results" / "gpu01" / "run-1.tar.gz"
    bundle.parent.mkdir(parents=True)
    bundle.write_bytes(b"the signed bundle the flow verified")
    return bundle


def test_without_a_history_nothing_is_opened_and_nothing_said(tmp_path: pathlib.Path) -> None:
    out = io.StringIO()
    got = recording.record(None, _bundle(tmp_path), tmp_path / "allowed", out=out,
                           ingest_one=_never)  # fmt: skip
    assert got is None and out.getvalue() == ""
    assert list(tmp_path.rglob("*.sqlite3")) == []


def test_a_configured_history_records_the_bundle_once_and_says_so(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target = Target("sqlite", str(tmp_path / "new" / "history.sqlite3"))  # made on first use
    allowed = tmp_path / "allowed_signers"
    seen: list[Verification] = []
    out = io.StringIO()
    write = _writes(card, seen)
    assert recording.record(target, _bundle(tmp_path), allowed, out=out, ingest_one=write) == (
        "recorded"
    )
    assert recording.record(target, tmp_path / "results" / "gpu01" / "run-1.tar.gz", allowed,
                            out=out, ingest_one=write) == "already recorded"  # fmt: skip
    first, again = out.getvalue().splitlines()
    assert first == f"history: run {RUN_ID} recorded in {target}"
    assert again == f"history: run {RUN_ID} already recorded in {target}"
    assert count(target, "runs") == 1 and count(target, "figures") > 0
    # Verified as the flow verified it: against the flow's allowed-signers file, never
    # --unverified.
    assert seen == [Verification((allowed,)), Verification((allowed,))]


def _down(tmp_path: pathlib.Path) -> Target:
    """A history the database cannot serve: the file is not a SQLite database."""
    bad = tmp_path / "down.sqlite3"
    bad.write_bytes(b"no database here " * 64)
    return Target("sqlite", str(bad))


def test_a_database_that_cannot_take_it_is_one_line_the_bundle_kept_and_the_command(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target, bundle = _down(tmp_path), _bundle(tmp_path)
    allowed = tmp_path / "keys" / "allowed signers"  # a space: the command quotes it
    seen: list[Verification] = []
    out = io.StringIO()
    got = recording.record(target, bundle, allowed, out=out, ingest_one=_writes(card, seen))
    assert got == "not recorded"
    assert seen == []  # the database failed first; nothing half-written
    text = out.getvalue()
    assert text.count("\n") == 1, text
    assert text.startswith(f"history: {bundle} not recorded in {target} (file is not a database)")
    assert "the bundle is kept" in text
    assert bundle.read_bytes() == b"the signed bundle the flow verified"
    # The command the line ends with is `bench history ingest` of that bundle into that
    # history, as bench's own parser reads it.
    command = shlex.split(text.split("record it later with: ", 1)[1])
    assert command[1:3] == ["history", "ingest"], command
    args = cli.build_parser().parse_args(command[1:])
    assert args.paths == [bundle.resolve()]
    assert database.locate(args.db, None) == Target(
        "sqlite", str(pathlib.Path(target.where).resolve())
    )
    assert args.allowed_signers == [allowed.resolve()] and not args.unverified
    # Later, with the database back, the same bundle is recorded: nothing was lost.
    pathlib.Path(target.where).unlink()
    again = io.StringIO()
    assert recording.record(target, bundle, allowed, out=again,
                            ingest_one=_writes(card, seen)) == "recorded"  # fmt: skip
    assert count(target, "runs") == 1


def test_the_line_never_holds_the_password_and_stays_one_line(tmp_path: pathlib.Path) -> None:
    password = "hunter2-" + "x" * 8

    def echoes(conn: Connection, path: pathlib.Path, how: Verification) -> ingest.Ingested:
        # a server's message quoting what it was given, over two lines
        raise HistoryError(f"history database db: password {password} rejected\nDETAIL: no")

    out = io.StringIO()
    target = Target("sqlite", str(tmp_path / "h.sqlite3"))
    got = recording.record(target, _bundle(tmp_path), tmp_path / "allowed", out=out,
                           environ={"PGPASSWORD": password}, ingest_one=echoes)  # fmt: skip
    assert got == "not recorded"
    text = out.getvalue()
    assert password not in text and "password ******** rejected" in text
    assert text.count("\n") == 1 and "\\nDETAIL: no" in text


def test_a_bundle_that_cannot_be_read_is_not_recorded_and_said_so(tmp_path: pathlib.Path) -> None:
    def gone(conn: Connection, path: pathlib.Path, how: Verification) -> ingest.Ingested:
        raise FileNotFoundError(2, "No such file or directory")

    out = io.StringIO()
    target = Target("sqlite", str(tmp_path / "h.sqlite3"))
    bundle = tmp_path / "gone.tar.gz"
    assert recording.record(target, bundle, tmp_path / "a", out=out, ingest_one=gone) == (
        "not recorded"
    )
    assert f"history: {bundle} not recorded in {target} ({bundle}: " in out.getvalue()
    assert count(target, "runs") == 0


def test_the_later_command_works_from_any_folder(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    words = shlex.split(
        recording.later_command(
            pathlib.Path("results/run1.tar.gz"), Target("sqlite", "h.sqlite3"), pathlib.Path("a")
        )
    )
    assert words[3] == str(tmp_path.resolve() / "results" / "run1.tar.gz")
    assert words[words.index("--db") + 1] == str(tmp_path.resolve() / "h.sqlite3")
    assert words[words.index("--allowed-signers") + 1] == str(tmp_path.resolve() / "a")
    server = recording.later_command(pathlib.Path("b.tar.gz"), Target("postgresql", URL), tmp_path)
    assert shlex.split(server)[5] == URL  # a URL as given
