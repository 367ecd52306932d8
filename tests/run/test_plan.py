"""Sizes, labels, the over-capacity rule, and KV capacity sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.errors import UsageError
from bench.results import Plan, RunSettings, ServerInfo
from bench.run import capacity, plan, prompts
from bench.run.options import parse_tokens
from bench.run.plan import PUBLISHED_CONCURRENCIES, PUBLISHED_CONTEXTS, PUBLISHED_PREFILL_ONLY
from bench.stream import metrics
from bench.twin import profile
from tests.support.card import all_measurement_rows

CARD_SERVER = ServerInfo(url="http://x", model="qwen", max_model_len=262_144)


def _published(kv_tokens: int | None) -> Plan:
    settings = RunSettings(
        url="http://x",
        contexts=tuple(parse_tokens(c) for c in PUBLISHED_CONTEXTS),
        prefill_only_contexts=tuple(parse_tokens(c) for c in PUBLISHED_PREFILL_ONLY),
        concurrencies=tuple(int(c) for c in PUBLISHED_CONCURRENCIES),
        duration_s=30,
        max_tokens=4096,
        kv_budget_tokens=kv_tokens,
    )
    kv = capacity.kv_capacity(None, kv_tokens)
    return plan.make_plan(settings, CARD_SERVER, kv, prompt_sizing="tokenize")


def test_published_parameters_give_the_cards_contexts_and_labels() -> None:
    p = _published(1_800_000)
    assert [(c.label, c.prompt_tokens, c.decode) for c in p.contexts] == [
        ("8K", 8192, True),
        ("16K", 16384, True),
        ("32K", 32768, True),
        ("64K", 65536, True),
        ("128K", 131072, True),
        ("251K", 257_984, True),
        ("256K", 262_079, False),
    ]


@pytest.mark.parametrize("kv_tokens", [1_572_864, 1_800_000, 2_096_639])
def test_over_capacity_set_is_exactly_the_cards_15_cells(kv_tokens: int) -> None:
    card = {(r[1], int(r[2])) for r in all_measurement_rows() if r[3] == "Over capacity"}
    ours = {(c.context_label, c.concurrency) for c in _published(kv_tokens).cells if not c.run}
    assert len(card) == 15
    assert ours == card


def test_over_capacity_reason_names_both_numbers() -> None:
    cell = next(
        c for c in _published(1_800_000).cells if (c.context_label, c.concurrency) == ("16K", 128)
    )
    assert cell.reason == "needs 2,621,440 KV tokens, the server has 1,800,000"
    assert cell.kv_needed_tokens == 128 * (16384 + 4096)


def test_render_lists_capacity_source_and_every_over_capacity_cell() -> None:
    settings = RunSettings(
        url="http://x", contexts=(8192,), concurrencies=(1, 128), duration_s=30, max_tokens=4096
    )
    kv = capacity.kv_capacity(None, 1_000_000)
    p = plan.make_plan(settings, CARD_SERVER, kv, prompt_sizing="tokenize")
    text = plan.render(p, CARD_SERVER, settings)
    assert "KV capacity: 1,000,000 tokens (kv_budget" in text
    assert "8K x 128: over capacity (needs 1,572,864 KV tokens, the server has 1,000,000)" in text
    assert "1 decode cells to run, 1 over capacity" in text


def test_capacity_prefers_budget_then_size_label_then_log_then_blocks(tmp_path: Path) -> None:
    both = metrics.parse(
        'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="1000",'
        'num_gpu_blocks="100"} 1\n',
        0,
    )
    log = tmp_path / "server.log"
    log.write_text(
        "INFO 12-01 [kv_cache_utils.py:1087] GPU KV cache size: 9,999 tokens\n"
        "(EngineCore_DP0 pid=77) INFO [kv_cache_utils.py:1087] GPU KV cache size: 1,234 tokens\n"
    )
    got = capacity.kv_capacity(both, 5, log)
    assert (got.tokens, got.source, got.detail) == (5, "kv_budget", "--kv-budget")
    assert capacity.kv_capacity(both, None, log).source == "kv_cache_size_tokens"
    assert capacity.kv_capacity(both, None, log).tokens == 1000
    blocks = metrics.parse('vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1\n', 0)
    from_log = capacity.kv_capacity(blocks, None, log)  # the last start-up line
    assert (from_log.tokens, from_log.source) == (1234, "startup_log")
    assert "GPU KV cache size: 1,234 tokens" in from_log.detail
    got = capacity.kv_capacity(blocks, None, tmp_path / "missing.log")
    assert (got.tokens, got.source) == (1600, "num_gpu_blocks_x_block_size")
    assert "unreadable" in got.detail
    assert capacity.kv_capacity(None, None, log).tokens == 1234
    none = capacity.kv_capacity(metrics.parse("", 0), 5)
    assert (none.tokens, none.source) == (5, "kv_budget")


def test_the_cpu_backends_log_line_is_read_too() -> None:
    line = "INFO 09-03 [cpu_worker.py:80] CPU KV cache size: 1,048,576 tokens"
    assert capacity.kv_tokens_from_log(line) == (1_048_576, "CPU KV cache size: 1,048,576 tokens")
    assert capacity.kv_tokens_from_log("KV cache size unknown") is None


def test_kv_budget_wins_over_the_twins_blocks_and_plans_the_cards_15_cells() -> None:
    """The published twin's /metrics without the size label: blocks x size (7.3M tokens)
    plans 6 over-capacity cells; an explicit --kv-budget must give the card's 15."""
    twin = profile.load("published")
    text = (
        f'vllm:cache_config_info{{block_size="{twin.block_size}",'
        f'num_gpu_blocks="{twin.reported_num_gpu_blocks}"}} 1\n'
    )
    snap = metrics.parse(text, 0)
    card = {(r[1], int(r[2])) for r in all_measurement_rows() if r[3] == "Over capacity"}

    def over(kv_budget: int | None) -> set[tuple[str, int]]:
        settings = RunSettings(
            url="http://x",
            contexts=tuple(parse_tokens(c) for c in PUBLISHED_CONTEXTS),
            prefill_only_contexts=tuple(parse_tokens(c) for c in PUBLISHED_PREFILL_ONLY),
            concurrencies=tuple(int(c) for c in PUBLISHED_CONCURRENCIES),
            duration_s=30,
            max_tokens=4096,
            kv_budget_tokens=kv_budget,
        )
        kv = capacity.kv_capacity(snap, kv_budget)
        p = plan.make_plan(settings, CARD_SERVER, kv, prompt_sizing="tokenize")
        text = plan.render(p, CARD_SERVER, settings)
        assert f"({kv.source}: " in text  # the plan says which source it used
        return {(c.context_label, c.concurrency) for c in p.cells if not c.run}

    assert len(over(None)) == 6
    assert over(1_800_000) == card and len(card) == 15
    unknown = capacity.kv_capacity(None, None)
    assert unknown.tokens is None and capacity.over_capacity_reason(10**9, unknown) is None


