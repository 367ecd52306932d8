"""Pinned weights on the host (issue 16, item 4): a hub-layout cache made by the test, read
over the real sshd as the non-root account; no download anywhere."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.bundle import provenance
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.image import weights
from provisioning.preflight import storage
from provisioning.preflight.report import Status
from provisioning.preflight.requirements import GIB, Requirements
from tests.provisioning.conftest import SshTestHost

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

MODEL = "tiny-org/tiny-model"
PINNED = "c1899de289a04d12100db370d81485cdf75e47ca"
OTHER = "0123456789abcdef0123456789abcdef01234567"


def make_cache(home: Path, user: str, *, main: str | None, snapshots: tuple[str, ...]) -> Path:
    """CACHE/hub/models--tiny-org--tiny-model as huggingface_hub lays it out: an LFS file
    under its sha256, a small one under its git blob hash, snapshots of symlinks."""
    cache = home / "hf"
    root = cache / "hub" / "models--tiny-org--tiny-model"
    (root / "blobs").mkdir(parents=True)
    weights_bytes = os.urandom(4096)
    lfs = hashlib.sha256(weights_bytes).hexdigest()
    (root / "blobs" / lfs).write_bytes(weights_bytes)
    config = b'{"model_type": "llama"}\n'
    git_blob = hashlib.sha1(b"blob %d\0" % len(config) + config, usedforsecurity=False)
    (root / "blobs" / git_blob.hexdigest()).write_bytes(config)
    for rev in snapshots:
        snap = root / "snapshots" / rev
        snap.mkdir(parents=True)
        (snap / "model.safetensors").symlink_to(f"../../blobs/{lfs}")
        (snap / "config.json").symlink_to(f"../../blobs/{git_blob.hexdigest()}")
    if main is not None:
        (root / "refs").mkdir()
        (root / "refs" / "main").write_text(main)
    subprocess.run(["chown", "-R", f"{user}:", str(cache)], check=True)
    return cache


def _req(revision: str | None, download: bool) -> Requirements:
    return Requirements(
        profile="test",
        gpus=0,
        weights_bytes=GIB,
        hf_model=MODEL,
        model_revision=revision,
        download_weights=download,
    )


def _home(ssh_host: SshTestHost) -> Path:
    return (ssh_host.dir / "remote-home").resolve()


def test_a_pinned_revision_is_recorded_with_every_files_sha256(ssh_host: SshTestHost) -> None:
    cache = make_cache(_home(ssh_host), ssh_host.user, main=OTHER, snapshots=(PINNED, OTHER))
    with Remote(inventory.resolve(ssh_host.alias)) as remote:
        weights.pin_main(remote, str(cache), MODEL, PINNED)
        found = weights.record(remote, str(cache), MODEL, PINNED)
    assert found is not None
    assert (found.revision, found.pinned) == (PINNED, True)
    snap = cache / "hub" / "models--tiny-org--tiny-model" / "snapshots" / PINNED
    expected = {
        name: hashlib.sha256((snap / name).read_bytes()).hexdigest()
        for name in ("model.safetensors", "config.json")
    }
    assert found.files == expected
    # refs/main now names the pin: an offline server without --revision loads exactly it.
    assert (cache / "hub" / "models--tiny-org--tiny-model" / "refs" / "main").read_text() == PINNED
    assert json.loads(json.dumps(found.as_json()))["files"] == expected
    assert found.banner() == f"weights: {MODEL} at {PINNED}, pinned by the launch profile"
    env = {"weights": json.loads(json.dumps(found.as_json()))}
    assert provenance.weights_line(env, twin=False) == f"weights: {MODEL} at {PINNED}, pinned"


def test_an_unpinned_profile_records_what_refs_main_resolved(ssh_host: SshTestHost) -> None:
    cache = make_cache(_home(ssh_host), ssh_host.user, main=OTHER, snapshots=(OTHER,))
    with Remote(inventory.resolve(ssh_host.alias)) as remote:
        found = weights.record(remote, str(cache), MODEL, None)
    assert found is not None and (found.revision, found.pinned) == (OTHER, False)
    assert found.banner().endswith("not pinned by the profile")
    # What the orchestrator writes into environment.json is what the verdicts' header reads.
    env = {"weights": json.loads(json.dumps(found.as_json()))}
    assert provenance.weights_line(env, twin=False) == f"weights: {MODEL} at {OTHER}, not pinned"


def test_preflight_refuses_an_absent_pin_when_downloads_are_off(ssh_host: SshTestHost) -> None:
    cache = make_cache(_home(ssh_host), ssh_host.user, main=OTHER, snapshots=(OTHER,))
    with Remote(inventory.resolve(ssh_host.alias)) as remote:
        absent = storage.check_weights(remote, _req(PINNED, download=False), str(cache))
        fetched = storage.check_weights(remote, _req(PINNED, download=True), str(cache))
        present = storage.check_weights(remote, _req(OTHER, download=False), str(cache))
    assert absent.status is Status.FAIL
    assert absent.found == f"{MODEL} at the pinned {PINNED} is not in {cache} and downloads are off"
    assert absent.fix.startswith(f"on the host: HF_HOME={cache} hf download {MODEL} --revision")
    assert fetched.status is Status.OK and "will be downloaded" in fetched.found
    assert present.status is Status.OK and "(pinned)" in present.found
