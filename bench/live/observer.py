"""The sweep's side of live metrics: which scope a request runs in, and the sinks it feeds.

A scope is a contextvars value (`SCOPE`): the sweep sets it around a cell, a workload
point, a point's warm-ups and a row's prefill scout (`LiveMetrics.unit`, `LiveMetrics.phase`),
and every task started inside (a cell's C workers, a point's requests) inherits it, so a
request that finishes after the next scope began (a cancelled stream's last bytes) is still
counted where it was sent. Outside every scope a request is in phase "setup" (the warm-up
request, the answer fingerprint, the sizing probes).

Phases: "cell" (a decode cell of the card's matrix, `cell` = "CONTEXT:C" as `--cells`
writes it), "point" (a workload point, `point` = its index in results.json), "warmup" (a
point's warm-ups), "scout" (a row's max_tokens=1 prefill scout, `cell` = its context
label) and "setup". `trial` is results.json's, from 0.

The client calls `LiveMetrics.request_finished` once per measured stream, when its record is
complete (bench.stream.client); a unit (cell or point) is counted done when the sweep says
it ended, with its status (`unit_finished`). A run without the flags sets no hook on the
client: its requests pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol

from bench.stream.records import RequestRecord

Phase = Literal["cell", "point", "warmup", "scout", "setup"]


@dataclass(frozen=True, slots=True)
class LiveScope:
    phase: Phase
    trial: int | None = None
    cell: str | None = None  # "CONTEXT:C" of a decode cell, the context label of a scout
    point: int | None = None  # a workload point's index

    @property
    def name(self) -> str:
        """The scope in words, as the Prometheus endpoint's current-cell label shows it."""
        if self.point is not None:
            return f"point {self.point}"
        return self.cell or self.phase


SETUP = LiveScope("setup")
SCOPE: ContextVar[LiveScope] = ContextVar("bench_live_scope", default=SETUP)


@dataclass(frozen=True)
class LiveRun:
    """What every exported number is about: the run and the server it measures."""

    run_id: str
    model: str  # gen_ai.request.model: the model the requests name
    provider: str  # gen_ai.provider.name: the engine detected (bench.engines), or "unknown"
    api: Literal["chat", "completions"]
    server_address: str
    server_port: int
    units_total: int | None  # cells (or points) this run measures; None: not known ahead
    # Seconds the sweep still expects to take (bench.run.progress's ETA; None: the plan has
    # no estimate, as for a workload run), and since it began.
    eta_s: Callable[[], float] | None = None
    elapsed_s: Callable[[], float] | None = None


class LiveSink(Protocol):
    """One destination of live metrics (bench.live.otel, bench.live.prometheus)."""

    def run_started(self, run: LiveRun) -> None: ...

    def unit_started(self, scope: LiveScope) -> None: ...

    def unit_finished(self, scope: LiveScope, status: str) -> None: ...

    def request_finished(self, record: RequestRecord, scope: LiveScope) -> None: ...

    def close(self) -> None:
        """Last export, bounded (bench.live.otel.FLUSH_BOUND_S); the endpoint stops."""
        ...


class LiveMetrics:
    """The sinks of one run (none: every call is free)."""

    def __init__(self, sinks: tuple[LiveSink, ...] = ()) -> None:
        self.sinks = sinks

    def __bool__(self) -> bool:
        return bool(self.sinks)

    def run_started(self, run: LiveRun) -> None:
        for s in self.sinks:
            s.run_started(run)

    @contextmanager
    def unit(self, scope: LiveScope) -> Iterator[None]:
        """A cell or point begins: requests (and tasks) started inside carry `scope`."""
        token = SCOPE.set(scope)
        for s in self.sinks:
            s.unit_started(scope)
        try:
            yield
        finally:
            SCOPE.reset(token)

    def unit_finished(self, scope: LiveScope, status: str) -> None:
        """The cell or point is done, with results.json's status."""
        for s in self.sinks:
            s.unit_finished(scope, status)

    @contextmanager
    def phase(self, scope: LiveScope) -> Iterator[None]:
        """Requests sent inside carry `scope` (a scout, a point's warm-ups); no unit counted."""
        token = SCOPE.set(scope)
        try:
            yield
        finally:
            SCOPE.reset(token)

    def request_finished(self, record: RequestRecord) -> None:
        if not self.sinks:
            return
        scope = SCOPE.get()
        for s in self.sinks:
            s.request_finished(record, scope)

    def close(self) -> None:
        for s in self.sinks:
            s.close()
