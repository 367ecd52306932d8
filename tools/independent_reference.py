"""`make twin-calibration`: the published methodology against the twin over real HTTP,
written a second time, on purpose.

This is the independent reference for `bench run`: a separate, small implementation of the
card's methodology that shares nothing with bench.run and bench.stream (its own httpx
client, its own gate and window, its own arithmetic), only the twin it drives. Its figures
against the card check the twin's `published` profile without trusting the code under
test; the same figures from `bench run` (`make reproduce-twin`) check bench.run against it.
A change to the methodology must be made in both, and a disagreement between them is a
defect in one of them.

Starts `bench twin serve --profile published --speed N` as a real process and, per context
row: sizes a unique prompt exactly with /tokenize, sends the cold max_tokens=1 scout
(prefill tok/s = tokens / TTFT; it also warms the prefix cache), then per concurrency C
that fits the KV capacity read from /metrics: waits until drained, starts C workers
looping the same streaming request, waits for the gate (>= C running, none waiting, every
worker has a token, held 3 s), measures 30 s, cancels. Durations are divided by the
speed factor and the measured rates multiplied back, so figures read in card units.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.twin.process import start_twin
from tools.twin_calibrate import load_targets

MAX_TOKENS = 4096
_COMPLETION = re.compile(rb'"completion_tokens":(\d+)')


@dataclass
class Req:
    sent: float
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (arrival, cumulative tokens)
    first: float | None = None


@dataclass
class Metrics:
    running: float
    waiting: float
    capacity_tokens: int | None
    lag_s: float
    step_s: float
    generated: float


async def scrape(client: httpx.AsyncClient) -> Metrics:
    text = (await client.get("/metrics")).text
    values: dict[str, float] = {}
    cap = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0]
        values[name] = float(line.rsplit(" ", 1)[1])
        if name == "vllm:cache_config_info":
            m = re.search(r'kv_cache_size_tokens="(\d+)"', line)
            cap = int(m.group(1)) if m else None
    return Metrics(
        values["vllm:num_requests_running"],
        values["vllm:num_requests_waiting"],
        cap,
        values["twin:step_lag_seconds_sum"],
        values["twin:step_seconds_sum"],
        values["vllm:generation_tokens_total"],
    )


async def exact_prompt(client: httpx.AsyncClient, tokens: int, tag: str) -> list[dict[str, str]]:
    head = f"calibration {tag} {uuid.uuid4().hex[:8]}"
    base = (
        await client.post("/tokenize", json={"messages": [{"role": "user", "content": head}]})
    ).json()["count"]
    msgs = [{"role": "user", "content": head + " w" * (tokens - base)}]
    count = (await client.post("/tokenize", json={"messages": msgs})).json()["count"]
    assert count == tokens, (count, tokens)
    return msgs


async def stream_once(
    client: httpx.AsyncClient, body: bytes, rec: Req, on_first: list[bool] | None = None, i: int = 0
) -> None:
    async with client.stream(
        "POST", "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    ) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            raw = line.encode()
            m = _COMPLETION.search(raw)
            if m is None:
                continue
            n = int(m.group(1))
            if n == 0:
                continue
            now = time.perf_counter()
            if rec.first is None:
                rec.first = now
                if on_first is not None:
                    on_first[i] = True
            rec.chunks.append((now, n))


def body_for(msgs: list[dict[str, str]], max_tokens: int) -> bytes:
    return json.dumps(
        {
            "model": "qwen",
            "messages": msgs,
            "max_tokens": max_tokens,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()


async def worker(
    client: httpx.AsyncClient, body: bytes, log: list[Req], has_token: list[bool], i: int
) -> None:
    while True:
        rec = Req(time.perf_counter())
        log.append(rec)
        await stream_once(client, body, rec, has_token, i)


async def decode_cell(
    client: httpx.AsyncClient, msgs: list[dict[str, str]], c: int, speed: float
) -> dict[str, Any]:
    while True:
        m = await scrape(client)
        if m.running == 0 and m.waiting == 0:
            break
        await asyncio.sleep(0.05)
    body = body_for(msgs, MAX_TOKENS)
    logs: list[list[Req]] = [[] for _ in range(c)]
    has_token = [False] * c
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(worker(client, body, logs[i], has_token, i)) for i in range(c)]
    hold, poll = 3.0 / speed, min(0.25, 0.5 / speed)
    since = None
    while True:
        m = await scrape(client)
        ok = m.running >= c and m.waiting == 0 and all(has_token)
        now = time.perf_counter()
        since = (since or now) if ok else None
        if since is not None and now - since >= hold:
            break
        if now - t0 > 900 / speed:
            raise RuntimeError(f"gate never opened for C={c}")
        await asyncio.sleep(poll)
    s0 = time.perf_counter()
    m0 = await scrape(client)
    w0 = time.perf_counter()
    await asyncio.sleep(30.0 / speed)
    w1 = time.perf_counter()
    m1 = await scrape(client)
    s1 = time.perf_counter()
    # the twin's count spans scrape to scrape: scale it to the window's length
    twin_tokens = (m1.generated - m0.generated) * (w1 - w0) / ((s1 + w1) / 2 - (s0 + w0) / 2)
    lag = (m1.lag_s - m0.lag_s) / max(m1.step_s - m0.step_s, 1e-9)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    reqs = [r for log in logs for r in log if r.first is not None]
    tokens, last = 0, w0
    tbts, ttfts = [], []
    for r in reqs:
        prev = 0
        for ts, n in r.chunks:
            if w0 < ts <= w1:
                tokens += n - prev
                last = max(last, ts)
            prev = n
        assert r.first is not None
        ttfts.append((r.first - r.sent) * speed)
        inside = [(ts, n) for ts, n in r.chunks if ts <= w1]
        if inside[-1][1] > 1:
            tbts.append((inside[-1][0] - r.first) * speed / (inside[-1][1] - 1))
    measured = (last - w0) * speed
    return {
        "total_tok_s": tokens / measured,
        "tbt_ms": statistics.median(tbts) * 1000,
        "ttft_ms": statistics.median(ttfts) * 1000,
        "gate_s": (w0 - t0) * speed,
        "lag": lag,
        # tokens the client saw in the window / tokens the twin generated in it: a client
        # that cannot keep up reads late and this drops below 1
        "read": tokens / max(twin_tokens, 1.0),
    }


async def scout(client: httpx.AsyncClient, msgs: list[dict[str, str]], speed: float) -> float:
    rec = Req(time.perf_counter())
    await stream_once(client, body_for(msgs, 1), rec)
    assert rec.first is not None
    return (rec.first - rec.sent) * speed


def figures(f: dict[str, float], tgt: dict[str, float]) -> str:
    out = ""
    for key, fmt in (
        ("total_tok_s", "{:11.1f}{:9.1f}"),
        ("tbt_ms", "{:10.1f}{:8.1f}"),
        ("ttft_ms", "{:11.0f}{:8.0f}"),
    ):
        out += fmt.format(f[key], tgt[key]) + f"{pct(f[key], tgt[key]):>8}"
    return out


def pct(a: float, b: float) -> str:
    return f"{(a / b - 1) * 100:+5.1f}%"


HEADER = (
    f"{'cell':<14}{'twin tok/s':>11}{'card':>9}{'Δ':>8}{'twin TBT':>10}{'card':>8}{'Δ':>8}"
    f"{'twin TTFT':>11}{'card':>8}{'Δ':>8}{'lag':>7}{'speed':>7}"
)
# Real-time costs (sending a 1.5 MB prompt, parsing it, a client reading 128 streams) are
# not divided by the speed factor: long contexts and high concurrency run slower so that
# those costs stay small next to the card's figures.
PREFILL_SPEED = 2.0  # the scout is one request: real-time overheads weigh most there
ROW_SPEEDS = {
    "8K": 10.0,
    "16K": 10.0,
    "32K": 10.0,
    "64K": 5.0,
    "128K": 3.0,
    "251K": 2.0,
    "256K": 2.0,
}
CONCURRENCY_SPEEDS = {32: 8.0, 64: 5.0, 128: 4.0}


def cell_speed(row: str, concurrency: int, fixed: float | None) -> float:
    if fixed:
        return fixed
    return min(ROW_SPEEDS[row], CONCURRENCY_SPEEDS.get(concurrency, ROW_SPEEDS[row]))


async def over_capacity(url: str) -> int:
    t = load_targets()
    async with httpx.AsyncClient(base_url=url) as client:
        cap = (await scrape(client)).capacity_tokens
    assert cap is not None, "no kv_cache_size_tokens in vllm:cache_config_info"
    rows = [n for n in t["contexts"] if n in t["decode"]]
    over = {
        (n, c) for n in rows for c in t["concurrency"] if c * (t["contexts"][n] + MAX_TOKENS) > cap
    }
    card = {(n, c) for n in rows for c in t["concurrency"] if str(c) not in t["decode"][n]}
    print(
        f"KV capacity from /metrics: {cap:,} tokens; over-capacity cells: {len(over)} "
        f"(card: {len(card)}); same set as the card: {over == card}",
        flush=True,
    )
    for n in rows:
        cells = [f"x{c}" for c in t["concurrency"] if (n, c) in over]
        print(f"  {n:>5}: over capacity at {' '.join(cells) or '-'}")
    return int(over != card)


async def run_cell(
    url: str, name: str, concurrency: int | None, speed: float
) -> tuple[str, bool, bool]:
    """One twin, one context: the scout, then the decode cell (none for prefill-only rows).

    Returns the table line, whether it is outside 5 %, and whether the run kept up."""
    t = load_targets()
    ctx = t["contexts"][name]
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    timeout = httpx.Timeout(None)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        # warm the twin's code paths first (a fresh process pays imports and caches once)
        await scout(client, await exact_prompt(client, 64, "warm-up"), speed)
        msgs = await exact_prompt(client, ctx, name)
        ttft = await scout(client, msgs, speed)
        if concurrency is None:
            rate, card_ttft = t["prefill"][name]
            line = (
                f"{'prefill ' + name:<14}{ctx / ttft:11.1f}{rate:9.1f}{pct(ctx / ttft, rate):>8}"
                f"{'':26}{ttft * 1000:11.0f}{card_ttft:8.0f}{pct(ttft * 1000, card_ttft):>8}"
                f"{'':7}{speed:7g}"
            )
            return line, False, True
        tgt = t["decode"][name][str(concurrency)]
        f = await decode_cell(client, msgs, concurrency, speed)
    errs = (f["total_tok_s"] / tgt["total_tok_s"] - 1, f["tbt_ms"] / tgt["tbt_ms"] - 1)
    bad = max(abs(e) for e in errs) > 0.05
    # Lateness of single steps does not slow the twin (its timeline is anchored); what
    # spoils figures is a twin that slips by whole steps or a client that reads late.
    kept_up = f["lag"] < 0.5 and 0.97 < f["read"] < 1.03
    tail = f"{f['lag']:7.1%}{speed:7g}" + ("  <-- outside 5%" if bad else "")
    return f"{name + ' x' + str(concurrency):<14}" + figures(f, tgt) + tail, bad, kept_up


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", type=float, default=None, help="one speed for every cell")
    ap.add_argument("--rows", default="", help="comma-separated context rows (default: all)")
    args = ap.parse_args(argv)
    t = load_targets()
    rows = args.rows.split(",") if args.rows else list(t["contexts"])
    started = time.perf_counter()
    with start_twin("published", speed=10) as twin:
        failures = asyncio.run(over_capacity(twin.url))
    print(HEADER, flush=True)
    slowed: list[str] = []
    for name in rows:
        cells: list[int | None] = [None, *(int(c) for c in t["decode"].get(name, {}))]
        for c in cells:
            speed = cell_speed(name, c or 1, args.speed) if c else args.speed or PREFILL_SPEED
            while True:
                # a twin per cell: its speed suits the cell, its scout warms its own cache
                with start_twin("published", speed=speed, extra_args=["--seed", "1"]) as twin:
                    line, bad, kept_up = asyncio.run(run_cell(twin.url, name, c, speed))
                if kept_up or speed <= 1:
                    break
                slowed.append(f"{name} x{c} at speed {speed:g}")
                speed = max(1.0, speed / 2)  # this machine could not keep up: slower
            print(line, flush=True)
            failures += bad
    if slowed:
        print(f"rerun slower because twin or client fell behind: {', '.join(slowed)}")
    print(
        f"{'every valid cell within 5 %' if not failures else f'{failures} problem(s)'}; "
        f"took {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
