"""The output directory of a run, written so that every finished cell is on disk at once.

results.json     the Results model, replaced atomically after every cell
samples.jsonl    one line per request of every finished cell (raw timings)
metrics.jsonl    the /metrics samples of every window
tables.md        the card's three tables, re-rendered with results.json
gpu_telemetry.jsonl  nvidia-smi samples of every window (with a GPU)
INCOMPLETE       present until the run completes (interrupted, killed, failed)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench import tables
from bench.errors import DiskError, UsageError
from bench.gpu import GPU_TELEMETRY_NAME
from bench.results import SCHEMA_VERSION, Results

RESULTS = "results.json"
SAMPLES = "samples.jsonl"
METRICS = "metrics.jsonl"
TABLES = "tables.md"
INCOMPLETE = "INCOMPLETE"


def _key(row: dict[str, Any]) -> tuple[object, object, object, object]:
    if "context_label" in row:  # a GPU telemetry window (decode cells only)
        return ("decode", row.get("context_label"), row.get("concurrency"), row.get("trial"))
    return (row.get("phase"), row.get("context"), row.get("concurrency"), row.get("trial"))


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    def create(self) -> None:
        if (self.path / RESULTS).exists():
            raise UsageError(
                f"{self.path} already holds a run",
                hint=f"continue it with --resume {self.path}, or choose another --out",
            )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / INCOMPLETE).write_text("this run has not finished\n")
        except OSError as exc:
            raise DiskError(f"cannot create {self.path}: {exc.strerror}") from None

    def load(self) -> Results:
        try:
            raw = (self.path / RESULTS).read_text()
        except OSError:
            raise UsageError(
                f"{self.path} has no {RESULTS} to resume", hint="check the directory"
            ) from None
        try:
            data = json.loads(raw)
            if data.get("schema_version") != SCHEMA_VERSION:
                raise UsageError(
                    f"{self.path / RESULTS} has schema version {data.get('schema_version')}, "
                    f"this bench writes {SCHEMA_VERSION}",
                    hint="resume it with the bench version that started it",
                )
            return Results.model_validate(data)
        except (ValueError, ValidationError):
            raise UsageError(f"{self.path / RESULTS} is not a valid results file") from None

    def save(self, results: Results) -> None:
        self._atomic(RESULTS, results.model_dump_json(indent=2) + "\n")
        self._atomic(TABLES, tables.render(results) + "\n")
        try:
            if results.state == "complete":
                (self.path / INCOMPLETE).unlink(missing_ok=True)
            else:
                (self.path / INCOMPLETE).write_text(f"this run is {results.state}\n")
        except OSError as exc:
            raise DiskError(f"cannot write {self.path}: {exc.strerror}") from None

    def append(self, name: str, rows: Iterable[dict[str, Any]]) -> None:
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
        try:
            with (self.path / name).open("a") as f:
                f.write(text)
        except OSError as exc:
            raise DiskError(f"cannot write {self.path / name}: {exc.strerror}") from None

    def keep_only(self, finished: set[tuple[str, str, int, int]]) -> None:
        """On resume: drop the raw lines of every cell that is not kept as finished.

        That is a cell cut before results.json saw it (Ctrl-C, kill -9) and one marked
        `interrupted` (measured again): its rerun writes its lines anew, never twice.
        Keys are (phase, context, concurrency, trial).
        """
        for name in (SAMPLES, METRICS, GPU_TELEMETRY_NAME):
            path = self.path / name
            if not path.exists():
                continue
            kept = []
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line torn by a kill -9
                if _key(row) in finished:
                    kept.append(line + "\n")
            self._atomic(name, "".join(kept))

    def _atomic(self, name: str, text: str) -> None:
        tmp = self.path / f".{name}.tmp"
        try:
            tmp.write_text(text)
            os.replace(tmp, self.path / name)
        except OSError as exc:
            raise DiskError(f"cannot write {self.path / name}: {exc.strerror}") from None
