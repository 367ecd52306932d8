"""`bench card import|launch|export`: the speed-test card (`bench.card`) and other
publishers' results as cards.

`bench card import FILE` reads a speed-test card's page text, as before;
`bench card import --from inferencex|vllm-dashboard|mlperf FILE [--select KEY=VALUE ...]`
reads one point of that publisher's file into a card (JSON, `bench.publishers.model`). A
file in another publisher's format is refused with a line naming the format it looks like.
`bench card export CARD.json` gives the card's figures back in the publisher's own fields
and units (what `import` read); `bench card workload CARD.json` its traffic as a workload
for `bench run --workload` (a twin fitted to it: `bench twin fit CARD.json`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import structlog

from bench import writes
from bench.card import command as speed_test
from bench.card.launch import profile_toml
from bench.command_line import SubParsers
from bench.errors import CardError, Exit
from bench.publishers import inferencex, mlperf, source, vllm_dashboard, workload
from bench.publishers import launch as publisher_launch
from bench.publishers.model import PUBLISHERS, PublisherCard
from bench.settings import Settings
from bench.workload_spec import MAX_LENGTH_TOKENS


class Reader(Protocol):
    WHAT: str

    def looks_like(self, head: str) -> bool: ...
    def read(self, path: Path, select: Mapping[str, str]) -> PublisherCard: ...
    def export(self, card: PublisherCard) -> Any: ...


READERS: dict[str, Reader] = {
    "inferencex": inferencex,
    "vllm-dashboard": vllm_dashboard,
    "mlperf": mlperf,
}
MAX_SELECT = 16


def register(sub: SubParsers) -> None:
    card = sub.add_parser("card", help="published cards: the speed-test card and other publishers")
    actions = card.add_subparsers(dest="card_command", metavar="ACTION", required=True)
    imp = actions.add_parser(
        "import", help="read a card (or one point of another publisher's file) into JSON"
    )
    imp.add_argument("file", type=Path, help="the card's page text, or the publisher's file")
    imp.add_argument(
        "--from",
        dest="publisher",
        choices=("speed-test", *PUBLISHERS),
        default="speed-test",
        help="whose format FILE is in (default speed-test: a card's page text)",
    )
    imp.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="which point of the file: id=..., or a field's value (repeat to narrow)",
    )
    imp.add_argument("--system", type=Path, help="mlperf: the submission's system description JSON")
    imp.add_argument(
        "--lengths",
        metavar="IN,OUT",
        default=None,
        help="stand-in input and output tokens for a dataset the appliance cannot ship "
        "(MLPerf's); kept in the card and said to be ours",
    )
    imp.add_argument("-o", "--output", type=Path, help="write the JSON here (default stdout)")
    imp.set_defaults(func=import_card)
    launch = actions.add_parser("launch", help="seed a launch profile (TOML) from a card")
    launch.add_argument(
        "file", type=Path, help="the card as text copied from the page, or a publisher's card JSON"
    )
    launch.add_argument("--name", default=None, help="profile name (default: the output's stem)")
    launch.add_argument("-o", "--output", type=Path, help="write the TOML here (default stdout)")
    launch.set_defaults(func=launch_seed)
    exp = actions.add_parser(
        "export", help="a publisher's card back in the publisher's own fields and units"
    )
    exp.add_argument("file", type=Path, help="a card JSON written by `bench card import --from`")
    exp.add_argument("-o", "--output", type=Path, help="write the JSON here (default stdout)")
    exp.set_defaults(func=export_card)
    wl = actions.add_parser(
        "workload", help="the traffic of a publisher's card as a workload for bench run --workload"
    )
    wl.add_argument("file", type=Path, help="a card JSON written by `bench card import --from`")
    wl.add_argument("-o", "--output", type=Path, help="write the TOML here (default stdout)")
    wl.set_defaults(func=card_workload)


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text + "\n")
        return
    writes.write_atomic(output, text + "\n")


def parse_select(items: list[str]) -> dict[str, str]:
    if len(items) > MAX_SELECT:
        raise CardError(f"--select given {len(items)} times: at most {MAX_SELECT}")
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise CardError(f"--select {item[:60]!r}: write KEY=VALUE, e.g. id=123 or conc=64")
        if key in out:
            raise CardError(f"--select names {key[:40]!r} twice")
        out[key] = value.strip()
    return out


def check_format(path: Path, publisher: str) -> None:
    """Refuse a file in another publisher's format, naming the one it looks like. (A folder:
    InferenceX's unzipped dump, whose reader finds its tables.)"""
    if path.is_dir():
        if publisher != "inferencex":
            raise CardError(f"{path} is a folder: give the file itself ({READERS[publisher].WHAT})")
        return
    head = source.head(path).decode("utf-8", errors="replace")
    if READERS[publisher].looks_like(head):
        return
    for name, reader in READERS.items():
        if name != publisher and reader.looks_like(head):
            raise CardError(
                f"{path} looks like {reader.WHAT}, not {READERS[publisher].WHAT}: "
                f"give --from {name}"
            )


