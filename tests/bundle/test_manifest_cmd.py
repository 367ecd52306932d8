"""`bench manifest DIR`: the unsigned manifest the orchestrator has made inside the run's
container. It replaced a Python script the orchestrator once ran there (`python -c`); what
it writes must stay what that script wrote, byte for byte but the time of writing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.bundle import manifest, schema
from bench.cli import main
from bench.errors import Exit
from tests.support.runs import write_run_dir

# The script provisioning/flow/host_run.py ran in the container before `bench manifest` existed.
OLD_SCRIPT = (
    "import datetime, sys\n"
    "from pathlib import Path\n"
    "from bench.bundle import manifest, schema\n"
    "root = Path(sys.argv[1])\n"
    "if (root / schema.RESULTS_NAME).is_file():\n"
    "    schema.write_json_schema(root)\n"
    "(root / manifest.SIGNATURE_NAME).unlink(missing_ok=True)\n"
    "made = manifest.build(root, run_id=manifest.run_id_of(root),"
    " created_at=datetime.datetime.now(datetime.UTC))\n"
    "manifest.write(root, made)\n"
)
_CREATED = re.compile(rb'"created_at": "[^"]+"')


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root, manifest.json's time of writing blanked."""
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name == manifest.MANIFEST_NAME:
            assert len(_CREATED.findall(data)) == 1
            data = _CREATED.sub(b'"created_at": "-"', data)
        files[path.relative_to(root).as_posix()] = data
    return files


def _run_dir(tmp_path: Path, name: str, *, results: bool) -> Path:
    root = write_run_dir(tmp_path / name)
    if not results:
        (root / schema.RESULTS_NAME).unlink()
    (root / manifest.SIGNATURE_NAME).write_text("a signature of an older manifest\n")
    return root


@pytest.mark.subprocess
@pytest.mark.parametrize("results", [True, False])
def test_the_command_writes_what_the_old_script_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], results: bool
) -> None:
    old = _run_dir(tmp_path / "old", "run", results=results)
    new = _run_dir(tmp_path / "new", "run", results=results)
    subprocess.run([sys.executable, "-c", OLD_SCRIPT, str(old)], check=True)
    assert main(["manifest", str(new)]) == 0
    assert _tree(new) == _tree(old)
    assert not (new / manifest.SIGNATURE_NAME).exists()  # it would not match any more
    assert (new / schema.SCHEMA_NAME).is_file() is results
    made = manifest.read(new)
    assert manifest.check(new, made) == []
    out = capsys.readouterr().out.strip()
    assert out == f"wrote {new / 'manifest.json'}: run {made.run_id}, {len(made.files)} files"


def test_refresh_lists_every_file_as_it_is_now_and_reruns_the_same(tmp_path: Path) -> None:
    root = _run_dir(tmp_path, "run", results=True)
    when = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)
    first = manifest.refresh(root, created_at=when)
    text = (root / manifest.MANIFEST_NAME).read_text()
    (root / "server.log").write_text("INFO ready\n")  # written after: listed on the rerun
    again = manifest.refresh(root, created_at=when)
    assert first.run_id == "run-20261202T1130Z-abc" and again.run_id == first.run_id
    listed = [f.path for f in again.files]
    assert listed == sorted([*(f.path for f in first.files), "server.log"])
    assert "server.log" not in [f.path for f in first.files]
    assert json.loads(text)["created_at"] == "2026-12-03T11:30:00Z"
    assert manifest.check(root, manifest.read(root)) == []


def test_a_path_that_is_not_a_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing-here"
    assert main(["manifest", str(missing)]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "not a directory" in err and "Traceback" not in err
    assert not missing.exists()


def test_a_run_directory_with_a_link_is_refused_without_a_manifest(tmp_path: Path) -> None:
    root = _run_dir(tmp_path, "run", results=True)
    (root / "elsewhere").symlink_to(shutil.which("sh") or "/bin/sh")
    assert main(["manifest", str(root)]) != 0
    assert not (root / manifest.MANIFEST_NAME).exists()
