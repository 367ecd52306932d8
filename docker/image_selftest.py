#!/usr/bin/env python3
"""The image's self-test: what the server needs at run time is present, or the build fails.

Parts (`--parts`, comma-separated; each failure names the missing piece and the package
that provides it):

  python  the interpreter, sysconfig's include directory, the bench package importable,
          matplotlib and its compiled parts importable (`bench report` runs in the container
          before signing), the image's installed packages (name and version)
  cc      a C file that includes Python.h compiles with the image's compiler against
          sysconfig's include path: Triton builds its launcher exactly so at run time
  cuda    nvcc is present and reports the image's CUDA (BENCH_CUDA_VERSION); `import vllm, torch,
          triton, flashinfer`; torch's own CUDA is the expected one (BENCH_TORCH_CUDA); the
          FlashInfer JIT cache matches FlashInfer's version
  gpu     (on a GPU host, `make smoke`) torch sees the GPUs, a Triton kernel compiles and
          runs on each of them
  cpu     (the `vllm-cpu` image) in the server's own interpreter (BENCH_VLLM_PYTHON):
          torch is a CPU build, vLLM's CPU kernels import (libnuma), vLLM names its
          platform "cpu", and a matrix product runs

The facts found (versions, torch's CUDA, FlashInfer's version and the sampler setting vLLM
will use) are written as JSON to --out (the images keep /opt/bench/image.json), and the
orchestrator copies that file into every bundle's environment.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

PARTS = ("python", "cc", "cuda", "gpu", "cpu")


class Missing(Exception):
    """A piece the server needs at run time is not in the image."""


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def check_python(facts: dict[str, Any]) -> None:
    include = sysconfig.get_paths()["include"]
    facts["python"] = {"version": platform.python_version(), "include": include}
    if importlib.util.find_spec("bench") is None:
        raise Missing("the bench package is not importable (pip install . in the image)")
    facts["bench"] = _version("bench")
    # The report is made in the container before the bundle is signed: its matplotlib must
    # import against the image's numpy (compiled parts included; pyplot would build a font
    # cache into the image, so it is left to run time).
    for name in ("matplotlib", "matplotlib.ft2font", "matplotlib._path"):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import failure is the finding
            raise Missing(
                f"import {name} failed ({type(exc).__name__}: {exc}): `bench report` needs "
                "matplotlib (requirements/runtime.lock)"
            ) from None
    facts["matplotlib"] = _version("matplotlib")
    # The image's full package set, name -> version: what a rebuild next month must match,
    # and what two bundles' images differ in.
    facts["packages"] = dict(
        sorted(
            (str(d.metadata["Name"]).lower(), str(d.version))
            for d in md.distributions()
            if d.metadata["Name"]
        )
    )


def check_cc(facts: dict[str, Any], include: str | None = None) -> None:
    include = include or sysconfig.get_paths()["include"]
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise Missing("no C compiler (cc/gcc): install gcc and libc6-dev")
    header = Path(include) / "Python.h"
    if not header.is_file():
        minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
        raise Missing(f"{header} is missing: install {minor}-dev (Triton compiles against it)")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(
            "#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n"
            "int probe(void) { return PyLong_Check(Py_None) ? 1 : 0; }\n"
        )
        res = subprocess.run(
            [cc, "-c", "-fPIC", f"-I{include}", str(src), "-o", str(Path(tmp) / "probe.o")],
            capture_output=True,
            text=True,
            check=False,
        )
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        raise Missing(f"a C file including Python.h does not compile with {cc}: {last}")
    facts["cc"] = {"compiler": cc, "python_include": include}


def _nvcc_release() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise Missing("nvcc is not on PATH: install cuda-nvcc (FlashInfer JIT-compiles with it)")
    out = subprocess.run([nvcc, "-V"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"release (\S+),", out)
    if match is None:
        raise Missing(f"nvcc -V printed no release: {out.strip()[-200:]}")
    return match.group(1)


def check_cuda(facts: dict[str, Any]) -> None:
    want_cuda = os.environ.get("BENCH_CUDA_VERSION", "")
    nvcc = _nvcc_release()
    if want_cuda and nvcc != want_cuda:
        raise Missing(f"nvcc reports CUDA {nvcc}, the image is built for {want_cuda}")
    modules = {}
    for name in ("torch", "triton", "flashinfer", "vllm"):
        try:
            modules[name] = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import failure is the finding
            raise Missing(f"import {name} failed: {type(exc).__name__}: {exc}") from None
    torch = modules["torch"]
    torch_cuda = str(torch.version.cuda)
    want_torch_cuda = os.environ.get("BENCH_TORCH_CUDA", "")
    if want_torch_cuda and torch_cuda != want_torch_cuda:
        raise Missing(
            f"torch {torch.__version__} is built for CUDA {torch_cuda}, expected "
            f"{want_torch_cuda} (TORCH_INDEX_URL)"
        )
    fi = _version("flashinfer-python")
    jit = _version("flashinfer-jit-cache")
    if jit is None or jit.split("+")[0] != (fi or "").split("+")[0]:
        raise Missing(
            f"flashinfer-jit-cache {jit} does not match flashinfer-python {fi}: install "
            "flashinfer-jit-cache at FlashInfer's version"
        )
    envs = importlib.import_module("vllm.envs")
    facts["cuda"] = {
        "nvcc": nvcc,
        "torch": str(torch.__version__),
        "torch_cuda": torch_cuda,
        "triton": _version("triton"),
        "flashinfer_python": fi,
        "flashinfer_jit_cache": jit,
        "vllm": str(modules["vllm"].__version__),
        # What the engine will do in its start-up sampler run: FlashInfer's sampler JIT-
        # compiled with nvcc (default on) or the PyTorch-native path.
        "vllm_use_flashinfer_sampler": bool(envs.VLLM_USE_FLASHINFER_SAMPLER),
        "cuda_cache_path": os.environ.get("CUDA_CACHE_PATH"),
    }


# The kernel is a module of its own, written out and imported at run time: Triton reads a
# kernel's source (inspect) and resolves every name in it, annotations included, among the
# module's globals. Defined inside check_gpu under `from __future__ import annotations`, its
# `x: Any` parameters made Triton 3.6 fail with "Cannot access global variable Any from
# within @jit'ed function" (seen on an H200 by `make gpu-check`).
_KERNEL = """import triton
import triton.language as tl


