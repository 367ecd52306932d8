"""A deterministic stand-in tokenizer: regex pieces mapped to stable ids.

What matters for the twin is that `/tokenize` and `usage.prompt_tokens` agree and that a
client can build a prompt of exactly N tokens: every piece of the pattern is one token
(" word", " 123", one punctuation mark, a run of whitespace, a special marker such as
<|im_start|>). Ids come from crc32 of the piece, so they are stable across processes.
"""

from __future__ import annotations

import re
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence

VOCAB_SIZE = 151_936
_MEMO_MIN_CHARS = 2_000
_MEMO_ENTRIES = 16
_PIECE = re.compile(r"<\|[a-z_]+\|>| ?[A-Za-z]{1,16}| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]|\s+")


class Tokenizer:
    """Text -> token ids; the piece->id map is memoised (prompts repeat their words)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        # Benchmarks resend the same long prompt many times; re-encoding 250K tokens would
        # cost the real-time loop tens of milliseconds per request.
        self._recent: OrderedDict[str, list[int]] = OrderedDict()

    def encode(self, text: str) -> list[int]:
        if len(text) < _MEMO_MIN_CHARS:
            return self._encode(text)
        ids = self._recent.get(text)
        if ids is None:
            ids = self._encode(text)
            self._recent[text] = ids
            if len(self._recent) > _MEMO_ENTRIES:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(text)
        return list(ids)

    def _encode(self, text: str) -> list[int]:
        pieces = _PIECE.findall(text)
        known = self._ids
        if len(known) > 2_000_000:
            known.clear()
        for piece in set(pieces).difference(known):
            known[piece] = piece_id(piece)
        return list(map(known.__getitem__, pieces))

    def pieces(self, text: str) -> list[str]:
        """The text of each token of `text` (they spell it back when it is all pieces)."""
        return list(_PIECE.findall(text))

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


def piece_id(piece: str) -> int:
    """The id of one piece (stable across processes)."""
    return zlib.crc32(piece.encode()) % VOCAB_SIZE


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        return "".join(texts)
    return ""
