"""<bundle>.verdict.intoto.json: a verdict against a card as an in-toto Statement v1 in a
DSSE envelope, written beside the bundle it judges.

A verdict is made after the bundle is sealed and verified (`bench reproduce`, `bench
local`, the orchestrator's summary), so it cannot be inside the signed bundle: it is its
own statement, signed like attestation.intoto.json (bench.bundle.dsse: the same envelope,
an unencrypted ed25519 OpenSSH key, its keyid the key's SSH fingerprint).

Subjects: the run as the verdict read it, and the card.
  - a bundle archive (or any file given as the run: a results.json): the file's name and
    the sha256 of its bytes;
  - a run directory: `<directory name>/manifest.json` and the sha256 of that manifest,
    which lists every file of the bundle with its own sha256 (and is what
    manifest.json.sig signs), so it pins the directory's contents; a directory without a
    manifest.json (an unsigned run) has no verdict attestation;
  - the card file: its name and the sha256 of its bytes;
  - with `--reference` bundles, each of them too (their role is said in the predicate).
The predicate (PREDICATE_TYPE, a type of this project's, versioned like the bundle's
provenance predicate) names which subject is the run and which the card, and carries the
verdict (bench.verdict.attest makes it).

A compare's (`bench compare --attest`: <first B bundle's stem>.compare.intoto.json): every
bundle of both sides is a subject, hashed as a run is; the predicate (kind "compare") names
which subjects are side A and which side B. `check_compare` is what `bench verify BUNDLE
--verdict FILE --compared A... --vs B...` runs: the signature, then each bundle given
against its side's subjects (a changed bundle, the sides swapped, a subject not given or a
bundle the compare did not judge: one line each). A compare's attestation checked with
--card, or a reproduce's with --compared, is a UsageError.

`check` is what `bench verify BUNDLE --verdict FILE --card CARD` runs: the envelope read
bounded, signed by an ed25519 key of the allowed-signers file, a statement of ours whose
run and card subjects have the sha256 of the files given. Every failure is a one-line
VerifyFailed naming the envelope file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import escape, run_files, writes
from bench.bundle import dsse
from bench.bundle.manifest import MANIFEST_NAME
from bench.errors import DiskError, UsageError, VerifyFailed

PREDICATE_TYPE = "https://github.com/bench/attestation/verdict/v1"
SUFFIX = ".verdict.intoto.json"
COMPARE_SUFFIX = ".compare.intoto.json"  # a compare's, beside its first B bundle
MAX_BYTES = 1 << 20  # the envelope file; a verdict's is some tens of kB
MAX_ROWS = 400  # cells (or a publisher's figures) listed in a predicate; the rest counted
_MAX_SUBJECTS = 64
_MAX_NAME = 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Subject:
    name: str
    sha256: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "digest": {"sha256": self.sha256}}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _hashed(path: Path, name: str) -> Subject:
    try:
        return Subject(name, sha256_of(path))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None


def run_subject(run: Path) -> Subject:
    """The run as a subject: a file's own bytes; a run directory's manifest.json."""
    if run.is_dir():
        manifest = run / MANIFEST_NAME
        if not manifest.is_file():
            raise UsageError(
                f"{run}: has no {MANIFEST_NAME}: an unsigned run directory has no verdict "
                "attestation",
                hint="judge its signed bundle (bench sign, bench pack)",
            )
        return _hashed(manifest, f"{run.resolve().name}/{MANIFEST_NAME}")
    return _hashed(run, run.name)


def card_subject(card: Path) -> Subject:
    return _hashed(card, card.name)


def default_out(run: Path, suffix: str = SUFFIX) -> Path:
    """`<bundle stem>.verdict.intoto.json` (or another suffix) beside the run (a .tar.gz, a
    directory, a file)."""
    resolved = run.resolve()
    name = resolved.name
    if resolved.is_dir():
        stem = name
    elif name.endswith(".tar.gz"):
        stem = name.removesuffix(".tar.gz")
    else:
        stem = Path(name).stem
    return resolved.with_name(stem + suffix)


def statement(subjects: list[Subject], predicate: dict[str, Any]) -> dict[str, Any]:
    return {
        "_type": dsse.STATEMENT_TYPE,
        "subject": [s.as_json() for s in subjects],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def write(out: Path, doc: dict[str, Any], key: Path) -> str:
    """Write the statement `doc` to `out` in a DSSE envelope signed with `key` (an
    unencrypted ed25519 OpenSSH key file: UsageError otherwise); the key's fingerprint."""
    private = dsse.load_private_key(key)
    envelope = dsse.sign_statement(doc, private)
    try:
        writes.write_atomic(out, json.dumps(envelope, indent=2) + "\n")
    except OSError as exc:
        raise DiskError(f"{out}: cannot write the verdict attestation: {exc.strerror}") from None
    return dsse.fingerprint(private.public_key())


