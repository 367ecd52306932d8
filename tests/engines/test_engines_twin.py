"""`bench run` (a real subprocess) against the twin (a real server on 127.0.0.1) in each
engine flavor: the engine detected, capacity from that engine's own report, the same
over-capacity set, valid cells, and where the facts and the tokens came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.results import Results
from tests.run.test_run_twin import SMALL, bench, finish
from tests.support.twinproc import start_twin

# timed: its twins' 0.8 s windows went without a token when a vLLM server took the cores
# (fresh-clone run under stress-ng, 5 December), so it runs apart from them (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.timed]

# (twin flags, engine, stdout's capacity line, facts_source expected, cells' token source)
FLAVORS = {
    "vllm": (
        [],
        "vllm",
        "KV capacity: 2,048 tokens (kv_cache_size_tokens",
        {
            "engine": "metrics:vllm:*",
            "kv_capacity": "metrics:vllm:cache_config_info kv_cache_size_tokens",
            "running": "metrics:vllm:num_requests_running",
            "max_model_len": "endpoint:/v1/models max_model_len",
        },
        "usage",
    ),
    "sglang": (
        ["--engine", "sglang"],
        "sglang",
        "KV capacity: 2,048 tokens (engine_metrics: sglang:max_total_num_tokens=2048",
        {
            "engine": "metrics:sglang:*",
            "kv_capacity": "metrics:sglang:max_total_num_tokens",
            "running": "metrics:sglang:num_running_reqs",
            "waiting": "metrics:sglang:num_queue_reqs",
            "spec_decode": "metrics:sglang:spec_accept_rate",
        },
        "usage",
    ),
    "llamacpp": (
        ["--engine", "llamacpp"],
        "llamacpp",
        "KV capacity: 2,048 tokens (engine_endpoint: /props n_ctx=2048",
        {
            "engine": "metrics:llamacpp:*",
            "kv_capacity": "endpoint:/props default_generation_settings.n_ctx x total_slots",
            "max_model_len": "endpoint:/props default_generation_settings.n_ctx",
            "running": "metrics:llamacpp:requests_processing",
            "output_tokens": "endpoint:stream timings.predicted_n on every chunk",
        },
        "engine_chunk_count",
    ),
    # A server that counts only at the end: the streamed text, tokenized by the server.
    "llamacpp-text": (
        ["--engine", "llamacpp", "--no-per-chunk-counts"],
        "llamacpp",
        "KV capacity: 2,048 tokens (engine_endpoint",
        {"engine": "metrics:llamacpp:*"},
        "tokenized_text",
    ),
    "sglang-text": (
        ["--engine", "sglang", "--no-per-chunk-counts"],
        "sglang",
        "KV capacity: 2,048 tokens (engine_metrics",
        {"engine": "metrics:sglang:*"},
        "tokenized_text_share",
    ),
}


@pytest.mark.parametrize("flavor", list(FLAVORS))
def test_bench_run_against_each_engine_flavor(flavor: str, tmp_path: Path) -> None:
    flags, engine, capacity_line, facts, token_source = FLAVORS[flavor]
    out = tmp_path / "r"
    with start_twin("tiny", speed=4.0, extra_args=flags) as twin:
        rc, stdout, stderr = finish(
            bench("--url", twin.url, *SMALL, "--duration", "3", "--out", str(out))
        )
    assert rc == 0, stderr[-2000:]
    assert capacity_line in stdout
    assert f"Engine: {engine} ({facts['engine']})" in stdout  # the plan says where from
    running = facts.get("running")
    assert running is None or f"running {running}" in stdout
    assert "1K x 2: over capacity (needs 2,560 KV tokens, the server has 2,048)" in stdout
    results = Results.model_validate_json((out / "results.json").read_text())
    assert results.server.engine == engine
    assert facts.items() <= results.server.facts_source.items()
    over = {(c.context_label, c.concurrency) for c in results.cells if c.status == "over_capacity"}
    assert over == {("1K", 2), ("1K", 4)}
    valid = [c for c in results.cells if c.status == "valid"]
    assert {(c.context_label, c.concurrency) for c in valid} == {
        ("256", 1),
        ("256", 2),
        ("256", 4),
        ("1K", 1),
    }
    for cell in valid:
        assert cell.extras is not None and cell.extras.token_source == token_source
        assert cell.figures is not None and cell.figures.output_tokens > 0
        # Tokens spread over the window, never a request's all at its end: TBT is the
        # twin's per-token step, far below a whole request's duration.
        assert 0 < cell.figures.tbt_s < cell.figures.measured_for_s / 20
    if engine != "vllm":
        assert results.measurement.kv_source in ("engine_metrics", "engine_endpoint")
    # The tiny profile decodes speculatively: the note names the engine's own source.
    spec = results.server.facts_source["spec_decode"].removeprefix("metrics:")
    tables = (out / "tables.md").read_text()
    assert f"from the server's {spec}" in tables or (
        engine == "vllm" and "from the server's vllm:spec_decode_* counters" in tables
    )


def test_a_tokenizer_the_user_points_at(tmp_path: Path) -> None:
    """`--tokenizer-url`: another server's /tokenize counts the streamed text (here a
    llama.cpp-flavored twin, whose pieces place every token in its chunk)."""
    out = tmp_path / "r"
    server_flags = ["--engine", "sglang", "--no-per-chunk-counts"]
    with (
        start_twin("tiny", speed=4.0, extra_args=server_flags) as twin,
        start_twin("tiny", speed=4.0, extra_args=["--engine", "llamacpp"]) as tokenizer,
    ):
        args = ["--contexts", "256", "--concurrencies", "2", "--max-tokens", "128"]
        rc, _, stderr = finish(
            bench(
                "--url", twin.url, *args, "--duration", "2", "--out", str(out),
                "--tokenizer-url", tokenizer.url,
            )
        )  # fmt: skip
        assert rc == 0, stderr[-2000:]
        refused = tmp_path / "refused"
        rc, _, stderr = finish(
            bench(
                "--url", twin.url, *args, "--duration", "2", "--out", str(refused),
                "--tokenizer-url", twin.url + "/nothing-here",
            )
        )  # fmt: skip
        assert rc == 2 and "its /tokenize does not count" in stderr
    results = Results.model_validate_json((out / "results.json").read_text())
    facts = results.server.facts_source
    assert facts["output_tokens"].startswith("endpoint:stream usage on every chunk")
    assert facts["output_tokens_fallback"] == (
        f"fallback:streamed text tokenized by {tokenizer.url}/tokenize (--tokenizer-url)"
    )
    (cell,) = [c for c in results.cells if c.status == "valid"]
    assert cell.extras is not None and cell.extras.token_source == "tokenized_text"