@triton.jit
def add(x, y, out, n, block: tl.constexpr):
    offs = tl.program_id(0) * block + tl.arange(0, block)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask)
"""


def _kernel_module(folder: Path) -> Any:
    path = folder / "bench_selftest_kernel.py"
    path.write_text(_KERNEL)
    spec = importlib.util.spec_from_file_location("bench_selftest_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_gpu(facts: dict[str, Any]) -> None:
    try:
        import torch
    except ImportError as exc:
        raise Missing(f"torch does not import: {exc}") from None
    if not torch.cuda.is_available():
        raise Missing("torch sees no GPU (driver, NVIDIA container runtime, --gpus all)")
    with tempfile.TemporaryDirectory() as folder:
        kernel = _kernel_module(Path(folder))
        facts["gpu"] = _run_kernel(torch, kernel.add)


def _run_kernel(torch: Any, add: Any) -> list[dict[str, Any]]:
    gpus = []
    for index in range(torch.cuda.device_count()):
        dev = torch.device("cuda", index)
        x = torch.arange(1024, device=dev, dtype=torch.float32)
        out = torch.empty_like(x)
        add[(4,)](x, x, out, 1024, block=256)
        if not torch.equal(out, 2 * x):
            raise Missing(f"a Triton kernel gave wrong results on GPU {index}")
        gpus.append(
            {
                "index": index,
                "name": torch.cuda.get_device_name(index),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(index))),
            }
        )
    return gpus


# Run by the server's interpreter (its own venv, apart from bench's): one JSON line of facts.
_CPU_PROBE = """import json, torch, vllm, vllm._C
from vllm.platforms import current_platform
x = torch.arange(64, dtype=torch.float32).reshape(8, 8)
print(json.dumps({"torch": str(torch.__version__), "torch_cuda": torch.version.cuda,
                  "vllm": str(vllm.__version__), "platform": str(current_platform.device_type),
                  "matmul_ok": bool(torch.equal(x @ torch.eye(8), x)),
                  "threads": torch.get_num_threads()}))
"""


def check_cpu(facts: dict[str, Any]) -> None:
    python = os.environ.get("BENCH_VLLM_PYTHON", "/opt/vllm/bin/python")
    if not Path(python).is_file():
        raise Missing(f"the server's interpreter {python} is missing (BENCH_VLLM_PYTHON)")
    try:
        done = subprocess.run(
            [python, "-P", "-c", _CPU_PROBE],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise Missing("importing vLLM and torch took over 300 s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise Missing(f"vLLM's CPU build does not import: {last}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if found["torch_cuda"] is not None:
        raise Missing(f"torch {found['torch']} is a CUDA build (the lock's +cpu wheel?)")
    if found["platform"] != "cpu":
        raise Missing(f"vLLM names its platform {found['platform']!r}, not 'cpu'")
    if not found["matmul_ok"]:
        raise Missing("a matrix product on the CPU gave a wrong result")
    facts["cpu"] = found


def run(parts: list[str], out: Path | None) -> dict[str, Any]:
    facts: dict[str, Any] = {"schema_version": 1, "parts": parts}
    steps = {
        "python": check_python, "cc": check_cc, "cuda": check_cuda, "gpu": check_gpu,
        "cpu": check_cpu,
    }  # fmt: skip
    for part in parts:
        steps[part](facts)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    return facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="python,cc", help=f"comma-separated, of {','.join(PARTS)}")
    ap.add_argument("--out", type=Path, help="write the facts as JSON here")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        print(f"image self-test: unknown part(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    try:
        facts = run(parts, args.out)
    except Missing as exc:
        print(f"image self-test FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"image self-test passed ({', '.join(parts)}): {json.dumps(facts, sort_keys=True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
