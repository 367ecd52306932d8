"""Issue 48: a server that echoes the key, in every form, on every path; no form of it (nor
of the run's other secrets) in any byte written or any line printed.

The server is tests/support/hostile_server.py with `echo=all`: every answer repeats the
request's `Authorization` header verbatim, URL-encoded, base64, JSON \\u-escaped and with
one character escaped, in error bodies, SSE error events, whole answers' text, /tokenize,
/metrics, /v1/models, /version and a response header. One run goes through `bench run`
(answer fingerprint and retrieval check on), a resume, environment, report, export,
sign, pack, verify and history ingest; then every file under the test's folder (run
directory, bundle and its unpacked copy, exports, report.html, the history database) and
every line each command printed is searched for each form. bench.secrets is the door
every one of these paths takes (the HTTP client hands on nothing unmasked); a path that
went around it fails here without anyone having to list it.

(The orchestrator's side, a server's log through the Docker engine, is
tests/provisioning/containers/test_engine.py's
test_a_containers_log_reaches_us_with_the_runs_secrets_masked.)
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tarfile
import urllib.parse
import uuid
from pathlib import Path

import pytest

from bench.bundle import sign
from bench.errors import Exit
from tests.hostile.test_hostile_server import ROOT, Hostile, hostile  # noqa: F401 (the fixture)
from tests.support.procs import capped_python

pytestmark = pytest.mark.integration

KEY = f"sk-door-canary-{uuid.uuid4().hex}"
HF_TOKEN = f"hf_doorCanary{uuid.uuid4().hex}"
TOKENIZER_KEY = f"tk-door-canary-{uuid.uuid4().hex}"
ARGS = [
    "--contexts", "1K", "--prefill-only-contexts", "--concurrencies", "1", "--duration", "2",
    "--max-tokens", "64", "--request-timeout", "5", "--kv-budget", "100000",
]  # fmt: skip


def forms() -> dict[str, str]:
    """What the echoing server says of the key, and parts of it: each must be found nowhere."""
    said = f"Bearer {KEY}"
    return {
        "key": KEY,
        "key's first half (a cut excerpt)": KEY[: len(KEY) // 2],
        "key without its first characters (one escaped)": KEY[2:],
        "URL-encoded": urllib.parse.quote(said, safe=""),
        "base64 (its middle)": base64.b64encode(said.encode()).decode()[12:-4],
        "JSON \\u escapes": "".join(f"\\u{ord(c):04x}" for c in KEY[:12]),
        "HF token": HF_TOKEN,
        "tokenizer key": TOKENIZER_KEY,
    }


def _bench(printed: list[tuple[str, str]], *args: str) -> int:
    env = {
        **os.environ, "BENCH_API_KEY": KEY, "HF_TOKEN": HF_TOKEN,
        "BENCH_TOKENIZER_API_KEY": TOKENIZER_KEY, "BENCH_LOG_FORMAT": "json",
        "BENCH_LOG_LEVEL": "debug",
    }  # fmt: skip
    got = subprocess.run(  # capped: a hostile answer that eats memory fails here
        [*capped_python(4), "bench", *args], capture_output=True, text=True, timeout=180,
        check=False, cwd=ROOT, env=env,
    )  # fmt: skip
    printed.append((f"bench {' '.join(args[:2])}", got.stdout + got.stderr))
    return got.returncode


def test_no_form_of_a_secret_is_written_or_printed_on_any_path(
    hostile: Hostile,  # noqa: F811 (the imported fixture)
    tmp_path: Path,
) -> None:
    printed: list[tuple[str, str]] = []
    run = tmp_path / "run"
    url = hostile.url("echo=all")
    assert _bench(printed, "run", "--url", url, *ARGS, "--out", str(run)) == Exit.OK, printed
    # A finished run resumed: nothing left to measure, its files read back and rewritten.
    assert _bench(printed, "run", "--resume", str(run), "--url", url) in (Exit.OK, Exit.USAGE)
    assert _bench(printed, "environment", "--out", str(run)) == Exit.OK, printed[-1]
    assert _bench(printed, "report", str(run)) == Exit.OK, printed[-1]
    export = tmp_path / "export.jsonl"
    assert _bench(printed, "export", str(run), "--format", "jsonl", "--requests",
                  "--out", str(export)) == Exit.OK, printed[-1]  # fmt: skip
    key_file = tmp_path / "keys" / "signer"
    key_file.parent.mkdir()
    public = sign.keygen(key_file, comment="door@test")
    allowed = tmp_path / "keys" / "allowed_signers"
    allowed.write_text(sign.allowed_signers_line(public, "door@test") + "\n")
    assert _bench(printed, "sign", str(run), "--key", str(key_file)) == Exit.OK, printed[-1]
    assert _bench(printed, "pack", str(run)) == Exit.OK, printed[-1]
    bundle = tmp_path / "run.tar.gz"
    assert _bench(printed, "verify", str(bundle), "--allowed-signers", str(allowed),
                  "--integrity-only") == Exit.OK, printed[-1]  # fmt: skip
    db = tmp_path / "history.sqlite3"
    assert _bench(printed, "history", "ingest", str(bundle), "--db", str(db),
                  "--allowed-signers", str(allowed)) == Exit.OK, printed[-1]  # fmt: skip
    # A run whose setup fails on the echoing server: its one error line.
    _bench(printed, "run", "--url", hostile.url("echo=all,tokenize=none"), "--contexts", "2K",
           "--concurrencies", "1", "--duration", "1", "--out", str(tmp_path / "bad"))  # fmt: skip
    unpacked = tmp_path / "unpacked"
    with tarfile.open(bundle) as tar:
        tar.extractall(unpacked, filter="data")

    # The echoes were there to be masked: the fingerprint's reasons say so.
    results = json.loads((run / "results.json").read_text())
    reasons = [a["reason"] for a in results["fingerprint"]["answers"] if a["reason"]]
    assert reasons and all("Bearer ********" in r for r in reasons), reasons
    texts = [a["text"] for a in results["fingerprint"]["answers"] if a["text"]]
    assert texts and all("Bearer ********" in t for t in texts), texts
    assert any("Bearer ********" in (c["reason"] or "") for c in results["cells"])
    requests = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert any("********" in (r.get("error") or "") for r in requests)

    leaks = []
    for path in sorted(p for p in tmp_path.rglob("*") if p.is_file()):
        data = path.read_bytes()
        leaks += [f"{path.relative_to(tmp_path)}: {name}" for name, form in forms().items()
                  if form.encode() in data]  # fmt: skip
    for where, text in printed:
        leaks += [f"{where} printed: {name}" for name, form in forms().items() if form in text]
    assert not leaks, leaks
