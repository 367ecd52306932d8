"""requirements/*.lock against pyproject.toml, and the .venv against requirements/dev.lock.

Offline and fast: the locks are parsed, not re-resolved (`make lock` does that).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
RUNTIME = ROOT / "requirements" / "runtime.lock"
DEV = ROOT / "requirements" / "dev.lock"
# The environment the locks are for (requirements/lock.sh).
MARKERS = {
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}


@dataclass
class Pin:
    version: str
    hashes: list[str] = field(default_factory=list)
    via: list[str] = field(default_factory=list)


def parse_lock(text: str) -> dict[str, Pin]:
    """pip-compile's output: `name==version \\`, its `--hash=` lines, its `# via` lines."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    in_via = False
    for line in text.splitlines():
        pinned = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if pinned:
            current = pins.setdefault(canonicalize_name(pinned[1]), Pin(pinned[2]))
            in_via = False
        elif current is not None and (h := re.match(r"^\s+--hash=(sha256:[0-9a-f]{64})", line)):
            current.hashes.append(h[1])
        elif current is not None and (v := re.match(r"^\s+# via ?(.*)$", line)):
            in_via = True
            if v[1]:
                current.via.append(v[1].strip())
        elif current is not None and in_via and (v := re.match(r"^\s+#   (.+)$", line)):
            current.via.append(v[1].strip())
        else:
            in_via = False
    return pins


def requirements(*, dev: bool) -> list[Requirement]:
    extras = PYPROJECT["project"]["optional-dependencies"]
    # The report and live extras too: the images make the report, and serve bench run's
    # live metrics, inside the container (lock.sh).
    names = (
        PYPROJECT["project"]["dependencies"]
        + extras["report"]
        + extras["live"]
        + PYPROJECT["build-system"]["requires"]
    )
    if dev:
        names = names + PYPROJECT["project"]["optional-dependencies"]["dev"]
    return [Requirement(r) for r in names]


def disagreements(pins: dict[str, Pin], wanted: list[Requirement]) -> list[str]:
    """Where a lock and pyproject.toml's requirements part ways, one line each."""
    out: list[str] = []
    direct = set()
    for req in wanted:
        if req.marker is not None and not req.marker.evaluate(MARKERS):
            continue
        name = canonicalize_name(req.name)
        direct.add(name)
        pin = pins.get(name)
        if pin is None:
            out.append(f"{req} is not in the lock")
        elif not req.specifier.contains(pin.version, prereleases=True):
            out.append(f"{req} is not satisfied by the locked {name}=={pin.version}")
    for locked, pin in sorted(pins.items()):
        if any(v.startswith("bench (pyproject.toml") for v in pin.via) and locked not in direct:
            out.append(
                f"{locked}=={pin.version} is locked as bench's own but pyproject.toml "
                "does not require it"
            )
        if not pin.hashes:
            out.append(f"{locked}=={pin.version} has no hash")
    return out


@pytest.mark.parametrize(("lock", "dev"), [(RUNTIME, False), (DEV, True)], ids=["runtime", "dev"])
def test_lock_agrees_with_pyproject(lock: Path, dev: bool) -> None:
    pins = parse_lock(lock.read_text(encoding="utf-8"))
    assert len(pins) > 20
    assert disagreements(pins, requirements(dev=dev)) == []
    # The pin-only header that `make lock` writes; no machine's paths or indexes.
    text = lock.read_text(encoding="utf-8")
    assert "#    make lock\n" in text
    assert "/work/" not in text and "--index-url" not in text and "--find-links" not in text


def test_runtime_lock_is_the_dev_lock_less_the_dev_tools() -> None:
    runtime = parse_lock(RUNTIME.read_text(encoding="utf-8"))
    dev = parse_lock(DEV.read_text(encoding="utf-8"))
    assert {n: p.version for n, p in runtime.items()} == {
        n: dev[n].version for n in runtime if n in dev
    }
    assert set(runtime) < set(dev)
    # Nothing of the dev extra reaches the images; the report's matplotlib does.
    for name in ("pytest", "mypy", "ruff", "pip-tools", "pandas"):
        assert name not in runtime and name in dev
    assert "matplotlib" in runtime
    assert {"opentelemetry-sdk", "prometheus-client"} <= set(runtime)


def test_a_pyproject_change_the_lock_lacks_is_caught() -> None:
    pins = parse_lock(RUNTIME.read_text(encoding="utf-8"))
    httpx = pins["httpx"].version
    wanted = [*requirements(dev=False), Requirement("rich>=13")]
    bumped = [Requirement(f"httpx>{httpx}") if r.name == "httpx" else r for r in wanted]
    assert disagreements(pins, bumped) == [
        f"httpx>{httpx} is not satisfied by the locked httpx=={httpx}",
        "rich>=13 is not in the lock",
    ]
    dropped = [r for r in requirements(dev=False) if r.name != "tabulate"]
    tab = pins["tabulate"].version
    assert disagreements(pins, dropped) == [
        f"tabulate=={tab} is locked as bench's own but pyproject.toml does not require it"
    ]


@pytest.mark.subprocess
def test_venv_holds_exactly_the_locked_versions() -> None:
    """`make setup` installs requirements/dev.lock and nothing else (bench itself aside)."""
    freeze = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    installed = {}
    for line in freeze.splitlines():
        name, eq, version = line.partition("==")
        assert eq, f"not a pinned release: {line}"
        installed[canonicalize_name(name)] = version
    locked = {n: p.version for n, p in parse_lock(DEV.read_text(encoding="utf-8")).items()}
    assert installed == locked
