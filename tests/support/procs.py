"""Real processes for the fault tests: `bench` as a subprocess, /proc checks, a faulty proxy.

Every process a test starts carries a marker in its environment (FAULT_TEST_MARK); the
marker is inherited by children, so `survivors(mark)` finds any process the test left
behind (an orphaned twin, a bench run still streaming) by reading /proc/*/environ.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import run_files
from bench.errors import BenchError
from bench.results import Results


def capped_python(gib: float = 3.0) -> list[str]:
    """The words before a module's name to run it as `python -m` with its address space
    capped (tests/support/capped.py): hostile input that makes it eat memory fails the test,
    not the machine."""
    return [sys.executable, "-m", "tests.support.capped", str(gib)]


def new_mark() -> str:
    return uuid.uuid4().hex


def bench_env(mark: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "BENCH_API_KEY")}
    env.update({"BENCH_LOG_FORMAT": "json", "FAULT_TEST_MARK": mark, **extra})
    return env


def bench(*args: str, mark: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`python -m bench ARGS` with piped output, carrying the marker, in a process group of
    its own: `finish` ends the whole group, whatever the test's outcome."""
    return track(
        subprocess.Popen(
            [sys.executable, "-m", "bench", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env or bench_env(mark),
            start_new_session=True,
        )
    )


# The processes started (through `bench` or `track`) while a test's body runs; tests/conftest.py
# reaps them when the body ends (`reaped`). A test that failed before `finish` (a `wait_for`
# that timed out, say) left its `bench run` running and its pipes open: it loaded the machine
# and its pipes surfaced as ResourceWarnings that failed the next test on that worker
# (fresh-clone run of 5 December).
_started: list[subprocess.Popen[str]] | None = None


def run_bench(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`python -m bench ARGS` to its end (at most TIMEOUT_S), output captured, any exit."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], check=False, capture_output=True, text=True,
        timeout=timeout_s,
    )  # fmt: skip


def track(proc: subprocess.Popen[str]) -> subprocess.Popen[str]:
    """PROC, to be killed with its group and its pipes closed when the test's body ends."""
    if _started is not None:
        _started.append(proc)
    return proc


@contextlib.contextmanager
def reaped() -> Iterator[None]:
    """Around a test's body: what it started and left running is killed with its process
    group, its pipes closed and its exit collected, whatever the outcome."""
    global _started
    outer, _started = _started, []
    try:
        yield
    finally:
        started, _started = _started, outer
        for proc in started:
            if proc.poll() is None:
                kill_group(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError, ValueError):
                        pipe.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group `proc` leads (started with start_new_session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def finish(proc: subprocess.Popen[str], timeout_s: float = 180) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `proc` once it ends, within `timeout_s`.

    On a time-out, a failure or an interrupt the process group is killed and its pipes read
    to the end and closed, so nothing a test started stays busy for the next one; a time-out
    fails the test with the tails of both outputs (issue 28: a `bench run` left looping
    against llama.cpp's server for 15 minutes after its test had failed)."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException as exc:
        kill_group(proc)
        out, err = proc.communicate(timeout=30)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise AssertionError(
                f"still running after {timeout_s:g} s (its process group was killed); "
                f"stdout: {out[-1500:]}\nstderr: {err[-2500:]}"
            ) from None
        raise
    # A child the program left behind is not killed here: the fault tests check for it
    # (`survivors`), and the end of the test run fails on any (tests/conftest.py).
    return proc.returncode, out, err


def error_lines(stderr: str) -> list[str]:
    """The human lines of stderr (JSON log lines left out)."""
    return [x for x in stderr.splitlines() if x.strip() and not x.lstrip().startswith("{")]


def assert_one_line_error(stderr: str, *words: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = error_lines(stderr)
    assert len(lines) == 1, lines
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def survivors(mark: str, *, except_pids: tuple[int, ...] = ()) -> list[str]:
    """Command lines of live processes that carry the marker (zombies count as gone)."""
    needle = f"FAULT_TEST_MARK={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in except_pids:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z":
            found.append(f"{entry.name}: {args}")
    return found


def wait_no_survivors(mark: str, timeout_s: float = 10, **kw: tuple[int, ...]) -> None:
    deadline = time.monotonic() + timeout_s
    while (left := survivors(mark, **kw)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left running: {left}"


def load_results(out: Path) -> Results | None:
    """The run's results as the product reads them; None while there are none (yet)."""
    try:
        return run_files.load_results(out)
    except BenchError:
        return None


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def cells_done(out: Path) -> int:
    r = load_results(out)
    return 0 if r is None else len(r.cells)


def log_events(stderr: str) -> list[dict[str, object]]:
    events = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A TCP port that accepts connections (kernel backlog) and never answers a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def free_port() -> int:
    """A port nothing listens on (bound and released: connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


MetricsFault = Callable[[bytes, int], tuple[int, bytes]]


@dataclass
class Proxy:
    url: str = ""
    # Set when a POST matching `hold` arrives; that request waits for `release`.
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def proxy(
    upstream: str, metrics: MetricsFault | None = None, *, hold: bytes | None = None
) -> Iterator[Proxy]:
    """A real HTTP server in front of the twin: /metrics goes through `metrics`, the rest as is.

    `metrics(upstream_body, scrape_number) -> (status, body)` may also sleep (a slow /metrics).
    A POST whose body matches the regex `hold` waits until `release` is set.
    Streams are passed on chunk by chunk as they arrive, so timing stays the twin's.
    """
    scrapes = [0]
    client = httpx.Client(base_url=upstream, timeout=60)
    state = Proxy()
    held = re.compile(hold) if hold is not None else None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            r = client.get(self.path)
            if self.path.startswith("/metrics") and metrics is not None:
                scrapes[0] += 1
                status, body = metrics(r.content, scrapes[0])
                self._send(status, body, "text/plain")
                return
            self._send(r.status_code, r.content, r.headers.get("content-type", "text/plain"))

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if held is not None and held.search(body):
                state.arrived.set()
                state.release.wait(120)
            headers = {"content-type": "application/json"}
            if "authorization" in self.headers:
                headers["authorization"] = self.headers["authorization"]
            # The client may go away mid-stream (end of a window, an interrupt).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._forward(body, headers)

        def _forward(self, body: bytes, headers: dict[str, str]) -> None:
            with client.stream("POST", self.path, content=body, headers=headers) as r:
                if "text/event-stream" not in r.headers.get("content-type", ""):
                    self._send(r.status_code, r.read(), r.headers.get("content-type", ""))
                    return
                self.send_response(r.status_code)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for part in r.iter_raw():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

    server = _ThreadingServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        client.close()


def stderr_until(
    proc: subprocess.Popen[str], found: Callable[[str], object], timeout_s: float = 600.0
) -> str:
    """PROC's stderr up to and including the first line `found` accepts (or to its end, or
    to the deadline)."""
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if not line or found(line):
            break
    return seen


def bench_cli(*argv: str, env: dict[str, str] | None = None, timeout_s: float = 300) -> str:
    """`python -m bench ARGV` to its end; its stdout, or the test fails with its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", *argv],
        env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"bench {argv[0]} failed ({done.returncode}): {done.stderr}"
    return done.stdout
