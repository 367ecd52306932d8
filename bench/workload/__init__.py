"""Workloads beside the card's matrix (`bench run --workload`): open-loop and count-based
arrivals, drawn lengths, datasets and traces, the SLO rules, a point's figures
(docs/workloads.md).

schedule   when each request of a point is due and its drawn lengths, from the seed
runner     a point's requests sent as scheduled (open loop, or C streams through a count)
figures    a point's figures, intervals and validity from its requests
slo        `--slo` parsed; a p99 bound judged by MLPerf's early-stopping rule
tables     a workload run's points as tables.md's markdown
search     the SLO-capacity search: bracketing then bisection over points' verdicts
datafile   a workload's data file read bounded: refused by size, hashed, JSON item by item
datasets   a ShareGPT conversation file read by vLLM's rules: prompts and output lengths
trace      a mooncake JSONL trace read: arrival times, lengths and shared blocks a line
"""
