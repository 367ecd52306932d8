"""The SQL of the history's Grafana dashboard (tools/grafana_dashboard.py writes it to
docs/grafana/bench-history.json), every query its panels and variables run, in one place so
that the tests run exactly these against a real PostgreSQL.

They read the view `history_long` (bench.history.long_view) with Grafana's macros and the
dashboard's variables: `$__timeFilter(time)` (the dashboard's time range), `$workload`,
`$cell` and `$figure` (single values: Grafana puts them in as they are, quotes doubled, so
each stands inside '...'). A run's value is the mean of its valid trials without a flag,
the point `bench history trend` draws; a series is one host, launch profile and comparable
settings, as the trend and `bench history changes` have it.
"""

from __future__ import annotations

# The dashboard's variables, each a list of what the history holds.
WORKLOADS = """SELECT DISTINCT workload FROM history_long ORDER BY workload"""
CELLS = """SELECT cell FROM history_long
WHERE workload = '$workload'
GROUP BY cell, phase, context, concurrency
ORDER BY phase, LENGTH(context), context, concurrency"""
FIGURES = """SELECT DISTINCT figure FROM history_long
WHERE workload = '$workload' AND cell = '$cell' AND figure IS NOT NULL
ORDER BY figure"""

# The cell's trend: a series per host and profile (a time series each), a run a point.
TREND = """SELECT time, COALESCE(host, '-') || ' ' || COALESCE(profile, '-') AS metric,
       AVG(value) AS value
FROM history_long
WHERE $__timeFilter(time) AND workload = '$workload' AND cell = '$cell'
  AND figure = '$figure' AND status = 'valid' AND flags IS NULL
GROUP BY time, run_id, manifest_sha256, host, profile
ORDER BY time"""
# Its change points: the first run after each change of the series, with the shift.
TREND_CHANGES = """SELECT time, 'change ' || COALESCE(host, '-') || ' ' || COALESCE(profile, '-')
       AS metric, AVG(value) AS value
FROM history_long
WHERE $__timeFilter(time) AND workload = '$workload' AND cell = '$cell'
  AND figure = '$figure' AND change_point = 1 AND status = 'valid' AND flags IS NULL
GROUP BY time, run_id, manifest_sha256, host, profile
ORDER BY time"""
# The card's matrix (or the workload's points), latest against previous: per cell and
# series, the newest run in the time range and the one before it.
MATRIX = """WITH per_run AS (
    SELECT cell, phase, context, concurrency, host, profile, settings_sha256, run_id,
           manifest_sha256, time, AVG(value) AS value, MAX(change_point) AS change_point
    FROM history_long
    WHERE $__timeFilter(time) AND workload = '$workload' AND figure = '$figure'
      AND status = 'valid' AND flags IS NULL
    GROUP BY cell, phase, context, concurrency, host, profile, settings_sha256, run_id,
             manifest_sha256, time
), ranked AS (
    SELECT per_run.*, ROW_NUMBER() OVER (
        PARTITION BY cell, host, profile, settings_sha256
        ORDER BY time DESC, manifest_sha256 DESC) AS age
    FROM per_run
)
SELECT l.cell, l.host, l.profile, l.run_id AS latest_run, l.value AS latest,
       p.run_id AS previous_run, p.value AS previous,
       100.0 * (l.value - p.value) / p.value AS change_pct,
       l.change_point AS change_point
FROM ranked l
LEFT JOIN ranked p ON p.cell = l.cell AND p.host IS NOT DISTINCT FROM l.host
    AND p.profile IS NOT DISTINCT FROM l.profile AND p.settings_sha256 = l.settings_sha256
    AND p.age = 2
WHERE l.age = 1
ORDER BY l.phase, LENGTH(l.context), l.context, l.concurrency, l.host, l.profile"""
# The runs: one row each, newest first, with how many cells and trials were not valid and
# how many changes start at it.
RUNS = """SELECT time, run_id, bench_commit, vllm_commit, image, host, profile, workload, trust,
       COUNT(DISTINCT cell) AS cells,
       COUNT(DISTINCT CASE WHEN status <> 'valid' THEN cell || ' #' || CAST(trial AS TEXT)
                      END) AS trials_not_valid,
       COUNT(DISTINCT CASE WHEN change_point = 1 THEN cell || ' ' || figure END)
           AS change_points
FROM history_long
WHERE $__timeFilter(time)
GROUP BY time, run_id, manifest_sha256, bench_commit, vllm_commit, image, host, profile,
         workload, trust
ORDER BY time DESC, run_id"""

VARIABLES: dict[str, str] = {"workload": WORKLOADS, "cell": CELLS, "figure": FIGURES}
PANELS: dict[str, str] = {
    "trend": TREND,
    "trend_changes": TREND_CHANGES,
    "matrix": MATRIX,
    "runs": RUNS,
}
EVERY: tuple[str, ...] = (*VARIABLES.values(), *PANELS.values())
