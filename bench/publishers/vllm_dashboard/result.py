"""A `vllm bench serve --save-result` JSON: one serving test's fields, and its facts.

(a) The JSON `vllm bench serve --save-result` writes (vllm-project/vllm
    vllm/benchmarks/serve.py: `main_async`, `benchmark`, `calculate_metrics`; before it
    benchmarks/benchmark_serving.py), one serving test, one object:
    - date (`%Y%m%d-%H%M%S`, the client's local time), backend (and endpoint_type), label,
      model_id, tokenizer_id, num_prompts, then each `--metadata KEY=VALUE` as a top-level
      string: the suite passes tensor_parallel_size=N (later also compilation_config.mode,
      optimization_level);
    - request_rate (a number, or the string "inf"), burstiness, max_concurrency (null: no
      cap), ramp_up_strategy / ramp_up_start_rps / ramp_up_end_rps when ramped;
    - duration (s), completed, failed, total_input_tokens, total_output_tokens;
    - the figures: request_throughput and request_goodput (req/s; goodput null without
      --goodput), output_throughput, total_token_throughput and max_output_tokens_per_s
      (tok/s), and mean_/median_/std_/pNN_ of ttft, tpot, itl, e2el in ms (`_ms`) for the
      --percentile-metrics (default ttft,tpot,itl) at the --metric-percentiles (default 99);
    - per-request arrays (input_lens, output_lens, ttfts, itls, start_times, latencies,
      queue_times, generated_texts, errors): serve.py drops most of them without
      --save-detailed but keeps latencies and queue_times; benchmark_serving.py deleted them
      before merging them in, so its files always carry them. They are not figures: skipped.
    `--append-result` appends one such object a line (JSON lines). The object does not name
    its test: vLLM's suite (.buildkite/nightly-benchmarks/ and later
    .buildkite/performance-benchmarks/scripts/run-performance-benchmarks.sh) names the file
    `<test>_qps_<qps>[_concurrency_<n>].json`, so the id is the file's stem (or `test_name`,
    which .buildkite/performance-benchmarks/scripts/convert-results-json-to-markdown.py
    adds, with tp_size, dtype, dataset_name, input_len, output_len, gpu_type and the server
    and client commands from the `.commands` file beside the result).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.publishers.vllm_dashboard.facts import _model, _Point, _Test
from bench.publishers.vllm_dashboard.figures import _split
from bench.publishers.vllm_dashboard.values import _date, _first_text, _opt_text, _scalars, _text

_ID_KEYS = ("head_sha", "commit", "vllm_commit")


def _fields_of_result(path: Path, item: dict[str, Any]) -> dict[str, str]:
    fields = _scalars(item.items())
    fields["id"] = _text(item["test_name"]) if isinstance(item.get("test_name"), str) else ""
    fields["id"] = fields["id"] or path.stem
    commit = _first_text(item, _ID_KEYS)
    if commit:
        fields["commit"] = commit
    if isinstance(item.get("model_id"), str):
        fields.setdefault("model", item["model_id"])
    return fields


def _from_result(path: Path, test: _Test) -> _Point:
    ((_, item),) = test.items
    figures, extra = _split(path, item.items(), "")
    model = _model(path, item.get("model_id"))
    point = _Point(test.key[1], "result", dict(item), figures, model)
    point.commit = test.key[0] or None
    point.gpu_model = _opt_text(item.get("gpu_type"))
    point.date = _date(item.get("date"))
    point.extra.update(extra)
    point.extra["note.format"] = "vllm bench serve --save-result JSON"
    return point
