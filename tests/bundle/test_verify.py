"""The whole chain: sign a run directory, pack it, verify it; and every way it must fail."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import cli
from bench.bundle import seal
from bench.bundle.manifest import MANIFEST_NAME, SIGNATURE_NAME, bundle_files
from bench.bundle.pack import open_bundle, pack
from bench.bundle.recipe import RECIPE_NAME
from bench.bundle.schema import SCHEMA_NAME
from bench.bundle.verify import verify_bundle
from bench.errors import Exit, UsageError, VerifyFailed
from tests.bundle.conftest import Keys
from tests.support.runs import write_run_dir

pytestmark = pytest.mark.subprocess

NOW = datetime(2026, 12, 2, 11, 45, tzinfo=UTC)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run_dir(tmp_path / "run-20261202T1130Z-abc")


def _signed(run_dir: Path, keys: Keys) -> Path:
    seal.seal(run_dir, keys.private, now=NOW)
    return run_dir


def _all_files(root: Path) -> list[str]:
    return [*bundle_files(root), MANIFEST_NAME, SIGNATURE_NAME]


def test_round_trip_directory_and_archive(run_dir: Path, keys: Keys, tmp_path: Path) -> None:
    _signed(run_dir, keys)
    manifest = json.loads((run_dir / MANIFEST_NAME).read_text())
    assert manifest["run_id"] == "run-20261202T1130Z-abc"
    assert manifest["created_at"].startswith("2026-12-02T11:45:00")
    listed = {f["path"] for f in manifest["files"]}
    assert listed == {
        "environment.json", "results.json", "samples/requests.jsonl", "tables.md", SCHEMA_NAME,
        RECIPE_NAME,
    }  # fmt: skip
    for entry in manifest["files"]:
        assert entry["size_bytes"] == (run_dir / entry["path"]).stat().st_size
    ok = verify_bundle(run_dir, keys.allowed)
    assert (ok.signer.principal, ok.files, ok.run_id) == (
        "alice@example.org",
        6,
        manifest["run_id"],
    )
    archive = pack(run_dir, tmp_path / "bundle.tar.gz")
    ok = verify_bundle(archive, keys.allowed)
    assert ok.created_at == NOW


def test_stock_openssh_checks_a_packed_bundle(run_dir: Path, keys: Keys, tmp_path: Path) -> None:
    archive = pack(_signed(run_dir, keys), tmp_path / "bundle.tar.gz")
    subprocess.run(["tar", "-xzif", str(archive), "-C", str(tmp_path)], check=True)
    opened = tmp_path / run_dir.name
    with (opened / MANIFEST_NAME).open("rb") as fh:
        done = subprocess.run(
            ["ssh-keygen", "-Y", "verify", "-f", str(keys.allowed), "-I", keys.principal,
             "-n", "vllm-bench-bundle@v1", "-s", str(opened / SIGNATURE_NAME)],
            stdin=fh, capture_output=True, text=True, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # ... and sha256sum agrees with the manifest, the other half of the by-hand check.
    manifest = json.loads((opened / MANIFEST_NAME).read_text())
    sums = "".join(f"{f['sha256']}  {f['path']}\n" for f in manifest["files"])
    check = subprocess.run(
        ["sha256sum", "-c", "-"],
        check=False,
        input=sums,
        cwd=opened,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout


def _every_file(tmp_path: Path) -> list[str]:
    probe = write_run_dir(tmp_path / "probe")
    return sorted([*_all_files(probe), SCHEMA_NAME, RECIPE_NAME])


@pytest.mark.parametrize(
    "name",
    [
        "environment.json",
        "results.json",
        "samples/requests.jsonl",
        "tables.md",
        SCHEMA_NAME,
        RECIPE_NAME,
        MANIFEST_NAME,
        SIGNATURE_NAME,
    ],
)
def test_flipping_one_byte_of_any_file_fails_naming_it(
    run_dir: Path, keys: Keys, tmp_path: Path, name: str
) -> None:
    _signed(run_dir, keys)
    assert set(_all_files(run_dir)) == set(_every_file(tmp_path))  # the parametrize covers all
    path = run_dir / name
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(VerifyFailed) as info:
        verify_bundle(pack(run_dir, tmp_path / "flipped.tar.gz"), keys.allowed)
    message = info.value.one_line()
    if name == MANIFEST_NAME:
        assert message.startswith(f"{SIGNATURE_NAME}: not a valid signature of {MANIFEST_NAME}")
    else:
        assert message.startswith(f"{name}: ")


def test_an_added_file_fails_naming_it(run_dir: Path, keys: Keys) -> None:
    _signed(run_dir, keys)
    (run_dir / "samples" / "extra.jsonl").write_text("{}\n")
    with pytest.raises(VerifyFailed, match=r"^samples/extra\.jsonl: not listed in the manifest$"):
        verify_bundle(run_dir, keys.allowed)


def test_unlisted_directories_fail_naming_them(run_dir: Path, keys: Keys) -> None:
    """Issue 29 M5: 3,000 unlisted empty directories, one named INCOMPLETE, verified OK (and
    the orchestrator's pull-back read the INCOMPLETE directory as the run's marker)."""
    _signed(run_dir, keys)
    for n in range(3000):
        (run_dir / f"d{n:04}").mkdir()
    (run_dir / "INCOMPLETE").mkdir()
    with pytest.raises(VerifyFailed, match=r"^3001 problems: INCOMPLETE/: a directory not listed"):
        verify_bundle(run_dir, keys.allowed)
    for n in range(3000):
        (run_dir / f"d{n:04}").rmdir()
    with pytest.raises(
        VerifyFailed, match=r"^INCOMPLETE/: a directory not listed in the manifest$"
    ):
        verify_bundle(run_dir, keys.allowed)
    (run_dir / "INCOMPLETE").rmdir()
    verify_bundle(run_dir, keys.allowed)  # the listed directories (samples/) are fine


def test_a_removed_file_fails_naming_it(run_dir: Path, keys: Keys) -> None:
    _signed(run_dir, keys)
    (run_dir / "tables.md").unlink()
    with pytest.raises(VerifyFailed, match=r"^tables\.md: listed in the manifest but missing$"):
        verify_bundle(run_dir, keys.allowed)


def test_several_problems_are_all_named(run_dir: Path, keys: Keys) -> None:
    _signed(run_dir, keys)
    (run_dir / "tables.md").unlink()
    (run_dir / "new.txt").write_text("x")
    with pytest.raises(VerifyFailed) as info:
        verify_bundle(run_dir, keys.allowed)
    line = info.value.one_line()
    assert line.startswith("2 problems: ") and "tables.md" in line and "new.txt" in line


def test_a_bundle_signed_by_a_key_not_allowed_fails(
    run_dir: Path, keys: Keys, other_keys: Keys
) -> None:
    _signed(run_dir, other_keys)
    with pytest.raises(
        VerifyFailed, match=rf"^{SIGNATURE_NAME}: signed by ssh-ed25519 key SHA256:"
    ):
        verify_bundle(run_dir, keys.allowed)


def test_an_unsigned_bundle_fails(run_dir: Path, keys: Keys) -> None:
    _signed(run_dir, keys)
    (run_dir / SIGNATURE_NAME).unlink()
    with pytest.raises(VerifyFailed, match=rf"^{SIGNATURE_NAME}: missing"):
        verify_bundle(run_dir, keys.allowed)


def test_results_that_break_the_schema_fail_even_when_signed(run_dir: Path, keys: Keys) -> None:
    doc = json.loads((run_dir / "results.json").read_text())
    doc["cells"][0]["concurrency"] = "many"
    (run_dir / "results.json").write_text(json.dumps(doc))
    schema_error = r"^results\.json: does not match the results schema at cells\.0"
    with pytest.raises(VerifyFailed, match=schema_error):  # bench sign refuses it (issue 29)
        _signed(run_dir, keys)
    # Signed by other means (`bench manifest` and ssh-keygen, as the orchestrator does):
    from bench.bundle import manifest as manifest_mod
    from bench.bundle import sign

    manifest_mod.refresh(run_dir, created_at=NOW)
    sign.sign(run_dir / MANIFEST_NAME, keys.private)
    with pytest.raises(VerifyFailed, match=schema_error):
        verify_bundle(run_dir, keys.allowed)


def test_sign_refuses_a_directory_that_contains_the_api_key(run_dir: Path, keys: Keys) -> None:
    (run_dir / "server.log").write_text("started with --api-key sk-twin-secret-42\n")
    with pytest.raises(UsageError, match=r"^server\.log: contains the API key"):
        seal.seal(run_dir, keys.private, now=NOW, secrets=["sk-twin-secret-42"])
    assert not (run_dir / MANIFEST_NAME).exists()


def test_cli_round_trip_and_failure_exit_codes(
    run_dir: Path, keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["sign", str(run_dir), "--key", str(keys.private)]) == 0
    assert cli.main(["pack", str(run_dir), "--out", str(tmp_path / "b.tar.gz")]) == 0
    capsys.readouterr()
    assert (
        cli.main(["verify", str(tmp_path / "b.tar.gz"), "--allowed-signers", str(keys.allowed)])
        == 0
    )
    out = capsys.readouterr().out
    assert "OK " in out and "6 files match manifest.json" in out
    assert "signed by alice@example.org (ssh-ed25519 SHA256:" in out
    assert ") at 20" in out and "when manifest.json was written and signed" in out
    (run_dir / "tables.md").write_text("tampered\n")
    code = cli.main(["verify", str(run_dir), "--allowed-signers", str(keys.allowed)])
    err = capsys.readouterr().err
    assert code == Exit.VERIFY_FAILED
    assert err.startswith("bench: error: tables.md: ")
    assert "Traceback" not in err and err.count("\n") == 1


def test_opened_archive_is_verified_where_it_was_opened(
    run_dir: Path, keys: Keys, tmp_path: Path
) -> None:
    archive = pack(_signed(run_dir, keys), tmp_path / "b.tar.gz")
    opened = open_bundle(archive, tmp_path / "opened")
    shutil.rmtree(run_dir)  # nothing is read from the original directory
    assert verify_bundle(opened, keys.allowed).files == 6


def test_secret_scan_finds_a_key_straddling_read_chunks(tmp_path: Path) -> None:
    root = tmp_path / "scan"
    (root / "samples").mkdir(parents=True)
    secret = "sk-straddle-0123456789"
    blob = b"x" * ((1 << 20) - 5) + secret.encode() + b"y" * 100
    (root / "samples" / "big.jsonl").write_bytes(blob)
    (root / "clean.txt").write_text("nothing here\n")
    assert seal.find_secret(root, [secret]) == "samples/big.jsonl"
    assert seal.find_secret(root, ["sk-absent-0123456789"]) is None
    assert seal.find_secret(root, ["x"]) is None  # too short to be told from chance


def test_bench_schema_prints_the_results_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "Results"
    assert {"run_id", "settings", "server", "plan"} <= set(schema["required"])
    assert "CellFigures" in schema["$defs"]


def test_bench_pack_refuses_a_directory_whose_signing_was_cut(
    run_dir: Path, keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b.tar.gz"
    sig = run_dir / "manifest.json.sig"
    assert cli.main(["pack", str(run_dir), "--out", str(out)]) == 2  # never signed
    _signed(run_dir, keys)
    whole = sig.read_bytes()
    sig.unlink()  # killed between writing manifest.json and its signature
    assert cli.main(["pack", str(run_dir), "--out", str(out)]) == 2
    sig.write_bytes(whole[: len(whole) // 2])  # killed while ssh-keygen wrote it
    assert cli.main(["pack", str(run_dir), "--out", str(out)]) == 2
    sig.write_bytes(whole)
    (run_dir / "results.json").write_text((run_dir / "results.json").read_text() + " ")
    assert cli.main(["pack", str(run_dir), "--out", str(out)]) == 2  # changed after signing
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"bench: error: {run_dir}: has no manifest.json.sig: it is not signed")
    assert err[1] == err[0]
    assert err[2].startswith(f"bench: error: {sig}: not a whole signature")
    assert err[3].startswith(f"bench: error: {run_dir}: does not match its manifest: results.json")
    assert all("sign it again (bench sign" in line for line in err)
    assert not out.exists()
