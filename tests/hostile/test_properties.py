"""Property-based tests (Hypothesis, fixed budget) of the three parsers that take outside
bytes: the chunked/SSE reader of the measured stream, the Prometheus reader, and the
bundle reader. Whatever the bytes and wherever they are split: the same result as a
reference reader, or a bounded one-line error; never an exception, a hang, or unbounded
memory. No sockets."""

from __future__ import annotations

import asyncio
import gzip
import io
import itertools
import json
import math
import tarfile
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.bundle.pack import OpenLimits, open_bundle
from bench.errors import BenchError
from bench.stream import metrics
from bench.stream.records import RequestRecord
from bench.stream.response import MAX_CHUNK_LINE, MAX_CHUNK_SIZE_DIGITS, Exchange
from bench.stream.sse import Events
from tests.support.budget import fixed_budget


@pytest.fixture(scope="module", autouse=True)
def _earlier_garbage_collected_first() -> None:
    """Hypothesis runs gc.collect() as it starts; whatever an earlier test module left for the
    collector (a finished subprocess's Popen, its pipes) would then be reported inside this
    module's first test as an unraisable ResourceWarning. Collect it here first, and say on
    stderr what was found, so it is visible and not blamed on the parsers under test."""
    import gc
    import sys

    found: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: found.append(f"{u.exc_type.__name__}: {u.exc_value}")
    try:
        gc.collect()
    finally:
        sys.unraisablehook = previous
    for line in found:
        print(f"garbage left by an earlier test module: {line}", file=sys.stderr)
    return


BUDGET = fixed_budget(200)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
HEX = set(b"0123456789abcdefABCDEF")


# -- the chunked reader ------------------------------------------------------------------


def reference_unchunk(body: bytes) -> tuple[bytes, str]:
    """RFC 9112 chunked decoding written plainly: (payload so far, complete|incomplete|error)."""
    out = b""
    pos = 0
    while True:
        nl = body.find(b"\r\n", pos)
        line = body[pos:] if nl < 0 else body[pos:nl]
        if len(line) > MAX_CHUNK_LINE:
            return out, "error"
        if nl < 0:
            return out, "incomplete"
        size_text = line.split(b";", 1)[0].rstrip(b" \t") if b";" in line else line
        if not 0 < len(size_text) <= MAX_CHUNK_SIZE_DIGITS or not set(size_text) <= HEX:
            return out, "error"
        size = int(size_text, 16)
        pos = nl + 2
        if size == 0:
            return out, ("complete" if len(body) - pos >= 2 else "incomplete")
        data = body[pos : pos + size]
        out += data
        if len(data) < size:
            return out, "incomplete"
        pos += size
        end = body[pos : pos + 2]
        if end != b"\r\n"[: len(end)]:
            return out, "error"
        if len(end) < 2:
            return out, "incomplete"
        pos += 2


class Collect:
    def __init__(self) -> None:
        self.data = b""

    def feed(self, data: bytes, now: float) -> bool:
        self.data += data
        return False


def feed_exchange(raw: bytes, cuts: list[int]) -> tuple[Exchange, RequestRecord, Collect]:
    record = RequestRecord(worker=0, start_s=0.0)
    reader = Collect()
    bounds = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})

    async def go() -> Exchange:
        ex = Exchange(record, reader)
        for i, (a, b) in enumerate(itertools.pairwise(bounds)):
            if ex.done.done():  # failed or complete: the connection reads no further
                break
            ex.received(raw[a:b], float(i))
        return ex

    return asyncio.run(go()), record, reader


def chunked(payloads: list[bytes], ext: list[bool], upper: list[bool]) -> bytes:
    out = b""
    for i, p in enumerate(payloads):
        size = b"%x" % len(p)
        if upper[i % len(upper)]:
            size = size.upper()
        if ext[i % len(ext)]:
            size += b" ;name=value"
        out += size + b"\r\n" + p + b"\r\n"
    return out + b"0\r\n\r\n"


