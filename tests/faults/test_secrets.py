"""Secrets: a whole sweep with recognisable secret values, and not one of them leaks.

The API key and an HF token travel by environment only. The test searches every file of
the run directory and of the packed bundle, every line the processes wrote (stdout,
stderr, the twin's log), the error message of a refused key, and the process list sampled
all along (`ps -eo args`, which shows the server's command line): zero hits.
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from bench.errors import Exit
from tests.support.procs import assert_one_line_error, bench_env, capped_python, finish, new_mark
from tests.support.twinproc import start_twin

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
API_KEY = f"sk-SECRET-canary-{uuid.uuid4().hex}"
HF_TOKEN = f"hf_canary{uuid.uuid4().hex}"
CANARIES = (API_KEY, HF_TOKEN, API_KEY[10:], HF_TOKEN[3:])  # parts too: no partial leak


class PsSampler:
    """`ps -eo args` every 50 ms in the background, every sample kept."""

    def __init__(self) -> None:
        self.samples: list[str] = []
        self.stop_hostile = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop_hostile.is_set():
            out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
            self.samples.append(out.stdout)
            self.stop_hostile.wait(0.05)

    def __enter__(self) -> PsSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_hostile.set()
        self._thread.join()


def _hits(text: str | bytes, where: str) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [f"{where}: {c[:12]}..." for c in CANARIES if c.encode() in data]


def _run_step(args: list[str], env: dict[str, str], logs: list[tuple[str, str]]) -> int:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    logs.append((f"bench {args[0]} stdout", proc.stdout))
    logs.append((f"bench {args[0]} stderr", proc.stderr))
    return proc.returncode


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    """A whole sweep, environment, report, signature and pack, with secrets in every env."""
    root = tmp_path_factory.mktemp("secrets")
    out, mark = root / "run", new_mark()
    secret_env = {"HF_TOKEN": HF_TOKEN, "HUGGING_FACE_HUB_TOKEN": HF_TOKEN}
    env = bench_env(mark, BENCH_API_KEY=API_KEY, BENCH_LOG_LEVEL="debug", **secret_env)
    logs: list[tuple[str, str]] = []
    with PsSampler() as ps:
        with start_twin(
            "tiny", speed=4.0, api_key=API_KEY, env={**secret_env, "FAULT_TEST_MARK": mark}
        ) as twin:
            rc = _run_step(
                ["run", "--url", twin.url, "--contexts", "256", "--prefill-only-contexts", "512",
                 "--concurrencies", "1", "2", "--max-tokens", "384", "--duration", "4",
                 "--out", str(out)], env, logs,
            )  # fmt: skip
            assert rc == 0, logs[-1][1][-2000:]
            rc = _run_step(["environment", "--out", str(out), "--server-pid", str(twin.proc.pid)],
                           env, logs)  # fmt: skip
            assert rc == 0, logs[-1][1][-2000:]
            twin_log = twin.stderr()
            # The canaries were live: the server really held the key (in its environment).
            assert API_KEY.encode() in Path(f"/proc/{twin.proc.pid}/environ").read_bytes()
        logs.append(("twin stderr", twin_log))
        assert _run_step(["report", str(out)], env, logs) == 0, logs[-1][1][-2000:]
        assert _run_step(["keygen", "--out", str(root / "k"), "--principal", "t@x"], env, logs) == 0
        assert _run_step(["sign", str(out), "--key", str(root / "k")], env, logs) == 0
        assert _run_step(["pack", str(out), "--out", str(root / "run.tar.gz")], env, logs) == 0
    hits = []
    for where, text in logs:
        hits += _hits(text, where)
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        hits += _hits(path.read_bytes(), str(path.relative_to(root)))
    hits += _hits(gzip.decompress((root / "run.tar.gz").read_bytes()), "run.tar.gz (unpacked)")
    return out, hits, ps.samples
    # (the ps samples are checked in their own test below)


def test_no_secret_in_any_bundle_file_or_log_line(
    swept: tuple[Path, list[str], list[str]],
) -> None:
    out, hits, _ = swept
    assert hits == []
    files = {p.name for p in out.rglob("*") if p.is_file()}
    assert {"results.json", "environment.json", "report.html", "manifest.json"} <= files
    # The environment names the server's launch (from /proc) and the key as redacted.
    env_json = (out / "environment.json").read_text()
    assert "twin" in env_json and "serve" in env_json


def test_no_secret_in_the_process_list_while_running(
    swept: tuple[Path, list[str], list[str]],
) -> None:
    _, _, samples = swept
    assert len(samples) > 20
    seen_twin = [s for s in samples if "bench twin serve" in s]
    seen_run = [s for s in samples if "bench run --url" in s]
    assert seen_twin and seen_run, "the sampler never saw the server or the sweep"
    hits = [h for i, s in enumerate(samples) for h in _hits(s, f"ps sample {i}")]
    assert hits == []


def test_a_refused_key_is_named_without_showing_it(tmp_path: Path) -> None:
    mark = new_mark()
    with start_twin("tiny", speed=4.0, api_key=API_KEY) as twin:
        wrong = f"sk-SECRET-canary-wrong-{uuid.uuid4().hex}"
        env = bench_env(mark, BENCH_API_KEY=wrong, BENCH_LOG_LEVEL="debug")
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", "run", "--url", twin.url, "--out", str(tmp_path / "r")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        rc, stdout, stderr = finish(proc, 60)
        twin_log = twin.stderr()
    assert rc == Exit.USAGE
    assert_one_line_error(stderr, "refused the API key", "set BENCH_API_KEY or VLLM_API_KEY")
    for text in (stdout, stderr, twin_log):
        assert wrong not in text and API_KEY not in text


def test_the_server_port_is_bound_to_loopback_unless_asked() -> None:
    """The twin listens on 127.0.0.1 by default; containers publish on 127.0.0.1 only."""
    with start_twin("tiny") as twin:
        assert twin.url.startswith("http://127.0.0.1:")
        listening = [
            line.split()[1]
            for table in ("/proc/net/tcp", "/proc/net/tcp6")
            for line in Path(table).read_text().splitlines()[1:]
            if line.split()[3] == "0A"  # LISTEN
        ]
        assert f"0100007F:{twin.port:04X}" in listening
        assert f"00000000:{twin.port:04X}" not in listening
    compose = (Path(__file__).parents[2] / "compose.yaml").read_text()
    blocks = re.findall(r"\n\s*ports:\n((?:\s*- .*\n)+)", compose)
    ports = [x.strip()[2:].strip('"') for block in blocks for x in block.splitlines()]
    assert len(ports) >= 2 and all(p.startswith("127.0.0.1:") for p in ports), ports


def test_url_credentials_are_refused_naming_the_variable_and_never_shown(tmp_path: Path) -> None:
    """A password in --url would land in results.json, the report, the plan line, errors
    and the signed bundle: it is refused (new run and --resume alike), in one line that
    names the variable to use instead, and shows neither the user nor the password."""
    mark = new_mark()
    password = f"pw-SECRET-canary-{uuid.uuid4().hex}"
    url = f"http://alice-canary:{password}@127.0.0.1:9"
    out = tmp_path / "r"
    for args in (["--url", url, "--out", str(out)], ["--resume", str(tmp_path), "--url", url]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", "run", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=bench_env(mark, BENCH_API_KEY=API_KEY, BENCH_LOG_LEVEL="debug"),
        )  # fmt: skip
        rc, stdout, stderr = finish(proc, 60)
        assert rc == Exit.USAGE
        assert_one_line_error(stderr, "--url must not carry a user name or password",
                              "VLLM_API_KEY", "BENCH_API_KEY")  # fmt: skip
        for text in (stdout, stderr):
            assert password not in text and "alice-canary" not in text and API_KEY not in text
    assert not out.exists()


def test_a_proxy_never_sees_the_key_of_a_loopback_server(tmp_path: Path) -> None:
    """HTTP_PROXY / ALL_PROXY set: the setup calls (/v1/models, /tokenize, /metrics) go
    straight to a loopback server like the measured stream, so the proxy gets no byte."""
    import socket

    got: list[bytes] = []
    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(16)
    proxy.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = proxy.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    got.append(conn.recv(65536))
                except OSError:
                    got.append(b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    mark = new_mark()
    at = f"http://127.0.0.1:{proxy.getsockname()[1]}"
    try:
        with start_twin("tiny", speed=4.0, api_key=API_KEY) as twin:
            env = bench_env(mark, BENCH_API_KEY=API_KEY, HTTP_PROXY=at, http_proxy=at,
                            ALL_PROXY=at, all_proxy=at, NO_PROXY="", no_proxy="")  # fmt: skip
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench", "run", "--url", twin.url,
                 "--contexts", "256", "--prefill-only-contexts", "--concurrencies", "1",
                 "--duration", "1", "--max-tokens", "16", "--out", str(tmp_path / "r")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            )  # fmt: skip
            rc, _, stderr = finish(proc, 120)
    finally:
        stop.set()
        thread.join(5)
        proxy.close()
    assert rc == Exit.OK, stderr[-2000:]
    assert got == []  # not one connection, so no Authorization header either


def _bench_run_capped(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.Popen(
        [*capped_python(), "bench", "run", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    return finish(proc, 120)


@pytest.mark.parametrize("variable", ["BENCH_API_KEY", "VLLM_API_KEY"])
@pytest.mark.parametrize(
    ("tail", "why"),
    [("\r", "control character"), ("\n", "control character"), ("ключ", "not ASCII")],
)
def test_a_key_that_is_no_header_value_is_refused_in_one_line_without_showing_it(
    tmp_path: Path, variable: str, tail: str, why: str
) -> None:
    """Issue 29 S1, H6: a key read from a file with its CR LF (or a non-ASCII key) was sent
    as a header and quoted in the error (`Illegal header value b'Bearer sk-…\\r'`), or
    ended in a UnicodeEncodeError traceback. It is refused before anything is sent."""
    mark = new_mark()
    key = API_KEY + tail
    out = tmp_path / "r"
    env = bench_env(mark, BENCH_LOG_LEVEL="debug", **{variable: key})
    rc, stdout, stderr = _bench_run_capped(["--url", "http://127.0.0.1:9", "--out", str(out)], env)
    assert rc == Exit.USAGE, stderr[-2000:]
    assert_one_line_error(stderr, f"setting {variable} is invalid", why)
    for text in (stdout, stderr):
        assert API_KEY[10:] not in text and "Traceback" not in text
    assert not out.exists()


def test_the_servers_key_never_goes_to_the_tokenizer_url(tmp_path: Path) -> None:
    """Issue 29 S2: `--tokenizer-url` got the key of the server under test. It gets
    BENCH_TOKENIZER_API_KEY, and nothing without it."""
    from tests.hostile.test_hostile_server import start_hostile, stop_hostile

    log = tmp_path / "tokenizer.jsonl"
    tokenizer = start_hostile(log)
    mark = new_mark()
    own = f"sk-tokenizer-own-{uuid.uuid4().hex}"
    try:
        with start_twin(
            "tiny", speed=4.0, api_key=API_KEY,
            extra_args=["--engine", "llamacpp", "--no-per-chunk-counts"],
        ) as twin:  # fmt: skip
            args = ["--url", twin.url, "--contexts", "256", "--prefill-only-contexts",
                    "--concurrencies", "1", "--duration", "1", "--max-tokens", "16",
                    "--tokenizer-url", tokenizer.url("stream=ok")]  # fmt: skip
            rc, _, stderr = _bench_run_capped(
                [*args, "--out", str(tmp_path / "a")], bench_env(mark, VLLM_API_KEY=API_KEY)
            )
            assert rc == Exit.OK, stderr[-2000:]
            without = tokenizer.requests()
            rc, _, stderr = _bench_run_capped(
                [*args, "--out", str(tmp_path / "b")],
                bench_env(mark, VLLM_API_KEY=API_KEY, BENCH_TOKENIZER_API_KEY=own),
            )
            assert rc == Exit.OK, stderr[-2000:]
            both = tokenizer.requests()
    finally:
        stop_hostile(tokenizer)
    tokenize = [r for r in without if r["target"].endswith("/tokenize")]
    assert tokenize and not any(r["authorization"] for r in tokenize)
    given = [r for r in both[len(without) :] if r["target"].endswith("/tokenize")]
    assert given and all(r["authorization"] for r in given)
