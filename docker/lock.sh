#!/usr/bin/env bash
# Re-resolve the Dockerfile's base images: for each pinned `ARG NAME=repo:tag@sha256:...`
# ask the registry for the tag's current (multi-arch) digest and rewrite the pin.
# Needs a host that reaches the registry; elsewhere it stops with the reason.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dockerfile=${1:-$here/../Dockerfile}
# shellcheck source=docker/registry.sh
. "$here/registry.sh"

if ! why=$(registry_problem); then
    echo "lock.sh: error: cannot re-resolve base image digests: $why" >&2
    exit 1
fi
for name in CUDA_DEVEL_IMAGE CUDA_RUNTIME_IMAGE PYTHON_BASE; do
    ref=$(sed -n "s/^ARG $name=\\(.*\\)$/\\1/p" "$dockerfile")
    [ -n "$ref" ] || { echo "lock.sh: error: no ARG $name in $dockerfile" >&2; exit 1; }
    tag=${ref%@*}
    digest=$(docker buildx imagetools inspect --format '{{json .Manifest}}' "$tag" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["digest"])')
    case "$digest" in sha256:*) ;; *) echo "lock.sh: error: no digest for $tag" >&2; exit 1 ;; esac
    sed -i "s|^ARG $name=.*$|ARG $name=$tag@$digest|" "$dockerfile"
    echo "$name=$tag@$digest"
done
