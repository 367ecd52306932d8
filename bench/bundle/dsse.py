"""attestation.intoto.json: an in-toto Statement v1 in a DSSE envelope, beside the SSH signature.

The one module of bench that uses `cryptography`. The envelope is signed with the same
ed25519 key as manifest.json.sig (the OpenSSH private key file, read here), over DSSE's
pre-authentication encoding of the statement; its keyid is the key's SSH fingerprint.
The statement's subjects are the manifest's files and their sha256, so any in-toto or DSSE
verifier can check the bundle's files with the public key alone (docs/verify.md).

Like the .sig, the envelope is not listed in manifest.json: it signs the manifest's contents.
`bench sign` makes it right after the signature (bench.bundle.seal.seal); the orchestrator,
which signs with the host's ssh-keygen, has `bench attest` make it on the host with the same
key file (bench.bundle.seal.attest, provisioning.flow.sealing).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bench import is_dirty, run_files, writes
from bench.bundle import manifest as manifest_mod
from bench.bundle import provenance as prov
from bench.errors import BenchError, UsageError, VerifyFailed

ATTESTATION_NAME = manifest_mod.ATTESTATION_NAME
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://github.com/bench/attestation/run/v1"
MAX_BYTES = 8 << 20  # the envelope file: a subject per file is about 150 bytes
MAX_SIGNATURES = 16  # an envelope with more is refused unread (each costs a verification)
_KEY_MAX_BYTES = 64 << 10
_ED25519 = "ssh-ed25519"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding: what the signature is over."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def fingerprint(public: Ed25519PublicKey) -> str:
    """`SHA256:...` as `ssh-keygen -l` prints it."""
    blob = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    raw = base64.b64decode(blob.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def raw_public_bytes(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_private_key(key: Path) -> Ed25519PrivateKey:
    """The ed25519 private key of an OpenSSH key file without passphrase, or a UsageError."""
    try:
        with key.open("rb") as fh:
            data = fh.read(_KEY_MAX_BYTES + 1)
        if len(data) > _KEY_MAX_BYTES:
            raise ValueError("too large for a key")
        loaded = serialization.load_ssh_private_key(data, password=None)
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise UsageError(
            f"{key}: cannot read the key for the attestation: {_first_line(str(exc))}",
            hint="use an unencrypted ed25519 key (bench keygen)",
        ) from None
    if not isinstance(loaded, Ed25519PrivateKey):
        raise UsageError(f"{key}: not an ed25519 key", hint="make one with `bench keygen`")
    return loaded


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no message")


def _gpus(env: Any) -> list[str]:
    gpu = env.get("gpu") if isinstance(env, dict) else None
    found = gpu.get("gpus") if isinstance(gpu, dict) else None
    if not isinstance(found, list):
        return []
    return [str(g.get("name", "?")) for g in found if isinstance(g, dict)]


def predicate(root: Path, manifest: manifest_mod.Manifest) -> dict[str, Any]:
    """The run's provenance as the bundle records it, kept small: every reader of the bundle
    can follow recipe.json and environment.json (subjects) for the rest."""
    out: dict[str, Any] = {
        "run_id": manifest.run_id,
        "created_at": manifest.created_at.isoformat(),
    }
    try:
        results = run_files.load_results(root, shown=run_files.RESULTS)
    except BenchError:
        return out  # no results.json (or not this bench's): the subjects still say it all
    version = results.bench_version
    out["bench"] = {
        "version": version,
        "commit": prov.bench_commit(version),
        "dirty": is_dirty(version),
    }
    server = results.server
    commit = server.version_payload.get("commit")
    out["engine"] = {
        "name": server.engine,
        "version": server.version,
        "commit": commit if isinstance(commit, str) else None,
        "model": server.model,
    }
    env = run_files.read_environment(root)
    out["image"] = prov.image_id(env)
    out["gpus"] = _gpus(env)
    out["workload"] = results.workload.source if results.workload is not None else "card"
    out["state"] = results.state
    return out


def statement(root: Path, manifest: manifest_mod.Manifest) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f.path, "digest": {"sha256": f.sha256}} for f in manifest.files],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate(root, manifest),
    }


def attest(root: Path, manifest: manifest_mod.Manifest, key: Path) -> Path:
    """Write root/attestation.intoto.json: the statement of `manifest`, signed with `key`."""
    envelope = sign_statement(statement(root, manifest), load_private_key(key))
    path = root / ATTESTATION_NAME
    writes.write_atomic(path, json.dumps(envelope, indent=2) + "\n")
    return path


def sign_statement(doc: dict[str, Any], private: Ed25519PrivateKey) -> dict[str, Any]:
    """A statement in a DSSE envelope signed by `private`, its keyid the key's fingerprint
    (the bundle's attestation, and a verdict's: bench.bundle.verdict_attestation)."""
    body = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(body).decode("ascii"),
        "signatures": [
            {
                "keyid": fingerprint(private.public_key()),
                "sig": base64.b64encode(private.sign(pae(PAYLOAD_TYPE, body))).decode("ascii"),
            }
        ],
    }


def allowed_ed25519_keys(allowed_signers: Path) -> dict[str, Ed25519PublicKey]:
    """Every ed25519 key of an allowed-signers file, by SSH fingerprint."""
    return {fp: key for fp, (_, key) in allowed_ed25519_signers(allowed_signers).items()}


def allowed_ed25519_signers(allowed_signers: Path) -> dict[str, tuple[str, Ed25519PublicKey]]:
    """Every ed25519 key of an allowed-signers file with its principals, by SSH fingerprint."""
    found: dict[str, tuple[str, Ed25519PublicKey]] = {}
    try:
        text = allowed_signers.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return found
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#") or _ED25519 not in fields[:-1]:
            continue
        at = fields.index(_ED25519)
        try:
            key = serialization.load_ssh_public_key(f"{_ED25519} {fields[at + 1]}".encode())
        except (ValueError, UnsupportedAlgorithm):
            continue
        if isinstance(key, Ed25519PublicKey):
            found[fingerprint(key)] = (fields[0], key)
    return found


def signed_payload(
    envelope: Any,
    signers: dict[str, tuple[str, Ed25519PublicKey]],
    fail: Callable[[str], BenchError],
) -> tuple[bytes, str, str]:
    """The payload of a DSSE envelope of ours (any JSON value, hostile or not) that one of
    `signers` (by fingerprint, as `allowed_ed25519_signers` gives them) signed over PAE:
    (payload, fingerprint, principals). Anything else is `fail(problem)`."""
    if not isinstance(envelope, dict):
        raise fail("not a DSSE envelope (a JSON object)")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise fail(f"payloadType is not {PAYLOAD_TYPE}")
    body = _b64(envelope.get("payload"), "payload", fail)
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise fail("has no signatures")
    if len(signatures) > MAX_SIGNATURES:
        raise fail(f"has {len(signatures)} signatures, more than {MAX_SIGNATURES}")
    ours = [
        (s, s["keyid"])
        for s in signatures
        if isinstance(s, dict) and isinstance(s.get("keyid"), str) and s["keyid"] in signers
    ]
    if not ours:
        raise fail("not signed by a key of the allowed-signers file")
    message = pae(PAYLOAD_TYPE, body)
    for entry, keyid in ours:
        principals, public = signers[keyid]
        try:
            public.verify(_b64(entry.get("sig"), "a signature", fail), message)
        except InvalidSignature:
            continue
        return body, keyid, principals
    raise fail(f"the signature by {ours[0][1]} does not verify over the payload")


def _fail(problem: str) -> VerifyFailed:
    return VerifyFailed(f"{ATTESTATION_NAME}: {problem}")


def _b64(value: Any, what: str, fail: Callable[[str], BenchError] = _fail) -> bytes:
    if not isinstance(value, str):
        raise fail(f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise fail(f"{what} is not base64") from None


def verify(
    root: Path, manifest: manifest_mod.Manifest, allowed_signers: Path, signer_fingerprint: str
) -> str:
    """Check root's envelope, when there is one: signed over DSSE's PAE by the ed25519 key
    that signed manifest.json (from the allowed-signers file), a Statement v1 of ours whose
    subjects are exactly the manifest's files. One line saying what was found."""
    path = root / ATTESTATION_NAME
    if not path.exists():
        return "no attestation (a bundle made before attestations, or signed without one)"
    envelope = run_files.read_json(
        path, shown=ATTESTATION_NAME, error=VerifyFailed, max_bytes=MAX_BYTES
    )
    if not isinstance(envelope, dict):
        raise _fail("not a DSSE envelope (a JSON object)")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise _fail(f"payloadType is not {PAYLOAD_TYPE}")
    body = _b64(envelope.get("payload"), "payload")
    public = allowed_ed25519_keys(allowed_signers).get(signer_fingerprint)
    if public is None:
        raise _fail(f"no ed25519 key {signer_fingerprint} in {allowed_signers}")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise _fail("has no signatures")
    ours = [s for s in signatures if isinstance(s, dict) and s.get("keyid") == signer_fingerprint]
    if not ours:
        raise _fail(f"not signed by {signer_fingerprint}, the key that signed manifest.json")
    message = pae(PAYLOAD_TYPE, body)
    for entry in ours:
        try:
            public.verify(_b64(entry.get("sig"), "a signature"), message)
            break
        except InvalidSignature:
            continue
    else:
        raise _fail(f"the signature by {signer_fingerprint} does not verify over the payload")
    _check_statement(body, manifest)
    return (
        f"attestation: {ATTESTATION_NAME} verified (in-toto Statement v1, {PREDICATE_TYPE}, "
        f"{len(manifest.files)} subjects, signed by {signer_fingerprint})"
    )


