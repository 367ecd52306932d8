"""vLLM's performance dashboard: one serving test of one commit as a card, and back.

vLLM runs its serving tests on every merged commit and publishes them on the "vLLM
performance dashboard" (hud.pytorch.org/benchmark/llms?repoName=vllm-project/vllm,
its docs page benchmarking/dashboard). A user holds one of two files; both are read here:
(a) the JSON `vllm bench serve --save-result` writes, one serving test (`result`), and
(b) the dashboard's records, one a metric (`records`). `read` makes the card of the one
test --select picks in either; `export` gives a card's figures back under vLLM's names.

    values   WHAT and DO, the limits, and the readers of JSON values (text, numbers, dates)
    file     the file's JSON items: one object, JSON lines, or an array streamed
    figures  which fields are vLLM's figures: units, definitions, computed_as
    facts    one serving test as found in the file, and as plain facts before its card
    result   (a) `vllm bench serve --save-result`'s JSON: its fields and its facts
    records  (b) the dashboard's records, one a metric: their fields and a test's facts
    choose   the one test --select picks, and the scan's one-line refusals
    traffic  a test's traffic as the card's workload: rate, arrivals, dataset, lengths
    card     `read`: the card of the chosen test (model, engine, GPUs, notes); `export`
"""

from bench.publishers.vllm_dashboard.card import export, read
from bench.publishers.vllm_dashboard.file import looks_like
from bench.publishers.vllm_dashboard.values import WHAT

__all__ = ["WHAT", "export", "looks_like", "read"]
