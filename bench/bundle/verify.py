"""Everything `bench verify` checks, in the order a reader should trust them.

1. the signature over manifest.json is good and by a key in the allowed-signers file;
2. every file the manifest lists is there with the right size and sha256;
3. no file is there that the manifest does not list;
4. results.json is valid against the results schema.

Any failure is a VerifyFailed naming the offending file(s).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.bundle import manifest as manifest_mod
from bench.bundle import schema, sign
from bench.bundle.pack import OpenLimits, open_bundle
from bench.errors import UsageError, VerifyFailed


@dataclass(frozen=True)
class Verified:
    run_id: str
    created_at: datetime
    signer: sign.Signer
    files: int
    results_schema_version: int


def verify_dir(root: Path, allowed_signers: Path) -> Verified:
    manifest_path = root / manifest_mod.MANIFEST_NAME
    if not manifest_path.is_file():
        raise VerifyFailed(f"{manifest_mod.MANIFEST_NAME}: missing", hint="not a signed bundle")
    signer = sign.verify(manifest_path, root / manifest_mod.SIGNATURE_NAME, allowed_signers)
    manifest = manifest_mod.read(root)
    problems = manifest_mod.check(root, manifest)
    if problems:
        if len(problems) == 1:
            raise VerifyFailed(problems[0])
        raise VerifyFailed(f"{len(problems)} problems: " + "; ".join(problems))
    results = schema.validate_results(root)
    return Verified(
        run_id=manifest.run_id,
        created_at=manifest.created_at,
        signer=signer,
        files=len(manifest.files),
        results_schema_version=results.schema_version,
    )


def verify_bundle(
    bundle: Path, allowed_signers: Path, limits: OpenLimits | None = None
) -> Verified:
    """Verify a bundle directory or a .tar.gz (opened safely into a scratch directory)."""
    if bundle.is_dir():
        return verify_dir(bundle, allowed_signers)
    if not bundle.is_file():
        raise UsageError(f"{bundle}: no such bundle (a directory or a .tar.gz)")
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as scratch:
        root = open_bundle(bundle, Path(scratch) / "bundle", limits)
        return verify_dir(root, allowed_signers)
