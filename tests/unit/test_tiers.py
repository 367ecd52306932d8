"""The test tiers of tests/conftest.py: the unit tier's guard catches sockets and processes
(also when the code swallows the error, also from a thread), the Makefile's `make unit` runs
the expression the guard assumes, and every test's environment is its own."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from tests.conftest import (
    _GUARD,
    _GUARDED,
    REAL_HOME,
    REAL_PROCESS_MARKERS,
    UNIT_MARKEXPR,
    RealProcessInUnitTier,
    _Guard,
    _guarded,
    guard_on,
    is_secret,
    isolate,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_socket_to_loopback_is_refused_before_it_connects_and_named() -> None:
    with guard_on() as caught, socket.socket() as sock:
        with pytest.raises(RealProcessInUnitTier, match="mark it"):
            sock.connect(("127.0.0.1", 9))
        with pytest.raises(OSError, match="not connected"):  # never connected
            sock.getpeername()
    assert caught == ["socket.connect to ('127.0.0.1', 9)"]


def test_a_name_lookup_is_refused() -> None:
    with guard_on() as caught, pytest.raises(RealProcessInUnitTier):
        socket.getaddrinfo("localhost", 8000)
    assert caught == ["socket.getaddrinfo of ('localhost', 8000)"]


def test_a_listening_socket_is_refused() -> None:
    with guard_on() as caught, socket.socket() as sock:
        with pytest.raises(RealProcessInUnitTier):
            sock.bind(("127.0.0.1", 0))
        assert sock.getsockname()[1] == 0  # never bound
    assert caught == ["socket.bind to ('127.0.0.1', 0)"]


def test_a_subprocess_is_refused_before_it_starts(tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    with guard_on() as caught, pytest.raises(RealProcessInUnitTier):
        subprocess.run(["touch", str(canary)], check=False)
    with guard_on() as by_shell, pytest.raises(RealProcessInUnitTier):
        os.system(f"touch {canary}")
    assert not canary.exists()
    assert caught == [f"subprocess.Popen ['touch', '{canary}']"]
    assert by_shell == [f"os.system (b'touch {canary}',)"]  # the command as bytes


def test_what_a_thread_does_is_caught_even_when_swallowed() -> None:
    def swallow() -> None:
        with contextlib.suppress(Exception):  # the code under test may catch anything
            subprocess.run(["true"], check=False)

    with guard_on() as caught:
        t = threading.Thread(target=swallow)
        t.start()
        t.join()
    assert caught == ["subprocess.Popen ['true']"]


def test_off_the_guard_lets_everything_through_and_nesting_restores_the_outer_state() -> None:
    guard = _Guard()
    popen = ("true", ["true"], None, None)
    guard.hook("subprocess.Popen", popen)  # off: no exception
    assert guard.caught == []
    guard.active = True
    guard.hook("open", ("/etc/hosts", "r", 0))  # not watched
    with pytest.raises(RealProcessInUnitTier):
        guard.hook("subprocess.Popen", popen)
    assert guard.caught == ["subprocess.Popen ['true']"]
    with guard_on() as outer:
        with guard_on() as inner, pytest.raises(RealProcessInUnitTier):
            subprocess.run(["true"], check=False)
        assert inner and not outer  # the inner catch is not the outer phase's


def test_a_swallowed_violation_still_fails_the_phase_with_the_marker_to_add() -> None:
    item = cast(
        pytest.Item,
        SimpleNamespace(config=SimpleNamespace(stash={_GUARDED: True}), nodeid="tests/x.py::t"),
    )
    phase = _guarded(item, "call")
    next(phase)  # the hook wrapper before the test runs
    with contextlib.suppress(RealProcessInUnitTier):
        subprocess.run(["true"], check=False)
    with pytest.raises(pytest.fail.Exception) as failed:
        phase.send(None)
    text = str(failed.value)
    assert text.startswith(
        "tests/x.py::t (call) in the unit tier did:\n  subprocess.Popen ['true']"
    )
    assert "pytestmark = pytest.mark.subprocess" in text


def test_an_unguarded_session_leaves_the_guard_as_it_is() -> None:
    item = cast(pytest.Item, SimpleNamespace(config=SimpleNamespace(stash={}), nodeid="t"))
    before = (_GUARD.active, _GUARD.caught)
    phase = _guarded(item, "call")
    next(phase)
    assert (_GUARD.active, _GUARD.caught) == before and _GUARD.caught is before[1]
    with pytest.raises(StopIteration):
        phase.send(None)


def test_make_unit_deselects_exactly_the_registered_real_process_markers() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    expr = re.search(r"^UNIT_MARKEXPR := (.+)$", makefile, re.MULTILINE)
    assert expr is not None and expr.group(1) == UNIT_MARKEXPR
    assert "-m '$(UNIT_MARKEXPR)'" in makefile
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    registered = {m.split(":")[0] for m in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(REAL_PROCESS_MARKERS) <= registered


def test_each_test_has_its_own_empty_home_and_no_secrets() -> None:
    home = Path.home()
    assert home != REAL_HOME and os.environ["HOME"] == str(home)
    assert list(home.iterdir()) == []
    assert [n for n in os.environ if is_secret(n)] == []


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("BENCH_API_KEY", True),
        ("BENCH_LOG_FORMAT", True),
        ("BENCH_VLLM_CPU_HOME", False),
        ("VLLM_API_KEY", True),
        ("HF_TOKEN", True),
        ("GITHUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", False),
        ("DB_PASSWORD", True),
        ("SSH_AUTH_SOCK", True),
        ("PATH", False),
        ("DOCKER_CONFIG", False),
    ],
)
def test_what_counts_as_a_secret(name: str, secret: bool) -> None:
    assert is_secret(name) is secret


def test_isolate_takes_secrets_out_keeps_the_knobs_and_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BENCH_API_KEY", "sk-live")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    monkeypatch.setenv("BENCH_VLLM_CPU_HOME", "/opt/vllm-cpu")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/root/.config")
    isolate(monkeypatch, tmp_path)
    assert "BENCH_API_KEY" not in os.environ and "HF_TOKEN" not in os.environ
    assert "XDG_CONFIG_HOME" not in os.environ
    assert os.environ["BENCH_VLLM_CPU_HOME"] == "/opt/vllm-cpu"
    assert Path.home() == tmp_path
    assert os.environ["XDG_CACHE_HOME"] != str(tmp_path / ".cache")


_IDS_PLUGIN = """
import os, pytest
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    out = os.environ["IDS_OUT"] + "-" + os.environ.get("PYTEST_XDIST_WORKER", "none")
    with open(out, "w") as f:
        f.write("\\n".join(i.nodeid for i in items))
    items.clear()  # the node ids are the finding: nothing runs