@dataclass(frozen=True, slots=True)
class Attested:
    """What a checked verdict attestation says."""

    statement: dict[str, Any]
    signer: str  # fingerprint
    principals: str  # as the allowed-signers file names them

    @property
    def predicate(self) -> dict[str, Any]:
        found: dict[str, Any] = self.statement["predicate"]
        return found

    @property
    def is_compare(self) -> bool:
        return self.predicate.get("kind") == "compare"

    def lines(self) -> list[str]:
        p = self.predicate
        made = p["made_at"] if isinstance(p.get("made_at"), str) else "?"
        bench = p.get("bench")
        version = bench.get("version") if isinstance(bench, dict) else None
        if self.is_compare:
            a, b = (_names(p[side]["subjects"]) for side in ("a", "b"))
            judged = f"of side A {a} against side B {b}"
            given = "the bundles given, each on its side"
        else:
            judged = f"of {p['run']['subject']} against {p['card']['subject']}"
            given = "the run and the card given"
        lines = [
            f"verdict: {_short(p['outcome'])} (exit {p['exit_code']}) {judged}, made at "
            f"{_short(made)} by bench {_short(version) if isinstance(version, str) else '?'}",
        ]
        if isinstance(p.get("summary"), str):
            lines.append(f"  {_short(p['summary'], 1000)}")
        lines.append(
            f"  signed by {self.principals} ({self.signer}); subjects' sha256 match {given}"
        )
        return [escape.terminal(line) for line in lines]


def _names(names: list[str], most: int = 4) -> str:
    shown = ", ".join(_short(n) for n in names[:most])
    return shown + (f" (+{len(names) - most} more)" if len(names) > most else "")


def _short(text: str, most: int = 100) -> str:
    """A statement's text as printed: at most `most` characters (a signed file is still
    anybody's text until its signer is trusted)."""
    return text if len(text) <= most else text[: most - 3] + "..."


def _failing(shown: str) -> Callable[[str], VerifyFailed]:
    def fail(problem: str) -> VerifyFailed:
        return VerifyFailed(f"{shown}: {problem}")

    return fail


def read(path: Path, allowed_signers: Path) -> Attested:
    """The envelope at `path` (bounded: MAX_BYTES), signed by an ed25519 key of the
    allowed-signers file, holding a verdict statement of ours; VerifyFailed otherwise."""
    shown = path.name
    fail = _failing(shown)
    raw = run_files.read_json(path, shown=shown, error=VerifyFailed, max_bytes=MAX_BYTES)
    signers = dsse.allowed_ed25519_signers(allowed_signers)
    if not signers:
        raise fail(f"{allowed_signers} has no ed25519 key to check the signature with")
    body, keyid, principals = dsse.signed_payload(raw, signers, fail)
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise fail("the payload is not JSON") from None
    _check_statement(doc, fail)
    return Attested(doc, keyid, principals)


def _check_statement(doc: Any, fail: Callable[[str], VerifyFailed]) -> None:
    if not isinstance(doc, dict) or doc.get("_type") != dsse.STATEMENT_TYPE:
        raise fail(f"the payload is not an in-toto Statement ({dsse.STATEMENT_TYPE})")
    if doc.get("predicateType") != PREDICATE_TYPE:
        raise fail(f"predicateType is not {PREDICATE_TYPE}")
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or not 0 < len(subjects) <= _MAX_SUBJECTS:
        raise fail(f"the statement has no list of 1 to {_MAX_SUBJECTS} subjects")
    names: set[str] = set()
    for s in subjects:
        name = s.get("name") if isinstance(s, dict) else None
        digest = s.get("digest") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not 0 < len(name) <= _MAX_NAME or name in names:
            raise fail("a subject without a name, or named twice")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise fail(f"subject {escape.terminal(name)}: no sha256")
        names.add(name)
    p = doc.get("predicate")
    if not isinstance(p, dict):
        raise fail("the statement has no predicate")
    code = p.get("exit_code")
    if not isinstance(p.get("outcome"), str) or isinstance(code, bool) or not isinstance(code, int):
        raise fail("the predicate has no outcome and exit code")
    _check_roles(p, names, fail)


