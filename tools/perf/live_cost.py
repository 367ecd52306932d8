"""Live export's cost (`make perf-live`): our client's CPU per token at 128 paced streams with
`--otel-url` and `--metrics-port` off and on, side by side.

The regime is client capacity's "128 paced 10 ms" (tools.perf.client_capacity): perf
streamers on the server core, one token a chunk, a tick every 10 ms; our load generator
(tools.perf.loadgen, `bench.stream.client.Client.stream`) on the client core. Each stream
runs 4 requests of 512 tokens (client capacity's length) back to back, so that requests
end (and are recorded by the live sinks, once each, from the client's hook) all through the
window instead of only at its end, and a pass lasts about 20 s: four export intervals.

Each pass runs two load generators at the same time, each against its own streamer, both on
the client core, as client capacity runs ours beside `vllm bench serve`: one with live export
off, one with it on, so both see the same machine (passes one after the other on a shared
machine: in an alternating run of 6 December the "off" passes alone took from 9.33 to
11.58 µs a token). Which one starts first, and on which streamer, alternates
from pass to pass (off first, on first, off first, ...). "On" is `--otel-url` pointing at
DiscardingOtlpReceiver, a real OTLP/HTTP endpoint in this process on 127.0.0.1 that reads
each POST and answers 200 with nothing in it (an empty ExportMetricsServiceResponse), at
the default `--otel-interval` (5 s), and `--metrics-port` on a free port of 127.0.0.1, which
this process scrapes as soon as it first answers, then every SCRAPE_S, as a Prometheus
server would. The receiver and the
scraper run here, not in the client's process: only what the client does for them counts.

Figure: client CPU-seconds per token (utime + stime of each load generator and its
children, over the 5 %-95 % window of its own streamer's tokens, as client capacity counts
them). Per pass, on ÷ off: the median over passes, its lowest and highest, and the ratio of
the two sides' medians. Target: on ÷ off <= 1.02 (the median over passes).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.perf import client_capacity as capacity
from tools.perf import procs

TARGET_RATIO = 1.02
SCRAPE_S = 5.0
FIRST_SCRAPE_S = 0.25  # until the endpoint first answers
OTEL_INTERVAL_S = 5.0  # bench run's default --otel-interval (bench.live.flags)
RUN_BOUND_FACTOR = 3.0  # a pass that takes this x its paced length (+ START_BOUND_S) is stopped
START_BOUND_S = 60.0
HTTP_TIMEOUT_S = 5.0

DEFINITIONS = {
    "client_cpu_s_per_token": "user + system CPU seconds (utime + stime of /proc/PID/stat) of "
    "the load generator process (tools.perf.loadgen) and its live descendants over the window, "
    "÷ the tokens the streamer sent in the window; the window is 5 % to 95 % of the tokens "
    "the streamer sent during that pass (client capacity's window). The live sinks' threads "
    "(the OTLP reader's, prometheus-client's HTTP server) are the client's own, so counted",
    "on": "the load generator with --otel-url http://127.0.0.1:PORT (a receiver in the "
    "harness: reads each POST, answers 200 with an empty body) at --otel-interval 5 and "
    "--metrics-port on 127.0.0.1, scraped by the harness as soon as it answers (tried every "
    "0.25 s), then every 5 s; a refused connection before its first answer or after its "
    "last is 'not listening', any other miss a failed scrape; off: neither flag",
    "ratio": "per pass, the on client's CPU-seconds per token ÷ the off client's, the two "
    "run at the same time on the client core, each against its own streamer (which starts "
    "first, and on which streamer, alternates by pass); median, lowest and highest over "
    "the passes",
}


@dataclass(frozen=True)
class LivePlan:
    streams: int
    interval_ms: float
    max_tokens: int
    requests: int  # per stream, back to back
    passes: int  # of each: off and on


FULL = LivePlan(streams=128, interval_ms=10.0, max_tokens=512, requests=4, passes=3)
QUICK = LivePlan(streams=16, interval_ms=10.0, max_tokens=64, requests=3, passes=1)


class _DiscardHandler(http.server.BaseHTTPRequestHandler):
    """POST: the body read and dropped, 200 with an empty (valid) protobuf response."""

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        receiver: DiscardingOtlpReceiver = self.server.receiver  # type: ignore[attr-defined]
        receiver.count(len(body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class DiscardingOtlpReceiver:
    """An OTLP/HTTP endpoint on 127.0.0.1 that accepts every export and keeps nothing but
    counts (posts, bytes)."""

    def __init__(self) -> None:
        self.posts = 0
        self.bytes = 0
        self._lock = threading.Lock()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DiscardHandler)
        self.server.daemon_threads = True
        self.server.receiver = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def count(self, size: int) -> None:
        with self._lock:
            self.posts += 1
            self.bytes += size

    def seen(self) -> tuple[int, int]:
        with self._lock:
            return self.posts, self.bytes

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(HTTP_TIMEOUT_S)


class _MetricsScraper:
    """GET /metrics until stopped: tried every FIRST_SCRAPE_S until it first answers, then
    every SCRAPE_S. An answer that holds the run's request counter is ok. A refused connection
    before the first answer or after the last one is the endpoint not listening yet or any
    more (the client opens it as it starts and closes it with its last export), counted
    apart; every other miss (a timeout, an error status, a reset, a body without the
    counter, a refusal between two answers) is a failed scrape."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[str] = []  # "ok", "refused" or "failed", in order
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SCRAPE_S if "ok" in self.results else FIRST_SCRAPE_S):
            self.scrape()

    def scrape(self) -> None:
        try:
            with urllib.request.urlopen(self.url, timeout=HTTP_TIMEOUT_S) as r:  # noqa: S310 - loopback
                text = r.read().decode()
            self.results.append("ok" if "bench_run_requests_total" in text else "failed")
        except urllib.error.URLError as e:  # urlopen's connect errors, a refusal among them
            refused = isinstance(e.reason, ConnectionRefusedError)
            self.results.append("refused" if refused else "failed")
        except OSError:
            self.results.append("failed")

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(HTTP_TIMEOUT_S + SCRAPE_S)

    def counts(self) -> dict[str, int]:
        return scrape_counts(self.results)


