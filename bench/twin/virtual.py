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
from bench.twin.engine import Engine, Request
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
) -> VirtualCell:
    frontend: Frontend[Request] = Frontend(engine.profile)
    t = 0.0
    seq = itertools.count()
    arrivals: list[tuple[float, int, Request]] = []
    records: dict[Request, RequestRecord] = {}
    has_token = [False] * concurrency
    in_flight: list[tuple[float, int]] = []  # (t, open streams) after every step

    held = 0  # requests the server holds: in the frontend, waiting or running

    def submit(worker: int, now: float) -> None:
        nonlocal held
        req = engine.make_request(ids, max_tokens)
        # Sent the moment it is asked for: no connection set-up in virtual time.
        records[req] = RequestRecord(worker, start_s=now, sent_s=now, prompt_tokens=len(ids))
        held += 1
        frontend.submit(now, len(ids), req)
        for ready, started in frontend.start_due(now, held):
            heapq.heappush(arrivals, (ready, next(seq), started))

    for w in range(concurrency):
        submit(w, 0.0)
    gate_since: float | None = None
    window_start: float | None = None
    while True:
        for ready, started in frontend.start_due(t, held):
            heapq.heappush(arrivals, (ready, next(seq), started))
        while arrivals and arrivals[0][0] <= t:
            engine.add(heapq.heappop(arrivals)[2])
        if engine.idle:
            upcoming = [arrivals[0][0]] if arrivals else []
            nxt = frontend.next_start_s()
            t = max(t, min([*upcoming, *([nxt] if nxt is not None else [])]))
            continue
        res = engine.step()
        t += res.duration_s
        if window_start is not None and t > window_start + window_s:
            break
        for em in res.emissions:
            rec = records[em.request]
            if rec.first_token_s is None:
                rec.first_token_s = t
            rec.add_usage(t, rec.tokens + em.tokens)
            has_token[rec.worker] = True
            if em.finished:
                rec.finished, rec.end_s = True, t
                held -= 1
                submit(rec.worker, t)
        in_flight.append((t, held))
        if window_start is None:
            ready = len(engine.running) >= concurrency and not engine.waiting and all(has_token)
            if not ready:
                gate_since = None
            elif gate_since is None:
                gate_since = t
            elif t - gate_since >= hold_s:
                window_start = t
            if t > gate_timeout_s:
                raise RuntimeError(f"gate never opened: context {len(ids)} x {concurrency}")
    assert window_start is not None
    w1 = window_start + window_s
    for req, rec in records.items():
        engine.abort(req)
        if rec.end_s is None:  # cancelled at the window's end, as the client does
            rec.cancelled, rec.end_s = True, w1
    for _, _, req in arrivals:
        engine.abort(req)
    kept = tuple(records.values())
    figures, _, reason = cell_figures(
        kept,
        window_start,
        w1,
        samples=(),
        client_active=in_flight,
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
