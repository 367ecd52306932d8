"""`bench reproduce --attest KEY`: the verdict as an in-toto statement in a DSSE envelope beside
the run, checked by bench (bench.bundle.verdict_attestation.check) and by securesystemslib.

No process, no socket: the keys are made with `cryptography` in OpenSSH's format (what
`bench keygen` writes), the run is a results.json or a run directory with an unsigned
manifest.json read --unverified; tests/bundle/test_verdict_attestation_signed.py does the
same with signed bundles and `bench verify --verdict`.
"""

from __future__ import annotations

import base64
import json
import pathlib
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from securesystemslib.exceptions import VerificationError

import bench
from bench.bundle import dsse
from bench.bundle import manifest as manifest_mod
from bench.bundle import verdict_attestation as va
from bench.card.model import Card
from bench.cli import main
from bench.errors import BenchError, Exit, VerifyFailed
from tests.support import attestation as third_party
from tests.support.synth import make_results

PRINCIPAL = "verdict@example.org"
NOW = datetime(2026, 12, 2, 11, 45, tzinfo=UTC)


class OpenSshKey:
    """An unencrypted ed25519 key in OpenSSH's format (0600) and its allowed-signers file."""

    def __init__(self, root: pathlib.Path, principal: str = PRINCIPAL) -> None:
        root.mkdir(parents=True, exist_ok=True)
        private = Ed25519PrivateKey.generate()
        self.private = root / "signing_ed25519"
        self.private.write_bytes(
            private.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption(),
            )
        )
        self.private.chmod(0o600)
        public = private.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        self.line = f"{principal} {public.decode()}"
        self.allowed = root / "allowed_signers"
        self.allowed.write_text(self.line + "\n")
        self.fingerprint = dsse.fingerprint(private.public_key())


@pytest.fixture
def key(tmp_path: pathlib.Path) -> OpenSshKey:
    return OpenSshKey(tmp_path / "keys")


@pytest.fixture
def run(card: Card, tmp_path: pathlib.Path) -> pathlib.Path:
    """A run's results.json that reproduces the card (every cell it measures)."""
    path = tmp_path / "run1" / "results.json"
    path.parent.mkdir()
    path.write_text(make_results(card, speed=10.0).model_dump_json(indent=2))
    return path


def _reproduce(run: pathlib.Path, card_path: pathlib.Path, *extra: str) -> int:
    return main(["reproduce", str(run), "--card", str(card_path), *extra])


