"""`bench local`: the whole appliance on this machine, with the twin standing in for vLLM.

What `make bench` does without HOST. The same steps the orchestrator runs inside the
server's container on a GPU host, in the same order:

    twin up -> bench run -> bench environment -> bench report -> sign -> pack
            -> verify (as a stranger would: the .tar.gz and an allowed-signers file)
            -> the card's tables and a verdict against the published card, signed with
               the same key beside the bundle (<run>.verdict.intoto.json)

The API key is made fresh for each run and travels by environment only; signing refuses
a bundle that contains it. The signing key lives in ~/.config/bench (made on first use).
"""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import structlog

from bench import run_files
from bench.bundle import pack as pack_mod
from bench.bundle import seal, sign, verdict_attestation
from bench.bundle.verify import verify_bundle
from bench.command_line import bench_program
from bench.errors import Exit, RunFailed, UsageError
from bench.history import recording
from bench.host import procs
from bench.local import publisher_card
from bench.run import workload_run
from bench.settings import Settings
from bench.twin.process import start_twin

PUBLISHED_CARD = "qwen3.5-397b-a17b-int4_4x-rtxpro6000_vllm-73a5831127a9.txt"
CONFIG_DIR = Path.home() / ".config" / "bench"


def published_card() -> Path:
    """The card this appliance reproduces, shipped as package data, exactly as published."""
    return Path(str(resources.files("bench.cards").joinpath(PUBLISHED_CARD)))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "local",
        help="the whole flow on this machine against the twin",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--profile",
        default=None,
        help="twin profile (default: published; with a publisher's --card, one fitted to it)",
    )
    p.add_argument("--speed", type=float, default=5.0, help="twin speed factor")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run directory (when not given: results/local/<run id>)",
    )
    p.add_argument(
        "--key",
        type=Path,
        default=CONFIG_DIR / "signing_ed25519",
        help="signing key (made on first use; its public half goes in --allowed-signers)",
    )
    p.add_argument(
        "--allowed-signers",
        type=Path,
        default=CONFIG_DIR / "allowed_signers",
        help="allowed-signers file to verify bundles with (ssh-keygen -Y verify -f FILE)",
    )
    p.add_argument(
        "--card",
        type=Path,
        default=None,
        help="card to judge against (when not given: the published card); a publisher's "
        "card (bench card import --from) brings its traffic and a twin fitted to it",
    )
    p.add_argument(
        "--workload",
        default=None,
        metavar="NAME|FILE",
        help="measure a workload instead of the card's matrix (bench run --workload; "
        "docs/workloads.md); no verdict against a card then unless --card names one",
    )
    p.add_argument(
        "--rates",
        default=None,
        metavar="R,R,...",
        help="the workload's offered rates instead of its own (bench run --rates)",
    )
    p.add_argument(
        "--slo",
        default=None,
        metavar="BOUNDS",
        help="p99 bounds instead of the workload's own (bench run --slo)",
    )
    recording.add_args(p)
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="after --: extra `bench run` args")
    p.set_defaults(func=handle)


