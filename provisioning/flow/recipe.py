"""The orchestrator's recipe for one host run: how the image was made (its build arguments,
or the command that builds it here and the id it had), the launch profile with the model
revision it pins, the `python -m provisioning bench` command with the `bench run`
arguments, and what the host must provide. Written into the run directory as recipe.json
before the manifest is made, so the signature covers it (`bench.bundle.recipe` owns the format).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.bundle import recipe as recipe_mod
from bench.results import Results
from provisioning.flow.options import Options
from provisioning.image.build import BuildSpec
from provisioning.preflight.requirements import GIB, Requirements


def host_requirements(req: Requirements) -> dict[str, str]:
    out = {"gpus": str(req.gpus)}
    if req.gpu_model:
        out["gpu_model"] = req.gpu_model
    if req.gpu_memory_mib:
        out["gpu_memory_mib"] = str(req.gpu_memory_mib)
    if req.gpus:
        out["nvidia_driver"] = ">= " + ".".join(str(n) for n in req.min_driver)
        out["container_runtime"] = "NVIDIA container toolkit"
    out["docker"] = "Docker Engine reachable over ssh"
    if req.weights_bytes:
        out["disk_weights_gib"] = f"{req.weights_bytes / GIB:g}"
    if req.image_bytes:
        out["disk_image_gib"] = f"{req.image_bytes / GIB:g}"
    if req.hf_token_required:
        out["hf_token"] = "required (HF_TOKEN)"  # noqa: S105 - a requirement, not a value
    return out


# The make target that builds each Dockerfile stage here (the stream's source).
MAKE_TARGETS = {"bench": "bench-image", "vllm-cpu": "vllm-cpu-image", "vllm": "image"}


def _build_command(build: BuildSpec | None, target: str) -> list[str]:
    if build is None:  # streamed from the machine that ran the orchestrator
        return ["make", MAKE_TARGETS.get(target, "image")]
    words = ["docker", "build", "--target", build.target]
    for name, value in sorted(build.build_args.items()):
        words += ["--build-arg", f"{name}={value}"]
    for name, value in sorted(build.labels.items()):
        words += ["--label", f"{name}={value}"]
    return [*words, "-t", build.tag, "."]


def recipe_for(
    results: Results,
    opts: Options,
    *,
    host: str,
    image_id: str | None,
    weights: Mapping[str, Any] | None,
    command_head: Sequence[str] | None = None,
) -> recipe_mod.Recipe:
    """COMMAND_HEAD: the orchestrator's command up to its options (default `python -m
    provisioning bench HOST`; a Slurm node's: `... bench --slurm PARTITION --nodes N`)."""
    p, req = opts.profile, opts.requirements
    w = dict(weights or {})
    revision = w.get("revision") if isinstance(w.get("revision"), str) else None
    server = recipe_mod.ImageServer(
        image_id=image_id,
        image_ref=opts.image_ref,
        build_target=opts.build.target if opts.build else p.image,
        build_args=dict(opts.build.build_args) if opts.build else {},
        launch_profile=p.name,
        launch_argv=opts.server_argv(),
        model=req.hf_model,
        model_revision=revision,
        revision_pinned=req.model_revision is not None,
    )
    head = list(command_head or ("python", "-m", "provisioning", "bench", host))
    orchestrate = [*head, "--profile", p.name]
    orchestrate += ["--image", opts.image_ref]
    if opts.build is not None:
        orchestrate += ["--image-source", opts.image_source]
        for name, value in sorted(opts.build.build_args.items()):
            if name != "BENCH_VERSION":  # the checkout's own, computed again from git
                orchestrate += ["--build-arg", f"{name}={value}"]
    if not req.download_weights:
        orchestrate.append("--no-weights-download")
    if (opts.traces is not None) != p.server_traces:  # tracing other than the profile says
        orchestrate.append("--server-traces" if opts.traces is not None else "--no-server-traces")
    if opts.workload is not None:  # as given here: a preset's name or this machine's file
        orchestrate += opts.workload.command_args()
    return recipe_mod.for_image(
        results,
        server=server,
        host_requirements=host_requirements(req),
        build_command=_build_command(opts.build, p.image),
        orchestrate=orchestrate,
    )
