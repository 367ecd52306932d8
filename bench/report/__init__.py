"""The report people look at: report.html (self-contained) and the plots as PNG files.

data       figures per cell at server speed, from results.json
frontier   throughput per GPU against per-user tok/s: the points, the Pareto front, the GPU count
plots      matplotlib: decode heatmap, prefill vs context, TTFT/TBT vs concurrency, the frontier
page       report.html: the card's three tables (bench.run.card_tables), the plots inline
workload_data   a workload run's points at server time for its plots, status markers
workload_plots  a workload's TTFT/TPOT against the load and the output tok/s (via plots)
workload_page   report.html of a workload run: description, points, statuses, its plots
answers    report.html's "Answers": the answer fingerprint recorded before the sweep
retrieval  report.html's "Retrieval": the long-context retrieval check on its context prompts
server_view  report.html's "Server's view": the server's queue time and TTFT from its spans
command    `bench report DIR`
"""