def read(
    path: Path, publisher: str, select: Mapping[str, str], system: Path | None
) -> PublisherCard:
    check_format(path, publisher)
    if publisher == "mlperf":
        return mlperf.read(path, select, system)
    if system is not None:
        raise CardError("--system is for --from mlperf only")
    return READERS[publisher].read(path, select)


def import_card(args: argparse.Namespace, settings: Settings) -> int:
    if args.publisher == "speed-test":
        if args.select or args.system:
            raise CardError("--select and --system are for --from inferencex|vllm-dashboard|mlperf")
        return speed_test.import_card(args, settings)
    card = read(args.file, args.publisher, parse_select(args.select), args.system)
    if args.lengths is not None:
        card = with_lengths(card, args.lengths)
    _emit(card.model_dump_json(indent=2), args.output)
    structlog.get_logger("bench.card").info(
        "card_imported",
        publisher=card.publisher,
        source=card.source,
        point=card.point_id,
        figures=len(card.figures),
        missing=len(card.missing),
    )
    return int(Exit.OK)


def with_lengths(card: PublisherCard, text: str) -> PublisherCard:
    """CARD with stand-in lengths "IN,OUT" for a dataset it names but the appliance cannot
    ship; refused (CardError) for a card that gives its lengths or a random dataset's."""
    parts = text.split(",")
    try:
        ins, outs = (int(x.strip()) for x in parts) if len(parts) == 2 else (0, 0)
    except ValueError:
        ins = outs = 0
    if not (0 < ins <= MAX_LENGTH_TOKENS and 0 < outs <= MAX_LENGTH_TOKENS):
        raise CardError(
            f"--lengths {text[:40]!r}: two token counts IN,OUT between 1 and "
            f"{MAX_LENGTH_TOKENS:,}, such as 1024,656"
        )
    w = card.workload
    if w.input_tokens is not None or w.output_tokens is not None or w.dataset == "random":
        raise CardError(
            f"{card.publisher} card '{card.point_id}' gives its own lengths: --lengths is for "
            "a dataset the appliance cannot ship (MLPerf's)"
        )
    if w.dataset == "sharegpt":
        raise CardError(
            f"{card.publisher} card '{card.point_id}': ShareGPT ships as a sample here and its "
            "conversations bring their lengths: --lengths is for a dataset that cannot ship"
        )
    said = (
        f"lengths: {ins:,} in and {outs:,} out given at import in place of {w.dataset}'s own "
        "prompts and answers, which the appliance cannot ship: ours, not the publisher's"
    )
    data = card.model_dump()
    data["workload"].update(input_tokens=ins, output_tokens=outs)
    data["not_reproducible"] = [*card.not_reproducible, said]
    return PublisherCard.model_validate(data)


def load_card(path: Path) -> PublisherCard:
    """A card `bench card import --from` wrote; CardError (one line) for anything else."""
    raw = source.read_json(path, "a card written by `bench card import --from`")
    try:
        return PublisherCard.model_validate(raw)
    except ValueError as exc:
        first = str(exc).splitlines()[0:3]
        raise CardError(
            f"{path} is not a publisher's card ({' '.join(first)[:160]}): write one "
            "with bench card import --from"
        ) from None


def launch_seed(args: argparse.Namespace, settings: Settings) -> int:
    """A speed-test card's launch command, or a publisher's card's, as a launch profile."""
    if not is_publisher_card(args.file):
        return speed_test.launch_seed(args, settings)
    card = load_card(args.file)
    name = args.name or (args.output.stem if args.output else "seeded")
    _emit(profile_toml(publisher_launch.seed_profile(card, name)).rstrip("\n"), args.output)
    return int(Exit.OK)


def is_publisher_card(path: Path) -> bool:
    """Whether PATH is a publisher's card (a JSON object with a `publisher`), not a
    speed-test card's text or its imported JSON."""
    if path.suffix != ".json" or not path.is_file():
        return False
    raw = source.read_json(path, "a card")
    return isinstance(raw, dict) and "publisher" in raw


def card_workload(args: argparse.Namespace, settings: Settings) -> int:
    card = load_card(args.file)
    wl, notes = workload.workload_and_notes(card)
    _emit(workload.workload_toml(wl).rstrip("\n"), args.output)
    for note in notes:
        sys.stderr.write(f"note: {note}\n")
    return int(Exit.OK)


def export_card(args: argparse.Namespace, settings: Settings) -> int:
    card = load_card(args.file)
    out = READERS[card.publisher].export(card)
    _emit(json.dumps(out, indent=2, sort_keys=True), args.output)
    return int(Exit.OK)
