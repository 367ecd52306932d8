"""Signatures with the real ssh-keygen, both ways."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from bench.bundle import sign
from bench.errors import UsageError, VerifyFailed
from tests.bundle.conftest import Keys

pytestmark = pytest.mark.subprocess


def _payload(tmp_path: Path) -> Path:
    path = tmp_path / "manifest.json"
    path.write_text('{"run_id": "r1"}\n')
    return path


def test_keygen_makes_a_private_ed25519_key_readable_only_by_its_owner(keys: Keys) -> None:
    assert stat.S_IMODE(keys.private.stat().st_mode) == 0o600
    assert keys.public.read_text().startswith("ssh-ed25519 ")
    line = keys.allowed.read_text()
    assert line.startswith(f'alice@example.org namespaces="{sign.NAMESPACE}" ssh-ed25519 ')


def test_keygen_refuses_to_overwrite_a_key(keys: Keys) -> None:
    before = keys.private.read_bytes()
    with pytest.raises(UsageError, match="already exists"):
        sign.keygen(keys.private, comment="again")
    assert keys.private.read_bytes() == before


def test_round_trip_names_the_principal_and_fingerprint(tmp_path: Path, keys: Keys) -> None:
    payload = _payload(tmp_path)
    sig = sign.sign(payload, keys.private)
    signer = sign.verify(payload, sig, keys.allowed)
    assert signer.principal == "alice@example.org"
    assert signer.key_type == "ssh-ed25519"
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(keys.public)], capture_output=True, text=True, check=True
    ).stdout
    assert signer.fingerprint in listed


def test_stock_ssh_keygen_verifies_our_signature(tmp_path: Path, keys: Keys) -> None:
    payload = _payload(tmp_path)
    sig = sign.sign(payload, keys.private)
    with payload.open("rb") as fh:
        done = subprocess.run(
            [
                "ssh-keygen",
                "-Y",
                "verify",
                "-f",
                str(keys.allowed),
                "-I",
                keys.principal,
                "-n",
                sign.NAMESPACE,
                "-s",
                str(sig),
            ],
            stdin=fh,
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert f'Good "{sign.NAMESPACE}" signature for {keys.principal}' in done.stdout


def test_we_verify_a_signature_made_by_stock_ssh_keygen(tmp_path: Path, keys: Keys) -> None:
    payload = _payload(tmp_path)
    subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(keys.private), "-n", sign.NAMESPACE, str(payload)],
        capture_output=True,
        check=True,
    )
    signer = sign.verify(payload, payload.with_name("manifest.json.sig"), keys.allowed)
    assert signer.principal == keys.principal


def test_a_changed_payload_fails(tmp_path: Path, keys: Keys) -> None:
    payload = _payload(tmp_path)
    sig = sign.sign(payload, keys.private)
    payload.write_text('{"run_id": "r2"}\n')
    with pytest.raises(VerifyFailed, match=r"manifest\.json\.sig: not a valid signature"):
        sign.verify(payload, sig, keys.allowed)


def test_a_key_not_in_allowed_signers_fails_naming_its_fingerprint(
    tmp_path: Path, keys: Keys, other_keys: Keys
) -> None:
    payload = _payload(tmp_path)
    sig = sign.sign(payload, other_keys.private)
    fingerprint = sign.read_signature(sig).fingerprint
    with pytest.raises(VerifyFailed, match="not in") as info:
        sign.verify(payload, sig, keys.allowed)
    assert fingerprint in info.value.one_line()


def test_a_signature_for_another_namespace_is_refused(tmp_path: Path, keys: Keys) -> None:
    payload = _payload(tmp_path)
    subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(keys.private), "-n", "git", str(payload)],
        capture_output=True,
        check=True,
    )
    with pytest.raises(VerifyFailed, match="namespace 'git'"):
        sign.verify(payload, payload.with_name("manifest.json.sig"), keys.allowed)


def test_garbage_signature_is_named(tmp_path: Path, keys: Keys) -> None:
    payload = _payload(tmp_path)
    sig = payload.with_name("manifest.json.sig")
    sig.write_text("-----BEGIN SSH SIGNATURE-----\nnot base64!\n-----END SSH SIGNATURE-----\n")
    with pytest.raises(VerifyFailed, match=r"manifest\.json\.sig: not an OpenSSH signature"):
        sign.verify(payload, sig, keys.allowed)


def test_a_private_key_others_can_read_is_refused_before_ssh_keygen_runs(
    tmp_path: Path, keys: Keys
) -> None:
    payload = _payload(tmp_path)
    keys.private.chmod(0o644)
    with pytest.raises(UsageError, match="permissions 0644") as info:
        sign.sign(payload, keys.private)
    assert f"chmod 600 {keys.private}" in info.value.one_line()
    assert not payload.with_name("manifest.json.sig").exists()


def test_an_existing_user_ssh_key_works(tmp_path: Path) -> None:
    home_key = tmp_path / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bob@host", "-f", str(home_key)],
        check=True,
    )
    allowed = tmp_path / "allowed"
    allowed.write_text(sign.allowed_signers_line(Path(f"{home_key}.pub"), "bob@host") + "\n")
    payload = _payload(tmp_path)
    assert sign.verify(payload, sign.sign(payload, home_key), allowed).principal == "bob@host"


def test_ssh_keygen_is_on_path() -> None:
    # The product's promise is "stock OpenSSH": the tests must run the real one.
    assert shutil.which("ssh-keygen") is not None


def test_cli_keygen_prints_a_line_that_verifies_what_it_signs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import cli

    key = tmp_path / "k" / "bench_ed25519"
    assert cli.main(["keygen", "--out", str(key), "--principal", "carol@lab"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f'carol@lab namespaces="{sign.NAMESPACE}" ssh-ed25519 ')
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    allowed = tmp_path / "allowed"
    allowed.write_text(line + "\n")
    payload = _payload(tmp_path)
    assert sign.verify(payload, sign.sign(payload, key), allowed).principal == "carol@lab"
    assert cli.main(["keygen", "--out", str(key)]) == 2  # never overwrites a key
    assert "already exists" in capsys.readouterr().err
