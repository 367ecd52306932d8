"""`bench compare --attest KEY`: the compare's verdict as an in-toto statement in a DSSE
envelope beside its first B bundle, every bundle of both sides a subject; checked by bench
(bench.bundle.verdict_attestation.check_compare) and by securesystemslib.

No process, no socket: run directories with an unsigned manifest.json read --unverified
(tests/bundle/test_verdict_attestation_signed.py checks signed bundles with `bench verify`).
"""

from __future__ import annotations

import base64
import json
import pathlib
from typing import Any

import pytest
from securesystemslib.exceptions import VerificationError

import bench
from bench.bundle import manifest as manifest_mod
from bench.bundle import verdict_attestation as va
from bench.card.model import Card
from bench.cli import main
from bench.errors import Exit, UsageError, VerifyFailed
from tests.support import attestation as third_party
from tests.support.synth import make_results
from tests.verdict.test_verdict_attestation import NOW, OpenSshKey


@pytest.fixture
def key(tmp_path: pathlib.Path) -> OpenSshKey:
    return OpenSshKey(tmp_path / "keys")


def _run_dir(root: pathlib.Path, card: Card, seed: int, *, manifest: bool = True) -> pathlib.Path:
    root.mkdir()
    results = make_results(card, speed=10.0, trials=3, noise=0.02, seed=seed)
    (root / "results.json").write_text(results.model_dump_json())
    if manifest:
        manifest_mod.write(root, manifest_mod.build(root, run_id=root.name, created_at=NOW))
    return root


@pytest.fixture
def sides(card: Card, tmp_path: pathlib.Path) -> tuple[list[pathlib.Path], list[pathlib.Path]]:
    """Two trial runs a side: run-a1 run-a2 --vs run-b1 run-b2."""
    a = [_run_dir(tmp_path / f"run-a{i}", card, seed=i) for i in (1, 2)]
    b = [_run_dir(tmp_path / f"run-b{i}", card, seed=10 + i) for i in (1, 2)]
    return a, b


Compared = tuple[list[pathlib.Path], list[pathlib.Path], pathlib.Path]


@pytest.fixture
def attested(
    sides: tuple[list[pathlib.Path], list[pathlib.Path]], key: OpenSshKey, tmp_path: pathlib.Path
) -> Compared:
    """The sides compared with --attest: side A, side B, the attestation."""
    a, b = sides
    out = tmp_path / "cmp.intoto.json"
    _compare(a, b, "--attest", str(key.private), "--attest-out", str(out))
    return a, b, out


def _compare(a: list[pathlib.Path], b: list[pathlib.Path], *extra: str) -> int:
    return main(["compare", *map(str, a), "--vs", *map(str, b), "--unverified", *extra])


