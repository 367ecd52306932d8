"""`bench run` against a hostile server (tests/support/hostile_server.py), one misbehaviour at a
time: every one ends in bounded time with a one-line reason on the cell or the run, never
a hang, a traceback, or a Valid cell with wrong numbers (issue 15)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.errors import Exit
from bench.host import procs
from tests.support.procs import capped_python

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
# A request time-out of 5 s, every request's, the setup calls' too: under a loaded fresh
# clone's make test (6 and 7 December) this test server's answer came after 1 s, once to a
# stream, once to redirect's /v1/models. The cases about the time-out ask for 1 s (TIMED_OUT).
SMALL = [
    "--contexts", "256", "--prefill-only-contexts", "--concurrencies", "1",
    "--duration", "1", "--max-tokens", "16", "--request-timeout", "5", "--kv-budget", "100000",
]  # fmt: skip
TIMED_OUT = ["--request-timeout", "1"]
# For a test whose cell must be valid (or whose reason must not be the window's): a window of
# 5 s. In SMALL's 1 s window a 0.1 s hold-up of this test server or of `bench run` at its
# end is a stall by the product's rule (STALL_WINDOW_FRACTION), and a loaded machine makes
# them: under CI's make test (7 December) the early-hints cell was invalid, under stress-ng
# in a fresh clone (7 December, f44f38b) the over-max stream's first token came after 1 s.
VALID = [*SMALL, "--duration", "5", "--request-timeout", "10"]


@dataclass
class Hostile:
    proc: subprocess.Popen[str]
    port: int
    log: Path

    def url(self, spec: str) -> str:
        return f"http://127.0.0.1:{self.port}/h/{spec}"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def start_hostile(log: Path) -> Hostile:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.hostile_server", "--log", str(log)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return Hostile(proc, port, log)


def stop_hostile(h: Hostile) -> None:
    if h.proc.stdout is not None:
        h.proc.stdout.close()
    procs.stop(h.proc, grace_s=10)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    h = start_hostile(tmp_path_factory.mktemp("hostile") / "requests.jsonl")
    try:
        yield h
    finally:
        stop_hostile(h)


@dataclass
class Ran:
    rc: int
    out: str
    err: str
    took_s: float
    results: dict[str, Any] | None


def bench_run(*args: str, out: Path, env: dict[str, str] | None = None, limit_s: float = 60) -> Ran:
    started = time.monotonic()
    got = subprocess.run(  # in capped memory: a regression fails here, not the machine
        [*capped_python(4), "bench", "run", *args, "--out", str(out)],
        capture_output=True, text=True, timeout=limit_s, check=False, cwd=ROOT,
        env={**os.environ, "BENCH_LOG_FORMAT": "json", **(env or {})},
    )  # fmt: skip
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else None
    return Ran(got.returncode, got.stdout, got.stderr, time.monotonic() - started, results)


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("{")]


# stream misbehaviour -> what the prefill scout and the decode cell say (both invalid)
STREAM_FAULTS = {
    "neg-chunk": "transport error: malformed chunked body: chunk size '-6'",
    "hex-prefix": "transport error: malformed chunked body: chunk size '0x10'",
    "no-crlf": "transport error: malformed chunked body: no CRLF after a chunk",
    "long-size-line": "transport error: malformed chunked body: chunk-size line over 4096 bytes",
    "huge-line": "malformed stream: a line over 1 MiB (MAX_SSE_LINE)",
    "lying-usage": "implausible usage: completion_tokens 9223372036854775808 (over 12 digits)",
    "huge-usage": "implausible usage: completion_tokens 999999999999999999999999...",
    "html": "transport error: the response is 'text/html', not text/event-stream",
    "gzip": "transport error: the response is content-encoding 'gzip', not identity",
    "early-close": "transport error: connection closed by the server (incomplete chunked read)",
    "close-mid": "transport error: connection closed by the server (incomplete chunked read)",
    "redirect": "HTTP 307: (Location: http://127.0.0.1:9/v1)",
    "stall": "read time-out after 1 s",
    "stall-head": "read time-out after 1 s",
    "trickle": "read time-out: no token for 1 s (the server kept sending other bytes)",
    "malformed-json": "malformed chunk: {oops",
    "bad-status-line": "transport error: malformed status line 'HTTP/1.1 OK-ish'",
    "http-500": 'HTTP 500: {"error": {"message": "hostile failure"}}',
}


ABOUT_THE_TIMEOUT = {"stall", "stall-head", "trickle"}  # their reasons name TIMED_OUT's 1 s


def timeout_for(how: str) -> list[str]:
    """TIMED_OUT for a stream fault about the request time-out, else nothing (SMALL's 5 s)."""
    return TIMED_OUT if how in ABOUT_THE_TIMEOUT else []


@pytest.mark.parametrize("how", list(STREAM_FAULTS))
def test_every_stream_misbehaviour_ends_fast_with_its_reason_on_the_cell(
    hostile: Hostile, tmp_path: Path, how: str
) -> None:
    why = STREAM_FAULTS[how]
    ran = bench_run("--url", hostile.url(f"stream={how}"), *SMALL, *timeout_for(how),
                    out=tmp_path / "r")  # fmt: skip
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert "Traceback" not in ran.err
    assert ran.took_s < 30
    assert ran.results is not None and ran.results["state"] == "complete"
    (scout,) = ran.results["prefill"]
    (cell,) = ran.results["cells"]
    assert scout["status"] == "invalid" and scout["reason"].startswith(why.rstrip(".")), scout
    assert cell["status"] == "invalid" and cell["figures"] is None
    assert cell["reason"].startswith("1 request(s) failed, first: " + why.rstrip(".")), cell
    assert "\n" not in cell["reason"]


def test_usage_only_in_the_last_chunk_is_an_invalid_cell_with_the_right_reason(
    hostile: Hostile, tmp_path: Path
) -> None:
    ran = bench_run("--url", hostile.url("stream=usage-last"), *VALID, out=tmp_path / "r")
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert ran.results is not None
    (scout,) = ran.results["prefill"]
    assert scout["status"] == "valid"  # max_tokens=1: its one token's time is known
    (cell,) = ran.results["cells"]
    assert cell["status"] == "invalid" and cell["figures"] is None
    assert cell["reason"].startswith("usage not continuous: ")


def test_more_output_tokens_than_max_tokens_is_an_invalid_cell(
    hostile: Hostile, tmp_path: Path
) -> None:
    ran = bench_run("--url", hostile.url("stream=over-max"), *VALID, out=tmp_path / "r")
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert ran.results is not None
    (cell,) = ran.results["cells"]
    assert cell["status"] == "invalid" and cell["figures"] is None
    assert cell["reason"] == (
        "the server claimed 48 output tokens for one request, more than its max_tokens 16"
    )


def test_a_well_behaved_hostile_server_gives_a_valid_cell(hostile: Hostile, tmp_path: Path) -> None:
    # The control: the fixture's own good stream is measured, so the faults above are theirs.
    ran = bench_run("--url", hostile.url("stream=ok"), *VALID, out=tmp_path / "r")
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert ran.results is not None
    (cell,) = ran.results["cells"]
    assert cell["status"] == "valid", cell.get("reason")


# setup-call misbehaviour -> the run's one line (exit 3)
SETUP_FAULTS = {
    "models=nonlist": "/v1/models answered 200, but its data is not a list of models with an id",
    "models=gzip-bomb": "/v1/models answered more than 4 MiB (the limit MAX_SETUP_BODY_BYTES",
    "models=huge": "/v1/models answered more than 4 MiB (the limit MAX_SETUP_BODY_BYTES",
    "models=redirect": "/v1/models answered 307 without a model list",
    "metrics=gzip-bomb": "/metrics answered more than 16 MiB (the limit MAX_METRICS_BODY_BYTES",
    "metrics=huge": "/metrics answered more than 16 MiB (the limit MAX_METRICS_BODY_BYTES",
}


# a number from outside that no server can mean -> the run's one line (issue 29), exit 3
NUMBER_FAULTS = {
    # S5: a 2 s window lasted 2,000 hours; L3: every latency 0; H4: OverflowError
    "speed=1e-6": "/version reports a speed factor of 1e-06, outside 0.01 to 1000",
    "speed=1e300": "/version reports a speed factor of 1e+300, outside 0.01 to 1000",
    "speed=5e-324": "/version reports a speed factor of 4.94066e-324, outside 0.01 to 1000",
    # S6: a 1.69 GB /tokenize body, then MemoryError
    "count=5": "/tokenize cannot size the 256 prompt: its count does not grow with the text "
    "(5 tokens for none of the filler, 5 for 256 words)",
    # H1: the 1K row measured with 11-token prompts
    "count=1e300": "/tokenize answered a count that is no token count while sizing 256: '1e+300'",
    "count=many": "/tokenize answered a count that is no token count while sizing 256: 'many'",
    "count=null": "/tokenize answered a count that is no token count while sizing 256: 'None'",
    # S6 without /tokenize: the line's slope clamped to 1e-6, MemoryError
    "tokenize=none,prompt=100": "cannot size prompts: usage.prompt_tokens does not grow "
    "with the prompt (100 for 64 words, 100 for 1,024)",
}


@pytest.mark.parametrize("spec", list(NUMBER_FAULTS))
def test_a_number_no_server_can_mean_is_one_line_exit_server_in_bounded_memory(
    hostile: Hostile, tmp_path: Path, spec: str
) -> None:
    ran = bench_run("--url", hostile.url(f"stream=ok,{spec}"), *SMALL, out=tmp_path / "r")
    lines = _error_lines(ran.err)
    assert ran.rc == Exit.SERVER, ran.err[-2000:]
    assert len(lines) == 1 and NUMBER_FAULTS[spec] in lines[0], lines
    assert ran.took_s < 30


@pytest.mark.parametrize("how", ["early-hints", "cr-only"])
def test_an_interim_103_and_cr_only_line_ends_are_read_as_the_specs_allow(
    hostile: Hostile, tmp_path: Path, how: str
) -> None:
    """Issue 29 L1: a 103 Early Hints before the 200 made the cell `invalid: HTTP 103: …`;
    L2: CR-only SSE line ends (allowed by the spec) gave `stream ended without [DONE]`."""
    ran = bench_run("--url", hostile.url(f"stream={how}"), *VALID, out=tmp_path / "r")
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert ran.results is not None
    (scout,) = ran.results["prefill"]
    (cell,) = ran.results["cells"]
    assert scout["status"] == "valid", scout.get("reason")
    assert cell["status"] == "valid", cell.get("reason")


def test_a_server_echoing_the_key_into_an_error_leaves_no_key_in_the_run(
    hostile: Hostile, tmp_path: Path
) -> None:
    """Issue 29 L4: a 500 body quoting `Authorization` put the key in results.json,
    tables.md and samples.jsonl (and `bench sign` then refused the run)."""
    key = "sk-echoed-canary-5150"
    out = tmp_path / "r"
    ran = bench_run("--url", hostile.url("stream=echo-auth"), *SMALL, out=out,
                    env={"BENCH_API_KEY": key})  # fmt: skip
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert ran.results is not None
    (cell,) = ran.results["cells"]
    assert "Authorization: Bearer ********" in cell["reason"]
    for path in out.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path.name
    assert key not in ran.out and key not in ran.err


def test_a_reported_speed_outside_the_range_is_overridden_by_the_flag(
    hostile: Hostile, tmp_path: Path
) -> None:
    ran = bench_run(
        "--url", hostile.url("stream=ok,speed=1e-6"), *SMALL, "--speed-factor", "1",
        out=tmp_path / "r",
    )  # fmt: skip
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert ran.results is not None and ran.results["server"]["speed_factor"] == 1


@pytest.mark.parametrize("spec", list(SETUP_FAULTS))
def test_every_setup_misbehaviour_is_one_line_exit_server_in_bounded_memory(
    hostile: Hostile, tmp_path: Path, spec: str
) -> None:
    out = tmp_path / "r"
    ran = bench_run("--url", hostile.url(spec), *SMALL, out=out)
    lines = _error_lines(ran.err)
    assert ran.rc == Exit.SERVER, ran.err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("bench: error: ")
    assert SETUP_FAULTS[spec] in lines[0]
    assert not out.exists()  # nothing measured, nothing made


def test_resume_against_another_server_is_refused_saying_how_to_start_anew(
    hostile: Hostile, tmp_path: Path
) -> None:
    out = tmp_path / "r"
    first = bench_run("--url", hostile.url("stream=ok,model=m1,version=1.0"), *SMALL, out=out)
    assert first.rc == Exit.OK, first.err[-2000:]
    before = (out / "results.json").read_bytes()
    for spec, diff in [
        ("stream=ok,model=m2,version=1.0", "model 'm2', the run's 'm1'"),
        ("stream=ok,model=m1,version=2.0", "version '2.0', the run's '1.0'"),
        ("stream=ok,model=m1,version=1.0,max_model_len=8192", "max model length 8192"),
    ]:
        started = time.monotonic()
        got = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--resume", str(out),
             "--url", hostile.url(spec)],
            capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
            env={**os.environ, "BENCH_LOG_FORMAT": "json"},
        )  # fmt: skip
        lines = _error_lines(got.stderr)
        assert got.returncode == Exit.USAGE, got.stderr[-2000:]
        assert len(lines) == 1 and diff in lines[0]
        assert "start a new run without --resume (bench run --url" in lines[0]
        assert time.monotonic() - started < 30
        assert (out / "results.json").read_bytes() == before  # not rewritten


