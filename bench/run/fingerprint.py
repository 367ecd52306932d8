"""The answer fingerprint: what the server answers, recorded before the sweep's first row.

A speed figure means something only while the server does the same work: a commit that
is faster because it broke a sampler or the long-context attention path answers
differently. So before its first row `bench run` sends a fixed, versioned prompt set
(`fingerprint_prompts.json`): its short prompts, then one prompt at each decode context
of the plan, padded to that context exactly as the sweep pads its prompts (the same
filler, sized through /tokenize, or by the usage line without it). Each asks for
`max_tokens` tokens with temperature 0, the set's seed and ignore_eos, not streamed, with
the engine's fields that return the answer's token ids (bench.engines: `answer_ids_fields`).

The paths the launch promises (bench.run.launch_paths) get one prompt each, after the
short ones: with a reasoning parser the `reasoning` prompt, whose answer must come back in
the reasoning field; with automatic tool choice and a tool-call parser the `tool_call`
prompt, sent with one tool, whose answer must parse as a call of it with JSON arguments
(bench.run.answer_paths). They ask for `path_max_tokens` without ignore_eos (a tool call
ends where the model ends it; with a reasoning parser the tool prompt asks the chat template
not to think first, so the call comes within them) and are chat completions: with
`--api completions` they are `not_run`, saying why. Whether the promise held is on the
answer, never an exception.

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

from bench.answers import MAX_REASON_CHARS, Answer, Fingerprint, Promise, answer_sha256
from bench.engines.detect import engine_of
from bench.errors import ServerError, ServerUnreachable
from bench.results import PlannedContext, Results
from bench.run import answer_body, answer_paths, prompts, retrieval
from bench.run.launch_paths import LaunchPaths
from bench.run.presize import Presizer
from bench.stream.client import Client, Clock

PROMPT_SET_FILE = Path(__file__).with_name("fingerprint_prompts.json")
# The prompts of the launch's paths, named as the record and the compare show them.
PATH_PROMPT_NAMES: dict[Promise, str] = {"reasoning": "reasoning", "tool_call": "tool call"}
TOKENIZE_S = 60.0  # client seconds for /tokenize of one answer's text (a few hundred bytes)


@dataclass(frozen=True)
class PromptSet:
    version: str
    max_tokens: int
    seed: int
    short: tuple[str, ...]
    long_instruction: str  # what the filler of a context prompt follows
    long_key: str  # seeds the filler's words (the same for every run: the set is fixed)
    path_max_tokens: int  # of the reasoning and tool-call prompts
    reasoning: str  # the reasoning prompt
    tool_prompt: str  # the tool-call prompt, sent with `tool`
    tool: dict[str, Any]  # an OpenAI tool definition ({"type": "function", "function": ...})

    @property
    def tool_name(self) -> str:
        return str(self.tool["function"]["name"])


def load_prompt_set(path: Path = PROMPT_SET_FILE) -> PromptSet:
    raw = json.loads(path.read_text("utf-8"))
    return PromptSet(
        version=str(raw["version"]),
        max_tokens=int(raw["max_tokens"]),
        seed=int(raw["seed"]),
        short=tuple(str(t) for t in raw["short"]),
        long_instruction=str(raw["long_instruction"]),
        long_key=str(raw["long_key"]),
        path_max_tokens=int(raw["path_max_tokens"]),
        reasoning=str(raw["reasoning"]),
        tool_prompt=str(raw["tool_call"]["prompt"]),
        tool=dict(raw["tool_call"]["tool"]),
    )


@dataclass
class FingerprintProbe:
    """Sends the prompt set and records the answers (`take`)."""

    client: Client
    presize: Presizer  # sizes the context prompts as the sweep sizes its own
    clock: Clock
    bound_s: Callable[[int], float]  # client seconds one answer may take, by prompt tokens
    prompt_set: PromptSet = field(default_factory=load_prompt_set)
    launch: LaunchPaths = field(default_factory=LaunchPaths)  # the paths it promises
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
        if self.launch.reasoning_parser is not None:
            answers.append(await self._path(results, "reasoning"))
        if self.launch.tool_call_parser is not None:
            answers.append(await self._path(results, "tool_call"))
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
            reasoning_parser=self.launch.reasoning_parser,
            tool_call_parser=self.launch.tool_call_parser,
            retrieval=retrieval.record(results, code, text, asked, self._prompt_chars),
        )

    async def _path(self, results: Results, promise: Promise) -> Answer:
        """The prompt of a path the launch promises, and whether the promise held."""
        name = PATH_PROMPT_NAMES[promise]
        if results.settings.api != "chat":
            why = f"the {name} path is a chat completions field (--api {results.settings.api})"
            return _failed(name, None, why, status="not_run", promise=promise)
        ps = self.prompt_set
        text = ps.reasoning if promise == "reasoning" else ps.tool_prompt
        return await self._ask(results, name, text, None, promise)

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

    def body(self, results: Results, text: str, promise: Promise | None = None) -> dict[str, Any]:
        s, info, ps = results.settings, results.server, self.prompt_set
        body = prompts.message_body(s.api, info.model, text)
        body.update(temperature=0.0, seed=ps.seed, stream=False)
        if promise is None:
            body.update(max_tokens=ps.max_tokens, ignore_eos=True)
        else:  # the model ends its reasoning or its call itself
            body.update(max_tokens=ps.path_max_tokens)
        if promise == "tool_call":
            body.update(tools=[ps.tool], tool_choice="auto")
            if self.launch.reasoning_parser is not None:  # the call, not thinking, in the bound
                body.update(chat_template_kwargs={"enable_thinking": False})
        body.update(engine_of(info).answer_ids_fields.get(s.api, {}))
        return body

    async def _ask(
        self,
        results: Results,
        name: str,
        text: str,
        tokens: int | None,
        promise: Promise | None = None,
    ) -> Answer:
        if self._silent is not None:
            why = f"not sent: {self._silent}"
            return _failed(name, tokens, why, status="not_run", promise=promise)
        t0 = self.clock()
        sent = await self._send(results, name, self.body(results, text, promise), tokens)
        if isinstance(sent, Answer):
            return sent.model_copy(update={"promise": promise})
        status, got = sent
        seconds = self.clock() - t0
        if status != 200:
            why = f"HTTP {status}: {_error_text(got)}"
            return _failed(name, tokens, why, seconds=seconds, promise=promise)
        ps = self.prompt_set
        read = answer_body.read(got, ps.max_tokens if promise is None else ps.path_max_tokens)
        path = None
        if promise == "reasoning":
            path = answer_paths.reasoning(got)
        elif promise == "tool_call":
            path = answer_paths.tool_call(got, ps.tool_name)
        text_read = read.text
        if path is not None and path.text is not None:  # a call: its content is empty
            text_read = answer_body.clean_text(read.text + path.text)
        elif read.failure is not None:
            return _failed(name, tokens, read.failure, seconds=seconds, promise=promise, path=path)
        ids, ids_from = read.token_ids, "logprobs"
        if ids is None and results.server.has_tokenize and text_read:
            ids, ids_from = await self._tokenize(results, text_read), "tokenize"
        return Answer(
            name=name,
            prompt_tokens=tokens,
            status="answered",
            token_ids=ids,
            ids_from=ids_from if ids is not None else None,
            text=text_read,
            sha256=answer_sha256(ids if ids is not None else text_read),
            output_tokens=read.output_tokens,
            seconds=seconds,
            promise=promise,
            promise_held=None if path is None else path.held,
            promise_detail=None if path is None else path.detail,
        )

    async def _send(
        self, results: Results, name: str, body: dict[str, Any], tokens: int | None
    ) -> tuple[int, Any] | Answer:
        """(status, JSON answer) of one prompt, or its failed Answer."""
        # A whole answer is its first byte: the run's read time-out bounds it too.
        bound = min(self.bound_s(tokens or 0), results.settings.request_timeout_s)
        self.requests += 1
        try:
            async with asyncio.timeout(bound):
                return await self.client.post_json(
                    prompts.endpoint(results.settings.api), body, bound / 2
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
    promise: Promise | None = None,
    path: answer_paths.PathRead | None = None,
) -> Answer:
    """A prompt without an answer; a path prompt's failed answer still says what it found
    (an answer with no text may still say its reasoning field is missing)."""
    return Answer.model_validate(
        {
            "name": name,
            "prompt_tokens": tokens,
            "status": status,
            "reason": answer_body.clean_text(reason)[:MAX_REASON_CHARS],
            "seconds": seconds,
            "promise": promise,
            "promise_held": None if path is None else path.held,
            "promise_detail": None if path is None else path.detail[:MAX_REASON_CHARS],
        }
    )
