"""The sweep: per trial and context row, size the prompt, scout prefill, run the cells.

Server-time settings (window, readiness hold, time-outs) are divided by the speed
factor here, once; everything below works in client seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from bench.engines.detect import ENGINES
from bench.errors import ServerError
from bench.host import telemetry
from bench.results import (
    CellAggregate,
    CellResult,
    PlannedCell,
    PlannedContext,
    PrefillSample,
    Results,
    ServerInfo,
    TokenSource,
)
from bench.run import figures, prompts
from bench.run.cell import CellRun, CellTiming, Server, launch_prefix_hit_rate, run_cell
from bench.run.presize import Presizer, Sized
from bench.run.progress import SweepProgress
from bench.run.rundir import METRICS, SAMPLES, RunDir
from bench.stats import estimate
from bench.stream.client import Clock
from bench.stream.records import RequestRecord
from bench.stream.tokens import attribute

# Server seconds: the readiness time-out grows with the tokens the cell must prefill.
_READY_BASE_S = 120.0
_READY_PREFILL_TOK_S = 2000.0
_DRAIN_TIMEOUT_S = 300.0
# The one warm-up request before the first scout: a short prompt of its own (it warms no
# row's prefix cache) and a few tokens, so the first scout is not the server's first
# request since start-up (lazy initialisation, first-use compilation, allocator growth).
WARMUP_WORDS = 64
WARMUP_MAX_TOKENS = 16
WARMUP_LABEL = "warm-up"


@dataclass
class Sweep:
    server: Server
    rundir: RunDir
    progress: SweepProgress
    anchor_s: float  # clock reading at the run's wall-clock anchor
    anchor_unix_s: float = 0.0  # the anchor as Unix time (time.time())
    # nvidia-smi telemetry over every window (None without a GPU): gpu_telemetry.jsonl.
    gpu_sampler: telemetry.GpuSampler | None = None
    _presize: Presizer = field(init=False)
    _line: tuple[float, float] | None = field(init=False, default=None)
    _warmed_up: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        server = self.server
        scrape = server.scrape if server.has_metrics else None
        self._presize = Presizer(server.clock, server.sleep, scrape)

    @property
    def clock(self) -> Clock:
        return self.server.clock

    async def run(self, results: Results) -> Results:
        s = results.settings
        try:
            for trial in range(s.trials):
                for ctx in results.plan.contexts:
                    results = await self._row(results, ctx, trial)
        finally:
            await self._presize.aclose()
        return results.model_copy(update={"state": "complete", "aggregates": aggregate(results)})

    async def _row(self, results: Results, ctx: PlannedContext, trial: int) -> Results:
        s, info = results.settings, results.server
        cells = [p for p in results.plan.cells if p.context_label == ctx.label]
        todo = [p for p in cells if results.cell(ctx.label, p.concurrency, trial) is None]
        scouted = any(p.context_label == ctx.label and p.trial == trial for p in results.prefill)
        if scouted and not todo:
            return results
        if ctx.scout_reason is not None:
            return self._not_run(results, ctx, trial, todo)
        prompt, tokens = await self._prompt(results, ctx, trial)
        path = prompts.endpoint(s.api)
        scout_body = prompts.request_body(s.api, info.model, prompt, 1, _extras(info))
        if not self._warmed_up:
            await self._warm_up(results)
        # The scout must be alone on the server: the previous row's cancelled streams may
        # still run for a while (vLLM aborts them a few steps after the disconnect).
        drain_note = await self.server.drain(
            *self._drain_timing(s.readiness_hold_s, info.speed_factor)
        )
        # The cold scout: prefill sample, and it warms the prefix cache for the row.
        record = RequestRecord(worker=0, start_s=self.clock())
        async with self._presize.scout(record, tokens, self._ahead(results, ctx, trial)):
            await self.server.client.stream(path, scout_body, record)
        if not scouted:
            sample = scout_sample(record, ctx.label, trial, tokens, drain_note)
            results = results.model_copy(update={"prefill": (*results.prefill, sample)})
            self.rundir.append(SAMPLES, [self._raw("prefill", ctx.label, 1, trial, record)])
            self.rundir.save(results)
            self.progress.note(
                "prefill_measured",
                context=ctx.label,
                status=sample.status,
                prefill_tok_s=None  # at server speed, like the tables
                if sample.prefill_tok_s is None
                else round(sample.prefill_tok_s / results.server.speed_factor),
                reason=sample.reason,
                trial=trial + 1,
            )
        prompt_tokens = record.prompt_tokens or tokens
        body = prompts.request_body(s.api, info.model, prompt, ctx.max_tokens, _extras(info))
        speed = info.speed_factor
        for planned in todo:
            c = planned.concurrency
            name = f"{ctx.label} x {c}" + (f" trial {trial + 1}" if s.trials > 1 else "")
            if not planned.run:
                result = CellResult(
                    context_label=ctx.label,
                    prompt_tokens=prompt_tokens,
                    concurrency=c,
                    trial=trial,
                    status="over_capacity",
                    reason=planned.reason,
                )
                results = results.model_copy(update={"cells": (*results.cells, result)})
                self.rundir.save(results)
                continue
            timing = CellTiming(
                window_s=s.duration_s / speed,
                hold_s=s.readiness_hold_s / speed,
                ready_timeout_s=(_READY_BASE_S + c * prompt_tokens / _READY_PREFILL_TOK_S) / speed,
                drain_timeout_s=_DRAIN_TIMEOUT_S / speed + 5.0,
                sample_every_s=1.0 / speed,
            )
            self.progress.cell_started(name)
            window_gpu: list[telemetry.GpuSample] = []
            try:
                run = await run_cell(
                    self.server, path, body, c, timing, progress=self.progress.update,
                    on_window=self._gpu_window(window_gpu),
                )  # fmt: skip
            finally:
                if self.gpu_sampler is not None:
                    window_gpu += self.gpu_sampler.stop()  # also when the window was cut short
            # Text kept for the tokenizer is counted now, the window over (bench.stream.tokens).
            counted = await attribute(run.records, self.server.tokenize)
            result = self._result(run, ctx.label, prompt_tokens, trial, ctx.max_tokens)
            if result.extras is not None:
                source = counted or self._token_source()
                result = result.model_copy(
                    update={"extras": result.extras.model_copy(update={"token_source": source})}
                )
            if self.gpu_sampler is not None:
                telemetry.append_window(
                    self.rundir.path / telemetry.GPU_TELEMETRY_NAME, context_label=ctx.label,
                    concurrency=c, trial=trial, samples=window_gpu,
                    output_tokens=result.figures.output_tokens if result.figures else None,
                )  # fmt: skip
            self.rundir.append(
                SAMPLES,
                [self._raw("decode", ctx.label, c, trial, r, t0=run.t0_s) for r in run.records],
            )
            self.rundir.append(METRICS, self._metrics_rows(run, ctx.label, trial))
            results = results.model_copy(update={"cells": (*results.cells, result)})
            results = results.model_copy(update={"aggregates": aggregate(results)})
            self.rundir.save(results)
            shown = result.figures.at_server_speed(speed) if result.figures else None
            self.progress.cell_finished(name, result, shown.total_tok_s if shown else None)
        return results

    def _token_source(self) -> TokenSource:
        """How tokens were counted where no text had to be tokenized."""
        counting = self.server.client.counting
        if counting is not None and counting.chunk_count is not None:
            return "engine_chunk_count"
        return "usage"

    @staticmethod
    def _drain_timing(hold_s: float, speed: float) -> tuple[float, float]:
        """(time-out, poll) of a drain barrier in client seconds, the same as a cell's."""
        hold_s /= speed
        return _DRAIN_TIMEOUT_S / speed + 5.0, max(0.01, min(0.25, hold_s / 6))

    async def _warm_up(self, results: Results) -> None:
        """One short request before the first scout of this sweep (a resumed run's server
        may be freshly started too); whatever it measures is not used."""
        self._warmed_up = True
        s, info = results.settings, results.server
        text = prompts.PromptText(results.run_id, -1, WARMUP_LABEL, s.seed).text(WARMUP_WORDS)
        record = RequestRecord(worker=0, start_s=self.clock())
        body = prompts.request_body(s.api, info.model, text, WARMUP_MAX_TOKENS, _extras(info))
        await self.server.client.stream(prompts.endpoint(s.api), body, record)
        self.progress.note(
            "warm_up",
            tokens=record.tokens,
            seconds=round(self.clock() - record.start_s, 6),
            error=record.error,
        )

    def _gpu_window(self, into: list[telemetry.GpuSample]) -> Callable[[bool], None] | None:
        sampler = self.gpu_sampler
        if sampler is None:
            return None

        def on_window(opening: bool) -> None:
            if opening:
                sampler.start()
            else:
                into.extend(sampler.stop())

        return on_window

    def _not_run(
        self, results: Results, ctx: PlannedContext, trial: int, todo: list[PlannedCell]
    ) -> Results:
        """Even one max_tokens=1 request does not fit the KV cache: nothing of the row runs."""
        sample = PrefillSample(
            context_label=ctx.label,
            prompt_tokens=ctx.prompt_tokens,
            trial=trial,
            status="over_capacity",
            reason=ctx.scout_reason,
        )
        cells = tuple(
            CellResult(
                context_label=ctx.label,
                prompt_tokens=ctx.prompt_tokens,
                concurrency=p.concurrency,
                trial=trial,
                status="over_capacity",
                reason=p.reason or ctx.scout_reason,
            )
            for p in todo
        )
        results = results.model_copy(
            update={"prefill": (*results.prefill, sample), "cells": (*results.cells, *cells)}
        )
        self.rundir.save(results)
        self.progress.note("prefill_not_run", context=ctx.label, reason=ctx.scout_reason)
        return results

    async def _prompt(self, results: Results, ctx: PlannedContext, trial: int) -> Sized:
        """The row's prompt: sized now, or taken from sizing that started during the
        previous row's scout (bench.run.presize); the wait is logged either way."""
        text = prompts.PromptText(results.run_id, trial, ctx.label, results.settings.seed)
        t0 = self.clock()
        (prompt, tokens), ahead = await self._presize.take(
            (trial, ctx.label), lambda: self._size(results, ctx, text)
        )
        self.progress.note(
            "prompt_sized",
            context=ctx.label,
            trial=trial + 1,
            prompt_tokens=tokens,
            started_ahead=ahead,
            waited_s=round(self.clock() - t0, 6),
        )
        return prompt, tokens

    def _ahead(
        self, results: Results, ctx: PlannedContext, trial: int
    ) -> tuple[tuple[int, str], Callable[[], Coroutine[Any, Any, Sized]]] | None:
        """The next row that will need a prompt, and how to size it (None: no /tokenize,
        whose probe requests must never run beside a scout, or no such row)."""
        if not results.server.has_tokenize:
            return None
        rows = [(t, c) for t in range(results.settings.trials) for c in results.plan.contexts]
        i = next(i for i, (t, c) in enumerate(rows) if t == trial and c.label == ctx.label)
        for t, c in rows[i + 1 :]:
            if _needs_prompt(results, c, t):
                text = prompts.PromptText(results.run_id, t, c.label, results.settings.seed)
                return (t, c.label), lambda c=c, text=text: self._size(results, c, text)
        return None

    async def _size(
        self, results: Results, ctx: PlannedContext, text: prompts.PromptText
    ) -> tuple[str, int]:
        s, info = results.settings, results.server
        if info.has_tokenize:

            async def count(candidate: str) -> int:
                body = prompts.message_body(s.api, info.model, candidate)
                if s.api == "chat":
                    body["add_generation_prompt"] = True
                status, got = await self._presize.window.call(
                    len(candidate), lambda: self.server.client.post_json("/tokenize", body)
                )
                if status != 200 or not isinstance(got, dict) or "count" not in got:
                    raise ServerError(f"/tokenize answered {status} while sizing {ctx.label}")
                return int(got["count"])

            return await prompts.size_exactly(ctx.prompt_tokens, text, count)
        if self._line is None:  # the line is the tokenizer's: fitted once per run
            self._line = await self._calibrate(results)
        return prompts.size_by_line(ctx.prompt_tokens, text, self._line), ctx.prompt_tokens

    async def _calibrate(self, results: Results) -> tuple[float, float]:
        """tokens = a + b x words from usage.prompt_tokens of two small probe requests."""
        s, info = results.settings, results.server
        probe = prompts.PromptText(results.run_id, -1, "probe", s.seed)
        counts = []
        for words in (64, 1024):
            record = RequestRecord(worker=0, start_s=self.clock())
            body = prompts.request_body(s.api, info.model, probe.text(words), 1, _extras(info))
            await self.server.client.stream(prompts.endpoint(s.api), body, record)
            if record.prompt_tokens is None:
                raise ServerError(
                    "cannot size prompts: no /tokenize and no usage.prompt_tokens in the stream",
                    hint=record.error or "the server must report usage",
                )
            counts.append(record.prompt_tokens)
        b = max((counts[1] - counts[0]) / 960, 1e-6)
        return counts[0] - 64 * b, b

    def _result(
        self,
        run: CellRun,
        label: str,
        prompt_tokens: int,
        trial: int,
        max_tokens: int | None = None,
    ) -> CellResult:
        base = {
            "context_label": label,
            "prompt_tokens": prompt_tokens,
            "concurrency": run.concurrency,
            "trial": trial,
            "started_at_s": run.t0_s - self.anchor_s,
        }
        error = run.error
        if error is not None or run.w0_s is None or run.w1_s is None:
            failed = sum(r.error is not None for r in run.records)
            reason = f"{failed} request(s) failed, first: {error}" if error else "no window"
            return CellResult(**base, status="invalid", reason=reason)
        figs, extras, why = figures.cell_figures(
            run.records,
            run.w0_s,
            run.w1_s,
            run.samples,
            run.client_active,
            first=run.first,
            last=run.last,
            ready_after_s=run.ready_after_s,
        )
        extras = extras.model_copy(
            update={
                "window_start_s": run.w0_s - run.t0_s,
                "window_end_s": run.w1_s - run.t0_s,
                "launch_prefix_cache_hit_rate": launch_prefix_hit_rate(run),
            }
        )
        if figs is None:
            return CellResult(**base, status="invalid", reason=why, extras=extras)
        over = max((r.tokens for r in run.records), default=0)
        if max_tokens is not None and over > max_tokens:
            # The server's usage counts are not to be believed: neither are the figures.
            why = (
                f"the server claimed {over} output tokens for one request, "
                f"more than its max_tokens {max_tokens}"
            )
            return CellResult(**base, status="invalid", reason=why, extras=extras)
        # A cell whose gate never held, or that started on an undrained server, is
        # measured and flagged: its numbers are shown with the reason beside them.
        flag = "; ".join(x for x in (run.drain_note, run.not_ready) if x)
        if flag:
            return CellResult(**base, status="not_ready", reason=flag, figures=figs, extras=extras)
        return CellResult(**base, status="valid", figures=figs, extras=extras)

    def _raw(
        self,
        phase: str,
        label: str,
        c: int,
        trial: int,
        r: RequestRecord,
        *,
        t0: float | None = None,
    ) -> dict[str, object]:
        origin = self.anchor_s if t0 is None else t0
        return {
            "phase": phase,
            "context": label,
            "concurrency": c,
            "trial": trial,
            # Unix time of this row's time origin, to line raw times up with other logs.
            "origin_unix_s": round(self.anchor_unix_s + (origin - self.anchor_s), 6),
            **r.to_json(origin),
        }

    def _metrics_rows(self, run: CellRun, label: str, trial: int) -> list[dict[str, object]]:
        snaps = [x for x in (run.first, *run.samples, run.last) if x is not None]
        return [
            {
                "phase": "decode",
                "context": label,
                "concurrency": run.concurrency,
                "trial": trial,
                "t_s": round(x.t_s - self.anchor_s, 6),
                "values": x.values,
            }
            for x in snaps
        ]


