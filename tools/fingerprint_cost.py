"""The answer fingerprint's cost next to a full card sweep, in virtual time on the twin.

    python -m tools.fingerprint_cost [--profile published]

Both are run on the twin's engine (bench.twin.virtual, no sockets, no sleeps), as `bench run`
sends them against the card's plan (decode contexts 8K..251K, prefill-only 256K, C = 1..128,
30 s windows, 4,096 output tokens; a cell runs when C x (context + 4,096) fits the KV cache):

- the sweep: per context row its cold scout's TTFT, then per cell that fits the time from
  its launch to the readiness gate plus its 30 s window (drains, /tokenize sizing and the
  warm-up are left out: they only make the sweep longer, so the share is an upper bound);
- the fingerprint with the long-context retrieval check (bench.run.retrieval): the prompt set
  (bench/run/fingerprint_prompts.json) on one engine, one request after another to its end:
  the short prompts, the reasoning and tool-call prompts (the card's launch enables both
  parsers; each costed at its full `path_max_tokens`, though a model may end its call
  sooner), then one prompt per decode context, each the same filler with the code planted
  near its start and the retrieval question at its end, so each is a prefix of the next but
  for the question and the prefix cache keeps what the one before prefilled. /tokenize calls
  cost the twin's engine nothing and are not counted.
It prints both in server seconds, the fingerprint's share (issue 33: at most 5 %, retrieval
included) and what the retrieval check adds to the same prompts without it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bench.run import fingerprint, prompts
from bench.run.retrieval import NEEDLE_WORDS
from bench.twin import profile as profiles
from bench.twin import virtual
from bench.twin.engine import TwinScheduler
from bench.twin.profile import Profile

K = 1024
CARD_DECODE = (8 * K, 16 * K, 32 * K, 64 * K, 128 * K, 256 * K)
CARD_PREFILL_ONLY = (256 * K,)
CARD_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128)
MAX_TOKENS = 4096
SHORT_PROMPT_TOKENS = 40  # a short prompt of the set with its chat template, about
PATH_PROMPTS = 2  # the card's launch: --reasoning-parser, --enable-auto-tool-choice
INSTRUCTION_TOKENS = 30  # the context prompts' instruction with its chat template, about
NEEDLE_TOKENS = 16  # "The pass code is NNNN-NNNN.", about
QUESTION_TOKENS = 24  # the retrieval question at the end, with the template's tail, about


@dataclass(frozen=True)
class Cost:
    sweep_s: float
    fingerprint_s: float  # retrieval included
    answers: int
    cells: int
    retrieval_s: float = 0.0  # what the retrieval check adds to the same prompts without it

    @property
    def share(self) -> float:
        return self.fingerprint_s / self.sweep_s


def fingerprint_s(
    prof: Profile, contexts: list[int], *, retrieval: bool = True
) -> tuple[float, int]:
    """The prompt set's server seconds and its number of answers; without RETRIEVAL, the
    context prompts are the filler alone (what the check adds is the difference)."""
    ps = fingerprint.load_prompt_set()
    engine = TwinScheduler(prof, 0)
    total = 0.0
    for i, _ in enumerate(ps.short):
        total += virtual.request_s(
            engine, [10_000 + i, *range(1, SHORT_PROMPT_TOKENS)], ps.max_tokens
        )
    for i in range(PATH_PROMPTS):
        total += virtual.request_s(
            engine, [20_000 + i, *range(1, SHORT_PROMPT_TOKENS)], ps.path_max_tokens
        )
    longest = max(contexts)
    filler = [7, *range(100, 100 + longest)]  # one text: each prompt is a prefix of the next
    question: list[int] = []
    if retrieval:
        at = INSTRUCTION_TOKENS + round(1.3 * NEEDLE_WORDS)  # about 1.3 tokens a filler word
        filler[at:at] = range(50, 50 + NEEDLE_TOKENS)
        question = list(range(70, 70 + QUESTION_TOKENS))
    for n in sorted(contexts):
        total += virtual.request_s(engine, filler[: n - len(question)] + question, ps.max_tokens)
    return total, len(ps.short) + PATH_PROMPTS + len(contexts)


def card_contexts(prof: Profile) -> tuple[list[int], list[int]]:
    """The card's decode and prefill-only contexts as sized for this profile (trimmed)."""
    decode = [prompts.fit(c, prof.max_model_len, MAX_TOKENS) for c in CARD_DECODE]
    prefill = [prompts.fit(c, prof.max_model_len, 1) for c in CARD_PREFILL_ONLY]
    return decode, prefill


def measure(name: str = "published") -> Cost:
    prof = profiles.load(name)
    decode, prefill_only = card_contexts(prof)
    sweep = 0.0
    cells = 0
    for tag, ctx in enumerate(decode, start=1):
        fits = [c for c in CARD_CONCURRENCY if c * (ctx + MAX_TOKENS) <= prof.kv_capacity_tokens]
        ttft, row = virtual.run_row(prof, ctx, fits, tag=tag)
        sweep += ttft + sum(c.gate_s + c.window_s for c in row)
        cells += len(row)
    for tag, ctx in enumerate(prefill_only, start=len(decode) + 1):
        engine = TwinScheduler(prof, 0)
        sweep += virtual.prefill_ttft_s(engine, virtual.prompt_ids(ctx, tag))
    spent, answers = fingerprint_s(prof, decode)
    without, _ = fingerprint_s(prof, decode, retrieval=False)
    return Cost(sweep, spent, answers, cells, spent - without)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="published")
    args = p.parse_args(argv)
    cost = measure(args.profile)
    print(f"profile {args.profile}: card sweep {cost.sweep_s:,.0f} s of server time "
          f"({cost.cells} decode cells and the scouts)")  # fmt: skip
    print(
        f"answer fingerprint with the retrieval check: {cost.fingerprint_s:,.1f} s "
        f"({cost.answers} answers; the retrieval check on the same requests: "
        f"{cost.retrieval_s:+,.2f} s)"
    )
    print(f"share: {cost.share:.2%} of the sweep (the issue's bound: 5 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
