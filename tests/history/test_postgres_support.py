"""The private PostgreSQL cluster's set-up says what is missing instead of skipping."""

from __future__ import annotations

import pytest

from tests.support import postgres


def test_missing_server_binaries_fail_the_test_and_name_the_make_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr("glob.glob", lambda pattern: [])
    with pytest.raises(pytest.fail.Exception) as caught:
        postgres.binaries()
    assert "initdb and pg_ctl" in str(caught.value) and "make postgresql" in str(caught.value)


def test_the_url_carries_no_password() -> None:
    c = postgres.Cluster("127.0.0.1", 5999, "pw-not-in-url")
    assert c.url("h1") == "postgresql://bench@127.0.0.1:5999/h1"
