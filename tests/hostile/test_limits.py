"""Named limits and one-line refusals for what a hostile server or a careless user sends.

No sockets: httpx's MockTransport and the SSE reader fed by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import time

import httpx
import pytest

from bench.errors import ServerError, UsageError
from bench.run import command as run_cmd
from bench.run import options
from bench.run.server_info import detect
from bench.stream.client import MAX_METRICS_BODY_BYTES, MAX_SETUP_BODY_BYTES, Client
from bench.stream.records import RequestRecord
from bench.stream.sse import MAX_SSE_LINE, Events
from bench.stream.urls import check_url, is_loopback
from tests.support.scripted import Body, ScriptedClock


def _client(handler: httpx.MockTransport) -> Client:
    return Client("http://127.0.0.1:9", clock=ScriptedClock(), transport=handler)


def _get(body: bytes, headers: dict[str, str] | None = None, path: str = "/v1/models") -> str:
    def handler(request: httpx.Request) -> httpx.Response:
        # Streamed as a socket would give it, in 64 KB reads: the client's own decoding runs.
        parts = [body[i : i + 65536] for i in range(0, len(body), 65536)]
        return httpx.Response(200, stream=Body(parts), headers=headers or {})

    async def go() -> str:
        client = _client(httpx.MockTransport(handler))
        try:
            return (await client.get(path))[1]
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
def test_a_setup_body_over_its_limit_is_one_line_exit_server(path: str) -> None:
    limit, name = (
        (MAX_METRICS_BODY_BYTES, "MAX_METRICS_BODY_BYTES")
        if path == "/metrics"
        else (MAX_SETUP_BODY_BYTES, "MAX_SETUP_BODY_BYTES")
    )
    assert len(_get(b"x" * limit, path=path)) == limit  # up to the limit: read
    with pytest.raises(ServerError) as err:
        _get(b"x" * (limit + 1), path=path)
    assert err.value.one_line().startswith(
        f"http://127.0.0.1:9{path} answered more than {limit >> 20} MiB (the limit {name}"
    )


def test_a_gzip_bomb_is_stopped_by_its_decoded_size() -> None:
    import tracemalloc

    bomb = gzip.compress(b"\0" * (64 << 20), compresslevel=9)  # 64 MiB in ~64 KB
    assert len(bomb) < 100_000
    tracemalloc.start()
    try:
        with pytest.raises(ServerError, match="counted after decoding"):
            _get(bomb, {"content-encoding": "gzip"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Inflated at most up to the limit at a time (httpx's decoder inflated a read whole).
    assert peak < 3 * MAX_SETUP_BODY_BYTES, peak


def test_a_gzip_or_deflate_body_within_the_limit_is_decoded() -> None:
    import zlib

    text = json.dumps({"object": "list", "data": [{"id": "m"}]})
    assert _get(gzip.compress(text.encode()), {"content-encoding": "gzip"}) == text
    assert _get(zlib.compress(text.encode()), {"content-encoding": "deflate"}) == text
    assert _get(text.encode(), {"content-encoding": "identity"}) == text


def test_an_encoding_the_client_did_not_ask_for_is_one_line() -> None:
    with pytest.raises(ServerError, match="content-encoding 'br'"):
        _get(b"whatever", {"content-encoding": "br"})


def test_a_body_that_does_not_decode_is_one_line() -> None:
    with pytest.raises(ServerError, match="does not decode"):
        _get(b"not gzip at all", {"content-encoding": "gzip"})


@pytest.mark.parametrize(
    "data",
    ['"abc"', '{"id": "m"}', "[1, 2]", '[{"no": "id"}]', '[{"id": 5}]'],
    ids=["string", "object", "numbers", "no-id", "id-not-a-string"],
)
def test_v1_models_whose_data_is_not_a_list_of_models_is_one_line_exit_server(
    data: str,
) -> None:
    body = (f'{{"object": "list", "data": {data}}}').encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body)

    async def go() -> None:
        client = _client(httpx.MockTransport(handler))
        try:
            await detect(client, model=None, speed_factor=None, now_s=0.0)
        finally:
            await client.aclose()

    with pytest.raises(ServerError) as err:
        asyncio.run(go())
    assert err.value.one_line() == (
        "/v1/models answered 200, but its data is not a list of models with an id "
        "(bench run needs a vLLM-compatible server)"
    )


@pytest.mark.timeout(20)
def test_one_long_sse_line_is_refused_at_max_sse_line_in_linear_time() -> None:
    record = RequestRecord(worker=0, start_s=0.0)
    events = Events(record)
    piece = b"x" * 65_536
    started = time.process_time()
    stopped = False
    reads = 0
    while not stopped and reads < 10_000:
        stopped = events.feed(piece if reads else b"data: {" + piece, float(reads))
        reads += 1
    assert stopped and reads <= MAX_SSE_LINE // len(piece) + 1
    assert record.error == "malformed stream: a line over 1 MiB (MAX_SSE_LINE)"
    # 64 MiB in 64 KiB reads took 44 s when every read rebuilt the buffer; 1 MiB is ms.
    assert time.process_time() - started < 2.0


def test_a_long_but_allowed_line_split_in_many_reads_is_read_whole() -> None:
    record = RequestRecord(worker=0, start_s=0.0)
    events = Events(record)
    line = b'data: {"choices":[{"delta":{"content":"' + b"y" * 500_000 + b'"}}],'
    line += b'"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    for i in range(0, len(line), 4096):
        assert not events.feed(line[i : i + 4096], 1.0)
    assert events.feed(b"data: [DONE]\n\n", 2.0)
    assert record.error is None and record.tokens == 1 and record.first_token_s is not None


@pytest.mark.parametrize(
    "url",
    ["http://alice:s3cr3t@127.0.0.1:8000", "http://:s3cr3t@127.0.0.1:8000", "http://alice@h:1"],
)
def test_url_credentials_are_refused_naming_the_variable_without_showing_them(url: str) -> None:
    with pytest.raises(UsageError) as err:
        check_url(url)
    line = err.value.one_line()
    assert "s3cr3t" not in line and "alice" not in line
    assert line.startswith("--url must not carry a user name or password (given for http://")
    assert "VLLM_API_KEY" in line and "BENCH_API_KEY" in line


@pytest.mark.parametrize(
    "url", ["http://a..b:8000", "http://.a:1", "http://-a:1", "ftp://h", "http://" + "a" * 64]
)
def test_a_url_without_a_valid_host_or_scheme_is_one_line_exit_usage(url: str) -> None:
    with pytest.raises(UsageError, match=r"^--url (has no valid host name|must be http)"):
        check_url(url)


def test_valid_urls_pass() -> None:
    for url in ("http://127.0.0.1:8000/", "https://gpu-01.example.com", "http://[::1]:8000/x"):
        assert check_url(url) == url.rstrip("/")


@pytest.mark.parametrize("flag", ["duration", "speed_factor", "request_timeout"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308, 1e-308])  # 29 H5
def test_nan_and_inf_are_one_line_exit_usage(flag: str, value: float) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    run_cmd.register(sub)
    args = parser.parse_args(["run"])
    setattr(args, flag, value)
    with pytest.raises(UsageError, match="is not a finite number from "):
        options.settings_from(args)


@pytest.mark.parametrize("budget", [0, -5])
def test_a_kv_budget_that_is_no_capacity_is_refused(budget: int) -> None:
    """Issue 29 L5: --kv-budget 0 or -5 made every cell "over capacity ... the server has -5"."""
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--kv-budget", str(budget)])
    with pytest.raises(UsageError, match=f"--kv-budget {budget} is not a positive number"):
        options.settings_from(args)


def test_setup_calls_to_a_loopback_server_never_use_the_environments_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("ALL_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def transports(url: str) -> tuple[bool, bool]:
        client = Client(url, clock=ScriptedClock())
        try:
            http = client._http
            chosen = http._transport_for_url(httpx.URL(url + "/v1/models"))
            return chosen is http._transport, client._raw is not None
        finally:
            await client.aclose()

    for url in ("http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"):
        assert asyncio.run(transports(url)) == (True, True), url
    # A remote server: the environment's proxy applies (the user asked for it).
    assert asyncio.run(transports("http://gpu01.example.com:8000"))[0] is False
    assert is_loopback("127.8.0.1") and not is_loopback("10.0.0.1")


def test_a_reported_speed_of_nan_is_ignored() -> None:
    from bench.run.server_info import _reported_speed

    assert _reported_speed(json.loads('{"speed": NaN}')) is None
    assert _reported_speed({"twin": {"speed": 2}}) == 2.0


@pytest.mark.parametrize(
    "flags",
    [["--duration", "30"], ["--duration=30.0"], ["--dur", "30"], ["--seed", "0", "--api", "chat"]],
)
def test_resume_refuses_a_flag_even_given_with_its_default_value(flags: list[str]) -> None:
    from bench.cli import build_parser

    argv = ["run", "--resume", "DIR", *flags]
    args = build_parser().parse_args(argv)
    args.argv = argv
    with pytest.raises(UsageError, match="--resume continues a run with its own settings; --"):
        options.only_url_with_resume(args)
    url_only = ["run", "--resume", "DIR", "--url", "http://127.0.0.1:1"]
    args = build_parser().parse_args(url_only)
    args.argv = url_only
    options.only_url_with_resume(args)  # --url is the one flag a resumed run takes
