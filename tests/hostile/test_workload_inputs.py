"""Hostile data files behind a workload (a ShareGPT dataset, a mooncake trace): each is one
UsageError line naming the file (and the entry or the line), never a traceback or a hang;
a file over the size bound is refused before a byte is read; a large valid file is read in
bounded memory (a child under RLIMIT_AS, tests/support/capped.py); and any bytes at all are
a dataset (the same as json.loads would read, cut in any pieces) or one line.

Run as `python -m tests.hostile.test_workload_inputs sharegpt|trace FILE` it is that child.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.errors import UsageError
from bench.workload import datafile, datasets, trace
from bench.workload_spec import load_workload
from tests.support.budget import fixed_budget
from tests.support.procs import assert_one_line_error, bench_env, capped_python, finish, new_mark
from tests.support.procs import bench as bench_process

T = TypeVar("T")
GOOD = {
    "conversations": [{"from": "human", "value": "a prompt"}, {"from": "gpt", "value": "x" * 20}]
}


def _one_line(call: Any) -> str:
    with pytest.raises(UsageError) as caught:
        call()
    line = caught.value.one_line()
    assert "\n" not in line and "\r" not in line, line
    return line


def _load(tmp_path: Path, kind: str, content: bytes | None) -> str:
    """The one line `load_workload` gives for a workload on a data file holding `content`
    (None: the file is made by the caller)."""
    data = tmp_path / ("d.json" if kind == "sharegpt" else "d.jsonl")
    if content is not None:
        data.write_bytes(content)
    spec = (
        '[prompts]\nsource = "sharegpt"\npath = "d.json"\n[arrivals]\nrates = [1.0]\n'
        if kind == "sharegpt"
        else '[arrivals]\nkind = "trace"\npath = "d.jsonl"\n'
    )
    (tmp_path / "w.toml").write_text(f'name = "w"\n{spec}')
    line = _one_line(lambda: load_workload(tmp_path / "w.toml"))
    assert str(data) in line
    return line


def _entries(*entries: Any) -> bytes:
    return json.dumps(list(entries)).encode()


def _turns(*turns: Any) -> dict[str, Any]:
    return {"conversations": list(turns)}


DATASETS: list[tuple[str, bytes, str]] = [
    ("empty", b"", "is empty"),
    ("whitespace", b" \n\t ", "is not a JSON list (it starts with nothing but whitespace)"),
    ("not json", b"hello", "is not a JSON list (it starts with 'h')"),
    ("an object", json.dumps(GOOD).encode(), "is not a JSON list (it starts with '{')"),
    ("cut short", b'[{"conversations": [', "entry 0 is not valid JSON"),
    ("trailing comma", b'[{"a": 1},]', "entry 1 is not valid JSON"),
    ("no comma", b'[{"a": 1} {"a": 2}]', "after entry 0 comes '{', not ',' or ']'"),
    ("unclosed", b'[{"a": 1}', "after entry 0 comes the end"),
    ("two documents", b"[] []", "holds more than one JSON document"),
    ("not utf-8", b'[{"id": "\xff"}]', "is not UTF-8 text"),
    ("utf-16", "[]".encode("utf-16"), "is not UTF-8 text"),
    ("cut in a character", b'["\xe4\xbd', "is not UTF-8 text"),
    ("nested lists", b"[" * 200_000, "entry 0 is nested too deeply"),
    ("nested objects", b'[{"a": ' * 100_000, "entry 0 is nested too deeply"),
    ("huge integer", b"[" + b"7" * 5000 + b"]", "entry 0 is not valid JSON (Exceeds the limit"),
    ("an entry a string", b'["hi"]', "entry 0 is a string, not a conversation object"),
    ("an entry a number", _entries(GOOD, 3), "entry 1 is a value, not a conversation object"),
    (
        "conversations an object",
        _entries({"conversations": {}}),
        "entry 0's conversations is an object, not a list",
    ),
    ("a turn a string", _entries(_turns("hi", "there")), "entry 0's turn 0 is not an object"),
    (
        "a value a number",
        _entries(_turns({"from": "human", "value": 3}, GOOD["conversations"][1])),
        "entry 0's turn 0 is not an object with a string 'from' and 'value'",
    ),
    (
        "no from",
        _entries(_turns(GOOD["conversations"][0], {"value": "x"})),
        "entry 0's turn 1 is not",
    ),
    ("an empty list", b"[]", "has no conversation this workload can use: it holds none"),
    (
        "no user turn",
        _entries(
            *[_turns({"from": "gpt", "value": "hello there"}, {"from": "human", "value": "x" * 20})]
            * 3
        ),
        "has no conversation this workload can use: 3 no user turn first",
    ),
    (
        "all short",
        _entries(
            _turns({"from": "human", "value": "hi"}, {"from": "gpt", "value": "yes"}), {"id": 1}
        ),
        "can use: 1 fewer than 2 turns, 1 prompt or output under 4 tokens",
    ),
]


@pytest.mark.parametrize(
    ("content", "named"), [d[1:] for d in DATASETS], ids=[d[0] for d in DATASETS]
)
def test_a_hostile_dataset_is_one_line_naming_it(
    tmp_path: Path, content: bytes, named: str
) -> None:
    assert named in _load(tmp_path, "sharegpt", content)


def _row(**fields: Any) -> dict[str, Any]:
    return {"timestamp": 0, "input_length": 600, "output_length": 8, **fields}


def _lines(*rows: Any) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


TRACES: list[tuple[str, bytes, str]] = [
    ("empty", b"", "is empty"),
    ("blank lines only", b"\n \n\t\n", "holds no request"),
    ("not json", _lines(_row(), b"{oops"), "line 2 is not JSON (Expecting property name"),
    ("counted with blank lines", _lines(_row(), b"", b"[1, 2]"), "line 3 is not a JSON object"),
    (
        "out of order",
        _lines(_row(timestamp=10), _row(timestamp=5)),
        "line 2: timestamp 5 is before the previous line's 10: a trace is in arrival order",
    ),
    ("negative time", _lines(_row(timestamp=-1)), "line 1: timestamp -1 is not a time"),
    (
        "nan time",
        _lines(b'{"timestamp": NaN, "input_length": 5, "output_length": 5}'),
        "line 1: timestamp nan is not a time",
    ),
    (
        "infinite time",
        _lines(_row(), b'{"timestamp": Infinity}'),
        "line 2: timestamp inf is not a time",
    ),
    ("string time", _lines(_row(timestamp="5")), "line 1: timestamp is missing or not a number"),
    ("no time", _lines({"input_length": 5, "output_length": 5}), "line 1: timestamp is missing"),
    ("true time", _lines(_row(timestamp=True)), "line 1: timestamp is missing or not a number"),
    (
        "fractional length",
        _lines(_row(input_length=12.5)),
        "line 1: input_length 12.5 is not an integer from 1",
    ),
    (
        "float length",
        _lines(_row(output_length=12.0)),
        "line 1: output_length 12.0 is not an integer",
    ),
    (
        "true length",
        _lines(_row(output_length=True)),
        "line 1: output_length True is not an integer",
    ),
    (
        "string length",
        _lines(_row(input_length="12")),
        "line 1: input_length '12' is not an integer",
    ),
    (
        "zero length",
        _lines(_row(), _row(output_length=0)),
        "line 2: output_length 0 is not an integer",
    ),
    ("huge length", _lines(_row(input_length=10**9)), "line 1: input_length 1000000000 is not"),
    ("no length", _lines({"timestamp": 0}), "line 1: input_length None is not an integer"),
    (
        "ids not a list",
        _lines(_row(hash_ids=5)),
        "line 1: hash_ids is not a list of non-negative integers",
    ),
    ("negative id", _lines(_row(hash_ids=[-1])), "line 1: hash_ids is not a list"),
    ("float id", _lines(_row(hash_ids=[1.5])), "line 1: hash_ids is not a list"),
    (
        "too many ids",
        _lines(_row(input_length=100, hash_ids=[1, 2])),
        "line 1: 2 hash_ids for 100 input tokens, more than its blocks of 512",
    ),
    ("not utf-8", _lines(_row(), b'{"timestamp": 0, "x": "\xff"}'), "line 2 is not UTF-8 text"),
    (
        "a long line",
        _lines(b'{"pad": "' + b"a" * (1 << 20) + b'"}'),
        "line 1 is over 1,048,576 bytes",
    ),
    ("nested", _lines(b"[" * 200_000), "line 1 is nested too deeply"),
    (
        "huge integer",
        _lines(b'{"timestamp": ' + b"9" * 5000 + b"}"),
        "line 1 is not JSON (Exceeds the limit",
    ),
]


@pytest.mark.parametrize(("content", "named"), [t[1:] for t in TRACES], ids=[t[0] for t in TRACES])
def test_a_hostile_trace_is_one_line_naming_its_line(
    tmp_path: Path, content: bytes, named: str
) -> None:
    assert named in _load(tmp_path, "trace", content)


@pytest.mark.parametrize("kind", ["sharegpt", "trace"])
def test_a_file_over_the_bound_is_refused_by_its_size_unread(tmp_path: Path, kind: str) -> None:
    """A sparse file one byte over 1 GiB (truncate: nothing is written): refused by its
    size, before a byte is read."""
    data = tmp_path / ("d.json" if kind == "sharegpt" else "d.jsonl")
    with data.open("wb") as f:
        f.truncate(datafile.MAX_DATA_BYTES + 1)
    line = _load(tmp_path, kind, None)
    assert "is 1,073,741,825 bytes, over the 1,073,741,824 a data file may be" in line


@pytest.mark.parametrize("kind", ["sharegpt", "trace"])
def test_a_folder_a_fifo_and_a_missing_file_are_one_line_each(tmp_path: Path, kind: str) -> None:
    data = tmp_path / ("d.json" if kind == "sharegpt" else "d.jsonl")
    assert "does not exist" in _load(tmp_path, kind, None)
    data.mkdir()
    assert "is not a regular file" in _load(tmp_path, kind, None)
    data.rmdir()
    os.mkfifo(data)  # opened, it would block until a writer came: never opened
    assert "is not a regular file" in _load(tmp_path, kind, None)


def test_an_entry_past_the_item_bound_is_refused(tmp_path: Path) -> None:
    line = _load(
        tmp_path, "sharegpt", b'[{"id": "' + b"a" * (datafile.MAX_ITEM_CHARS + 10) + b'"}]'
    )
    assert "entry 0 is over 16,777,216 characters" in line
    cut = _load(tmp_path, "sharegpt", b'[{"id": "' + b"a" * (datafile.MAX_ITEM_CHARS + 10))
    assert "entry 0 is over 16,777,216 characters or not valid JSON" in cut


def _or_line(read: Callable[[], T]) -> T | str:
    """What `read` returns, or its UsageError's line; any other exception fails the test."""
    try:
        return read()
    except UsageError as exc:
        return exc.one_line()


