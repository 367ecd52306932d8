"""One real llama.cpp server (`llama-server`, C++) for this package's tests.

tests/setup/llamacpp.sh builds it from the llama.cpp sources in PyPI's llama-cpp-python sdist
(13 minutes of compiling on 2 idle cores the first time, then 0.02 s) and writes the tiny
GGUF model it serves (tests/llamacpp/make_gguf.py); server.py starts and stops it. A set-up
or start that fails is a failing test that says why, never a skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llamacpp.server import LlamaServer, set_up, start_llama_server
from tests.support.served import report_line


@pytest.fixture(scope="session")
def llama_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LlamaServer]:
    binary, model = set_up()
    log_path = tmp_path_factory.mktemp("llamacpp") / "llama-server.log"
    with start_llama_server(binary, model, log_path) as server:
        report_line(request.config)(
            f"llama-server healthy in {server.started_in_s:.1f} s at {server.url} (log {log_path})"
        )
        yield server
