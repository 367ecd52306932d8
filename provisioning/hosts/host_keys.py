"""The host's SSH key: checked against the known_hosts files `ssh -G` names for the host,
never accepted when it changed, and recorded only when the user says so.

An unknown key is refused with its fingerprint and the exact known_hosts line that would
trust it, unless the caller passed trust_new_host: then HostKeyDecision records it in the
first user known_hosts file. A changed key is refused with both fingerprints (key_changed).
"""

from __future__ import annotations

import base64
import hashlib
import shlex
from pathlib import Path

import paramiko
import structlog

from bench.errors import HostCheckFailed
from provisioning.hosts.inventory import ResolvedHost

log = structlog.get_logger("provisioning.host_keys")


class UnknownHostKey(HostCheckFailed):
    pass


class HostKeyChanged(HostCheckFailed):
    pass


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint (as `ssh-keygen -lf` prints it)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _known_hosts_line(name: str, key: paramiko.PKey) -> str:
    return f"{name} {key.get_name()} {key.get_base64()}"


class HostKeyDecision(paramiko.MissingHostKeyPolicy):
    """Refuse an unknown key with what the user needs to decide, or record it when told to."""

    def __init__(self, host: ResolvedHost, trust_new_host: bool) -> None:
        self._host = host
        self._trust = trust_new_host
        self.trusted: str | None = None

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        line = _known_hosts_line(hostname, key)
        target = learn_file(self._host)
        if not self._trust:
            raise UnknownHostKey(
                f"host key of {self._host.name} ({hostname}) is not known: "
                f"{key.get_name()} {fingerprint(key)}",
                hint=(
                    "confirm that fingerprint with the host's owner, then trust it with: "
                    f"echo {shlex.quote(line)} >> {shlex.quote(str(target))} "
                    "(or rerun with --trust-new-host)"
                ),
            )
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with target.open("a") as fh:
            fh.write(line + "\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.trusted = fingerprint(key)
        log.warning(
            "host_key_trusted", host=self._host.name, fingerprint=self.trusted, file=str(target)
        )


def learn_file(host: ResolvedHost) -> Path:
    user_files = [p for p in host.known_hosts_files if not str(p).startswith("/etc/")]
    return user_files[0] if user_files else Path.home() / ".ssh" / "known_hosts"


def key_changed(host: ResolvedHost, exc: paramiko.BadHostKeyException) -> HostKeyChanged:
    """The refusal of a key that differs from the known one (both fingerprints, the fix)."""
    return HostKeyChanged(
        f"host key of {host.name} ({host.known_hosts_name}) has CHANGED: "
        f"known {exc.expected_key.get_name()} {fingerprint(exc.expected_key)}, "
        f"offered {exc.key.get_name()} {fingerprint(exc.key)}",
        hint=(
            "this can be an attack; if the host was reinstalled, confirm the new key with "
            f"its owner, then remove the old one: ssh-keygen -R "
            f"{shlex.quote(host.known_hosts_name)}"
        ),
    )
