"""Figures of any finite size reach `bench fleet` and `bench compare` from a bundle that
passed its schema: a hostile or broken run can say 1e-300 tok/s on one node and 1e300 on
another (a cell whose figure no run can make, over 1e12, negative or not finite, is read
as invalid, saying so). The verdict must still come out, finite where it prints a %, never
a traceback."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.fleet import report as fleet_mod
from bench.fleet.nodes import Node
from bench.fleet.rule import Rule
from bench.fleet.tables import fleet_markdown
from bench.verdict.cells import FIGURE_MAX, Cell, RunFigures
from bench.verdict.compare import Policy, compare
from bench.verdict.tables import compare_markdown

LEVELS = (1, 2, 4)
# Figures a run could in principle record, down to the smallest float, up to FIGURE_MAX.
plausible = st.one_of(
    st.floats(min_value=0.0, max_value=FIGURE_MAX, allow_nan=False, allow_infinity=False),
    st.floats(min_value=0.0, max_value=1e-200, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 5e-324, 1e-300, 1e-9, 1.0, FIGURE_MAX]),
)
# Anything JSON can carry into a float, now and then.
anything = st.one_of(plausible, plausible, plausible, st.floats(), st.sampled_from([1e300, -1.0]))


def _node(figure: st.SearchStrategy[float]) -> st.SearchStrategy[dict[int, dict[str, list[float]]]]:
    """A node: per level, 1-3 trials of two decode figures."""
    trials = st.lists(figure, min_size=1, max_size=3)
    figs = st.fixed_dictionaries({m: trials for m in ("total_tok_s", "ttft_s")})
    return st.fixed_dictionaries(dict.fromkeys(LEVELS, figs))


def _run(name: str, cells: dict[int, dict[str, list[float]]]) -> RunFigures:
    made = {
        ("decode", "8K", lvl): Cell(
            "decode", "8K", lvl, "valid", None, {m: tuple(v) for m, v in figs.items()}
        )
        for lvl, figs in cells.items()
    }
    return RunFigures(name, "run", 1.0, {}, made, ("8K",), LEVELS, trust="unsigned")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(_node(plausible), min_size=3, max_size=5),
                 st.lists(_node(anything), min_size=3, max_size=5)))  # fmt: skip
def test_any_finite_figures_give_a_fleet_report(
    nodes: list[dict[int, dict[str, list[float]]]],
) -> None:
    fleet = [Node(f"n{i}", _run(f"n{i}", cells)) for i, cells in enumerate(nodes)]
    report = fleet_mod.fleet(fleet, Rule())
    text = fleet_markdown(report)
    assert text.rstrip().splitlines()[-1].startswith("FLEET: ")
    for s in report.spreads:
        for v in s.values:
            assert v.deviation_pct is None or math.isfinite(v.deviation_pct)


def test_an_implausible_figure_makes_its_cell_invalid_saying_why() -> None:
    run = _run("a", {1: {"total_tok_s": [120.0, 1e300]}, 2: {"total_tok_s": [230.0]}})
    bad, good = run.cell(("decode", "8K", 1)), run.cell(("decode", "8K", 2))
    assert bad is not None and good is not None
    assert bad.status == "invalid" and not bad.trials
    assert bad.detail == "implausible total_tok_s 1e+300: a figure lies between 0 and 1e+12"
    assert good.status == "valid" and good.value("total_tok_s") == 230.0


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.tuples(_node(plausible), _node(plausible)),
                 st.tuples(_node(anything), _node(anything))))  # fmt: skip
def test_any_finite_figures_give_a_comparison(
    sides: tuple[dict[int, dict[str, list[float]]], dict[int, dict[str, list[float]]]],
) -> None:
    c = compare(_run("a", sides[0]), _run("b", sides[1]), Policy())
    assert compare_markdown(c)
