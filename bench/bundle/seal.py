"""Turning a finished run directory into a signed bundle, refusing one that leaks a secret."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path, PurePosixPath

import structlog

from bench import run_files
from bench.bundle import dsse, recipe, schema, sign
from bench.bundle import manifest as manifest_mod
from bench.errors import BenchError, UsageError
from bench.secrets import forms_of

_CHUNK_BYTES = 1 << 20


def find_secret(root: Path, secrets: Iterable[str]) -> str | None:
    """The first bundle file (relative path) containing any of the secrets in any form
    bench.secrets masks (verbatim, JSON-escaped, URL-encoded, base64); a value too short to
    be told from chance is none."""
    needles = sorted({f.encode() for s in secrets for f in forms_of(s)})
    if not needles:
        return None
    overlap = max(len(n) for n in needles) - 1
    for rel in manifest_mod.bundle_files(root):
        tail = b""
        with (root / PurePosixPath(rel)).open("rb") as fh:
            while chunk := fh.read(_CHUNK_BYTES):
                window = tail + chunk
                if any(n in window for n in needles):
                    return rel
                tail = window[-overlap:] if overlap else b""
    return None


def write_default_recipe(root: Path) -> None:
    """recipe.json from results.json when whoever ran the server wrote none (`bench local`
    and the orchestrator write their own first). A results.json that does not parse gets
    none: verify names results.json then."""
    if (root / recipe.RECIPE_NAME).exists():
        return
    try:
        results = run_files.load_results(root)
    except BenchError:
        return
    recipe.write(root, recipe.from_results(results))


def seal(
    root: Path, key: Path, *, now: datetime, secrets: Iterable[str] = ()
) -> manifest_mod.Manifest:
    """Write results.schema.json (and recipe.json when there is none) and manifest.json
    into root, then manifest.json.sig and attestation.intoto.json (an in-toto statement of
    the manifest's files in a DSSE envelope, signed with the same key)."""
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory", hint="give the run directory of `bench run`")
    if (root / run_files.RESULTS).is_file():
        # What `bench verify` would refuse is not signed (issue 29, S7): VerifyFailed, exit 5.
        schema.validate_results(root)
    sign.check_private_key(key)
    # The attestation needs the key itself: an unencrypted ed25519 key file. Another key
    # (a passphrase, RSA, an agent's) still signs the manifest; the bundle then has no
    # attestation, said once, and `bench verify` says "no attestation".
    try:
        dsse.load_private_key(key)
        attestable: str | None = None
    except UsageError as exc:
        attestable = exc.one_line()
    leaked = find_secret(root, secrets)
    if leaked is not None:
        raise UsageError(
            f"{leaked}: contains the API key or another secret of the run (in some form); "
            "refusing to sign a bundle that leaks it",
            hint="remove the key from that file, then sign again",
        )
    if (root / run_files.RESULTS).is_file():
        schema.write_json_schema(root)
        write_default_recipe(root)
    (root / manifest_mod.SIGNATURE_NAME).unlink(missing_ok=True)
    (root / manifest_mod.ATTESTATION_NAME).unlink(missing_ok=True)
    manifest = manifest_mod.build(root, run_id=manifest_mod.run_id_of(root), created_at=now)
    path = manifest_mod.write(root, manifest)
    sign.sign(path, key)
    if attestable is None:
        dsse.attest(root, manifest, key)
    else:
        structlog.get_logger("bench.bundle").warning("no_attestation", why=attestable)
    return manifest


def attest(
    root: Path, key: Path, *, secrets: Iterable[str] = ()
) -> tuple[manifest_mod.Manifest, str]:
    """attestation.intoto.json for a run directory whose manifest.json is written already
    (`bench manifest`, then signed elsewhere: the orchestrator signs it with the host's
    ssh-keygen and has this made on the same host with the same key file). Returns the
    manifest and the key's fingerprint.

    Refused, leaving the directory as it was: files that are not what the manifest lists
    (the statement would vouch for other bytes), a manifest.json.sig made by another key
    (`bench verify` checks the attestation with the manifest's signer), a file that leaks
    a secret (as `bench sign` refuses).
    """
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory", hint="give the run directory of `bench run`")
    if not (root / manifest_mod.MANIFEST_NAME).is_file():
        raise UsageError(f"{root}: has no {manifest_mod.MANIFEST_NAME}",
                         hint=f"write it first: bench manifest {root}")  # fmt: skip
    sign.check_private_key(key)
    fingerprint = dsse.fingerprint(dsse.load_private_key(key).public_key())
    manifest = manifest_mod.read(root)
    problems = manifest_mod.check(root, manifest)
    if problems:
        raise UsageError(f"{root}: does not match its manifest: {problems[0]}",
                         hint=f"write the manifest again (bench manifest {root}) and sign it, "
                         "then attest")  # fmt: skip
    sig = root / manifest_mod.SIGNATURE_NAME
    if sig.is_file():
        signed_by = sign.read_signature(sig).fingerprint
        if signed_by != fingerprint:
            raise UsageError(
                f"{sig}: made by {signed_by}, not by {key} ({fingerprint}); `bench verify` "
                "checks the attestation with the key that signed the manifest",
                hint="attest with the key that signed manifest.json",
            )
    leaked = find_secret(root, secrets)
    if leaked is not None:
        raise UsageError(
            f"{leaked}: contains the API key or another secret of the run (in some form); "
            "refusing to attest a bundle that leaks it",
            hint="remove the key from that file, write the manifest again and sign it",
        )
    dsse.attest(root, manifest, key)
    return manifest, fingerprint
