"""The answer fingerprint's records in results.json (schema 3 on): what the server answered to
a fixed, versioned set of prompts before the sweep (`bench.run.fingerprint` sends them,
`bench.verdict.answers` compares them).

One `Answer` per prompt: the token ids when the server returned them (`ids_from`
"logprobs"), else the ids of its text through the server's /tokenize ("tokenize"), else
none (the text alone is compared); the first `max_tokens` tokens' text (bounded); a sha256
of what is compared. A prompt that failed is an Answer with `status` "failed" and the
reason, never an exception. `Fingerprint` adds the prompt set's version and the cost:
requests sent (answers and /tokenize calls) and their client and server seconds.

The paths a launch promises get one prompt each (`promise`): with a reasoning parser, the
"reasoning" prompt, whose answer must come back in the reasoning field; with automatic tool
choice and a tool-call parser, the "tool call" prompt, whose answer must parse as a call of
the offered tool with JSON arguments. `promise_held` records whether it did and
`promise_detail` what was found (bench.run.answer_paths reads it from hostile JSON).

`Retrieval` (schema 4) is the long-context retrieval check riding on the context prompts:
the code planted in them (bench.run.retrieval) and, per long context, whether the answer
repeated it; `note` says when the check is not informative (the twin, or found nowhere).
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

AnswerStatus = Literal["answered", "failed", "not_run"]
# Where the token ids came from: the server's own (logprobs entries), or its /tokenize of
# the text it answered.
IdsFrom = Literal["logprobs", "tokenize"]
# What a prompt checks beyond the answer's tokens: a path the launch promises.
Promise = Literal["reasoning", "tool_call"]
# Bounds on what a record keeps of a server's answer (a hostile server may send megabytes).
MAX_ANSWER_TOKENS = 256
MAX_ANSWER_CHARS = 4096
MAX_REASON_CHARS = 300
MAX_HEAD_CHARS = 80  # of a retrieval answer's start


class _AnswerModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Answer(_AnswerModel):
    """The server's answer to one prompt of the set."""

    name: str  # "short 1", or the decode context's label ("8K", "251K")
    prompt_tokens: int | None = None  # as sized (exactly with /tokenize) for a context prompt
    status: AnswerStatus
    reason: str | None = Field(None, max_length=MAX_REASON_CHARS)
    token_ids: tuple[int, ...] | None = Field(None, max_length=MAX_ANSWER_TOKENS)
    ids_from: IdsFrom | None = None
    text: str = Field("", max_length=MAX_ANSWER_CHARS)  # the first max_tokens tokens' text
    sha256: str | None = None  # of `compared`: the ids when there are, else the text
    output_tokens: int | None = None  # usage.completion_tokens as the server said
    seconds: float | None = None  # client time from the request to its whole answer
    promise: Promise | None = None  # set on the prompt of a path the launch promises
    promise_held: bool | None = None  # the reasoning field came back / the tool call parsed
    promise_detail: str | None = Field(None, max_length=MAX_REASON_CHARS)

    @property
    def compared(self) -> tuple[int, ...] | str | None:
        """What two answers are compared by: ids, else text; None when it failed."""
        if self.status != "answered":
            return None
        return self.token_ids if self.token_ids is not None else self.text


def answer_sha256(compared: tuple[int, ...] | str) -> str:
    """sha256 of the ids as a JSON list, or of the text's UTF-8."""
    data = compared.encode() if isinstance(compared, str) else json.dumps(list(compared)).encode()
    return hashlib.sha256(data).hexdigest()


class RetrievalContext(_AnswerModel):
    """One long context's retrieval: was the planted code in the answer's start?"""

    name: str  # the context prompt's (its label)
    prompt_tokens: int | None = None
    depth_tokens: int | None = None  # about how many prompt tokens come before the code
    status: AnswerStatus  # the context prompt's answer's
    found: bool | None = None  # None: not answered
    head: str = Field("", max_length=MAX_HEAD_CHARS)  # the answer's start, as the server sent it

    @property
    def depth_share(self) -> float | None:
        if self.depth_tokens is None or not self.prompt_tokens:
            return None
        return self.depth_tokens / self.prompt_tokens


class Retrieval(_AnswerModel):
    code: str = Field(pattern=r"^[0-9]{4}-[0-9]{4}$")  # drawn from the run's seed
    seed: int  # the run's --seed the code was drawn from
    needle_words: int  # filler words before the code in every context prompt
    long_min_tokens: int  # a decode context of at least this many prompt tokens is long
    planted_in: tuple[str, ...] = ()  # every prompt carrying the code
    contexts: tuple[RetrievalContext, ...] = ()  # the long ones
    twin: bool = False  # the server is the twin: it answers from its seed, never retrieves
    note: str | None = Field(None, max_length=MAX_REASON_CHARS)  # set: not informative (why)

    @property
    def found(self) -> int:
        return sum(c.found is True for c in self.contexts)

    @property
    def informative(self) -> bool:
        return self.note is None


class Fingerprint(_AnswerModel):
    version: str  # the prompt set's (bench/run/fingerprint_prompts.json)
    max_tokens: int  # each prompt asks for this many tokens
    temperature: float = 0.0
    seed: int  # sent with every prompt
    answers: tuple[Answer, ...] = ()
    requests: int = 0  # every request of the fingerprint: prompts and /tokenize calls
    seconds: float = 0.0  # client time of the whole fingerprint
    server_s: float = 0.0  # `seconds` times the speed factor (the sweep's server time unit)
    # The launch's parsers, as read from its command line (None: not enabled, or unknown).
    reasoning_parser: str | None = Field(None, max_length=64)
    tool_call_parser: str | None = Field(None, max_length=64)
    # The long-context retrieval check on the context prompts (schema 4; None before it).
    retrieval: Retrieval | None = None

    def answer(self, name: str) -> Answer | None:
        return next((a for a in self.answers if a.name == name), None)

    @property
    def digest(self) -> str:
        """One sha256 over the set's version and every prompt's name and answer (its sha256,
        or its status when it has none): two runs that answered alike share it."""
        lines = [self.version, *(f"{a.name}\t{a.sha256 or a.status}" for a in self.answers)]
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()
