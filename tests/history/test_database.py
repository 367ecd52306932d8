"""Where the history is, and that a password never comes from a URL (bench.history.database,
BENCH_HISTORY__URL in bench.settings)."""

from __future__ import annotations

import pathlib

import pytest

from bench.errors import HistoryError, SettingsError, UsageError
from bench.history import database
from bench.history.database import Target
from bench.settings import load_settings


def test_the_default_is_a_sqlite_file_under_results() -> None:
    assert database.locate(None, None) == Target("sqlite", "results/history.sqlite3")


def test_db_wins_over_the_setting_and_both_name_either_dialect() -> None:
    url = "postgresql://bench@db.example.org:5433/history"
    assert database.locate(url, "other.sqlite3") == Target("postgresql", url)
    assert database.locate(None, url) == Target("postgresql", url)
    assert database.locate(None, "postgres://h/d") == Target("postgresql", "postgres://h/d")
    assert database.locate("sqlite:///var/h.db", None) == Target("sqlite", "/var/h.db")
    assert database.locate("h.db", url) == Target("sqlite", "h.db")


def test_a_password_in_the_url_is_refused_without_being_repeated() -> None:
    with pytest.raises(UsageError) as caught:
        database.locate("postgresql://bench:hunter2@db:5432/history", None)
    line = caught.value.one_line()
    assert "hunter2" not in line
    assert "postgresql://bench:********@db:5432/history" in line and "PGPASSWORD" in line


def test_a_password_beside_a_bad_port_is_not_shown_either() -> None:
    with pytest.raises(UsageError) as caught:
        database.locate("postgresql://bench:hunter2@db:notaport/history", None)
    assert "hunter2" not in caught.value.one_line()


def test_a_password_as_a_libpq_parameter_is_refused_and_masked() -> None:
    """libpq also reads ?password= and ?sslpassword= from a URI: as secret as user:pass@."""
    for url in (
        "postgresql://bench@db/history?sslmode=require&password=hunter2",
        "postgresql://bench@db/history?SSLPassword=hunter2",
        "postgresql://bench@db/history?pass%77ord=hunter2",
    ):
        with pytest.raises(UsageError) as caught:
            database.locate(url, None)
        line = caught.value.one_line()
        assert "hunter2" not in line and "=********" in line, line
    with pytest.raises(SettingsError) as setting:
        load_settings({"BENCH_HISTORY__URL": "postgresql://bench@db/h?password=s3cr3t"})
    assert "s3cr3t" not in setting.value.one_line()
    kept = "postgresql://bench@db/history?sslmode=require&passfile=/home/u/.pgpass"
    assert database.locate(kept, None) == Target("postgresql", kept)


def test_the_setting_refuses_a_password_too_and_never_shows_it() -> None:
    env = {"BENCH_HISTORY__URL": "postgresql://bench:s3cr3t@db/history"}
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    assert "s3cr3t" not in caught.value.one_line()
    assert "BENCH_HISTORY__URL" in caught.value.one_line()
    ok = load_settings({"BENCH_HISTORY__URL": "postgresql://bench@db/history"})
    assert ok.history.url == "postgresql://bench@db/history"
    assert "s3cr3t" not in str(ok.redacted())


def test_another_scheme_is_refused() -> None:
    with pytest.raises(UsageError, match="not a postgresql:// URL or a file"):
        database.locate("mysql://bench@db/history", None)


def test_a_file_that_is_not_a_database_is_one_line_and_exit_history(
    tmp_path: pathlib.Path,
) -> None:
    bad = tmp_path / "history.sqlite3"
    bad.write_bytes(b"not a database at all, " * 100)
    with pytest.raises(HistoryError) as caught, database.connect(Target("sqlite", str(bad))):
        pass
    assert caught.value.one_line().startswith(f"history database {bad}: ")
    assert "\n" not in caught.value.one_line()
