"""A model folder placed in a Hugging Face cache the way the hub client lays one out.

    revision = place(model_dir, cache, "bench-test/tiny-llama")

CACHE/hub/models--ORG--NAME/ gets blobs/ (large files under their sha256, as the hub stores
LFS files; small ones under their git blob hash), snapshots/REVISION/ (a relative symlink per
file into blobs/) and refs/main (REVISION). The revision stands for the hub's commit: the
sha1 of the snapshot's listing (path and blob of every file), so the same model gives the
same revision and another model another. Used by the cpu-vllm rehearsal, whose weights step
reads the cache over SSH and records the revision and every file's sha256.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

# The hub stores these through LFS: their blob is named by the content's sha256.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt")


def blob_name(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix in LFS_SUFFIXES:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def place(model: Path, cache: Path, repo: str) -> str:
    """MODEL's files in CACHE as REPO's snapshot; returns the revision (refs/main)."""
    files = sorted(p for p in model.iterdir() if p.is_file())
    if not files:
        raise ValueError(f"{model} holds no files")
    blobs = {p.name: blob_name(p) for p in files}
    listing = "".join(f"{name} {blob}\n" for name, blob in sorted(blobs.items()))
    revision = hashlib.sha1(listing.encode(), usedforsecurity=False).hexdigest()
    root = cache / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = root / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in files:
        blob = root / "blobs" / blobs[path.name]
        if not blob.exists():
            shutil.copyfile(path, blob)
        link = snapshot / path.name
        if not link.is_symlink():
            os.symlink(f"../../blobs/{blobs[path.name]}", link)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return revision