@BUDGET
@given(
    payloads=st.lists(st.binary(min_size=1, max_size=300), max_size=12),
    ext=st.lists(st.booleans(), min_size=1, max_size=4),
    upper=st.lists(st.booleans(), min_size=1, max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
)
def test_a_valid_chunked_body_split_anywhere_gives_its_payload(
    payloads: list[bytes], ext: list[bool], upper: list[bool], cuts: list[int]
) -> None:
    body = chunked(payloads, ext, upper)
    assert reference_unchunk(body) == (b"".join(payloads), "complete")
    ex, record, reader = feed_exchange(HEAD + body, cuts)
    assert record.error is None and ex.complete and ex.done.done()
    assert reader.data == b"".join(payloads)


# Bytes that look like chunked framing more often than random ones do.
framing = st.lists(
    st.one_of(
        st.sampled_from([b"\r\n", b"0\r\n", b"-6\r\n", b"5\r\n", b"a;x\r\n", b"0x5\r\n", b"\r",
                         b"\n", b"ffffffffffffffff\r\n", b"1_0\r\n", b" 5\r\n", b"hello"]),
        st.binary(max_size=40),
    ),
    max_size=30,
).map(b"".join)  # fmt: skip


@BUDGET
@given(body=framing, cuts=st.lists(st.integers(min_value=0, max_value=5_000), max_size=20))
def test_any_bytes_as_a_chunked_body_end_as_the_reference_says_or_in_one_line(
    body: bytes, cuts: list[int]
) -> None:
    want, state = reference_unchunk(body)
    ex, record, reader = feed_exchange(HEAD + body, cuts)
    if state == "error":
        assert record.error is not None
        assert record.error.startswith("transport error: malformed chunked body")
        assert "\n" not in record.error and ex.done.done() and ex.close
        assert want.startswith(reader.data)
    elif state == "complete":
        assert record.error is None and ex.complete and reader.data == want
    else:
        assert record.error is None and not ex.complete and want.startswith(reader.data)
        ex.eof(None)  # the server closes: a one-line transport error, at once
        assert record.error is not None and record.error.startswith("transport error: ")


# -- the SSE reader ----------------------------------------------------------------------


def event(text: str | None, usage: int | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"choices": [{"delta": {} if text is None else {"content": text}}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": usage}
    return obj


events = st.lists(
    st.tuples(
        st.one_of(st.none(), st.text(min_size=1, max_size=8)),
        st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
        st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n", b"\r\r", b"\r"]),  # CR only: issue 29 L2
        st.sampled_from([b"", b": keep-alive\n", b"event: x\n", b"\n"]),
    ),
    max_size=15,
)


@BUDGET
@given(evs=events, done=st.booleans(), cuts=st.lists(st.integers(0, 20_000), max_size=25))
def test_an_sse_stream_split_anywhere_gives_the_reference_record(
    evs: list[tuple[str | None, int | None, bytes, bytes]], done: bool, cuts: list[int]
) -> None:
    raw = b""
    # the reference: what each event means, read one by one
    counts: list[int] = []
    first_text: int | None = None
    unattributed = 0
    for i, (text, usage, sep, noise) in enumerate(evs):
        raw += noise + b"data: " + json.dumps(event(text, usage)).encode() + sep
        if usage is not None and usage > (counts[-1] if counts else 0):
            counts.append(usage)
        if text and first_text is None:
            first_text = i
        if text and usage is None:
            unattributed += 1
    if done:
        raw += b"data: [DONE]\n\n"
    record = RequestRecord(worker=0, start_s=0.0)
    reader = Events(record)
    bounds = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})
    stopped = False
    for a, b in itertools.pairwise(bounds):
        stopped = reader.feed(raw[a:b], float(a))
        if stopped:  # the client reads no further
            assert done and b >= len(raw) - 1  # at most the [DONE] line's blank line is left
            break
    assert record.error is None
    assert list(record.chunk_tokens) == counts
    assert record.finished is done and stopped is done
    assert (record.first_token_s is not None) is (first_text is not None)
    assert record.unattributed == unattributed
    assert record.prompt_tokens == (7 if any(u is not None for _, u, _, _ in evs) else None)


@BUDGET
@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(0, 5000), max_size=20))
def test_any_bytes_to_the_sse_reader_never_raise(data: bytes, cuts: list[int]) -> None:
    record = RequestRecord(worker=0, start_s=0.0)
    reader = Events(record)
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(bounds):
        if reader.feed(data[a:b], 1.0):
            break
    assert record.error is None or "\n" not in record.error
    assert all(0 <= t < 10**12 for t in record.chunk_tokens)


# -- the Prometheus reader ---------------------------------------------------------------

family = st.sampled_from(
    ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:x_total", "vllm:a:b"]
)
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines() splits on
label_value = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters='"\\' + LINE_BREAKS), max_size=10
)
noise_line = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters=LINE_BREAKS), max_size=60
).filter(lambda s: not s.startswith("vllm:"))


