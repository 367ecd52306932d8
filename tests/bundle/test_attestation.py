"""attestation.intoto.json: made by `bench sign` with the bundle's key, checked by a verifier
bench did not write (securesystemslib) and by `bench verify`."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError

# securesystemslib.signer re-exports these without __all__ (mypy --strict: not "explicit").
from securesystemslib.signer import Signature, SSlibKey  # type: ignore[attr-defined]

from bench import cli
from bench.bundle import dsse, seal
from bench.bundle import manifest as manifest_mod
from bench.bundle.manifest import ATTESTATION_NAME, MANIFEST_NAME
from bench.bundle.pack import pack
from bench.bundle.verify import verify_bundle
from bench.errors import Exit, VerifyFailed
from tests.bundle.conftest import Keys
from tests.support.runs import write_run_dir

pytestmark = pytest.mark.subprocess

NOW = datetime(2026, 12, 2, 11, 45, tzinfo=UTC)


@pytest.fixture
def signed(tmp_path: Path, keys: Keys) -> Path:
    root = write_run_dir(tmp_path / "run-20261202T1130Z-abc")
    seal.seal(root, keys.private, now=NOW)
    return root


def _sslib_key(keys: Keys) -> SSlibKey:
    """The bundle's public key as securesystemslib holds it: raw ed25519 bytes, hex."""
    public = serialization.load_ssh_public_key(keys.public.read_bytes())
    assert isinstance(public, Ed25519PublicKey)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return SSlibKey(dsse.fingerprint(public), "ed25519", "ed25519", {"public": raw.hex()})


def _envelope(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / ATTESTATION_NAME).read_text())
    return doc


def _third_party_check(root: Path, keys: Keys) -> list[str]:
    """What securesystemslib verifies, then the statement's subjects against the files on
    disk, by hand: every problem, empty when all is well."""
    envelope = Envelope.from_dict(_envelope(root))
    envelope.verify([_sslib_key(keys)], 1)  # raises VerificationError
    statement = json.loads(envelope.payload)
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    problems = []
    for subject in statement["subject"]:
        found = hashlib.sha256((root / subject["name"]).read_bytes()).hexdigest()
        if found != subject["digest"]["sha256"]:
            problems.append(subject["name"])
    return problems


def _verify_cli(target: Path, keys: Keys, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["verify", str(target), "--allowed-signers", str(keys.allowed)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_securesystemslib_verifies_the_envelope_of_a_signed_bundle(
    signed: Path, keys: Keys
) -> None:
    assert _third_party_check(signed, keys) == []
    statement = json.loads(base64.b64decode(_envelope(signed)["payload"]))
    manifest = json.loads((signed / MANIFEST_NAME).read_text())
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == {
        f["path"]: f["sha256"] for f in manifest["files"]
    }
    assert statement["predicateType"] == dsse.PREDICATE_TYPE
    predicate = statement["predicate"]
    assert predicate["run_id"] == "run-20261202T1130Z-abc"
    assert predicate["bench"]["commit"] == "81a476982"
    assert predicate["workload"] == "card"
    # ... and SSlibKey.verify_signature over the PAE, the primitive itself.
    sig = _envelope(signed)["signatures"][0]
    payload = base64.b64decode(_envelope(signed)["payload"])
    _sslib_key(keys).verify_signature(
        Signature(sig["keyid"], base64.b64decode(sig["sig"]).hex()),
        dsse.pae(dsse.PAYLOAD_TYPE, payload),
    )


def test_the_attestation_is_not_listed_in_the_manifest_and_is_packed(
    signed: Path, keys: Keys, tmp_path: Path
) -> None:
    manifest = json.loads((signed / MANIFEST_NAME).read_text())
    assert ATTESTATION_NAME not in {f["path"] for f in manifest["files"]}
    ok = verify_bundle(pack(signed, tmp_path / "b.tar.gz"), keys.allowed)
    assert ok.attestation.startswith(f"attestation: {ATTESTATION_NAME} verified")


def test_bench_verify_says_the_attestation_verified(
    signed: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _verify_cli(signed, keys, capsys)
    assert code == 0, out
    assert f"attestation: {ATTESTATION_NAME} verified (in-toto Statement v1" in out
    fingerprint = dsse.fingerprint(dsse.load_private_key(keys.private).public_key())
    assert f"signed by {fingerprint})" in out


def test_one_changed_byte_fails_the_third_party_check_and_bench_verify(
    signed: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    path = signed / "tables.md"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert _third_party_check(signed, keys) == ["tables.md"]
    code, out = _verify_cli(signed, keys, capsys)
    assert code == Exit.VERIFY_FAILED
    assert "tables.md: " in out


def test_a_changed_envelope_signature_fails_in_one_line(
    signed: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _envelope(signed)
    sig = bytearray(base64.b64decode(doc["signatures"][0]["sig"]))
    sig[0] ^= 0x01
    doc["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    (signed / ATTESTATION_NAME).write_text(json.dumps(doc))
    with pytest.raises(VerificationError):
        Envelope.from_dict(doc).verify([_sslib_key(keys)], 1)
    code, out = _verify_cli(signed, keys, capsys)
    assert code == Exit.VERIFY_FAILED
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    assert "does not verify over the payload" in lines[0]
    assert lines[0].count(ATTESTATION_NAME) == 1


def test_a_statement_re_signed_by_another_key_fails(
    signed: Path, keys: Keys, other_keys: Keys
) -> None:
    """A statement naming forged digests, validly signed, but not by the manifest's key."""
    dsse.attest(signed, manifest_mod.read(signed), other_keys.private)
    with pytest.raises(VerifyFailed, match=rf"^{ATTESTATION_NAME}: not signed by SHA256:"):
        verify_bundle(signed, keys.allowed)


def test_subjects_that_differ_from_the_manifest_fail_even_when_signed(
    signed: Path, keys: Keys
) -> None:
    made = manifest_mod.read(signed)
    fewer = made.model_copy(update={"files": made.files[1:]})
    dsse.attest(signed, fewer, keys.private)
    with pytest.raises(VerifyFailed, match=r"is not a subject$"):
        verify_bundle(signed, keys.allowed)


def test_an_oversized_envelope_fails_without_being_read(
    signed: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dsse, "MAX_BYTES", 100)
    with pytest.raises(VerifyFailed, match=rf"^{ATTESTATION_NAME}"):
        verify_bundle(signed, keys.allowed)


def test_a_bundle_without_the_attestation_verifies_and_says_so(
    signed: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    (signed / ATTESTATION_NAME).unlink()
    code, out = _verify_cli(signed, keys, capsys)
    assert code == 0, out
    assert "no attestation" in out


def test_an_rsa_key_still_signs_the_bundle_which_then_has_no_attestation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess

    from bench.bundle import sign

    key = tmp_path / "rsa_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-C", "bob", "-f", str(key)],
        check=True,
        timeout=60,
    )
    allowed = tmp_path / "allowed"
    allowed.write_text(sign.allowed_signers_line(key.with_suffix(".pub"), "bob") + "\n")
    root = write_run_dir(tmp_path / "run-20261202T1130Z-rsa")
    seal.seal(root, key, now=NOW)
    assert (root / "manifest.json.sig").is_file() and not (root / ATTESTATION_NAME).exists()
    code = cli.main(["verify", str(root), "--allowed-signers", str(allowed)])
    out = capsys.readouterr()
    assert code == 0 and "no attestation" in out.out + out.err
