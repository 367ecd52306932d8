"""Faults of the orchestrated flow: the server container dies, SSH drops (during the sweep,
while signing), Ctrl-C during the pull-back.

`provision bench` against the real test host (sshd + dockerd on this machine, the twin in
the server container). For each: a named exit code and one line, what finished brought
back in a signed bundle (or said where it is), and no container left.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.bundle.verify import verify_bundle
from bench.errors import Exit
from bench.results import Results
from provisioning.flow.host_run import scope_of
from tests.provisioning.conftest import ROOT, SshTestHost
from tests.support.procs import kill_group, new_mark, stderr_until, wait_no_survivors

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]

SWEEP = ("--no-verdict", "--", "--contexts", "8K", "16K", "--prefill-only-contexts",
         "--concurrencies", "1", "2", "--duration", "4", "--max-tokens", "256")  # fmt: skip


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _ended() -> Iterator[None]:
    """Whatever a test's outcome, the `provision bench` it started is ended and its pipes
    read and closed: a test that failed before its own `communicate` left it running, and
    the next test failed on its unclosed pipes (issue 28)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
            proc.communicate(timeout=30)


def _containers(run_id: str, *filters: str) -> list[str]:
    label = f"label=org.vllm-bench.run-id={scope_of(run_id, 'bench-test-host')}"
    flags = [x for f in filters for x in ("--filter", f)]
    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", label, *flags],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return out.split()


