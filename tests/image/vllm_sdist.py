"""vLLM's published source distributions, fetched once through pip's configured index.

The recipe test checks our `vllm-build` stage against the real files of the two releases
around the pinned commit. No registry host is written here: the index is the one pip is
configured with (PIP_INDEX_URL, `pip config`), else pip's own default, asked through the
index's JSON API (PEP 691) for the sdist and its sha256. `pip download` cannot be used for
an sdist without building its metadata, which for vLLM means installing torch.

Files are cached by name under BENCH_SDIST_CACHE (default ~/.cache/bench/sdist) and checked
against the index's sha256 when fetched; later runs work offline from the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

RELEASES = ("0.30.0", "0.31.0")
_TIMEOUT_S = 120


def cache_dir() -> Path:
    configured = os.environ.get("BENCH_SDIST_CACHE")
    path = Path(configured) if configured else Path.home() / ".cache" / "bench" / "sdist"
    path.mkdir(parents=True, exist_ok=True)
    return path


def index_url() -> str:
    """The simple index pip installs from on this machine."""
    if url := os.environ.get("PIP_INDEX_URL"):
        return url.rstrip("/")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode == 0 and res.stdout.strip():
        return res.stdout.strip().rstrip("/")
    from pip._internal.models.index import PyPI  # pip's own default, not a host of ours

    return str(PyPI.simple_url).rstrip("/")


def sdist(version: str) -> Path:
    """vllm-VERSION.tar.gz, from the cache or the index (sha256 checked)."""
    name = f"vllm-{version}.tar.gz"
    path = cache_dir() / name
    if path.is_file():
        return path
    request = urllib.request.Request(
        f"{index_url()}/vllm/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as resp:
        files = json.load(resp)["files"]
    entry = next((f for f in files if f["filename"] == name), None)
    if entry is None:
        raise FileNotFoundError(f"{name} is not on the package index {index_url()}")
    digest = hashlib.sha256()
    tmp = path.with_suffix(".part")
    with urllib.request.urlopen(entry["url"], timeout=_TIMEOUT_S) as resp, tmp.open("wb") as out:
        while chunk := resp.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != entry["hashes"]["sha256"]:
        tmp.unlink()
        raise ValueError(f"{name}: sha256 {digest.hexdigest()} is not the index's")
    tmp.rename(path)
    return path


def unpack(version: str, dest: Path) -> Path:
    """The sdist unpacked under DEST; returns its top directory (vllm-VERSION/)."""
    top = dest / f"vllm-{version}"
    if not top.is_dir():
        with tarfile.open(sdist(version)) as tar:
            tar.extractall(dest, filter="data")
    return top
