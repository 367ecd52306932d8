"""InferenceX's database dump (one row of `benchmark_results`) as a card, and back.

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
- `packages/db/src/etl/benchmark-mapper.ts`, `packages/constants/src/metric-keys.ts`: `metrics`
  holds the numeric fields of the runner's per-result JSON unchanged, under its names.
- SemiAnalysisAI/InferenceX `utils/process_result.py` writes that per-result JSON
  (`agg_<result>.json`, gathered into the `results_bmk` artifact): `hw`, `conc`, `image`,
  `model`, `framework`, `precision`, `spec_decoding`, `disagg`, `is_multinode`,
  `recipe_fingerprint`, `isl`, `osl`, `tp`, `ep`, `dp_attention` (multi-node: `prefill_*`,
  `decode_*`, `num_prefill_gpu`, `num_decode_gpu`), and the figures:
  `tput_per_gpu` = the client's total_token_throughput (input + output tokens a second) / GPUs,
  `output_tput_per_gpu`, `input_tput_per_gpu`; every `<stat>_<m>_ms` of the client becomes
  `<stat>_<m>` in SECONDS (value / 1000), and every TPOT statistic gives
  `<stat>_intvty` = 1000 / `<stat>_tpot_ms` (tokens a second a user sees). The GPUs are
  tp x pp x pcp_size on one node; prefill + decode GPUs when disaggregated (output per GPU
  then over the decode GPUs, input per GPU over the prefill GPUs). Rows in that flat shape
  (figures at the top level, `hw`) read here too.
- InferenceX `benchmarks/benchmark_lib.sh` and `utils/bench_serving/benchmark_serving.py`:
  `--dataset-name random --random-range-ratio 0.8` (`.github/workflows/benchmark-tmpl.yml`'s
  RANDOM_RANGE_RATIO), lengths uniform on the whole numbers [int(0.8 L), L],
  `--num-prompts 10 x CONC` (the recipe scripts), `--num-warmups 2 x CONC`,
  `--request-rate inf --max-concurrency CONC --ignore-eos`, percentiles 90, 99, 99.9.

What maps to what: the row's `id` is the card's point_id (a row without one: "row N", its
place in the file); config `hardware` (`hw`) -> gpu_model; `framework` -> engine name;
`image` -> engine image; workflow run `head_sha` -> engine commit (InferenceX's own commit,
whose recipe scripts hold the launch flags, not the engine's); tp/ep/pp/dcp_size/pcp_size/
dp_attention (0 or 1) and the disaggregated prefill_*/decode_* counts -> parallelism;
`conc`/`isl`/`osl` -> a closed-loop workload; each figure keeps its name, value and unit
(tok/s/gpu, s, tok/s/user; a `_ms` name keeps ms). `computed_as`: tput_per_gpu ->
input_output_tok_s_per_gpu and output_tput_per_gpu -> output_tok_s_per_gpu (with a GPU
count; the second not when disaggregated), median_intvty -> interactivity, a ms-valued
mean/median/p99 latency -> its *_ms literal; the seconds-valued latencies have no literal
(None), nor have input_tput_per_gpu, std and p90/p99.9 statistics. A point is one nightly
sample (samples_published 1). Everything else the row, its config and its workflow run say
(non-figure metrics as `metrics.<name>`, the run's as `workflow_run.<name>`) is in `extra`,
as text clipped to 200 characters. A disaggregated or multi-node row says in
`not_reproducible` that one 4-GPU host cannot reproduce it; a row whose GPU count cannot be
told is still a card (gpu_count None, the per-GPU figures not computable, said in `missing`).

Refused, each a one-line CardError naming the file: no row or several rows matching the
selection, two rows with one id, a row whose `error` is set (a failed run), a figure whose
name carries an unknown unit or whose value is not a finite number in 0..1e12, a file that
is not UTF-8 or not this format (a zip, another publisher's file, another table).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast, get_args

from pydantic import ValidationError

from bench.errors import CardError, one_line, validation_message
from bench.publishers.model import (
    ComputedAs,
    PublishedEngine,
    PublishedFigure,
    PublishedWorkload,
    PublisherCard,
)
from bench.publishers.source import head, iter_json_items

WHAT = "an InferenceX database dump"
RESULTS_FILE = "benchmark_results.json"
CONFIGS_FILE = "configs.json"
RUNS_FILE = "workflow_runs.json"

RANGE_RATIO = 0.8  # the workflow's RANDOM_RANGE_RATIO
PROMPTS_PER_STREAM = 10  # --num-prompts CONC x 10 (the recipe scripts)
WARMUPS_PER_STREAM = 2  # --num-warmups 2 x CONC (benchmark_lib.sh)
CLIP = 200  # characters of one extra value
MAX_EXTRA = 400  # entries of extra; the rest is counted
MAX_SIDE_ROWS = 1_000_000  # rows of configs.json / workflow_runs.json
SHOWN_IDS = 5
MAX_FIGURE = 1e12
MAX_COUNT = 10**9  # concurrency, lengths, parallelism: past this not a count

CONFIG_FIELDS = frozenset(
    {
        "hardware",
        "framework",
        "model",
        "precision",
        "spec_method",
        "disagg",
        "is_multinode",
        "prefill_tp",
        "prefill_ep",
        "prefill_dp_attention",
        "prefill_num_workers",
        "decode_tp",
        "decode_ep",
        "decode_dp_attention",
        "decode_num_workers",
        "num_prefill_gpu",
        "num_decode_gpu",
    }
)
RUN_FIELDS = frozenset(
    {
        "github_run_id",
        "run_attempt",
        "name",
        "status",
        "conclusion",
        "head_sha",
        "head_branch",
        "html_url",
        "created_at",
        "run_started_at",
        "append_only",
    }
)
# The per-result JSON's names and the database's for one field: a selection by either works.
ALIASES = {
    "hw": "hardware",
    "hardware": "hw",
    "spec_decoding": "spec_method",
    "spec_method": "spec_decoding",
}

_HEAD_MARKS = (
    '"tput_per_gpu"',
    '"output_tput_per_gpu"',
    '"median_intvty"',
    '"infmax_model_prefix"',
)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TPUT = re.compile(r"(?P<kind>input_|output_)?tput_per_gpu(?:_(?P<unit>[a-z]+))?")
_LATENCY = re.compile(
    r"(?P<stat>mean|median|std|p\d{1,2}(?:\.\d{1,3})?)_(?P<metric>ttft|tpot|itl|e2el|intvty)"
    r"(?:_(?P<unit>[a-z]+))?"
)
_METRIC_WORDS = {
    "ttft": "time to first token of a request",
    "tpot": (
        "time per output token of a request after its first, (latency - TTFT) / (output tokens - 1)"
    ),
    "itl": "inter-token latency, the gap between successive streamed chunks of all requests",
    "e2el": "end-to-end latency of a request, from sending it to its last token",
}
_TPUT_WORDS = {
    "": (
        "input + output tokens a second per GPU: the client's total_token_throughput (all "
        "input and output tokens of the completed requests / the run's duration) / the GPUs "
        "(one node: tp x pp x pcp_size; disaggregated: prefill + decode GPUs)"
    ),
    "output_": (
        "output tokens a second per GPU: the client's output_throughput / the GPUs "
        "(disaggregated: / the decode GPUs)"
    ),
    "input_": (
        "input tokens a second per GPU: (total_token_throughput - output_throughput) / the "
        "GPUs (disaggregated: / the prefill GPUs)"
    ),
}
_LATENCY_UNITS = {None: "s", "ms": "ms"}
_AS_MS: frozenset[str] = frozenset({"mean", "median", "p99"})
_ABSENT = object()


# --- text -------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """A JSON value as the text a selection compares and `extra` keeps."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    try:  # true, false, null and numbers as JSON writes them; an int may be 4,000 digits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return "(a value too large to print)"


