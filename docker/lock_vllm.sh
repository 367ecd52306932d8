#!/usr/bin/env bash
# `make lock-vllm`: resolve the vllm-build stage's Python for the pinned vLLM commit without
# constraints, then keep what it installed as requirements/vllm/vllm-<commit>.constraints
# (name==version, one a line). The next build of that commit installs exactly those.
#
# Needs what the GPU image needs (docker/build.sh vllm): the registry (the CUDA devel base),
# GitHub (vLLM's source), BuildKit, and a build host big enough to compile vLLM (about 40
# minutes on 16 cores); no GPU. Elsewhere it stops first, with the reason, and writes nothing.
# VLLM_COMMIT (and VLLM_VERSION, for another commit than the Dockerfile's) pass through.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=docker/registry.sh
. "$here/registry.sh"

die() { echo "lock_vllm.sh: error: $*" >&2; exit 1; }

commit=${VLLM_COMMIT:-$(sed -n 's/^ARG VLLM_COMMIT=//p' "$root/Dockerfile")}
[[ "$commit" =~ ^[0-9a-f]{7,40}$ ]] || die "VLLM_COMMIT=$commit is not a commit"
docker version >/dev/null 2>&1 || die "no Docker engine answers (start dockerd)"
if ! why=$(registry_problem); then
    die "cannot resolve the vLLM build's dependencies here: $why"
fi
args=(--target vllm-build --build-arg "VLLM_COMMIT=$commit" --build-arg VLLM_CONSTRAINTS=none)
if [ -n "${VLLM_COMMIT:-}" ]; then args+=(--build-arg "VLLM_VERSION=${VLLM_VERSION:-}"); fi
tag="vllm-bench-lock:$commit"
DOCKER_BUILDKIT=1 docker build "${args[@]}" -t "$tag" "$root" >&2

out="$root/requirements/vllm/vllm-$commit.constraints"
base=$(sed -n 's/^ARG CUDA_DEVEL_IMAGE=//p' "$root/Dockerfile")
{
    echo "# The vllm-build stage's packages for vLLM $commit, resolved without constraints by"
    echo "# \`make lock-vllm\` on $(date -u +%Y-%m-%d) on $base."
    echo "# vLLM itself (built from source) is not listed; see docs/reproducibility.md."
    docker run --rm --entrypoint pip "$tag" freeze --all \
        | grep -v -E '^(vllm([ =@]|$)|-e )' | grep -v ' @ ' | LC_ALL=C sort -f
} > "$out.tmp"
grep -q '^torch==' "$out.tmp" || { rm -f "$out.tmp"; die "the build's freeze has no torch: not written"; }
mv "$out.tmp" "$out"
echo "$out"
