"""Compare: significance with trials, noise floor without, direction, metadata."""

from __future__ import annotations

from bench.card.model import Card
from bench.verdict.cells import BY_NAME, Cell
from bench.verdict.compare import Policy, compare, figure_delta
from bench.verdict.run_source import from_results
from bench.verdict.tables import compare_markdown
from tests.verdict.synth import make_results


def test_identical_profiles_with_three_noisy_trials_flag_nothing(card: Card) -> None:
    for pair in range(5):
        a = from_results(make_results(card, trials=3, noise=0.01, seed=2 * pair), name="a")
        b = from_results(make_results(card, trials=3, noise=0.01, seed=2 * pair + 1), name="b")
        c = compare(a, b, Policy())
        assert c.flagged == [], [f"{x.key} {x.mark}" for x in c.flagged]
        assert all(f.method == "welch" for x in c.cells for f in x.figures)


def test_eight_percent_slower_at_64_and_above_flags_exactly_those(card: Card) -> None:
    def slower(ctx: str, conc: int) -> float:
        return 1 / 1.08 if conc >= 64 else 1.0

    a = from_results(make_results(card, trials=3, noise=0.01, seed=1), name="a")
    b = from_results(make_results(card, trials=3, noise=0.01, seed=2, scale=slower), name="b")
    c = compare(a, b, Policy())
    expected = {("decode", "8K", 64), ("decode", "8K", 128), ("decode", "16K", 64)}
    assert {x.key for x in c.flagged} == expected
    assert {x.mark for x in c.flagged} == {"regressed"}
    cell = next(x for x in c.cells if x.key == ("decode", "8K", 64))
    marks = {f.metric.name: f.mark for f in cell.figures}
    # Slower means less throughput and more latency: all four are regressions.
    assert marks == dict.fromkeys(
        ("total_tok_s", "per_request_tok_s", "ttft_s", "tbt_s"), "regressed"
    )
    total = next(f for f in cell.figures if f.metric.name == "total_tok_s")
    assert total.ci_pct is not None and -12.0 < total.ci_pct[0] < total.ci_pct[1] < 0
    assert total.delta_pct is not None and -9.5 < total.delta_pct < -5.5


def test_faster_is_improved_and_lower_latency_is_better(card: Card) -> None:
    a = from_results(make_results(card, trials=3, noise=0.005, seed=1), name="a")
    b = from_results(
        make_results(card, trials=3, noise=0.005, seed=2, scale=lambda ctx, c: 1.2), name="b"
    )
    c = compare(a, b, Policy())
    decode = [x for x in c.cells if x.key[0] == "decode" and x.figures]
    assert decode and {x.mark for x in decode} == {"improved"}


def test_single_trials_use_the_noise_floor(card: Card) -> None:
    a = from_results(make_results(card, seed=1), name="a")
    b = from_results(make_results(card, seed=2, scale=lambda ctx, c: 0.9), name="b")
    c = compare(a, b, Policy())
    cell = next(x for x in c.cells if x.key == ("decode", "8K", 16))
    tbt = next(f for f in cell.figures if f.metric.name == "tbt_s")
    assert tbt.method == "noise floor" and tbt.floor_pct is not None
    # synth: TBT spread (p90 - p50) / 1.2816 = 3 % of the median over 16 requests;
    # rse = 1.2533 x 0.03 / 4 per side; floor = 1.96 x sqrt(2) x rse.
    assert abs(tbt.floor_pct - 1.96 * 2**0.5 * 1.2533 * 0.03 / 4 * 100) < 1e-6
    assert tbt.mark == "regressed"
    same = compare(a, from_results(make_results(card, seed=1), name="a2"), Policy())
    assert same.flagged == []


def test_noise_floor_above_the_effect_keeps_a_cell_unchanged() -> None:
    metric = BY_NAME["ttft_s"]
    a = Cell("decode", "8K", 1, "valid", trials={"ttft_s": (1.00,)}, rse={"ttft_s": 0.05})
    b = Cell("decode", "8K", 1, "valid", trials={"ttft_s": (1.12,)}, rse={"ttft_s": 0.05})
    d = figure_delta(metric, a, b, Policy())
    assert d.floor_pct is not None and d.floor_pct > 12  # 1.96 x 7.07 % = 13.9 %
    assert d.mark == "unchanged"
    quiet = Cell("decode", "8K", 1, "valid", trials={"ttft_s": (1.12,)}, rse={"ttft_s": 0.01})
    a_quiet = Cell("decode", "8K", 1, "valid", trials={"ttft_s": (1.0,)}, rse={"ttft_s": 0.01})
    assert figure_delta(metric, a_quiet, quiet, Policy()).mark == "regressed"


def test_status_change_and_metadata_are_listed(card: Card) -> None:
    a = from_results(make_results(card), name="a")
    oc = {(m.context, m.concurrency) for m in card.measurements if m.over_capacity}
    b = from_results(
        make_results(card, over_capacity=oc | {("8K", 128)}, version="0.31.0"), name="b"
    )
    c = compare(a, b, Policy())
    assert [(x.key, x.mark) for x in c.flagged] == [(("decode", "8K", 128), "status changed")]
    assert ("server version", "0.30.1rc1.dev452+g73a583112", "0.31.0") in c.metadata_diff
    text = compare_markdown(c)
    assert "- server version: 0.30.1rc1.dev452+g73a583112 → 0.31.0" in text
    assert "Total tok/s: 0 improved, 0 regressed, 32 unchanged of 32" in text
    assert "1 OF 55 CELLS CHANGED" in text


def test_a_side_from_a_dirty_tree_says_so_in_the_header(card: Card) -> None:
    a = from_results(make_results(card), name="a")
    assert "dirty tree" not in compare_markdown(compare(a, a, Policy()))
    dirty = make_results(card).model_copy(update={"bench_version": "0.2.0.dev5+gabc1234.d20261203"})
    b = from_results(dirty, name="b")
    head = compare_markdown(compare(a, b, Policy())).split("What differs")[0]
    assert "A (a)" not in head
    assert "B (b) was made by bench 0.2.0.dev5+gabc1234.d20261203, from a dirty tree" in head