def scrape_counts(results: list[str]) -> dict[str, int]:
    """ok, failed, and not listening (refused before the first ok or after the last one)."""
    oks = [i for i, r in enumerate(results) if r == "ok"]
    if not oks:
        return {"scrapes_ok": 0, "scrapes_failed": len(results), "scrapes_not_listening": 0}
    first, last = oks[0], oks[-1]
    outside = [r for i, r in enumerate(results) if i < first or i > last]
    inside = results[first : last + 1]
    return {
        "scrapes_ok": len(oks),
        "scrapes_failed": inside.count("failed")
        + inside.count("refused")
        + outside.count("failed"),
        "scrapes_not_listening": outside.count("refused"),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(plan: LivePlan, server_cpu: int | None, client_cpu: int | None) -> dict[str, Any]:
    """PASSES passes, each with both load generators at once (module docstring)."""
    streamer = [procs.python(), "-m", "tools.perf.streamer", "--port", "0"]
    streamer += ["--interval-ms", repr(plan.interval_ms), "--tokens-per-chunk", "1"]
    passes: list[dict[str, Any]] = []
    load_start = _load()
    receiver = DiscardingOtlpReceiver()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="perf-live-") as d,
            procs.serving(streamer, server_cpu) as first,
            procs.serving(streamer, server_cpu) as second,
        ):
            for n in range(plan.passes):
                # Which starts first, and on which streamer, alternates from pass to pass.
                order = (False, True) if n % 2 == 0 else (True, False)
                servers = (first, second) if n % 2 == 0 else (second, first)
                got = _pass(
                    plan, servers, order, client_cpu=client_cpu, tmp=Path(d), receiver=receiver
                )
                for on in order:
                    got[on].update({"pass": n + 1, "live": on, "started": order.index(on) + 1})
                    passes.append(got[on])
                print(f"perf: live pass {n + 1}: off " + brief(got[False]) + "; on "
                      + brief(got[True]), flush=True)  # fmt: skip
    finally:
        receiver.close()
    return summarize(plan, passes, load=(load_start, _load()))


@dataclass
class _Side:
    """One load generator of a pass: its process, streamer, and what it started from."""

    live: bool
    url: str
    server_pid: int
    out: Path
    proc: subprocess.Popen[str]
    port: int | None
    tokens_before: int
    samples: list[capacity.Sample] = field(default_factory=list)


def _pass(
    plan: LivePlan,
    servers: tuple[tuple[str, int], tuple[str, int]],
    order: tuple[bool, bool],
    *,
    client_cpu: int | None,
    tmp: Path,
    receiver: DiscardingOtlpReceiver,
) -> dict[bool, dict[str, Any]]:
    """Both load generators at once, each against its own streamer; their figures by side."""
    posts0, bytes0 = receiver.seen()
    sides = [
        _start(
            plan,
            url,
            pid,
            client_cpu=client_cpu,
            tmp=tmp,
            receiver=receiver if on else None,
            live=on,
        )
        for on, (url, pid) in zip(order, servers, strict=True)
    ]
    paced_s = plan.requests * plan.max_tokens * plan.interval_ms / 1000.0
    on_side = next(side for side in sides if side.live)
    with _scraping(on_side.port) as scraper:
        _sample_until_exit(sides, paced_s * RUN_BOUND_FACTOR + START_BOUND_S)
    figs: dict[bool, dict[str, Any]] = {}
    for side in sides:
        if side.proc.returncode != 0:
            raise RuntimeError(f"the load generator (live {side.live}) exited with "
                               f"{side.proc.returncode}")  # fmt: skip
        got = json.loads(side.out.read_text())
        fig = capacity.window(side.samples)
        tpc = fig["tokens_per_cpu_s"]
        fig.update(
            cpu_s_per_token=1.0 / tpc if tpc else None,
            tokens_sent=procs.get_json(side.url + "/perf/stats")["tokens"] - side.tokens_before,
            tokens_counted=got["tokens"],
            requests=got["requests"],
            errors=got["errors"],
        )
        figs[side.live] = fig
    posts, size = receiver.seen()
    figs[True].update(otlp_exports=posts - posts0, otlp_bytes=size - bytes0)
    if scraper is not None:
        figs[True].update(scraper.counts())
    return figs


