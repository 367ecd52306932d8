"""Our client as a load generator: C streams, each running `requests` requests back to back.

Run as its own process (`python -m tools.perf.loadgen ...`) so that the harness can pin it
to one core and read its CPU time from /proc, exactly as it does for `vllm bench serve`.
It goes through `bench.stream.client.Client.stream`, the same code path as a sweep cell, and
writes what it counted (tokens from usage, chunks, per-request TTFT and time between
tokens, wall-clock anchors for comparing with the server's ground truth) as one JSON file.
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

from bench.run import prompts
from bench.stream import event_loop
from bench.stream.client import Client
from bench.stream.records import RequestRecord


async def run(url: str, model: str, streams: int, requests: int, max_tokens: int) -> dict[str, Any]:
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
    try:
        await asyncio.gather(*(worker(w) for w in range(streams)))
    finally:
        await client.aclose()
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
    args = p.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    factory = event_loop.factory() if args.loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(run(args.url, args.model, args.streams, args.requests, args.max_tokens))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
