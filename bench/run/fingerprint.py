"""The answer fingerprint: what the server answers, recorded before the sweep's first row.

A speed figure means something only while the server does the same work: a commit that
is faster because it broke a sampler or the long-context attention path answers
differently. So before its first row `bench run` sends a fixed, versioned prompt set
(`fingerprint_prompts.json`): its short prompts, then one prompt at each decode context
of the plan, padded to that context exactly as the sweep pads its prompts (the same
filler, sized through /tokenize, or by the usage line without it). Each asks for
`max_tokens` tokens with temperature 0, the set's seed and ignore_eos, not streamed, with
the engine's fields that return the answer's token ids (bench.engines: `answer_ids_fields`).

Each context prompt carries the long-context retrieval check's code near its start and asks
for it at its end (bench.run.retrieval, recorded as `Fingerprint.retrieval`). The long
prompts share one filler text, each a prefix of the next but for that question (shortest
first): a server with prefix caching prefills the longest context once in all, not every
context again, which keeps the fingerprint small next to the sweep (docs/verdicts.md gives
the measured share).

Every byte of an answer is the server's: each request is bounded in size (the client's
MAX_SETUP_BODY_BYTES) and in time (`bound_s` of its prompt tokens, at most the run's
read time-out: a non-streamed answer's first byte is its end), and what fails (an error
status, a time-out, a body that is no answer, a /tokenize that does not size the prompt) is
a failed `Answer` with its reason (bench.run.answer_body); the sweep goes on. After an
answer that did not come in time, or a server that did not answer at all, the rest of the
set is not sent (`not_run`, saying why): a server that hangs costs one bound, not nine.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.answers import MAX_REASON_CHARS, Answer, Fingerprint, answer_sha256
from bench.engines.detect import engine_of
from bench.errors import ServerError, ServerUnreachable
from bench.results import PlannedContext, Results
from bench.run import answer_body, prompts, retrieval
from bench.run.presize import Presizer
from bench.stream.client import Client, Clock

PROMPT_SET_FILE = Path(__file__).with_name("fingerprint_prompts.json")
TOKENIZE_S = 60.0  # client seconds for /tokenize of one answer's text (a few hundred bytes)


@dataclass(frozen=True)
class PromptSet:
    version: str
    max_tokens: int
    seed: int
    short: tuple[str, ...]
    long_instruction: str  # what the filler of a context prompt follows
    long_key: str  # seeds the filler's words (the same for every run: the set is fixed)


def load_prompt_set(path: Path = PROMPT_SET_FILE) -> PromptSet:
    raw = json.loads(path.read_text("utf-8"))
    return PromptSet(
        version=str(raw["version"]),
        max_tokens=int(raw["max_tokens"]),
        seed=int(raw["seed"]),
        short=tuple(str(t) for t in raw["short"]),
        long_instruction=str(raw["long_instruction"]),
        long_key=str(raw["long_key"]),
    )


@dataclass
class FingerprintProbe:
    """Sends the prompt set and records the answers (`take`)."""

    client: Client
    presize: Presizer  # sizes the context prompts as the sweep sizes its own
    clock: Clock
    bound_s: Callable[[int], float]  # client seconds one answer may take, by prompt tokens
    prompt_set: PromptSet = field(default_factory=load_prompt_set)
    requests: int = 0
    # Set when an answer got nothing in time (or nothing answered): the prompts after it are
    # not sent, so a server that hangs costs one bound, not one a prompt.
    _silent: str | None = field(default=None, init=False)
    _prompt_chars: dict[str, int] = field(default_factory=dict, init=False)  # sized prompts

    async def take(self, results: Results) -> Fingerprint:
        ps = self.prompt_set
        t0, sized_before = self.clock(), self.presize.requests
        answers = [
            await self._ask(results, f"short {i + 1}", text, None)
            for i, text in enumerate(ps.short)
        ]
        # The context prompts carry the retrieval check's code (bench.run.retrieval).
        code = retrieval.code_for(results.settings.seed)
        text = retrieval.NeedleText(ps.long_key, ps.seed, ps.long_instruction, code)
        contexts = sorted(
            (c for c in results.plan.contexts if c.decode), key=lambda c: c.prompt_tokens
        )
        asked = [await self._context(results, ctx, text) for ctx in contexts]
        answers += asked
        seconds = self.clock() - t0
        return Fingerprint(
            version=ps.version,
            max_tokens=ps.max_tokens,
            seed=ps.seed,
            answers=tuple(answers),
            requests=self.requests + self.presize.requests - sized_before,
            seconds=seconds,
            server_s=seconds * results.server.speed_factor,
            retrieval=retrieval.record(results, code, text, asked, self._prompt_chars),
        )

    async def _context(
        self, results: Results, ctx: PlannedContext, text: prompts.PromptText
    ) -> Answer:
        if ctx.scout_reason is not None:  # not even one request of it fits the KV cache
            return _failed(ctx.label, ctx.prompt_tokens, ctx.scout_reason, status="not_run")
        if self._silent is not None:
            return _failed(
                ctx.label, ctx.prompt_tokens, f"not sent: {self._silent}", status="not_run"
            )
        try:
            prompt, tokens = await self.presize.size(results, ctx, text)
        except ServerError as exc:
            return _failed(ctx.label, ctx.prompt_tokens, f"not sized: {exc}")
        self._prompt_chars[ctx.label] = len(prompt)
        return await self._ask(results, ctx.label, prompt, tokens)

    def body(self, results: Results, text: str) -> dict[str, Any]:
        s, info, ps = results.settings, results.server, self.prompt_set
        body = prompts.message_body(s.api, info.model, text)
        body.update(
            max_tokens=ps.max_tokens, temperature=0.0, seed=ps.seed, ignore_eos=True, stream=False
        )
        body.update(engine_of(info).answer_ids_fields.get(s.api, {}))
        return body

    async def _ask(self, results: Results, name: str, text: str, tokens: int | None) -> Answer:
        if self._silent is not None:
            return _failed(name, tokens, f"not sent: {self._silent}", status="not_run")
        t0 = self.clock()
        sent = await self._send(results, name, text, tokens)
        if isinstance(sent, Answer):
            return sent
        status, got = sent
        seconds = self.clock() - t0
        if status != 200:
            return _failed(name, tokens, f"HTTP {status}: {_error_text(got)}", seconds=seconds)
        read = answer_body.read(got, self.prompt_set.max_tokens)
        if read.failure is not None:
            return _failed(name, tokens, read.failure, seconds=seconds)
        ids, ids_from = read.token_ids, "logprobs"
        if ids is None and results.server.has_tokenize and read.text:
            ids, ids_from = await self._tokenize(results, read.text), "tokenize"
        return Answer(
            name=name,
            prompt_tokens=tokens,
            status="answered",
            token_ids=ids,
            ids_from=ids_from if ids is not None else None,
            text=read.text,
            sha256=answer_sha256(ids if ids is not None else read.text),
            output_tokens=read.output_tokens,
            seconds=seconds,
        )

    async def _send(
        self, results: Results, name: str, text: str, tokens: int | None
    ) -> tuple[int, Any] | Answer:
        """(status, JSON answer) of one prompt, or its failed Answer."""
        # A whole answer is its first byte: the run's read time-out bounds it too.
        bound = min(self.bound_s(tokens or 0), results.settings.request_timeout_s)
        self.requests += 1
        try:
            async with asyncio.timeout(bound):
                return await self.client.post_json(
                    prompts.endpoint(results.settings.api), self.body(results, text), bound / 2
                )
        except TimeoutError:
            self._silent = f"the {name} prompt got no whole answer within {bound:g} s"
            return _failed(name, tokens, f"no whole answer within {bound:g} s")
        except ServerUnreachable as exc:
            self._silent = f"the {name} prompt got no answer"
            return _failed(name, tokens, str(exc))
        except ServerError as exc:  # an answer over the size limit
            return _failed(name, tokens, str(exc))

    async def _tokenize(self, results: Results, text: str) -> tuple[int, ...] | None:
        """The ids of the answer's text through the server's own /tokenize; None when it
        does not give them (within TOKENIZE_S, and the run's read time-out)."""
        engine = engine_of(results.server)
        bound = min(TOKENIZE_S, results.settings.request_timeout_s)
        self.requests += 1
        try:
            async with asyncio.timeout(bound):
                status, got = await self.client.post_json(
                    engine.tokenize_path,
                    engine.tokenize_body(results.server.model, text),
                    idempotent=True,
                )
        except (TimeoutError, ServerError):
            return None
        return answer_body.tokenize_ids(got) if status == 200 else None


def _error_text(got: Any) -> str:
    """The message of an error answer (OpenAI's `error.message`, or `message`), else its
    type; bounded (it goes into the reason)."""
    error = got.get("error") if isinstance(got, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if message is None and isinstance(got, dict):
        message = got.get("message")
    if not isinstance(message, str):
        message = "no error message" if got is None else f"an answer of type {type(got).__name__}"
    return " ".join(message.split())[:160]


def _failed(
    name: str,
    tokens: int | None,
    reason: str,
    *,
    status: str = "failed",
    seconds: float | None = None,
) -> Answer:
    return Answer.model_validate(
        {
            "name": name,
            "prompt_tokens": tokens,
            "status": status,
            "reason": answer_body.clean_text(reason)[:MAX_REASON_CHARS],
            "seconds": seconds,
        }
    )
