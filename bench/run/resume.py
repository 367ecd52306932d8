"""What `bench run --resume` measures again, and the cells a crash of the server cut.

A resumed run keeps every saved entry (prefill sample or cell) exactly as it is, and
measures the rest, with one exception: an entry with Status `interrupted` holds no
measurement (the run stopped during it), so it is dropped, its raw lines with it, and
measured again; the rerun replaces it.

Which entries a stopped run marks `interrupted` (the rule of docs/faults.md):

* the cell in flight at Ctrl-C / SIGTERM / kill -9 is never saved at all;
* when the run ends because the server can no longer be reached (`ServerUnreachable`:
  connection refused, reset or closed, time-out before any reply; at the end of a
  sweep this is checked with one more request), the entries measured after the
  server's last answer whose first failed request failed at the transport level
  (`transport error: ...`, no HTTP status) are the ones the server's crash cut.

What a live server answered stays a measurement, even of a broken server: an HTTP
error, an error event, a malformed chunk, a read time-out, a stream cut by a server
that still answers afterwards. Entries that never reached the server (over capacity)
are passed over when looking for the server's last answer.
"""

from __future__ import annotations

from typing import Any

from bench.errors import UsageError
from bench.results import SCHEMA_VERSION, CellResult, KvCapacity, PrefillSample, Results, ServerInfo

Entry = PrefillSample | CellResult
# (phase, context, concurrency, trial): the key of raw lines in samples.jsonl / metrics.jsonl
Key = tuple[str, str, int, int]

_TRANSPORT = "transport error:"


def cut_by_the_server(reason: str | None) -> bool:
    """True when the (first) failed request of an entry failed at the transport level.

    Cell reasons read "N request(s) failed, first: <error>"; prefill reasons are the error.
    """
    if reason is None:
        return False
    first = reason.split("first: ", 1)[1] if "first: " in reason else reason
    return first.startswith(_TRANSPORT)


def _in_measured_order(results: Results) -> list[Entry]:
    """Every saved entry in the order the sweep measured them: trial, context row, the
    row's prefill scout, then its cells (a resumed run appends a row's remaining cells)."""
    out: list[Entry] = []
    for trial in range(results.settings.trials):
        for ctx in results.plan.contexts:
            out += [p for p in results.prefill if (p.context_label, p.trial) == (ctx.label, trial)]
            out += [c for c in results.cells if (c.context_label, c.trial) == (ctx.label, trial)]
    return out


def cut_at_the_end(results: Results) -> list[Entry]:
    """The entries measured after the server's last answer that failed at the transport
    level: the ones a crash of the server would have cut (the newest first)."""
    cut: list[Entry] = []
    for entry in reversed(_in_measured_order(results)):
        if entry.status == "over_capacity":
            continue  # never sent to the server: says nothing about it
        if entry.status != "invalid" or not cut_by_the_server(entry.reason):
            break
        cut.append(entry)
    return cut


def mark_cut(results: Results) -> Results:
    """The run after its server went away: the entries it cut become `interrupted`."""
    cut = {id(e) for e in cut_at_the_end(results)}
    if not cut:
        return results

    def marked(entry: Entry) -> Entry:
        if id(entry) not in cut:
            return entry
        why = f"the server went away during it ({entry.reason}); measured again on --resume"
        return entry.model_copy(update={"status": "interrupted", "reason": why})

    return results.model_copy(
        update={
            "prefill": tuple(marked(p) for p in results.prefill),
            "cells": tuple(marked(c) for c in results.cells),
        }
    )


def carry_on(results: Results) -> tuple[Results, set[Key]]:
    """The run to resume (its `interrupted` entries dropped) and the raw-line keys to keep.
    From here this bench writes it, so it carries this bench's schema version (the
    versions only ever add fields: an older run is a valid run of the newer schema)."""
    prefill = tuple(p for p in results.prefill if p.status != "interrupted")
    cells = tuple(c for c in results.cells if c.status != "interrupted")
    kept = results.model_copy(
        update={
            "state": "running",
            "prefill": prefill,
            "cells": cells,
            "schema_version": SCHEMA_VERSION,
        }
    )
    keys: set[Key] = {("decode", c.context_label, c.concurrency, c.trial) for c in cells}
    keys |= {("prefill", p.context_label, 1, p.trial) for p in prefill}
    return kept, keys


def launch_profile(info: ServerInfo) -> str | None:
    """The launch profile the server reports, when it does (the twin: /version `twin.profile`)."""
    twin: Any = info.version_payload.get("twin")
    profile = twin.get("profile") if isinstance(twin, dict) else None
    return profile if isinstance(profile, str) else None


def identity(info: ServerInfo) -> dict[str, object]:
    """What makes two servers the same one for a resumed run (the URL may change)."""
    return {
        "model": info.model,
        "version": info.version,
        "max model length": info.max_model_len,
        "launch profile": launch_profile(info),
        "speed factor": info.speed_factor,
        "engine": info.engine,
    }


def check_same_capacity(previous: Results, now: KvCapacity, url: str, where: str) -> None:
    """The KV capacity is part of the server's identity (issue 29, M4): a server with
    another capacity would mark other cells over capacity than the run planned."""
    was = previous.plan.kv.tokens
    if was is not None and now.tokens is not None and was != now.tokens:
        raise UsageError(
            f"the server at {url} is not the one this run measured: KV capacity "
            f"{now.tokens:,} tokens, the run's {was:,}",
            hint=f"resume against the same server, or start a new run without --resume "
            f"(bench run --url {url} --out NEW_DIR); {where} stays as it is",
        )


def check_same_server(previous: Results, now: ServerInfo, where: str) -> None:
    """Refuse to resume a run against a server other than the one that measured it.

    Model, version, max model length and speed factor are compared always; the launch
    profile and the engine when both are known. A resumed run never mixes two servers' cells.
    """
    was, found = identity(previous.server), identity(now)
    for optional in ("launch profile", "engine"):  # compared when both runs know it
        if was[optional] is None or found[optional] is None:
            was.pop(optional)
            found.pop(optional)
    diffs = [f"{k} {found[k]!r}, the run's {was[k]!r}" for k in was if was[k] != found[k]]
    if diffs:
        raise UsageError(
            f"the server at {now.url} is not the one this run measured: " + "; ".join(diffs),
            hint=f"resume against the same server, or start a new run without --resume "
            f"(bench run --url {now.url} --out NEW_DIR); {where} stays as it is",
        )
