"""Reading a publisher's file: a JSON array or JSON lines streamed item by item, bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import CardError
from bench.publishers import source


def _items(tmp_path: Path, data: bytes, **kw: int) -> list[object] | str:
    p = tmp_path / "f.json"
    p.write_bytes(data)
    try:
        return list(source.iter_json_items(p, "a dump", **kw))
    except CardError as exc:
        return f"CardError: {exc}"


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b'[{"a": 1}, {"b": 2}]', [{"a": 1}, {"b": 2}]),
        (b"  [ 1 , 2.5, 3 ]  \n", [1, 2.5, 3]),
        (b'{"a": 1}\n{"a": 2}\n', [{"a": 1}, {"a": 2}]),
        (b"[]", []),
        (b"", []),
    ],
)
def test_arrays_and_json_lines_give_their_items_in_order(
    tmp_path: Path, data: bytes, want: list[object]
) -> None:
    assert _items(tmp_path, data) == want


def test_items_across_chunk_edges_and_numbers_split_by_one_come_out_whole(tmp_path: Path) -> None:
    rows = [{"id": i, "v": 12345.678 + i, "pad": "é" * (i % 7)} for i in range(20_000)]
    got = _items(tmp_path, json.dumps(rows).encode())
    assert got == rows


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"[1, 2", "the JSON array never ends"),
        (b"[1, 2] x", "bytes after the JSON array"),
        (b"[1, {]", "not JSON at character"),
        (b"[\xff]", "is not UTF-8 text"),
        (b"[" + b"[" * 100_000 + b"]" * 100_000 + b"]", "nested too deep"),
        (b"[1" + b"7" * 70_000 + b"]", "a number too long"),
    ],
)
def test_a_broken_file_is_one_line_naming_what_is_wrong(
    tmp_path: Path, data: bytes, said: str
) -> None:
    got = _items(tmp_path, data)
    assert isinstance(got, str) and said in got and "\n" not in got and "not a dump" in got


def test_an_item_larger_than_the_bound_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    got = _items(tmp_path, b'[{"a": "' + b"x" * 300_000 + b'"}]', max_item_bytes=100_000)
    assert isinstance(got, str) and "larger than 100,000 bytes" in got


def test_more_items_than_the_bound_are_refused(tmp_path: Path) -> None:
    got = _items(tmp_path, b"[" + b",".join(b"1" for _ in range(11)) + b"]", max_items=10)
    assert isinstance(got, str) and "more than 10 items" in got


def test_a_missing_file_is_a_card_error(tmp_path: Path) -> None:
    with pytest.raises(CardError, match="cannot read"):
        list(source.iter_json_items(tmp_path / "none.json", "a dump"))
    with pytest.raises(CardError, match="cannot read"):
        source.read_text(tmp_path / "none.json", "a summary")


def test_read_text_refuses_a_large_or_not_utf8_file(tmp_path: Path) -> None:
    p = tmp_path / "s.txt"
    p.write_bytes(b"x" * 101)
    with pytest.raises(CardError, match="larger than 100 bytes"):
        source.read_text(p, "a summary", max_bytes=100)
    p.write_bytes(b"ok \xfe")
    with pytest.raises(CardError, match="not UTF-8"):
        source.read_text(p, "a summary")


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=400))
def test_any_bytes_give_items_or_one_card_error(tmp_path: Path, data: bytes) -> None:
    got = _items(tmp_path, data, max_item_bytes=64)
    assert isinstance(got, list) or (isinstance(got, str) and got.startswith("CardError: "))
