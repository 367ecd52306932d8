"""bench.writes, the one way bench writes a file (issue 29, rule 5; H9, L6, L7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import writes
from bench.errors import DiskError, Exit


def test_two_writers_of_one_name_never_share_a_temporary_file(tmp_path: Path) -> None:
    """L6: two `bench pack D` at once shared `D.tar.gz.partial`; one failed."""
    target = tmp_path / "D.tar.gz"
    with writes.atomic_path(target) as one, writes.atomic_path(target) as two:
        assert one != two and one.parent == two.parent == tmp_path
        one.write_bytes(b"first")
        two.write_bytes(b"second")
    assert target.read_bytes() == b"first"  # the outer block ends last and wins whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D.tar.gz"]


def test_a_failure_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    target = tmp_path / "card.json"
    target.write_text("old")

    def cut() -> None:
        with writes.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("cut")

    with pytest.raises(RuntimeError):
        cut()
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.json"]


def test_a_folder_that_cannot_be_written_is_one_disk_error(tmp_path: Path) -> None:
    with pytest.raises(DiskError) as info:
        writes.write_atomic(tmp_path / "missing" / "x.html", "text")
    assert info.value.one_line() == (
        f"cannot write {tmp_path / 'missing' / 'x.html'}: No such file or directory"
    )
    assert info.value.exit_code == Exit.DISK


def test_a_new_file_gets_the_mode_a_plain_write_gives(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    writes.write_atomic(tmp_path / "atomic", "x")
    assert (tmp_path / "atomic").stat().st_mode == plain.stat().st_mode