def closing_lines(
    bundle: Path,
    files: int,
    principal: str,
    *,
    key: Path,
    allowed: Path,
    page: Path | None,
    verdict: tuple[Path, Path] | None = None,
) -> list[str]:
    """Where everything is, and how to check the bundle, as commands with this run's paths
    (docs/first-hour.md follows them; a test runs them as printed). PAGE: the verdict's
    (None: no verdict was made); VERDICT: its attestation and the card it judged against
    (None: none was written)."""
    q = shlex.quote
    bundle, allowed, key = bundle.resolve(), allowed.resolve(), key.resolve()
    check = bundle.with_name(bundle.name.removesuffix(".tar.gz") + "-check")
    top = bundle.name.removesuffix(".tar.gz")
    hashes = (
        'python3 -c \'import json; [print(f["sha256"] + "  " + f["path"]) '
        'for f in json.load(open("manifest.json"))["files"]]\' | sha256sum -c -'
    )
    verify = f"{bench_program()} verify"
    attested: list[str] = []
    if verdict is not None:
        statement, card = verdict[0].resolve(), verdict[1].resolve()
        attested = [
            f"and the verdict, signed beside it ({statement.name}: the bundle's and the "
            "card's sha256, the verdict):",
            f"  {verify} {q(str(bundle))} --allowed-signers {q(str(allowed))} "
            f"--verdict {q(str(statement))} --card {q(str(card))}",
        ]
    return [
        "",
        f"bundle: {bundle} ({files} files, signed by {principal})",
        f"signing key: {key} (made on first use; public half {key}.pub, trusted in {allowed})",
        *([] if page is None else [f"verdict against the card, as a page: {page.resolve()}"]),
        "verify the bundle:",
        f"  {verify} {q(str(bundle))} --allowed-signers {q(str(allowed))}",
        *attested,
        "or with stock OpenSSH and coreutils, in a new directory:",
        # -i (--ignore-zeros): read past zero blocks, so that whatever was appended to the
        # signed archive lands too and the hash check below sees it (issue 49).
        f"  mkdir {q(str(check))} && tar -xzif {q(str(bundle))} -C {q(str(check))}"
        f" && cd {q(str(check / top))}",
        f"  ssh-keygen -Y verify -f {q(str(allowed))} -I {q(principal)} -n {sign.NAMESPACE}"
        " -s manifest.json.sig < manifest.json",
        f"  {hashes}",
    ]


def ensure_signing_key(key: Path, allowed_signers: Path) -> None:
    """Make the local signing key once, and trust it in the local allowed-signers file."""
    if not key.exists():
        principal = f"{getpass.getuser()}@{socket.gethostname()}"
        public = sign.keygen(key, comment=principal)
        line = sign.allowed_signers_line(public, principal)
        allowed_signers.parent.mkdir(parents=True, exist_ok=True)
        with allowed_signers.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


