"""Where a run happened: the server's launch, the image, the host, the GPUs, bench itself.

Secrets never reach environment.json: the value after a secret-looking flag (--api-key,
--hf-token, ...; every value up to the next flag, since vLLM's --api-key takes several),
`NAME=value` words and environment variables whose name contains KEY, TOKEN, SECRET or
PASSWORD, and passwords inside URLs are replaced by ********. Of the server's environment
only the families that change how it runs are kept (VLLM_, CUDA_, NCCL_, HF_, ...), so
that unrelated variables with innocent names but secret values stay out too.

When bench runs beside the server (inside its container), the launch argv is read from
/proc: the process listening on the server's port. Otherwise it is recorded as given.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import re
import socket
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from bench import __version__, run_files, writes
from bench.errors import BenchError
from bench.host import inventory
from bench.settings import Settings

ENVIRONMENT_NAME = run_files.ENVIRONMENT
ENVIRONMENT_SCHEMA_VERSION = 1
REDACTED = "********"
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
# --api-key, --hf-token, --secret, --db-password, --passwd: the last word of the flag names a
# secret. (--max-num-batched-tokens and --tokenizer do not: they end in other words.)
_SECRET_FLAG = re.compile(r"^--?(?:[A-Za-z0-9]+[-_])*(?:key|token|secret|password|passwd)$", re.I)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?=@)")
KEPT_ENV_PREFIXES = (
    "VLLM_", "CUDA_", "NCCL_", "NVIDIA_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TORCH",
    "PYTORCH_", "OMP_", "MKL_", "TOKENIZERS_", "TRITON_", "BENCH_",
)  # fmt: skip
_TCP_LISTEN = "0A"


class _EnvironmentModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Launch(_EnvironmentModel):
    source: Literal["proc", "given", "unknown"]
    pid: int | None = None
    argv: tuple[str, ...] = ()
    env: dict[str, str] = {}
    note: str | None = None


class Image(_EnvironmentModel):
    in_container: bool
    digest: str | None = None
    labels: dict[str, str] = {}
    # What the image's build-time self-test found (docker/image_selftest.py): torch's CUDA,
    # nvcc, FlashInfer's version and whether vLLM's sampler JIT-compiles with it. None when
    # the run is not inside one of our images.
    selftest: dict[str, object] | None = None


SELFTEST_FILE = Path("opt/bench/image.json")  # under the root; written by the image build
_SELFTEST_MAX_BYTES = 64 * 1024


class HostInfo(_EnvironmentModel):
    hostname: str
    os: str | None
    kernel: str
    machine: str
    cpu_model: str | None
    cpu_count: int | None
    memory_total_bytes: int | None
    python: str


class BenchInfo(_EnvironmentModel):
    version: str
    settings: dict[str, Any]
    # The Python that ran bench, name -> version. Inside the server's image that is the
    # image's own set; for the twin (which runs in this Python) it is the server's freeze.
    packages: dict[str, str] = {}


class ServerStart(_EnvironmentModel):
    ready_after_s: float
    jit_cache_was_empty: bool | None = None


class WeightsInfo(_EnvironmentModel):
    """The model's weights as loaded: the hub revision and the sha256 of every file.
    `model` None: the launch loads no weights (the twin), with `note` saying so."""

    model: str | None = None
    revision: str | None = None
    pinned: bool | None = None
    files: dict[str, str] = {}
    note: str | None = None


class Environment(_EnvironmentModel):
    schema_version: int = ENVIRONMENT_SCHEMA_VERSION
    captured_at: datetime
    launch: Launch
    image: Image
    host: HostInfo
    vllm_version: str | None
    gpu: inventory.GpuInventory
    bench: BenchInfo
    # Filled by the orchestrator, which sees the container start: seconds from the
    # container's start to ready, and whether the JIT caches were empty (a first start
    # on this host compiles; later ones load). None when bench ran without it.
    server_start: ServerStart | None = None
    # Filled by the orchestrator after the weights step (provisioning.image.weights).
    weights: WeightsInfo | None = None


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS)


def _redact_urls(text: str) -> str:
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)


def redact_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    in_secret = False
    for word in argv:
        is_flag = word.startswith("-") and len(word) > 1
        if in_secret and not is_flag:
            out.append(REDACTED)
            continue
        in_secret = False
        if is_flag:
            name, eq, _ = word.partition("=")
            if _SECRET_FLAG.match(name):
                out.append(f"{name}={REDACTED}" if eq else word)
                in_secret = not eq
                continue
        elif (m := _ASSIGNMENT.match(word)) and is_secret_name(m.group(1)):
            out.append(f"{m.group(1)}={REDACTED}")
            continue
        out.append(_redact_urls(word))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    kept = {k: v for k, v in env.items() if k.startswith(KEPT_ENV_PREFIXES)}
    return {
        k: (REDACTED if is_secret_name(k) else _redact_urls(v)) for k, v in sorted(kept.items())
    }


def redact_settings(tree: Any, key: str = "") -> Any:
    """Resolved settings as recorded: every secret-named or SecretStr value as ********."""
    if isinstance(tree, dict):
        return {k: redact_settings(v, str(k)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [redact_settings(v, key) for v in tree]
    if tree is not None and (is_secret_name(key) or tree == "**********"):
        return REDACTED
    return tree


def listening_pid(port: int, proc: Path = Path("/proc")) -> int | None:
    """The process holding a listening TCP socket on `port` (this network namespace)."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in inodes:
                    return int(entry.name)
            except OSError:
                continue
    return None


