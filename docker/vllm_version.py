#!/usr/bin/env python3
"""The version string vLLM's setup.py will give a CUDA build, known before compiling.

vLLM's `get_vllm_version()` takes setuptools-scm's version of the checkout and, for a CUDA
build from source, appends `cu<major><minor>` when nvcc's CUDA differs from
VLLM_MAIN_CUDA_VERSION (its default is read from the checkout's vllm/envs.py). The
separator is "+" when the version has no local part yet, else "." (a dev build already
carries "+g<hash>", so a CUDA 13.2 build with the main version left at 13.0 would be
"...+g73a583112.cu132", not "+cu132").

The image build runs this right after the build requirements are installed and stops in
seconds when the result is not the pinned VLLM_VERSION, instead of after the ~40 minute
compile. tests/image/test_vllm_recipe.py checks the rule against the real `get_vllm_version`
of vLLM's published source distributions.

    vllm_version.py [--root DIR] [--nvcc X.Y] [--main-cuda X.Y] [--expect VERSION]
                    [--describe-command CMD]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

_ENVS_DEFAULT = re.compile(
    r'os\.getenv\(\s*"VLLM_MAIN_CUDA_VERSION",\s*""\s*\)\.lower\(\)\s*or\s*"([0-9.]+)"'
)
_NVCC_RELEASE = re.compile(r"release (\S+),")


def main_cuda_default(root: Path) -> str:
    """VLLM_MAIN_CUDA_VERSION's default as the checkout's vllm/envs.py defines it."""
    text = (root / "vllm" / "envs.py").read_text()
    match = _ENVS_DEFAULT.search(text)
    if match is None:
        raise SystemExit(f"{root}/vllm/envs.py: no default for VLLM_MAIN_CUDA_VERSION found")
    return match.group(1)


def nvcc_cuda() -> str:
    """nvcc's CUDA release, parsed as vLLM's get_nvcc_cuda_version does ("release 13.2,")."""
    out = subprocess.run(["nvcc", "-V"], capture_output=True, text=True, check=True).stdout
    match = _NVCC_RELEASE.search(out)
    if match is None:
        raise SystemExit(f"nvcc -V printed no release: {out.strip()[:200]}")
    return match.group(1)


def setup_describe_command(root: Path) -> list[str] | None:
    """The `git describe` command the checkout's setup.py passes to setuptools-scm, if any.

    vLLM 0.31 passes its own (`--abbrev=40 --match v[0-9]*`, so crate tags are skipped and
    the hash is whole); 0.30 and the pinned commit use setuptools-scm's default.
    """
    import ast

    for node in ast.parse((root / "setup.py").read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "VLLM_GIT_DESCRIBE_COMMAND"
        ):
            value = ast.literal_eval(node.value)
            return [str(v) for v in value]
    return None


def scm_version(root: Path, describe_command: str | list[str] | None = None) -> str:
    from setuptools_scm import get_version

    if describe_command is None and (root / "setup.py").is_file():
        describe_command = setup_describe_command(root)
    if describe_command is None:
        return str(get_version(root=str(root)))
    try:
        return str(get_version(root=str(root), scm={"git": {"describe_command": describe_command}}))
    except TypeError:  # setuptools-scm 8: the older spelling of the same option
        return str(get_version(root=str(root), git_describe_command=describe_command))


def cuda_build_version(version: str, nvcc: str, main_cuda: str, skip_suffix: bool = False) -> str:
    """vLLM's suffix rule for a CUDA build from source (no precompiled extensions);
    VLLM_SKIP_VERSION_SUFFIX (0.31 on) turns it off."""
    sep = "+" if "+" not in version else "."
    if not skip_suffix and _release(nvcc) != main_cuda:
        version += f"{sep}cu{_release(nvcc).replace('.', '')[:3]}"
    return version


def _release(text: str) -> str:
    # packaging.version.Version(text) normalises "13.2" to "13.2"; strip leading zeros the
    # same way for the plain X.Y strings nvcc prints.
    return ".".join(str(int(p)) for p in text.split("."))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="the vLLM checkout")
    ap.add_argument("--nvcc", help="nvcc's CUDA release (default: ask nvcc)")
    ap.add_argument("--main-cuda", help="VLLM_MAIN_CUDA_VERSION (default: env, else envs.py)")
    ap.add_argument("--expect", help="fail unless the version is exactly this")
    ap.add_argument("--describe-command", help="stands in for `git describe` (tests)")
    args = ap.parse_args(argv)
    main_cuda = (
        args.main_cuda
        or os.environ.get("VLLM_MAIN_CUDA_VERSION", "").lower()
        or main_cuda_default(args.root)
    )
    nvcc = args.nvcc or nvcc_cuda()
    skip = os.environ.get("VLLM_SKIP_VERSION_SUFFIX", "0") not in ("", "0")
    version = cuda_build_version(
        scm_version(args.root, args.describe_command), nvcc, main_cuda, skip
    )
    print(version)
    if args.expect is not None and version != args.expect:
        print(
            f"vllm_version: this checkout would build vLLM {version}, not {args.expect} "
            f"(nvcc {nvcc}, VLLM_MAIN_CUDA_VERSION {main_cuda}); check VLLM_COMMIT, "
            "VLLM_VERSION and CUDA_VERSION before compiling",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