def _check_statement(body: bytes, manifest: manifest_mod.Manifest) -> None:
    try:
        doc = json.loads(body)
    except ValueError:
        raise _fail("the payload is not JSON") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        raise _fail(f"the payload is not an in-toto Statement ({STATEMENT_TYPE})")
    if doc.get("predicateType") != PREDICATE_TYPE:
        raise _fail(f"predicateType is not {PREDICATE_TYPE}")
    subjects = doc.get("subject")
    if not isinstance(subjects, list):
        raise _fail("the statement has no subject list")
    stated: dict[str, str] = {}
    for s in subjects:
        digest = s.get("digest") if isinstance(s, dict) else None
        name = s.get("name") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not isinstance(sha, str) or name in stated:
            raise _fail("a subject without a name and sha256, or named twice")
        stated[name] = sha
    listed = {f.path: f.sha256 for f in manifest.files}
    for name in sorted(set(stated) | set(listed)):
        if name not in listed:
            raise _fail(f"subject {name} is not in {manifest_mod.MANIFEST_NAME}")
        if name not in stated:
            raise _fail(f"{name} of {manifest_mod.MANIFEST_NAME} is not a subject")
        if stated[name] != listed[name]:
            raise _fail(f"subject {name}: sha256 differs from {manifest_mod.MANIFEST_NAME}")
