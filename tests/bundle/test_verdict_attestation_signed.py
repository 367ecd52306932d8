"""The verdict attestation of a signed bundle (`bench reproduce --attest`), checked by
`bench verify BUNDLE --verdict FILE --card CARD` and by securesystemslib; a bundle changed
by one byte after its verdict fails on the subject line. (Unit tests of the statement and
the envelope, and the fuzz of its reader: tests/verdict/test_verdict_attestation.py.)"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import cli
from bench.bundle import seal
from bench.bundle import verdict_attestation as va
from bench.bundle.pack import pack
from bench.card.parse import read_card
from bench.errors import Exit
from tests.bundle.conftest import Keys
from tests.card.conftest import SHIPPED
from tests.support import attestation as third_party
from tests.support.synth import make_results

pytestmark = pytest.mark.subprocess

NOW = datetime(2026, 12, 2, 11, 45, tzinfo=UTC)


@pytest.fixture
def no_default_signers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "bench.verdict.run_source.DEFAULT_ALLOWED_SIGNERS", (tmp_path / "no-allowed-signers",)
    )


@pytest.fixture
def archive(tmp_path: Path, keys: Keys, no_default_signers: None) -> Path:
    """A signed bundle whose run reproduces the shipped card, packed."""
    root = tmp_path / "run1"
    root.mkdir()
    (root / "results.json").write_text(
        make_results(read_card(SHIPPED), speed=10.0).model_dump_json()
    )
    seal.seal(root, keys.private, now=NOW)
    return pack(root, tmp_path / "run1.tar.gz")


# A synthetic run records no provenance: bench verify checks its integrity and the verdict.
INTEGRITY = "--integrity-only"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_bench_verify_checks_the_verdict_of_an_archive_and_a_changed_byte_fails_it(
    archive: Path, keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    allowed = ["--allowed-signers", str(keys.allowed)]
    code, _, err = _run(
        [
            "reproduce",
            str(archive),
            "--card",
            str(SHIPPED),
            *allowed,
            "--attest",
            str(keys.private),
        ],
        capsys,
    )
    assert code == Exit.OK, err
    verdict = tmp_path / "run1.verdict.intoto.json"
    assert verdict.is_file()
    # securesystemslib, with the key read from the allowed-signers line by hand.
    key = third_party.sslib_key(third_party.allowed_line(keys.allowed, keys.principal))
    statement = third_party.third_party_statement(verdict, key)
    assert third_party.subject_digests(statement) == {
        "run1.tar.gz": third_party.sha256_file(archive),
        SHIPPED.name: third_party.sha256_file(SHIPPED),
    }
    check = ["verify", str(archive), INTEGRITY, *allowed, "--verdict", str(verdict), "--card",
             str(SHIPPED)]  # fmt: skip
    code, out, err = _run(check, capsys)
    assert code == 0, err
    assert f"verdict: REPRODUCED (exit 0) of run1.tar.gz against {SHIPPED.name}, made at " in out
    assert f"signed by {keys.principal} (SHA256:" in out
    assert "REPRODUCED: 40 of 40 compared cells" in out
    # One byte of the archive changed after the verdict: the subject line, exit 5.
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    archive.write_bytes(bytes(data))
    code, out, err = _run(check, capsys)
    assert code == Exit.VERIFY_FAILED and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(
        "bench: error: run1.verdict.intoto.json: subject run1.tar.gz (run): sha256 "
    ), err
    assert "not the run this verdict judged" in err


def test_a_run_directory_verdict_is_checked_with_its_directory(
    archive: Path, keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "run1"
    out = tmp_path / "judged.intoto.json"
    allowed = ["--allowed-signers", str(keys.allowed)]
    rep = ["reproduce", str(root), "--card", str(SHIPPED), *allowed]
    code, _, err = _run([*rep, "--attest", str(keys.private), "--attest-out", str(out)], capsys)
    assert code == 0, err
    check = ["verify", str(root), INTEGRITY, *allowed, "--verdict", str(out), "--card",
             str(SHIPPED)]  # fmt: skip
    assert _run(check, capsys)[0] == 0
    # The archive is another subject than the directory's manifest.json.
    code, _, err = _run(["verify", str(archive), *check[2:]], capsys)
    assert code == Exit.VERIFY_FAILED
    assert "subject run1/manifest.json (run): sha256 " in err
    # Another card than the one judged.
    other = tmp_path / "other-card.txt"
    shutil.copy(SHIPPED, other)
    with other.open("a") as fh:
        fh.write("\n")
    code, _, err = _run([*check[:-1], str(other)], capsys)
    assert code == Exit.VERIFY_FAILED
    assert f"subject {SHIPPED.name} (card): sha256 " in err


def test_verdict_options_go_together_and_a_verdict_from_an_untrusted_key_fails(
    archive: Path, keys: Keys, other_keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    allowed = ["--allowed-signers", str(keys.allowed)]
    code, _, err = _run(["verify", str(archive), *allowed, "--verdict", "x.json"], capsys)
    assert code == Exit.USAGE and "--verdict, --card (and --verdict-signers) go together" in err
    out = tmp_path / "v.intoto.json"
    rep = ["reproduce", str(archive), "--card", str(SHIPPED), *allowed]
    assert (
        _run([*rep, "--attest", str(other_keys.private), "--attest-out", str(out)], capsys)[0] == 0
    )
    check = ["verify", str(archive), INTEGRITY, *allowed, "--verdict", str(out), "--card",
             str(SHIPPED)]  # fmt: skip
    code, _, err = _run(check, capsys)
    assert code == Exit.VERIFY_FAILED
    assert err.strip() == (
        "bench: error: v.intoto.json: not signed by a key of the allowed-signers file"
    )
    # --verdict-signers: the verdict's signer trusted in a file of its own.
    code, outp, err = _run([*check, "--verdict-signers", str(other_keys.allowed)], capsys)
    assert code == 0, err
    assert f"signed by {other_keys.principal} (SHA256:" in outp
    assert va.SUFFIX == ".verdict.intoto.json"


def test_bench_verify_checks_a_compares_attestation_with_its_sides(
    archive: Path, keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench compare A --vs B --attest: bench verify B --compared A --vs B checks it; a
    changed B, the sides swapped, --card, or a BUNDLE not compared: one line each."""
    root = tmp_path / "run2"
    root.mkdir()
    (root / "results.json").write_text(
        make_results(read_card(SHIPPED), speed=10.0).model_dump_json()
    )
    seal.seal(root, keys.private, now=NOW)
    other = pack(root, tmp_path / "run2.tar.gz")
    allowed = ["--allowed-signers", str(keys.allowed)]
    code, _, err = _run(
        ["compare", str(archive), "--vs", str(other), *allowed, "--attest", str(keys.private)],
        capsys,
    )
    out = tmp_path / ("run2" + va.COMPARE_SUFFIX)
    assert out.is_file() and f"verdict attestation: {out}" in err
    check = ["verify", str(other), INTEGRITY, *allowed, "--verdict", str(out)]
    sides = ["--compared", str(archive), "--vs", str(other)]
    got, printed, err = _run([*check, *sides], capsys)
    assert got == 0, err
    assert f"(exit {code}) of side A run1.tar.gz against side B run2.tar.gz, made at " in printed
    assert f"signed by {keys.principal} (SHA256:" in printed
    swapped = ["--compared", str(other), "--vs", str(archive)]
    got, printed, err = _run([*check, *swapped], capsys)
    assert got == Exit.VERIFY_FAILED and printed == "" and err.count("\n") == 1, err
    assert err.endswith("given as side A: the sides are swapped\n")
    got, _, err = _run([*check, "--card", str(SHIPPED)], capsys)
    assert got == Exit.USAGE and "a compare's attestation, not a verdict against a card" in err
    got, _, err = _run([*check, *sides, "--card", str(SHIPPED)], capsys)
    assert got == Exit.USAGE and "--verdict, --compared and --vs go together" in err
    got, _, err = _run([*check, "--compared", str(archive), "--vs", str(archive)], capsys)
    assert got == Exit.USAGE and "not one of the bundles of --compared or --vs" in err
    # One byte of B changed after the compare.
    data = bytearray(other.read_bytes())
    data[len(data) // 2] ^= 0x01
    other.write_bytes(bytes(data))
    got, printed, err = _run([*check, *sides], capsys)
    assert got == Exit.VERIFY_FAILED and printed == "" and err.count("\n") == 1, err
    assert err.startswith(f"bench: error: {out.name}: subject run2.tar.gz (side B): sha256 "), err
