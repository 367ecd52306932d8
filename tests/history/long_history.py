"""One history for the long view's and the dashboard's tests, in a SQLite file and in a
database of the private PostgreSQL cluster alike: the committed noise corpus' twelve vLLM
runs (tests/data/noise_corpus/vllm-cpu, results.json and environment.json as recorded) each
sealed into a signed bundle and ingested by `bench history ingest`; twelve nights of the
card's 8K and 16K rows on gpu01, cell 8K x 64 6 % slower from night 7 (a change point); a
workload's rate sweep (two trials) and a `bench capacity` run (searches 4 and 5 requests/s
and one that met none)."""

from __future__ import annotations

import itertools
import json
import pathlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from bench.bundle import seal
from bench.bundle.pack import pack
from bench.card.model import Card
from bench.cli import main
from bench.history import database, ingest, rows, schema
from bench.history.database import Target
from bench.results import Results
from tests.bundle.conftest import Keys
from tests.history.conftest import env_of, night, unsigned_record
from tests.support import postgres
from tests.support.workload_results import capacity_results, rate_results

CORPUS = pathlib.Path(__file__).resolve().parent.parent / "data/noise_corpus/vllm-cpu/runs"
NIGHTS = 12
SLOW_FROM = 7
_databases = itertools.count()


@dataclass(frozen=True)
class History:
    sqlite: Target
    postgresql: Target
    corpus: tuple[dict[str, Any], ...]  # each run's results.json, as recorded
    nights: tuple[Results, ...]


def corpus_runs() -> list[pathlib.Path]:
    return sorted(p for p in CORPUS.iterdir() if (p / "results.json").is_file())


def _bundles(tmp: pathlib.Path, keys: Keys) -> list[pathlib.Path]:
    out = []
    for run in corpus_runs():
        root = tmp / f"corpus-{run.name}"
        root.mkdir()
        for name in ("results.json", "environment.json"):
            shutil.copyfile(run / name, root / name)
        seal.seal(root, keys.private, now=datetime(2026, 12, 5, tzinfo=UTC))
        out.append(pack(root, tmp / f"corpus-{run.name}.tar.gz"))
    return out


def records(card: Card) -> tuple[tuple[Results, ...], list[rows.Record]]:
    nights = tuple(night(card, n, slow_from=SLOW_FROM) for n in range(1, NIGHTS + 1))
    out = [unsigned_record(r, env_of(n)) for n, r in enumerate(nights, start=1)]
    out.append(unsigned_record(rate_results(trials=2, created_at="2026-12-06T00:00:00Z")))
    out.append(
        unsigned_record(capacity_results([4.0, 5.0, None], created_at="2026-12-06T01:00:00Z"))
    )
    return nights, out


def _fill(target: Target, bundles: list[pathlib.Path], keys: Keys, made: list[rows.Record]) -> None:
    argv = ["history", "ingest", *map(str, bundles), "--db", target.where,
            "--allowed-signers", str(keys.allowed)]  # fmt: skip
    assert main(argv) == 0
    with schema.opened(target) as conn:
        for record in made:
            assert ingest.write(conn, record, search=True) == "recorded"


@pytest.fixture(scope="module")
def history(
    pg_cluster: postgres.Cluster,
    signer: Keys,
    card: Card,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[History]:
    tmp = tmp_path_factory.mktemp("long")
    bundles = _bundles(tmp, signer)
    nights, made = records(card)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGPASSWORD", pg_cluster.password)
        mp.setattr(
            "bench.verdict.run_source.DEFAULT_ALLOWED_SIGNERS", (tmp / "no-allowed-signers",)
        )
        pg = Target("postgresql", postgres.create_database(pg_cluster, f"long{next(_databases)}"))
        lite = Target("sqlite", str(tmp / "history.sqlite3"))
        for target in (lite, pg):
            _fill(target, bundles, signer, made)
        corpus = tuple(json.loads((r / "results.json").read_text()) for r in corpus_runs())
        yield History(lite, pg, corpus, nights)


def query(target: Target, sql: str) -> list[tuple[Any, ...]]:
    with database.connect(target) as conn:
        return conn.query(sql)
