"""The published methodology run against the engine in virtual time (no sockets, no sleeps).

This is what calibration fits against: per context row, one cold `max_tokens=1` scout
(prefill tok/s = prompt tokens / TTFT, and it warms the prefix cache), then per
concurrency C: C identical streams launched at once, a readiness gate (>= C running,
none waiting, every worker has a token, held `hold_s`), a `window_s` window, cancel.

Each stream is a `RequestRecord` in virtual seconds, as the client would have written it,
and a cell's figures are the product's own (`bench.run.figures.cell_figures`): what is
calibrated against the card is the arithmetic `bench run` applies, not a copy of it.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from bench.results import CellFigures
from bench.run.figures import cell_figures
from bench.stream.records import RequestRecord
from bench.twin import noise
from bench.twin.engine import Emission, Request, TwinScheduler
from bench.twin.frontend import Frontend
from bench.twin.profile import Profile


@dataclass(frozen=True)
class VirtualCell:
    """One decode cell run in virtual time: the virtual seconds from the launch to the
    window's start (the readiness gate), the window's length, the request records of the
    cell and the figures `bench.run.figures` makes of them."""

    context: int
    concurrency: int
    gate_s: float
    window_s: float
    figures: CellFigures
    records: tuple[RequestRecord, ...] = field(repr=False)


def prompt_ids(context: int, tag: int) -> list[int]:
    """A prompt unique to `tag` (a row of a run), `context` tokens long."""
    return [tag % 100_000 + 1, *range(1, context)]


def prefill_ttft_s(engine: TwinScheduler, ids: list[int]) -> float:
    """TTFT of one request on an idle engine (the scout): overhead + prefill steps."""
    return request_s(engine, ids, 1)


def request_s(engine: TwinScheduler, ids: list[int], max_tokens: int) -> float:
    """Server seconds of one request to its end on an idle engine."""
    req = engine.make_request(ids, max_tokens)
    frontend: Frontend[Request] = Frontend(engine.profile)
    frontend.submit(0.0, len(ids), req)
    [(t, _)] = frontend.start_due(0.0, held=1)
    engine.add(req)
    while not engine.idle:
        t += engine.step().duration_s
    return t


class _VirtualCell:
    """The streams of one decode cell in virtual time: the frontend's queue, the engine,
    one `RequestRecord` per request, the readiness gate."""

    def __init__(self, engine: TwinScheduler, ids: list[int], concurrency: int, max_tokens: int):
        self.engine, self.ids, self.concurrency, self.max_tokens = (
            engine,
            ids,
            concurrency,
            max_tokens,
        )
        self.frontend: Frontend[Request] = Frontend(engine.profile)
        self.seq = itertools.count()
        self.arrivals: list[tuple[float, int, Request]] = []
        self.records: dict[Request, RequestRecord] = {}
        self.has_token = [False] * concurrency
        self.in_flight: list[tuple[float, int]] = []  # (t, open streams) after every step
        self.held = 0  # requests the server holds: in the frontend, waiting or running
        self.gate_since: float | None = None

    def submit(self, worker: int, now: float) -> None:
        req = self.engine.make_request(self.ids, self.max_tokens)
        # Sent the moment it is asked for: no connection set-up in virtual time.
        self.records[req] = RequestRecord(
            worker, start_s=now, sent_s=now, prompt_tokens=len(self.ids)
        )
        self.held += 1
        self.frontend.submit(now, len(self.ids), req)
        self._queue_started(now)

    def _queue_started(self, now: float) -> None:
        for ready, started in self.frontend.start_due(now, self.held):
            heapq.heappush(self.arrivals, (ready, next(self.seq), started))

    def admit(self, t: float) -> None:
        """Requests the frontend has handed on by `t` join the engine."""
        self._queue_started(t)
        while self.arrivals and self.arrivals[0][0] <= t:
            self.engine.add(heapq.heappop(self.arrivals)[2])

    def next_arrival_s(self, t: float) -> float:
        """When the idle engine next has something to do."""
        upcoming = [self.arrivals[0][0]] if self.arrivals else []
        nxt = self.frontend.next_start_s()
        return max(t, min([*upcoming, *([nxt] if nxt is not None else [])]))

    def received(self, emissions: list[Emission], t: float) -> None:
        """Tokens of one engine step, as the client stamps them; a finished request is
        replaced at once by its worker's next."""
        for em in emissions:
            rec = self.records[em.request]
            if rec.first_token_s is None:
                rec.first_token_s = t
            rec.add_usage(t, rec.tokens + em.tokens)
            self.has_token[rec.worker] = True
            if em.finished:
                rec.finished, rec.end_s = True, t
                self.held -= 1
                self.submit(rec.worker, t)
        self.in_flight.append((t, self.held))

    def gate_opens(self, t: float, hold_s: float, timeout_s: float) -> bool:
        """The readiness gate: >= C running, none waiting, every worker has a token,
        held for `hold_s`."""
        engine = self.engine
        ready = (
            len(engine.running) >= self.concurrency and not engine.waiting and all(self.has_token)
        )
        if t > timeout_s:
            raise RuntimeError(f"gate never opened: context {len(self.ids)} x {self.concurrency}")
        if not ready:
            self.gate_since = None
        elif self.gate_since is None:
            self.gate_since = t
        return self.gate_since is not None and t - self.gate_since >= hold_s

    def close(self, window_end_s: float) -> tuple[RequestRecord, ...]:
        """Cancel what is still open at the window's end, as the client does."""
        for req, rec in self.records.items():
            self.engine.abort(req)
            if rec.end_s is None:
                rec.cancelled, rec.end_s = True, window_end_s
        for _, _, req in self.arrivals:
            self.engine.abort(req)
        return tuple(self.records.values())


