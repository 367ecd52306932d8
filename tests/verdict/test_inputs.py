"""Issue 14: a verdict verifies every bundle it reads (signature, hashes, schema)."""

from __future__ import annotations

import pathlib
import tarfile
from datetime import UTC, datetime

import pytest

from bench.bundle import seal
from bench.bundle.pack import pack
from bench.card.model import Card
from bench.cli import main
from bench.errors import Exit
from tests.bundle.conftest import Keys
from tests.support.synth import make_results
from tests.verdict.test_cli import _bundle

pytestmark = pytest.mark.subprocess


def _tampered(tmp: pathlib.Path, card: Card, keys: Keys) -> pathlib.Path:
    """A bundle whose results.json was edited after signing (+10 % everywhere)."""
    root = tmp / "tampered"
    root.mkdir()
    (root / "results.json").write_text(make_results(card, speed=10.0).model_dump_json())
    seal.seal(root, keys.private, now=datetime.now(UTC))
    faster = make_results(card, speed=10.0, scale=lambda ctx, c: 1.1)
    (root / "results.json").write_text(faster.model_dump_json())
    return pack(root, tmp / "tampered.tar.gz")


def _unsigned_archive(tmp: pathlib.Path, card: Card) -> pathlib.Path:
    root = tmp / "unsigned"
    root.mkdir()
    (root / "results.json").write_text(make_results(card, speed=10.0).model_dump_json())
    out = tmp / "unsigned.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(root / "results.json", arcname="unsigned/results.json")
    return out


def test_tampered_and_unsigned_bundles_are_refused_by_reproduce_exit_5(
    card: Card,
    card_path: pathlib.Path,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    signer: Keys,
) -> None:
    trusted = ["--allowed-signers", str(signer.allowed)]
    tampered = _tampered(tmp_path, card, signer)
    assert (
        main(["reproduce", str(tampered), "--card", str(card_path), *trusted]) == Exit.VERIFY_FAILED
    )
    err = capsys.readouterr().err
    assert "tampered.tar.gz: does not verify" in err and "results.json" in err
    unsigned = _unsigned_archive(tmp_path, card)
    assert (
        main(["reproduce", str(unsigned), "--card", str(card_path), *trusted]) == Exit.VERIFY_FAILED
    )
    assert "manifest.json: missing" in capsys.readouterr().err


def test_tampered_and_unsigned_bundles_are_refused_by_compare_exit_5(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], signer: Keys
) -> None:
    trusted = ["--allowed-signers", str(signer.allowed)]
    good = _bundle(tmp_path, "good", make_results(card, speed=10.0), archive=True, keys=signer)
    tampered = _tampered(tmp_path, card, signer)
    unsigned = _unsigned_archive(tmp_path, card)
    assert main(["compare", str(good), str(tampered), *trusted]) == Exit.VERIFY_FAILED
    assert main(["compare", str(unsigned), str(good), *trusted]) == Exit.VERIFY_FAILED
    capsys.readouterr()
    # A key nobody trusts: the default allowed-signers files are absent here.
    assert main(["compare", str(good), str(good)]) == Exit.VERIFY_FAILED
    assert "no allowed-signers file" in capsys.readouterr().err


def test_unverified_reads_anyway_and_says_so_on_the_first_line(
    card: Card,
    card_path: pathlib.Path,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    signer: Keys,
) -> None:
    tampered = _tampered(tmp_path, card, signer)
    trusted = ["--allowed-signers", str(signer.allowed)]
    code = main(["reproduce", str(tampered), "--card", str(card_path), "--unverified", *trusted])
    assert code == Exit.NOT_REPRODUCED  # the edit made it 10 % faster
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("UNVERIFIED: tampered.tar.gz")


def test_signed_bundle_names_its_signer_and_a_directory_is_called_unsigned(
    card: Card,
    card_path: pathlib.Path,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    signer: Keys,
) -> None:
    signed = _bundle(tmp_path, "signed", make_results(card, speed=10.0), archive=True, keys=signer)
    plain = _bundle(tmp_path, "plain", make_results(card, speed=10.0))
    trusted = ["--allowed-signers", str(signer.allowed)]
    assert main(["reproduce", str(signed), "--card", str(card_path), *trusted]) == 0
    out = capsys.readouterr().out
    assert "signed.tar.gz: verified, signed by verdict@example.org" in out
    assert main(["reproduce", str(plain), "--card", str(card_path)]) == 0
    out = capsys.readouterr().out
    assert "plain: unsigned (a run directory, not a signed bundle)" in out
    assert not out.startswith("UNVERIFIED")
