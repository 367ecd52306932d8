"""The run's secrets, and the one door through which text from a server becomes text in a
record: `KnownSecrets.mask` (a string), `KnownSecrets.mask_tree` (a parsed JSON answer).

A server may repeat what it was sent: an error body quoting the `Authorization` header, an
SSE error event, a `/tokenize` or `/metrics` answer, a log line. Whatever the run knows as a
secret (the server's API key, the tokenizer server's key, the Hugging Face token) is
replaced by MASK there, in every form a server or a library is known to re-encode it:

    verbatim                          sk-abc/+x
    JSON string escapes               sk-abc\\/+x, and \\uXXXX for characters JSON escapes
    URL-encoded (upper or lower hex)  sk-abc%2F%2Bx, with '+' for a space too
    base64, standard and URL-safe     of the key alone and inside a longer text at any of
                                      the three byte alignments ("Bearer <key>" in Basic
                                      auth or a JWT-like blob): the characters the key alone
                                      decides; at most two at each end come from its
                                      neighbours, and those are left

A value shorter than MIN_SECRET_CHARS (a demo's key, `EMPTY`) is masked verbatim only, as the
key always was: its encoded forms would match ordinary text by chance. bench.bundle.seal
refuses to sign a run holding any form of a longer one (`forms_of`, the same list) and looks
for no shorter one.

The HTTP client (bench.stream.client) passes everything it hands on through here: the
bodies of the small calls, the measured streams' failure messages and captured text;
provisioning does the same with a server's log. A new reader of a server's bytes takes them
from there, never from the wire itself.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import SecretStr

MASK = "********"
MIN_SECRET_CHARS = 6
# The shortest start of a form masked at the end of a cut excerpt: fewer characters would
# match ordinary text by chance, and three of a key say next to nothing.
CUT_MIN_CHARS = 4
# The environment variables a Hugging Face token is read from (huggingface_hub's names).
HF_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def _json_forms(value: str) -> set[str]:
    forms = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    forms |= {f.replace("/", "\\/") for f in forms}  # JSON may escape '/', some encoders do
    # Every character as \\uXXXX: legal JSON, and the way a hostile answer hides the key
    # from a search of its raw bytes (what is compared here is the parsed text, but a
    # server's raw error body is quoted as it came).
    forms.add("".join(f"\\u{ord(c):04x}" for c in value if ord(c) < 0x10000))
    return forms


def _url_forms(value: str) -> set[str]:
    forms = {urllib.parse.quote(value, safe=""), urllib.parse.quote(value),
             urllib.parse.quote_plus(value)}  # fmt: skip
    return forms | {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), f) for f in forms}


def _base64_forms(value: str) -> set[str]:
    """The base64 characters that `value`'s bytes alone decide, at each byte alignment."""
    raw = value.encode()
    forms: set[str] = set()
    for lead in range(3):
        # Pad both ends with zero bytes so every group is whole; keep only the characters
        # whose 6 bits all come from `raw` (bits [8*lead, 8*(lead+len)) of the stream).
        first = -(-8 * lead // 6)
        last = (8 * (lead + len(raw))) // 6
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * lead + raw + b"\0\0").decode("ascii")
            forms.add(text[first:last])
    return forms


_JSON_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\([\\/\"bfnrt])")
_JSON_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape_json(text: str) -> str:
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return chr(int(m.group(1), 16))
        return _JSON_SIMPLE.get(m.group(2), m.group(2))

    return _JSON_ESCAPE.sub(one, text)


_DECODERS = (_unescape_json, urllib.parse.unquote, urllib.parse.unquote_plus)


def forms_of(value: str) -> frozenset[str]:
    """Every form of one secret this module masks (empty for one too short to be one)."""
    if len(value) < MIN_SECRET_CHARS:
        return frozenset()
    forms = {value} | _json_forms(value) | _url_forms(value) | _base64_forms(value)
    return frozenset(f for f in forms if len(f) >= MIN_SECRET_CHARS)


class KnownSecrets:
    """What a run must never write, print or send on: its secrets, in all their forms."""

    def __init__(self, values: Iterable[str | SecretStr | None] = ()) -> None:
        plain = {v.get_secret_value() if isinstance(v, SecretStr) else v for v in values}
        self.values = tuple(sorted(v for v in plain if v))
        # A short value verbatim only (the module docstring says why).
        forms = {v for v in self.values if len(v) < MIN_SECRET_CHARS}
        forms |= set().union(*(forms_of(v) for v in self.values))
        self.forms = tuple(sorted(forms, key=lambda f: (-len(f), f)))  # longest first
        self._pattern = re.compile("|".join(map(re.escape, self.forms))) if forms else None

    @classmethod
    def of(cls, *keys: SecretStr | None, environ: Mapping[str, str] | None = None) -> KnownSecrets:
        """The given keys and, from `environ`, the Hugging Face token."""
        tokens = [environ.get(name) for name in HF_TOKEN_VARIABLES] if environ else []
        return cls([*keys, *tokens])

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __or__(self, other: KnownSecrets) -> KnownSecrets:
        return KnownSecrets([*self.values, *other.values])

    def mask(self, text: str, *, cut: bool = False) -> str:
        """`text` with every form of every secret as MASK. A text that hides one by
        escaping only some of its characters (`s\\u006b-...`, `sk%2D...`) is shown
        unescaped where that reveals it, then masked. `cut`: the text is an excerpt cut off
        at its end (an error body read up to a bound), so a form's start that ends it (at
        least CUT_MIN_CHARS of it) is masked too."""
        if self._pattern is None:
            return text
        text = self._pattern.sub(MASK, text)
        for _ in range(2):  # an escape inside an escape
            for decode in _DECODERS:
                decoded = decode(text)
                if decoded != text and self._pattern.search(decoded):
                    text = self._pattern.sub(MASK, decoded)
        if cut:
            text = self._cut_tail(text)
        return text

    def _cut_tail(self, text: str) -> str:
        for shown in (text, *(decode(text) for decode in _DECODERS)):
            for form in self.forms:
                for k in range(min(len(form) - 1, len(shown)), CUT_MIN_CHARS - 1, -1):
                    if shown.endswith(form[:k]):
                        return shown[:-k] + MASK
        return text

    def found_in(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def could_hide_in(self, raw: bytes) -> bool:
        """Whether a JSON text may hold a secret in one of its strings: one of its forms is
        in the bytes, or an escape that could hide one (a backslash, a '%', a '+'). A large
        /tokenize answer (digits, commas) is not walked for nothing."""
        if self._pattern is None:
            return False
        if b"\\" in raw or b"%" in raw or b"+" in raw:
            return True
        return self._pattern.search(raw.decode("utf-8", "replace")) is not None

    def mask_tree(self, value: Any) -> Any:
        """A copy of a parsed JSON value with every string in it (keys too) masked.
        Iterative: as deep as the parser allowed."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.mask(value)
        if not isinstance(value, dict | list):
            return value
        root: list[Any] = [value]
        stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
        while stack:
            parent, slot, node = stack.pop()
            if isinstance(node, dict):
                copy: dict[str, Any] = {}
                for key, item in node.items():
                    copy[self.mask(key)] = item
                parent[slot] = copy
                items: Iterable[tuple[Any, Any]] = copy.items()
                target: Any = copy
            else:
                target = list(node)
                parent[slot] = target
                items = enumerate(target)
            for key, item in list(items):
                if isinstance(item, str):
                    target[key] = self.mask(item)
                elif isinstance(item, dict | list):
                    stack.append((target, key, item))
        return root[0]
