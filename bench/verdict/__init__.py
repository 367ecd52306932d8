"""Verdicts: a run against a published card (reproduce) and runs against each other (compare).

cells        what a verdict compares: per cell, figures at server speed, one value per trial
run_source   a run's results (bundle, directory or results.json) opened, verified, read
run_figures  a run's results.json (and environment.json) as `RunFigures`
workload_cells  a workload run's points as cells (phase "workload") at server speed
capacity_delta  the change in SLO capacity from A to B (`bench capacity` runs), its interval
card_source  a published card as `RunFigures`, the reference side of reproduce
vllm_saved   runs saved by `vllm bench serve --save-result` as `RunFigures`
aiperf_saved  AIPerf's exports (profile_export_aiperf.json) as `RunFigures`: workload cells
saved_files  another tool's saved files found in a folder, bounded (AIPerf's, GuideLLM's)
saved_points  AIPerf's and GuideLLM's workload points as one unsigned run, a point a trial
guidellm_saved  GuideLLM's reports (benchmarks.json) as `RunFigures`: a benchmark a workload cell
settings     the settings both sides must share, and which of them differ
reproduce    a run against a card, cell by cell, a verdict per cell
publisher_card  a run against another publisher's card (bench.publishers), its figures
compare      runs against each other: Δ % per cell and figure, and whether it is real
equivalence  the third outcome: equivalent within ±margin (two one-sided tests), or not resolved
headline     a compare's outcome (changed, equivalent, not resolved) and its last line
answers      the runs' answer fingerprints, compared before the figures (within-side rule)
retrieval    the long-context retrieval check of A's runs against B's
runlevel     the run-level model: a factor shared by every cell of a run, and each cell's own
noise_prior  run-to-run noise measured before a compare, from a host's repeated runs
budget       the runs a side (and server time, starts included) a 5 % or 10 % MDE would need
sequential   a sequential compare: trials go to the cells still open
stage_plan   its stages, chosen for the least server time (starts included) at its error rates
bisect       which commit moved a figure: a k-ary search from GOOD to BAD
tables       the verdict tables as data (one source for the terminal and the page), as Markdown
plots        heatmaps of Δ % and per-concurrency curves, as PNG bytes
page         the verdict as one self-contained HTML page
attest       a reproduce verdict as a signed in-toto statement beside the bundle (--attest)
command      `bench reproduce` and `bench compare`
"""