def decode_cell(
    engine: TwinScheduler,
    ids: list[int],
    concurrency: int,
    *,
    max_tokens: int = 4096,
    window_s: float = 30.0,
    hold_s: float = 3.0,
    gate_timeout_s: float = 600.0,
) -> VirtualCell:
    cell = _VirtualCell(engine, ids, concurrency, max_tokens)
    for w in range(concurrency):
        cell.submit(w, 0.0)
    t = 0.0
    window_start: float | None = None
    while True:
        cell.admit(t)
        if engine.idle:
            t = cell.next_arrival_s(t)
            continue
        res = engine.step()
        t += res.duration_s
        if window_start is not None and t > window_start + window_s:
            break
        cell.received(res.emissions, t)
        if window_start is None and cell.gate_opens(t, hold_s, gate_timeout_s):
            window_start = t
    assert window_start is not None
    w1 = window_start + window_s
    kept = cell.close(w1)
    figures, _, reason = cell_figures(
        kept,
        window_start,
        w1,
        samples=(),
        client_active=cell.in_flight,
        first=None,
        last=None,
        ready_after_s=window_start,
    )
    if figures is None:
        raise RuntimeError(f"no figures for context {len(ids)} x {concurrency}: {reason}")
    return VirtualCell(len(ids), concurrency, window_start, window_s, figures, kept)


def run_row(
    profile: Profile,
    context: int,
    concurrencies: list[int],
    *,
    seed: int = 0,
    tag: int = 1,
    run_seed: int | None = None,
    trial: int = 0,
) -> tuple[float, list[VirtualCell]]:
    """The scout's TTFT and the figures of each decode cell of one context row.

    One engine serves the whole row, as one server does: the scout's prefix stays cached
    and each cell starts from what the one before left. With `run_seed`, the profile's
    run-to-run noise applies (see `bench.twin.noise`): while a cell runs (the scout is cell
    (context, concurrency 0)), the engine's step costs carry that cell's factor for this run
    and trial. Without it: no noise, the path `tools.twin_calibrate` fits.
    """
    engine = TwinScheduler(profile, seed)

    def cell_profile(concurrency: int) -> Profile:
        if run_seed is None:
            return profile
        return noise.scaled(
            profile, noise.cell_factor(profile, run_seed, trial, context, concurrency)
        )

    ids = prompt_ids(context, tag)
    engine.profile = cell_profile(0)
    ttft = prefill_ttft_s(engine, ids)
    cells = []
    for c in concurrencies:
        engine.profile = cell_profile(c)
        cells.append(decode_cell(engine, ids, c))
    return ttft, cells
