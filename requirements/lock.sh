#!/usr/bin/env bash
# Re-resolve the locks of bench's own Python (docs/reproducibility.md) with pip-compile:
#
#   requirements/runtime.lock  [project] dependencies + the report extra (matplotlib: the report
#                              is made inside the container) + the live extra (bench run's
#                              --otel-url and --metrics-port in the container) + [build-system]
#                              requires: the images
#   requirements/dev.lock      the same + the dev extra: `make setup`
#
# For CPython 3.11 on linux x86_64 (pip-compile resolves for the interpreter it runs on),
# against PyPI alone: this machine's pip configuration (local wheel folders and indexes) is
# left out, so the hashes are PyPI's files, the same ones an image build downloads.
# Pins already in a lock are kept while pyproject.toml allows them; UPGRADE=1 moves every
# package to the newest release that fits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}

"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || { echo "lock.sh: error: the locks are for Python 3.11; $python is not" >&2; exit 1; }
upgrade=()
[ -z "${UPGRADE:-}" ] || upgrade=(--upgrade)

lock() {
    local out=$1; shift
    # --allow-unsafe: pip and setuptools are pinned too (--require-hashes needs every one).
    env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null \
        CUSTOM_COMPILE_COMMAND="make lock" \
        "$python" -m piptools compile --quiet --generate-hashes --allow-unsafe --strip-extras \
        --no-emit-index-url --no-emit-find-links --build-deps-for wheel "${upgrade[@]}" \
        --output-file "$out" "$@" pyproject.toml
    echo "$out"
}
cd "$root"
lock requirements/runtime.lock --extra report --extra live
lock requirements/dev.lock --extra dev --extra report
