"""`history_long`, the history as one long, narrow view (schema 4): a row per run, cell (or
workload point) and trial, and figure, with the run's time and provenance beside the value,
the way Grafana (and any SQL reader) wants a history: filter, group by time, done.

Columns (COLUMNS, in this order):

- `time`: the run's start (`runs.created_at`): on PostgreSQL a TIMESTAMP WITH TIME ZONE, on
  SQLite ISO 8601 UTC text to the millisecond; NULL when results.json's text is no date
- `run_id`, `manifest_sha256`: the run's id, and its key
- `bench_commit`, `vllm_commit`: bench's commit; the engine's (`runs.engine_commit`, the
  image's `bench.vllm.commit` label)
- `image`, `host`, `profile`: the image digest, the host, the launch profile
- `settings_sha256`, `trust`: the comparable settings' hash (a series: one host, profile
  and this), `signed` or `unverified`
- `workload`: the workload's name; `(card)` for the card's matrix (no workload's name has a
  parenthesis)
- `phase`, `cell`, `context`, `concurrency`, `trial`: the cell as `bench history trend
  --cell` names it (`8K:64`, `8K:prefill`, `4/s`, `closed:8`, `trace`, `capacity`), its
  parts, the trial
- `figure`, `statistic`, `value`, `unit`: the figure as stored (at server speed), which
  statistic of the cell's requests it is (STATISTICS), its value and unit
- `interval_low`, `interval_high`: a `bench capacity` run's 95 % interval of its estimate,
  on its searches' `capacity` rows; NULL elsewhere (a trial's figure has none of its own)
- `status`, `flags`: the cell's status (valid, invalid, over_capacity, ...) and flags
- `change_point`, `change_pct`: 1 on the first run after a change `bench history changes`
  found in this series of this figure (table `change_points`, bench.history.marks), and the
  shift in %; else 0 and NULL

A cell without figures (over capacity, failed) keeps one row, figure and value NULL, so that
its status is there too. The statistics are frozen with schema 4: a figure added later has
NULL until a new version says which it is (tests/history/test_long_view.py checks they
cover bench.history.trend.PHASE_FIGURES).
"""

from __future__ import annotations

from bench.history import workload_rows as wl

VIEW = "history_long"
CARD_WORKLOAD = "(card)"
COLUMNS = (
    "time", "run_id", "manifest_sha256", "bench_commit", "vllm_commit", "image", "host",
    "profile", "settings_sha256", "trust", "workload", "phase", "cell", "context",
    "concurrency", "trial", "figure", "statistic", "value", "unit", "interval_low",
    "interval_high", "status", "flags", "change_point", "change_pct",
)  # fmt: skip
# (phase, statistic, figures): what each stored figure is of its cell's requests. `window`:
# a total over the measured window (a rate, a count, the window itself); `single`: the
# prefill sample's one request; `highest_met` / `lowest_missed`: a capacity search's bracket;
# `crossing`: its point estimate (where its points' measured percentile crosses the bound).
STATISTICS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("decode", "window", ("total_tok_s", "completed_requests", "output_tokens",
                          "measured_for_s")),
    ("decode", "median", ("per_request_tok_s", "ttft_s", "tbt_s")),
    ("decode", "mean", ("average_active",)),
    ("prefill", "single", ("prefill_tok_s", "ttft_s")),
    (wl.WORKLOAD_PHASE, "window", ("output_tok_s", "total_tok_s", "achieved_rate",
                                   "goodput_rate")),
    *((wl.WORKLOAD_PHASE, q, tuple(f"{d}_{q}_s" for d in ("ttft", "tpot", "itl", "e2el")))
      for q in ("p50", "p90", "p99")),
    (wl.CAPACITY_PHASE, "highest_met", ("capacity",)),
    (wl.CAPACITY_PHASE, "lowest_missed", ("capacity_missed",)),
    (wl.CAPACITY_PHASE, "crossing", ("capacity_estimate",)),
)  # fmt: skip
COMMENT = (
    "bench history, long and narrow: a row per run, cell or workload point, trial and "
    "figure (docs/history.md, Grafana). interval_low and interval_high: a bench capacity "
    "run estimate 95 pct interval on its capacity rows, NULL elsewhere (a trial has none). "
    "change_point: 1 on the first run after a change bench history changes found in the "
    "series (table change_points), with change_pct. time: NULL when created_at is no date."
)


