"""Ctrl-C (SIGINT) and SIGTERM in each phase of `bench run` and `bench local`.

For each: exit 130 with one line saying where the finished cells are, every finished cell
kept, `--resume` finishing the run, no process left behind (read from /proc), and no
stream left open on the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.errors import Exit
from tests.support.procs import (
    assert_one_line_error,
    bench,
    bench_env,
    cells_done,
    finish,
    load_results,
    new_mark,
    proxy,
    survivors,
    track,
    wait_for,
    wait_no_survivors,
)
from tests.support.twinproc import TwinProcess, start_twin

# timed: beside a loaded worker its twins' cells went without tokens (a resumed cell invalid, a
# second cell's streams not seen in 90 s; fresh-clone run of 5 December): it runs apart from
# the vLLM servers (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.timed]

SPEED = 4.0
ROW = ["--contexts", "256", "--prefill-only-contexts", "--concurrencies", "1", "2",
       "--max-tokens", "384", "--duration", "8"]  # fmt: skip
SIGNALS = [signal.SIGINT, signal.SIGTERM]


@pytest.fixture(scope="module")
def twin() -> Iterator[TwinProcess]:
    with start_twin("tiny", speed=SPEED) as t:
        yield t


def _running(url: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.split()[-1])
    raise AssertionError("no vllm:num_requests_running in /metrics")


def _idle(url: str) -> None:
    wait_for(lambda: _running(url) == 0, "the server to have no open stream", 15)


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_signal_while_planning_exits_130_with_nothing_half_made(
    sig: signal.Signals, tmp_path: Path
) -> None:
    """Before the sweep: the server is asked what it serves (here it never answers)."""
    mark, out = new_mark(), tmp_path / "r"
    accepted = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        held: list[socket.socket] = []

        def accept() -> None:
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                held.append(conn)
                accepted.set()

        threading.Thread(target=accept, daemon=True).start()
        proc = bench("run", "--url", f"http://127.0.0.1:{port}", *ROW, "--out", str(out), mark=mark)
        assert accepted.wait(60), "bench run never connected"
        time.sleep(0.2)
        proc.send_signal(sig)
        rc, _, stderr = finish(proc, 20)
        for conn in held:
            conn.close()
    assert rc == Exit.INTERRUPTED
    assert_one_line_error(stderr, "interrupted")
    assert not (out / "results.json").exists()
    wait_no_survivors(mark)


def _interrupt_and_resume(
    proc: subprocess.Popen[str], sig: signal.Signals, out: Path, mark: str, url: str
) -> None:
    proc.send_signal(sig)
    rc, _, stderr = finish(proc, 30)
    assert rc == Exit.INTERRUPTED, stderr[-2000:]
    line = assert_one_line_error(stderr, "interrupted; finished cells are in", str(out))
    assert f"continue with: bench run --resume {out}" in line
    wait_no_survivors(mark)
    _idle(url)
    stopped = load_results(out)
    assert stopped is not None and stopped.state == "interrupted"
    assert (out / "INCOMPLETE").read_text() == "this run is interrupted\n"

    rc, _, stderr = finish(bench("run", "--resume", str(out), "--url", url, mark=mark))
    assert rc == Exit.OK, stderr[-2000:]
    done = load_results(out)
    assert done is not None and done.state == "complete" and not (out / "INCOMPLETE").exists()
    assert done.run_id == stopped.run_id
    for cell in stopped.cells:
        assert done.cell(cell.context_label, cell.concurrency, cell.trial) == cell
    assert [(c.concurrency, c.status) for c in done.cells] == [(1, "valid"), (2, "valid")]
    assert len(done.prefill) == 1 and done.prefill[0].status == "valid"
    wait_no_survivors(mark)


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_signal_while_sizing_the_prefill_prompt_then_resume(
    sig: signal.Signals, twin: TwinProcess, tmp_path: Path
) -> None:
    mark, out = new_mark(), tmp_path / "r"
    # The proxy holds the cold max_tokens=1 scout: the run is in its prefill step.
    with proxy(twin.url, hold=rb'"max_tokens":\s*1\b') as px:
        proc = bench("run", "--url", px.url, *ROW, "--out", str(out), mark=mark)
        assert px.arrived.wait(60), "the prefill scout never came"
        started = load_results(out)
        assert started is not None and not started.prefill and not started.cells
        _interrupt_and_resume(proc, sig, out, mark, twin.url)


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_signal_inside_a_decode_window_then_resume(
    sig: signal.Signals, twin: TwinProcess, tmp_path: Path
) -> None:
    mark, out = new_mark(), tmp_path / "r"
    proc = bench("run", "--url", twin.url, *ROW, "--out", str(out), mark=mark)
    wait_for(lambda: cells_done(out) >= 1, "the first cell")
    wait_for(lambda: _running(twin.url) >= 2, "the second cell's streams")
    _interrupt_and_resume(proc, sig, out, mark, twin.url)


# -- bench local ------------------------------------------------------------------------

LOCAL_RUN = ["--contexts", "256", "--prefill-only-contexts", "--concurrencies", "1", "2",
             "--max-tokens", "384", "--duration", "8"]  # fmt: skip


def _slow_ssh_keygen(bin_dir: Path, flag: Path) -> None:
    """ssh-keygen behind a wrapper that says when signing starts and takes 3 s over it."""
    real = shutil.which("ssh-keygen")
    assert real is not None, "ssh-keygen is not installed (make report-tools)"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh-keygen"
    wrapper.write_text(
        f'#!/bin/sh\ncase " $* " in *" -Y sign "*) touch {flag}; sleep 3;; esac\nexec {real} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)


def _local(tmp_path: Path, mark: str, path_prefix: Path | None = None) -> subprocess.Popen[str]:
    env = bench_env(mark, HOME=str(tmp_path / "home"))
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return track(subprocess.Popen(
        [sys.executable, "-m", "bench", "local", "--profile", "tiny", "--speed", str(SPEED),
         "--out", str(tmp_path / "results" / "run1"), "--", *LOCAL_RUN],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    ))  # fmt: skip


def test_ctrl_c_of_bench_local_during_the_sweep_packs_a_partial_signed_bundle(
    tmp_path: Path,
) -> None:
    """Ctrl-C in a terminal reaches the whole group: bench local, bench run and the twin."""
    mark, out = new_mark(), tmp_path / "results" / "run1"
    proc = _local(tmp_path, mark)
    wait_for(lambda: cells_done(out) >= 1, "the first cell", 120)
    os.killpg(proc.pid, signal.SIGINT)
    rc, _stdout, stderr = finish(proc, 120)
    assert rc == Exit.INTERRUPTED, stderr[-3000:]
    assert "Traceback" not in stderr
    wait_no_survivors(mark)
    kept = load_results(out)
    assert kept is not None and kept.state == "interrupted"
    assert kept.cells and kept.cells[0].status == "valid"
    bundle = out.with_name("run1.tar.gz")
    assert bundle.is_file(), "no partial bundle"
    allowed = tmp_path / "home" / ".config" / "bench" / "allowed_signers"
    rc, _, err = finish(
        bench("verify", str(bundle), "--allowed-signers", str(allowed), mark=mark), 60
    )
    assert rc == Exit.OK, err


def test_sigterm_of_bench_local_while_signing_keeps_the_run_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    mark, out = new_mark(), tmp_path / "results" / "run1"
    flag = tmp_path / "signing"
    _slow_ssh_keygen(tmp_path / "bin", flag)
    proc = _local(tmp_path, mark, tmp_path / "bin")
    wait_for(flag.exists, "signing to start", 150)
    proc.send_signal(signal.SIGTERM)
    rc, _, stderr = finish(proc, 30)
    assert rc == Exit.INTERRUPTED, stderr[-3000:]
    assert_one_line_error(stderr, "interrupted")
    wait_no_survivors(mark)
    assert not survivors(mark)
    done = load_results(out)
    assert done is not None and done.state == "complete"
    assert [c.status for c in done.cells] == ["valid", "valid"]
    assert not out.with_name("run1.tar.gz").exists()  # no bundle claims to be signed
    manifest = out / "manifest.json"
    assert not (out / "manifest.json.sig").exists() or json.loads(manifest.read_text())