def _reference(raw: bytes) -> list[tuple[int, str, int, int]] | None:
    """What the rules keep, read with json.loads (the whole text at once); None: refused."""
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, list):
        return None
    kept = []
    for i, item in enumerate(doc):
        if not isinstance(item, dict):
            return None
        turns = item.get("conversations")
        if turns is None or (isinstance(turns, list) and len(turns) < 2):
            continue
        if not isinstance(turns, list) or not all(
            isinstance(t, dict)
            and isinstance(t.get("from"), str)
            and isinstance(t.get("value"), str)
            for t in turns[:2]
        ):
            return None
        prompt, answer = turns[0]["value"], turns[1]["value"]
        if turns[0]["from"] not in ("human", "user") or not prompt.strip():
            continue
        p, o = math.ceil(len(prompt) / 4), math.ceil(len(answer) / 4)
        surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in prompt)
        if p < 4 or o < 4 or p > 1024 or p + o > 2048 or surrogate:
            continue
        kept.append((i, prompt, p, o))
    return kept or None


_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
_LONG = st.text(alphabet=st.characters(codec="utf-8"), min_size=16, max_size=90)
_TURN = st.one_of(
    st.fixed_dictionaries(
        {
            "from": st.sampled_from(["human", "user", "gpt", "system"]),
            "value": st.one_of(_TEXT, st.integers(), _LONG),
        }
    ),
    st.integers(),
    _TEXT,
)
_GOOD = st.fixed_dictionaries(
    {
        "conversations": st.tuples(
            st.fixed_dictionaries({"from": st.sampled_from(["human", "user"]), "value": _LONG}),
            st.fixed_dictionaries({"from": st.just("gpt"), "value": _LONG}),
        ).map(list)
    }
)
_ENTRY = st.one_of(
    _GOOD,
    st.fixed_dictionaries({"id": _TEXT, "conversations": st.lists(_TURN, max_size=4)}),
    st.fixed_dictionaries(
        {"conversations": st.one_of(st.none(), _TEXT, st.dictionaries(_TEXT, _TEXT))}
    ),
    st.integers(),
    st.none(),
)
_VALID = st.lists(st.one_of(_GOOD, _GOOD, _ENTRY.filter(lambda e: isinstance(e, dict))), max_size=6)
_DOCS = st.one_of(
    st.binary(max_size=200),
    st.lists(_ENTRY, max_size=6).map(lambda e: json.dumps(e).encode()),
    _VALID.map(lambda e: json.dumps(e).encode()),
    _VALID.map(lambda e: json.dumps(e, indent=1, ensure_ascii=False).encode()),
    _VALID.map(lambda e: json.dumps(e).encode()).flatmap(
        lambda raw: st.integers(0, len(raw)).map(lambda cut: raw[:cut])
    ),
)


