# syntax=docker/dockerfile:1
# The appliance's images, three stages:
#
#   vllm-build  CUDA 13.2 devel: vLLM compiled from source at the pinned commit
#   bench       CPU-only: the bench package on a plain Python base (the twin, CI)
#   vllm        (default) CUDA 13.2 runtime + the vLLM build + the bench package
#
#   make image                   docker build --target vllm  (a host that reaches the registry)
#   make bench-image             docker build --target bench
#
# Base images are pinned by digest. `make lock` re-resolves the tags below with
# `docker buildx imagetools inspect` and rewrites the digests. Where the current ones come
# from: they were not resolved on this project's machines (no registry is reachable there);
# they are the multi-arch digests that public repositories on GitHub pin for these exact
# tags (nvidia/cuda 13.2.1 devel/runtime ubuntu24.04 appear as a pair in projects pinning
# their CUDA 13.2 builds; python:3.11-slim-bookworm in several Python services), found
# with a code search in December 2026. Run `make lock` on a connected host to refresh them.
#
# Only Dockerfile syntax that the Docker Engine 20.10 builtin frontend understands is used
# here (no heredocs, no COPY --link), so the `bench` target also builds offline.

ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.2.1-devel-ubuntu24.04@sha256:44a9504c6dfb50b1241464241b02a93871928f373de6f5a644cf5fe9f080aa63
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.2.1-runtime-ubuntu24.04@sha256:4c17c2e7474ca1d470428b25e87e95756f51e7da3b663859894a03bc5a7ebdae
ARG PYTHON_BASE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# The server under test. The card shows only a 12-hex prefix of the commit; the version
# string is what vLLM reports for a clean build of it (setuptools-scm, from git tags).
ARG VLLM_REPO=https://github.com/vllm-project/vllm.git
ARG VLLM_COMMIT=73a5831127a9
ARG VLLM_VERSION=0.30.1rc1.dev452+g73a583112
ARG CUDA_VERSION=13.2
ARG BENCH_VERSION=0.0.0+unknown

# ---------------------------------------------------------------------------------------
FROM ${CUDA_DEVEL_IMAGE} AS vllm-build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG VLLM_REPO
ARG VLLM_COMMIT
ARG VLLM_VERSION
ARG CUDA_VERSION
# Blackwell RTX PRO 6000 is compute capability 12.0; widen with e.g. "9.0;10.0;12.0".
ARG CUDA_ARCHS=12.0
ARG MAX_JOBS=16
ARG NVCC_THREADS=2
# PyTorch wheels for CUDA 13.0 run on the 13.2 toolkit and driver (minor-version
# compatibility); vLLM's own kernels are compiled here by nvcc 13.2.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130

ENV DEBIAN_FRONTEND=noninteractive \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CCACHE_DIR=/root/.cache/ccache

# Distribution packages float within Ubuntu 24.04's updates (exact apt pins break as the
# archive moves on); what must be exact here is the CUDA base digest and the vLLM commit.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        git ca-certificates ccache python3.12 python3.12-dev python3.12-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3.12 -m venv /opt/venv
COPY docker/check_version.sh /usr/local/bin/check_version

WORKDIR /src
# Tags are needed: vLLM derives its version from `git describe`. A blob-less clone has
# every commit and tag; core.abbrev pins the abbreviated hash to the 9 hex digits of the
# published version (git's automatic length depends on the object count of the clone).
RUN git clone --filter=blob:none --no-checkout "${VLLM_REPO}" vllm \
    && git -C vllm config core.abbrev 9 \
    && git -C vllm checkout --quiet "${VLLM_COMMIT}" \
    && head=$(git -C vllm rev-parse HEAD) \
    && case "${head}" in "${VLLM_COMMIT}"*) ;; \
        *) echo "vLLM checkout is ${head}, not ${VLLM_COMMIT}" >&2; exit 1 ;; esac \
    && echo "vLLM ${head}"

