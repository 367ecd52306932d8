"""An MLPerf Inference server-scenario LLM result (LoadGen's log summary) as a card, and back;
and LoadGen's early-stopping test.

`read` makes the card of one Server-scenario LLM run from LoadGen's mlperf_log_summary.txt
(and, optionally, the submission's system description); `export` gives its figures back as
the text LoadGen wrote. Each part's docstring says where its format was read.

    summary     LoadGen's summary: its `key : value` lines, the checks on the run; `looks_like`
    system      the submission's system description (systems/<system>.json)
    benchmarks  each LLM benchmark's server limits and what it runs; which one a summary is
    card        `read`: the card (figures, constraints, workload); `export` back

Judging a run of ours against the constraints by LoadGen's early-stopping rule is
`bench.workload.slo`'s (its tests hold it to LoadGen's published counts).
"""

from bench.publishers.mlperf.card import export, read
from bench.publishers.mlperf.summary import WHAT, looks_like

__all__ = ["WHAT", "export", "looks_like", "read"]
