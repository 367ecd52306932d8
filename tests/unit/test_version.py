"""bench's version is git's: setuptools-scm at build time and, in a checkout, at run time."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import bench
from bench import _checkout_version, image_tag

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEV = re.compile(r"^\d+\.\d+\.\d+\.dev\d+\+g([0-9a-f]{7,})(\.d\d{8})?$")


def _git(cwd: Path, *argv: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def _clone(tmp_path: Path, *flags: str) -> Path:
    """A clone of this repository's HEAD (what is committed), like a new user's."""
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", *flags, f"file://{ROOT}", str(clone))
    return clone


def test_version_is_the_checkouts_as_the_build_computes_it() -> None:
    build = subprocess.run(
        [sys.executable, "-m", "setuptools_scm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert bench.__version__ == build
    found = DEV.match(bench.__version__)
    assert found, bench.__version__
    assert _git(ROOT, "rev-parse", "HEAD").startswith(found[1])


def test_bench_version_prints_it() -> None:
    out = subprocess.run(
        [str(BIN / "bench"), "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == f"bench {bench.__version__}"


def test_a_new_commit_and_a_dirty_tree_show_at_run_time(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    head = _git(clone, "rev-parse", "HEAD")
    clean = _checkout_version(clone)
    assert clean is not None
    found = DEV.match(clean)
    assert found and head.startswith(found[1]) and found[2] is None, clean
    # A changed tracked file: the date after the hash marks the tree dirty.
    readme = clone / "README.md"
    readme.write_text(readme.read_text() + "\nedited\n")
    dirty = _checkout_version(clone)
    assert dirty is not None
    assert dirty.startswith(clean + ".d") and DEV.match(dirty), dirty
    # An untracked file alone does not (setuptools-scm looks at tracked files only).
    _git(clone, "checkout", "-q", "README.md")
    (clone / "notes.txt").write_text("x\n")
    assert _checkout_version(clone) == clean
    # The next commit is a new version at once (an editable install's metadata would lag).
    _git(clone, "commit", "-q", "--allow-empty", "-m", "next")
    after = _checkout_version(clone)
    assert after is not None and after != clean
    assert _git(clone, "rev-parse", "HEAD").startswith(DEV.match(after)[1])  # type: ignore[index]


def test_a_tree_without_git_has_no_checkout_version(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    assert _checkout_version(tmp_path) is None


def _wheel(source: Path, out: Path, env: dict[str, str] | None = None) -> None:
    """`pip wheel` of a checkout, as an image build makes bench's wheel."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(source)],
        capture_output=True, text=True, check=True, timeout=300, env=env,
    )  # fmt: skip


def test_a_shallow_tagless_clone_builds_with_its_commit(tmp_path: Path) -> None:
    clone = _clone(tmp_path, "--depth", "1", "--no-tags")
    head = _git(clone, "rev-parse", "HEAD")
    _wheel(clone, tmp_path / "dist")
    (wheel,) = (tmp_path / "dist").glob("bench-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        version = re.search(r"^Version: (\S+)$", z.read(meta).decode(), re.M)
    assert version is not None
    found = DEV.match(version[1])
    assert found and head.startswith(found[1]), version[1]


def test_the_build_takes_a_version_given_to_it(tmp_path: Path) -> None:
    """An image build has no .git: docker/build.sh's BENCH_VERSION is the version."""
    clone = _clone(tmp_path, "--depth", "1")
    subprocess.run(["rm", "-rf", str(clone / ".git")], check=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_BENCH": "0.2.0.dev7+gabc1234",
    }
    _wheel(clone, tmp_path / "dist", env)
    assert [w.name for w in (tmp_path / "dist").glob("*.whl")] == [
        "bench-0.2.0.dev7+gabc1234-py3-none-any.whl"
    ]


def test_image_tag_has_no_plus() -> None:
    assert image_tag("0.2.0.dev7+gabc1234.d20261203") == "0.2.0.dev7-gabc1234.d20261203"
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", image_tag(bench.__version__))


def test_is_dirty_reads_setuptools_scms_mark() -> None:
    from bench import is_dirty

    assert is_dirty("0.2.0.dev7+gabc1234.d20261203")
    assert is_dirty("0.2.0+d20261203")  # at a tag
    assert not is_dirty("0.2.0.dev7+gabc1234")
    assert not is_dirty("0.2.0")
    assert not is_dirty("0.0.0+unknown")


def test_the_version_is_computed_on_first_use_only() -> None:
    """Importing bench (the twin, workers) runs no git; asking for __version__ does, once."""
    code = (
        "import sys, bench; print('setuptools_scm' in sys.modules, '__version__' in vars(bench));"
        " v = bench.__version__; print('__version__' in vars(bench), v == bench.__version__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["False", "False", "True", "True"]
