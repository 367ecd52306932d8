"""The orchestrator's sealing steps without the engine: the host's key made as on a host
(provisioning.flow.signing, this machine as the host), `bench manifest`, the host's
`ssh-keygen -Y sign`, then `bench attest` with that key file, as the helper container runs
them (tests/provisioning/flow/test_flow.py runs them through sshd and Docker).

What is checked: the allowed-signers line the orchestrator writes for the host
(`vllm-bench@<host> namespaces=...`) gives `bench verify` the key of the attestation;
securesystemslib verifies the envelope; one changed byte fails it and `bench verify`;
`bench attest` refuses what would make a bundle that does not verify.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError

# securesystemslib.signer re-exports it without __all__ (mypy --strict: not "explicit").
from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]

from bench import cli
from bench.bundle import dsse, seal, sign
from bench.bundle.manifest import ATTESTATION_NAME, MANIFEST_NAME, SIGNATURE_NAME
from bench.bundle.verify import verify_bundle
from bench.errors import Exit
from provisioning.flow import signing
from provisioning.hosts.local import LocalShell, local_host
from tests.support import attestation
from tests.support.runs import write_run_dir

pytestmark = pytest.mark.subprocess

HOST = "gpu07"


class HostSide:
    """This machine as the GPU host: its home, its signing key, the local allowed-signers."""

    def __init__(self, tmp_path: Path) -> None:
        self.shell = LocalShell(local_host(HOST))
        self.home = tmp_path / "home"
        self.home.mkdir()
        key, self.public_line = signing.ensure_host_key(self.shell, str(self.home))
        self.key = Path(key)
        self.allowed = tmp_path / "allowed_signers"
        assert signing.trust_locally(self.public_line, HOST, self.allowed)

    def seal(self, run: Path) -> None:
        """What provisioning.flow.sealing does, the helper containers' commands run here."""
        assert cli.main(["manifest", str(run)]) == 0
        signing.sign_on_host(self.shell, str(self.key), str(run / MANIFEST_NAME))
        assert cli.main(["attest", str(run), "--key", str(self.key)]) == 0

    def sslib_key(self) -> SSlibKey:
        return attestation.sslib_key(self.public_line)


def _run_dir(path: Path) -> Path:
    """A run directory as the orchestrator has it before the manifest: recipe.json too."""
    run = write_run_dir(path)
    seal.write_default_recipe(run)
    return run


@pytest.fixture
def host(tmp_path: Path) -> HostSide:
    return HostSide(tmp_path)


