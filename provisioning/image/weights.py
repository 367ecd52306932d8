"""The model's weights on the host: which hub revision, and the sha256 of every file.

The Hugging Face cache keeps one folder per model, `hub/models--ORG--NAME`, with
`refs/<branch>` (a file holding a commit hash), `snapshots/<commit>/` (the files of that
commit, as symlinks) and `blobs/` (the content). Large files (LFS) are stored under their
sha256, small ones under their git blob hash; so the sha256 of a 200 GB snapshot is read
from the blob names, and only the small files are hashed.

A launch profile may pin `model_revision` (a commit). Then exactly that snapshot is fetched
(or must already be there when downloads are off) and `refs/main` is pointed at it, so a
server started with the hub offline and the card's flags (no --revision) loads exactly that
snapshot. Without a pin, the revision `refs/main` resolved to is what the run used, and the
run says so. Everything is read over plain SSH commands; nothing is installed on the host.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from bench.errors import HostCheckFailed
from provisioning.hosts.shell import Probe

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Weights:
    """What environment.json records under `weights`."""

    model: str
    revision: str
    pinned: bool
    files: dict[str, str] = field(default_factory=dict)  # path in the snapshot -> sha256
    # "hub": downloaded (or found) in the cache; "generated": built on the host by the
    # weights step (bench.rehearsal_model), its revision the hash of its files' listing.
    source: str = "hub"

    def as_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "revision": self.revision,
            "pinned": self.pinned,
            "source": self.source,
            "files": dict(sorted(self.files.items())),
        }

    def banner(self) -> str:
        pin = "pinned by the launch profile" if self.pinned else "not pinned by the profile"
        made = ", built on the host (generated)" if self.source == "generated" else ""
        return f"weights: {self.model} at {self.revision}, {pin}{made}"


def model_dir(cache: str, model: str) -> str:
    """The model's folder in the hub cache under CACHE (HF_HOME: CACHE/hub/models--...)."""
    return f"{cache.rstrip('/')}/hub/models--{model.replace('/', '--')}"


def has_snapshot(probe: Probe, cache: str, model: str, revision: str) -> bool:
    path = f"{model_dir(cache, model)}/snapshots/{revision}"
    return probe.run(f"test -d {shlex.quote(path)}").ok


def resolved_main(probe: Probe, cache: str, model: str) -> str | None:
    """The commit refs/main names, when the cache has one."""
    res = probe.run(f"cat {shlex.quote(model_dir(cache, model) + '/refs/main')}")
    commit = res.stdout.strip() if res.ok else ""
    return commit if _COMMIT.match(commit) else None


def pin_main(probe: Probe, cache: str, model: str, revision: str) -> None:
    """Point refs/main at the pinned commit: the server's offline lookup of the model
    (no --revision on the card's command line) then finds exactly that snapshot."""
    refs = model_dir(cache, model) + "/refs"
    script = f"mkdir -p {shlex.quote(refs)} && printf %s {revision} > {shlex.quote(refs + '/main')}"
    res = probe.run(f"sh -c {shlex.quote(script)}")
    if not res.ok:
        raise HostCheckFailed(f"could not pin {model} to {revision} in {refs}: {res.stderr}")


def snapshot_hashes(probe: Probe, cache: str, model: str, revision: str) -> dict[str, str]:
    """sha256 of every file of the snapshot: the blob's name when it is one (LFS files),
    else hashed on the host (small files only: config, tokenizer)."""
    snap = f"{model_dir(cache, model)}/snapshots/{revision}"
    script = (
        f"cd {shlex.quote(snap)} && find . \\( -type l -o -type f \\) -print | sort | "
        'while IFS= read -r f; do b=$(basename "$(readlink -f "$f")"); '
        'if printf %s "$b" | grep -Eq "^[0-9a-f]{64}$"; then printf "%s  %s\\n" "$b" "$f"; '
        'else sha256sum "$f"; fi; done'
    )
    res = probe.run(f"sh -c {shlex.quote(script)}")
    if not res.ok:
        raise HostCheckFailed(f"could not read the files of {model} at {revision}: {res.stderr}")
    files: dict[str, str] = {}
    for line in res.stdout.splitlines():
        digest, _, path = line.partition("  ")
        if _SHA256.match(digest) and path:
            files[path.removeprefix("./")] = digest
    return files


def record(
    probe: Probe, cache: str, model: str, pinned_revision: str | None, *, source: str = "hub"
) -> Weights | None:
    """What the run's weights are, after the weights step (None: the cache has no answer)."""
    revision = pinned_revision or resolved_main(probe, cache, model)
    if revision is None or not has_snapshot(probe, cache, model, revision):
        return None
    return Weights(
        model=model,
        revision=revision,
        pinned=pinned_revision is not None,
        files=snapshot_hashes(probe, cache, model, revision),
        source=source,
    )