def _listening_inodes(port: int, proc: Path) -> set[str]:
    """The sockets listening on TCP `port`, as /proc/PID/fd links name them."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    return inodes


def _nul_split(raw: bytes) -> list[str]:
    return [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]


def launch_from_proc(pid: int, proc: Path = Path("/proc")) -> Launch:
    argv = _nul_split((proc / str(pid) / "cmdline").read_bytes())
    note = None
    try:
        env = dict(
            w.split("=", 1)
            for w in _nul_split((proc / str(pid) / "environ").read_bytes())
            if "=" in w
        )
    except OSError:
        env, note = {}, "the server's environment was not readable"
    return Launch(
        source="proc", pid=pid, argv=tuple(redact_argv(argv)), env=redact_env(env), note=note
    )


def launch_given(argv: Sequence[str] | None) -> Launch:
    if not argv:
        return Launch(source="unknown", note="bench did not run beside the server; none given")
    return Launch(source="given", argv=tuple(redact_argv(argv)))


def image_info(root: Path, digest: str | None, labels_file: Path | None) -> Image:
    cgroup = ""
    with contextlib.suppress(OSError):
        cgroup = (root / "proc" / "1" / "cgroup").read_text()
    in_container = (
        (root / ".dockerenv").exists()
        or (root / "run" / ".containerenv").exists()
        or any(word in cgroup for word in ("docker", "containerd", "kubepods", "libpod"))
    )
    labels: dict[str, str] = {}
    if labels_file is not None and labels_file.is_file():
        try:
            raw = json.loads(labels_file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            raw = {}
        if isinstance(raw, dict):
            labels = {str(k): str(v) for k, v in raw.items()}
    return Image(in_container=in_container, digest=digest, labels=labels, selftest=_selftest(root))


def _selftest(root: Path) -> dict[str, object] | None:
    path = root / SELFTEST_FILE
    try:
        if not path.is_file() or path.stat().st_size > _SELFTEST_MAX_BYTES:
            return None
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return raw if isinstance(raw, dict) else None


def python_packages() -> dict[str, str]:
    """Every distribution installed in this Python, lower-cased name -> version (sorted)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[str(name).lower()] = str(dist.version)
    return dict(sorted(found.items()))


TWIN_WEIGHTS = WeightsInfo(note="not applicable: the twin loads no weights")


