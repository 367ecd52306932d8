"""The GPU image's recipe against vLLM's real files (the releases around the pinned commit).

The `vllm` target cannot be built here (no CUDA registry, no GPU), so what it takes from
vLLM's checkout is checked against the published source distributions of 0.30.0 and
0.31.0 (the pinned 0.30.1rc1.dev452 lies between them): every path the build stage reads
exists in both; the build requirements resolve the way the stage installs them; and the
version the stage expects is what vLLM's own `get_vllm_version` gives, computed with
setuptools-scm's own functions.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from tests.image import vllm_sdist
from tests.image.dockerfile_rules import Dockerfile, parse
from tests.image.scripts import load_script

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Dockerfile").read_text(encoding="utf-8")
DESCRIBE = "v0.30.1rc0-452-g73a583112"

# Paths the stage's tools read without naming them in a RUN line: `pip wheel .` reads the
# build files; setup.py loads tools/build_rust.py and builds rust/; docker/vllm_version.py
# reads VLLM_MAIN_CUDA_VERSION's default from vllm/envs.py.
IMPLICIT_READS = (
    "setup.py",
    "pyproject.toml",
    "CMakeLists.txt",
    "tools/build_rust.py",
    "rust",
    "vllm/envs.py",
)
_PATH = re.compile(
    r"(?<![\w/.$-])((?:requirements|tools|rust|vllm|csrc|cmake)/[\w./-]*\w"
    r"|rust-toolchain\.toml|setup\.py|pyproject\.toml|CMakeLists\.txt|use_existing_torch\.py)"
)
# What the build platform is: the CUDA devel base (Ubuntu 24.04, glibc 2.39) with the
# stage's python3.12.
PLATFORM = [
    "--only-binary",
    ":all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *(
        a
        for tag in ("manylinux_2_39", "manylinux_2_28", "manylinux_2_17", "manylinux2014")
        for a in ("--platform", f"{tag}_x86_64")
    ),
]


def build_stage_reads(df: Dockerfile) -> list[str]:
    """Relative paths of the vLLM checkout that the vllm-build stage's RUN lines name."""
    runs = " ".join(df.stage("vllm-build").joined("RUN"))
    named = {m.group(1) for m in _PATH.finditer(runs)}
    return sorted(named | set(IMPLICIT_READS))


def missing_paths(text: str, tree: Path) -> list[str]:
    return [p for p in build_stage_reads(parse(text)) if not (tree / p).exists()]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    dest = tmp_path_factory.mktemp("sdists")
    try:
        return {v: vllm_sdist.unpack(v, dest) for v in vllm_sdist.RELEASES}
    except OSError as exc:
        pytest.fail(
            f"could not fetch vLLM's source distributions through pip's index ({exc}); "
            f"they are cached in {vllm_sdist.cache_dir()} after one successful run"
        )


@pytest.mark.parametrize("version", vllm_sdist.RELEASES)
def test_every_path_the_build_stage_reads_exists(trees: dict[str, Path], version: str) -> None:
    assert missing_paths(TEXT, trees[version]) == []
    reads = build_stage_reads(parse(TEXT))
    assert "requirements/build/cuda.txt" in reads
    assert "rust-toolchain.toml" in reads


def test_the_old_recipe_is_caught(trees: dict[str, Path]) -> None:
    """The build stage as it was (requirements/build.txt) names a file neither release has."""
    old = TEXT.replace("requirements/build/cuda.txt", "requirements/build.txt")
    for tree in trees.values():
        assert missing_paths(old, tree) == ["requirements/build.txt"]


@pytest.mark.parametrize("version", vllm_sdist.RELEASES)
def test_rust_toolchain_channel_is_read_as_the_stage_reads_it(
    trees: dict[str, Path], version: str
) -> None:
    text = (trees[version] / "rust-toolchain.toml").read_text()
    assert re.search(r'^channel *= *"[0-9.]+"$', text, re.M), text


def _stage_torch_pin(tree: Path) -> str:
    # The stage's own command: grep -E '^torch==' requirements/build/cuda.txt
    cmd = re.search(r"torch_pin=\$\((grep -E '\^torch==' requirements/build/cuda\.txt)\)", TEXT)
    assert cmd, "the stage no longer takes torch's pin with grep from requirements/build/cuda.txt"
    res = subprocess.run(
        ["bash", "-c", cmd.group(1)], cwd=tree, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def _dry_run(args: list[str], report: Path, cwd: Path) -> dict[str, str]:
    res = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"),
            *("--quiet", "--report", str(report), "--target", str(cwd / "target")),
            *PLATFORM,
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    errors = [line for line in res.stderr.splitlines() if line.startswith("ERROR")]
    assert res.returncode == 0, "\n".join(errors) or res.stderr[-2000:]
    import json

    installed = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installed}


@pytest.mark.parametrize("version", vllm_sdist.RELEASES)
def test_build_requirements_resolve_as_the_stage_installs_them(
    trees: dict[str, Path], version: str, tmp_path: Path
) -> None:
    """torch at the pinned version first (its own index in the image: the cu132 index is not
    reachable here, so the same pin is resolved against this machine's index, without its
    CUDA dependencies, which come from that index), then the rest of cuda.txt."""
    tree = trees[version]
    pin = _stage_torch_pin(tree)
    assert re.fullmatch(r"torch==[0-9.]+", pin), pin
    torch = _dry_run(["--no-deps", pin], tmp_path / "torch.json", tmp_path)
    assert torch == {"torch": pin.split("==")[1]}
    rest = tmp_path / "rest.txt"
    lines = (tree / "requirements/build/cuda.txt").read_text().splitlines()
    rest.write_text("\n".join(line for line in lines if not line.startswith("torch==")) + "\n")
    got = _dry_run(["-r", str(rest)], tmp_path / "rest.json", tmp_path)
    for needed in ("setuptools-rust", "setuptools-scm", "cmake", "ninja", "setuptools"):
        assert needed in got, sorted(got)
    assert Version(got["setuptools"]) < Version("81")


