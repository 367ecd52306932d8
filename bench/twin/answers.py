"""What the twin answers: words chosen from its seed and the prompt, so one launch always
gives the same answer to the same prompt and another seed (or another `--dtype`) does not.

Token t of the answer to a prompt is WORDS[mix(key, t) % len(WORDS)], with key the crc32 of
the prompt's token ids under the seed and mix splitmix64's finalizer. Another dtype keeps
the default's answer for its first few tokens (8 to 47, from the prompt) and departs after,
as a model served in another precision drifts away from greedy decoding's path a few tokens
in. Only non-streamed
answers use it (the answer fingerprint's, bench.run.fingerprint); a streamed answer keeps
the fixed word cycle of the fast path (bench.twin.streams), which the sweep never reads.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.twin.tokenizer import piece_id

DTYPES = ("bfloat16", "float16", "float32")
DEFAULT_DTYPE = "bfloat16"
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Answerer:
    seed: int = 0
    dtype: str = DEFAULT_DTYPE

    def words(self, prompt_ids: Sequence[int], n: int, vocabulary: int) -> tuple[int, ...]:
        """The index into a vocabulary of `vocabulary` words of each of the n tokens."""
        ids = array("I", (i & 0xFFFFFFFF for i in prompt_ids))
        key = zlib.crc32(ids.tobytes(), self.seed & 0xFFFFFFFF)
        departs, other = n, key
        if self.dtype != DEFAULT_DTYPE:
            other = zlib.crc32(self.dtype.encode(), key)
            departs = 8 + other % 40
        return tuple(
            _mix(((key if t < departs else other) << 32) | t) % vocabulary for t in range(n)
        )


def _mix(x: int) -> int:
    """splitmix64's finalizer: every bit of x moves every bit of the result (crc32 alone is
    linear, so its low bits would repeat one word sequence across keys)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return x ^ (x >> 31)


def logprobs(pieces: Sequence[str], engine: str, chat: bool, named: bool) -> dict[str, Any]:
    """The `logprobs` of a choice whose tokens are PIECES, as each engine shapes it: vLLM's
    token is "token_id:N" when `named` (return_tokens_as_token_ids), else its text; llama.cpp's
    entries carry the `id`; SGLang's and TensorRT-LLM's only the text."""
    entries = []
    for t, piece in enumerate(pieces):
        logprob = -0.01 - (t % 7) / 10
        token = f"token_id:{piece_id(piece)}" if named and engine == "vllm" else piece
        entry: dict[str, Any] = {"token": token, "logprob": logprob, "bytes": list(piece.encode())}
        if engine == "llamacpp":
            entry["id"] = piece_id(piece)
        entry["top_logprobs"] = [{"token": token, "logprob": logprob}]
        entries.append(entry)
    if chat or engine == "llamacpp":
        return {"content": entries}
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{e["token"]: e["logprob"]} for e in entries],
        "text_offset": [sum(len(p) for p in pieces[:t]) for t in range(len(pieces))],
    }