def _bench(args: list[str], env: dict[str, str], *, partial_on_interrupt: bool = False) -> int:
    """One step as a `bench` child process.

    On Ctrl-C or SIGTERM the child gets the chance to stop cleanly (Ctrl-C in a terminal
    reaches it too; otherwise it gets SIGTERM): the sweep saves its finished cells and exits
    130, and with `partial_on_interrupt` the flow goes on to sign and pack that partial run.
    """
    proc = subprocess.Popen([sys.executable, "-m", "bench", *args], env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = procs.stop(proc, grace_s=60)  # killed after that: not a partial run
        if partial_on_interrupt and rc == Exit.INTERRUPTED:
            return rc
        raise


def _workload_args(args: argparse.Namespace) -> list[str]:
    """--workload, --rates, --slo as `bench run` arguments, checked as `bench run` checks
    them (a bad one: UsageError, exit 2, before the twin starts)."""
    if args.workload is None:
        if args.rates is not None or args.slo is not None:
            raise UsageError(
                "--rates and --slo apply to a workload, and none was given",
                hint="give WORKLOAD=NAME|FILE (--workload) as well",
            )
        return []
    for word in args.run_args:
        flag = word.split("=", 1)[0]
        if flag in ("--workload", "--rates", "--slo"):
            raise UsageError(
                f"{flag} is given twice: as an option and after -- (RUN_ARGS)",
                hint="give the workload as WORKLOAD=, RATES=, SLO= (--workload, --rates, "
                "--slo) only",
            )
    workload_run.load(args.workload, args.rates, args.slo)
    out = ["--workload", args.workload]
    if args.rates is not None:
        out += ["--rates", args.rates]
    if args.slo is not None:
        out += ["--slo", args.slo]
    return out


@dataclass(frozen=True, slots=True)
class LocalVerdict:
    code: int  # bench reproduce's exit code (0 when no verdict was made)
    page: Path | None  # its HTML page
    attested: tuple[Path, Path] | None  # its attestation and the card judged


def _judge(
    args: argparse.Namespace, out: Path, bundle: Path, env: dict[str, str], *, publisher: bool
) -> LocalVerdict:
    """The verdict against the card (none for a workload without --card), signed with the
    bundle's key beside the bundle (bench.verdict.attest)."""
    statement = verdict_attestation.default_out(bundle)
    statement.unlink(missing_ok=True)  # an earlier run's of the same --out is not this one's
    allowed = ["--allowed-signers", str(args.allowed_signers)]
    attest = ["--attest", str(args.key), "--attest-out", str(statement)]
    page: Path | None = None
    if publisher:  # its figures by the publisher's definitions (no page: a table)
        card: Path = args.card
        code = _bench(["reproduce", str(bundle), "--card", str(card), *allowed, *attest], env)
    elif args.workload is None or args.card is not None:  # a workload is not the matrix
        card = args.card or published_card()
        page = out.with_name(out.name + "-reproduce.html")
        code = _bench(["reproduce", str(bundle), "--card", str(card), *allowed,
                       "--html", str(page), *attest], env)  # fmt: skip
    else:
        print("\nno verdict against a card: a workload is not the card's matrix "
              "(--card CARD judges it anyway)")  # fmt: skip
        return LocalVerdict(int(Exit.OK), None, None)
    return LocalVerdict(code, page, (statement, card) if statement.is_file() else None)


def handle(args: argparse.Namespace, settings: Settings) -> int:
    log = structlog.get_logger("bench.local")
    started = time.monotonic()
    publisher = publisher_card.is_card(args.card)
    if publisher and args.workload is not None:
        raise UsageError(
            f"{args.card} is a publisher's card: it brings its own traffic, and a workload "
            "was given too",
            hint="drop WORKLOAD= (--workload), or judge with a speed-test card",
        )
    workload = _workload_args(args)  # checked before anything is made or started
    history = recording.choice(args.history, settings.history.url, off=args.no_history)
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-twin"
    out: Path = args.out or Path("results") / "local" / run_id
    profile = args.profile or "published"
    if publisher:
        out.parent.mkdir(parents=True, exist_ok=True)
        made = publisher_card.prepare(args.card, out)
        profile = args.profile or str(made.profile)
        workload = ["--workload", str(made.workload)]
    sign.require_ssh_keygen()  # signing comes last: a missing tool must not waste the sweep
    out.parent.mkdir(parents=True, exist_ok=True)
    ensure_signing_key(args.key, args.allowed_signers)
    api_key = secrets.token_urlsafe(24)
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "BENCH_API_KEY")}
    run_args = [a for a in args.run_args if a != "--"] + workload
    with start_twin(
        profile, speed=args.speed, api_key=api_key, timeout_s=60, die_with_parent=True
    ) as twin:
        log.info("twin_started", url=twin.url, profile=profile, speed=args.speed)
        rc = _bench(["run", "--url", twin.url, "--out", str(out), *run_args],
                    {**env, "BENCH_API_KEY": api_key}, partial_on_interrupt=True)  # fmt: skip
        # Recorded while the server still runs: its argv comes from /proc, like in a container.
        # (A Ctrl-C in the terminal stops the twin too; bench run recorded it at its start.)
        if twin.proc.poll() is None:
            _bench(["environment", "--out", str(out), "--server-pid", str(twin.proc.pid)], env)
    if (
        rc not in (Exit.OK, Exit.INTERRUPTED, Exit.RUN_FAILED)
        or not (out / run_files.RESULTS).exists()
    ):
        raise RunFailed(f"bench run exited with {rc} and left no results in {out}")
    _bench(["report", str(out)], env)
    seal.seal(out, args.key, now=datetime.now(UTC), secrets=[api_key])
    bundle = pack_mod.pack(out, out.with_name(out.name + ".tar.gz"))
    verified = verify_bundle(bundle, args.allowed_signers)
    if rc != Exit.OK:  # a finished `bench run` printed the tables already
        print((out / run_files.TABLES).read_text(encoding="utf-8"))
    judged = _judge(args, out, bundle, env, publisher=publisher)
    print(
        "\n".join(
            closing_lines(
                bundle,
                verified.files,
                verified.signer.principal,
                key=args.key,
                allowed=args.allowed_signers,
                page=judged.page,
                verdict=judged.attested,
            )
        )
    )
    recording.record(history, bundle, args.allowed_signers)
    log.info("local_run_finished", bundle=str(bundle), wall_s=round(time.monotonic() - started, 1))
    if rc != Exit.OK:
        return rc
    return judged.code
