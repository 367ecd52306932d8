"""The frontier's numbers: its points, the Pareto front, the GPU count and the axis it names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.report import data, frontier, plots
from bench.report.command import write_report
from bench.report.frontier import FrontierPoint, GpuCount, gpu_count, pareto
from bench.verdict import page
from bench.verdict.run_figures import from_results
from tests.support.runs import card_results

FOUR_GPUS = {"gpu": {"available": True, "gpus": [{"name": "NVIDIA RTX PRO 6000"}] * 4}}


def test_the_front_keeps_only_points_nothing_beats_on_both_axes() -> None:
    points = [
        FrontierPoint(1, 70.0, 70.0),
        FrontierPoint(2, 60.0, 110.0),
        FrontierPoint(4, 55.0, 100.0),  # beaten by C=2 on both axes
        FrontierPoint(8, 40.0, 200.0),
        FrontierPoint(16, 41.0, 260.0, flagged=True),  # not_ready: never on the front
        FrontierPoint(32, 40.0, 150.0),  # same speed as C=8, less throughput
    ]
    assert [p.concurrency for p in pareto(points)] == [8, 2, 1]


def test_a_point_equal_to_another_does_not_knock_it_off() -> None:
    a, b = FrontierPoint(1, 10.0, 5.0), FrontierPoint(2, 10.0, 5.0)
    assert pareto([a, b]) == [a, b]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["vllm", "serve", "M", "--tensor-parallel-size", "4"], 4),
        (["vllm", "serve", "M", "-tp", "2", "--pipeline-parallel-size=2"], 4),
        (["vllm", "serve", "M", "--data-parallel-size", "2", "-tp", "4"], 8),
        (["vllm", "serve", "M", "--max-num-seqs", "256"], None),
        (["vllm", "serve", "M", "--tensor-parallel-size", "four"], None),
        (["vllm", "serve", "M", "--tensor-parallel-size"], None),
        (["vllm", "serve", "M", "-tp", "0"], None),
        (["vllm", "serve", "M", "-tp", "99999999999"], None),
    ],
)
def test_parallel_size_of_a_launch(argv: list[str], expected: int | None) -> None:
    assert frontier.parallel_size(argv) == expected


def test_gpu_count_from_the_inventory_then_the_launch_and_none_for_a_twin() -> None:
    assert gpu_count(FOUR_GPUS, twin=False) == GpuCount(4, "environment.json GPU inventory")
    launch = {"gpu": {"available": False, "gpus": []},
              "launch": {"argv": ["vllm", "serve", "M", "-tp", "2"]}}  # fmt: skip
    assert gpu_count(launch, twin=False) == GpuCount(2, "the launch's parallel size")
    # The twin's host may have GPUs (here four): they served nothing.
    assert gpu_count(FOUR_GPUS, twin=True) == frontier.NO_GPUS_TWIN
    assert gpu_count(None, twin=False) == frontier.NO_GPUS_RECORDED
    # Hostile shapes read as "not recorded", never a traceback.
    for env in ({"gpu": 5}, {"gpu": {"gpus": "4"}}, {"launch": {"argv": [1, 2]}}, [1]):
        assert gpu_count(env, twin=False) == frontier.NO_GPUS_RECORDED  # type: ignore[arg-type]
    assert GpuCount(4, "x").axis_label() == "total output tok/s per GPU (4 GPUs: x)"
    assert frontier.NO_GPUS_TWIN.axis_label() == "total output tok/s per server (a twin: no GPUs)"


def test_one_unit_for_every_run_of_a_compare() -> None:
    four, two = GpuCount(4, "inventory"), GpuCount(2, "inventory")
    assert frontier.common_scale([four, four]) == ([4.0, 4.0], four.axis_label())
    divisors, label = frontier.common_scale([four, two])
    assert divisors == [4.0, 2.0] and label.startswith("total output tok/s per GPU")
    # One run without a count: both are drawn per server.
    divisors, label = frontier.common_scale([four, frontier.NO_GPUS_TWIN])
    assert divisors == [1.0, 1.0] and label.startswith("total output tok/s per server")


def test_the_points_are_the_cards_per_request_and_total_figures() -> None:
    by_context = frontier.points_of(data.decode_cells(card_results(4.0)))
    assert list(by_context) == ["8K", "16K", "32K", "64K", "128K", "251K"]
    point = next(p for p in by_context["8K"] if p.concurrency == 128)
    # The card's 8K x 128 row at server speed (measured 4x fast): total 1,259.4 tok/s and
    # per request 7.0 tok/s (its column as printed).
    assert point.total_tok_s == pytest.approx(1259.4)
    assert point.per_user_tok_s == pytest.approx(7.0)
    # 251K at 8 is over capacity on the card: no point.
    assert [p.concurrency for p in by_context["251K"]] == [1, 2, 4]


def test_the_report_divides_by_the_gpus_and_says_where_they_came_from(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    (root / "results.json").write_text(card_results().model_dump_json())
    (root / "environment.json").write_text(json.dumps(FOUR_GPUS))
    html = write_report(root).read_text()
    assert '<img id="frontier"' in html
    assert "total output tok/s per GPU (4 GPUs: environment.json GPU inventory)" in html
    assert (root / "plots" / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_compare_page_draws_one_frontier_line_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    a = from_results(card_results(), FOUR_GPUS, name="a")
    b = from_results(card_results(), FOUR_GPUS, name="b")
    drawn: list[tuple[list[tuple[str, list[str]]], str]] = []
    real = plots.frontier

    def spy(panels, ylabel, title):  # type: ignore[no-untyped-def]
        drawn.append(([(ctx, [s.label for s in series]) for ctx, series in panels], ylabel))
        for _, series in panels:
            assert [s.divisor for s in series] == [4.0, 4.0]
            assert [(s.color, s.dashed) for s in series] == [(0, False), (1, True)]
        return real(panels, ylabel, title)

    monkeypatch.setattr(plots, "frontier", spy)
    png = page.frontier_png([("A", a), ("B", b)])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    panels, ylabel = drawn[0]
    assert [ctx for ctx, _ in panels] == ["8K", "16K", "32K", "64K", "128K", "251K"]
    assert all(labels == ["A", "B"] for _, labels in panels)
    assert ylabel == "total output tok/s per GPU (4 GPUs: environment.json GPU inventory)"


def test_a_machines_matplotlib_settings_change_no_byte_of_the_plots() -> None:
    """The style is matplotlib's own defaults and one font, whatever matplotlibrc the
    machine has (or a caller set): the same run gives the same PNG bytes."""
    import matplotlib

    cells = data.decode_cells(card_results(4.0))
    panels = [(ctx, [plots.FrontierSeries("", pts, 4.0)])
              for ctx, pts in frontier.points_of(cells).items()]  # fmt: skip
    drawn = (plots.frontier(panels, "per GPU", "t"), plots.decode_heatmap(cells, "t"))
    odd: Any = {"font.size": 17.0, "font.sans-serif": ["Liberation Sans", "Arial"],
           "lines.linewidth": 4.0, "axes.facecolor": "#eeeeee", "figure.dpi": 50.0}  # fmt: skip
    with matplotlib.rc_context(odd):
        again = (plots.frontier(panels, "per GPU", "t"), plots.decode_heatmap(cells, "t"))
    assert again == drawn
