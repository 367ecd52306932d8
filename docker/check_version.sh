#!/bin/bash
# check_version GOT: is GOT (vllm.__version__) the vLLM this image was built for?
# With VLLM_VERSION set (the pinned build): exactly that string. Without it (another
# commit, e.g. `make compare-commits`): a version whose local part names VLLM_COMMIT
# (setuptools-scm writes "+g<hash>" from `git describe`), so a wrong checkout still fails.
set -euo pipefail
got=$1
if [ -n "${VLLM_VERSION:-}" ]; then
    if [ "${got}" != "${VLLM_VERSION}" ]; then
        echo "vLLM reports ${got}, expected ${VLLM_VERSION}" >&2
        exit 1
    fi
    exit 0
fi
case "${got}" in
    *+g*) hash=${got##*+g}; hash=${hash%%.*} ;;
    *) echo "vLLM reports ${got}, which names no commit (expected +g<hash> of ${VLLM_COMMIT})" >&2; exit 1 ;;
esac
if [[ ${#hash} -lt 7 || ( "${VLLM_COMMIT}" != "${hash}"* && "${hash}" != "${VLLM_COMMIT}"* ) ]]; then
    echo "vLLM reports ${got}, built from ${hash}, not ${VLLM_COMMIT}" >&2
    exit 1
fi
