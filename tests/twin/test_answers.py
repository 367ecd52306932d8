"""The twin's answers: the same from one seed and prompt, another from another seed or dtype;
logprob entries in each engine's shape; and read back by the fingerprint's reader."""

from __future__ import annotations

from typing import Any

import pytest

from bench.run import answer_body
from bench.twin import requests
from bench.twin.answers import DEFAULT_DTYPE, Answerer, logprobs
from bench.twin.streams import WORDS
from bench.twin.tokenizer import Tokenizer, piece_id

PROMPT = list(range(1000, 1300))
N = len(WORDS)


def test_one_seed_and_prompt_give_one_answer_another_prompt_or_seed_another() -> None:
    a = Answerer(seed=7)
    assert a.words(PROMPT, 64, N) == Answerer(seed=7).words(PROMPT, 64, N)
    assert a.words(PROMPT, 64, N) != Answerer(seed=8).words(PROMPT, 64, N)
    assert a.words(PROMPT, 64, N) != a.words(PROMPT[:-1], 64, N)
    assert a.words(PROMPT, 10, N) == a.words(PROMPT, 64, N)[:10]  # a prefix of a longer one


def test_answers_to_many_prompts_are_spread_over_the_words() -> None:
    """crc32 alone is linear: its low bits gave two prompts the same answer before the mix."""
    a = Answerer()
    answers = {a.words([p, p + 1, p * 7], 16, N) for p in range(200)}
    assert len(answers) == 200
    firsts = [a.words([p], 1, N)[0] for p in range(400)]
    assert set(firsts) == set(range(N))


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_another_dtype_departs_after_a_few_tokens(dtype: str) -> None:
    departures = []
    for p in range(50):
        prompt = [*PROMPT, p]
        base = Answerer(3).words(prompt, 64, N)
        other = Answerer(3, dtype).words(prompt, 64, N)
        first = next(i for i, (x, y) in enumerate(zip(base, other, strict=True)) if x != y)
        assert first >= 8
        departures.append(first)
    assert min(departures) < 20 and max(departures) >= 40  # spread over 8..47 and beyond
    assert DEFAULT_DTYPE == "bfloat16"


def test_logprobs_in_each_engines_shape_give_the_tokenizers_ids() -> None:
    pieces = [" lorem", " ipsum", " dolor"]
    ids = tuple(Tokenizer().encode("".join(pieces)))
    assert ids == tuple(piece_id(p) for p in pieces)
    text = "".join(pieces)
    for engine, chat_api, named, expected in (
        ("vllm", True, True, ids),
        ("vllm", False, True, ids),
        ("vllm", True, False, None),  # token texts only: the fingerprint tokenizes
        ("llamacpp", True, False, ids),
        ("sglang", True, False, None),
    ):
        shaped = logprobs(pieces, engine, chat_api, named)
        choice: dict[str, Any] = {"message": {"content": text}} if chat_api else {"text": text}
        answer = {"choices": [{**choice, "logprobs": shaped}]}
        assert answer_body.read(answer, 64).token_ids == expected, (engine, chat_api, named)


@pytest.mark.parametrize(
    ("chat", "value", "ok"),
    [(True, True, True), (True, 1, False), (False, 1, True), (False, True, False),
     (False, 21, False), (False, "1", False), (True, None, True)],
)  # fmt: skip
def test_logprobs_are_checked_as_vllm_checks_them(chat: bool, value: object, ok: bool) -> None:
    body: dict[str, object] = {"max_tokens": 4, "logprobs": value}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"})
    if ok:
        spec = requests.completion(body, Tokenizer(), chat, "m", 4096)
        assert spec.logprobs is bool(value)
    else:
        with pytest.raises(requests.BadRequest, match="'logprobs' must be"):
            requests.completion(body, Tokenizer(), chat, "m", 4096)