def _clip(text: str, n: int = CLIP) -> str:
    return text[:n]


def _show(value: Any) -> str:
    """A value from the file, safe in a one-line message."""
    return one_line(_clip(_text(value), 60))


def _id_text(value: Any) -> str:
    return _clip(_text(value), CLIP)


# --- values -----------------------------------------------------------------------------


def _count(value: Any) -> int | None:
    """A whole number 0..MAX_COUNT (an int, an integral float, or digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_COUNT else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and 0 <= value <= MAX_COUNT else None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 10:
        n = int(value.strip())
        return n if n <= MAX_COUNT else None
    return None


def _flag(value: Any) -> bool | None:
    """process_result.py writes some flags as "true"/"false" text; the database as booleans."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value == 1
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no", ""):
            return False
    return None


def _number(value: Any) -> float | None:
    """A finite number in 0..MAX_FIGURE, else None (booleans and text are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_FIGURE:
        return None
    v = float(value)
    return v if math.isfinite(v) and 0.0 <= v <= MAX_FIGURE else None


# --- the file ---------------------------------------------------------------------------


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


def _inline(row: Mapping[str, Any], key: str) -> Any:
    for name in (key, ALIASES.get(key)):
        if name is not None and name in row:
            return row[name]
    return _ABSENT


class _Select:
    """--select KEY=VALUE pairs: `id` against the row's id, others against the row's field
    of that name, else its config's or its workflow run's (case-insensitive values)."""

    def __init__(self, select: Mapping[str, str]) -> None:
        self.id: str | None = None
        self.fields: list[tuple[str, str]] = []
        for key, value in select.items():
            k, v = str(key).strip().lower(), str(value).strip().lower()
            if k == "id":
                self.id = v
            else:
                self.fields.append((k, v))
        self.config_keys = [k for k, _ in self.fields if _in(k, CONFIG_FIELDS)]
        self.run_keys = [k for k, _ in self.fields if _in(k, RUN_FIELDS)]
        self.config_ids: dict[str, set[str]] = {}
        self.run_ids: dict[str, set[str]] = {}
        self.pairs = dict(self.fields)
        self.text = (
            " ".join(one_line(f"{k}={_clip(str(v), 60)}") for k, v in select.items())
            or "(nothing selected)"
        )

    def side_table(self, path: Path | None, keys: list[str], into: dict[str, set[str]]) -> None:
        """The ids of the side table's rows that match each of KEYS."""
        if path is None or not keys:
            return
        for k in keys:
            into[k] = set()
        for n, item in enumerate(iter_json_items(path, WHAT, max_items=MAX_SIDE_ROWS), 1):
            if not isinstance(item, dict):
                raise CardError(f"{path}: item {n} is not a JSON object: not {WHAT}")
            for k in keys:
                got = _inline(item, k)
                if got is not _ABSENT and _text(got).strip().lower() == self.pairs[k]:
                    into[k].add(_id_text(item.get("id")))

    def matches(self, row: Mapping[str, Any], rid: str) -> bool:
        if self.id is not None and rid.lower() != self.id:
            return False
        for key, want in self.fields:
            got = _inline(row, key)
            if got is not _ABSENT:
                if _text(got).strip().lower() != want:
                    return False
            elif key in self.config_ids:
                if _id_text(row.get("config_id")) not in self.config_ids[key]:
                    return False
            elif key in self.run_ids:
                if _id_text(row.get("workflow_run_id")) not in self.run_ids[key]:
                    return False
            else:
                return False
        return True


