"""The published methodology run against the engine in virtual time (no sockets, no sleeps).

This is what calibration fits against: per context row, one cold `max_tokens=1` scout
(prefill tok/s = prompt tokens / TTFT, and it warms the prefix cache), then per
concurrency C: C identical streams launched at once, a readiness gate (>= C running,
none waiting, every worker has a token, held `hold_s`), a `window_s` window, cancel.
Figures follow the card's arithmetic: total tok/s = tokens inside the window / measured
seconds; per-request time between tokens = (t_last - t_first) / (tokens - 1), median over
requests; TTFT = median over requests.
"""

from __future__ import annotations

import heapq
import itertools
import statistics
from dataclasses import dataclass, field

from bench.twin import noise
from bench.twin.engine import Emission, Engine, Request
from bench.twin.frontend import Frontend
from bench.twin.profile import Profile


@dataclass
class CellFigures:
    context: int
    concurrency: int
    total_tok_s: float
    tbt_s: float
    ttft_s: float
    gate_s: float
    window_tokens: int
    measured_s: float


@dataclass
class _Track:
    submitted_s: float
    chunks: list[tuple[float, int]] = field(default_factory=list)


def prompt_ids(context: int, tag: int) -> list[int]:
    """A prompt unique to `tag` (a row of a run), `context` tokens long."""
    return [tag % 100_000 + 1, *range(1, context)]


def prefill_ttft_s(engine: Engine, ids: list[int]) -> float:
    """TTFT of one request on an idle engine (the scout): overhead + prefill steps."""
    req = engine.make_request(ids, 1)
    frontend: Frontend[Request] = Frontend(engine.profile)
    frontend.submit(0.0, len(ids), req)
    [(t, _)] = frontend.start_due(0.0, held=1)
    engine.add(req)
    while not engine.idle:
        t += engine.step().duration_s
    return t


def decode_cell(
    engine: Engine,
    ids: list[int],
    concurrency: int,
    *,
    max_tokens: int = 4096,
    window_s: float = 30.0,
    hold_s: float = 3.0,
    gate_timeout_s: float = 600.0,
) -> CellFigures:
    cell = _Cell(engine, ids, concurrency, max_tokens)
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
    cell.abort_all()
    assert window_start is not None
    return _figures(len(ids), concurrency, cell.tracks, window_start, window_s)


class _Cell:
    """The C looping clients of one virtual cell: what they sent, what they received."""

    def __init__(self, engine: Engine, ids: list[int], concurrency: int, max_tokens: int):
        self.engine, self.ids, self.max_tokens = engine, ids, max_tokens
        self.concurrency = concurrency
        self.frontend: Frontend[Request] = Frontend(engine.profile)
        self.seq = itertools.count()
        self.arrivals: list[tuple[float, int, Request]] = []
        self.tracks: dict[Request, _Track] = {}
        self.worker_of: dict[Request, int] = {}
        self.has_token = [False] * concurrency
        self.held = 0  # requests the server holds: in the frontend, waiting or running
        self.gate_since: float | None = None

    def submit(self, worker: int, now: float) -> None:
        req = self.engine.make_request(self.ids, self.max_tokens)
        self.tracks[req] = _Track(now)
        self.worker_of[req] = worker
        self.held += 1
        self.frontend.submit(now, len(self.ids), req)
        self._start_due(now)

    def _start_due(self, now: float) -> None:
        for ready, started in self.frontend.start_due(now, self.held):
            heapq.heappush(self.arrivals, (ready, next(self.seq), started))

    def admit(self, t: float) -> None:
        """Requests the frontend has passed on by `t` reach the engine."""
        self._start_due(t)
        while self.arrivals and self.arrivals[0][0] <= t:
            self.engine.add(heapq.heappop(self.arrivals)[2])

    def next_arrival_s(self, t: float) -> float:
        """When the idle engine next gets a request."""
        upcoming = [self.arrivals[0][0]] if self.arrivals else []
        nxt = self.frontend.next_start_s()
        return max(t, min([*upcoming, *([nxt] if nxt is not None else [])]))

    def received(self, emissions: list[Emission], t: float) -> None:
        """A step's tokens reach their clients; a finished request's worker sends the next."""
        for em in emissions:
            self.tracks[em.request].chunks.append((t, em.tokens))
            self.has_token[self.worker_of[em.request]] = True
            if em.finished:
                self.held -= 1
                self.submit(self.worker_of[em.request], t)

    def gate_opens(self, t: float, hold_s: float, gate_timeout_s: float) -> bool:
        """The readiness gate (>= C running, none waiting, every worker has a token) has
        held for `hold_s` at `t`; past `gate_timeout_s` without that is an error."""
        engine = self.engine
        ready = (
            len(engine.running) >= self.concurrency and not engine.waiting and all(self.has_token)
        )
        opens = False
        if not ready:
            self.gate_since = None
        elif self.gate_since is None:
            self.gate_since = t
        elif t - self.gate_since >= hold_s:
            opens = True
        if t > gate_timeout_s:
            raise RuntimeError(f"gate never opened: context {len(self.ids)} x {self.concurrency}")
        return opens

    def abort_all(self) -> None:
        for req in list(self.tracks):
            self.engine.abort(req)
        for _, _, req in self.arrivals:
            self.engine.abort(req)


def _figures(
    context: int, concurrency: int, tracks: dict[Request, _Track], w0: float, window_s: float
) -> CellFigures:
    in_window = [
        (ts, n) for tr in tracks.values() for ts, n in tr.chunks if w0 < ts <= w0 + window_s
    ]
    tokens = sum(n for _, n in in_window)
    measured = max(ts for ts, _ in in_window) - w0
    tbts, ttfts = [], []
    for tr in tracks.values():
        if not tr.chunks:
            continue
        ttfts.append(tr.chunks[0][0] - tr.submitted_s)
        n = sum(k for _, k in tr.chunks)
        if n > 1:
            tbts.append((tr.chunks[-1][0] - tr.chunks[0][0]) / (n - 1))
    return CellFigures(
        context=context,
        concurrency=concurrency,
        total_tok_s=tokens / measured,
        tbt_s=statistics.median(tbts),
        ttft_s=statistics.median(ttfts),
        gate_s=w0,
        window_tokens=tokens,
        measured_s=measured,
    )


def run_row(
    profile: Profile,
    context: int,
    concurrencies: list[int],
    *,
    seed: int = 0,
    tag: int = 1,
    run_seed: int | None = None,
    trial: int = 0,
) -> tuple[float, list[CellFigures]]:
    """The scout's TTFT and the figures of each decode cell of one context row.

    One engine serves the whole row, as one server does: the scout's prefix stays cached
    and each cell starts from what the one before left. With `run_seed`, the profile's
    run-to-run noise applies (see `bench.twin.noise`): while a cell runs (the scout is cell
    (context, concurrency 0)), the engine's step costs carry that cell's factor for this run
    and trial. Without it: no noise, the path `tools.twin_calibrate` fits.
    """
    engine = Engine(profile, seed)

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
