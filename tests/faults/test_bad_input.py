"""Bad input through the real command line: one line naming the problem and what to do,
the documented exit code, and never a traceback."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.bundle import sign
from bench.cli import main as bench_main
from bench.errors import Exit
from provisioning.cli import main as provision_main
from tests.support.procs import assert_one_line_error, bench_env, new_mark
from tests.support.runs import write_run_dir

pytestmark = pytest.mark.integration


def _cli(*args: str, env: dict[str, str] | None = None, module: str = "bench") -> tuple[int, str]:
    """The real command line in a child process (what a user runs)."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env or bench_env(new_mark()),
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stderr


Cli = Callable[..., tuple[int, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The same entry points in this process (fast): an escaped exception fails the test."""

    def run(
        *args: str, module: str = "bench", env: dict[str, str] | None = None
    ) -> tuple[int, str]:
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        capsys.readouterr()
        main = bench_main if module == "bench" else provision_main
        rc = main(list(args))
        return rc, capsys.readouterr().err

    return run


# -- settings and arguments ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        ("BENCH_LOG_FORMAT", "xml", ("BENCH_LOG_FORMAT is invalid", "fix or unset")),
        ("BENCH_LOG_FROMAT", "json", ("BENCH_LOG_FROMAT is invalid", "fix or unset")),
        ("BENCH_API_KEY__X", "1", ("BENCH_API_KEY", "fix or unset")),
    ],
    ids=["bad-value", "unknown-variable", "wrong-nesting"],
)
def test_malformed_environment_is_exit_usage(var: str, value: str, words: tuple[str, ...]) -> None:
    env = {**bench_env(new_mark()), var: value}
    rc, err = _cli("schema", env=env)
    assert rc == Exit.USAGE
    assert_one_line_error(err, "bench: error: setting", *words)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--contexts", "8Q"], ("'8Q' is not a context size", "write e.g. 8K")),
        (["--concurrencies", "0"], ("concurrency '0' is not a positive integer",)),
        (["--duration", "-1"], ("--duration -1 is not a finite number from 0.001 to 604800",)),
        (["--resume", "/nonexistent/run"], ("has no results.json to resume",)),
    ],
    ids=["context", "concurrency", "duration", "resume-nothing"],
)
def test_bad_run_arguments_are_exit_usage(
    cli: Cli, args: list[str], words: tuple[str, ...]
) -> None:
    rc, err = cli("run", "--url", "http://127.0.0.1:9", *args)
    assert rc == Exit.USAGE
    assert_one_line_error(err, *words)


def test_resuming_a_damaged_results_file_is_exit_usage(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text('{"schema_version": 1, "cells": [')
    rc, err = cli("run", "--resume", str(tmp_path))
    assert rc == Exit.USAGE
    assert_one_line_error(err, "results.json: not valid JSON")


# -- launch profiles -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            None,
            ("unknown launch profile 'nosuch'", "choose one of cpu-vllm, published, smoke, twin"),
        ),
        ("name = [", ("nosuch",)),
        ('schema_version = 1\nname = "nosuch"\nargv = ["vllm", "--api-key", "k"]\n', ("nosuch",)),
    ],
    ids=["unknown", "not-toml", "malformed"],
)
def test_unknown_or_malformed_launch_profile_is_exit_usage(
    cli: Cli, text: str | None, words: tuple[str, ...], tmp_path: Path
) -> None:
    profile = "nosuch"
    if text is not None:
        path = tmp_path / "nosuch.toml"
        path.write_text(text)
        profile = str(path)
    rc, err = cli(
        "preflight", "127.0.0.1", "--profile", profile, "--inventory", str(tmp_path / "none.toml"),
        env={"HOME": str(tmp_path)}, module="provisioning",
    )  # fmt: skip
    assert rc == Exit.USAGE, err
    assert "Traceback" not in err
    assert_one_line_error(err, "provision: error:", *words)


# -- cards ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p,  # missing
        lambda p: (p.mkdir(), p)[1],  # a directory
        lambda p: (p.write_bytes(b"\xff\xfe\x00garbage"), p)[1],  # not UTF-8
        lambda p: (p.write_text("just some text\n"), p)[1],  # not a card
    ],
    ids=["missing", "directory", "binary", "not-a-card"],
)
def test_a_card_that_cannot_be_read_is_exit_usage(
    cli: Cli, make: Callable[[Path], Path], tmp_path: Path
) -> None:
    card = make(tmp_path / "card.txt")
    rc, err = cli("card", "import", str(card), "--out", str(tmp_path / "card.json"))
    assert rc == Exit.USAGE
    assert_one_line_error(err, "bench: error:", "card.txt")


# -- bundles ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A real signed bundle made with the CLI: (archive, allowed_signers, other allowed)."""
    root = tmp_path_factory.mktemp("bundle")
    run = write_run_dir(root / "run1")
    for who in ("alice", "mallory"):
        rc, err = _cli("keygen", "--out", str(root / who), "--principal", f"{who}@example.org")
        assert rc == 0, err
    rc, err = _cli("sign", str(run), "--key", str(root / "alice"))
    assert rc == 0, err
    archive = root / "run1.tar.gz"
    rc, err = _cli("pack", str(run), "--out", str(archive))
    assert rc == 0, err
    allowed = {}
    for who in ("alice", "mallory"):
        allowed[who] = root / f"{who}.allowed"
        line = sign.allowed_signers_line(root / f"{who}.pub", f"{who}@example.org")
        allowed[who].write_text(line + "\n")
    rc, err = _cli("verify", str(archive), "--allowed-signers", str(allowed["alice"]))
    assert rc == 0, err
    return archive, allowed["alice"], allowed["mallory"]


def _members(archive: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(archive) as tar:
        out = []
        for m in tar.getmembers():
            f = tar.extractfile(m)
            out.append((m, f.read() if f else b""))
        return out


def _repack(
    members: list[tuple[tarfile.TarInfo, bytes]], dest: Path, extra: tarfile.TarInfo | None = None
) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        for m, data in members:
            tar.addfile(m, io.BytesIO(data) if m.isfile() else None)
        if extra is not None:
            tar.addfile(extra, io.BytesIO(b"x" * extra.size) if extra.isfile() else None)
    return dest


def _tampered(signed: tuple[Path, Path, Path], tmp: Path) -> Path:
    members = []
    for m, data in _members(signed[0]):
        changed = data.replace(b"73.0", b"93.0") if m.name.endswith("/tables.md") else data
        members.append((m, changed))
    return _repack(members, tmp / "tampered.tar.gz")


def _truncated(signed: tuple[Path, Path, Path], tmp: Path) -> Path:
    raw = signed[0].read_bytes()
    (tmp / "truncated.tar.gz").write_bytes(raw[: len(raw) // 2])
    return tmp / "truncated.tar.gz"


def _traversal(signed: tuple[Path, Path, Path], tmp: Path) -> Path:
    evil = tarfile.TarInfo("run1/../../evil.sh")
    evil.size = 4
    return _repack(_members(signed[0]), tmp / "traversal.tar.gz", evil)


def _symlink(signed: tuple[Path, Path, Path], tmp: Path) -> Path:
    link = tarfile.TarInfo("run1/passwd")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return _repack(_members(signed[0]), tmp / "symlink.tar.gz", link)


def _huge(signed: tuple[Path, Path, Path], tmp: Path) -> Path:
    """A member that claims 3 GiB (the header alone: the limit refuses it before reading)."""
    head = tarfile.TarInfo("run1/huge.bin")
    head.size = 3 << 30
    dest = tmp / "huge.tar.gz"
    with gzip.open(dest, "wb") as f:
        f.write(head.tobuf(format=tarfile.PAX_FORMAT))
        f.write(b"\0" * 1024)
    return dest


def _not_gzip(signed: tuple[Path, Path, Path], tmp: Path) -> Path:
    (tmp / "plain.tar.gz").write_text("this is not an archive\n")
    return tmp / "plain.tar.gz"


@pytest.mark.parametrize(
    ("make", "code", "words"),
    [
        (_tampered, Exit.VERIFY_FAILED, ("tables.md",)),
        (_truncated, Exit.VERIFY_FAILED, ("truncated.tar.gz",)),
        (_traversal, Exit.VERIFY_FAILED, ("evil.sh", "refused")),
        (_symlink, Exit.VERIFY_FAILED, ("run1/passwd", "refused")),
        (_huge, Exit.VERIFY_FAILED, ("huge.bin",)),
        (_not_gzip, Exit.VERIFY_FAILED, ("plain.tar.gz", "not a readable .tar.gz")),
    ],
    ids=["tampered", "truncated", "path-traversal", "symlink", "huge-member", "not-gzip"],
)
def test_a_bad_bundle_is_refused_in_one_line(
    cli: Cli,
    make: Callable[[tuple[Path, Path, Path], Path], Path],
    code: Exit,
    words: tuple[str, ...],
    signed: tuple[Path, Path, Path],
    tmp_path: Path,
) -> None:
    bad = make(signed, tmp_path)
    before = set(os.listdir(tmp_path.parent))
    rc, err = cli("verify", str(bad), "--allowed-signers", str(signed[1]))
    assert rc == code, err
    assert_one_line_error(err, "bench: error:", *words)
    assert set(os.listdir(tmp_path.parent)) == before  # nothing escaped next to the test dir
    assert not (tmp_path.parent / "evil.sh").exists()


@pytest.mark.parametrize(
    ("which", "code", "words"),
    [
        ("other", Exit.VERIFY_FAILED, ("not in",)),
        ("missing", Exit.USAGE, ("no such allowed-signers file",)),
        ("garbage", Exit.VERIFY_FAILED, ("garbage.allowed",)),
    ],
)
def test_a_wrong_allowed_signers_file_is_refused_in_one_line(
    cli: Cli,
    which: str,
    code: Exit,
    words: tuple[str, ...],
    signed: tuple[Path, Path, Path],
    tmp_path: Path,
) -> None:
    allowed = {
        "other": signed[2],
        "missing": tmp_path / "nope.allowed",
        "garbage": tmp_path / "garbage.allowed",
    }[which]
    if which == "garbage":
        allowed.write_text("this is not an allowed signers line\n")
    rc, err = cli("verify", str(signed[0]), "--allowed-signers", str(allowed))
    assert rc == code, err
    assert_one_line_error(err, "bench: error:", *words)
