"""`bench keygen | sign | manifest | attest | pack | verify | schema`: the bundle subcommands."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from bench import escape
from bench.bundle import manifest as manifest_mod
from bench.bundle import schema, seal, sign, verdict_attestation
from bench.bundle.pack import pack
from bench.bundle.verify import verify_bundle
from bench.errors import UsageError, VerifyFailed
from bench.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keygen", help="make an ed25519 key for signing bundles")
    p.add_argument(
        "--out",
        type=Path,
        default=Path.home() / ".ssh" / "bench_ed25519",
        help="private key path (PATH.pub is written beside it); default ~/.ssh/bench_ed25519",
    )
    p.add_argument("--principal", default=None, help="name in allowed-signers; default user@host")
    p.set_defaults(func=_keygen)

    p = sub.add_parser("sign", help="write manifest.json for a run directory and sign it")
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument("--key", type=Path, required=True, help="private ed25519 key (a path)")
    p.set_defaults(func=_sign)

    p = sub.add_parser(
        "manifest",
        help="write manifest.json for a run directory, unsigned (the orchestrator signs it)",
    )
    p.add_argument("dir", type=Path, metavar="DIR")
    p.set_defaults(func=_manifest)

    p = sub.add_parser(
        "attest",
        help="write attestation.intoto.json for a run directory's manifest.json, signed with "
        "KEY (the orchestrator has it made on the host, after signing the manifest)",
    )
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument(
        "--key",
        type=Path,
        required=True,
        help="private ed25519 key without passphrase (a path): the one that signs manifest.json",
    )
    p.set_defaults(func=_attest)

    p = sub.add_parser("pack", help="pack a signed run directory as one .tar.gz")
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument("--out", type=Path, default=None, help="default: DIR.tar.gz beside DIR")
    p.set_defaults(func=_pack)

    p = sub.add_parser("verify", help="check a bundle's signature, hashes and schema")
    p.add_argument("bundle", type=Path, metavar="BUNDLE", help="a .tar.gz or a directory")
    p.add_argument("--allowed-signers", type=Path, required=True, metavar="FILE")
    p.add_argument(
        "--integrity-only",
        action="store_true",
        help="check the signature, hashes and schema only, not that the bundle records "
        "its provenance (bench commit, image, package freeze, weights, recipe.json)",
    )
    p.add_argument(
        "--verdict",
        type=Path,
        default=None,
        metavar="FILE",
        help="also check a verdict attestation (bench reproduce --attest: "
        "<bundle stem>.verdict.intoto.json; bench compare --attest: "
        "<B stem>.compare.intoto.json): its signature, and that its subjects are BUNDLE and "
        "--card, or the bundles of --compared and --vs; then print the verdict",
    )
    p.add_argument(
        "--card", type=Path, default=None, metavar="CARD", help="with --verdict: the card judged"
    )
    for flag, side in (("--compared", "A"), ("--vs", "B")):
        p.add_argument(
            flag,
            type=Path,
            nargs="+",
            default=None,
            metavar=side,
            help=f"with --verdict of a compare (bench compare --attest): side {side}'s "
            "bundles, BUNDLE one of them",
        )
    p.add_argument(
        "--verdict-signers",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --verdict: the allowed-signers file trusting the verdict's signer "
        "(default: --allowed-signers)",
    )
    p.set_defaults(func=_verify)

    p = sub.add_parser("schema", help="print the JSON Schema of results.json")
    p.set_defaults(func=_schema)


def _keygen(args: argparse.Namespace, settings: Settings) -> int:
    principal = args.principal or f"{getpass.getuser()}@{socket.gethostname()}"
    public = sign.keygen(args.out, comment=principal)
    print(f"wrote {args.out} (private, 0600) and {public}")
    print("allowed-signers line (give it to whoever verifies your bundles):")
    print(sign.allowed_signers_line(public, principal))
    return 0


def _sign(args: argparse.Namespace, settings: Settings) -> int:
    known = settings.known_secrets(os.environ)
    made = seal.seal(args.dir, args.key, now=datetime.now(UTC), secrets=known.values)
    print(f"signed {args.dir}: run {made.run_id}, {len(made.files)} files in manifest.json")
    return 0


def _manifest(args: argparse.Namespace, settings: Settings) -> int:
    root: Path = args.dir
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory", hint="give the run directory of `bench run`")
    made = manifest_mod.refresh(root, created_at=datetime.now(UTC))
    print(f"wrote {root / manifest_mod.MANIFEST_NAME}: run {made.run_id}, {len(made.files)} files")
    return 0


def _attest(args: argparse.Namespace, settings: Settings) -> int:
    known = settings.known_secrets(os.environ)
    made, fingerprint = seal.attest(args.dir, args.key, secrets=known.values)
    print(f"wrote {args.dir / manifest_mod.ATTESTATION_NAME}: run {made.run_id}, "
          f"{len(made.files)} subjects, signed by {fingerprint}")  # fmt: skip
    return 0


def _pack(args: argparse.Namespace, settings: Settings) -> int:
    root: Path = args.dir
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    out = args.out or root.resolve().parent / f"{root.resolve().name}.tar.gz"
    _finished_signing(root)
    print(pack(root, out))
    return 0


def _finished_signing(root: Path) -> None:
    """A directory whose signing was cut (killed, disk full) is not packed as a bundle:
    its signature must be there and whole, and its files what the manifest says."""
    again = f"sign it again (bench sign {root} --key KEY), then pack"
    sig = root / manifest_mod.SIGNATURE_NAME
    if not sig.is_file():
        raise UsageError(f"{root}: has no {sig.name}: it is not signed, or its signing was cut",
                         hint=again)  # fmt: skip
    try:
        whole = sig.read_bytes().rstrip().endswith(b"-----END SSH SIGNATURE-----")
        sign.read_signature(sig)
    except (VerifyFailed, OSError):
        whole = False
    if not whole:
        raise UsageError(f"{sig}: not a whole signature (was its signing cut?)", hint=again)
    problems = manifest_mod.check(root, manifest_mod.read(root))
    if problems:
        raise UsageError(f"{root}: does not match its manifest: {problems[0]}", hint=again)


def _verify(args: argparse.Namespace, settings: Settings) -> int:
    compared = args.compared is not None or args.vs is not None
    if compared:
        _compared_usage(args)
    elif (args.verdict is None) != (args.card is None) or (
        args.verdict_signers is not None and args.verdict is None
    ):
        raise UsageError(
            "--verdict, --card (and --verdict-signers) go together",
            hint="bench verify BUNDLE --allowed-signers FILE --verdict V.verdict.intoto.json "
            "--card CARD",
        )
    # The verdict first: a bundle changed since it was judged fails on its subject line.
    signers = args.verdict_signers or args.allowed_signers
    if args.verdict is None:
        verdict = None
    elif compared:
        verdict = verdict_attestation.check_compare(
            args.verdict, signers, a=args.compared, b=args.vs
        )
    else:
        verdict = verdict_attestation.check(args.verdict, signers, run=args.bundle, card=args.card)
    ok = verify_bundle(args.bundle, args.allowed_signers, provenance=not args.integrity_only)
    print(
        escape.terminal(
            f"OK {args.bundle}: run {ok.run_id}, {ok.files} files match manifest.json, "
            f"results.json valid (schema v{ok.results_schema_version})"
        )
    )
    print(
        escape.terminal(
            f"signed by {ok.signer.principal} ({ok.signer.key_type} {ok.signer.fingerprint}) "
            f"at {ok.created_at.isoformat()} (when manifest.json was written and signed)"
        )
    )
    print(escape.terminal(ok.attestation))
    if ok.provenance:
        print("provenance: " + "; ".join(ok.provenance))
    if verdict is not None:
        print("\n".join(verdict.lines()))
    return 0


def _compared_usage(args: argparse.Namespace) -> None:
    """--compared and --vs: both, with --verdict, not with --card, BUNDLE one of theirs."""
    if args.verdict is None or args.compared is None or args.vs is None or args.card is not None:
        raise UsageError(
            "--verdict, --compared and --vs go together (and not with --card)",
            hint="bench verify BUNDLE --allowed-signers FILE --verdict B.compare.intoto.json "
            "--compared A1 [A2 ...] --vs B1 [B2 ...]",
        )
    given = {p.resolve() for p in (*args.compared, *args.vs)}
    if args.bundle.resolve() not in given:
        raise UsageError(
            f"{args.bundle}: not one of the bundles of --compared or --vs",
            hint="BUNDLE is the compared bundle whose signature bench verify checks",
        )


def _schema(args: argparse.Namespace, settings: Settings) -> int:
    print(json.dumps(schema.json_schema(), indent=2, sort_keys=True))
    return 0
