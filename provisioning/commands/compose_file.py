"""compose.yaml, rendered from the launch profiles so the launch flags live in one place.

    python -m provisioning.commands.compose_file > compose.yaml        (make compose)
    python -m provisioning.commands.compose_file --check compose.yaml  (exit 1 when out of date)

Commands are written as YAML sequences of JSON strings: JSON's string syntax is a
subset of YAML's double-quoted scalars, so every token (the speculative-config JSON
included) survives exactly; a test reads it back through `docker compose config`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.launch_profile import LaunchProfile, load_launch_profile
from provisioning.preflight.requirements import load_requirements

# What the `bench` service runs once the server is healthy: the published sweep against
# whichever server the active profile started (both answer as `server` on the network).
# The default tag of the GPU image (docker/build.sh vllm); a test checks it against the
# Dockerfile's VLLM_COMMIT.
VLLM_COMMIT = "73a5831127a9"

BENCH_RUN_ARGV: tuple[str, ...] = (
    "bench",
    "run",
    "--url",
    "http://server:8000",
    "--out",
    "/results/run",
)

_TEMPLATE = """\
# GENERATED from bench/launch_profiles/{server_name}.toml and {twin_name}.toml by
# `make compose`: edit the profiles, not this file (a test fails when it is out of date).
#
#   docker compose --profile vllm up   the published launch on {gpus} GPUs, then the sweep
#   docker compose --profile twin up   the twin in vLLM's place: no GPU, any host with Docker
#
# VLLM_API_KEY goes from your environment to the server and to bench: never into this
# file, never onto a command line. The server's port is published on 127.0.0.1 only.
# Results: the `results` volume (docker compose cp bench:/results ./results). An interrupted
# sweep continues with `docker compose --profile vllm run bench bench run --resume
# /results/run`; `docker compose down -v` starts afresh.
name: bench

services:
  vllm:
    profiles: [vllm]
    image: ${{BENCH_VLLM_IMAGE:-bench-vllm:{vllm_commit}}}
    command:{server_command}
    environment:
{server_env}
{server_ipc}    ports:
      - "127.0.0.1:${{BENCH_PORT:-{server_port}}}:{server_port}"
{server_volumes}    depends_on:
      weights:
        condition: service_completed_successfully
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: {gpus}
              capabilities: [gpu]
    networks:
      default:
        aliases: [server]
    healthcheck:
      test: {server_health}
      interval: 30s
      timeout: 10s
      retries: 3
      # Loading the weights from disk and capturing CUDA graphs takes many minutes; the
      # download is not in it (the weights service ran first, the hub is offline here).
      start_period: {server_start_s}s

  # The weights as their own step, with progress, at the profile's pinned revision when
  # it has one: the server's start never includes a ~200 GB download.
  weights:
    profiles: [vllm]
    image: ${{BENCH_VLLM_IMAGE:-bench-vllm:{vllm_commit}}}
    command:{weights_command}
    environment:
      - HF_TOKEN
{weights_volumes}
  twin:
    profiles: [twin]
    image: ${{BENCH_IMAGE:-bench:{bench_tag}}}
    command:{twin_command}
    environment:
{twin_env}
    ports:
      - "127.0.0.1:${{BENCH_PORT:-{twin_port}}}:{twin_port}"
    networks:
      default:
        aliases: [server]
    healthcheck:
      test: {twin_health}
      interval: 2s
      timeout: 5s
      retries: 3
      start_period: {twin_start_s}s

  bench:
    profiles: [vllm, twin]
    image: ${{BENCH_IMAGE:-bench:{bench_tag}}}
    command:{bench_command}
    environment:
      - VLLM_API_KEY
    depends_on:
      vllm:
        condition: service_healthy
        required: false
      twin:
        condition: service_healthy
        required: false
    volumes:
      - results:/results

volumes:
  results:
  # The JIT caches (PTX, Triton, FlashInfer, torch.compile): only the first start compiles.
  jit:
"""


def _flow(tokens: Sequence[str]) -> str:
    return "[" + ", ".join(json.dumps(t) for t in tokens) + "]"


def _block(tokens: Sequence[str]) -> str:
    """A block sequence, one token a line, under a key indented by four spaces."""
    return "".join(f"\n      - {json.dumps(t)}" for t in tokens)


def _env(profile: LaunchProfile) -> str:
    # A bare name passes the variable through from the caller's environment.
    return "\n".join(f"      - {name}" for name in profile.secret_env) or "      []"


def _health(profile: LaunchProfile) -> str:
    probe = (
        "import urllib.request; "
        f"urllib.request.urlopen('http://127.0.0.1:{profile.port}/health', timeout=5)"
    )
    return _flow(["CMD", "python", "-c", probe])


def _ipc(profile: LaunchProfile) -> str:
    return "    ipc: host\n" if profile.ipc_host else ""


def _volumes(profile: LaunchProfile, *, jit: bool = True) -> str:
    lines = []
    if profile.model_cache is not None:
        lines.append(f"      - ${{HF_CACHE_DIR:-~/.cache/huggingface}}:{profile.model_cache}\n")
    if jit and profile.gpus:
        lines.append("      - jit:/var/cache/jit\n")
    return "    volumes:\n" + "".join(lines) if lines else ""


def _server_env(profile: LaunchProfile) -> str:
    # The weights service fetched them: the server loads from the cache, never downloads.
    return _env(profile) + ("\n      - HF_HUB_OFFLINE=1" if profile.model_cache else "")


def _weights_command(profile: LaunchProfile) -> str:
    # The model the host check knows for this profile (host_requirements.toml), as the
    # orchestrator's weights step fetches it.
    model = load_requirements(profile.name, profile.gpus).hf_model or profile.argv[2]
    revision = ("--revision", profile.model_revision) if profile.model_revision else ()
    return _block(("hf", "download", model, *revision))


# The bench image's tag: `bench:latest`, which docker/build.sh gives the last CPU image it
# built beside `bench:<version>`. Not the version: that is git's and changes with every
# commit, while compose.yaml is generated and checked in.
BENCH_TAG = "latest"


def render(server: LaunchProfile, twin: LaunchProfile, bench_tag: str = BENCH_TAG) -> str:
    """compose.yaml for `server` (a GPU launch) with `twin` as its stand-in."""
    return _TEMPLATE.format(
        server_name=server.name,
        twin_name=twin.name,
        gpus=server.gpus,
        vllm_commit=VLLM_COMMIT,
        bench_tag=bench_tag,
        server_command=_block(server.argv),
        server_env=_server_env(server),
        server_port=server.port,
        server_ipc=_ipc(server),
        server_volumes=_volumes(server),
        weights_command=_weights_command(server),
        weights_volumes=_volumes(server, jit=False),
        server_health=_health(server),
        server_start_s=int(server.startup_timeout_s),
        twin_command=_block(twin.argv),
        twin_env=_env(twin),
        twin_port=twin.port,
        twin_health=_health(twin),
        twin_start_s=int(twin.startup_timeout_s),
        bench_command=_block(BENCH_RUN_ARGV),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provisioning.commands.compose_file")
    parser.add_argument("--check", type=Path, help="fail unless this file is up to date")
    args = parser.parse_args(argv)
    text = render(load_launch_profile("published"), load_launch_profile("twin"))
    if args.check is None:
        sys.stdout.write(text)
        return 0
    if not args.check.is_file() or args.check.read_text(encoding="utf-8") != text:
        print(f"{args.check} is out of date: run `make compose`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
