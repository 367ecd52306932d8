"""The performance benchmark (`make perf`): client capacity, timing fidelity, open loop, live
export's cost, sweep efficiency.

__main__         `python -m tools.perf`: the parts asked for, perf.json, the tables
client_capacity  tokens and chunks per client CPU-second, ours beside `vllm bench serve`
fidelity         a client's median TTFT and TBT against the twin's truth
openloop         our schedule lateness and tokens per client CPU-second, open loop, beside vLLM's
live_cost        client CPU per token with --otel-url and --metrics-port off and on, at once
loadgen          our client as a load generator: C streams, requests back to back
streamer         a fast streaming server for measuring clients, not servers
vllm_driver      `vllm bench serve` run repeatedly in one process
sweep_cost       a full `bench run` with the card's parameters against the twin
sweep_timeline   where a sweep's wall time went, from its run directory and log
procs            processes started pinned, their CPU time read
report           the printed tables (the same figures as perf.json)
"""
