"""Preflight checks of a host's storage: free space for what the run will download (the
weights into the model cache, the image into Docker's root), and the weights the launch
profile pins (present, or to be downloaded)."""

from __future__ import annotations

import shlex

from provisioning.hosts.shell import Probe
from provisioning.image import weights
from provisioning.preflight.report import Check, Status
from provisioning.preflight.requirements import GIB, Requirements


def _shell_path(path: str) -> str:
    """PATH as a POSIX shell word, a leading ~ as the account's "$HOME"."""
    return '"$HOME"' + shlex.quote(path[1:]) if path.startswith("~") else shlex.quote(path)


def _free_bytes(probe: Probe, path: str) -> tuple[int, str] | None:
    """Free bytes on the filesystem that holds PATH (its nearest existing parent)."""
    quoted = _shell_path(path)
    script = f'p={quoted}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; df -PB1 "$p"'
    res = probe.run(f"sh -c {shlex.quote(script)}")
    if not res.ok:
        return None
    last = res.stdout.strip().splitlines()[-1].split()
    return int(last[3]), last[5]


def _present_bytes(probe: Probe, cache: str, model: str) -> int:
    quoted = _shell_path(cache)
    sub = shlex.quote("/hub/models--" + model.replace("/", "--"))
    res = probe.run(f"sh -c {shlex.quote(f'du -sb {quoted}{sub} 2>/dev/null || echo 0')}")
    try:
        return int(res.stdout.split()[0])
    except (ValueError, IndexError):
        return 0


def check_disk(probe: Probe, req: Requirements, model_cache: str, info: dict[str, object]) -> Check:
    need: dict[str, int] = {}
    where: dict[str, str] = {}
    cache_fs = _free_bytes(probe, model_cache)
    if req.weights_bytes and req.hf_model:
        have = _present_bytes(probe, model_cache, req.hf_model)
        if cache_fs is None:
            return Check("disk", Status.FAIL, f"cannot stat {model_cache}", "check model_cache")
        need[cache_fs[1]] = max(0, req.weights_bytes - have)
        where[cache_fs[1]] = "weights"
    image_present = False
    if req.image_ref:
        image_present = probe.run(f"docker image inspect {shlex.quote(req.image_ref)}").ok
    root = str(info.get("DockerRootDir") or "/var/lib/docker")
    docker_fs = _free_bytes(probe, root)
    if req.image_bytes and not image_present and docker_fs is not None:
        need[docker_fs[1]] = need.get(docker_fs[1], 0) + req.image_bytes
        where[docker_fs[1]] = " + ".join(filter(None, [where.get(docker_fs[1]), "image"]))
    free = {fs[1]: fs[0] for fs in (cache_fs, docker_fs) if fs is not None}
    parts, short = [], []
    for mount, bytes_needed in need.items():
        free_gib, need_gib = free[mount] / GIB, bytes_needed / GIB
        parts.append(f"{mount}: {free_gib:.0f} GiB free, {where[mount]} need {need_gib:.0f}")
        if free[mount] < bytes_needed:
            short.append(mount)
    if not need:
        return Check("disk", Status.OK, "nothing to download (weights and image present)")
    if short:
        return Check("disk", Status.FAIL, "; ".join(parts), f"free space on {', '.join(short)}")
    return Check("disk", Status.OK, "; ".join(parts))


def _pinned_weights(
    probe: Probe, req: Requirements, cache: str, model_cache: str, *, model: str, rev: str
) -> Check:
    """The weights check when the profile pins a revision."""
    if weights.has_snapshot(probe, cache, model, rev):
        return Check("weights", Status.OK, f"{model} at {rev} (pinned) in {model_cache}")
    if req.download_weights:
        return Check("weights", Status.OK, f"{model} at {rev} (pinned) will be downloaded")
    return Check(
        "weights",
        Status.FAIL,
        f"{model} at the pinned {rev} is not in {model_cache} and downloads are off",
        f"on the host: HF_HOME={model_cache} hf download {model} --revision {rev} "
        "(or run without --no-weights-download)",
    )


def check_weights(probe: Probe, req: Requirements, model_cache: str) -> Check:
    """The pinned revision (or, unpinned, refs/main) in the host's cache when downloads are
    off; otherwise what the weights step will fetch."""
    name = "weights"
    if not (req.weights_bytes and req.hf_model):
        return Check(name, Status.SKIP, "not applicable (the launch profile loads no weights)")
    if req.weights_generated:  # no hub has them: nothing to pin, nothing to download
        return Check(name, Status.OK, f"{req.hf_model}: built on the host by the weights step")
    cache = model_cache
    if cache.startswith("~"):
        cache = probe.run('printf %s "$HOME"').stdout.strip() + cache[1:]
    model, rev = req.hf_model, req.model_revision
    if rev is not None:
        return _pinned_weights(probe, req, cache, model_cache, model=model, rev=rev)
    main = weights.resolved_main(probe, cache, model)
    if req.download_weights:
        return Check(name, Status.WARN, f"{model} not pinned: the hub's main is fetched", "")
    if main is not None and weights.has_snapshot(probe, cache, model, main):
        return Check(name, Status.WARN, f"{model} at {main}, not pinned by the profile")
    return Check(
        name,
        Status.FAIL,
        f"{model} is not in {model_cache} and downloads are off",
        f"on the host: HF_HOME={model_cache} hf download {model}",
    )