def _payload(envelope: pathlib.Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(base64.b64decode(json.loads(envelope.read_text())["payload"]))
    return doc


def test_reproduce_writes_a_signed_statement_of_the_run_and_the_card(
    run: pathlib.Path,
    card_path: pathlib.Path,
    key: OpenSshKey,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _reproduce(run, card_path, "--attest", str(key.private)) == Exit.OK
    out = run.with_name("results" + va.SUFFIX)  # <stem>.verdict.intoto.json beside it
    assert f"verdict attestation: {out} (signed by {key.fingerprint})" in capsys.readouterr().err
    statement = _payload(out)
    assert statement["_type"] == dsse.STATEMENT_TYPE
    assert statement["predicateType"] == va.PREDICATE_TYPE
    assert statement["subject"] == [
        {"name": "results.json", "digest": {"sha256": third_party.sha256_file(run)}},
        {"name": card_path.name, "digest": {"sha256": third_party.sha256_file(card_path)}},
    ]
    p = statement["predicate"]
    assert (p["kind"], p["outcome"], p["exit_code"], p["exit_name"]) == (
        "reproduce",
        "REPRODUCED",
        0,
        "OK",
    )
    assert p["summary"].startswith("REPRODUCED: 40 of 40 compared cells")
    assert p["tolerance"] == {"throughput_pct": 5.0, "latency_pct": 10.0}
    assert p["run"]["subject"] == "results.json" and p["card"]["subject"] == card_path.name
    assert p["bench"] == {"version": bench.__version__} and p["made_at"].endswith("+00:00")
    assert p["total"] == p["listed"] == len(p["cells"]) == 55
    passed = next(c for c in p["cells"] if c["verdict"] == "pass")
    figure = passed["figures"][0]
    assert set(figure) == {"figure", "published", "ours", "delta_pct", "outcome"}
    assert figure["outcome"] == "pass" and abs(figure["delta_pct"]) <= 10
    # bench's own check: the signature by a key of the allowed-signers file, the subjects.
    checked = va.check(out, key.allowed, run=run, card=card_path)
    assert checked.lines()[0].startswith(
        f"verdict: REPRODUCED (exit 0) of results.json against {card_path.name}, made at "
    )
    assert f"signed by {PRINCIPAL} ({key.fingerprint})" in checked.lines()[-1]


def test_securesystemslib_verifies_the_verdict_envelope(
    run: pathlib.Path, card_path: pathlib.Path, key: OpenSshKey, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "elsewhere.intoto.json"
    assert _reproduce(run, card_path, "--attest", str(key.private), "--attest-out", str(out)) == 0
    sslib = third_party.sslib_key(key.line)
    statement = third_party.third_party_statement(out, sslib)
    assert third_party.subject_digests(statement) == {
        "results.json": third_party.sha256_file(run),
        card_path.name: third_party.sha256_file(card_path),
    }
    other = third_party.sslib_key(OpenSshKey(tmp_path / "other").line)
    with pytest.raises(VerificationError):
        third_party.third_party_statement(out, other)


def test_a_run_directory_is_its_manifest_and_one_changed_byte_names_the_subject(
    card: Card, card_path: pathlib.Path, key: OpenSshKey, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "run-dir"
    root.mkdir()
    (root / "results.json").write_text(make_results(card, speed=10.0).model_dump_json())
    manifest_mod.write(root, manifest_mod.build(root, run_id="r1", created_at=NOW))
    # Not signed: read --unverified (tests/bundle/test_verdict_attestation_signed.py signs).
    assert _reproduce(root, card_path, "--attest", str(key.private), "--unverified") == 0
    out = tmp_path / ("run-dir" + va.SUFFIX)
    names = [s["name"] for s in _payload(out)["subject"]]
    assert names == ["run-dir/manifest.json", card_path.name]
    va.check(out, key.allowed, run=root, card=card_path)
    copy = tmp_path / "card-copy.txt"
    data = bytearray(card_path.read_bytes())
    data[len(data) // 2] ^= 0x01
    copy.write_bytes(bytes(data))
    with pytest.raises(VerifyFailed, match=rf"^{out.name}: subject {card_path.name} \(card\): "):
        va.check(out, key.allowed, run=root, card=copy)
    manifest = root / manifest_mod.MANIFEST_NAME
    manifest.write_bytes(manifest.read_bytes().replace(b'"r1"', b'"r2"'))
    with pytest.raises(VerifyFailed, match=r"subject run-dir/manifest.json \(run\): sha256 "):
        va.check(out, key.allowed, run=root, card=card_path)


def test_a_changed_signature_or_an_unknown_signer_fails_in_one_line(
    run: pathlib.Path, card_path: pathlib.Path, key: OpenSshKey, tmp_path: pathlib.Path
) -> None:
    assert _reproduce(run, card_path, "--attest", str(key.private)) == 0
    out = run.with_name("results" + va.SUFFIX)
    stranger = OpenSshKey(tmp_path / "stranger", "mallory@example.org")
    with pytest.raises(VerifyFailed, match=r"not signed by a key of the allowed-signers file$"):
        va.check(out, stranger.allowed, run=run, card=card_path)
    doc = json.loads(out.read_text())
    sig = bytearray(base64.b64decode(doc["signatures"][0]["sig"]))
    sig[0] ^= 0x01
    doc["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    out.write_text(json.dumps(doc))
    with pytest.raises(VerifyFailed) as caught:
        va.check(out, key.allowed, run=run, card=card_path)
    assert caught.value.one_line() == (
        f"{out.name}: the signature by {key.fingerprint} does not verify over the payload"
    )
    assert caught.value.exit_code == Exit.VERIFY_FAILED


def test_a_key_that_cannot_sign_the_envelope_leaves_the_verdict_without_one(
    run: pathlib.Path, card_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    rsa_key = tmp_path / "rsa_key"
    rsa_key.write_bytes(
        rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    rsa_key.chmod(0o600)
    # The verdict stands and exits as it would; one warning (structlog) says why not.
    assert _reproduce(run, card_path, "--attest", str(rsa_key)) == Exit.OK
    assert not run.with_name("results" + va.SUFFIX).exists()
    # A missing key, or one others can read, is refused before anything is judged.
    assert _reproduce(run, card_path, "--attest", str(tmp_path / "nope")) == Exit.USAGE
    rsa_key.chmod(0o644)
    assert _reproduce(run, card_path, "--attest", str(rsa_key)) == Exit.USAGE


def test_an_unsigned_run_directory_has_no_attestation_but_its_verdict(
    card: Card, card_path: pathlib.Path, key: OpenSshKey, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    (root / "results.json").write_text(make_results(card, speed=10.0).model_dump_json())
    assert _reproduce(root, card_path, "--attest", str(key.private)) == Exit.OK
    assert not (tmp_path / ("plain" + va.SUFFIX)).exists()


def test_default_out_is_beside_the_bundle(tmp_path: pathlib.Path) -> None:
    (tmp_path / "run1").mkdir()
    assert va.default_out(tmp_path / "run1.tar.gz") == tmp_path / "run1.verdict.intoto.json"
    assert va.default_out(tmp_path / "run1") == tmp_path / "run1.verdict.intoto.json"
    assert va.default_out(tmp_path / "run1" / "results.json") == (
        tmp_path / "run1" / "results.verdict.intoto.json"
    )


# -- hostile envelopes: VerifyFailed (one line) or a verified verdict, nothing else -------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_STATEMENT_KEYS = ["_type", "subject", "predicateType", "predicate"]
_PREDICATE_KEYS = ["outcome", "exit_code", "run", "card", "summary", "made_at", "bench"]
_ENVELOPE_KEYS = ["payloadType", "payload", "signatures"]


@pytest.fixture(scope="module")
def fuzz_key(tmp_path_factory: pytest.TempPathFactory) -> OpenSshKey:
    return OpenSshKey(tmp_path_factory.mktemp("fuzz-keys"))


def _valid_statement() -> dict[str, Any]:
    subjects = [va.Subject("run1.tar.gz", "a" * 64), va.Subject("card.txt", "b" * 64)]
    predicate = {
        "outcome": "REPRODUCED",
        "exit_code": 0,
        "run": {"subject": "run1.tar.gz"},
        "card": {"subject": "card.txt"},
    }
    return va.statement(subjects, predicate)


def _one_line(path: pathlib.Path, allowed: pathlib.Path) -> None:
    try:
        attested = va.read(path, allowed)
    except VerifyFailed as exc:
        line = exc.one_line()
        assert line and "\n" not in line and line.startswith(f"{path.name}: "), line
        return
    for line in attested.lines():  # what bench verify prints of a verified one
        assert "\n" not in line


@settings(
    max_examples=150,
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    statement_put=st.dictionaries(st.sampled_from(_STATEMENT_KEYS), _json, max_size=2),
    predicate_put=st.dictionaries(st.sampled_from(_PREDICATE_KEYS), _json, max_size=3),
    envelope_put=st.dictionaries(st.sampled_from(_ENVELOPE_KEYS), _json, max_size=2),
)
def test_hostile_signed_statements_are_one_line_errors(
    tmp_path: pathlib.Path,
    fuzz_key: OpenSshKey,
    statement_put: dict[str, Any],
    predicate_put: dict[str, Any],
    envelope_put: dict[str, Any],
) -> None:
    """Statements signed by a trusted key (the signature holds) whose fields are anything."""
    doc = _valid_statement()
    doc["predicate"].update(predicate_put)
    doc.update(statement_put)
    envelope = dsse.sign_statement(doc, dsse.load_private_key(fuzz_key.private))
    envelope.update(envelope_put)
    path = tmp_path / "v.verdict.intoto.json"
    path.write_text(json.dumps(envelope))
    _one_line(path, fuzz_key.allowed)


@settings(
    max_examples=150,
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    raw=st.binary(max_size=300)
    | _json.map(lambda v: json.dumps(v).encode())
    | st.integers(1, 2000).map(lambda n: b"[" * n + b"]" * n)
)
def test_hostile_bytes_are_one_line_errors(
    tmp_path: pathlib.Path, fuzz_key: OpenSshKey, raw: bytes
) -> None:
    path = tmp_path / "v.verdict.intoto.json"
    path.write_bytes(raw)
    _one_line(path, fuzz_key.allowed)


def test_an_oversized_envelope_is_refused_unread(
    tmp_path: pathlib.Path, key: OpenSshKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v.verdict.intoto.json"
    path.write_text(json.dumps({"payload": "A" * 300}))
    monkeypatch.setattr(va, "MAX_BYTES", 100)
    with pytest.raises(VerifyFailed, match=r"larger than 100 bytes, refused unread"):
        va.read(path, key.allowed)
    many = {"payloadType": dsse.PAYLOAD_TYPE, "payload": "", "signatures": [{}] * 17}
    path.write_text(json.dumps(many))
    monkeypatch.setattr(va, "MAX_BYTES", 1 << 20)
    with pytest.raises(BenchError, match=r"has 17 signatures, more than 16$"):
        va.read(path, key.allowed)


def test_a_publishers_verdict_carries_its_figures_and_constraints(
    tmp_path: pathlib.Path, key: OpenSshKey
) -> None:
    from bench.publishers import vllm_dashboard as vd
    from bench.publishers.reproduce import Trial, judge
    from bench.verdict import attest
    from tests.publishers.test_reproduce_card import SHAREGPT, TEN

    result = judge(vd.read(SHAREGPT, {}), [Trial(TEN, 10.0, 1)], tolerance_pct=5.0)
    body = attest.publisher_body(result)
    assert body["kind"] == "reproduce-publisher" and body["tolerance"] == {"pct": 5.0}
    assert (body["outcome"], body["exit_code"]) == (result.outcome, int(result.exit_code()))
    assert body["total"] == len(result.figures) == len(body["figures"]) > 0
    assert {f["figure"] for f in body["figures"]} == {r.name for r in result.figures}
    run = tmp_path / "run.tar.gz"
    run.write_bytes(b"an archive")
    pending = attest.prepare(key.private, None, run=run, card=SHAREGPT)
    assert pending is not None
    out = attest.finish(pending, body)
    assert out == tmp_path / ("run" + va.SUFFIX)
    checked = va.check(out, key.allowed, run=run, card=SHAREGPT)
    assert checked.predicate["card"] == {
        "name": f"{result.card.publisher}:{result.card.point_id}",
        "subject": SHAREGPT.name,
    }
    assert checked.lines()[0].startswith(f"verdict: {result.outcome} (exit ")
