"""The host's bundle-signing key: made on the host at first provisioning, never leaving it.

The private half stays in ~/.config/vllm-bench/ on the GPU host (0600, owned by the SSH
user); bundles are signed there with the host's own `ssh-keygen -Y sign`. The public half
is added to the local allowed-signers file, principal `vllm-bench@<host name>`, limited to
the bundle namespace, so `bench verify` accepts bundles from that host and no other use
of the key.

The same key signs the bundle's attestation.intoto.json, and that too on the host. ssh-keygen
cannot make it (an ed25519 signature over DSSE's encoding, not SSHSIG's: the two never
verify as each other), and the host has no bench of its own, so `bench attest` runs in a
short-lived helper container of the run's image on that host (provisioning.flow.sealing):
the key file bind-mounted read-only at KEY_IN_CONTAINER, the container running as the SSH
user who owns the file, whose 0600 it keeps. The key is never copied, sent over the
connection, put in an image, an environment variable, a log or a command line (only its
path is): the host's Docker engine lends that one container the host's file, as ssh-keygen
reads it, and the container is removed with the run's others.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import structlog

from bench.bundle.sign import NAMESPACE
from bench.errors import ToolMissing
from provisioning.hosts.shell import Shell

log = structlog.get_logger("provisioning.signing")

KEY_DIR = ".config/vllm-bench"
KEY_NAME = "signing_ed25519"
# Where a helper container sees the host's key file (read-only) to sign the attestation.
KEY_IN_CONTAINER = f"/run/secrets/{KEY_NAME}"


def default_allowed_signers() -> Path:
    return Path.home() / ".config" / "vllm-bench" / "allowed_signers"


def principal(host_name: str) -> str:
    return f"vllm-bench@{host_name}"


def ensure_host_key(remote: Shell, home: str, *, key_dir: str = KEY_DIR) -> tuple[str, str]:
    """(private key path on the host, public key line); makes the key when absent.

    KEY_DIR (under HOME) is where it lives: a Slurm node, whose home is often shared with
    every other node, keeps its own under KEY_DIR/nodes/<node> (provisioning.slurm.node).
    """
    key = f"{home}/{key_dir}/{KEY_NAME}"
    q = shlex.quote(key)
    if not remote.run("command -v ssh-keygen").ok:
        raise ToolMissing(
            f"{remote.host.name} has no ssh-keygen to sign bundles with",
            hint="install OpenSSH's client tools on the host (apt-get install openssh-client)",
        )
    key_dir_q = shlex.quote(f"{home}/{key_dir}")
    # Under a lock: two runs reaching one host (two names for it) must not both make the key
    # (the second ssh-keygen would wait for an answer to "Overwrite (y/n)?").
    made = remote.run(
        f"mkdir -p -m 700 {key_dir_q} && ( flock 9 && {{ test -f {q} || {{ "
        f"ssh-keygen -q -t ed25519 -N '' -C {shlex.quote(principal(remote.host.name))} -f {q} "
        f"&& echo made; }}; }} ) 9>{key_dir_q}/.keygen.lock",
        check=True,
    )
    if "made" in made.stdout:
        log.info("host_signing_key_created", host=remote.host.name, path=key)
    public = remote.run(f"cat {q}.pub", check=True).stdout.strip()
    return key, public


def trust_locally(public_line: str, host_name: str, allowed_signers: Path) -> bool:
    """Add the host's key to allowed-signers (bundle namespace only); True when added."""
    fields = public_line.split()
    line = f'{principal(host_name)} namespaces="{NAMESPACE}" {fields[0]} {fields[1]}'
    existing = allowed_signers.read_text().splitlines() if allowed_signers.exists() else []
    if line in existing:
        return False
    if any(e.split()[:1] == [principal(host_name)] for e in existing):
        log.warning("host_signing_key_changed", host=host_name, file=str(allowed_signers))
    allowed_signers.parent.mkdir(parents=True, exist_ok=True)
    with allowed_signers.open("a") as fh:
        fh.write(line + "\n")
    log.info("host_signing_key_trusted", host=host_name, file=str(allowed_signers))
    return True


def sign_on_host(remote: Shell, key: str, manifest: str) -> None:
    """`ssh-keygen -Y sign` on the host: writes MANIFEST.sig beside it.

    One command, so that rerunning it after a dropped connection is safe: ssh-keygen
    refuses to overwrite a signature an interrupted first run may have written.
    """
    remote.run(
        f"rm -f {shlex.quote(manifest + '.sig')} && "
        f"ssh-keygen -Y sign -q -f {shlex.quote(key)} -n {shlex.quote(NAMESPACE)} "
        f"{shlex.quote(manifest)}",
        check=True,
    )