def _first_match(path: Path, pattern: str) -> str | None:
    try:
        found = re.search(pattern, path.read_text(), re.M)
    except OSError:
        return None
    return found.group(1).strip() if found else None


def host_info(root: Path = Path("/")) -> HostInfo:
    mem_kib = _first_match(root / "proc" / "meminfo", r"^MemTotal:\s+(\d+) kB")
    os_name = _first_match(root / "etc" / "os-release", r'^PRETTY_NAME="?([^"\n]*)"?')
    uname = platform.uname()
    return HostInfo(
        hostname=socket.gethostname(),
        os=os_name,
        kernel=uname.release,
        machine=uname.machine,
        cpu_model=_first_match(root / "proc" / "cpuinfo", r"^model name\s*:\s*(.+)$"),
        cpu_count=os.cpu_count(),
        memory_total_bytes=int(mem_kib) * 1024 if mem_kib else None,
        python=sys.version.split()[0],
    )


def capture(
    settings: Settings,
    *,
    now: datetime,
    server_port: int | None = None,
    server_pid: int | None = None,
    given_argv: Sequence[str] | None = None,
    vllm_version: str | None = None,
    image_digest: str | None = None,
    image_labels_file: Path | None = None,
    gpu_inventory: inventory.GpuInventory | None = None,
    root: Path = Path("/"),
    twin: bool = False,
) -> Environment:
    proc = root / "proc"
    pid = server_pid
    if pid is None and server_port is not None and given_argv is None:
        pid = listening_pid(server_port, proc)
    try:
        launch = launch_from_proc(pid, proc) if pid is not None else launch_given(given_argv)
    except OSError:
        launch = launch_given(given_argv)
    return Environment(
        captured_at=now,
        launch=launch,
        image=image_info(root, image_digest, image_labels_file),
        host=host_info(root),
        vllm_version=vllm_version,
        gpu=gpu_inventory if gpu_inventory is not None else inventory.inventory(),
        bench=BenchInfo(
            version=__version__,
            settings=redact_settings(settings.redacted()),
            packages=python_packages(),
        ),
        weights=TWIN_WEIGHTS if twin else None,
    )


def local_port(url: str) -> int | None:
    """The port of a server on this machine (its launch can be read from /proc), else None."""
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def write(run_dir: Path, env: Environment) -> Path:
    path = run_dir / ENVIRONMENT_NAME
    writes.write_atomic(path, env.model_dump_json(indent=2) + "\n")
    return path


def _server_of(run_dir: Path) -> dict[str, Any]:
    """results.json's `server` as `bench run` recorded it, or {} (read as plain JSON: any
    bench's results.json will do)."""
    try:
        doc = run_files.read_json(run_dir / run_files.RESULTS)
    except BenchError:
        return {}
    server = doc.get("server") if isinstance(doc, dict) else None
    return server if isinstance(server, dict) else {}


def server_version_of(run_dir: Path) -> str | None:
    """The server's /version as `bench run` recorded it in results.json, if it did."""
    version = _server_of(run_dir).get("version")
    return version if isinstance(version, str) else None


def server_is_twin(run_dir: Path) -> bool:
    """Did `bench run` measure the twin (its /version names it)?"""
    payload = _server_of(run_dir).get("version_payload")
    return isinstance(payload, dict) and "twin" in payload


def launch_argv_of(run_dir: Path) -> tuple[str, ...]:
    """The server's launch argv as environment.json recorded it, or () (none recorded, or
    not readable: read as plain JSON, every word a string)."""
    try:
        doc = run_files.read_json(run_dir / ENVIRONMENT_NAME)
    except BenchError:
        return ()
    launch = doc.get("launch") if isinstance(doc, dict) else None
    argv = launch.get("argv") if isinstance(launch, dict) else None
    if not isinstance(argv, list) or not all(isinstance(w, str) for w in argv):
        return ()
    return tuple(argv)
