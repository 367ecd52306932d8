"""Grafana's part of a panel's query, done as Grafana's PostgreSQL data source does it, so the
tests run the dashboard's queries (bench.history.dashboard_sql) as Grafana would send them:
`$__timeFilter(col)` becomes `col BETWEEN 'from' AND 'to'` (the dashboard's range, UTC),
and each single-value variable `$name` (or `${name}`) its value with single quotes doubled,
no quotes added (the query writes '$name')."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

_TIME_FILTER = re.compile(r"\$__timeFilter\(([A-Za-z_][A-Za-z0-9_.]*)\)")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def substitute(
    sql: str, *, time_from: datetime, time_to: datetime, variables: Mapping[str, str]
) -> str:
    """SQL with the macro and the variables in; a variable not given fails the test."""
    between = rf"\1 BETWEEN '{_iso(time_from)}' AND '{_iso(time_to)}'"
    sql = _TIME_FILTER.sub(between, sql)

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise AssertionError(f"the query uses ${name}, which the test does not give")
        return variables[name].replace("'", "''")

    out = _VARIABLE.sub(value, sql)
    assert "$" not in out, out
    return out
