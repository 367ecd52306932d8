"""The measured stream's bytes -> its record: SSE lines, usage counts, text, the end.

Tokens are `usage.completion_tokens` (cumulative, continuous usage stats); the first
token is the first chunk with non-empty text; `data: [DONE]` ends the stream; an error
event, a chunk that is not one JSON object on one line, a line over MAX_SSE_LINE or an
implausible usage count ends it with that failure on the record (bench.failures).

The per-chunk path is kept cheap: bytes are split on newlines by hand, the clock is
read once per network read (every event in that read shares the timestamp), and each
`data:` line is scanned with precompiled byte regexes instead of a JSON parse. The
scans are safe against look-alikes inside generated text because JSON escapes every
quote inside a string, so `"completion_tokens":` can only match a key.
"""

from __future__ import annotations

import json
import re

from bench.failures import ErrorKind
from bench.stream import tokens
from bench.stream.records import RequestRecord

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":\s*(\d+)')
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens":\s*(\d+)')
# A non-empty string value of a text field: chat content, reasoning (vLLM's reasoning
# parsers use `reasoning_content` or `reasoning`), or completions `text`.
_TEXT = re.compile(rb'"(?:content|reasoning_content|reasoning|text)":\s*"(?!")')
_ERROR = re.compile(rb'"error":|"object":\s*"error"')
_DONE = re.compile(rb"data:[ \t]*\[DONE\][ \t]*\r?\n")
# A usage count longer than this is a lie (10^12 tokens), and would overflow the record's
# 64-bit array (a count of 2^63 was a traceback) or Python's int() digit limit.
_MAX_COUNT_DIGITS = 12
_MIB = 1 << 20
MAX_SSE_LINE = 1 * _MIB


class Events:
    """SSE lines of one stream -> the record; every event of one read shares `now`."""

    __slots__ = ("counting", "held", "parts", "record")

    def __init__(self, record: RequestRecord, counting: tokens.Counting | None = None) -> None:
        self.parts: list[bytes] = []  # the start of a line not ended yet
        self.held = 0  # its length
        self.record = record
        self.counting = counting

    def feed(self, data: bytes, now: float) -> bool:
        """True when the stream is over: [DONE] or an error event."""
        record = self.record
        if not self.parts and record.first_token_s is not None and record.prompt_tokens is not None:
            count = one_count(data)
            if count >= 0:  # what `_feed_all` makes of it, in a few scans instead of a dozen
                record.add_usage(now, count)
                return False
        return self._feed_all(data, now)

    def _feed_all(self, data: bytes, now: float) -> bool:
        """`feed` for any bytes at any point of the stream."""
        # `find`, not `in`: bytes' `in` first tries its operand as an int, and a TypeError
        # raised and cleared costs more than the scan (some 120 ns a test).
        if data.find(b"\r") >= 0:
            # The SSE spec ends a line with CR LF, LF or CR alone: read each as LF (a CR-only
            # stream never ended a line: issue 29, L2). JSON has no raw CR in a string, and
            # a CR LF split between two reads gives one blank line more, a separator.
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self.parts:
            if data.find(b"\n") < 0:
                # Still inside one line: keep the piece, join once at its end (joining
                # at every read made one long line cost quadratic time).
                return self._hold(data)
            buf = b"".join(self.parts) + data
            self.parts, self.held = [], 0
        else:
            buf = data
        record = self.record
        end = buf.rfind(b"\n") + 1
        if (
            record.first_token_s is not None
            and record.prompt_tokens is not None
            and buf.find(b'"error"', 0, end) < 0
        ):
            over = self._counts_only(buf, end, now)
            if over is not None:
                return over
        return self._lines(buf, now)

    def _counts_only(self, buf: bytes, end: int, now: float) -> bool | None:
        """After the first token only usage counts matter, and every event of this read
        shares `now`: one scan of the complete lines instead of one per event. Raw newlines
        cannot occur inside JSON strings, so a line-anchored [DONE] is real, and every data
        line must end with "}". None: not every line is a usage count, look at each one."""
        record = self.record
        done = _done_line(buf, end)
        stop = end if done < 0 else done
        lines = buf.count(b"\ndata:", 0, stop) + buf.startswith(b"data:")
        counts = _COMPLETION_TOKENS.findall(buf, 0, stop)
        # Every data line carries its usage count (else the exact path looks at each line:
        # one with text and no count cannot be attributed). `_feed_all` has made every CR an
        # LF already, so a line ends "}" LF (no "}" CR LF is left to count).
        if lines != len(counts) or lines != buf.count(b"}\n", 0, stop):
            return None
        add = record.add_usage
        for digits in counts:
            if len(digits) > _MAX_COUNT_DIGITS:
                _implausible(record, digits)
                return True
            add(now, int(digits))
        if done >= 0:
            record.finished = True
            return True
        return self._hold(buf[end:])

    def _lines(self, buf: bytes, now: float) -> bool:
        """Every complete line of `buf`, one at a time; the rest is held."""
        record = self.record
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl]
            start = nl + 1
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, event: lines
            payload = line[5:].strip()
            if payload == b"[DONE]":
                record.finished = True
                return True
            if _feed(payload, record, now, self.counting):
                return True
        return self._hold(buf[start:])

    def _hold(self, rest: bytes) -> bool:
        if not rest:
            return False
        self.parts.append(rest)
        self.held += len(rest)
        if self.held > MAX_SSE_LINE:
            self.record.fail(
                ErrorKind.MALFORMED,
                f"malformed stream: a line over {MAX_SSE_LINE // _MIB} MiB (MAX_SSE_LINE)",
            )
            return True
        return False


