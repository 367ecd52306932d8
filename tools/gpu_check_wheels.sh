#!/usr/bin/env bash
# The wheels `python -m tools.gpu_check` needs on a bare GPU machine (Python 3.12, torch,
# triton, numpy, matplotlib; no internet, probably no pydantic-settings or structlog), for
# CPython 3.12 on x86-64 Linux, downloaded here into .whl/ at the versions of
# requirements/runtime.lock (docs/image.md, "GPU check").
#
# The set is what the check's code paths import (bench.host, bench.run, `bench run`, `bench
# twin`; tests/tools/test_gpu_check.py runs them): pydantic-settings and structlog with
# their requirements, and pydantic, pydantic-core, httpx and theirs as well, although the
# machine may have some: installed with --target and put first on PYTHONPATH, ours are the
# ones imported, so the machine's own versions (older, or mismatched with pydantic-core)
# cannot break the check. pydantic-core is the one compiled wheel (cp312, manylinux2014).
# Not needed: docker, fabric, paramiko (provisioning/ only), tabulate (imported nowhere).
#
# On the machine:  python3 -m pip install -q --no-index --no-deps --no-compile \
#   --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/runtime.lock
PACKAGES=(
  pydantic pydantic-core annotated-types typing-extensions typing-inspection
  pydantic-settings python-dotenv
  structlog
  httpx httpcore h11 anyio idna certifi
)
specs=()
for name in "${PACKAGES[@]}"; do
  line=$(grep -E "^${name}==[^ ]+" "$LOCK" | head -n 1) ||
    { echo "gpu_check_wheels: $name is not pinned in $LOCK" >&2; exit 2; }
  specs+=("${line%% *}")
done
rm -rf .whl
mkdir -p .whl
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d .whl "${specs[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
found=$(find .whl -type f -name '*.whl' | wc -l)
if [ "$found" -ne "${#specs[@]}" ]; then
  echo "gpu_check_wheels: ${#specs[@]} packages asked, $found wheels in .whl/" >&2
  exit 1
fi
ls -1 .whl
