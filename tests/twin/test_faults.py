"""Each fault flag does what it says, on a real twin process."""

from __future__ import annotations

import itertools
import time

import httpx
import pytest

from tests.support.sse import chat_body, stream_chat
from tests.support.twinproc import start_twin

pytestmark = pytest.mark.integration


def test_crash_after() -> None:
    with start_twin("tiny", extra_args=["--fault-crash-after", "1.0"]) as twin:
        started = time.monotonic()
        assert httpx.get(f"{twin.url}/health").status_code == 200
        code = twin.proc.wait(timeout=10)
        assert code != 0
        assert 0.5 < time.monotonic() - started < 5
        assert "crashing as asked" in twin.stderr()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{twin.url}/health")


def test_cut_streams_mid_way() -> None:
    with (
        start_twin("tiny", extra_args=["--fault-cut-fraction", "1.0"]) as twin,
        httpx.Client(base_url=twin.url) as c,
    ):
        out = stream_chat(c, chat_body("cut me", 60))
        assert not out.done and out.error is not None
        got = out.chunks[-1]["usage"]["completion_tokens"]
        assert 1 <= got < 60
        # the twin survives and serves the next request (which is cut too: fraction 1.0)
        assert c.get("/health").status_code == 200


@pytest.mark.parametrize("status", [429, 500])
def test_error_fraction(status: int) -> None:
    args = ["--fault-error-fraction", "0.5", "--fault-error-status", str(status)]
    with start_twin("tiny", extra_args=args) as twin, httpx.Client(base_url=twin.url) as c:
        codes = [
            c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}).status_code
            for _ in range(30)
        ]
        errors = [code for code in codes if code != 200]
        assert set(codes) == {200, status}
        assert 5 <= len(errors) <= 25
        resp = next(
            r
            for r in (
                c.post("/v1/completions", json={"prompt": "y", "max_tokens": 1}) for _ in range(30)
            )
            if r.status_code == status
        )
        assert resp.json()["error"]["code"] == status


def test_stall() -> None:
    with (
        start_twin("tiny", extra_args=["--fault-stall", "0.6"]) as twin,
        httpx.Client(base_url=twin.url) as c,
    ):
        out = stream_chat(c, chat_body("stall", 20))
        assert out.done
        gaps = [b - a for a, b in itertools.pairwise(out.arrivals)]
        assert max(gaps) >= 0.5
        assert out.chunks[-1]["usage"]["completion_tokens"] == 20


def test_malformed_chunk() -> None:
    with (
        start_twin("tiny", extra_args=["--fault-malformed-fraction", "1.0"]) as twin,
        httpx.Client(base_url=twin.url) as c,
    ):
        out = stream_chat(c, chat_body("bad chunk", 10))
        assert out.error is not None and out.error.startswith("malformed chunk")
        assert out.done and out.chunks[-1]["usage"]["completion_tokens"] == 10


def test_no_metrics() -> None:
    with (
        start_twin("tiny", extra_args=["--fault-no-metrics"]) as twin,
        httpx.Client(base_url=twin.url) as c,
    ):
        assert c.get("/metrics").status_code == 404
        assert c.get("/health").status_code == 200
        assert c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200
