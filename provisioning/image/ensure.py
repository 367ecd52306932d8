"""The image and the weights on the host, before the server starts.

Image: identified by its id (the sha256 of its config, the same on every engine). Where it
comes from is the image source:

    stream  the host's image of that tag is used when its id equals this machine's (or
            when this machine has none to compare with); otherwise this machine's image is
            streamed to the host (`docker save` here, `docker load` there, through the
            SDK's SSH channel), with progress
    build   built on the host from this checkout (provisioning.image.build), every time: the
            build cache makes an unchanged tree a matter of seconds
    auto    (default) as stream, but an image that is neither here nor on the host is
            built on the host instead of being an error

Weights: `hf download` in a container of the run's image, into the host's Hugging Face
cache, so that server start-up time is not download time. huggingface_hub resumes partial
files, so a rerun after a failure continues where it stopped. A launch profile whose weights
are generated (the cpu-vllm rehearsal's tiny model, which no hub has) gets them built in a
container of the run's image instead (bench.rehearsal_model) and placed in the same cache
in the hub layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from pydantic import SecretStr

from bench.errors import HostCheckFailed, RunFailed
from provisioning.containers.docker_sdk import ContainerFailed, ImageMissing
from provisioning.containers.engine import ContainerSpec, DockerEngine, Mount
from provisioning.containers.engine_side import EngineSide
from provisioning.containers.local_images import local_image_chunks, local_image_id
from provisioning.image import wheelhouse
from provisioning.image.build import WHEELS_TARGET, BuildSpec, base_images, build_on_host

HF_IN_CONTAINER = "/hf"
# Containers run as the SSH user's uid:gid (so what they write on the host is that user's);
# that uid has no home in the image, and tools (pip, HF) want a writable one.
CONTAINER_HOME = "/tmp"  # noqa: S108
_PROGRESS_STEP_BYTES = 64 << 20
# Building the rehearsal's model: about 20 s of tokenizer training and weights on two cores
# (measured in the vllm-cpu image); a loaded host gets thirty times that.
GENERATE_TIMEOUT_S = 600.0


def ensure_image(
    engine: DockerEngine,
    ref: str,
    host: str,
    out: TextIO,
    *,
    source: str = "stream",
    build: BuildSpec | None = None,
) -> str:
    """Make sure the host has image REF (or builds BUILD there); returns the image id."""
    if source == "build":
        return _build(engine, _need(build, ref), host, out)
    local_id = local_image_id(ref)
    host_id = engine.image_id(ref)
    if host_id is not None and (local_id is None or host_id == local_id):
        print(f"[{host}] image {ref} present ({host_id[:19]})", file=out)
        return host_id
    if local_id is None:
        if source == "auto" and build is not None:
            return _build(engine, build, host, out)
        raise ImageMissing(
            f"image {ref} is neither on {host} nor on this machine",
            hint="build it on the host (--image-source build), build it here "
            "(make image / make bench-image), or pull it by digest",
        )
    print(f"[{host}] streaming {ref} ({local_id[:19]}) ...", file=out)
    loaded = engine.load(_counting(local_image_chunks(ref), out, host))
    if local_id not in loaded and engine.image_id(ref) != local_id:
        raise RunFailed(f"loading {ref} on {host} gave {loaded}, not {local_id}")
    return local_id


def _need(build: BuildSpec | None, ref: str) -> BuildSpec:
    if build is None:
        raise ImageMissing(f"no build of {ref} was described", hint="use --image-source stream")
    return build


def _build(engine: DockerEngine, build: BuildSpec, host: str, out: TextIO) -> str:
    _check_bases(engine, build, host)  # before anything is fetched or built
    print(
        f"[{host}] building {build.tag} (target {build.target}, vLLM commit {build.commit}) "
        "on the host ...",
        file=out,
        flush=True,
    )
    if build.target == WHEELS_TARGET:  # installed from the context: a fresh clone has none
        wheelhouse.ensure(build.root, out)
    image_id = build_on_host(engine, build, host=host, out=out)
    print(f"[{host}] built {build.tag} ({image_id[:19]})", file=out, flush=True)
    return image_id


def _check_bases(engine: DockerEngine, build: BuildSpec, host: str) -> None:
    """Each base image of the build on the host, or a registry its engine reaches; else one
    line saying what to do, before any build or download starts."""
    for base in base_images(build):
        if engine.image_id(base) is not None:
            continue
        why = engine.registry_problem(base)
        if why is None:
            continue
        if build.target == "vllm":
            what = ("load the CUDA base images there (docker save on a machine that has them, "
                    "docker load on the host), or build the image where the registry is "
                    "reachable and let the run stream it (IMAGE_SOURCE=stream)")  # fmt: skip
        else:
            what = ("`make base-image` on it builds a Python base from Debian packages and "
                    "prints its tag: pass it as BUILD_ARGS='PYTHON_BASE=<that tag>'; or build "
                    "the image here and let the run stream it (IMAGE_SOURCE=stream)")  # fmt: skip
        raise HostCheckFailed(
            f"cannot build {build.tag} on {host}: its base image {base} is not there and "
            f"{host}'s Docker engine cannot reach the registry ({why})",
            hint=what,
        )


@dataclass(frozen=True)
class WeightsJob:
    """Where the weights step's container runs and writes: the run's image, the model, the
    host's cache (mounted as HF_HOME), the run's scope and user, and where progress goes."""

    image: str
    model: str
    scope: str
    cache_dir: str
    user: str
    host: str
    out: TextIO


def fetch_weights(
    engine: EngineSide, job: WeightsJob, *, revision: str | None, hf_token: SecretStr | None
) -> None:
    """`hf download` of the model (at REVISION) into the host's cache."""
    env = {"HF_HOME": HF_IN_CONTAINER, "HOME": CONTAINER_HOME}
    if hf_token is not None:
        env["HF_TOKEN"] = hf_token.get_secret_value()
    # `hf` is huggingface_hub's CLI since 1.0 (vLLM needs >= 1.31, which no longer ships
    # `huggingface-cli`); it shows progress and resumes a partial download.
    command = ("hf", "download", job.model, *(("--revision", revision) if revision else ()))
    _weights_container(
        engine, job, command, env, timeout_s=24 * 3600, doing="fetching",
        hint="check HF_TOKEN (gated models) and the disk; a rerun resumes the download",
    )  # fmt: skip