def _in(key: str, names: frozenset[str]) -> bool:
    return key in names or ALIASES.get(key) in names


def _side_row(path: Path | None, want: str) -> dict[str, Any] | None:
    if path is None:
        return None
    for n, item in enumerate(iter_json_items(path, WHAT, max_items=MAX_SIDE_ROWS), 1):
        if not isinstance(item, dict):
            raise CardError(f"{path}: item {n} is not a JSON object: not {WHAT}")
        if _id_text(item.get("id")) == want:
            return item
    return None


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


# --- the card ---------------------------------------------------------------------------


class _Builder:
    """One selected row, with its config and workflow run, made into a card."""

    def __init__(
        self,
        table: Path,
        row: dict[str, Any],
        rid: str,
        configs: Path | None,
        runs: Path | None,
    ) -> None:
        self.table, self.row, self.rid = table, row, rid
        self.where = f"{table}: row {_show(rid)}"
        nested = "metrics" in row
        metrics = row.get("metrics") if nested else row
        if not isinstance(metrics, dict):
            raise CardError(f"{self.where}: metrics is not a JSON object: not {WHAT}")
        self.nested = nested
        self.metrics: dict[str, Any] = metrics
        self.config: dict[str, Any] | None = None
        self.missing: list[str] = []
        if "config_id" in row:
            cid = _id_text(row["config_id"])
            self.config = _side_row(configs, cid)
            if self.config is None and "model" not in row:
                where = f"is not in {configs}" if configs else f"has no {CONFIGS_FILE} beside it"
                raise CardError(
                    f"{self.where}: its config_id {_show(cid)} {where}: give the whole "
                    f"unzipped dump folder ({CONFIGS_FILE}, {RUNS_FILE}, {RESULTS_FILE})"
                )
        self.run: dict[str, Any] | None = None
        if "workflow_run_id" in row:
            self.run = _side_row(runs, _id_text(row["workflow_run_id"]))
        # Its config's fields (not its id), and over them the row's own.
        self.view: dict[str, Any] = {}
        if self.config:
            self.view.update((k, v) for k, v in self.config.items() if k != "id")
        self.view.update(row)
        self.used: set[str] = {"metrics"}
        self.used_metrics: set[str] = set()

    # field access, marking what the card uses so that `extra` holds the rest
    def get(self, *names: str) -> Any:
        for name in names:
            if name in self.view:
                self.used.add(name)
                return self.view[name]
            if self.nested and name in self.metrics:
                self.used_metrics.add(name)
                return self.metrics[name]
        return None

    def text(self, *names: str) -> str | None:
        value = self.get(*names)
        if value is None:
            return None
        return _clip(_text(value)).strip() or None

    def whole(self, name: str, *, required: bool = False, least: int = 1) -> int | None:
        value = self.get(name)
        if value is None and not required:
            return None
        n = _count(value)
        if n is None or n < least:
            raise CardError(
                f"{self.where}: {name} is {_show(value)}: not a whole number of at least "
                f"{least}; give the dump as released"
            )
        return n

    def card(self) -> PublisherCard:
        try:
            return self.build()
        except ValidationError as exc:
            raise CardError(f"{self.where}: {validation_message(exc)}: not {WHAT}") from None

    def build(self) -> PublisherCard:
        model = self.text("model")
        if model is None:
            raise CardError(f"{self.where}: the row and its config name no model: not {WHAT}")
        self.used.add("id")  # the point id
        disagg = bool(_flag(self.view.get("disagg")))  # both stay in extra as published
        multinode = _flag(self.view.get("is_multinode"))
        parallelism = self.parallelism(disagg)
        gpus = self.gpu_count(disagg, parallelism)
        figures = self.figures(gpus, disagg)
        error = self.get("error")
        if error is not None:
            raise CardError(
                f"{self.where} records a failed run (error {_show(error)}): nothing to "
                "reproduce; select another row"
            )
        if not figures:
            raise CardError(
                f"{self.where} has no figures (tput_per_gpu, median_ttft, ...): not a result "
                f"of {WHAT}"
            )
        workload = self.workload()
        engine = PublishedEngine(
            name=self.text("framework"),
            version=self.text("framework_version", "engine_version"),
            commit=self.run_text("head_sha"),
            image=self.text("image"),
            parallelism=parallelism,
        )
        self.note_missing(engine, gpus)
        date = self.text("date")
        match = _DATE.match(date or "")
        return PublisherCard(
            publisher="inferencex",
            source=self.table.name,
            point_id=self.rid,
            date=match.group(0) if match else date,
            model=model,
            precision=self.text("precision"),
            gpu_model=self.text("hardware", "hw"),
            gpu_count=gpus,
            nodes=1 if multinode is False else None,
            engine=engine,
            workload=workload,
            figures=tuple(sorted(figures, key=_figure_order)),
            samples_published=1,
            missing=tuple(self.missing),
            not_reproducible=tuple(self.not_reproducible(disagg, bool(multinode), parallelism)),
            extra=self.extra(),
        )

    def run_text(self, name: str) -> str | None:
        if self.run is not None and self.run.get(name) is not None:
            return _clip(_text(self.run[name])).strip() or None
        return self.text(name)

    def parallelism(self, disagg: bool) -> dict[str, int]:
        out: dict[str, int] = {}
        if disagg:
            names = [
                f"{role}_{k}"
                for role in ("prefill", "decode")
                for k in ("tp", "ep", "pp", "dcp_size", "pcp_size", "dp_attention", "num_workers")
            ] + ["num_prefill_gpu", "num_decode_gpu"]
            for name in names:
                self.put(out, name, name)
            return out
        # One engine: the database mirrors it into the prefill_ and decode_ columns.
        for name in ("tp", "ep", "pp", "dcp_size", "pcp_size", "dp_attention", "dp", "num_gpus"):
            self.put(out, name, name, f"decode_{name}")
        return out

    def put(self, out: dict[str, int], key: str, *names: str) -> None:
        value = self.get(*names)
        if value is None:
            return
        if key.endswith("dp_attention"):
            flag = _flag(value)
            if flag is not None:
                out[key] = int(flag)
            return
        n = _count(value)
        if n is not None:
            out[key] = n

    def gpu_count(self, disagg: bool, par: dict[str, int]) -> int | None:
        """The GPUs process_result.py divides by: prefill + decode GPUs when disaggregated,
        else tp x pp x pcp_size (num_gpus when the row says it)."""
        if disagg:
            p, d = par.get("num_prefill_gpu"), par.get("num_decode_gpu")
            total = p + d if p is not None and d is not None else None
        elif par.get("num_gpus"):
            total = par["num_gpus"]
        elif par.get("tp"):
            total = par["tp"] * (par.get("pp") or 1) * (par.get("pcp_size") or 1)
        else:
            total = None
        return total if total is not None and 1 <= total <= 1_000_000 else None

    def figures(self, gpus: int | None, disagg: bool) -> list[PublishedFigure]:
        out: list[PublishedFigure] = []
        for name, value in self.metrics.items():
            kind = _figure(name, self.where)
            if kind is None:
                continue
            unit, definition, computed = kind
            v = _number(value)
            if v is None:
                raise CardError(
                    f"{self.where}: {one_line(name)} is {_show(value)}: not a finite number "
                    f"in 0..{MAX_FIGURE:g}; give the dump as released"
                )
            if computed in ("input_output_tok_s_per_gpu", "output_tok_s_per_gpu") and (
                gpus is None or (disagg and computed == "output_tok_s_per_gpu")
            ):
                computed = None
            out.append(
                PublishedFigure(
                    name=name, value=v, unit=unit, definition=definition, computed_as=computed
                )
            )
            (self.used_metrics if self.nested else self.used).add(name)
        return out

    def workload(self) -> PublishedWorkload:
        conc = self.whole("conc", required=True)
        assert conc is not None
        isl, osl = self.whole("isl"), self.whole("osl")
        kind = (self.text("benchmark_type") or "single_turn").lower()
        single = kind == "single_turn"
        ratio = _number(self.get("random_range_ratio"))
        if ratio is None or ratio > 1:
            ratio = RANGE_RATIO if single else None
        prompts = self.whole("num_prompts")
        warmups = self.whole("num_warmups", least=0)
        said = []
        if prompts is None and single:
            prompts = PROMPTS_PER_STREAM * conc
            said.append(f"num_prompts = {PROMPTS_PER_STREAM} x concurrency")
        if warmups is None and single:
            warmups = WARMUPS_PER_STREAM * conc
            said.append(f"warmups = {WARMUPS_PER_STREAM} x concurrency")
        rule = None
        if single:
            rule = (
                f"input and output lengths each uniform on the whole numbers "
                f"[int({ratio:g} x L), L] (InferenceX's benchmark_serving.py, "
                f"--random-range-ratio {ratio:g}); requests sent at rate inf, at most "
                f"{conc} at a time; ignore_eos"
            )
            if said:
                rule += (
                    "; "
                    + " and ".join(said)
                    + " by the client's rule (benchmarks/benchmark_lib.sh and the recipe "
                    "scripts), not from the row"
                )
        return PublishedWorkload(
            arrivals="closed",
            dataset="random" if single else kind,
            concurrency=conc,
            input_tokens=isl,
            output_tokens=osl,
            range_ratio=ratio,
            length_rule=rule,
            num_prompts=prompts,
            warmups=warmups,
            ignore_eos=True if single else None,
        )

    def note_missing(self, engine: PublishedEngine, gpus: int | None) -> None:
        if gpus is None:
            self.missing.append("GPU count: a per-GPU figure cannot be computed")
        where = f" at commit {engine.commit}" if engine.commit else ""
        self.missing.append(
            f"launch flags (the dump has none: InferenceX's recipe script for this "
            f"configuration{where} holds them)"
        )
        if engine.image is None:
            self.missing.append("image (the row has none: runs before 2025-12-08 recorded none)")
        if engine.commit is None:
            self.missing.append(f"commit (no workflow run for the row: {RUNS_FILE} beside it?)")
        if engine.name is None:
            self.missing.append("framework")
        if self.text("hardware", "hw") is None:
            self.missing.append("hardware")

    def not_reproducible(self, disagg: bool, multinode: bool, par: dict[str, int]) -> list[str]:
        out: list[str] = []
        if disagg:
            shape = ", ".join(
                f"{role}: {par.get(f'{role}_num_workers', '?')} worker(s), "
                f"{par.get(f'num_{role}_gpu', '?')} GPUs"
                for role in ("prefill", "decode")
            )
            out.append(
                f"disaggregated prefill/decode serving{' on several nodes' if multinode else ''}"
                f" ({shape}): one 4-GPU host cannot reproduce it; its figures are the whole "
                "deployment's"
            )
        elif multinode:
            out.append("multi-node serving: one 4-GPU host cannot reproduce it")
        kind = (self.text("benchmark_type") or "single_turn").lower()
        if kind != "single_turn":
            out.append(
                f"benchmark_type {kind}: not InferenceX's random single-turn client, which is "
                "the workload a reproduction runs"
            )
        return out

    def extra(self) -> dict[str, str]:
        out: dict[str, str] = {}
        items: list[tuple[str, Any]] = [(k, v) for k, v in self.view.items() if k not in self.used]
        if self.nested:
            items += [
                (f"metrics.{k}", v) for k, v in self.metrics.items() if k not in self.used_metrics
            ]
        if self.run is not None:
            items += [
                (f"workflow_run.{k}", v) for k, v in self.run.items() if k not in ("id", "head_sha")
            ]
        for key, value in items:
            if len(out) >= MAX_EXTRA:
                out["extra_clipped"] = f"{len(items) - MAX_EXTRA} more fields not kept"
                break
            out[_clip(str(key), 100)] = _clip(_text(value))
        return out