def test_sigint_and_sigterm_end_a_run_on_a_stalled_stream(hostile: Hostile, tmp_path: Path) -> None:
    args = [*SMALL, "--request-timeout", "600"]
    for sig in (signal.SIGINT, signal.SIGTERM):
        out = tmp_path / sig.name
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", "run", "--url", hostile.url("stream=stall"),
             *args, "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "BENCH_LOG_FORMAT": "json"},
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not (out / "results.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the prefill scout is now stuck on the stall
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == Exit.INTERRUPTED, err[-2000:]
        assert "Traceback" not in err


def test_a_proxy_in_the_environment_never_sees_a_loopback_servers_requests(
    hostile: Hostile, tmp_path: Path
) -> None:
    proxy = start_hostile(tmp_path / "proxy.jsonl")
    already = len(hostile.requests())
    try:
        env = {"HTTP_PROXY": f"http://127.0.0.1:{proxy.port}",
               "ALL_PROXY": f"http://127.0.0.1:{proxy.port}",
               "NO_PROXY": "", "no_proxy": "", "BENCH_API_KEY": "sk-proxy-canary"}  # fmt: skip
        ran = bench_run("--url", hostile.url("stream=ok"), *SMALL, out=tmp_path / "r", env=env)
        assert ran.rc == Exit.OK, ran.err[-2000:]
        assert proxy.requests() == []
    finally:
        stop_hostile(proxy)
    seen = [r for r in hostile.requests()[already:] if r["target"].endswith("/v1/models")]
    assert seen and all(r["authorization"] for r in seen)  # the key went to the server only
