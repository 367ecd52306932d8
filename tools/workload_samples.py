"""`python -m tools.workload_samples [OUT_DIR]`: write the two small data files the shipped
presets replay (bench/workloads/data/ by default), from fixed seeds and the prompts' filler
vocabulary (bench.run.prompts.FILLER_WORDS): no outside data. The same code writes the same
bytes every time (tests/unit/test_workload_datasets.py regenerates them and compares).

sharegpt-sample.json   ShareGPT's format: a JSON list of {"id", "conversations": [{"from",
                       "value"}, ...]}, one entry a line. SHAREGPT_ENTRIES conversations of 2
                       to 6 turns, "human" and "gpt" in turn; the first turn's length in
                       tokens (characters / 4) lognormal around 90 (sigma 1.1), the second's
                       around 220 (sigma 0.9), so a few pass vLLM's bounds (prompt over
                       1,024, prompt + output over 2,048) and are dropped as they would be;
                       every 40th from the 8th on is one the rules drop otherwise (one turn,
                       a first turn from "gpt", an empty first turn, "Hi").
mooncake-sample.jsonl  mooncake's trace format: TRACE_REQUESTS requests, Poisson arrivals
                       at 2 a second (timestamps in ms, from 0); conversations of 1 to 4
                       turns, each turn's prompt the previous turn's prompt and answer plus a
                       new message, so its leading hash_ids repeat the previous turn's full
                       512-token blocks; every prompt's first block is id 0 (a shared system
                       prompt, as on mooncake's conversation trace); inputs 600 to about
                       3,000 tokens, outputs 16 to 400.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

from bench.run.prompts import FILLER_WORDS
from bench.workload.datafile import DATA_DIR

SHAREGPT_ENTRIES = 300
TRACE_REQUESTS = 200
BLOCK = 512
_ENDS = (".", ".", ".", "?", "!")


def _text(rng: random.Random, chars: int) -> str:
    """Sentences of filler words, `chars` characters or a little more."""
    out: list[str] = []
    size = 0
    while size < chars:
        words = rng.choices(FILLER_WORDS, k=rng.randint(4, 14))
        if len(words) > 6 and rng.random() < 0.3:
            words[rng.randint(2, len(words) - 3)] += ","
        sentence = " ".join(words).capitalize() + rng.choice(_ENDS)
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


def _tokens(rng: random.Random, median: float, sigma: float, top: int) -> int:
    return min(max(round(rng.lognormvariate(math.log(median), sigma)), 1), top)


def sharegpt_sample() -> str:
    rng = random.Random("bench-sharegpt-sample/0")
    lines = []
    for i in range(SHAREGPT_ENTRIES):
        human = _text(rng, 4 * _tokens(rng, 90, 1.1, 1500))
        gpt = _text(rng, 4 * _tokens(rng, 220, 0.9, 2400))
        turns = [("human", human), ("gpt", gpt)]
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            turns += [("human", _text(rng, rng.randint(40, 240))), ("gpt", _text(rng, 200))]
        odd = (i - 7) // 40 if i % 40 == 7 else None
        if odd is not None:
            kinds = [turns[:1], [("gpt", gpt), ("human", human)], [("human", ""), ("gpt", gpt)],
                     [("human", "Hi"), ("gpt", gpt)]]  # fmt: skip
            turns = kinds[odd % len(kinds)]
        entry = {
            "id": f"sample-{i:04d}",
            "conversations": [{"from": who, "value": value} for who, value in turns],
        }
        lines.append(json.dumps(entry, ensure_ascii=False))
    return "[\n" + ",\n".join(lines) + "\n]\n"


def mooncake_sample() -> str:
    rng = random.Random("bench-mooncake-sample/0")
    next_id = 1  # 0 is the shared system prompt's block
    live: list[tuple[int, int, list[int], int]] = []  # (input, output, ids, turns left)
    t_ms, lines = 0.0, []
    for n in range(TRACE_REQUESTS):
        t_ms += rng.expovariate(2.0) * 1000.0 if n else 0.0
        message = rng.randint(88, 1200)
        if live and rng.random() < 0.5:
            past_in, past_out, past_ids, left = live.pop(rng.randrange(len(live)))
            inp = past_in + past_out + message
            keep = past_ids[: past_in // BLOCK]  # the previous prompt's full blocks, reused
        else:
            inp, keep, left = BLOCK + message, [0], rng.randint(0, 3)
        if inp > 3000:
            inp, keep, left = BLOCK + message, [0], 0
        fresh = math.ceil(inp / BLOCK) - len(keep)
        ids = keep + list(range(next_id, next_id + fresh))
        next_id += fresh
        out = rng.randint(16, 400)
        if left > 0:
            live.append((inp, out, ids, left - 1))
        line = {"timestamp": int(t_ms), "input_length": inp, "output_length": out, "hash_ids": ids}
        lines.append(json.dumps(line))
    return "\n".join(lines) + "\n"


def write(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("sharegpt-sample.json", sharegpt_sample()),
                       ("mooncake-sample.jsonl", mooncake_sample())):  # fmt: skip
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA_DIR):
        print(f"{path}: {path.stat().st_size:,} bytes")
