"""The committed Grafana dashboard (docs/grafana/bench-history.json) is its generator's
output (tools/grafana_dashboard.py, `make grafana-dashboard`), and every query in it is one
of bench.history.dashboard_sql's, which tests/history/test_dashboard_queries.py runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from bench.history import dashboard_sql
from tools import grafana_dashboard


def _committed() -> str:
    return grafana_dashboard.OUT.read_text(encoding="utf-8")


def test_the_committed_dashboard_is_the_generators_output() -> None:
    assert _committed() == grafana_dashboard.render(), "run `make grafana-dashboard`"


def _queries(node: Any) -> Iterator[str]:
    """Every SQL text in the dashboard: panels' rawSql, variables' query."""
    if isinstance(node, dict):
        if isinstance(node.get("rawSql"), str):
            yield node["rawSql"]
        if node.get("type") == "query" and isinstance(node.get("query"), str):
            yield node["query"]
        for value in node.values():
            yield from _queries(value)
    elif isinstance(node, list):
        for value in node:
            yield from _queries(value)


def test_every_query_of_the_dashboard_is_a_tested_constant_and_each_is_used() -> None:
    board = json.loads(_committed())
    found = list(_queries(board))
    assert set(found) <= set(dashboard_sql.EVERY)
    assert set(found) == set(dashboard_sql.EVERY)
    variables = [v["name"] for v in board["templating"]["list"]]
    assert variables == ["datasource", "workload", "cell", "figure"]
    panels = [(p["type"], len(p["targets"])) for p in board["panels"]]
    assert panels == [("timeseries", 2), ("table", 1), ("table", 1)]
    sources = {json.dumps(t["datasource"]) for p in board["panels"] for t in p["targets"]}
    assert sources == {json.dumps({"type": "grafana-postgresql-datasource",
                                   "uid": "${datasource}"})}  # fmt: skip
