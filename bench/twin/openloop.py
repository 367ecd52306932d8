"""Open-loop traffic through the twin's engine in virtual time: a computable truth.

`simulate` plays a list of arrivals (server seconds) through the same `Frontend` and
`TwinScheduler` the HTTP twin drives, on the server's timing rules: a request joins the
frontend's FIFO worker at its arrival with the server holding every open request, reaches
the engine `frontend_s + request_overhead_s` later, and the engine picks it up at its next
step boundary (at once when idle); each step's tokens are stamped at the step's end. No
sleeping, no clock: the same arrivals and seed give the same records, bit for bit.

`measured_stream` is one Poisson point of a workload (bench/workload/schedule.py's `gaps`)
on a long stream, `point_truth` its figures; `slower_decode` is a profile whose decode steps
are slower.
The SLO capacity search over these is `bench.twin.capacity`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from bench import stats
from bench.twin.engine import Request, TwinScheduler
from bench.twin.frontend import Frontend
from bench.twin.profile import Profile
from bench.workload.schedule import gaps
from bench.workload_spec import Process

TAG_BASE = 1_000_000  # a request's own token: every prompt's first block is its own
PREFIX_BASE = 2_000_000  # a prefix group's first token
FIGURES = ("ttft", "tpot", "e2el")
MARGIN = 0.1  # unmeasured requests before and after a measured stream, per measured one


@dataclass(frozen=True, slots=True)
class VirtualRequest:
    """One open-loop request, timed as a client of a twin at `speed` would (speed 1:
    server seconds); `chunks`: each engine step's tokens for it, (time, tokens)."""

    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    chunks: tuple[tuple[float, int], ...]

    @property
    def first_token_s(self) -> float:
        return self.chunks[0][0]

    @property
    def finish_s(self) -> float:
        return self.chunks[-1][0]

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.chunks)

    @property
    def ttft(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot(self) -> float:
        """(last - first) / (tokens - 1); 0 for a one-token answer (vLLM's goodput rule)."""
        n = self.tokens
        return (self.finish_s - self.first_token_s) / (n - 1) if n > 1 else 0.0

    @property
    def e2el(self) -> float:
        return self.finish_s - self.arrival_s


def prompt(index: int, tokens: int, prefix_tokens: int = 0, group_size: int = 1) -> list[int]:
    """[shared prefix of its group] [a tag of its own] [filler], `tokens` long (the
    workload's layout, docs/workloads.md): only the prefix can hit the prefix cache."""
    p = min(prefix_tokens, tokens - 1)
    shared = [PREFIX_BASE + index // group_size, *range(1, p)][:p]
    return [*shared, TAG_BASE + index, *range(p + 1, tokens)]


def simulate(
    profile: Profile,
    arrivals: Sequence[tuple[float, int, int]],
    *,
    seed: int = 0,
    speed: float = 1.0,
    prefix_tokens: int = 0,
    group_size: int = 1,
    max_in_flight: int = 0,
    send_delays_s: Sequence[float] = (),
) -> list[VirtualRequest]:
    """Every arrival (arrival_s, prompt_tokens, output_tokens) served to its end, in the
    order given (arrival times must not decrease). Prompts are unique unless
    `prefix_tokens` > 0: then each group of `group_size` consecutive requests shares that
    many leading tokens. Times come back divided by `speed` (the client's clock of a twin
    run at that speed); the engine's arithmetic is in server seconds either way.

    `max_in_flight` > 0 caps the open requests as a client's semaphore does (vLLM's
    `--max-concurrency`): a request due while that many are open is sent when one ends, at
    that step's end, and its `arrival_s` is when it was sent. Every arrival at 0 with a cap
    of C is a closed loop of C streams (each sends its next request when its last ends).
    `send_delays_s[i]` (server seconds, when given) is how long after the slot freed request
    i is sent, when it waited for one: a client's reaction, which also puts its arrival at
    a point of the server's step of its own instead of locking every stream to one phase."""
    cap = _cap(max_in_flight)
    engine = TwinScheduler(profile, seed)
    frontend: Frontend[Request] = Frontend(profile)
    index: dict[Request, int] = {}
    chunks: list[list[tuple[float, int]]] = [[] for _ in arrivals]
    ready: list[tuple[float, int, Request]] = []  # (reaches the engine, index, request)
    held = 0  # open requests: in the frontend, waiting or running (the server's streams)
    nxt = 0  # the next arrival not yet submitted
    sent = [a for a, _, _ in arrivals]  # when each was sent (later than due under a cap)
    freed_s = -math.inf  # the last time a request ended (a capped arrival goes then)

    def next_event() -> tuple[float, float]:
        fs = frontend.next_start_s()
        at = math.inf
        if nxt < len(arrivals) and held < cap:
            due = arrivals[nxt][0]
            at = due if due >= freed_s else freed_s + (send_delays_s[nxt] if send_delays_s else 0.0)
        return at, math.inf if fs is None else fs

    def advance(until: float) -> None:
        """Arrivals and frontend starts up to `until`, in time order, as the server's
        `_complete` and its `_pump_frontend` timer see them."""
        nonlocal held, nxt
        while min(at_fs := next_event()) <= until:
            now = min(at_fs)
            if at_fs[0] <= at_fs[1]:
                _, prompt_n, out_n = arrivals[nxt]
                ids = prompt(nxt, prompt_n, prefix_tokens, group_size)
                req = engine.make_request(ids, out_n, rid=f"open-{nxt}")
                index[req] = nxt
                sent[nxt] = now
                held += 1
                frontend.submit(now, prompt_n, req)
                nxt += 1
            for ready_s, started in frontend.start_due(now, held):
                heapq.heappush(ready, (ready_s, index[started], started))

    t = arrivals[0][0] if arrivals else 0.0
    while True:
        advance(t)
        while ready and ready[0][0] <= t:
            engine.add(heapq.heappop(ready)[2])
        if engine.idle:
            upcoming = min(ready[0][0] if ready else math.inf, *next_event())
            if math.isinf(upcoming):
                break
            t = max(t, upcoming)
            continue
        res = engine.step()
        t += res.duration_s
        advance(t)  # what arrives during the step, while its requests are still open
        for em in res.emissions:
            chunks[index[em.request]].append((t / speed, em.tokens))
            held -= em.finished
        freed_s = t if any(em.finished for em in res.emissions) else freed_s
        advance(t)  # what the ended requests' streams send now (under a cap)
    return [
        VirtualRequest(i, sent[i] / speed, p, o, tuple(chunks[i]))
        for i, (_, p, o) in enumerate(arrivals)
    ]


def _cap(max_in_flight: int) -> float:
    if max_in_flight < 0:
        raise ValueError(f"max_in_flight {max_in_flight} is negative")
    return max_in_flight or math.inf


def poisson_arrivals(
    rate: float,
    n: int,
    input_tokens: int,
    output_tokens: int,
    *,
    seed: int,
    process: Process = "poisson",
    burstiness: float = 1.0,
) -> list[tuple[float, int, int]]:
    """n arrivals at `rate` (server requests/s) drawn as a workload point draws them: the
    first at 0, then `schedule.gaps` from `random.Random(f"openloop/{seed}")`. The same
    seed gives the same unit-rate draws at every rate (common random numbers)."""
    rng = random.Random(f"openloop/{seed}")
    times = [0.0]
    for gap in gaps(process, rate, burstiness, n, rng):
        times.append(times[-1] + gap)
    return [(at, input_tokens, output_tokens) for at in times]


def backlog_at(records: Sequence[VirtualRequest], t: float) -> int:
    """Requests arrived by `t` and not yet finished at `t` (in flight on the server)."""
    return sum(1 for r in records if r.arrival_s <= t < r.finish_s)


def measured_stream(
    profile: Profile,
    rate: float,
    *,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    process: Process = "poisson",
    seed: int = 0,
    margin: float = MARGIN,
) -> tuple[list[VirtualRequest], list[VirtualRequest]]:
    """A long stream at `rate` and its measured part: `requests` requests, with
    `ceil(margin x requests)` more arriving before them (the server reaches its steady
    load) and as many after (the last measured ones still see traffic behind them)."""
    extra = math.ceil(margin * requests)
    arrivals = poisson_arrivals(
        rate, requests + 2 * extra, input_tokens, output_tokens, seed=seed, process=process
    )
    records = simulate(profile, arrivals, seed=seed)
    return records, records[extra : extra + requests]


def point_truth(
    records: Sequence[VirtualRequest], measured: Sequence[VirtualRequest]
) -> dict[str, float]:
    """One open-loop point's figures from a long stream and its measured part, as
    `measured_stream` gives them: p50/p99 of TTFT, TPOT and E2EL of the measured requests
    (`ttft_p50`, ..., server seconds, by `bench.stats.percentile` as a point's figures are),
    the offered rate of the whole stream (`scheduled_rate`: (n - 1) / arrivals' span), the
    achieved `throughput_rps` and `output_tok_s` (every request / first arrival to last
    finish) and `backlog_end` (in flight at the last arrival)."""
    out: dict[str, float] = {}
    for fig in FIGURES:
        values = [getattr(r, fig) for r in measured]
        out[f"{fig}_p50"] = stats.percentile(values, 50)
        out[f"{fig}_p99"] = stats.percentile(values, 99)
    span = max(r.finish_s for r in records) - records[0].arrival_s
    last = records[-1].arrival_s
    out["scheduled_rate"] = (len(records) - 1) / last if last > 0 else math.inf
    out["throughput_rps"] = len(records) / span
    out["output_tok_s"] = sum(r.tokens for r in records) / span
    out["backlog_end"] = float(backlog_at(records, last))
    return out


def slower_decode(profile: Profile, factor: float) -> Profile:
    """A copy of `profile` whose every decode step takes `factor` times as long (1.10: a
    commit that makes decoding 10 % slower); prefill and frontend unchanged."""
    return profile.model_copy(
        update={"decode_step_s": [[v * factor for v in row] for row in profile.decode_step_s]}
    )
