"""Peers on one server: `bench run --workload`, `vllm bench serve` and AIPerf against one twin
on identical traffic, each tool's own figures set beside the twin's truth log for that tool's
requests, and ours set beside each peer's (`make peers`).

Identical traffic: at each rate every tool sends the same prompts on the same schedule
(`traffic`); each run's figures are set beside the twin's truth log for its requests
(`truth`). `python -m tools.peers` runs them all and prints the tables (`__main__`).

    truth     the twin's truth log: a run's requests, its four figures, its traffic as seen
    results   each tool's own result file as the four figures, in server time
    traffic   one schedule and one prompt set for every tool, and each tool's files for them
    twin      the twin over HTTP: words fitted to its /tokenize, its prefix cache reset
    runs      each tool run as a process (ours, vllm bench serve, AIPerf), and what ran
    tables    the markdown tables: each tool against its truth, ours against each peer
    __main__  `python -m tools.peers`: every tool at every rate against one twin
"""

from tools.peers.results import parse_aiperf, parse_ours, parse_vllm, to_server_time
from tools.peers.runs import TOOLS
from tools.peers.tables import delta_pct, identical_table, table, truth_table
from tools.peers.traffic import (
    ApiName,
    Params,
    api_of,
    check_sent,
    from_first,
    mooncake_trace,
    ours_texts,
    reference,
    vllm_dataset,
    vllm_send_times,
    write_traffic,
)
from tools.peers.truth import Figures, TrafficSeen, read_truth, traffic_seen, truth_figures, window
from tools.peers.twin import fit_words

__all__ = [
    "TOOLS",
    "ApiName",
    "Figures",
    "Params",
    "TrafficSeen",
    "api_of",
    "check_sent",
    "delta_pct",
    "fit_words",
    "from_first",
    "identical_table",
    "mooncake_trace",
    "ours_texts",
    "parse_aiperf",
    "parse_ours",
    "parse_vllm",
    "read_truth",
    "reference",
    "table",
    "to_server_time",
    "traffic_seen",
    "truth_figures",
    "truth_table",
    "vllm_dataset",
    "vllm_send_times",
    "window",
    "write_traffic",
]