@fixed_budget(300)
@given(raw=_DOCS, chunk=st.integers(1, 64))
def test_any_bytes_are_what_json_loads_reads_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes, chunk: int
) -> None:
    """The streaming reader, its pieces as small as one byte, keeps exactly what reading
    the whole text with json.loads and the rules keeps, or refuses with one line."""
    path = tmp_path_factory.getbasetemp() / "fuzz.json"
    path.write_bytes(raw)
    expected = _reference(raw) if raw else None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datafile, "CHUNK_BYTES", chunk)
        data = _or_line(lambda: datasets.read_sharegpt(path, "dataset fuzz"))
    if isinstance(data, str):
        assert "\n" not in data and expected is None
        return
    assert expected is not None
    got = [
        (e, data.prompt(e), data.prompt_tokens[k], data.output_tokens[k])
        for k, e in enumerate(data.entry)
    ]
    assert got == expected


_TRACE_LINES = st.sampled_from(
    [
        b'{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}',
        b'{"timestamp": 10, "input_length": 5, "output_length": 1}',
        b'{"timestamp": 10.5, "input_length": 1025, "output_length": 3, "hash_ids": [0, 1, 2]}',
        b'{"timestamp": 5, "input_length": 6, "output_length": 2, "hash_ids": [9]}',
        b'{"timestamp": -1, "input_length": 6, "output_length": 2}',
        b'{"timestamp": NaN, "input_length": 6, "output_length": 2}',
        b'{"timestamp": 20, "input_length": 6.5, "output_length": 2}',
        b'{"timestamp": 20, "input_length": 6, "output_length": 2, "hash_ids": [1, 2]}',
        b"",
        b"  ",
        b"[",
        b"{}",
        b"null",
        b"\xff",
        b"[" * 3000,
    ]
)


