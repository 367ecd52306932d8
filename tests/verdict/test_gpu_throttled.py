"""GPU validity per window: which cells are flagged gpu_throttled and why, the verdicts'
treatment of them (not ready unless --accept gpu_throttled), and where energy came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run_files
from bench.card.model import Card
from bench.errors import UsageError
from bench.host import telemetry
from bench.results import CellGpu, Results
from bench.run import card_tables, gpu_validity
from bench.verdict.card_source import from_card
from bench.verdict.compare import Policy, compare
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_figures import from_results
from bench.verdict.run_source import merge_runs
from bench.verdict.settings import NAMES, parse_accept
from tests.support.runs import small_results
from tests.support.synth import make_results


def _window(*rows: str, throttle: bool = True) -> telemetry.WindowTelemetry:
    return telemetry.summarize(
        telemetry.parse_telemetry("\n".join(rows), with_throttle=throttle), output_tokens=100
    )


def _gpu(clock: float, reasons: dict[str, float] | None = None) -> CellGpu:
    return CellGpu(
        samples=10,
        energy_j=100.0,
        energy_per_output_token_j=1.0,
        energy_source="power_integral",
        throttle_reasons=reasons or {},
        mean_sm_clock_mhz={"0": clock},
    )


def test_a_thermal_or_power_cap_limit_in_enough_samples_flags_the_window() -> None:
    rows = [f"2026/12/02 11:30:0{i}.000, 0, 600.00, 1980, 80, 100, 50, 0x0" for i in range(9)]
    rows.append("2026/12/02 11:30:09.000, 0, 600.00, 1980, 80, 100, 50, 0x40")  # hw thermal
    gpu = gpu_validity.cell_gpu(_window(*rows))
    assert gpu.throttle_reasons == {"hw_thermal_slowdown": 0.1}
    assert gpu_validity.throttled(gpu, {}) == "hw_thermal_slowdown active in 10% of samples"
    # Idle, sync boost and an applications clock setting are no throttling.
    benign = {"gpu_idle": 1.0, "sync_boost": 1.0, "applications_clocks_setting": 1.0}
    assert gpu_validity.throttled(_gpu(1980, benign), {}) is None
    # One sample in 25 (4 %) is below MIN_SHARE: a blip, not a throttled window.
    assert gpu_validity.throttled(_gpu(1980, {"hw_thermal_slowdown": 0.04}), {}) is None
    assert gpu_validity.throttled(_gpu(1980, {"hw_thermal_slowdown": 0.05}), {}) is not None
    # The software power cap alone is a GPU at full load, as an H200 under a matmul load
    # showed (82 % of samples): not throttling unless the clock sags (the rule below).
    assert gpu_validity.throttled(_gpu(1980, {"sw_power_cap": 0.82}), {}) is None


def test_a_clock_more_than_10_percent_below_the_runs_steady_clock_flags_the_window() -> None:
    gpus = [_gpu(1980), _gpu(1980), _gpu(1950), _gpu(1700), _gpu(1800)]
    steady = gpu_validity.steady_clocks(gpus)
    assert steady == {"0": 1950}  # the median of the window means
    assert gpu_validity.throttled(_gpu(1700), steady) == (
        "GPU 0 SM clock 1,700 MHz, 13% below its steady 1,950 MHz"
    )
    assert gpu_validity.throttled(_gpu(1800), steady) is None  # 7.7 % below: within
    # One window alone has no steady clock to be below.
    assert gpu_validity.steady_clocks([_gpu(900)]) == {}


def _with_gpu(results: Results, gpus: list[CellGpu]) -> Results:
    base = results.cells[0]
    cells = tuple(
        base.model_copy(update={"concurrency": 1 + i, "gpu": g}) for i, g in enumerate(gpus)
    )
    return results.model_copy(update={"cells": cells})


def test_the_whole_run_is_judged_again_after_every_cell() -> None:
    first = gpu_validity.judged(_with_gpu(small_results(), [_gpu(1980), _gpu(1500)]))
    # Two windows: the steady clock is their median (1740), 1500 is 13.8 % below it.
    assert [sorted(c.flags) for c in first.cells] == [[], ["gpu_throttled"]]
    assert first.cells[1].gpu is not None
    assert first.cells[1].gpu.steady_sm_clock_mhz == {"0": 1740}
    assert first.measurement.energy_from == "power_integral"
    assert first.measurement.gpu_validity == gpu_validity.RULE
    # More windows at 1500: that is this host's steady clock, the flag goes.
    later = gpu_validity.judged(
        _with_gpu(small_results(), [_gpu(1980), _gpu(1500), _gpu(1500), _gpu(1500)])
    )
    assert all(c.flags == {} for c in later.cells[1:])
    # Without GPU telemetry nothing changes, not even the measurement.
    assert gpu_validity.judged(small_results()) == small_results()


def test_energy_from_says_counter_only_when_every_cell_had_it() -> None:
    counter = _gpu(1980).model_copy(update={"energy_source": "energy_counter"})
    only = gpu_validity.judged(_with_gpu(small_results(), [counter, counter]))
    assert only.measurement.energy_from == "energy_counter"
    mixed = gpu_validity.judged(_with_gpu(small_results(), [counter, _gpu(1980)]))
    assert mixed.measurement.energy_from == "power_integral"


def test_tables_mark_a_throttled_cell_and_say_where_energy_came_from() -> None:
    results = gpu_validity.judged(
        _with_gpu(small_results(), [_gpu(1980, {"hw_thermal_slowdown": 0.5})])
    )
    text = card_tables.render(results)
    assert "TTFT<br>GPU throttled |" in text
    assert "Valid; GPU throttled: hw_thermal_slowdown active in 50% of samples" in text
    assert "GPUs: 1 of 1 decode cells are marked GPU throttled" in text
    assert "Energy per output token from nvidia-smi's power samples integrated" in text
    assert "GPU throttled" not in card_tables.render(small_results())


def test_results_of_schema_1_still_load_and_schema_2_round_trips(tmp_path: Path) -> None:
    doc = json.loads(small_results().model_dump_json())
    doc["schema_version"] = 1
    for cell in doc["cells"]:
        del cell["gpu"], cell["flags"]
    del doc["measurement"]["energy_from"], doc["measurement"]["gpu_validity"]
    (tmp_path / run_files.RESULTS).write_text(json.dumps(doc))
    old = run_files.load_results(tmp_path)
    assert old.schema_version == 1 and old.cells[0].flags == {} and old.cells[0].gpu is None
    new = gpu_validity.judged(
        _with_gpu(small_results(), [_gpu(1980, {"hw_thermal_slowdown": 1.0})])
    )
    (tmp_path / run_files.RESULTS).write_text(new.model_dump_json())
    assert run_files.load_results(tmp_path) == new
    doc["schema_version"] = True  # JSON true equals 1 in Python: refused all the same
    (tmp_path / run_files.RESULTS).write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="schema version True"):
        run_files.load_results(tmp_path)


def _throttled_run(card: Card, key: tuple[str, int], why: str = "sw_power_cap 50%") -> Results:
    results = make_results(card)
    cells = tuple(
        c.model_copy(update={"flags": {"gpu_throttled": why}})
        if (c.context_label, c.concurrency) == key
        else c
        for c in results.cells
    )
    return results.model_copy(update={"cells": cells})


def test_reproduce_treats_a_throttled_cell_as_not_ready_unless_accepted(card: Card) -> None:
    ours = from_results(_throttled_run(card, ("8K", 8)), name="b")
    cell = ours.cell(("decode", "8K", 8))
    assert cell is not None and cell.status == "gpu_throttled"
    assert cell.detail == "1 of 1 trials GPU throttled: sw_power_cap 50%"
    strict = reproduce(ours, from_card(card), Tolerances())
    check = next(c for c in strict.cells if c.key == ("decode", "8K", 8))
    assert check.verdict == "GPU throttled here" and not strict.reproduced
    assert check.note == cell.detail
    judged = reproduce(ours, from_card(card), Tolerances(), parse_accept(["gpu_throttled"]))
    check = next(c for c in judged.cells if c.key == ("decode", "8K", 8))
    assert check.verdict == "pass" and judged.reproduced


def test_compare_cannot_compare_a_throttled_cell_unless_accepted(card: Card) -> None:
    a = from_results(make_results(card), name="a")
    b = from_results(_throttled_run(card, ("8K", 8)), name="b")
    strict = compare(a, b, Policy())
    cell = next(c for c in strict.cells if c.key == ("decode", "8K", 8))
    assert cell.mark == "cannot compare"
    assert cell.reason == "gpu throttled in B: 1 of 1 trials GPU throttled: sw_power_cap 50%"
    judged = compare(a, b, Policy(accept=parse_accept(["gpu_throttled"])))
    cell = next(c for c in judged.cells if c.key == ("decode", "8K", 8))
    assert cell.mark != "cannot compare"


def test_merged_runs_keep_every_trial_of_a_throttled_cell(card: Card) -> None:
    runs = [from_results(make_results(card), name="a1"),
            from_results(_throttled_run(card, ("8K", 8)), name="a2")]  # fmt: skip
    merged = merge_runs(runs, "A")
    cell = merged.cell(("decode", "8K", 8))
    assert cell is not None and cell.status == "gpu_throttled"
    assert len(cell.trials["total_tok_s"]) == 2
    assert cell.detail is not None and cell.detail.startswith("in 1 of 2 runs: 1 of 1 trials")


def test_accept_takes_the_flag_by_name_only() -> None:
    assert parse_accept(["window,gpu_throttled"]) == {"window_s", "gpu_throttled"}
    assert "gpu_throttled" not in parse_accept(["all"])
    assert parse_accept(["all", "gpu_throttled"]) == frozenset(NAMES) | {"gpu_throttled"}
    with pytest.raises(UsageError, match="unknown setting gpu_hot"):
        parse_accept(["gpu_hot"])


def test_the_verdict_pages_name_a_throttled_cell(card: Card) -> None:
    from bench.verdict import page
    from bench.verdict.tables import compare_markdown, reproduce_markdown

    ours = from_results(_throttled_run(card, ("8K", 8)), name="b")
    rep = reproduce(ours, from_card(card), Tolerances())
    text = reproduce_markdown(rep)
    assert "GPU throttled" in text and "sw_power_cap 50%" in text
    assert "⚠ GPU throttled" in page.reproduce_page(rep)
    cmp_ = compare(from_results(make_results(card), name="a"), ours, Policy())
    assert "gpu throttled in B" in compare_markdown(cmp_)
    assert "gpu throttled in B" in page.compare_page([cmp_])