@BUDGET
@given(
    rows=st.lists(
        st.tuples(
            family,
            st.dictionaries(
                st.sampled_from(["engine", "model_name", "le"]), label_value, max_size=3
            ),
            st.floats(allow_nan=False, allow_infinity=False, width=32),
        ),
        max_size=20,
    ),
    noise=st.lists(noise_line, max_size=10),
)
def test_prometheus_text_gives_the_reference_sums_whatever_else_is_in_it(
    rows: list[tuple[str, dict[str, str], float]], noise: list[str]
) -> None:
    lines = [f"# HELP {name} x\n# TYPE {name} gauge" for name, _, _ in rows]
    want: dict[str, float] = {}
    for name, labels, value in rows:
        shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{shown}}} {value!r}" if labels else f"{name} {value!r}")
        want[name] = want.get(name, 0.0) + value
    text = "\n".join([*noise[:3], *lines, *noise[3:]])
    snap = metrics.parse(text, 1.0)
    # A request count no server can have is no reading (bench.stream.metrics.MAX_REQUESTS).
    counts = (metrics.RUNNING, metrics.WAITING)
    want = {
        k: v
        for k, v in want.items()
        if k not in counts or (0 <= v <= metrics.MAX_REQUESTS and v == int(v))
    }
    assert set(snap.values) == set(want)
    for name, total in want.items():
        assert math.isclose(snap.values[name], total, rel_tol=1e-9, abs_tol=1e-6)


@BUDGET
@given(text=st.text(max_size=4000))
def test_any_text_as_metrics_parses_without_raising_and_keeps_only_finite_numbers(
    text: str,
) -> None:
    snap = metrics.parse("vllm:" + text, 0.0)
    assert all(math.isfinite(v) for v in snap.values.values())


def test_a_long_hostile_metrics_line_is_linear() -> None:
    # Lines built to make the line pattern backtrack: skipped by their length, quickly.
    for line in ("vllm:a{" + "} " * 200_000, "vllm:a{" + '"' * 400_000, "vllm:" + "a" * 400_000):
        assert metrics.parse(line + "\n", 0.0).values == {}


# -- the bundle reader -------------------------------------------------------------------


def _archive(members: list[tuple[str, bytes, str]]) -> bytes:
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = "/etc/passwd"
                tar.addfile(info)
    return buf.getvalue()


member_name = st.one_of(
    st.sampled_from(["run/manifest.json", "run/results.json", "run/a/b.txt", "../evil", "/abs",
                     "run/../../x", "run/", "", "run/./c", "run\\d"]),
    st.text(alphabet="abc/._-", min_size=1, max_size=20),
)  # fmt: skip
members = st.lists(
    st.tuples(
        member_name,
        st.binary(max_size=200),
        st.sampled_from(["file", "file", "dir", "symlink", "hardlink"]),
    ),
    max_size=8,
)


@BUDGET
@given(
    ms=members,
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_any_archive_opens_inside_its_target_or_is_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory,
    ms: list[tuple[str, bytes, str]],
    flips: list[tuple[int, int]],
    cut: int | None,
) -> None:
    base = tmp_path_factory.mktemp("bundle")
    try:
        raw = bytearray(_archive(ms))
    except (ValueError, tarfile.TarError):
        return  # tarfile itself cannot write such a member
    for at, value in flips:
        raw[at % len(raw)] = value
    if cut is not None:
        raw = raw[: cut % (len(raw) + 1)]
    archive = base / "x.tar.gz"
    archive.write_bytes(bytes(raw))
    target = base / "target"
    limits = OpenLimits(max_members=20, max_member_bytes=4096, max_total_bytes=16_384,
                        max_header_bytes=4096)  # fmt: skip
    tracemalloc.start()
    try:
        try:
            root = open_bundle(archive, target, limits)
        except BenchError as exc:  # either outcome is fine; each is checked
            assert "\n" not in exc.one_line()  # noqa: PT017
            assert not target.exists() or list(target.iterdir()) == []  # nothing left
        else:
            assert root.resolve().is_relative_to(target.resolve())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    # nothing was written beside the target, whatever the archive held, and no link planted
    assert {p.name for p in base.iterdir()} <= {"x.tar.gz", "target"}
    assert not any(p.is_symlink() for p in base.rglob("*"))