# The interpreter that has torch, transformers and tokenizers in the vllm-cpu image (the
# Dockerfile's `python3 -m venv --without-pip /opt/vllm`; tests/image/test_dockerfile.py
# holds it); bench's own venv (first on PATH) tells where the builder's file is.
GENERATOR_PYTHON = "/opt/vllm/bin/python"
_GENERATE = (
    'exec {python} -P "$(python -c "import bench.rehearsal_model as m; print(m.__file__)")" '
    'hub {hf} "$0"'
)


def generate_weights(engine: EngineSide, job: WeightsJob) -> None:
    """Build the rehearsal's model (bench.rehearsal_model) in a container of the run's image
    and place it as the job's model in the host's cache, in the hub layout; a rerun reuses
    the build."""
    script = _GENERATE.format(python=GENERATOR_PYTHON, hf=HF_IN_CONTAINER)
    _weights_container(
        engine, job, ("sh", "-c", script, job.model),
        {"HF_HOME": HF_IN_CONTAINER, "HOME": CONTAINER_HOME},
        timeout_s=GENERATE_TIMEOUT_S, doing="building",
        hint="the image must be the launch profile's (vllm-cpu: torch, transformers and "
        "tokenizers in /opt/vllm); rerun once the cause above is fixed",
    )  # fmt: skip


def _weights_container(
    engine: EngineSide,
    job: WeightsJob,
    command: tuple[str, ...],
    env: dict[str, str],
    *,
    timeout_s: float,
    doing: str,
    hint: str,
) -> None:
    """One container of the weights step, the host's cache mounted, its log followed; a
    failure is ContainerFailed with the log's last lines."""
    cid = engine.start(
        ContainerSpec(
            image=job.image,
            command=command,
            run_id=job.scope,
            role="weights",
            environment=env,
            mounts=(Mount(job.cache_dir, HF_IN_CONTAINER),),
            user=job.user,
        )
    )
    host, out = job.host, job.out
    engine.follow_logs(cid, lambda line: print(f"[{host}] {line}", file=out, flush=True))
    code = engine.wait(cid, timeout_s=timeout_s)
    if code != 0:
        tail = engine.log_tail(cid)
        raise ContainerFailed(
            f"{doing} {job.model} on {host} failed (exit {code}); last lines:\n{tail}",
            log_tail=tail,
            hint=hint,
        )


def gpu_selftest(
    engine: EngineSide, *, image: str, scope: str, user: str, gpus: int, host: str, out: TextIO
) -> None:
    """The image's self-test on the host's GPUs (docker/image_selftest.py, part `gpu` too):
    torch sees the GPUs and a Triton kernel compiles (against Python.h) and runs on each,
    before minutes of weight loading depend on it."""
    cid = engine.start(
        ContainerSpec(
            image=image,
            command=("image-selftest", "--parts", "python,cc,cuda,gpu"),
            run_id=scope,
            role="selftest",
            environment={"HOME": CONTAINER_HOME, "TRITON_CACHE_DIR": f"{CONTAINER_HOME}/triton"},
            user=user,
            gpus=gpus,
        )
    )
    code = engine.wait(cid, timeout_s=900)
    tail = engine.log_tail(cid)
    if code != 0:
        raise ContainerFailed(
            f"the image's self-test failed on {host}'s GPUs (exit {code}):\n{tail}",
            log_tail=tail,
            hint="the line above names the missing piece; rebuild the image or fix the host",
        )
    last = tail.strip().splitlines()[-1:] or ["self-test passed"]
    print(f"[{host}] {last[0][:300]}", file=out)


def _counting(chunks: Iterator[bytes], out: TextIO, host: str) -> Iterator[bytes]:
    sent = 0
    for chunk in chunks:
        sent += len(chunk)
        if sent // _PROGRESS_STEP_BYTES != (sent - len(chunk)) // _PROGRESS_STEP_BYTES:
            print(f"[{host}] streamed {sent >> 20} MiB", file=out, flush=True)
        yield chunk
