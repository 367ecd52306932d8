"""A history of one host's repeated runs for the noise prior's tests (bench.history.noise_runs):
builds (an image and engine commit each) run several times, every run's level drawn with a
planted sd, each cell's own noise on top; the card's 8K and 16K rows, recorded without a
bundle (no ssh-keygen: the unit tier)."""

from __future__ import annotations

import itertools
import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.bundle import recipe
from bench.card.model import Card
from bench.history import rows
from bench.results import Results
from tests.history.conftest import environment
from tests.support.synth import make_results

HOST, PROFILE = "gpu01", "twin:published"
CONTEXTS = {"8K", "16K"}
_shas = itertools.count(1)


def env_of(build: int, host: str = HOST) -> dict[str, Any]:
    """A run's environment.json on HOST: build BUILD's image and engine commit."""
    env = environment(host=host, image=f"sha256:{build:064x}")
    env["image"]["labels"]["bench.vllm.commit"] = f"{build:040x}"
    return env


def a_run(card: Card, n: int, *, level: float, noise: float = 0.005) -> Results:
    """Run N (its own date and seed): every cell's throughput times LEVEL, each cell's own
    noise NOISE."""
    r = make_results(card, seed=n, noise=noise, contexts=CONTEXTS, scale=lambda c, k: level)
    when = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=12 * n)
    return r.model_copy(
        update={"run_id": f"run-{n:03d}", "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
    )


def record(
    results: Results,
    build: int,
    *,
    host: str = HOST,
    profile: str = "published",
    trust: str = "signed",
    sha: str | None = None,
) -> rows.Record:
    checked = rows.Trust(trust, "test", "alice@example.org", "SHA256:x")
    if trust != "signed":
        checked = rows.Trust(trust, "no allowed signer", None, None)
    return rows.record(
        rows.Bundle(
            results, env_of(build, host),
            recipe.for_twin(results, profile=profile, speed=1.0),
            manifest_sha256=sha or f"{next(_shas):064x}", trust=checked,
            ingested_at="2026-12-04T00:00:00+00:00",
        )
    )  # fmt: skip


def planted(
    card: Card, builds: int, per_build: int, *, run_sd: float, seed: int = 7, **kw: Any
) -> list[rows.Record]:
    """BUILDS builds run PER_BUILD times each, one after the other, every run's level
    drawn with sd RUN_SD (log scale)."""
    rng = random.Random(seed)
    out, n = [], 0
    for build in range(1, builds + 1):
        for _ in range(per_build):
            n += 1
            out.append(record(a_run(card, n, level=math.exp(rng.gauss(0, run_sd))), build, **kw))
    return out
