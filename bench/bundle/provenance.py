"""What a run's records say about where its figures come from: bench's commit and whether
its tree was dirty, the server's image and its package freeze, the model's weights.

Read from results.json's `bench_version` and environment.json as plain JSON (a bundle may
come from another version of bench, and the orchestrator edits environment.json as JSON):
every reader here takes whatever it is given and answers None for what is not recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bench import is_dirty

_COMMIT_PART = re.compile(r"g([0-9a-f]{7,40})")
NOT_RECORDED = "—"


def bench_commit(version: str) -> str | None:
    """The commit in a setuptools-scm version (`0.2.0.dev3+g25747f667.d20261203`), or None
    (a version made at a tag or outside git names none)."""
    for part in version.partition("+")[2].split("."):
        if m := _COMMIT_PART.fullmatch(part):
            return m.group(1)
    return None


def bench_identity(version: str) -> str:
    """`bench 0.2.0.dev3+g2574 (commit 2574, clean tree)` in words."""
    commit = bench_commit(version)
    if commit is None:
        return f"bench {version} (no commit recorded: built outside a git checkout)"
    tree = "dirty tree" if is_dirty(version) else "clean tree"
    return f"bench {version} (commit {commit}, {tree})"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def image_of(env: Any) -> dict[str, Any]:
    return _dict(_dict(env).get("image"))


def image_id(env: Any) -> str | None:
    digest = image_of(env).get("digest")
    return str(digest) if digest else None


def image_labels(env: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(image_of(env).get("labels")).items()}


def server_packages(env: Any, *, twin: bool) -> dict[str, str] | None:
    """The server's Python packages, name -> version: the image's freeze (its self-test's
    `packages`), else, for the twin (which runs in bench's own Python), bench's freeze."""
    found = _dict(image_of(env).get("selftest")).get("packages")
    if not found and twin:
        found = _dict(_dict(env).get("bench")).get("packages")
    if not isinstance(found, dict) or not found:
        return None
    return {str(k): str(v) for k, v in found.items()}


def weights_of(env: Any) -> dict[str, Any]:
    return _dict(_dict(env).get("weights"))


def model_revision(env: Any) -> str | None:
    revision = weights_of(env).get("revision")
    return str(revision) if revision else None


def weights_line(env: Any, *, twin: bool) -> str:
    """One line for a verdict header: whether the weights were pinned."""
    w = weights_of(env)
    if w.get("model") and w.get("revision"):
        pin = "pinned" if w.get("pinned") else "not pinned"
        made = ", generated on the host" if w.get("source") == "generated" else ""
        return f"weights: {w['model']} at {w['revision']}, {pin}{made}"
    if twin:
        return "weights: not applicable (twin)"
    if w.get("note"):
        return f"weights: {w['note']}"
    return "weights: not recorded"


def package_changes(a: Mapping[str, str], b: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(name, version in a, version in b) for every package whose version differs, a package
    one side lacks shown as —; sorted by name."""
    return [
        (name, a.get(name, NOT_RECORDED), b.get(name, NOT_RECORDED))
        for name in sorted(set(a) | set(b))
        if a.get(name) != b.get(name)
    ]
