"""Why a measured request failed: a kind from a closed set, and the one-line message.

The kind is what code decides on (the prefill scout accepts a usage-only stream, a cell
counts its failures by kind in results.json); the message is what people read (the cell's
reason, samples.jsonl's `error`), unchanged from when it was the only thing recorded.

    kind               made by                     message starts
    http_status        a status other than 200     "HTTP 429: <body start>"
    timeout            no byte for the read time-out  "read time-out after N s"
    stalled            bytes, but no token for it  "read time-out: no token for N s ..."
    transport          connect, reset, close, bad framing or head
                                                   "transport error: ..."
    not_event_stream   a 200 that is encoded or not text/event-stream
                                                   "transport error: the response is ..."
    error_event        an error inside a 200 stream  "error event: <message>"
    malformed          a chunk that is not one JSON object, a line over MAX_SSE_LINE
                                                   "malformed chunk: ..." / "malformed stream: ..."
    implausible_usage  a usage count over 12 digits  "implausible usage: ..."
    no_done            the stream ended without [DONE]
    usage_only         tokens counted, no text received
    no_usage           text received, no usage count (no continuous usage stats)
    empty              [DONE] with neither text nor tokens
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorKind(StrEnum):
    """Why a measured request failed (the value is what results.json and samples.jsonl say)."""

    HTTP_STATUS = "http_status"
    TIMEOUT = "timeout"
    STALLED = "stalled"
    TRANSPORT = "transport"
    NOT_EVENT_STREAM = "not_event_stream"
    ERROR_EVENT = "error_event"
    MALFORMED = "malformed"
    IMPLAUSIBLE_USAGE = "implausible_usage"
    NO_DONE = "no_done"
    USAGE_ONLY = "usage_only"
    NO_USAGE = "no_usage"
    EMPTY = "empty"


@dataclass(frozen=True, slots=True)
class RequestError:
    """One failed request: its kind and its one-line message."""

    kind: ErrorKind
    message: str

    def __str__(self) -> str:
        return self.message


def count_by_kind(errors: list[RequestError | None]) -> dict[ErrorKind, int]:
    """How many of `errors` are of each kind (kinds that did not occur are left out), in
    the order of ErrorKind so that two runs with the same failures write the same JSON."""
    counts = dict.fromkeys(ErrorKind, 0)
    for error in errors:
        if error is not None:
            counts[error.kind] += 1
    return {kind: n for kind, n in counts.items() if n}
