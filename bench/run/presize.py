"""Sizing the next row's prompt while this row's cold scout prefills.

Exact sizing costs a few /tokenize calls on prompts of up to 256K tokens; done between
rows, the sweep waits for them. The server's API process tokenizes, while a scout's
prefill keeps the GPU busy and leaves that process idle, so the next row is sized then.
/tokenize never runs while a cell runs (it would compete with the streams being
measured), and no call starts so late in a scout that it, or our parsing of its answer,
could still be busy when the scout's first token is due: the cut-off comes from the
fastest prefill rate seen in this run, and a call's expected length from the calls
before it. What is not done by the cut-off is finished when the next row starts, as
before. The prompts are the same either way: sizing is deterministic.

How a prompt is sized: exactly, through /tokenize (`prompts.size_exactly`), or without it by
a line tokens = a + b x words fitted once per run to usage.prompt_tokens of two small probe
requests (`prompts.size_by_line`); those probes never run beside a scout.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from bench import bounds
from bench.errors import ServerError
from bench.results import PlannedContext, Results
from bench.run import prompts, workload_text
from bench.run.cell import Sleep
from bench.stream import metrics
from bench.stream.client import Client, Clock
from bench.stream.metrics import Snapshot
from bench.stream.records import RequestRecord

T = TypeVar("T")
Sized = tuple[str, int]  # (prompt text, prompt tokens)
Ahead = tuple[tuple[int, str], Callable[[], Coroutine[Any, Any, Sized]]]  # (trial, label), size
# One request of the sweep's own, bounded: (results, text, max_tokens, what) -> its record
Single = Callable[[Results, str, int, str], Awaitable[RequestRecord]]

# Only this share of a scout's expected time to first token is used for sizing calls;
# prefill gets slower with context, so the fastest rate seen already errs early.
SCOUT_SHARE = 0.8
CALL_SAFETY = 2.0  # a call is expected to last at most this many times the fitted time
CALL_MARGIN_S = 0.005


class CallTimer:
    """Expected seconds of a /tokenize call from the length of its text: a fixed cost (the
    fastest call seen) plus a cost per character taken from the longest call seen (the
    server's tokenization and our parsing of the answer both grow linearly with it)."""

    SHORT_CHARS = 4096  # below this the fixed cost is all there is

    def __init__(self) -> None:
        self.fixed_s: float | None = None
        self._longest: tuple[int, float] | None = None  # (chars, seconds)

    def record(self, chars: int, seconds: float) -> None:
        self.fixed_s = seconds if self.fixed_s is None else min(self.fixed_s, seconds)
        if chars >= self.SHORT_CHARS and (
            self._longest is None
            or chars > self._longest[0]
            or (chars == self._longest[0] and seconds > self._longest[1])
        ):
            self._longest = (chars, seconds)

    @property
    def per_char_s(self) -> float | None:
        if self._longest is None or self.fixed_s is None:
            return None
        chars, seconds = self._longest
        return max(seconds - self.fixed_s, 0.0) / chars

    def expected_s(self, chars: int) -> float:
        """inf until there is something to go by: such a call waits for the next row."""
        per_char = self.per_char_s
        if self.fixed_s is None or (chars >= self.SHORT_CHARS and per_char is None):
            return math.inf
        return CALL_SAFETY * (self.fixed_s + (per_char or 0.0) * chars) + CALL_MARGIN_S


class TokenizeWindow:
    """When /tokenize calls may start: always between rows, during a scout until its
    cut-off, never while a cell runs. Calls wait (without polling) for a window long
    enough for them."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.timer = CallTimer()
        self._until_s: float | None = math.inf  # None: closed
        self._changed = asyncio.Event()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def open(self, until_s: float = math.inf) -> None:
        self._until_s = until_s
        self._changed.set()

    def close(self) -> None:
        self._until_s = None
        self._changed.set()

    def allows(self, chars: int) -> bool:
        if self._until_s is None:
            return False
        if self._until_s == math.inf:
            return True
        return self.clock() + self.timer.expected_s(chars) <= self._until_s

    async def call(self, chars: int, fn: Callable[[], Awaitable[T]]) -> T:
        while not self.allows(chars):
            self._changed.clear()
            await self._changed.wait()
        self._in_flight += 1
        self._idle.clear()
        t0 = self.clock()
        try:
            return await fn()
        finally:
            self.timer.record(chars, self.clock() - t0)
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def quiet(self) -> None:
        """Close the window and wait for a call already under way."""
        self.close()
        await self._idle.wait()


class Presizer:
    """The sweep's sizing: each row's prompt once, started early when a scout allows."""

    def __init__(
        self,
        clock: Clock,
        sleep: Sleep,
        scrape: Callable[[], Awaitable[Snapshot | None]] | None,
        *,
        client: Client,
        single: Single,
        note: Callable[..., None],
    ) -> None:
        """`scrape`: the server's /metrics (None without: then sizing never overlaps);
        `client` asks /tokenize; `single` sends a sizing probe as the sweep sends its own
        requests; `note` logs a progress event."""
        self.clock = clock
        self.sleep = sleep
        self.scrape = scrape
        self.client = client
        self.single = single
        self.note = note
        self.window = TokenizeWindow(clock)
        self._tasks: dict[tuple[int, str], asyncio.Task[Sized]] = {}
        self._prefill_tok_s: float | None = None  # fastest cold prefill seen, client time
        self._line: tuple[float, float] | None = None  # (a, b) without /tokenize, once fitted
        self.requests = 0  # sent for sizing so far: /tokenize calls and probe requests

    async def take(
        self, key: tuple[int, str], size: Callable[[], Coroutine[Any, Any, Sized]]
    ) -> tuple[Sized, bool]:
        """The row's prompt, and whether sizing had started ahead of the row."""
        self.window.open()
        task = self._tasks.pop(key, None)
        if task is None:
            return await size(), False
        return await task, True

    def cutoff_s(self, start_s: float, prompt_tokens: int) -> float | None:
        """When sizing calls must be over during a scout; None: no overlap (no rate yet)."""
        if self._prefill_tok_s is None:
            return None
        return start_s + SCOUT_SHARE * prompt_tokens / self._prefill_tok_s

    @contextlib.asynccontextmanager
    async def scout(
        self,
        record: RequestRecord,
        prompt_tokens: int,
        ahead: Ahead | None,
    ) -> AsyncIterator[None]:
        """Around the scout's request: size the row `ahead` while it prefills, then learn
        the prefill rate from the scout."""
        cutoff = self.cutoff_s(record.start_s, prompt_tokens)
        if cutoff is None or ahead is None or self.scrape is None:
            self.window.close()
        else:
            key, size = ahead
            self.window.open(cutoff)
            poll_s = min(max((cutoff - record.start_s) / 50, 0.005), 0.05)
            if key not in self._tasks:
                self._tasks[key] = asyncio.create_task(self._once_running(record, size, poll_s))
        try:
            yield
        finally:
            await self.window.quiet()
        if record.error is None and record.first_token_s is not None:
            ttft = record.first_token_s - record.ttft_from_s
            if ttft > 0:
                rate = (record.prompt_tokens or prompt_tokens) / ttft
                self._prefill_tok_s = max(rate, self._prefill_tok_s or 0.0)

    async def _once_running(
        self,
        record: RequestRecord,
        size: Callable[[], Coroutine[Any, Any, Sized]],
        poll_s: float,
    ) -> Sized:
        """Size once the server reports the scout running (it is rendered, tokenized and
        prefilling): the scout's own request never waits behind ours in the API process."""
        assert self.scrape is not None
        while record.end_s is None:
            snap = await self.scrape()
            if snap is not None and _running_alone(snap):
                break
            await self.sleep(poll_s)
        return await size()

    async def aclose(self) -> None:
        """Cancel sizing that no row will take (the sweep failed or was interrupted)."""
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            # The sweep is already ending with its own error; sizing's is of no interest.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def prompt(self, results: Results, ctx: PlannedContext, trial: int) -> Sized:
        """The row's prompt: sized now, or taken from sizing that started during the
        previous row's scout; the wait is logged either way."""
        text = prompts.PromptText(results.run_id, trial, ctx.label, results.settings.seed)
        t0 = self.clock()
        (prompt, tokens), ahead = await self.take(
            (trial, ctx.label), lambda: self.size(results, ctx, text)
        )
        self.note(
            "prompt_sized",
            context=ctx.label,
            trial=trial + 1,
            prompt_tokens=tokens,
            started_ahead=ahead,
            waited_s=round(self.clock() - t0, 6),
        )
        return prompt, tokens

    def ahead(self, results: Results, ctx: PlannedContext, trial: int) -> Ahead | None:
        """The next row that will need a prompt, and how to size it (None: no /tokenize,
        whose probe requests must never run beside a scout, or no such row)."""
        if not results.server.has_tokenize:
            return None
        rows = [(t, c) for t in range(results.settings.trials) for c in results.plan.contexts]
        i = next(i for i, (t, c) in enumerate(rows) if t == trial and c.label == ctx.label)
        for t, c in rows[i + 1 :]:
            if _needs_prompt(results, c, t):
                text = prompts.PromptText(results.run_id, t, c.label, results.settings.seed)
                return (t, c.label), lambda c=c, text=text: self.size(results, c, text)
        return None

    async def size(self, results: Results, ctx: PlannedContext, text: prompts.PromptText) -> Sized:
        """Row CTX's prompt and its tokens: exactly through /tokenize, else by the line."""
        if results.server.has_tokenize:
            try:
                return await prompts.size_exactly(
                    ctx.prompt_tokens, text, self.counter(results, ctx.label)
                )
            except prompts.NotSizable as exc:
                raise ServerError(
                    f"/tokenize cannot size the {ctx.label} prompt: {exc}",
                    hint="the server's /tokenize must count the text it is given",
                ) from None
        if self._line is None:  # the line is the tokenizer's: fitted once per run
            self._line = await self._calibrate(results)
        return prompts.size_by_line(ctx.prompt_tokens, text, self._line), ctx.prompt_tokens

    async def word_line(self, results: Results) -> workload_text.TokenLine:
        """tokens = a + b x words for this server's tokenizer: from /tokenize where it has
        one (bench.run.workload_text.fit_line), else the usage line of `_calibrate`."""
        if not results.server.has_tokenize:
            a, b = await self._calibrate(results, workload_text.probe_text)
            return workload_text.TokenLine(a, b)
        try:
            return await workload_text.fit_line(self.counter(results, "the workload's prompts"))
        except ValueError as exc:
            raise ServerError(f"/tokenize cannot size the workload's prompts: {exc}") from None

    def counter(self, results: Results, label: str) -> prompts.Counter:
        """The tokens of a prompt text as the server's /tokenize counts them (chat template
        included for the chat API); a ServerError when it does not answer a count."""
        s, info = results.settings, results.server

        async def count(candidate: str) -> int:
            body = prompts.message_body(s.api, info.model, candidate)
            if s.api == "chat":
                body["add_generation_prompt"] = True
            self.requests += 1
            status, got = await self.window.call(
                len(candidate), lambda: self.client.post_json("/tokenize", body, idempotent=True)
            )
            if status != 200 or not isinstance(got, dict) or "count" not in got:
                raise ServerError(f"/tokenize answered {status} while sizing {label}")
            counted = bounds.count(got["count"])
            if counted is None:
                raise ServerError(
                    f"/tokenize answered a count that is no token count while sizing "
                    f"{label}: {str(got['count'])[:40]!r}"
                )
            return counted

        return count

    async def _calibrate(
        self, results: Results, text: Callable[[int], str] | None = None
    ) -> tuple[float, float]:
        """tokens = a + b x words from usage.prompt_tokens of two small probe requests
        (`text(words)` their texts: the card prompts' tagged filler by default).

        The probes' text is the same in every run (no run id in it): the line, and so every
        prompt sized by it, depends only on the server's tokenizer and the seed. The answer
        fingerprint's prompts are sized by it, and must be the same text from run to run."""
        s = results.settings
        probe = text or prompts.PromptText("sizing", -1, "probe", s.seed).text
        counts = []
        for words in (64, 1024):
            self.requests += 1
            record = await self.single(results, probe(words), 1, "a sizing probe")
            if record.prompt_tokens is None:
                raise ServerError(
                    "cannot size prompts: no /tokenize and no usage.prompt_tokens in the stream",
                    hint=record.error or "the server must report usage",
                )
            counts.append(record.prompt_tokens)
        if counts[1] <= counts[0]:  # the line would ask for billions of words (issue 29, S6)
            raise ServerError(
                "cannot size prompts: usage.prompt_tokens does not grow with the prompt "
                f"({counts[0]:,} for 64 words, {counts[1]:,} for 1,024)",
                hint="the server must report the prompt's real token count",
            )
        b = (counts[1] - counts[0]) / 960
        return counts[0] - 64 * b, b


def _running_alone(snap: Snapshot) -> bool:
    return (snap.get(metrics.RUNNING) or 0) >= 1 and (snap.get(metrics.WAITING) or 0) == 0


def _needs_prompt(results: Results, ctx: PlannedContext, trial: int) -> bool:
    """Whether the sweep will size this row's prompt (the same test `SweepRunner._row`
    makes)."""
    if ctx.scout_reason is not None:
        return False
    scouted = any(p.context_label == ctx.label and p.trial == trial for p in results.prefill)
    todo = any(
        results.cell(ctx.label, p.concurrency, trial) is None
        for p in results.plan.cells
        if p.context_label == ctx.label
    )
    return not scouted or todo