"""


@pytest.mark.subprocess
def test_side_by_side_every_test_of_a_group_carries_it_in_its_node_id(tmp_path: Path) -> None:
    """--dist loadgroup's scheduler keeps a work unit on one worker only when the node id ends
    in "@group" (tests/conftest.py, group_in_node_id): with pytest-xdist 3.8's own write, which
    pytest 9.2 ignores, the vllm tests were split over both workers. The workers' node ids
    are read after every other hook, and nothing runs."""
    (tmp_path / "idsplugin.py").write_text(_IDS_PLUGIN)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "IDS_OUT": str(tmp_path / "ids")}
    done = subprocess.run(
        # its own basetemp: pytest keeps only the 3 newest numbered ones, the outer run's too
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "idsplugin", "-n", "2",
         "--basetemp", str(tmp_path / "t"),
         "--dist", "loadgroup", "-q", "tests/verdict_live", "tests/vllm/test_answers_vllm.py",
         "tests/twin/test_keeps_up.py", "tests/twin/test_arrival.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 5, done.stdout[-2000:] + done.stderr[-2000:]  # 5: no tests ran
    for worker in ("gw0", "gw1"):
        ids = (tmp_path / f"ids-{worker}").read_text().splitlines()
        vllm = [i for i in ids if "verdict_live" in i or "_vllm" in i or "test_keeps_up" in i]
        assert len(vllm) >= 4 and all(i.endswith("@vllm") for i in vllm), ids  # timed: too
        assert vllm == ids[: len(vllm)]  # the longest group goes out first
        assert not any("@" in i for i in ids if "test_arrival" in i), ids
