"""The history tests' bundles (the card's matrix as results.json, signed with a throwaway
key, as the verdict tests make them) and databases: a SQLite file, and a database in a
private PostgreSQL cluster (tests/support/postgres.py) for the same tests."""

from __future__ import annotations

import itertools
import json
import pathlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from bench.bundle import seal
from bench.bundle.pack import pack
from bench.card.model import Card
from bench.history import database, ingest, rows, schema
from bench.history.database import Target
from bench.results import Results
from tests.bundle.conftest import Keys
from tests.support import postgres
from tests.support.synth import make_results

# The verdict tests' fixtures, as they are: the card, a throwaway signing key, and no
# allowed-signers file of this machine's deciding a test.
from tests.verdict.conftest import card, no_default_signers, signer  # noqa: F401

SQLITE: database.Dialect = "sqlite"
POSTGRESQL: database.Dialect = "postgresql"
_names = itertools.count()


def environment(
    *, host: str = "gpu01", image: str = "sha256:" + "ab" * 32, flags: str = "--tp 4"
) -> dict[str, Any]:
    """environment.json as a GPU host's run writes it (the parts the history reads)."""
    return {
        "host": {"hostname": host},
        "image": {"digest": image, "labels": {"bench.vllm.commit": "73a5831127a9" + "0" * 28}},
        "gpu": {
            "driver_version": "580.82.07",
            "gpus": [{"index": i, "name": "NVIDIA RTX PRO 6000"} for i in range(4)],
        },
        "launch": {"argv": ["vllm", "serve", "qwen", *flags.split()]},
        "weights": {"model": "Qwen/Qwen3.5", "revision": "f00dfeed", "pinned": True},
    }


def run_dir(
    tmp: pathlib.Path, name: str, results: Results, env: Mapping[str, Any] | None = None
) -> pathlib.Path:
    root = tmp / name
    root.mkdir()
    (root / "results.json").write_text(results.model_dump_json())
    (root / "environment.json").write_text(json.dumps(env or environment()))
    return root


def signed_bundle(
    tmp: pathlib.Path,
    name: str,
    results: Results,
    keys: Keys,
    env: Mapping[str, Any] | None = None,
    *,
    out: pathlib.Path | None = None,
) -> pathlib.Path:
    """A signed .tar.gz of `results` (and environment.json), in `out` (default `tmp`)."""
    root = run_dir(tmp, name, results, env)
    seal.seal(root, keys.private, now=datetime.now(UTC))
    return pack(root, (out or tmp) / f"{name}.tar.gz")


def unsigned_record(
    results: Results, env: Mapping[str, Any] | None = None, *, sha: str | None = None
) -> rows.Record:
    """A run's rows without a bundle (the unit tests: no ssh-keygen)."""
    return rows.record(
        rows.Bundle(
            results,
            dict(env or environment()),
            None,
            manifest_sha256=sha or f"{next(_names):064x}",
            trust=rows.Trust("signed", "test", "alice@example.org", "SHA256:x"),
            ingested_at="2026-12-04T00:00:00+00:00",
        )
    )


# A nightly series of the card's 8K and 16K rows (0.5 % noise), for the page's tests.
SLOW_CELL = ("8K", 64)


def night(of: Card, n: int, *, slow_from: int | None = None, **kw: Any) -> Results:
    """Night N of a nightly series: cell 8K x 64 6 % slower from night SLOW_FROM on."""
    slow = 1.06 if slow_from is not None and n >= slow_from else 1.0

    def scale(ctx: str, conc: int) -> float:
        return 1 / slow if (ctx, conc) == SLOW_CELL else 1.0

    kw.setdefault("contexts", {"8K", "16K"})
    r = make_results(of, seed=n, noise=0.005, scale=scale, **kw)
    return r.model_copy(
        update={"run_id": f"night-{n:02d}", "created_at": f"2026-11-{n:02d}T02:00:00Z"}
    )


def env_of(n: int, host: str = "gpu01") -> dict[str, Any]:
    """Run N's environment: its own image and engine commit (n in hex)."""
    env = environment(host=host, image=f"sha256:{n:064x}")
    env["image"]["labels"]["bench.vllm.commit"] = f"{n:040x}"
    return env


def fill(tmp: pathlib.Path | Target, records: list[rows.Record]) -> Target:
    """A history of RECORDS: in TARGET, or a SQLite file in the folder TMP."""
    target = tmp if isinstance(tmp, Target) else Target("sqlite", str(tmp / "h.sqlite3"))
    with schema.opened(target) as conn:
        if target.dialect == "sqlite":
            conn.execute("PRAGMA synchronous = OFF")  # thousands of commits: no fsync each
        for record in records:
            ingest.write(conn, record)
    return target


def nights(of: Card, count: int, **kw: Any) -> list[rows.Record]:
    return [unsigned_record(night(of, n, **kw), env_of(n)) for n in range(1, count + 1)]


def count(target: Target, table: str) -> int:
    with database.connect(target) as conn:
        return int(conn.query(f"SELECT COUNT(*) FROM {table}")[0][0])


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[postgres.Cluster]:
    with postgres.cluster() as c:
        yield c


@pytest.fixture(
    params=[
        pytest.param(SQLITE, marks=pytest.mark.subprocess),
        pytest.param(POSTGRESQL, marks=pytest.mark.integration),
    ]
)
def db(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Target:
    """An empty history: a SQLite file, or a new database of the private PostgreSQL cluster
    (its password in PGPASSWORD, as a user gives it)."""
    if request.param == SQLITE:
        return Target(SQLITE, str(tmp_path / "history.sqlite3"))
    cluster: postgres.Cluster = request.getfixturevalue("pg_cluster")
    monkeypatch.setenv("PGPASSWORD", cluster.password)
    return Target(POSTGRESQL, postgres.create_database(cluster, f"h{next(_names)}"))
