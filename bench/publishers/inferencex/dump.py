"""The dump: its benchmark_results.json (or the unzipped folder) streamed, one row at a time,
and the one row --select picks (`read`); whether a file's first bytes look like it.

The format, as read from the publisher's own code (read to learn, nothing copied):

- SemiAnalysisAI/InferenceX-app `packages/db/src/dump-db.ts` and `.github/workflows/db-backup.yml`:
  the weekly release `db-dump/YYYY-MM-DD` is a zip of a folder holding one JSON file per table
  (`configs.json`, `workflow_runs.json`, `benchmark_results.json`, ...), each a JSON array
  written one row a line (`SELECT *`, every column under its own name). Give this module the
  unzipped `benchmark_results.json` (or the folder); `configs.json` and `workflow_runs.json`
  are read from beside it when there.
- `packages/db/migrations/001_initial_schema.sql` (and 008, 011, the recipe-fingerprint
  migration): a `benchmark_results` row is `id`, `workflow_run_id`, `config_id`,
  `benchmark_type` (single_turn, agentic_traces), `date`, `isl`, `osl`, `conc`, `image`,
  `metrics` (an object), `error`, `server_log_id`, and later `offload_mode`,
  `kv_transfer_lib`, `recipe_fingerprint`, `workers`, `power_*`. Its `configs` row holds
  `hardware`, `framework`, `model`, `precision`, `spec_method`, `disagg`, `is_multinode`,
  `prefill_tp/ep/dp_attention/num_workers`, `decode_...` and `num_prefill_gpu`,
  `num_decode_gpu`; its `workflow_runs` row the GitHub run: `github_run_id`, `run_attempt`,
  `head_sha`, `html_url`, ... The ids of bigint columns come as text or numbers: both read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.errors import CardError, one_line
from bench.publishers.inferencex.card import _Builder
from bench.publishers.inferencex.select import _Select
from bench.publishers.inferencex.values import (
    CONFIG_FIELDS,
    CONFIGS_FILE,
    RESULTS_FILE,
    RUN_FIELDS,
    RUNS_FILE,
    WHAT,
    _clip,
    _show,
    _text,
)
from bench.publishers.model import PublisherCard
from bench.publishers.source import head, iter_json_items

SHOWN_IDS = 5

_HEAD_MARKS = (
    '"tput_per_gpu"',
    '"output_tput_per_gpu"',
    '"median_intvty"',
    '"infmax_model_prefix"',
)


def looks_like(head: str) -> bool:
    """True when a file's first 4 KiB look like InferenceX's dump or per-result JSON."""
    if any(mark in head for mark in _HEAD_MARKS):
        return True
    return all(f'"{k}"' in head for k in ("workflow_run_id", "config_id", "conc"))


def _other_format(text: str) -> str | None:
    """Which other format the first bytes look like, for the message."""
    if '"request_throughput"' in text or ('"backend"' in text and '"num_prompts"' in text):
        return "a vLLM benchmark result (benchmark_serving JSON)"
    if "MLPerf Results Summary" in text or ":::MLLOG" in text or "SUT name" in text:
        return "an MLPerf log"
    if '"github_run_id"' in text and '"head_sha"' in text and '"conc"' not in text:
        return "InferenceX's workflow_runs table"
    if '"num_prefill_gpu"' in text and '"conc"' not in text:
        return "InferenceX's configs table"
    return None


def _results_file(path: Path) -> Path:
    table = path / RESULTS_FILE if path.is_dir() else path
    raw = head(table)
    if raw.startswith(b"PK\x03\x04"):
        raise CardError(
            f"{table} is a zip archive: unzip the db-dump release asset and give its {RESULTS_FILE}"
        )
    if raw.startswith(b"\x1f\x8b"):
        raise CardError(f"{table} is gzip-compressed: decompress it and give {RESULTS_FILE}")
    text = raw.decode("utf-8", errors="replace")
    other = _other_format(text)
    if other and not looks_like(text):
        raise CardError(f"{table} looks like {other}, not {WHAT}: give the dump's {RESULTS_FILE}")
    return table


def _beside(table: Path, name: str) -> Path | None:
    side = table.with_name(name)
    return side if side.is_file() and side.resolve() != table.resolve() else None


def _row(item: Any, n: int, table: Path) -> dict[str, Any]:
    if not isinstance(item, dict):
        kind = type(item).__name__.replace("NoneType", "null")
        raise CardError(
            f"{table}: item {n} is a JSON {kind}, not an object: not {WHAT}; give the dump's "
            f"{RESULTS_FILE}"
        )
    if "conc" not in item:
        raise CardError(
            f"{table}: item {n} has no conc field: not a row of InferenceX's benchmark_results; "
            f"give the dump's {RESULTS_FILE}"
        )
    return item


def read(path: Path, select: Mapping[str, str]) -> PublisherCard:
    """The card of the one row of PATH (a dump's benchmark_results.json, or its folder) that
    SELECT picks, streamed: memory holds one row and the ids seen, whatever the file's size."""
    table = _results_file(path)
    sel = _Select(select)
    configs, runs = _beside(table, CONFIGS_FILE), _beside(table, RUNS_FILE)
    sel.side_table(configs, sel.config_keys, sel.config_ids)
    sel.side_table(runs, sel.run_keys, sel.run_ids)

    found: tuple[dict[str, Any], str] | None = None
    count = n = 0
    first_ids: list[str] = []
    first_keys: list[str] = []
    seen: set[int] = set()  # hashes of the ids read: a million rows take tens of MB
    for n, item in enumerate(iter_json_items(table, WHAT), 1):
        row = _row(item, n, table)
        if n == 1:
            first_keys = [_clip(str(k), 40) for k in row if k != "metrics"][:40]
        if "id" in row:
            full = _text(row["id"])
            rid = _clip(full)
            mark = hash(full)
            if mark in seen:
                raise CardError(
                    f"{table}: two rows have id {_show(rid)}: the dump is damaged or two dumps "
                    f"are joined; give one weekly dump's {RESULTS_FILE}"
                )
            seen.add(mark)
        else:
            full = rid = f"row {n}"
        if sel.matches(row, full):
            count += 1
            if found is None:
                found = (row, rid)
            if len(first_ids) < SHOWN_IDS:
                first_ids.append(rid)
    if n == 0:
        raise CardError(f"{table} holds no rows: not {WHAT}; give the dump's {RESULTS_FILE}")
    if found is None:
        keys = ["id", *first_keys]
        keys += sorted(CONFIG_FIELDS | {"hw"}) if configs else []
        keys += sorted(RUN_FIELDS) if runs else []
        names = ", ".join(one_line(k) for k in dict.fromkeys(keys))
        raise CardError(
            f"{table}: no row matches {sel.text}; select with --select KEY=VALUE on one of: "
            f"{_clip(names, 600)}"
        )
    if count > 1:
        more = ", ..." if count > len(first_ids) else ""
        ids = ", ".join(_show(i) for i in first_ids)
        raise CardError(
            f"{table}: {count:,} rows match {sel.text} (ids {ids}{more}); add --select "
            "KEY=VALUE (hw, framework, isl, osl, conc, ...) or --select id=ID to choose one"
        )
    row, rid = found
    return _Builder(table, row, rid, configs, runs).card()