def _check_roles(p: dict[str, Any], names: set[str], fail: Callable[[str], VerifyFailed]) -> None:
    """The predicate names its subjects: the run and the card, or a compare's two sides."""
    if p.get("kind") == "compare":
        listed: list[Any] = []
        for side in ("a", "b"):
            named = p.get(side)
            subjects_of = named.get("subjects") if isinstance(named, dict) else None
            if not isinstance(subjects_of, list) or not subjects_of:
                listed = []
                break
            listed.extend(subjects_of)
        strings = all(isinstance(n, str) for n in listed)
        if not strings or len(listed) != len(names) or set(listed) != names:
            raise fail("the predicate does not name side A and side B among the subjects")
        return
    for role in ("run", "card"):
        named = p.get(role)
        subject = named.get("subject") if isinstance(named, dict) else None
        if not isinstance(subject, str) or subject not in names:
            raise fail(f"the predicate names no {role} among the subjects")


def _digest(doc: dict[str, Any], name: str) -> str:
    found: str = next(s["digest"]["sha256"] for s in doc["subject"] if s["name"] == name)
    return found


def check(path: Path, allowed_signers: Path, *, run: Path, card: Path) -> Attested:
    """`read`, then the run's and the card's subjects against the files given: a one-line
    VerifyFailed naming the subject whose sha256 differs."""
    attested = read(path, allowed_signers)
    if attested.is_compare:
        raise UsageError(
            f"{path.name}: a compare's attestation, not a verdict against a card",
            hint="give the bundles it compared: --compared A... --vs B...",
        )
    doc, p = attested.statement, attested.predicate
    for role, given, subject in (
        ("run", run, run_subject(run)),
        ("card", card, card_subject(card)),
    ):
        name = p[role]["subject"]
        want = _digest(doc, name)
        if subject.sha256 != want:
            raise VerifyFailed(
                escape.terminal(
                    f"{path.name}: subject {name} ({role}): sha256 {want[:16]}... differs from "
                    f"{given}'s {subject.sha256[:16]}...: not the {role} this verdict judged"
                )
            )
    return attested


def check_compare(
    path: Path, allowed_signers: Path, *, a: Sequence[Path], b: Sequence[Path]
) -> Attested:
    """`read`, then a compare's subjects against the bundles given for side A and side B
    (in any order within a side): a one-line VerifyFailed for a bundle whose sha256 is not
    its side's (changed, or of the other side: the sides swapped), a subject not given or
    a bundle given that the compare did not judge."""
    attested = read(path, allowed_signers)
    if not attested.is_compare:
        raise UsageError(
            f"{path.name}: a verdict against a card, not a compare's attestation",
            hint="give the card it judged: --card CARD",
        )
    doc, p = attested.statement, attested.predicate
    want = {side: {n: _digest(doc, n) for n in p[key]["subjects"]} for side, key in _SIDES}
    for side, given in (("A", a), ("B", b)):
        other = "B" if side == "A" else "A"
        left = dict(want[side])
        for bundle in given:
            got = run_subject(bundle)
            match = next((n for n, sha in left.items() if sha == got.sha256), None)
            if match is not None:
                del left[match]
                continue
            if got.sha256 in want[other].values():
                problem = (
                    f"{bundle} is side {other}'s bundle in this compare, given as side "
                    f"{side}: the sides are swapped"
                )
            elif got.name in left:
                sha = left[got.name]
                problem = (
                    f"subject {got.name} (side {side}): sha256 {sha[:16]}... differs from "
                    f"{bundle}'s {got.sha256[:16]}...: not the bundle this compare judged"
                )
            else:
                problem = f"{bundle} (side {side}): not a bundle this compare judged"
            raise VerifyFailed(escape.terminal(f"{path.name}: {problem}"))
        if left:
            raise VerifyFailed(
                escape.terminal(
                    f"{path.name}: subject {next(iter(left))} (side {side}): not given: "
                    f"this compare judged {len(want[side])} bundles as side {side}"
                )
            )
    return attested


_SIDES = (("A", "a"), ("B", "b"))


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