@fixed_budget(300)
@given(raw=st.one_of(st.binary(max_size=200), st.lists(_TRACE_LINES, max_size=8).map(b"\n".join)))
def test_any_bytes_are_a_trace_in_order_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes
) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz.jsonl"
    path.write_bytes(raw)
    t = _or_line(lambda: trace.read_trace(path, "trace fuzz"))
    if isinstance(t, str):
        assert "\n" not in t
        return
    assert len(t) >= 1 and list(t.at_ms) == sorted(t.at_ms) and t.at_ms[0] >= 0
    for i in range(len(t)):
        assert t.inputs[i] >= 1 and t.outputs[i] >= 1
        assert len(t.blocks(i)) <= math.ceil(t.inputs[i] / trace.BLOCK_TOKENS)


def _big_dataset(path: Path, mib: int) -> int:
    """A valid ShareGPT file of about `mib` MiB: nine in ten prompts over 1,024 tokens
    (dropped), one kept; the entries it holds."""
    long = _turns(
        {"from": "human", "value": "word " * 900}, {"from": "gpt", "value": "an answer " * 9}
    )
    short = _turns(
        {"from": "human", "value": "a short question?"}, {"from": "gpt", "value": "an answer " * 9}
    )
    block = ",\n".join(json.dumps(e) for e in [short] + [long] * 9).encode()
    repeats = (mib << 20) // len(block)
    with path.open("wb") as f:
        f.write(b"[")
        f.write(b",\n".join([block] * repeats))
        f.write(b"]\n")
    return repeats * 10


