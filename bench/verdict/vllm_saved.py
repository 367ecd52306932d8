"""Runs saved by `vllm bench serve --save-result` as `RunFigures`, for `bench compare`.

vLLM's benchmark (vllm/benchmarks/serve.py, `main_async` and `benchmark`) writes one JSON
object per run: `json.dump(result_json)`, one line each, appended after a newline with
--append-result. A file here is such a file (one or more records), or a directory of them
with no results.json. Each record is one cell: its context is the mean prompt length
(total_input_tokens / completed, labelled as bench labels its contexts: 8192 is "8K"), its
concurrency `max_concurrency`; records of the same cell are its trials.

Only the figures that mean what ours mean are taken (docs/verdicts.md, "Runs saved by
vllm bench serve"):
  output_throughput      total output tokens / benchmark duration   -> Total tok/s
  median_tpot_ms         median over requests of (latency - ttft) / (output tokens - 1)
                                                                     -> Time between tokens
  1000 / median_tpot_ms                                              -> Per request tok/s
TTFT is not taken (vLLM's random prompts are not in the prefix cache: its TTFT includes
prefill, ours mostly does not), nor ITL, means, percentiles or request counts.

A record is refused unless it is a closed loop like bench's cells: a max_concurrency,
request_rate "inf", no ramp-up. A record with failed requests is an invalid cell, as in a
bench run. The file is outside input: bounded in size, every field type-checked, one line
of error naming the file and record when it is not what vLLM writes.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from bench.errors import UsageError
from bench.run.prompts import context_label
from bench.verdict import saved_files
from bench.verdict.cells import Cell, Key, RunFigures, Status

MAX_BYTES = 256 * 1024 * 1024  # --save-detailed keeps every request's texts: large, bounded
# Keys every generation record of vLLM's save-result has (the `result` dict of `benchmark`
# and the set-up keys of `main_async`): what tells such a file from anything else.
SIGNATURE = frozenset(
    {"backend", "model_id", "max_concurrency", "request_rate", "completed", "output_throughput"}
)
# vLLM's --backend -> bench's --api (the endpoint the requests went to).
_APIS = {"openai-chat": "chat", "openai": "completions", "vllm": "completions"}


def _records(text: str, where: Path) -> list[dict[str, Any]]:
    """Every JSON object of the file: one, or several appended (--append-result)."""
    decoder = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return out
        try:
            value, i = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):
            raise UsageError(f"{where}: not JSON at character {i}") from None
        if not isinstance(value, dict):
            raise UsageError(f"{where}: record {len(out) + 1} is not a JSON object")
        out.append(value)


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise UsageError(f"{path}: {size} bytes, over the {MAX_BYTES} a saved result may have")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    return _records(text, path)


def _looks_saved(path: Path) -> bool:
    """The first record of a .json file has vLLM's keys (read no further than that)."""
    if not path.is_file() or path.suffix != ".json" or path.name == "results.json":
        return False
    try:
        with path.open("rb") as f:
            head = f.read(1024 * 1024).decode("utf-8", errors="replace")
    except OSError:
        return False
    return all(f'"{key}"' in head for key in SIGNATURE)


def recognises(path: Path) -> bool:
    """A file vLLM's --save-result wrote, or a directory of them without results.json."""
    if path.is_dir():
        if (path / "results.json").exists():
            return False
        files = sorted(path.glob("*.json"))
        return bool(files) and all(_looks_saved(f) for f in files)
    return _looks_saved(path)


def _number(record: dict[str, Any], key: str, where: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"{where}: {key} is {value!r}, not a number")
    return float(value)


def _count(record: dict[str, Any], key: str, where: str) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"{where}: {key} is {value!r}, not a count")
    return value


def _cell_of(record: dict[str, Any], where: str) -> tuple[str, int, Status, dict[str, float]]:
    """(context label, concurrency, status, figures) of one record."""
    concurrency = record.get("max_concurrency")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise UsageError(
            f"{where}: max_concurrency is {concurrency!r}: not a closed loop",
            hint="bench's cells keep C requests in flight: run vllm bench serve with "
            "--max-concurrency C and --request-rate inf",
        )
    if record.get("request_rate") != "inf" or record.get("ramp_up_strategy") is not None:
        raise UsageError(
            f"{where}: request_rate {record.get('request_rate')!r}: requests arrived at a rate, "
            "not as soon as one finished",
            hint="only --request-rate inf runs line up with bench's cells",
        )
    completed = _count(record, "completed", where)
    failed = _count(record, "failed", where)
    if completed == 0:
        return "?", concurrency, "failed", {}
    prompt = round(_count(record, "total_input_tokens", where) / completed)
    label = context_label(prompt, prompt)
    if failed:
        return label, concurrency, "invalid", {}
    figures = {"total_tok_s": _number(record, "output_throughput", where)}
    if "median_tpot_ms" in record:
        tpot_ms = _number(record, "median_tpot_ms", where)
        if tpot_ms > 0:
            figures["tbt_s"] = tpot_ms / 1000.0
            figures["per_request_tok_s"] = 1000.0 / tpot_ms
    return label, concurrency, "valid", figures


def _files(path: Path) -> list[Path]:
    return sorted(path.glob("*.json")) if path.is_dir() else [path]


def load(path: Path) -> RunFigures:
    """The records of `path` as one run (see the module docstring)."""
    by_cell: dict[Key, list[tuple[Status, dict[str, float]]]] = {}
    first: dict[str, Any] = {}
    seconds: list[float] = []
    for file in _files(path):
        for n, record in enumerate(_read(file), start=1):
            where = f"{file} record {n}"
            missing = sorted(SIGNATURE - record.keys())
            if missing:
                raise UsageError(
                    f"{where}: not a vllm bench serve --save-result record "
                    f"(no {', '.join(missing)})"
                )
            label, conc, status, figures = _cell_of(record, where)
            by_cell.setdefault(("decode", label, conc), []).append((status, figures))
            seconds.append(_number(record, "duration", where) if "duration" in record else 0.0)
            first = first or record
    if not by_cell:
        raise UsageError(f"{path}: holds no vllm bench serve records")
    cells: dict[Key, Cell] = {}
    for key, found in by_cell.items():
        bad = [s for s, _ in found if s != "valid"]
        if bad:
            detail = f"{len(bad)} of {len(found)} records with failed requests or none completed"
            cells[key] = Cell("decode", key[1], key[2], bad[0], detail)
            continue
        names = sorted({m for _, f in found for m in f})
        trials = {m: tuple(f[m] for _, f in found if m in f) for m in names}
        cells[key] = Cell("decode", key[1], key[2], "valid", None, trials)
    settings = {"model": str(first.get("model_id"))}
    api = _APIS.get(str(first.get("backend")))
    if api is not None:
        settings["api"] = api
    metadata = {
        "source": "vllm bench serve --save-result",
        **{
            k: str(first[k])
            for k in ("date", "backend", "label", "model_id", "tokenizer_id")
            if first.get(k) is not None
        },
        "records": str(sum(len(v) for v in by_cell.values())),
    }
    return saved_files.unsigned_run(
        path,
        made="saved by vllm bench serve",
        identities=(
            f"records sha256 {hashlib.sha256(f.read_bytes()).hexdigest()[:16]}"
            for f in _files(path)
        ),
        metadata=metadata,
        cells=cells,
        settings=settings,
        server_s=sum(seconds),
    )