WORKDIR /src/vllm
# VLLM_MAIN_CUDA_VERSION: vLLM appends "+cu132" to its version when nvcc differs from its
# main CUDA version (13.0); matching it keeps the published version string.
ENV VLLM_TARGET_DEVICE=cuda \
    VLLM_MAIN_CUDA_VERSION=${CUDA_VERSION} \
    TORCH_CUDA_ARCH_LIST=${CUDA_ARCHS} \
    MAX_JOBS=${MAX_JOBS} \
    NVCC_THREADS=${NVCC_THREADS}
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -r requirements/build.txt --extra-index-url "${TORCH_INDEX_URL}"
# vLLM's setup.py uses ccache when it is on PATH; the cache mount keeps objects across builds.
RUN --mount=type=cache,target=/root/.cache/ccache \
    --mount=type=cache,target=/root/.cache/pip \
    pip wheel --no-build-isolation --no-deps --wheel-dir /dist . \
    && pip install --extra-index-url "${TORCH_INDEX_URL}" /dist/vllm-*.whl
RUN test -z "$(git status --porcelain --untracked-files=no)" \
        || { echo "the vLLM tree is dirty; its version would not match" >&2; exit 1; } \
    && got=$(python -P -c 'import vllm; print(vllm.__version__)') \
    && VLLM_COMMIT="$(git rev-parse HEAD)" check_version "${got}" \
    && printf '{"vllm_commit": "%s", "vllm_version": "%s", "cuda": "%s", "nvcc": "%s", "torch": "%s"}\n' \
        "$(git rev-parse HEAD)" "${got}" "${CUDA_VERSION}" \
        "$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')" \
        "$(python -P -c 'import torch; print(torch.__version__)')" \
        > /opt/venv/vllm-build.json \
    && cat /opt/venv/vllm-build.json

# ---------------------------------------------------------------------------------------
# CPU-only: runs the twin and the CI tests. The base is a build argument so that an
# offline machine can build it on a locally made Python image (tests/setup/base_image.sh).
FROM ${PYTHON_BASE} AS bench
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG BENCH_VERSION
ARG PYTHON_BASE
LABEL org.opencontainers.image.title="bench" \
      org.opencontainers.image.description="LLM inference benchmark appliance: bench CLI and the vLLM twin (CPU-only)" \
      org.opencontainers.image.version="${BENCH_VERSION}" \
      org.opencontainers.image.base.name="${PYTHON_BASE}" \
      bench.version="${BENCH_VERSION}"
ENV VIRTUAL_ENV=/opt/bench \
    PATH=/opt/bench/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/bench \
    && useradd --create-home --uid 1000 bench \
    && mkdir -p /results && chown bench:bench /results
WORKDIR /src/bench
# Dependencies (and the build backend) first, from pyproject.toml alone, so that a change
# to bench/ only reinstalls the package itself, offline and in seconds.
COPY pyproject.toml ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt
COPY bench ./bench
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --no-deps --no-build-isolation . && bench --version
USER 1000:1000
WORKDIR /results
EXPOSE 8000
CMD ["bench", "--help"]

# ---------------------------------------------------------------------------------------
FROM ${CUDA_RUNTIME_IMAGE} AS vllm
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG VLLM_COMMIT
ARG VLLM_VERSION
ARG CUDA_VERSION
ARG BENCH_VERSION
ARG CUDA_DEVEL_IMAGE
ARG CUDA_RUNTIME_IMAGE
LABEL org.opencontainers.image.title="bench-vllm" \
      org.opencontainers.image.description="vLLM built from source on CUDA 13.2, with the bench package" \
      org.opencontainers.image.version="${VLLM_VERSION}" \
      org.opencontainers.image.base.name="${CUDA_RUNTIME_IMAGE}" \
      bench.vllm.commit="${VLLM_COMMIT}" \
      bench.vllm.version="${VLLM_VERSION}" \
      bench.cuda.version="${CUDA_VERSION}" \
      bench.version="${BENCH_VERSION}" \
      bench.base.build="${CUDA_DEVEL_IMAGE}" \
      bench.base.runtime="${CUDA_RUNTIME_IMAGE}"
ENV DEBIAN_FRONTEND=noninteractive \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Triton compiles small launchers with the system C compiler at run time. Unpinned for
# the same reason as in vllm-build.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3.12 gcc libc6-dev libnuma1 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=vllm-build /opt/venv /opt/venv
COPY docker/check_version.sh /usr/local/bin/check_version
RUN check_version "$(python -P -c 'import vllm; print(vllm.__version__)')"
WORKDIR /src/bench
COPY pyproject.toml ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt
COPY bench ./bench
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --no-deps --no-build-isolation . && bench --version
WORKDIR /results
EXPOSE 8000
CMD ["vllm", "--help"]
