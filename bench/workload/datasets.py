"""A ShareGPT-format conversation dataset, read the way `vllm bench serve --dataset-name
sharegpt` reads one (docs/workloads.md, "Prompts from a dataset", gives the rules and their
source).

    entry       {"id": ..., "conversations": [{"from": "human", "value": "..."}, ...]}
    dropped     no `conversations` or fewer than 2 turns (vLLM's rule); a first turn not
                from "human" (or "user") or with an empty value (ours: vLLM takes the
                first turn whoever wrote it); a prompt that is not valid Unicode (a lone
                surrogate); vLLM's length filter: prompt or output under 4 tokens, prompt
                over 1,024, prompt + output over 2,048
    refused     a file that is not a JSON list of objects, an entry whose `conversations`
                is not a list or whose first two turns lack a string `from` and `value`
                (one UsageError line naming the entry, counted from 0), or none kept

A text's length in tokens is estimated as ceil(characters / 4): the client has no
tokenizer, and the sample must not depend on the server (A and B of a compare send the same
requests). The prompt is the first turn's text verbatim; the second turn's estimate is the
request's max_tokens.

What is kept is held compactly (the prompts' UTF-8 bytes, and four integers an entry), so
memory follows the kept prompts, never the file; the file itself is read bounded
(bench.workload.datafile).
"""

from __future__ import annotations

import bisect
import functools
import math
import random
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import UsageError
from bench.workload import datafile

CHARS_PER_TOKEN = 4
MIN_TOKENS = 4  # vLLM: a prompt or an output under 4 tokens is dropped
MAX_PROMPT_TOKENS = 1024  # vLLM: a prompt over 1,024 tokens is dropped
MAX_TOTAL_TOKENS = 2048  # vLLM: prompt + output over 2,048 is dropped
USER_ROLES = ("human", "user")
FEW_TURNS = "fewer than 2 turns"
NO_USER = "no user turn first"
NOT_TEXT = "prompt not valid Unicode"
SHORT = f"prompt or output under {MIN_TOKENS} tokens"
LONG = f"prompt over {MAX_PROMPT_TOKENS:,} tokens"
TOTAL = f"prompt + output over {MAX_TOTAL_TOKENS:,} tokens"


def estimate_tokens(text: str) -> int:
    """A text's length in tokens as this client estimates it: ceil(characters / 4)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class ShareGptData:
    """The conversations of one file that passed the rules (module docstring)."""

    path: str
    sha256: str
    entries: int  # in the file
    dropped: dict[str, int]  # why, how many
    entry: array[int] = field(repr=False)  # the kept ones' places in the file (0-based)
    prompt_tokens: array[int] = field(repr=False)  # their estimates
    output_tokens: array[int] = field(repr=False)
    offsets: array[int] = field(repr=False)  # prompt k is text[offsets[k]:offsets[k + 1]]
    text: bytes = field(repr=False)

    def __len__(self) -> int:
        return len(self.entry)

    def prompt(self, entry: int) -> str:
        """The prompt of the file's entry `entry` (one that was kept)."""
        k = bisect.bisect_left(self.entry, entry)
        if k == len(self.entry) or self.entry[k] != entry:
            raise KeyError(entry)
        return self.text[self.offsets[k] : self.offsets[k + 1]].decode("utf-8")

    def sample(self, n: int, rng: random.Random) -> list[int]:
        """n kept positions: without replacement while enough remain, then with (vLLM
        oversamples the same way)."""
        k = len(self.entry)
        picks = rng.sample(range(k), min(n, k))
        return picks + rng.choices(range(k), k=n - len(picks))


def _kind(value: object) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string"}
    return next((v for k, v in kinds.items() if isinstance(value, k)), "a value")


def _turns(i: int, item: object, shown: str) -> tuple[str, str] | str:
    """(prompt, completion) of entry i, or why it is dropped; a malformed one is refused."""
    if not isinstance(item, dict):
        raise UsageError(f"{shown}: entry {i} is {_kind(item)}, not a conversation object")
    turns = item.get("conversations")
    if turns is None:
        return FEW_TURNS
    if not isinstance(turns, list):
        raise UsageError(f"{shown}: entry {i}'s conversations is {_kind(turns)}, not a list")
    if len(turns) < 2:
        return FEW_TURNS
    for t, turn in enumerate(turns[:2]):
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str)
                and isinstance(turn.get("value"), str)):  # fmt: skip
            raise UsageError(
                f"{shown}: entry {i}'s turn {t} is not an object with a string 'from' and 'value'"
            )
    if turns[0]["from"] not in USER_ROLES or not turns[0]["value"].strip():
        return NO_USER
    return turns[0]["value"], turns[1]["value"]


def _rule(prompt: str, completion: str) -> tuple[int, int] | str:
    """(prompt, output) estimates, or the length filter that drops them (vLLM's)."""
    p, o = estimate_tokens(prompt), estimate_tokens(completion)
    if p < MIN_TOKENS or o < MIN_TOKENS:
        return SHORT
    if p > MAX_PROMPT_TOKENS:
        return LONG
    if p + o > MAX_TOTAL_TOKENS:
        return TOTAL
    return p, o


def read_sharegpt(path: Path, shown: str) -> ShareGptData:
    """The dataset at `path` (module docstring); any problem one UsageError line."""
    datafile.key(path, shown)
    entry, p_tok, o_tok, offsets = array("q"), array("q"), array("q"), array("q", [0])
    text, entries = bytearray(), 0
    dropped = dict.fromkeys((FEW_TURNS, NO_USER, NOT_TEXT, SHORT, LONG, TOTAL), 0)
    with path.open("rb") as f:
        reader = datafile.HashedReader(f, shown)
        for i, item in enumerate(datafile.json_items(reader, "entry")):
            entries += 1
            got = _turns(i, item, shown)
            lengths = got if isinstance(got, str) else _rule(*got)
            if isinstance(lengths, str):
                dropped[lengths] += 1
                continue
            try:
                raw = got[0].encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON)
                dropped[NOT_TEXT] += 1
                continue
            entry.append(i)
            p_tok.append(lengths[0])
            o_tok.append(lengths[1])
            text += raw
            offsets.append(len(text))
        sha = reader.sha256()
    dropped = {k: v for k, v in dropped.items() if v}
    if not entry:
        why = ", ".join(f"{v:,} {k}" for k, v in dropped.items()) or "it holds none"
        raise UsageError(f"{shown} has no conversation this workload can use: {why}")
    return ShareGptData(str(path), sha, entries, dropped, entry, p_tok, o_tok, offsets, bytes(text))


@functools.lru_cache(maxsize=4)
def _cached(key: tuple[str, int, int, int], shown: str) -> ShareGptData:
    return read_sharegpt(Path(key[0]), shown)


def load(path: Path) -> ShareGptData:
    """`read_sharegpt`, once per file as it is now (its path, size, mtime and inode)."""
    shown = f"dataset {path}"
    return _cached(datafile.key(path, shown), shown)
