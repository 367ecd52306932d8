"""Debian's real `prometheus` server for the tests: run as our own process (never the system
service) with a temporary config and TSDB, bound to 127.0.0.1, scraping one target every
second; PromQL over its HTTP API. Killed at the end of the block.

The binary comes from tests/setup/prometheus.sh (Debian's package, installed when missing); a
machine where it cannot be had fails the test that needs it, saying so.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.procs import free_port

READY_S = 60.0
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PrometheusServer:
    url: str
    proc: subprocess.Popen[bytes]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def cells_while_running(
        self, proc: subprocess.Popen[str], timeout_s: float
    ) -> tuple[list[float], list[float]]:
        """While PROC runs (at most TIMEOUT_S), every 0.25 s: bench_run_cells_done, and
        cells left + done (the plan) beside each reading of it."""
        done_during: list[float] = []
        planned_during: list[float] = []
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            done = self.query("bench_run_cells_done")
            if done:
                done_during.append(float(done[0]["value"][1]))
                left = self.query("bench_run_cells_left + bench_run_cells_done")
                planned_during += [float(x["value"][1]) for x in left]
            time.sleep(0.25)
        return done_during, planned_during

    def targets_up(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v1/targets", timeout=10)
        r.raise_for_status()
        active: list[dict[str, Any]] = r.json()["data"]["activeTargets"]
        return active


def binary() -> str:
    """The server's path, installed by tests/setup/prometheus.sh when missing; fails the test
    (never skips it) when it cannot be had."""
    done = subprocess.run(
        ["bash", str(ROOT / "tests" / "setup" / "prometheus.sh")],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(
            f"tests/setup/prometheus.sh could not provide prometheus: {done.stderr[-2000:]}",
            pytrace=False,
        )
    return done.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def prometheus_server(target_port: int, workdir: Path) -> Iterator[PrometheusServer]:
    """Prometheus scraping 127.0.0.1:`target_port` every second, ready (or the test fails
    within READY_S)."""
    exe = binary()
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: bench\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n"
    )
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [exe, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = PrometheusServer(f"http://127.0.0.1:{port}", proc)
    try:
        deadline = time.monotonic() + READY_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"prometheus exited {proc.returncode}: "
                    f"{(workdir / 'prometheus.log').read_text()[-2000:]}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/-/ready", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready within {READY_S:g} s")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
