#!/usr/bin/env bash
# Build the offline Python base image for the Dockerfile's `bench` target.
#
# No container registry is reachable here, so the base comes from Debian's own packages:
# debootstrap a minimal bookworm with python3.11, venv and pip, and `docker import` it.
# Cached by tag: the tag carries a hash of this script, so an edit rebuilds and a rerun
# reuses. Prints the tag on stdout; progress goes to stderr.
#
# Extra CA certificates of this machine (/usr/local/share/ca-certificates: an egress proxy
# re-signs HTTPS) are copied in, so pip inside `docker build --network host` trusts PyPI
# exactly as pip on the host does. A machine without such certificates copies none.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
REPO=${BENCH_BASE_REPO:-bench-base}
SUITE=bookworm
MIRROR=${BENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3.11,python3-venv,python3-pip,ca-certificates
recipe_hash=$( { cat "$0"; ls /usr/local/share/ca-certificates 2>/dev/null || true; } \
    | sha256sum | cut -c1-12)
TAG="$REPO:$SUITE-py311-$recipe_hash"

say() { echo "base_image.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

docker version >/dev/null 2>&1 || die "no Docker engine answers; run tests/setup/docker.sh first"

if docker image inspect "$TAG" >/dev/null 2>&1; then
    say "reusing $TAG"
    echo "$TAG"
    exit 0
fi

started=$(date +%s)
if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
        --no-install-recommends debootstrap >/dev/null
fi

work=$(mktemp -d /var/tmp/bench-base.XXXXXX)
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
rootfs="$work/rootfs"

say "debootstrap $SUITE ($PACKAGES) from $MIRROR"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" \
    >"$work/debootstrap.log" 2>&1 \
    || die "debootstrap failed; last lines: $(tail -n 5 "$work/debootstrap.log" | tr '\n' ' ')"

if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
fi
# Smaller image: no package lists, no docs, no caches.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*

say "importing as $TAG"
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap $SUITE minbase + $PACKAGES (tests/setup/base_image.sh)" \
    - "$TAG" >/dev/null
docker tag "$TAG" "$REPO:latest"
say "built $TAG in $(( $(date +%s) - started )) s ($(docker image inspect -f '{{.Size}}' "$TAG" | numfmt --to=iec))"
echo "$TAG"