def _payload(envelope: pathlib.Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(base64.b64decode(json.loads(envelope.read_text())["payload"]))
    return doc


def _manifest_sha(run: pathlib.Path) -> str:
    return third_party.sha256_file(run / manifest_mod.MANIFEST_NAME)


def test_compare_writes_a_signed_statement_of_both_sides(
    sides: tuple[list[pathlib.Path], list[pathlib.Path]],
    key: OpenSshKey,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = sides
    code = _compare(a, b, "--attest", str(key.private), "--margin", "5", "--alpha", "0.1")
    out = tmp_path / ("run-b1" + va.COMPARE_SUFFIX)  # beside the first B bundle
    printed, err = capsys.readouterr()
    assert f"verdict attestation: {out} (signed by {key.fingerprint})" in err
    statement = _payload(out)
    assert statement["predicateType"] == va.PREDICATE_TYPE
    names = [f"run-{s}/manifest.json" for s in ("a1", "a2", "b1", "b2")]
    assert statement["subject"] == [
        {"name": n, "digest": {"sha256": _manifest_sha(r)}}
        for n, r in zip(names, [*a, *b], strict=True)
    ]
    p = statement["predicate"]
    assert p["kind"] == "compare"
    assert (p["exit_code"], p["exit_name"]) == (code, Exit(code).name)
    assert p["outcome"] == "EQUIVALENT"  # the compare's word, and its last line
    assert p["summary"] == printed.splitlines()[-1] and "EVERY CELL EQUIVALENT" in p["summary"]
    assert p["a"]["subjects"] == names[:2] and p["b"]["subjects"] == names[2:]
    assert (p["alpha"], p["margin"]) == (0.1, {"pct": 5.0, "figures": {}})
    assert p["bench"] == {"version": bench.__version__} and p["made_at"].endswith("+00:00")
    assert p["total"] == p["listed"] == len(p["figures"]) > 0
    row = p["figures"][0]
    assert set(row) == {"cell", "figure", "delta_pct", "low", "high", "outcome"}
    assert row["low"] <= row["delta_pct"] <= row["high"]
    checked = va.check_compare(out, key.allowed, a=list(reversed(a)), b=b)  # any order a side
    assert checked.lines()[0].startswith(
        f"verdict: {p['outcome']} (exit {code}) of side A run-a1/manifest.json, "
        "run-a2/manifest.json against side B run-b1/manifest.json, run-b2/manifest.json, made at "
    )
    assert checked.lines()[-1].endswith(
        "subjects' sha256 match the bundles given, each on its side"
    )
    # securesystemslib, with the public key: the signature and the subjects.
    statement = third_party.third_party_statement(out, third_party.sslib_key(key.line))
    assert set(third_party.subject_digests(statement).values()) == {
        _manifest_sha(r) for r in (*a, *b)
    }
    with pytest.raises(VerificationError):
        third_party.third_party_statement(
            out, third_party.sslib_key(OpenSshKey(tmp_path / "other").line)
        )


def test_a_changed_swapped_missing_or_extra_bundle_fails_in_one_line(
    attested: Compared, card: Card, key: OpenSshKey, tmp_path: pathlib.Path
) -> None:
    a, b, out = attested
    va.check_compare(out, key.allowed, a=a, b=b)

    def fails(a_: list[pathlib.Path], b_: list[pathlib.Path]) -> str:
        with pytest.raises(VerifyFailed) as caught:
            va.check_compare(out, key.allowed, a=a_, b=b_)
        line = caught.value.one_line()
        assert "\n" not in line and line.startswith(f"{out.name}: ")
        assert caught.value.exit_code == Exit.VERIFY_FAILED
        return line

    assert "the sides are swapped" in fails(b, a)
    assert f"{b[1]} is side B's bundle in this compare, given as side A" in fails(
        [a[0], b[1]], [b[0], a[1]]
    )
    assert "subject run-b2/manifest.json (side B): not given" in fails(a, b[:1])
    extra = _run_dir(tmp_path / "run-x", card, seed=99)
    assert f"{extra} (side B): not a bundle this compare judged" in fails(a, [*b, extra])
    # One byte of a B bundle's manifest changed after the compare.
    manifest = b[1] / manifest_mod.MANIFEST_NAME
    manifest.write_bytes(manifest.read_bytes().replace(b'"run-b2"', b'"run-b3"'))
    assert "subject run-b2/manifest.json (side B): sha256 " in fails(a, b)
    assert "not the bundle this compare judged" in fails(a, b)


def test_a_card_for_a_compare_or_sides_for_a_reproduce_is_a_usage_error(
    attested: Compared, card: Card, card_path: pathlib.Path, key: OpenSshKey, tmp_path: pathlib.Path
) -> None:
    _, b, compared = attested
    with pytest.raises(UsageError, match="a compare's attestation, not a verdict against a card"):
        va.check(compared, key.allowed, run=b[0], card=card_path)
    run = tmp_path / "results.json"
    run.write_text(make_results(card, speed=10.0).model_dump_json())
    judged = tmp_path / "judged.intoto.json"
    rep = ["reproduce", str(run), "--card", str(card_path), "--attest", str(key.private)]
    assert main([*rep, "--attest-out", str(judged)]) == Exit.OK
    with pytest.raises(UsageError, match="a verdict against a card, not a compare's attestation"):
        va.check_compare(judged, key.allowed, a=[run], b=[card_path])


def test_attest_is_one_comparison_and_an_unsigned_run_has_no_attestation(
    card: Card, key: OpenSshKey, tmp_path: pathlib.Path
) -> None:
    runs = [_run_dir(tmp_path / f"r{i}", card, seed=i, manifest=i != 2) for i in (1, 2, 3)]
    attest = ["--attest", str(key.private), "--unverified"]
    assert main(["compare", *map(str, runs), *attest]) == Exit.USAGE
    # r2 has no manifest.json: the compare stands (its exit), one warning, no attestation.
    code = main(["compare", str(runs[0]), str(runs[1]), *attest])
    assert code != Exit.USAGE
    assert not list(tmp_path.glob("*" + va.COMPARE_SUFFIX))
    # A B (no --vs): side A the first, side B the second.
    assert main(["compare", str(runs[0]), str(runs[2]), *attest]) == code
    p = _payload(tmp_path / ("r3" + va.COMPARE_SUFFIX))["predicate"]
    assert (p["a"]["subjects"], p["b"]["subjects"]) == (["r1/manifest.json"], ["r3/manifest.json"])
