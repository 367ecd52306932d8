"""A peer tool's workload points gathered into one unsigned run (`bench.verdict.aiperf_saved`,
`bench.verdict.guidellm_saved`): each point read from its files (an AIPerf export, a GuideLLM
benchmark) is keyed as `workload_cells` keys a point (`rate_point`, `closed_point`) and is a
`PointTrial` of that key's cell; a cell is valid only when all its trials are, and the run is
unsigned, at speed 1, its model and API the first point's."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from bench.errors import UsageError
from bench.verdict import saved_files
from bench.verdict.cells import Cell, Key, RunFigures, Status


def rate_point(
    kind: str, rate: float, capped: str | None, where: str, hint: str
) -> tuple[Key, str]:
    """The open-loop point at RATE requests/s (arrivals of KIND: "poisson") and its arrivals in
    words. Refused when the tool capped the requests in flight (CAPPED: that cap as the file
    gives it, None when uncapped), as no bench rate point is; HINT says how to run it uncapped."""
    if capped is not None:
        raise UsageError(
            f"{where}: rate {rate:g}/s capped at concurrency {capped}: "
            "neither an open loop nor a closed one",
            hint=f"bench's rate points are not capped: {hint}",
        )
    return ("workload", f"{rate:g}/s", 0), f"{kind} at {rate:g} requests/s"


def closed_point(concurrency: int) -> tuple[Key, str]:
    """The closed-loop point of CONCURRENCY requests in flight and its arrivals in words."""
    return ("workload", "closed", concurrency), f"closed loop, {concurrency} in flight"


class PointTrial(NamedTuple):
    """One point read from a file: a trial of its cell, its figures and their single-trial
    relative errors (empty unless valid)."""

    status: Status
    detail: str | None
    values: dict[str, float]
    rse: dict[str, float]


def cell(key: Key, trials: list[PointTrial], what: str) -> Cell:
    """KEY's trials as one cell, not valid if any one is not (the detail counts them as WHAT:
    "AIPerf runs"); a single trial keeps its relative errors, several are their own spread."""
    bad = [t for t in trials if t.status != "valid"]
    if bad:
        detail = f"{len(bad)} of {len(trials)} {what}: {bad[0].detail}"
        return Cell("workload", key[1], key[2], bad[0].status, detail)
    names = sorted({m for t in trials for m in t.values})
    values = {m: tuple(t.values[m] for t in trials if m in t.values) for m in names}
    rse = trials[0].rse if len(trials) == 1 else {}
    return Cell("workload", key[1], key[2], "valid", None, values, rse)


@dataclass
class Points:
    """What the files read so far hold: each key's trials, the first point's `about` (its
    model, api and arrivals), every point's arrivals in words and measured seconds, the
    run's identities (each file's hash, and what the reader adds) and the tool's versions."""

    by_key: dict[Key, list[PointTrial]] = field(default_factory=dict)
    about: dict[str, str] = field(default_factory=dict)
    arrivals: set[str] = field(default_factory=set)
    seconds: list[float] = field(default_factory=list)
    identities: set[str] = field(default_factory=set)
    versions: set[str] = field(default_factory=set)

    def file(self, raw: bytes, version: object) -> None:
        """One file read: its bytes RAW (hashed, an identity of the run) and VERSION, the
        tool's that wrote it."""
        self.identities.add(f"records sha256 {hashlib.sha256(raw).hexdigest()[:16]}")
        self.versions.add(str(version)[:40])

    def point(self, key: Key, trial: PointTrial, about: dict[str, str], seconds: float) -> None:
        """One point: a trial of KEY's cell; ABOUT its model, api and arrivals; SECONDS how
        long it ran (its server time)."""
        self.by_key.setdefault(key, []).append(trial)
        self.seconds.append(seconds)
        self.about = self.about or about
        self.arrivals.add(about["arrivals"])

    def run(self, path: Path, *, tool: str, verb: str, source: str, what: str) -> RunFigures:
        """The points read from PATH as TOOL's one run, a cell a key (`cell`; WHAT is what TOOL
        calls a point: "runs"); SOURCE names the file kind in its metadata, VERB how the tool
        made the file ("exported", "written")."""
        metadata = {
            "source": source,
            f"{tool.lower()}_version": ", ".join(sorted(self.versions)),
            "model": self.about["model"],
            "arrivals": "; ".join(sorted(self.arrivals)),
            "records": str(sum(len(t) for t in self.by_key.values())),
        }
        return saved_files.unsigned_run(
            path,
            made=f"{verb} by {tool}",
            identities=self.identities,
            metadata=metadata,
            cells={key: cell(key, t, f"{tool} {what}") for key, t in self.by_key.items()},
            settings={"model": self.about["model"], "api": self.about["api"]},
            server_s=math.fsum(self.seconds),
        )