def _figure(name: str, where: str) -> tuple[str, str, ComputedAs | None] | None:
    """(unit, definition, computed_as) of a published figure's name; None: not a figure."""
    m = _TPUT.fullmatch(name)
    if m:
        if m["unit"] is not None:
            raise _unknown_unit(name, where)
        kind = m["kind"] or ""
        computed: dict[str, ComputedAs | None] = {
            "": "input_output_tok_s_per_gpu",
            "output_": "output_tok_s_per_gpu",
            "input_": None,
        }
        return "tok/s/gpu", _TPUT_WORDS[kind], computed[kind]
    m = _LATENCY.fullmatch(name)
    if not m:
        return None
    stat, metric, unit = m["stat"], m["metric"], m["unit"]
    stat_words = {"mean": "mean", "median": "median", "std": "standard deviation"}.get(
        stat, f"{stat[1:]}th percentile"
    )
    if metric == "intvty":
        if unit is not None:
            raise _unknown_unit(name, where)
        return (
            "tok/s/user",
            f"interactivity, tokens a second one user sees: 1000 / the {stat_words} of TPOT "
            "in ms (process_result.py)",
            "interactivity" if stat == "median" else None,
        )
    if unit not in _LATENCY_UNITS:
        raise _unknown_unit(name, where)
    shown = _LATENCY_UNITS[unit]
    definition = f"{stat_words} over the run's completed requests of the {_METRIC_WORDS[metric]}"
    if unit is None:
        literal = f"{metric}_{stat}_s" if stat in _AS_MS else None
        return (
            shown,
            f"{definition}, in seconds (the client's {stat}_{metric}_ms / 1000)",
            _computed(literal),
        )
    literal = f"{metric}_{stat}_ms" if stat in _AS_MS else None
    return shown, f"{definition}, in ms", _computed(literal)


