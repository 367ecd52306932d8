"""The history's Grafana dashboard (docs/grafana/bench-history.json), built with Grafana
Labs' grafana-foundation-sdk (this module owns it) from the queries of
bench.history.dashboard_sql: `make grafana-dashboard` writes it, and a test holds the
committed file equal to `render()`.

Panels, over a PostgreSQL data source chosen when the dashboard is imported (the variable
`datasource`): a cell's trend of one figure, a series per host and profile, its change
points as large dots; the matrix of the workload's cells (the card's for `(card)`), the
newest run of each series against the one before it; and the runs. Variables: the
workload, the cell and the figure, each a query of what the history holds.

The SDK has no builder of the PostgreSQL data source's query, so `SqlQuery` is one: what
Grafana's SQL editor saves in code mode (refId, rawSql, format, rawQuery, editorMode).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Literal

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

from bench.history import dashboard_sql as sql

OUT = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "bench-history.json"
UID = "bench-history"
PLUGIN = "grafana-postgresql-datasource"
DATASOURCE = model.DataSourceRef(type_val=PLUGIN, uid="${datasource}")
Format = Literal["time_series", "table"]


class SqlQuery(cogvariants.Dataquery):
    """One query of Grafana's PostgreSQL data source, as its editor saves it."""

    def __init__(self, ref_id: str, raw_sql: str, fmt: Format) -> None:
        self.ref_id, self.raw_sql, self.fmt = ref_id, raw_sql, fmt

    def to_json(self) -> dict[str, object]:
        return {
            "datasource": DATASOURCE.to_json(),
            "editorMode": "code",
            "format": self.fmt,
            "rawQuery": True,
            "rawSql": self.raw_sql,
            "refId": self.ref_id,
        }


class SqlQueryBuilder(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, ref_id: str, raw_sql: str, fmt: Format) -> None:
        self._query = SqlQuery(ref_id, raw_sql, fmt)

    def build(self) -> SqlQuery:
        return self._query


def _variable(name: str, label: str, query: str) -> gd.QueryVariable:
    return (
        gd.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(model.VariableRefresh.ON_DASHBOARD_LOAD)
        .sort(model.VariableSort.DISABLED)
    )


def _trend() -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title("$figure of $cell ($workload), run after run")
        .description(
            "A run's value is the mean of its valid trials (bench history trend); a series "
            "per host and launch profile. Large dots: the first run after a change that "
            "bench history changes found in the series."
        )
        .datasource(DATASOURCE)
        .with_target(SqlQueryBuilder("A", sql.TREND, "time_series"))
        .with_target(SqlQueryBuilder("B", sql.TREND_CHANGES, "time_series"))
        .draw_style(common.GraphDrawStyle.LINE)
        .show_points(common.VisibilityMode.ALWAYS)
        .point_size(4)
        .span_nulls(True)
        .override_by_query(
            "B",
            [
                model.DynamicConfigValue("custom.drawStyle", "points"),
                model.DynamicConfigValue("custom.pointSize", 14),
                model.DynamicConfigValue("color", {"mode": "fixed", "fixedColor": "red"}),
            ],
        )
        .grid_pos(model.GridPos(h=10, w=24, x=0, y=0))
    )


def _matrix() -> table.Panel:
    return (
        table.Panel()
        .title("$figure of every cell ($workload): latest run against the previous")
        .description(
            "Per cell and series (host, launch profile, comparable settings): the newest run "
            "in the time range and the one before it, each the mean of its valid trials, "
            "and the change in %. change_point 1: the latest run starts a change."
        )
        .datasource(DATASOURCE)
        .with_target(SqlQueryBuilder("A", sql.MATRIX, "table"))
        .override_by_name("change_pct", [model.DynamicConfigValue("decimals", 1)])
        .grid_pos(model.GridPos(h=12, w=24, x=0, y=10))
    )


def _runs() -> table.Panel:
    return (
        table.Panel()
        .title("Runs")
        .description(
            "Every run recorded in the time range, newest first: its commits, image, host, "
            "profile and workload, how many of its trials were not valid and how many "
            "changes start at it."
        )
        .datasource(DATASOURCE)
        .with_target(SqlQueryBuilder("A", sql.RUNS, "table"))
        .grid_pos(model.GridPos(h=12, w=24, x=0, y=22))
    )


def build() -> gd.Dashboard:
    datasource = gd.DatasourceVariable("datasource").label("History database").type(PLUGIN)
    board = (
        gd.Dashboard("bench history")
        .uid(UID)
        .description(
            "The results history of bench (docs/history.md): the view history_long of "
            "its PostgreSQL database. Generated by tools/grafana_dashboard.py."
        )
        .tags(["bench", "vllm", "benchmark"])
        .time("now-90d", "now")
        .timezone("utc")
        .with_variable(datasource)
    )
    labels = {"workload": "Workload", "cell": "Cell or point", "figure": "Figure"}
    for name, query in sql.VARIABLES.items():
        board = board.with_variable(_variable(name, labels[name], query))
    return board.with_panel(_trend()).with_panel(_matrix()).with_panel(_runs())


def render() -> str:
    """The dashboard's JSON, as committed."""
    text = json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True)
    return text + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where to write it")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the file differs, write nothing"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        if not same:
            print(f"{args.out}: differs from tools/grafana_dashboard.py's output", file=sys.stderr)
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
