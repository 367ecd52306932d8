"""manifest.json: what a bundle contains, the file the signature covers.

The manifest lists every other file of the bundle with its sha256 and size, so a
signature over the manifest alone covers the whole bundle. The manifest, its signature and
the in-toto attestation beside it (bench.bundle.dsse) are the only files it does not list.

`bench manifest DIR` (refresh): the manifest of a run directory written afresh, unsigned,
as the orchestrator has it made inside the run's container before signing on the host.
"""

from __future__ import annotations

import hashlib
import os
import stat
from datetime import datetime
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench import run_files, writes
from bench.bundle import schema
from bench.errors import VerifyFailed, validation_message

MANIFEST_SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.json.sig"
ATTESTATION_NAME = "attestation.intoto.json"  # bench.bundle.dsse: signs the manifest's files
# Files that describe the bundle rather than belong to it.
NOT_LISTED = frozenset({MANIFEST_NAME, SIGNATURE_NAME, ATTESTATION_NAME})
_CHUNK_BYTES = 1 << 20


class FileEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="POSIX path relative to the bundle root")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=0)


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = MANIFEST_SCHEMA_VERSION
    run_id: str = Field(min_length=1)
    created_at: datetime
    files: tuple[FileEntry, ...]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def bundle_files(root: Path) -> list[str]:
    """Every file under root as a sorted POSIX relative path, manifest, signature and
    attestation excluded.

    Links and special files are refused: a bundle holds regular files and directories only,
    so that what is hashed is what a reader gets.
    """
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in [*dirnames, *filenames]:
            path = base / name
            mode = path.lstat().st_mode
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                raise VerifyFailed(f"{rel}: is a symbolic link; a bundle holds regular files only")
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise VerifyFailed(
                    f"{rel}: is not a regular file; a bundle holds regular files only"
                )
            if rel not in NOT_LISTED:
                found.append(rel)
    return sorted(found)


def build(root: Path, *, run_id: str, created_at: datetime) -> Manifest:
    entries = []
    for rel in bundle_files(root):
        path = root / PurePosixPath(rel)
        entries.append(
            FileEntry(path=rel, sha256=sha256_file(path), size_bytes=path.stat().st_size)
        )
    return Manifest(run_id=run_id, created_at=created_at, files=tuple(entries))


def write(root: Path, manifest: Manifest) -> Path:
    path = root / MANIFEST_NAME
    writes.write_atomic(path, manifest.model_dump_json(indent=2) + "\n")
    return path


def read(root: Path) -> Manifest:
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise VerifyFailed(f"{MANIFEST_NAME}: missing", hint="sign the run directory first")
    try:
        manifest = Manifest.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise VerifyFailed(
            f"{MANIFEST_NAME}: malformed at {validation_message(exc, 'document')}"
        ) from None
    if manifest.schema_version != MANIFEST_SCHEMA_VERSION:
        raise VerifyFailed(
            f"{MANIFEST_NAME}: schema version {manifest.schema_version} is not "
            f"{MANIFEST_SCHEMA_VERSION}",
            hint="verify it with the bench version that made it",
        )
    return manifest


def check(root: Path, manifest: Manifest) -> list[str]:
    """Every problem as 'PATH: what is wrong', empty when the files match the manifest."""
    problems: list[str] = []
    listed = {entry.path for entry in manifest.files}
    if len(listed) != len(manifest.files):
        problems.append(f"{MANIFEST_NAME}: lists a file twice")
    for entry in manifest.files:
        rel = PurePosixPath(entry.path)
        if rel.is_absolute() or ".." in rel.parts or entry.path in NOT_LISTED:
            problems.append(f"{entry.path}: not a valid path inside a bundle")
            continue
        path = root / rel
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            problems.append(f"{entry.path}: listed in the manifest but missing")
            continue
        if not stat.S_ISREG(mode):
            problems.append(f"{entry.path}: not a regular file")
            continue
        size = path.stat().st_size
        if size != entry.size_bytes:
            problems.append(f"{entry.path}: size {size} bytes, manifest says {entry.size_bytes}")
            continue
        if sha256_file(path) != entry.sha256:
            problems.append(f"{entry.path}: sha256 differs from the manifest")
    try:
        present = bundle_files(root)
    except VerifyFailed as exc:
        problems.append(exc.one_line())
        present = []
    problems += [f"{rel}: not listed in the manifest" for rel in present if rel not in listed]
    # A directory holds listed files, or it is unlisted content too: an empty `INCOMPLETE`
    # directory marked a complete run incomplete (issue 29, M5).
    parents = {p.as_posix() for rel in {*listed, *present} for p in PurePosixPath(rel).parents}
    problems += [
        f"{rel}/: a directory not listed in the manifest"
        for rel in _directories(root)
        if rel not in parents
    ]
    return problems


def _directories(root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, _ in os.walk(root, followlinks=False):
        base = Path(dirpath)
        found += [(base / name).relative_to(root).as_posix() for name in dirnames]
    return sorted(found)


def run_id_of(root: Path) -> str:
    """The run id from results.json when it has one, else the directory's name."""
    results = root / run_files.RESULTS
    if results.is_file():
        doc = run_files.read_json(
            results, shown=run_files.RESULTS, hint="sign a directory written by `bench run`"
        )
        if isinstance(doc, dict):
            for key in ("run_id", "id"):
                if isinstance(doc.get(key), str) and doc[key]:
                    return str(doc[key])
            meta = doc.get("metadata")
            if isinstance(meta, dict) and isinstance(meta.get("run_id"), str):
                return str(meta["run_id"])
    return root.resolve().name


def refresh(root: Path, *, created_at: datetime) -> Manifest:
    """Rewrite root's manifest.json from what root holds now, unsigned: results.schema.json
    first (when there is a results.json), any old signature and attestation removed (they
    would not match).

    Every step rewrites what it makes from the directory, so running it again is the same
    as running it once (the orchestrator reruns it after a dropped connection).
    """
    if (root / schema.RESULTS_NAME).is_file():
        schema.write_json_schema(root)
    (root / SIGNATURE_NAME).unlink(missing_ok=True)
    (root / ATTESTATION_NAME).unlink(missing_ok=True)
    made = build(root, run_id=run_id_of(root), created_at=created_at)
    write(root, made)
    return made
