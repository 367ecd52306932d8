"""OpenSSH signatures over a bundle's manifest: the one module that runs `ssh-keygen -Y`.

The signature is what `ssh-keygen -Y sign` writes (the SSHSIG format), made in a namespace
that belongs to this product, so a signature made for anything else (git commits, e-mail)
cannot be replayed onto a bundle. Anyone can check one with stock OpenSSH:

    ssh-keygen -Y verify -f allowed_signers -I PRINCIPAL -n NAMESPACE \
        -s manifest.json.sig < manifest.json

Private keys are only ever passed as a path; ssh-keygen reads them itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.errors import ToolMissing, UsageError, VerifyFailed

NAMESPACE = "vllm-bench-bundle@v1"
_ARMOR_BEGIN = "-----BEGIN SSH SIGNATURE-----"
_ARMOR_END = "-----END SSH SIGNATURE-----"
_MAGIC = b"SSHSIG"
_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SignatureInfo:
    """What the signature file says about itself, read without trusting it."""

    namespace: str
    key_type: str
    fingerprint: str  # SHA256:... as ssh-keygen -l prints it
    public_key: str  # "ssh-ed25519 AAAA..."


@dataclass(frozen=True)
class Signer:
    principal: str
    key_type: str
    fingerprint: str


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise ToolMissing(
            "ssh-keygen is not installed",
            hint="install OpenSSH (Debian: apt-get install openssh-client)",
        )
    return found


def require_ssh_keygen() -> str:
    """ssh-keygen's path, or a one-line ToolMissing (exit 7) saying how to install it."""
    return _ssh_keygen()


def _run(argv: list[str], *, stdin_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    if stdin_path is None:
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    with stdin_path.open("rb") as fh:
        return subprocess.run(
            argv, stdin=fh, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "no message"


def keygen(path: Path, *, comment: str) -> Path:
    """A new ed25519 key without passphrase at `path` (0600) and `path`.pub; returns the .pub."""
    if path.exists() or path.with_name(path.name + ".pub").exists():
        raise UsageError(f"{path}: already exists", hint="choose another path or remove it")
    path.parent.mkdir(parents=True, exist_ok=True)
    result = _run([_ssh_keygen(), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    if result.returncode != 0:
        raise UsageError(f"{path}: ssh-keygen could not make a key: {_first_line(result.stderr)}")
    path.chmod(0o600)
    return path.with_name(path.name + ".pub")


def allowed_signers_line(public_key_path: Path, principal: str) -> str:
    """One allowed-signers line that trusts this key for bundles only."""
    fields = public_key_path.read_text(encoding="utf-8").split()
    if len(fields) < 2:
        raise UsageError(f"{public_key_path}: not an OpenSSH public key")
    return f'{principal} namespaces="{NAMESPACE}" {fields[0]} {fields[1]}'


def check_private_key(path: Path) -> None:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UsageError(f"{path}: no such key", hint="make one with `bench keygen`") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{path}: not a key file")
    if mode & 0o077:
        raise UsageError(
            f"{path}: permissions {stat.S_IMODE(mode):04o} let others read the private key",
            hint=f"chmod 600 {path}",
        )


def sign(path: Path, key: Path) -> Path:
    """Sign `path` with the private key `key`; writes and returns `path`.sig."""
    check_private_key(key)
    sig = path.with_name(path.name + ".sig")
    sig.unlink(missing_ok=True)
    result = _run([_ssh_keygen(), "-Y", "sign", "-f", str(key), "-n", NAMESPACE, str(path)])
    if result.returncode != 0 or not sig.is_file():
        raise UsageError(
            f"{key}: ssh-keygen could not sign with this key: {_first_line(result.stderr)}",
            hint="use an unencrypted ed25519 key (bench keygen) or load it into ssh-agent",
        )
    return sig


def _read_string(blob: bytes, offset: int) -> tuple[bytes, int]:
    if offset + 4 > len(blob):
        raise ValueError("truncated")
    size = int.from_bytes(blob[offset : offset + 4], "big")
    end = offset + 4 + size
    if end > len(blob):
        raise ValueError("truncated")
    return blob[offset + 4 : end], end


def read_signature(sig: Path) -> SignatureInfo:
    """Parse an armored SSHSIG file (PROTOCOL.sshsig) enough to name its key and namespace."""
    try:
        text = sig.read_text(encoding="ascii")
        body = text.split(_ARMOR_BEGIN, 1)[1].split(_ARMOR_END, 1)[0]
        blob = base64.b64decode("".join(body.split()), validate=True)
        if not blob.startswith(_MAGIC):
            raise ValueError("no SSHSIG magic")
        offset = len(_MAGIC) + 4  # magic, then uint32 version
        public_blob, offset = _read_string(blob, offset)
        namespace, offset = _read_string(blob, offset)
        key_type, _ = _read_string(public_blob, 0)
    except FileNotFoundError:
        raise VerifyFailed(f"{sig.name}: missing", hint="the bundle is not signed") from None
    except (ValueError, IndexError, UnicodeDecodeError, binascii.Error):
        raise VerifyFailed(f"{sig.name}: not an OpenSSH signature") from None
    digest = base64.b64encode(hashlib.sha256(public_blob).digest()).decode().rstrip("=")
    kind = key_type.decode("ascii", "replace")
    return SignatureInfo(
        namespace=namespace.decode("utf-8", "replace"),
        key_type=kind,
        fingerprint=f"SHA256:{digest}",
        public_key=f"{kind} {base64.b64encode(public_blob).decode()}",
    )


def verify(path: Path, sig: Path, allowed_signers: Path) -> Signer:
    """Check that `sig` is a good signature over `path` by a key in `allowed_signers`."""
    if not allowed_signers.is_file():
        raise UsageError(
            f"{allowed_signers}: no such allowed-signers file",
            hint="one line per trusted key: PRINCIPAL KEYTYPE BASE64 (see docs/verify.md)",
        )
    info = read_signature(sig)
    if info.namespace != NAMESPACE:
        raise VerifyFailed(f"{sig.name}: made for namespace {info.namespace!r}, not {NAMESPACE!r}")
    tool = _ssh_keygen()
    found = _run([tool, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed_signers)])
    principals = [line.strip() for line in found.stdout.splitlines() if line.strip()]
    if found.returncode != 0 or not principals:
        raise VerifyFailed(
            f"{sig.name}: signed by {info.key_type} key {info.fingerprint}, "
            f"which is not in {allowed_signers}"
        )
    for principal in principals:
        checked = _run(
            [
                tool,
                "-Y",
                "verify",
                "-f",
                str(allowed_signers),
                "-I",
                principal,
                "-n",
                NAMESPACE,
                "-s",
                str(sig),
            ],
            stdin_path=path,
        )
        if checked.returncode == 0:
            return Signer(principal=principal, key_type=info.key_type, fingerprint=info.fingerprint)
    raise VerifyFailed(
        f"{sig.name}: not a valid signature of {path.name} by {info.fingerprint}",
        hint=f"{path.name} was changed after signing, or the signature was",
    )
