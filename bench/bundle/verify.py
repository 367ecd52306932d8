"""Everything `bench verify` checks, in the order a reader should trust them.

1. the signature over manifest.json is good and by a key in the allowed-signers file;
2. every file the manifest lists is there with the right size and sha256;
3. no file is there that the manifest does not list;
3a. attestation.intoto.json, when there is one (older bundles have none): its DSSE signature
   by the same ed25519 key (from the allowed-signers file), its subjects exactly the
   manifest's files and sha256 (bench.bundle.dsse);
4. results.json is valid against the results schema;
5. (`provenance=True`, what `bench verify` does) the bundle says where its figures come from:
   recipe.json is there and well formed, results.json's bench version names a commit (and
   so whether the tree was dirty), environment.json records the image, the server's package
   freeze and the weights (their revision and file hashes, or why there are none).

Any failure is a VerifyFailed naming the offending file(s).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench import run_files
from bench.bundle import dsse, schema, sign
from bench.bundle import manifest as manifest_mod
from bench.bundle import provenance as prov
from bench.bundle import recipe as recipe_mod
from bench.bundle.pack import OpenLimits, open_bundle
from bench.errors import BenchError, UsageError, VerifyFailed
from bench.results import Results

ENVIRONMENT_NAME = run_files.ENVIRONMENT


@dataclass(frozen=True)
class Verified:
    run_id: str
    created_at: datetime
    signer: sign.Signer
    files: int
    results_schema_version: int
    provenance: tuple[str, ...] = field(default=())  # what was found, one line each
    attestation: str = "no attestation"  # what dsse.verify found, one line


def read_environment(root: Path) -> dict[str, object] | None:
    """environment.json as a JSON object (bounded), or None."""
    try:
        raw = run_files.read_json(root / ENVIRONMENT_NAME)
    except BenchError:
        return None
    return raw if isinstance(raw, dict) else None


def check_provenance(root: Path, results: Results) -> tuple[str, ...]:
    """What the bundle says about its sources, one line each; VerifyFailed listing every
    missing piece when it is incomplete."""
    problems: list[str] = []
    found: list[str] = [prov.bench_identity(results.bench_version)]
    if prov.bench_commit(results.bench_version) is None:
        problems.append(f"results.json: bench version {results.bench_version} names no commit")
    try:
        recipe = recipe_mod.read(root)
        found.append(f"recipe: {recipe_mod.RECIPE_NAME} ({recipe.server.kind} server)")
    except VerifyFailed as exc:
        recipe = None
        problems.append(exc.message)
    env = read_environment(root)
    if env is None:
        problems.append(f"{ENVIRONMENT_NAME}: missing or not a readable JSON object")
    else:
        # The orchestrator's runs are in an image it knows the id of. (Being in a container
        # alone says nothing: the twin may run in any, and bench cannot see an image's id.)
        in_image = recipe is not None and recipe.server.kind == "image"
        twin = "twin" in results.server.version_payload
        _check_environment(env, problems, found, in_image=in_image, twin=twin)
    if problems:
        raise VerifyFailed(
            f"provenance incomplete: {'; '.join(problems)}",
            hint="the bundle is signed and intact, but cannot say what produced it; "
            "--integrity-only checks only the signature, hashes and schema",
        )
    return tuple(found)


def _check_environment(
    env: dict[str, object], problems: list[str], found: list[str], *, in_image: bool, twin: bool
) -> None:
    """The environment record's image, server packages and weights: a line each in `found`,
    or what is missing in `problems`."""
    image = env.get("image")
    if not isinstance(image, dict):
        problems.append(f"{ENVIRONMENT_NAME}: no image record")
    elif in_image and not prov.image_id(env):
        problems.append(f"{ENVIRONMENT_NAME}: the server ran in an image but no image id")
    else:
        found.append(f"image: {prov.image_id(env) or 'none (not run in a container)'}")
    packages = prov.server_packages(env, twin=twin)
    if packages is None:
        problems.append(f"{ENVIRONMENT_NAME}: no package freeze of the server")
    else:
        found.append(f"server packages: {len(packages)} recorded")
    weights = prov.weights_of(env)
    if not weights:
        problems.append(f"{ENVIRONMENT_NAME}: no weights record")
    elif weights.get("model") and not (weights.get("revision") and weights.get("files")):
        problems.append(f"{ENVIRONMENT_NAME}: weights of {weights['model']} without a "
                        "revision and file hashes")  # fmt: skip
    else:
        found.append(prov.weights_line(env, twin=twin))


def verify_dir(root: Path, allowed_signers: Path, *, provenance: bool = False) -> Verified:
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
    attestation = dsse.verify(root, manifest, allowed_signers, signer.fingerprint)
    results = schema.validate_results(root)
    return Verified(
        run_id=manifest.run_id,
        created_at=manifest.created_at,
        signer=signer,
        files=len(manifest.files),
        results_schema_version=results.schema_version,
        provenance=check_provenance(root, results) if provenance else (),
        attestation=attestation,
    )


def verify_bundle(
    bundle: Path,
    allowed_signers: Path,
    limits: OpenLimits | None = None,
    *,
    provenance: bool = False,
) -> Verified:
    """Verify a bundle directory or a .tar.gz (opened safely into a scratch directory)."""
    if bundle.is_dir():
        return verify_dir(bundle, allowed_signers, provenance=provenance)
    if not bundle.is_file():
        raise UsageError(f"{bundle}: no such bundle (a directory or a .tar.gz)")
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as scratch:
        root = open_bundle(bundle, Path(scratch) / "bundle", limits)
        return verify_dir(root, allowed_signers, provenance=provenance)
