"""The run directory's layout: the name of every file `bench run` (and `bench environment`)
writes into it, and the one bounded reader of its JSON files.

results.json         the Results model (`bench.results`), replaced after every cell
samples.jsonl        one line per request of every finished cell (raw timings)
schedule.jsonl       a workload run's schedule: each request's due time, lengths, prompt hash
metrics.jsonl        the /metrics samples of every window
gpu_telemetry.jsonl  nvidia-smi samples of every window (with a GPU)
server_spans.jsonl   the server's trace spans of the run's requests (`--otlp-traces-port`)
tables.md            the card's three tables, re-rendered with results.json
environment.json     the server's host, image, launch and weights (`bench.host.environment`)
server.log           the server's log, when whoever started the server put it there
INCOMPLETE           present until the run completes (interrupted, killed, failed)

Every module that names one of these files takes the name from here. Every reader of
results.json goes through `load_results`; a reader that must also take another bench's
version of a file (plain JSON, its own checks) goes through `read_json`. Both read at most
a bounded number of bytes, and any problem (missing, too large, not JSON, another schema)
is one BenchError line naming the file, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.errors import BenchError, UsageError, validation_message
from bench.results import READABLE_SCHEMA_VERSIONS, Results

RESULTS = "results.json"
SAMPLES = "samples.jsonl"
# A workload run's schedule: one line per request of every point (when it was due, its drawn
# lengths, its prompt's sha256): the traffic A and B of a compare must share.
SCHEDULE = "schedule.jsonl"
METRICS = "metrics.jsonl"
GPU_TELEMETRY = "gpu_telemetry.jsonl"
SERVER_SPANS = "server_spans.jsonl"  # bench.live.span_receiver writes it
TABLES = "tables.md"
ENVIRONMENT = "environment.json"
# The orchestrator writes the server's log into the run directory before `bench run` starts
# (its "KV cache size" line is a capacity source), and it belongs in the bundle.
SERVER_LOG = "server.log"
INCOMPLETE = "INCOMPLETE"

# A full card run's results.json is well under a megabyte; anything past this is no
# results file, and is refused before it is parsed.
JSON_MAX_BYTES = 32 << 20


def read_json(
    path: Path,
    *,
    shown: str | None = None,
    error: type[BenchError] = UsageError,
    hint: str | None = None,
    max_bytes: int = JSON_MAX_BYTES,
) -> Any:
    """The JSON document in `path`, read bounded: at most `max_bytes`. A file that is
    missing, unreadable, too large or not JSON is an `error` naming it as `shown` (the
    path by default), with `hint` when given."""
    name = str(path) if shown is None else shown
    try:
        with path.open("rb") as f:
            raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise error(f"{name}: missing", hint=hint) from None
    except IsADirectoryError:
        raise error(f"{name}: a directory, not a file", hint=hint) from None
    except OSError as exc:
        raise error(f"{name}: cannot read: {exc.strerror}", hint=hint) from None
    if len(raw) > max_bytes:
        raise error(f"{name}: larger than {max_bytes:,} bytes, refused unread", hint=hint)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 and bad JSON are ValueErrors
        what = " ".join(str(exc).split())[:200]
        raise error(f"{name}: not valid JSON ({what})", hint=hint) from None


def load_results(
    directory: Path, *, shown: str | None = None, error: type[BenchError] = UsageError
) -> Results:
    """results.json in `directory` as this bench's Results, read through `read_json`: a
    file of another schema version, or one that does not match the schema, is an `error`
    naming the file as `shown` (its path by default) and the first field at fault."""
    path = directory / RESULTS
    name = str(path) if shown is None else shown
    raw = read_json(
        path, shown=name, error=error, hint="give a run directory or bundle of `bench run`"
    )
    mismatch = f"{name}: does not match the results schema at"
    hint = "was it written by this version of bench?"
    if not isinstance(raw, dict):
        raise error(f"{mismatch} document: not a JSON object", hint=hint)
    if "schema_version" not in raw:  # the model's default must not pass it for ours
        raise error(f"{mismatch} schema_version: missing", hint=hint)
    version = raw["schema_version"]
    if type(version) is not int or version not in READABLE_SCHEMA_VERSIONS:  # true == 1
        readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise error(
            f"{name}: schema version {raw['schema_version']!r}, this bench reads {readable}",
            hint="read it with the bench version that made it",
        )
    try:
        return Results.model_validate(raw)
    except ValidationError as exc:
        raise error(f"{mismatch} {validation_message(exc, 'document')}", hint=hint) from None


def read_environment(directory: Path) -> dict[str, Any] | None:
    """environment.json as plain JSON, None when the run has none; parts of the wrong
    shape are left out (see `shaped`). The one reader of it for report, export, verdicts."""
    env_path = directory / ENVIRONMENT
    return shaped(read_json(env_path)) if env_path.is_file() else None


# The parts of environment.json the verdicts index into, and the type each must have.
_SHAPES: dict[str, type] = {
    "image": dict, "gpu": dict, "host": dict, "launch": dict, "weights": dict, "bench": dict,
}  # fmt: skip
_INNER: dict[tuple[str, str], type] = {
    ("image", "labels"): dict, ("image", "selftest"): dict, ("gpu", "gpus"): list,
    ("launch", "argv"): list, ("bench", "packages"): dict, ("weights", "files"): dict,
}  # fmt: skip


def shaped(env: Any) -> dict[str, Any] | None:
    """environment.json without the parts whose type is not the one its readers expect
    (`"image": 5`, `"gpus": [1]`, an argv of numbers): a hostile or foreign file reads as
    "not recorded" there instead of crashing a verdict. None when it is no JSON object."""
    if not isinstance(env, dict):
        return None
    out = {k: v for k, v in env.items() if k not in _SHAPES or isinstance(v, _SHAPES[k])}
    for (outer, inner), kind in _INNER.items():
        part = out.get(outer)
        if isinstance(part, dict) and inner in part and not isinstance(part[inner], kind):
            out[outer] = {k: v for k, v in part.items() if k != inner}
    gpu = out.get("gpu")
    if isinstance(gpu, dict) and "gpus" in gpu:
        out["gpu"] = {**gpu, "gpus": [g for g in gpu["gpus"] if isinstance(g, dict)]}
    launch = out.get("launch")
    if isinstance(launch, dict) and not all(isinstance(w, str) for w in launch.get("argv", [])):
        out["launch"] = {k: v for k, v in launch.items() if k != "argv"}
    return out
