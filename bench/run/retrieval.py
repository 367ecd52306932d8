"""The long-context retrieval check: a code planted in the fingerprint's context prompts.

A commit that breaks the long-context attention path (a kernel past some length, the KV
blocks of a long prompt, RoPE scaling) can still answer a short prompt alike. So each
context prompt of the answer fingerprint (bench.run.fingerprint) is a retrieval prompt:
the fingerprint's filler words with a sentence "The pass code is NNNN-NNNN." planted after
`NEEDLE_WORDS` of them, and a question at the end asking for the code. The code is drawn
from the run's seed (`--seed`, recorded), so two runs of one seed send the same prompts and
their answers stay comparable token for token.

The code sits at the same place in every context prompt, near its start: the prompts stay
prefixes of one text (but for the question), so a server with prefix caching prefills the
longest context once for the fingerprint and the retrieval together, and the code is as far
from the question as the context allows (about `prompt_tokens - depth_tokens` tokens). That
is why the check rides on the fingerprint's requests instead of sending its own: six more
requests of up to 251K tokens would cost more than the 5 % the whole check may take
(docs/verdicts.md gives the figures).

A decode context is *long* when its prompt has at least `LONG_MIN_TOKENS` tokens; each long
context records whether the answer's first `FOUND_CHARS` characters hold the code's eight
digits (its two groups in order), the code's depth and the answer's start (bounded, with
control characters escaped).
The check is not informative (`Retrieval.note`) when the server is the twin (it answers
words from its seed and cannot retrieve), or when no long context found the code (the model
cannot do the task, or the plan has no long context): a compare then draws no verdict
from it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from bench import escape
from bench.answers import MAX_HEAD_CHARS, Answer, Retrieval, RetrievalContext
from bench.results import Results
from bench.run import answer_body, prompts

LONG_MIN_TOKENS = 1024
NEEDLE_WORDS = 32  # filler words before the code
FOUND_CHARS = 80  # of the answer's text searched for the code
NEEDLE = "The pass code is {code}."
QUESTION = "\n\nWhat is the pass code in the text above? Answer with the pass code only."
_CODE = re.compile(r"^([0-9]{4})-([0-9]{4})$")


def code_for(seed: int) -> str:
    """The code planted in a run of this seed: eight digits, NNNN-NNNN."""
    n = random.Random(f"retrieval:{seed}").randrange(10**8)
    return f"{n // 10**4:04d}-{n % 10**4:04d}"


def found_in(code: str, text: str) -> bool:
    """Whether TEXT's first FOUND_CHARS characters give the code: its two groups of digits
    in order, with nothing but non-digits between them ("4821-7730", "4821 7730",
    "48217730"); digits around them are other numbers, not the code."""
    match = _CODE.match(code)
    if match is None:
        raise ValueError(f"not a retrieval code: {code!r}")
    first, second = match.groups()
    pattern = rf"(?<![0-9]){first}[^0-9]{{0,3}}{second}(?![0-9])"
    return re.search(pattern, text[:FOUND_CHARS]) is not None


class NeedleText(prompts.PromptText):
    """The fingerprint's filler (the same words, so the prompts share their prefix) with the
    code planted after NEEDLE_WORDS words and the question at the end."""

    def __init__(self, key: str, seed: int, instruction: str, code: str) -> None:
        super().__init__(key, 0, "answers", seed)
        self.prefix = instruction
        self.needle = NEEDLE.format(code=code)

    def text(self, n_words: int) -> str:
        words = super().text(n_words)[len(self.prefix) :].split()
        at = min(NEEDLE_WORDS, len(words))
        return self.prefix + " ".join([*words[:at], self.needle, *words[at:]]) + QUESTION

    def before_needle(self) -> str:
        """The text every prompt has before the code."""
        words = super().text(NEEDLE_WORDS)[len(self.prefix) :].split()
        return self.prefix + " ".join(words) + " "


def record(
    results: Results,
    code: str,
    text: NeedleText,
    answers: Sequence[Answer],
    prompt_chars: dict[str, int],
) -> Retrieval:
    """The check from the context prompts' ANSWERS; PROMPT_CHARS: each sized prompt's
    length, which places the code in tokens (its share of the characters)."""
    before = len(text.before_needle())
    contexts = []
    for a in answers:
        if a.prompt_tokens is None or a.prompt_tokens < LONG_MIN_TOKENS:
            continue
        chars = prompt_chars.get(a.name)
        depth = round(a.prompt_tokens * before / chars) if chars else None
        answered = a.status == "answered"
        contexts.append(
            RetrievalContext(
                name=a.name,
                prompt_tokens=a.prompt_tokens,
                depth_tokens=depth,
                status=a.status,
                found=found_in(code, a.text) if answered else None,
                head=escape.clipped(answer_body.clean_text(a.text), MAX_HEAD_CHARS)
                if answered
                else "",
            )
        )
    twin = "twin" in results.server.version_payload
    note = None
    if twin:
        note = "the server is the twin: it answers words from its seed and cannot retrieve"
    elif not contexts:
        note = f"no decode context of {LONG_MIN_TOKENS:,} prompt tokens or more"
    elif not any(c.found for c in contexts):
        note = "found at no context: the model cannot do the task here"
    return Retrieval(
        code=code,
        seed=results.settings.seed,
        needle_words=NEEDLE_WORDS,
        long_min_tokens=LONG_MIN_TOKENS,
        planted_in=tuple(a.name for a in answers),
        contexts=tuple(contexts),
        twin=twin,
        note=note,
    )