def test_labels_follow_the_card() -> None:
    assert prompts.context_label(8192, 8192) == "8K"
    assert prompts.context_label(262_144, 257_984) == "251K"
    assert prompts.context_label(262_144, 262_079) == "256K"
    assert prompts.context_label(1000, 1000) == "1000"
    assert prompts.fit(262_144, 262_144, 4096) == 257_984


def test_a_context_with_no_room_is_a_usage_error() -> None:
    settings = RunSettings(
        url="http://x", contexts=(8192,), concurrencies=(1,), duration_s=30, max_tokens=5000
    )
    small = ServerInfo(url="http://x", model="m", max_model_len=4096)
    with pytest.raises(UsageError):
        plan.make_plan(settings, small, capacity.kv_capacity(None, None), prompt_sizing="tokenize")


def test_bad_context_text_is_a_usage_error() -> None:
    assert parse_tokens("8k") == 8192
    with pytest.raises(UsageError):
        parse_tokens("eight")


def test_cells_plans_only_the_named_decode_cells_and_their_rows() -> None:
    """A sequential compare's later trials: the open cells only, each row's scout with them."""
    settings = RunSettings(
        url="http://x",
        contexts=(8192, 16384, 32768),
        prefill_only_contexts=(262_144,),
        concurrencies=(1, 64, 128),
        cells=(("8K", 64), ("32768", 1), ("32k", 128)),
        duration_s=30,
        max_tokens=4096,
    )
    p = plan.make_plan(settings, CARD_SERVER, capacity.kv_capacity(None, 1_800_000),
                       prompt_sizing="tokenize")  # fmt: skip
    assert [(c.label, c.decode) for c in p.contexts] == [
        ("8K", True), ("32K", True), ("256K", False),
    ]  # fmt: skip
    assert [(c.context_label, c.concurrency) for c in p.cells] == [
        ("8K", 64), ("32K", 1), ("32K", 128),
    ]  # fmt: skip


def test_cells_outside_the_matrix_or_malformed_are_one_line_usage_errors() -> None:
    from bench.cli import build_parser
    from bench.run.options import settings_from as _settings

    parser = build_parser()
    base = ["run", "--contexts", "8K", "--concurrencies", "1", "64"]
    ok = _settings(parser.parse_args([*base, "--cells", "8K:64"]))
    assert ok.cells == (("8K", 64),)
    with pytest.raises(UsageError, match="is not CONTEXT:CONCURRENCY"):
        _settings(parser.parse_args([*base, "--cells", "8K"]))
    bad = _settings(parser.parse_args([*base, "--cells", "8K:64", "16K:1"]))
    with pytest.raises(UsageError, match=r"^--cells 16K:1 names no cell of this sweep$"):
        plan.make_plan(bad, CARD_SERVER, capacity.kv_capacity(None, 1_800_000),
                       prompt_sizing="tokenize")  # fmt: skip


def test_cells_name_a_trimmed_row_by_its_label_or_its_nominal_size() -> None:
    for word in ("251K", "256K"):
        settings = RunSettings(
            url="http://x", contexts=(262_144,), concurrencies=(1, 4), cells=((word, 4),),
            duration_s=30, max_tokens=4096,
        )  # fmt: skip
        p = plan.make_plan(settings, CARD_SERVER, capacity.kv_capacity(None, 1_800_000),
                           prompt_sizing="tokenize")  # fmt: skip
        assert [(c.context_label, c.concurrency) for c in p.cells] == [("251K", 4)]


@pytest.mark.parametrize("size", ["inf", "1e999", "nan", "-5", "2.5", "²", "many", "9" * 5000])
def test_a_kv_size_label_that_is_no_token_count_gives_no_capacity(size: str) -> None:
    """Issue 29 H3: `kv_cache_size_tokens="inf"` was an OverflowError traceback. Such a
    label is no capacity; the blocks label (here none) or the next source is used."""
    snap = metrics.parse(f'vllm:cache_config_info{{kv_cache_size_tokens="{size}"}} 1\n', 0)
    got = capacity.kv_capacity(snap, None)
    assert got.tokens is None and got.source != "kv_cache_size_tokens"