_FAMILIES = ("tput", "ttft", "tpot", "itl", "e2el", "intvty")


def _figure_order(f: PublishedFigure) -> tuple[int, int, float, str]:
    """Throughput first, then TTFT, TPOT, ITL, E2EL, interactivity; median, mean, the
    percentiles in order, std."""
    m = _LATENCY.fullmatch(f.name)
    if m is None:
        kinds = ("tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu")
        return (0, kinds.index(f.name) if f.name in kinds else 3, 0.0, f.name)
    stat = m["stat"]
    rank = {"median": (0, 0.0), "mean": (1, 0.0), "std": (3, 0.0)}.get(stat)
    if rank is None:
        rank = (2, float(stat[1:]))
    return (_FAMILIES.index(m["metric"]), rank[0], rank[1], f.name)


def _computed(literal: str | None) -> ComputedAs | None:
    known = get_args(ComputedAs)
    return cast(ComputedAs, literal) if literal in known else None


def _unknown_unit(name: str, where: str) -> CardError:
    return CardError(
        f"{where}: {one_line(_clip(name, 80))}: unknown unit (InferenceX's figures are "
        "tok/s/gpu, seconds, ms or tok/s/user); give the dump as released"
    )


# --- back -------------------------------------------------------------------------------


def export(card: PublisherCard) -> dict[str, Any]:
    """The card as InferenceX's per-result row: the identifying fields under process_result.py's
    names, the parallelism, and every figure under its own name, value and unit as published
    (a dump row's `metrics[name]`, a per-result row's `[name]`)."""
    if card.publisher != "inferencex":
        raise CardError(f"card {one_line(card.point_id)} is {card.publisher}'s, not InferenceX's")
    w = card.workload
    out: dict[str, Any] = {
        "id": card.point_id,
        "date": card.date,
        "hw": card.gpu_model,
        "framework": card.engine.name,
        "model": card.model,
        "precision": card.precision,
        "isl": w.input_tokens,
        "osl": w.output_tokens,
        "conc": w.concurrency,
        "image": card.engine.image,
        "head_sha": card.engine.commit,
    }
    out.update(card.engine.parallelism)
    out.update((f.name, f.value) for f in card.figures)
    return out