def _feed(
    payload: bytes, record: RequestRecord, now: float, counting: tokens.Counting | None = None
) -> bool:
    """Account one data payload; True when the stream must stop (an error event)."""
    if not payload.endswith(b"}"):
        # A cheap well-formedness check: every chunk is one JSON object on one line.
        shown = payload[:80].decode("utf-8", "replace")
        record.fail(ErrorKind.MALFORMED, "malformed chunk: " + shown)
        return True
    text = None
    if record.first_token_s is None:
        if _ERROR.search(payload):
            record.fail(ErrorKind.ERROR_EVENT, "error event: " + _error_message(payload))
            return True
        text = _TEXT.search(payload)
        if text:
            # Never before the request went out: a receive stamp is put on the client's
            # clock from two readings (bench.stream.rxstamp.to_clock), good to microseconds.
            record.first_token_s = max(now, record.ttft_from_s)
    elif payload.find(b'"error"') >= 0 and _ERROR.search(payload):
        record.fail(ErrorKind.ERROR_EVENT, "error event: " + _error_message(payload))
        return True
    if record.prompt_tokens is None:
        # Usually on the first chunk; a server with usage only at the end says it last.
        p = _PROMPT_TOKENS.search(payload)
        if p:
            if len(p.group(1)) > _MAX_COUNT_DIGITS:
                _implausible(record, p.group(1), "prompt_tokens")
                return True
            record.prompt_tokens = int(p.group(1))
    m = _COMPLETION_TOKENS.search(payload)
    if m:
        digits = m.group(1)
        if len(digits) > _MAX_COUNT_DIGITS:
            _implausible(record, digits)
            return True
        record.add_usage(now, int(digits))
    elif text or (text is None and _TEXT.search(payload)):
        tokens.without_usage(payload, record, now, counting)  # counted, or kept, or neither
    return False


def one_count(payload: bytes) -> int:
    """The usage count of a payload that is one usual event after the first token, or -1.

    `data: {...}` ending in a blank line, with no other line, no CR, no `"error"` and the
    first `"completion_tokens":` followed by at most _MAX_COUNT_DIGITS digits. With the first
    token and the prompt's count known and nothing held, `Events._feed_all` makes of exactly
    these payloads one `add_usage` of that count and nothing else: it has no [DONE] line
    (its one line starts `data: {`), one `data:` line, one `}` LF, and the first count is
    the one both of its ways take. Anything else is -1, for `_feed_all` to read in full
    (tests/stream/test_fast_paths.py checks the two agree on any input).
    """
    if not (payload.startswith(b"data: {") and payload.endswith(b"}\n\n")):
        return -1
    # Single-byte finds are memchr; the first LF must be the blank line's.
    if payload.find(b"\n") != len(payload) - 2 or payload.find(b"\r") >= 0:
        return -1
    if payload.find(b'"error"') >= 0:
        return -1
    at = payload.find(b'"completion_tokens":')
    m = _COMPLETION_TOKENS.match(payload, at) if at >= 0 else None
    if m is None:
        return -1
    digits: bytes = m[1]
    return int(digits) if len(digits) <= _MAX_COUNT_DIGITS else -1


def _implausible(record: RequestRecord, digits: bytes, name: str = "completion_tokens") -> None:
    shown = digits[:24].decode("ascii") + ("..." if len(digits) > 24 else "")
    why = f"implausible usage: {name} {shown} (over {_MAX_COUNT_DIGITS} digits)"
    record.fail(ErrorKind.IMPLAUSIBLE_USAGE, why)


def _done_line(buf: bytes, end: int) -> int:
    """Where the `data: [DONE]` line starts in buf[:end], or -1 (a C scan, then a check)."""
    i = buf.find(b"[DONE]", 0, end)
    while i >= 0:
        line = buf.rfind(b"\n", 0, i) + 1
        if _DONE.match(buf, line, end):
            return line
        i = buf.find(b"[DONE]", i + 6, end)
    return -1


def _error_message(payload: bytes) -> str:
    try:
        obj = json.loads(payload)
    except ValueError:
        return payload[:200].decode("utf-8", "replace")
    err = obj.get("error", obj) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        return str(err.get("message", err))[:200]
    return str(err)[:200]