def _start(
    ssh_host: SshTestHost, tmp_path: Path, image: str, run_id: str, mark: str = ""
) -> subprocess.Popen[str]:
    """`provision bench` in a session of its own (Ctrl-C in a terminal reaches the group)."""
    env = {**os.environ, "VLLM_API_KEY": "k-" + uuid.uuid4().hex, "BENCH_LOG_FORMAT": "json"}
    env["FAULT_TEST_MARK"] = mark or new_mark()
    argv = [
        sys.executable, "-m", "provisioning", "bench", ssh_host.alias,
        "--image", image, "--run-id", run_id, "--profile", "twin",
        "--results", str(tmp_path / "results"),
        "--allowed-signers", str(tmp_path / "allowed_signers"), *SWEEP,
    ]  # fmt: skip
    proc = subprocess.Popen(  # stdin: not the runner's (tests/provisioning/flow/test_flow.py)
        argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    _STARTED.append(proc)
    return proc


def _until(proc: subprocess.Popen[str], needle: str) -> str:
    """stderr up to and including the first line with `needle`."""
    seen = stderr_until(proc, lambda line: needle in line)
    assert needle in seen, seen[-3000:]
    return seen


def _until_first_cell(proc: subprocess.Popen[str]) -> str:
    return _until(proc, "cell_finished")


def _host_run_dir(ssh_host: SshTestHost, run_id: str) -> Path:
    """The run directory on the test host (its sessions' HOME is DIR/remote-home)."""
    runs = (ssh_host.dir / "remote-home").resolve() / ".cache" / "vllm-bench" / "runs"
    return runs / scope_of(run_id, ssh_host.alias)


def _remove_left(run_id: str) -> None:
    left = _containers(run_id)
    if left:  # what the flow left behind must not outlive the test
        subprocess.run(["docker", "rm", "-f", *left], capture_output=True, check=False)


def test_server_container_dying_mid_sweep_brings_back_the_finished_cells(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"die-{uuid.uuid4().hex[:8]}"
    proc = _start(ssh_host, tmp_path, bench_image, run_id)
    seen = _until_first_cell(proc)
    (server,) = _containers(run_id, "label=org.vllm-bench.role=server")
    subprocess.run(["docker", "kill", server], check=True, capture_output=True)
    _, err = proc.communicate(timeout=600)
    err = seen + err
    assert proc.returncode == Exit.RUN_FAILED, err[-3000:]
    assert "Traceback" not in err, _around_traceback(err)
    assert "`bench run` on bench-test-host exited with" in err
    bundle = tmp_path / "results" / ssh_host.alias / run_id
    results = Results.model_validate_json((bundle / "results.json").read_text())
    assert results.cells and results.cells[0].status == "valid"
    assert (bundle / "INCOMPLETE").exists()
    verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
    assert _containers(run_id) == []


def test_ssh_dropped_mid_sweep_brings_back_the_cells_and_leaves_nothing(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"ssh-{uuid.uuid4().hex[:8]}"
    proc = _start(ssh_host, tmp_path, bench_image, run_id)
    seen = _until_first_cell(proc)
    assert ssh_host.drop_connections() >= 1
    try:
        _, err = proc.communicate(timeout=600)
        err = seen + err
        assert "Traceback" not in err, _around_traceback(err)
        # the sweep went on inside the container without us: every cell, a complete run
        assert proc.returncode == Exit.OK, err[-3000:]
        bundle = tmp_path / "results" / ssh_host.alias / run_id
        assert "reconnected; the sweep goes on inside the container" in err
        results = Results.model_validate_json((bundle / "results.json").read_text())
        assert len(results.cells) == 4 and results.state == "complete", results.cells
        assert not (bundle / "INCOMPLETE").exists()
        verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
        assert _containers(run_id) == []
    finally:
        _remove_left(run_id)


def test_ctrl_c_during_pull_back_stops_the_copy_marks_it_partial_and_leaves_nothing(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id, mark = f"pull-{uuid.uuid4().hex[:8]}", new_mark()
    proc = _start(ssh_host, tmp_path, bench_image, run_id, mark)
    try:
        seen = _until_first_cell(proc)
        # A bundle whose copy takes seconds, as a long sweep's samples.jsonl makes one: random
        # bytes (gzip cannot shrink them) added to the run directory while the sweep runs.
        # 384 MiB: with 128 the copy ended before the Ctrl-C, once, beside another xdist worker.
        with (_host_run_dir(ssh_host, run_id) / "padding.bin").open("wb") as fh:
            for _ in range(384):
                fh.write(os.urandom(1 << 20))
        seen += _until(proc, "] pull back ...")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: the whole group
        out, err = proc.communicate(timeout=600)
        err = seen + err
        assert proc.returncode == Exit.INTERRUPTED, err[-3000:]
        assert "Traceback" not in err, _around_traceback(err)
        assert "interrupted on bench-test-host while pulling back the bundle" in err, err[-3000:]
        assert "(an incomplete copy); the signed bundle stays on the host" in err
        assert " interrupted " in out  # the summary row
        local = tmp_path / "results" / ssh_host.alias
        archive = local / f"{run_id}.tar.gz"
        on_host = _host_run_dir(ssh_host, run_id).with_name(
            f"{scope_of(run_id, ssh_host.alias)}.tar.gz"
        )
        # Nothing local claims to be the bundle: only NAME.part, shorter than the bundle.
        assert not archive.exists() and not (local / run_id).exists()
        part = local / f"{run_id}.tar.gz.part"
        held = re.search(r"holds (\d+) of (\d+) bytes", err)
        assert held is not None, err[-3000:]
        assert int(held[1]) == part.stat().st_size < int(held[2]) == on_host.stat().st_size
        assert part.read_bytes() == on_host.read_bytes()[: int(held[1])]
        assert _containers(run_id) == []
        wait_no_survivors(mark)
        # The signed bundle on the host is whole: the command the message gives brings it back.
        hint = next(x for x in err.splitlines() if "copy it with: scp " in x)
        scp = hint.split("copy it with: ", 1)[1].split(";", 1)[0].split()
        assert scp == ["scp", f"{ssh_host.alias}:{on_host}", str(archive)]
        # (stock scp reads the config of the account's home, the tests' lives in $HOME)
        config = [
            "-F",
            str(ssh_host.ssh_config),
            "-o",
            f"UserKnownHostsFile={ssh_host.known_hosts}",
        ]
        subprocess.run([scp[0], *config, *scp[1:]], check=True, capture_output=True)
        verify_bundle(archive, tmp_path / "allowed_signers")
    finally:
        if proc.poll() is None:
            proc.kill()
        _remove_left(run_id)


def test_ssh_dropped_while_signing_and_again_after_reconnecting_is_signed_again(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"sign-{uuid.uuid4().hex[:8]}"
    proc = _start(ssh_host, tmp_path, bench_image, run_id)
    try:
        seen = _until(proc, "] sign ...")  # the sweep is over; the manifest helper starts
        assert ssh_host.drop_connections() >= 1
        seen += _until(proc, "reconnected; signing again")
        assert ssh_host.drop_connections() >= 1  # and again, right after the reconnect
        _, err = proc.communicate(timeout=600)
        err = seen + err
        assert proc.returncode == Exit.OK, err[-3000:]
        assert "Traceback" not in err, _around_traceback(err)
        assert err.count("reconnected; signing again") == 2, err[-3000:]
        bundle = tmp_path / "results" / ssh_host.alias / run_id
        results = Results.model_validate_json((bundle / "results.json").read_text())
        assert len(results.cells) == 4 and results.state == "complete", results.cells
        assert not (bundle / "INCOMPLETE").exists()
        # signed three times over the same run directory: one valid signature, every file listed
        verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
        assert _containers(run_id) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        _remove_left(run_id)


def _around_traceback(err: str) -> str:
    """ERR from a little before its first traceback: what the assertion shows."""
    return err[max(err.find("Traceback") - 400, 0) :][:4000]
