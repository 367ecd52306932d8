"""The results history: every verified bundle in one database, a trend per cell (and per
workload point), change points.

database   the one door to the database: SQLite (sqlite3, one file) or PostgreSQL (psycopg)
schema     the tables, their versions and the upgrade from each earlier one
rows       what a bundle becomes: its run row (provenance, comparable settings), cells, figures
workload_rows  a workload run's row, its points (or capacity searches) as cells and figures
ingest     verified bundles in, once each (keyed by the manifest's sha256), one transaction each
trend      one cell's figure run after run, as series of runs with the same settings
changes    change points in one series of values (binary segmentation, permutation threshold)
shifts     every series of the history searched, each change named by its runs and make bisect
marks      those changes kept in the table change_points, each ingest searching its series again
long_view  the view history_long: a row per run, cell, trial and figure, for Grafana
dashboard_sql  every query of the Grafana dashboard (tools/grafana_dashboard.py writes it)
matrix     the page's matrix: each cell's series (newest runs, bounded), searched
sparkline  a series as a small inline SVG trend line, change points marked
runs       a recorded run as a verdict reads it, and its baseline (the run before it)
noise_runs  a host's repeated runs of one build as a compare's noise prior (--noise-from)
page       `bench history report`'s HTML page: trends, panels, filters, the latest compare
command    `bench history ingest`, `trend`, `changes` and `report`
recording  each run's verified bundle in, as the run finishes (bench local, the orchestrator)
"""