def _start(
    plan: LivePlan,
    url: str,
    server_pid: int,
    *,
    client_cpu: int | None,
    tmp: Path,
    receiver: DiscardingOtlpReceiver | None,
    live: bool,
) -> _Side:
    out = tmp / f"loadgen-{'on' if live else 'off'}.json"
    argv = [procs.python(), "-m", "tools.perf.loadgen", "--url", url, "--model", "perf"]
    argv += ["--streams", str(plan.streams), "--max-tokens", str(plan.max_tokens)]
    argv += ["--requests", str(plan.requests), "--out", str(out)]
    port = None
    if receiver is not None:
        port = free_port()
        argv += ["--otel-url", receiver.url, "--otel-interval", repr(OTEL_INTERVAL_S)]
        argv += ["--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
    before = procs.get_json(url + "/perf/stats")["tokens"]
    proc = subprocess.Popen(argv, text=True, preexec_fn=procs.pin(client_cpu))  # noqa: PLW1509
    return _Side(live, url, server_pid, out, proc, port, before)


@contextlib.contextmanager
def _scraping(port: int | None) -> Iterator[_MetricsScraper | None]:
    if port is None:
        yield None
        return
    scraper = _MetricsScraper(f"http://127.0.0.1:{port}/metrics")
    try:
        yield scraper
    finally:
        scraper.stop()


def _sample_until_exit(sides: list[_Side], bound_s: float) -> None:
    """Each side's streamer counters and CPU times every POLL_S until both clients exit
    (stopped after bound_s: a RuntimeError)."""
    deadline = time.monotonic() + bound_s
    while True:
        running = [side.proc.poll() is None for side in sides]
        for side in sides:
            t, tok, chunks, ccpu, scpu = capacity.sample(side.url, side.proc.pid, side.server_pid)
            if side.samples:  # a process that has exited reads 0: keep its last reading
                ccpu = max(ccpu, side.samples[-1][3])
                scpu = max(scpu, side.samples[-1][4])
            side.samples.append((t, tok, chunks, ccpu, scpu))
        if not any(running):
            return
        if time.monotonic() > deadline:
            for side in sides:
                procs.stop(side.proc)
            raise RuntimeError(f"the load generators did not finish within {bound_s:.0f} s")
        time.sleep(capacity.POLL_S)


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def summarize(
    plan: LivePlan, passes: list[dict[str, Any]], *, load: tuple[Any, Any] = (None, None)
) -> dict[str, Any]:
    """Medians each way, and the ratio on ÷ off within each pass (module docstring)."""
    off = [p for p in passes if not p["live"]]
    on = [p for p in passes if p["live"]]
    ratios = [
        b["cpu_s_per_token"] / a["cpu_s_per_token"]
        for a, b in zip(off, on, strict=True)
        if a["cpu_s_per_token"] and b["cpu_s_per_token"]
    ]

    def median(rows: list[dict[str, Any]], key: str) -> float | None:
        known = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(known) if known else None

    sides = {}
    for name, rows in (("off", off), ("on", on)):
        sides[name] = {
            k: median(rows, k)
            for k in ("cpu_s_per_token", "tokens_per_cpu_s", "tokens_per_s", "client_core_share")
        }
        sides[name]["errors"] = sum(r["errors"] for r in rows)
        sides[name]["min_counted_over_sent"] = min(
            (r["tokens_counted"] / r["tokens_sent"] for r in rows if r["tokens_sent"]),
            default=None,
        )
    sides["on"]["otlp_exports"] = sum(r.get("otlp_exports", 0) for r in on)
    for key in ("scrapes_ok", "scrapes_failed", "scrapes_not_listening"):
        sides["on"][key] = sum(r.get(key, 0) for r in on)
    a, b = sides["off"]["cpu_s_per_token"], sides["on"]["cpu_s_per_token"]
    ratio = statistics.median(ratios) if ratios else None
    return {
        "plan": asdict(plan),
        "otel_interval_s": OTEL_INTERVAL_S,
        "scrape_s": SCRAPE_S,
        "order": ["on" if p["live"] else "off" for p in passes],
        "passes": passes,
        "off": sides["off"],
        "on": sides["on"],
        "ratios": ratios,
        "ratio_median": ratio,
        "ratio_min": min(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
        "ratio_of_medians": b / a if a and b else None,
        "target_ratio": TARGET_RATIO,
        "met": ratio is not None and ratio <= TARGET_RATIO,
        "load_average": {"start": load[0], "end": load[1]},
        "definitions": DEFINITIONS,
    }


def brief(got: dict[str, Any]) -> str:
    per = got["cpu_s_per_token"]
    text = f"{per * 1e6:.2f} µs CPU/token" if per else "no CPU time seen"
    text += f", {got['tokens_per_s'] or 0:,.0f} tok/s, {got['errors']} errors"
    if "otlp_exports" in got:
        text += f", {got['otlp_exports']} OTLP exports, {got['scrapes_ok']} scrapes"
    return text