def _needs_prompt(results: Results, ctx: PlannedContext, trial: int) -> bool:
    """Whether `Sweep._row` will size this row's prompt (the same test it makes)."""
    if ctx.scout_reason is not None:
        return False
    scouted = any(p.context_label == ctx.label and p.trial == trial for p in results.prefill)
    todo = any(
        results.cell(ctx.label, p.concurrency, trial) is None
        for p in results.plan.cells
        if p.context_label == ctx.label
    )
    return not scouted or todo


def scout_sample(
    record: RequestRecord,
    label: str,
    trial: int,
    sized_tokens: int,
    drain_note: str | None = None,
) -> PrefillSample:
    """prefill tok/s = prompt tokens / TTFT of the cold max_tokens=1 request.

    The token's text may be swallowed by a reasoning parser (a <think> token): for the
    scout the first usage chunk with a token counts as the first token too. A scout sent
    while the server was still busy (`drain_note`: the barrier before it timed out)
    shared its prefill with other requests: no number from it.
    """
    if drain_note is not None:
        return PrefillSample(
            context_label=label,
            prompt_tokens=record.prompt_tokens or sized_tokens,
            trial=trial,
            status="invalid",
            reason=drain_note,
        )
    first = record.first_token_s
    if first is None and record.chunk_s:
        first = record.chunk_s[0]
    usage_only = record.error is not None and record.error.startswith("usage-only")
    if (record.error is not None and not usage_only) or first is None:
        return PrefillSample(
            context_label=label,
            prompt_tokens=record.prompt_tokens or sized_tokens,
            trial=trial,
            status="invalid",
            reason=record.error or "no token received",
        )
    ttft = first - record.ttft_from_s
    tokens = record.prompt_tokens or sized_tokens
    return PrefillSample(
        context_label=label,
        prompt_tokens=tokens,
        trial=trial,
        status="valid",
        ttft_s=ttft,
        prefill_tok_s=tokens / ttft if ttft > 0 else None,
    )


def aggregate(results: Results) -> tuple[CellAggregate, ...]:
    groups: dict[tuple[str, int], list[CellResult]] = {}
    for c in results.cells:
        if c.status == "valid" and c.figures is not None:
            groups.setdefault((c.context_label, c.concurrency), []).append(c)
    out = []
    for (label, conc), cells in groups.items():
        figs = [c.figures for c in cells if c.figures is not None]
        out.append(
            CellAggregate(
                context_label=label,
                concurrency=conc,
                trials=len(figs),
                total_tok_s=estimate([f.total_tok_s for f in figs]),
                per_request_tok_s=estimate([f.per_request_tok_s for f in figs]),
                ttft_s=estimate([f.ttft_s for f in figs]),
                tbt_s=estimate([f.tbt_s for f in figs]),
            )
        )
    return tuple(out)


def _extras(info: ServerInfo) -> dict[str, Any]:
    """The engine's own request fields (llama.cpp: per-token timings)."""
    return dict(ENGINES[info.engine].request_extras) if info.engine is not None else {}


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)
