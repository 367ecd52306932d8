"""GPU hosts: names resolved the way `ssh` resolves them, plus an optional inventory.

A host name is whatever the user would type after `ssh`: an alias from ~/.ssh/config
(Include, Match and wildcards included) or a plain hostname. OpenSSH itself resolves it
(`ssh -G`), so HostName, User, Port, IdentityFile, ProxyJump and known_hosts locations are
exactly what `ssh NAME` would use. An inventory file (hosts.toml) may add, per host:
user, port, key (they win over ssh_config, like ssh's command-line options do), the
launch profile to run, and the model cache path on the host:

    [hosts.gpu01]
    user = "bench"
    port = 2222
    key = "~/.ssh/gpu01_ed25519"
    profile = "qwen3.5-397b-a17b-int4-4x-rtxpro6000"
    model_cache = "/data/hf"

and, per Slurm cluster (`--cluster NAME`, docs/fleet.md "Slurm"): the partition, account,
login node (an ssh name as above; none: this machine), the shared folder for run
directories, this project's checkout on it, and the container runtime of its nodes
(`docker`; `pyxis` is named for the design but not built):

    [clusters.hpc]
    partition = "gpu"
    account = "proj7"
    login = "login01"
    shared_dir = "/shared/me/bench-runs"
    checkout = "/shared/me/vllm-bench"
    runtime = "docker"

`~` means Path.home() (the HOME variable), also in paths that `ssh -G` expanded from
the password database, so a temporary HOME isolates tests and scripts completely.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.errors import ToolMissing, UsageError, validation_message

DEFAULT_MODEL_CACHE = "~/.cache/huggingface"


class InventoryEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    hostname: str | None = None
    user: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    key: str | None = None
    profile: str | None = None
    model_cache: str | None = None


class ClusterEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: str | None = None
    account: str | None = None
    login: str | None = None
    shared_dir: str | None = None
    checkout: str | None = None
    runtime: Literal["docker", "pyxis"] = "docker"


class Inventory(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    hosts: dict[str, InventoryEntry] = Field(default_factory=dict)
    clusters: dict[str, ClusterEntry] = Field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedHost:
    """One GPU host as the orchestrator connects to it."""

    name: str  # what the user typed (alias or hostname); names results/<name>/
    hostname: str
    user: str
    port: int
    identity_files: tuple[Path, ...] = ()
    known_hosts_files: tuple[Path, ...] = ()
    host_key_alias: str | None = None
    proxy_command: str | None = None
    profile: str | None = None
    model_cache: str = DEFAULT_MODEL_CACHE
    connect_timeout_s: float = 15.0

    @property
    def known_hosts_name(self) -> str:
        """The name its key is filed under in known_hosts, as OpenSSH writes it."""
        name = self.host_key_alias or self.hostname
        return name if self.port == 22 and not self.host_key_alias else f"[{name}]:{self.port}"

    @property
    def address(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=30)


def load_inventory(path: Path | None) -> Inventory:
    """Read hosts.toml; no file (None or absent default) means an empty inventory."""
    if path is None or not path.exists():
        return Inventory()
    try:
        data = tomllib.loads(path.read_text())
        return Inventory.model_validate(data)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}", hint="fix the inventory file") from None
    except ValidationError as exc:
        raise UsageError(
            f"{path}: {validation_message(exc)}",
            hint="allowed per host: hostname, user, port, key, profile, model_cache; per "
            "cluster: partition, account, login, shared_dir, checkout, runtime",
        ) from None


def _home_path(value: str) -> Path:
    """`~` → Path.home(); paths ssh expanded from the password database are rebased too."""
    if value.startswith("~"):
        return Path.home() / value[1:].lstrip("/")
    pw_home = pwd.getpwuid(os.getuid()).pw_dir.rstrip("/")
    home = str(Path.home())
    if pw_home != home and (value == pw_home or value.startswith(pw_home + "/")):
        return Path(home + value[len(pw_home) :])
    return Path(value)


def parse_ssh_g(output: str) -> dict[str, list[str]]:
    """`ssh -G` prints one `keyword value` per line; some keywords repeat (identityfile)."""
    out: dict[str, list[str]] = {}
    for line in output.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out.setdefault(key.lower(), []).append(value.strip())
    return out


def _proxy_from_jump(jump: str, hostname: str, port: int) -> str:
    hops = [h for h in jump.split(",") if h]
    via = f" -J {','.join(hops[:-1])}" if len(hops) > 1 else ""
    return f"ssh{via} -W [{hostname}]:{port} {hops[-1]}"


_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def valid_hostname(host: str) -> bool:
    """An IP address, or dot-separated labels (`a..b` made the resolver raise UnicodeError)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        pass
    labels = host.removesuffix(".").split(".")
    return 0 < len(host) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def resolve(
    name: str,
    *,
    inventory: Inventory | None = None,
    ssh_config: Path | None = None,
    run: Runner = _run,
) -> ResolvedHost:
    """Resolve NAME as `ssh NAME` would, then apply the inventory's entry for it."""
    if not name or name.startswith("-") or any(c.isspace() for c in name):
        raise UsageError(f"host name {name!r} is not valid", hint="give an ssh alias or hostname")
    if shutil.which("ssh") is None:
        raise ToolMissing(
            "the OpenSSH client (ssh) is not installed",
            hint="install it (Debian/Ubuntu: apt-get install openssh-client)",
        )
    config = ssh_config if ssh_config is not None else Path.home() / ".ssh" / "config"
    argv = ["ssh", "-G"]
    if config.exists():
        argv += ["-F", str(config)]
    entry = (inventory or Inventory()).hosts.get(name, InventoryEntry())
    target = entry.hostname or name
    proc = run([*argv, "--", target])
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"ssh could not resolve host {name!r}: {detail}", hint=f"check {config}")
    opts = parse_ssh_g(proc.stdout)

    def one(key: str, default: str = "") -> str:
        values = opts.get(key)
        return values[0] if values else default

    hostname = one("hostname", target)
    if not valid_hostname(hostname) and not (one("proxycommand") or one("proxyjump")):
        raise UsageError(
            f"host {name!r} is not a valid host name ({hostname[:80]!r})",
            hint="a host name is dot-separated labels of letters, digits and '-' "
            "(or an ssh alias with a HostName)",
        )
    port = entry.port or int(one("port", "22"))
    user = entry.user or one("user") or pwd.getpwuid(os.getuid()).pw_name
    if entry.key:
        identities: tuple[Path, ...] = (_home_path(entry.key),)
    else:
        found = (_home_path(v) for v in opts.get("identityfile", []))
        identities = tuple(p for p in found if p.exists())
    known = [
        _home_path(p)
        for key in ("userknownhostsfile",)
        for v in opts.get(key, [])
        for p in v.split()
    ]
    known += [Path(p) for v in opts.get("globalknownhostsfile", []) for p in v.split()]
    alias = one("hostkeyalias") or None
    proxy = one("proxycommand")
    jump = one("proxyjump")
    proxy_command: str | None = None
    if proxy and proxy.lower() != "none":
        proxy_command = proxy.replace("%h", hostname).replace("%p", str(port)).replace("%r", user)
    elif jump and jump.lower() != "none":
        proxy_command = _proxy_from_jump(jump, hostname, port)
    timeout = one("connecttimeout", "none")
    return ResolvedHost(
        name=name,
        hostname=hostname,
        user=user,
        port=port,
        identity_files=identities,
        known_hosts_files=tuple(known),
        host_key_alias=alias,
        proxy_command=proxy_command,
        profile=entry.profile,
        model_cache=entry.model_cache or DEFAULT_MODEL_CACHE,
        connect_timeout_s=float(timeout) if timeout.isdigit() else 15.0,
    )


def parse_host_list(value: str) -> list[str]:
    """HOST=gpu01,gpu02 → ["gpu01", "gpu02"], duplicates refused."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise UsageError("no host given", hint="HOST=gpu01 or HOST=gpu01,gpu02")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"host listed twice: {', '.join(dupes)}", hint="name each host once")
    return names