@pytest.fixture
def sealed(host: HostSide, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    run = _run_dir(tmp_path / "bundles" / "r1-gpu07")
    host.seal(run)
    capsys.readouterr()
    return run


def _third_party_check(run: Path, host: HostSide) -> list[str]:
    return attestation.third_party_check(run, host.sslib_key())


def _verify_cli(run: Path, host: HostSide, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["verify", str(run), "--allowed-signers", str(host.allowed)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_hosts_allowed_signers_line_gives_verify_the_attestations_key(host: HostSide) -> None:
    line = host.allowed.read_text().strip()
    assert line.startswith(f'vllm-bench@{HOST} namespaces="{sign.NAMESPACE}" ssh-ed25519 ')
    found = dsse.allowed_ed25519_keys(host.allowed)
    private = dsse.load_private_key(host.key)
    assert list(found) == [dsse.fingerprint(private.public_key())]
    assert dsse.raw_public_bytes(found[dsse.fingerprint(private.public_key())]) == (
        dsse.raw_public_bytes(private.public_key())
    )


def test_a_bundle_sealed_the_orchestrators_way_verifies_with_securesystemslib_and_bench(
    sealed: Path, host: HostSide, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _third_party_check(sealed, host) == []
    manifest = json.loads((sealed / MANIFEST_NAME).read_text())
    statement = json.loads(
        Envelope.from_dict(json.loads((sealed / ATTESTATION_NAME).read_text())).payload
    )
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == {
        f["path"]: f["sha256"] for f in manifest["files"]
    }
    assert statement["predicate"]["run_id"] == manifest["run_id"] == "run-20261202T1130Z-abc"
    code, out = _verify_cli(sealed, host, capsys)
    assert code == 0, out
    assert f"signed by vllm-bench@{HOST} (ssh-ed25519 " in out
    assert f"attestation: {ATTESTATION_NAME} verified (in-toto Statement v1" in out


def test_one_changed_byte_fails_securesystemslib_and_bench_verify(
    sealed: Path, host: HostSide, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sealed / "results.json"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert _third_party_check(sealed, host) == ["results.json"]
    code, out = _verify_cli(sealed, host, capsys)
    assert code == Exit.VERIFY_FAILED and "results.json: " in out


def test_one_changed_byte_of_the_statement_fails_both(
    sealed: Path, host: HostSide, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads((sealed / ATTESTATION_NAME).read_text())
    payload = bytearray(doc["payload"].encode())
    payload[40] = ord("A") if payload[40] != ord("A") else ord("B")
    doc["payload"] = payload.decode()
    (sealed / ATTESTATION_NAME).write_text(json.dumps(doc))
    with pytest.raises(VerificationError):
        Envelope.from_dict(doc).verify([host.sslib_key()], 1)
    code, out = _verify_cli(sealed, host, capsys)
    assert code == Exit.VERIFY_FAILED and ATTESTATION_NAME in out


def test_a_bundle_sealed_before_attestations_still_verifies_and_says_so(
    host: HostSide, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the orchestrator made before `bench attest`: manifest and signature only."""
    run = _run_dir(tmp_path / "older")
    assert cli.main(["manifest", str(run)]) == 0
    signing.sign_on_host(host.shell, str(host.key), str(run / MANIFEST_NAME))
    capsys.readouterr()
    code, out = _verify_cli(run, host, capsys)
    assert code == 0, out
    assert "no attestation (a bundle made before attestations, or signed without one)" in out


def test_attest_refuses_what_would_not_verify_and_leaves_no_attestation(
    host: HostSide, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_dir(tmp_path / "run")

    def refused(key: Path) -> str:
        code = cli.main(["attest", str(run), "--key", str(key)])
        captured = capsys.readouterr()
        assert code == Exit.USAGE, captured
        assert not (run / ATTESTATION_NAME).exists()
        return captured.err

    assert f"has no {MANIFEST_NAME}" in refused(host.key)
    assert cli.main(["manifest", str(run)]) == 0
    (run / "tables.md").write_text("changed after the manifest\n")
    assert "does not match its manifest: tables.md: " in refused(host.key)
    assert cli.main(["manifest", str(run)]) == 0
    other = tmp_path / "other_ed25519"
    sign.keygen(other, comment="someone-else")
    sign.sign(run / MANIFEST_NAME, other)
    assert "checks the attestation with the key that signed the manifest" in refused(host.key)
    (run / SIGNATURE_NAME).unlink()
    host.key.chmod(0o640)
    assert "let others read the private key" in refused(host.key)
    host.key.chmod(0o600)
    # Unsigned yet is fine (the orchestrator signs first, but either order makes a pair).
    assert cli.main(["attest", str(run), "--key", str(host.key)]) == 0
    signing.sign_on_host(host.shell, str(host.key), str(run / MANIFEST_NAME))
    ok = verify_bundle(run, host.allowed)
    assert ok.attestation.startswith(f"attestation: {ATTESTATION_NAME} verified")


def test_attest_refuses_a_bundle_that_leaks_the_api_key(
    sealed: Path,
    host: HostSide,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = "sk-attest-" + "7" * 24
    (sealed / ATTESTATION_NAME).unlink()
    (sealed / "server.log").write_text(f"started with --api-key {secret}\n")
    assert cli.main(["manifest", str(sealed)]) == 0
    monkeypatch.setenv("BENCH_API_KEY", secret)
    capsys.readouterr()
    assert cli.main(["attest", str(sealed), "--key", str(host.key)]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "server.log: contains the API key" in err and secret not in err
    assert not (sealed / ATTESTATION_NAME).exists()


def test_the_hosts_key_is_found_among_other_hosts_lines(
    sealed: Path, host: HostSide, tmp_path: Path
) -> None:
    """An allowed-signers file as the orchestrator grows it: other hosts' keys first (one
    made again since: two lines for one principal), a comment, an RSA key."""
    lines = ["# bundles from the lab"]
    for name in ("gpu01", "gpu02", "gpu01"):
        home = tmp_path / f"home-{name}-{len(lines)}"
        home.mkdir()
        _, public = signing.ensure_host_key(LocalShell(local_host(name)), str(home))
        fields = public.split()
        lines.append(f'vllm-bench@{name} namespaces="{sign.NAMESPACE}" {fields[0]} {fields[1]}')
        lines.append(f"# {name} again")
    rsa = tmp_path / "rsa_key"
    assert LocalShell(local_host("x")).run(f"ssh-keygen -q -t rsa -b 2048 -N '' -f {rsa}").ok
    lines.append(sign.allowed_signers_line(rsa.with_name("rsa_key.pub"), "vllm-bench@gpu03"))
    lines.append(host.allowed.read_text().strip())
    crowded = tmp_path / "crowded_allowed"
    crowded.write_text("\n".join(lines) + "\n")
    ok = verify_bundle(sealed, crowded)
    assert ok.signer.principal == f"vllm-bench@{HOST}"
    assert ok.attestation.startswith(f"attestation: {ATTESTATION_NAME} verified")
