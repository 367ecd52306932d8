"""A deterministic stand-in tokenizer: regex pieces mapped to stable ids.

What matters for the twin is that `/tokenize` and `usage.prompt_tokens` agree and that a
client can build a prompt of exactly N tokens: every piece of the pattern is one token
(" word", " 123", one punctuation mark, a run of whitespace, a special marker such as
<|im_start|>). Ids come from crc32 of the piece, so they are stable across processes.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence

VOCAB_SIZE = 151_936
_PIECE = re.compile(r"<\|[a-z_]+\|>| ?[A-Za-z]{1,16}| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]|\s+")


class Tokenizer:
    """Text -> token ids; the piece->id map is memoised (prompts repeat their words)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def _id(self, piece: str) -> int:
        tid = self._ids.get(piece)
        if tid is None:
            tid = zlib.crc32(piece.encode()) % VOCAB_SIZE
            if len(self._ids) < 1_000_000:
                self._ids[piece] = tid
        return tid

    def encode(self, text: str) -> list[int]:
        get = self._ids.get
        out: list[int] = []
        append = out.append
        for piece in _PIECE.findall(text):
            tid = get(piece)
            append(self._id(piece) if tid is None else tid)
        return out

    def count(self, text: str) -> int:
        return len(_PIECE.findall(text))

    def render_chat(
        self, messages: Sequence[Mapping[str, object]], add_generation_prompt: bool
    ) -> str:
        """A ChatML-like template (the card's model uses ChatML)."""
        parts = [
            f"<|im_start|>{m.get('role', 'user')}\n{_content_text(m.get('content'))}<|im_end|>\n"
            for m in messages
        ]
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        return "".join(texts)
    return ""
