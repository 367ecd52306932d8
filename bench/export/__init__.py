"""`bench export`: a run's figures (a workload's points, its requests) as tidy tables for
pandas, R, SQL.

rows      one row per cell, trial and figure (at server speed), one row per request
points    a workload run's points: one row per point and trial (at server time)
writers   CSV and JSON lines with the standard library, Parquet through pyarrow (the
          optional `export` extra)
command   `bench export DIR|BUNDLE --format csv|parquet|jsonl [--out PATH] [--requests]`

Bundles are opened and verified by bench.verdict.run_source, as every verdict reads them.
"""
