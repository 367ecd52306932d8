"""The output directory of a run, written so that every finished cell is on disk at once.

Its files are named in `bench.run_files`: results.json is replaced atomically after every
cell (`save`; the sweep renders tables.md beside it, `bench.run.sweep.save`);
samples.jsonl, metrics.jsonl and gpu_telemetry.jsonl get the lines of every finished cell;
INCOMPLETE is there until the run completes.

A run directory belongs to one run: `create` makes it (or takes an empty one; anything
else, a run or unrelated files, is refused) and `lock` holds an exclusive flock on the
directory itself while this process writes it, so a second `bench run --out` or
`--resume` on it is refused in one line. The lock is a lock on the directory's inode,
not a file in it: nothing extra is signed and packed, and it goes with the process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench import writes
from bench.errors import DiskError, RunFailed, UsageError, validation_message
from bench.results import Results
from bench.run_files import (
    GPU_TELEMETRY,
    INCOMPLETE,
    METRICS,
    RESULTS,
    SAMPLES,
    SERVER_LOG,
    load_results,
)


def _key(row: dict[str, Any]) -> tuple[object, object, object, object]:
    if "context_label" in row:  # a GPU telemetry window (decode cells only)
        return ("decode", row.get("context_label"), row.get("concurrency"), row.get("trial"))
    return (row.get("phase"), row.get("context"), row.get("concurrency"), row.get("trial"))


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: int | None = None  # the directory's fd while this process holds it

    def _holds_a_run(self) -> None:
        if (self.path / RESULTS).exists():
            raise UsageError(
                f"{self.path} already holds a run",
                hint=f"continue it with --resume {self.path}, or choose another --out",
            )

    def create(self) -> None:
        """Make the directory of a new run: a new or empty one, locked for this process."""
        self._holds_a_run()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DiskError(f"cannot create {self.path}: {exc.strerror}") from None
        self.lock()
        self._holds_a_run()  # checked again under the lock: another run may have begun
        try:
            found = sorted(p.name for p in self.path.iterdir() if p.name != SERVER_LOG)
        except OSError as exc:
            raise DiskError(f"cannot read {self.path}: {exc.strerror}") from None
        if found:
            shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
            raise UsageError(
                f"{self.path} is not empty and holds no run ({shown})",
                hint="bench run writes only into a new or empty directory; choose another --out",
            )
        try:
            (self.path / INCOMPLETE).write_text("this run has not finished\n")
        except OSError as exc:
            raise DiskError(f"cannot create {self.path}: {exc.strerror}") from None

    def lock(self) -> None:
        """Hold the directory for this process (until it exits); refuse if another does."""
        if self._lock is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise UsageError(f"cannot open {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UsageError(
                f"another bench run is writing {self.path}",
                hint="wait until it ends (then --resume it if it stopped), or choose another --out",
            ) from None
        self._lock = fd

    def unlock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock)
            self._lock = None

    def load(self) -> Results:
        """The results of the run to resume (see `layout.load_results`)."""
        if not (self.path / RESULTS).is_file():
            raise UsageError(f"{self.path} has no {RESULTS} to resume", hint="check the directory")
        return load_results(self.path)

    def save(self, results: Results) -> None:
        """results.json, replaced whole, and the INCOMPLETE marker as its state says; what
        is rendered from it (tables.md) is the caller's."""
        text = results.model_dump_json(indent=2) + "\n"
        try:  # what bench writes, bench can read back (issue 29, rule 5)
            Results.model_validate_json(text)
        except ValidationError as exc:
            raise RunFailed(
                f"results.json would not read back: {validation_message(exc)}",
                hint="a bug in bench: report it with the run's samples.jsonl",
            ) from None
        self._atomic(RESULTS, text)
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
        for name in (SAMPLES, METRICS, GPU_TELEMETRY):
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
        writes.write_atomic(self.path / name, text)
