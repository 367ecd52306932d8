"""A request trace in mooncake's JSONL format (the kvcache-ai/Mooncake repository, its
FAST25-release README;
docs/workloads.md, "Trace replay", gives the rules):

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

one JSON object a line: `timestamp` ms from the trace's start (never decreasing from one
line to the next, several may share one), `input_length` and `output_length` in tokens
(integers, 1 to bench.workload_spec.MAX_LENGTH_TOKENS), `hash_ids` the ids of the prompt's
blocks of BLOCK_TOKENS tokens (integers; at most ceil(input_length / 512) of them; absent:
none). Requests whose leading ids are equal share that prefix. Blank lines are skipped.

Refused, one UsageError line naming the line (counted from 1): a line that is not UTF-8 or
not a JSON object, over MAX_LINE_BYTES, a timestamp that is negative, not finite or before
the previous line's, a length that is not an integer in range, more ids than blocks, a
trace with no request. Only the first `max_requests` requests are read (0: all, at most
bench.workload_spec.MAX_REQUESTS); the file is still hashed to its end.
"""

from __future__ import annotations

import functools
import json
import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import UsageError, one_line
from bench.workload import datafile
from bench.workload_spec import MAX_LENGTH_TOKENS, MAX_REQUESTS

BLOCK_TOKENS = 512  # mooncake's block: len(hash_ids) = ceil(input_length / 512) on its rows
MAX_LINE_BYTES = 1 << 20
MAX_TRACE_BLOCKS = 1 << 24  # hash ids over the whole trace (8 bytes each held)


@dataclass(frozen=True)
class MooncakeTrace:
    """The requests of a trace, in its order."""

    path: str
    sha256: str
    at_ms: array[float] = field(repr=False)
    inputs: array[int] = field(repr=False)
    outputs: array[int] = field(repr=False)
    starts: array[int] = field(repr=False)  # request i's ids are ids[starts[i]:starts[i + 1]]
    ids: array[int] = field(repr=False)

    def __len__(self) -> int:
        return len(self.inputs)

    def blocks(self, i: int) -> list[int]:
        return self.ids[self.starts[i] : self.starts[i + 1]].tolist()

    def group(self, i: int) -> int:
        """Request i's first block id (the requests sharing it share a prefix); -1: none."""
        return self.ids[self.starts[i]] if self.starts[i + 1] > self.starts[i] else -1


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _row(where: str, raw: bytes, previous_ms: float) -> tuple[float, int, int, list[int]]:
    """(timestamp ms, input, output, hash ids) of one line, or one UsageError line."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{where} is not UTF-8 text") from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of 4,300+ digits
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else one_line(str(exc))
        raise UsageError(f"{where} is not JSON ({why})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{where} is not a JSON object")
    ts = obj.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        raise UsageError(f"{where}: timestamp is missing or not a number")
    if not math.isfinite(ts) or ts < 0:
        raise UsageError(f"{where}: timestamp {ts!r} is not a time (ms from the trace's start)")
    if ts < previous_ms:
        raise UsageError(
            f"{where}: timestamp {ts!r} is before the previous line's "
            f"{int(previous_ms) if previous_ms.is_integer() else previous_ms!r}: a trace is in "
            "arrival order"
        )
    lengths: list[int] = []
    for name in ("input_length", "output_length"):
        value = obj.get(name)
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not (1 <= value <= MAX_LENGTH_TOKENS)
        ):
            raise UsageError(
                f"{where}: {name} {one_line(repr(value))[:40]} is not an integer from 1 to "
                f"{MAX_LENGTH_TOKENS:,}"
            )
        lengths.append(value)
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or not all(_integer(h) and 0 <= h < 1 << 63 for h in ids):
        raise UsageError(f"{where}: hash_ids is not a list of non-negative integers")
    if len(ids) > math.ceil(lengths[0] / BLOCK_TOKENS):
        raise UsageError(
            f"{where}: {len(ids)} hash_ids for {lengths[0]:,} input tokens, more than its "
            f"blocks of {BLOCK_TOKENS}"
        )
    return float(ts), lengths[0], lengths[1], ids


def read_trace(path: Path, shown: str, max_requests: int = 0) -> MooncakeTrace:
    """The trace at `path` (module docstring); any problem one UsageError line."""
    datafile.key(path, shown)
    limit = max_requests or MAX_REQUESTS
    at, ins, outs = array("d"), array("q"), array("q")
    starts, ids = array("q", [0]), array("q")
    with path.open("rb") as f:
        reader = datafile.HashedReader(f, shown)
        number, previous = 0, 0.0
        while raw := reader.readline(MAX_LINE_BYTES + 1):
            number += 1
            where = f"{shown}: line {number}"
            if len(raw) > MAX_LINE_BYTES:
                raise UsageError(f"{where} is over {MAX_LINE_BYTES:,} bytes")
            if not raw.strip():
                continue
            if len(ins) == limit:
                if max_requests:
                    break
                raise UsageError(
                    f"{shown} holds over {MAX_REQUESTS:,} requests", hint="set max_requests"
                )
            previous, i, o, hashes = _row(where, raw, previous)
            if len(ids) + len(hashes) > MAX_TRACE_BLOCKS:
                raise UsageError(f"{where}: the trace's hash_ids pass {MAX_TRACE_BLOCKS:,}")
            at.append(previous)
            ins.append(i)
            outs.append(o)
            ids.extend(hashes)
            starts.append(len(ids))
        sha = reader.sha256()
    if not ins:
        raise UsageError(f"{shown} holds no request (each line one JSON object)")
    return MooncakeTrace(str(path), sha, at, ins, outs, starts, ids)


@functools.lru_cache(maxsize=4)
def _cached(key: tuple[str, int, int, int], shown: str, max_requests: int) -> MooncakeTrace:
    return read_trace(Path(key[0]), shown, max_requests)


def load(path: Path, max_requests: int = 0) -> MooncakeTrace:
    """`read_trace`, once per file as it is now (its path, size, mtime and inode)."""
    shown = f"trace {path}"
    return _cached(datafile.key(path, shown), shown, max_requests)
