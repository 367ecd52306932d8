"""A bundle's attestation.intoto.json (and a verdict's <bundle>.verdict.intoto.json) checked by
a verifier bench did not write: securesystemslib's DSSE envelope and ed25519 verification, with
the signer's key read from an allowed-signers line without bench's parser, then the statement's
subjects hashed against the files."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.dsse import Envelope

# securesystemslib.signer re-exports it without __all__ (mypy --strict: not "explicit").
from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]

ATTESTATION = "attestation.intoto.json"


def sslib_key(public_line: str) -> SSlibKey:
    """securesystemslib's key for the `ssh-ed25519 AAAA...` in a line (a .pub's, an
    allowed-signers'), its keyid the SSH fingerprint (`SHA256:...`), as the envelope names it."""
    fields = public_line.split()
    assert "ssh-ed25519" in fields[:-1], public_line
    key_type = "ssh-ed25519"
    blob = fields[fields.index(key_type) + 1]
    public = serialization.load_ssh_public_key(f"{key_type} {blob}".encode())
    assert isinstance(public, Ed25519PublicKey)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    digest = hashlib.sha256(base64.b64decode(blob)).digest()
    keyid = "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
    return SSlibKey(keyid, "ed25519", "ed25519", {"public": raw.hex()})


def allowed_line(allowed_signers: Path, principal: str) -> str:
    """The last line of PRINCIPAL in an allowed-signers file (the newest key)."""
    lines = [
        line for line in allowed_signers.read_text().splitlines() if line.split()[:1] == [principal]
    ]
    assert lines, f"{principal} not in {allowed_signers}"
    return lines[-1]


def third_party_check(root: Path, key: SSlibKey) -> list[str]:
    """Raises securesystemslib's VerificationError unless KEY signed the envelope; then the
    subjects whose files under ROOT do not hash to the statement's sha256."""
    envelope = Envelope.from_dict(json.loads((root / ATTESTATION).read_text()))
    envelope.verify([key], 1)
    assert envelope.payload_type == "application/vnd.in-toto+json"
    statement = json.loads(envelope.payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    return [
        s["name"]
        for s in statement["subject"]
        if hashlib.sha256((root / s["name"]).read_bytes()).hexdigest() != s["digest"]["sha256"]
    ]


def third_party_statement(envelope_path: Path, key: SSlibKey) -> dict[str, object]:
    """A verdict attestation (<bundle>.verdict.intoto.json) as securesystemslib reads it:
    raises its VerificationError unless KEY signed the envelope; the in-toto statement."""
    envelope = Envelope.from_dict(json.loads(envelope_path.read_text()))
    envelope.verify([key], 1)
    assert envelope.payload_type == "application/vnd.in-toto+json"
    statement: dict[str, object] = json.loads(envelope.payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    return statement


def subject_digests(statement: dict[str, object]) -> dict[str, str]:
    """The statement's subjects: name -> sha256."""
    subjects = statement["subject"]
    assert isinstance(subjects, list)
    return {s["name"]: s["digest"]["sha256"] for s in subjects}


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