def _big_trace(path: Path, mib: int) -> int:
    line = _lines(_row(input_length=8000, hash_ids=list(range(16))))
    repeats = (mib << 20) // len(line)
    path.write_bytes(line * repeats)
    return repeats


CAP_GIB = 0.25  # the child's address space: pytest, hypothesis and bench in ~60 MB


@pytest.mark.subprocess
def test_a_large_valid_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """256 MiB of conversations and 64 MiB of trace, each read by a child whose address
    space is capped at 256 MiB: streamed, they fit; read whole (json.load, the control),
    they do not."""
    dataset, lines = tmp_path / "big.json", tmp_path / "big.jsonl"
    entries, requests = _big_dataset(dataset, 256), _big_trace(lines, 64)
    module = "tests.hostile.test_workload_inputs"
    for kind, path, said in (
        ("sharegpt", dataset, f"kept {entries // 10} of {entries}"),
        ("trace", lines, f"requests {requests}"),
    ):
        done = subprocess.run(
            [*capped_python(CAP_GIB), module, kind, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == said
    control = subprocess.run(
        [*capped_python(CAP_GIB), "json.tool", str(dataset)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert control.returncode != 0 and "MemoryError" in control.stderr


@pytest.mark.subprocess
def test_bench_run_refuses_a_bad_dataset_before_asking_the_server(tmp_path: Path) -> None:
    """Exit 2 and one line, with nothing listening at the URL: the data is read first."""
    (tmp_path / "d.json").write_bytes(b"[{oops")
    (tmp_path / "w.toml").write_text(
        'name = "w"\n[arrivals]\nrates = [1.0]\n[prompts]\nsource = "sharegpt"\npath = "d.json"\n'
    )
    mark = new_mark()
    proc = bench_process(
        "run",
        "--url",
        "http://127.0.0.1:9",
        "--workload",
        str(tmp_path / "w.toml"),
        "--out",
        str(tmp_path / "run"),
        mark=mark,
        env=bench_env(mark),
    )
    rc, _, stderr = finish(proc, 60)
    assert rc == 2
    assert_one_line_error(stderr, f"dataset {tmp_path / 'd.json'}: entry 0 is not valid JSON")
    assert not (tmp_path / "run").exists()


if __name__ == "__main__":  # the capped child of test_a_large_valid_file_is_read_in_bounded_memory
    kind, file = sys.argv[1], Path(sys.argv[2])
    if kind == "sharegpt":
        data = datasets.read_sharegpt(file, "dataset")
        print(f"kept {len(data)} of {data.entries}")
    else:
        print(f"requests {len(trace.read_trace(file, 'trace'))}")