def _quoted(text: str) -> str:
    assert "'" not in text  # constants of this module only
    return f"'{text}'"


def _statistic() -> str:
    whens = "\n".join(
        f"        WHEN c.phase = {_quoted(phase)} AND f.figure IN "
        f"({', '.join(_quoted(f) for f in figures)}) THEN {_quoted(name)}"
        for phase, name, figures in STATISTICS
    )
    return f"CASE\n{whens}\n    END"


_CELL = f"""CASE
        WHEN c.phase = 'decode' THEN c.context || ':' || CAST(c.concurrency AS TEXT)
        WHEN c.phase = 'prefill' THEN c.context || ':prefill'
        WHEN c.phase = {_quoted(wl.WORKLOAD_PHASE)} AND c.context = 'closed'
            THEN 'closed:' || CAST(c.concurrency AS TEXT)
        ELSE c.context
    END"""
_ON_CAPACITY = f"c.phase = {_quoted(wl.CAPACITY_PHASE)} AND f.figure = 'capacity'"


def _select(time: str) -> str:
    """The view's query; TIME is the dialect's expression of the run's start."""
    return f"""SELECT {time} AS time,
    r.run_id, r.manifest_sha256, r.bench_commit, r.engine_commit AS vllm_commit,
    r.image_id AS image, r.host, r.launch_profile AS profile, r.settings_sha256, r.trust,
    COALESCE(w.name, {_quoted(CARD_WORKLOAD)}) AS workload,
    c.phase, {_CELL} AS cell, c.context, c.concurrency, c.trial,
    f.figure, {_statistic()} AS statistic, f.value, f.unit,
    CASE WHEN {_ON_CAPACITY} THEN w.capacity_low END AS interval_low,
    CASE WHEN {_ON_CAPACITY} THEN w.capacity_high END AS interval_high,
    c.status, c.flags,
    CASE WHEN cp.manifest_sha256 IS NULL THEN 0 ELSE 1 END AS change_point,
    cp.shift_pct AS change_pct
FROM runs r
JOIN cells c ON c.manifest_sha256 = r.manifest_sha256
LEFT JOIN figures f ON f.manifest_sha256 = c.manifest_sha256 AND f.phase = c.phase
    AND f.context = c.context AND f.concurrency = c.concurrency AND f.trial = c.trial
LEFT JOIN workloads w ON w.manifest_sha256 = r.manifest_sha256
LEFT JOIN change_points cp ON cp.manifest_sha256 = c.manifest_sha256 AND cp.phase = c.phase
    AND cp.context = c.context AND cp.concurrency = c.concurrency AND cp.figure = f.figure"""  # noqa: S608


# PostgreSQL: the run's start as a timestamp, NULL for text that is no date (one bad
# created_at must not fail every query of the view); text without a zone is UTC, as the
# history's times are.
RUN_TIME_FUNCTION = """CREATE FUNCTION bench_run_time(created TEXT)
RETURNS TIMESTAMP WITH TIME ZONE LANGUAGE plpgsql STABLE SET timezone TO 'UTC' AS $$
BEGIN
    RETURN CAST(created AS TIMESTAMP WITH TIME ZONE);
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$"""
SQLITE_VIEW = f"CREATE VIEW {VIEW} AS\n/* {COMMENT} */\n" + _select(
    "strftime('%Y-%m-%dT%H:%M:%fZ', r.created_at)"
)
POSTGRESQL_VIEW = f"CREATE VIEW {VIEW} AS\n" + _select("bench_run_time(r.created_at)")
POSTGRESQL_COMMENT = f"COMMENT ON VIEW {VIEW} IS {_quoted(COMMENT)}"