# --- the version rule ---------------------------------------------------------------------


vllm_version = load_script("vllm_version")


def upstream_rule(tree: Path) -> Callable[[str, str, str], str]:
    """vLLM's own get_vllm_version from the sdist's setup.py, for a CUDA source build, with
    setuptools-scm's answer, nvcc's CUDA and VLLM_MAIN_CUDA_VERSION given."""
    source = (tree / "setup.py").read_text()
    fn = next(
        n
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name == "get_vllm_version"
    )
    code = compile(ast.Module(body=[fn], type_ignores=[]), "setup.py", "exec")

    def rule(scm: str, nvcc: str, main_cuda: str) -> str:
        env: dict[str, Any] = {
            "os": types.SimpleNamespace(getenv=lambda name, default=None: None, environ={}),
            "sys": types.SimpleNamespace(argv=["setup.py", "bdist_wheel"]),
            "get_version": lambda **_: scm,
            "VLLM_GIT_DESCRIBE_COMMAND": ["git", "describe"],  # 0.31: read, not run here
            "envs": types.SimpleNamespace(
                VLLM_TARGET_DEVICE="cuda",
                VLLM_MAIN_CUDA_VERSION=main_cuda,
                VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX=False,
                VLLM_SKIP_VERSION_SUFFIX=False,
            ),
            "_no_device": lambda: False,
            "_is_cuda": lambda: True,
            "USE_PRECOMPILED_EXTENSIONS": False,
            "get_nvcc_cuda_version": lambda: Version(nvcc),
        }
        exec(code, env)  # vLLM's own function, to check our copy of its rule
        return str(env["get_vllm_version"]())

    return rule


@pytest.mark.parametrize("version", vllm_sdist.RELEASES)
@pytest.mark.parametrize("scm", ["0.30.1rc1.dev452+g73a583112", "0.31.0", "0.30.0rc2"])
@pytest.mark.parametrize(
    ("nvcc", "main_cuda"), [("13.2", "13.2"), ("13.2", "13.0"), ("12.9", "13.0"), ("13.0", "13.0")]
)
def test_our_suffix_rule_is_vllms(
    trees: dict[str, Path], version: str, scm: str, nvcc: str, main_cuda: str
) -> None:
    ours = vllm_version.cuda_build_version(scm, nvcc, main_cuda)
    assert ours == upstream_rule(trees[version])(scm, nvcc, main_cuda)


def test_the_describe_command_is_the_checkouts_own(trees: dict[str, Path]) -> None:
    """0.30 (and the pinned commit, whose card version has 9 hex digits) use setuptools-scm's
    default; 0.31 passes its own with --abbrev=40, which vllm_version.py then uses too."""
    assert vllm_version.setup_describe_command(trees["0.30.0"]) is None
    cmd = vllm_version.setup_describe_command(trees["0.31.0"])
    assert cmd is not None and cmd[:2] == ["git", "describe"] and "--abbrev=40" in cmd


def test_the_suffix_joins_with_a_dot_after_a_local_part() -> None:
    assert (
        vllm_version.cuda_build_version("0.30.1rc1.dev452+g73a583112", "13.2", "13.0")
        == "0.30.1rc1.dev452+g73a583112.cu132"
    )


@pytest.fixture
def checkout(trees: dict[str, Path], tmp_path: Path) -> Path:
    """A git work tree with the sdist's vllm/envs.py (what vllm_version.py reads)."""
    repo = tmp_path / "vllm"
    (repo / "vllm").mkdir(parents=True)
    (repo / "vllm" / "envs.py").write_bytes((trees["0.30.0"] / "vllm" / "envs.py").read_bytes())
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    return repo


def _stage_env(df: Dockerfile) -> dict[str, str]:
    """VLLM_MAIN_CUDA_VERSION as the build stage's ENV sets it (resolved)."""
    envs = " ".join(df.stage("vllm-build").joined("ENV"))
    match = re.search(r"VLLM_MAIN_CUDA_VERSION=(\S+)", envs)
    assert match
    return {"VLLM_MAIN_CUDA_VERSION": df.resolve(match.group(1))}


def _run_version(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "VLLM_MAIN_CUDA_VERSION"}
    return subprocess.run(
        [
            *(sys.executable, str(ROOT / "docker" / "vllm_version.py"), "--root", str(repo)),
            *("--describe-command", f"echo {DESCRIBE}", "--nvcc", "13.2", *args),
        ],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_stage_expects_exactly_the_published_version(checkout: Path) -> None:
    df = parse(TEXT)
    published = df.global_args["VLLM_VERSION"]
    res = _run_version(checkout, _stage_env(df), "--expect", published)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "0.30.1rc1.dev452+g73a583112" == published


def test_without_the_main_cuda_override_the_check_fails_in_seconds(checkout: Path) -> None:
    """VLLM_MAIN_CUDA_VERSION left at vLLM's default (13.0, read from envs.py)."""
    res = _run_version(checkout, {}, "--expect", "0.30.1rc1.dev452+g73a583112")
    assert res.returncode == 1
    assert res.stdout.strip() == "0.30.1rc1.dev452+g73a583112.cu132"
    assert "would build vLLM 0.30.1rc1.dev452+g73a583112.cu132, not" in res.stderr
