"""Our client as a load generator: C streams, each running `requests` requests back to back.

Run as its own process (`python -m tools.perf.loadgen ...`) so that the harness can pin it
to one core and read its CPU time from /proc, exactly as it does for `vllm bench serve`.
It goes through `bench.stream.client.Client.stream`, the same code path as a sweep cell, and
writes what it counted (tokens from usage, chunks, per-request TTFT and time between
tokens, wall-clock anchors for comparing with the server's ground truth) as one JSON file.

With `bench run`'s live-metrics flags (`--otel-url`, `--otel-interval`, `--metrics-port`,
`--metrics-host`: bench.live.flags) it opens the same sinks and hooks them to the client as
`bench run` does (bench.run.command): every request is one unit's (a cell "16:C", trial 0),
recorded when its stream ends; the sinks are closed, with their last export, after the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from bench.live import flags as live_flags
from bench.live.observer import LiveMetrics, LiveRun, LiveScope
from bench.run import prompts
from bench.stream import event_loop
from bench.stream.client import Client
from bench.stream.records import RequestRecord


async def run(
    url: str,
    model: str,
    streams: int,
    requests: int,
    max_tokens: int,
    *,
    live: LiveMetrics | None = None,
) -> dict[str, Any]:
    live = live or LiveMetrics()
    client = Client(url, clock=time.perf_counter, max_connections=streams + 8, raw_http1=True)
    body = prompts.request_body("chat", model, "Say something long.", max_tokens)
    path = prompts.endpoint("chat")
    records: list[RequestRecord] = []
    # perf_counter -> wall clock, to line records up with the server's time.time() log.
    anchor_wall_s = time.time() - time.perf_counter()

    async def worker(w: int) -> None:
        for _ in range(requests):
            rec = RequestRecord(worker=w, start_s=time.perf_counter())
            records.append(rec)
            await client.stream(path, body, rec)

    t0 = time.perf_counter()
    scope = LiveScope("cell", trial=0, cell=f"16:{streams}")
    if live:  # as bench run wires it (bench.run.command)
        client.on_finished = live.request_finished
        live.run_started(_live_run(url, model, t0))
    try:
        with live.unit(scope):
            await asyncio.gather(*(worker(w) for w in range(streams)))
        live.unit_finished(scope, "valid")
    finally:
        await client.aclose()
        live.close()  # the last export, bounded (bench.live.otel)
    wall_s = time.perf_counter() - t0
    ttft = [r.ttft_s for r in records if r.ttft_s is not None]
    tbt = [r.tbt_s for r in records if r.tbt_s is not None]
    return {
        "client": "bench",
        "streams": streams,
        "requests": len(records),
        "errors": sum(r.error is not None for r in records),
        "first_error": next((r.error for r in records if r.error), None),
        "tokens": sum(r.tokens for r in records),
        "chunks": sum(len(r.chunk_s) for r in records),
        "wall_s": wall_s,
        "median_ttft_s": statistics.median(ttft) if ttft else None,
        "median_tbt_s": statistics.median(tbt) if tbt else None,
        "per_request": [
            {
                "start_wall_s": r.start_s + anchor_wall_s,
                "ttft_s": r.ttft_s,
                "tbt_s": r.tbt_s,
                "tokens": r.tokens,
            }
            for r in records
        ],
    }


def _live_run(url: str, model: str, t0: float) -> LiveRun:
    where = urlsplit(url)
    return LiveRun(
        run_id="perf-loadgen",
        model=model,
        provider="unknown",
        api="chat",
        server_address=where.hostname or "",
        server_port=where.port or 80,
        units_total=1,
        elapsed_s=lambda: time.perf_counter() - t0,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.perf.loadgen")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--streams", type=int, required=True)
    p.add_argument("--requests", type=int, default=1, help="requests per stream, back to back")
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--out", required=True)
    p.add_argument("--cpu", type=int, default=None, help="pin this process to one core")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    live_flags.add_arguments(p)  # --otel-url, --otel-interval, --metrics-port, --metrics-host
    args = p.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    live = live_flags.open_live(args)  # the libraries imported, the port bound: before the load
    factory = event_loop.factory() if args.loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(
            run(args.url, args.model, args.streams, args.requests, args.max_tokens, live=live)
        )
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
