"""The speed-test card's handlers of `bench card import FILE` and `bench card launch FILE`
(the `card` command line: `bench.publishers.command`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import structlog

from bench import writes
from bench.card.launch import profile_toml, seed_profile
from bench.card.parse import read_card
from bench.errors import Exit
from bench.settings import Settings


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text + "\n")
        return
    writes.write_atomic(output, text + "\n")


def import_card(args: argparse.Namespace, settings: Settings) -> int:
    card = read_card(args.file)
    _emit(card.model_dump_json(indent=2), args.output)
    decode = [m for m in card.measurements if m.phase == "decode"]
    structlog.get_logger("bench.card").info(
        "card_imported",
        source=card.source,
        measurements=len(card.measurements),
        decode_rows=len(decode),
        matrix_cells=len(card.matrix),
        over_capacity=sum(c.status == "over_capacity" for c in card.matrix),
        prefill_rows=len(card.prefill),
    )
    return int(Exit.OK)


def launch_seed(args: argparse.Namespace, settings: Settings) -> int:
    card = read_card(args.file)
    name = args.name or (args.output.stem if args.output else "seeded")
    _emit(profile_toml(seed_profile(card, name)).rstrip("\n"), args.output)
    return int(Exit.OK)
