"""The `facts_source` values each engine's exposure gives (bench.engines.facts)."""

from __future__ import annotations

from bench.engines import llamacpp, sglang, vllm
from bench.engines.facts import kv_fact, metric_facts, token_facts
from bench.results import KvCapacity
from bench.stream import metrics
from bench.stream.metrics import Snapshot


def test_metric_facts_name_the_engine_s_metric_or_say_how_bench_does_without() -> None:
    snapshot = Snapshot(t_s=0.0, values={metrics.RUNNING: 3.0, metrics.SPEC_ACCEPT_RATE: 0.5})
    assert metric_facts(sglang.ENGINE, snapshot) == {
        "running": "metrics:sglang:num_running_reqs",
        "waiting": "fallback:none (the gate counts the client's requests in flight)",
        "spec_decode": "metrics:sglang:spec_accept_rate",
        "prefix_cache": "fallback:none (not reported)",
    }
    assert metric_facts(vllm.ENGINE, None)["running"] == (
        "fallback:the client's own in-flight count"
    )


def test_token_facts_put_the_tokenizer_first_only_where_the_engine_has_no_count() -> None:
    assert token_facts(vllm.ENGINE, None) == {
        "output_tokens": "endpoint:stream usage on every chunk "
        "(stream_options.continuous_usage_stats)"
    }
    assert token_facts(llamacpp.ENGINE, "/tokenize") == {
        "output_tokens": "endpoint:stream timings.predicted_n on every chunk",
        "output_tokens_fallback": "fallback:streamed text tokenized by /tokenize",
    }


def test_kv_fact_prefers_the_engine_s_own_source() -> None:
    engine = KvCapacity(tokens=5, source="engine_metrics", detail="d")
    assert kv_fact(engine, "metrics:sglang:max_total_num_tokens") == (
        "metrics:sglang:max_total_num_tokens"
    )
    assert kv_fact(engine, None) == "fallback:unknown (every cell is run)"
    budget = KvCapacity(tokens=5, source="kv_budget", detail="d")
    assert kv_fact(budget, "metrics:x") == "fallback:--kv-budget"
