"""The sweep: per trial and context row, size the prompt, scout prefill, run the cells.

Server-time settings (window, readiness hold, time-outs) are divided by the speed
factor here, once; everything below works in client seconds.

Every step has a bound (docs/faults.md, "Bounds"), beside each request's own read
time-out: a cell its `CellTiming.budget_s` (bench.run.cell); the warm-up request and the
two sizing probes `_single_bound_s`; the prefill scout twice the readiness time-out of a
cell of one request at its context; counting a cell's tokens through /tokenize afterwards
TOKENIZE_AFTER_CELL_S. A scout or probe past its bound fails as a request does (the row's
prefill sample is `invalid` with the reason); a cell whose tokens could not be counted in
time is `invalid`; the sweep goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench import writes
from bench.engines.detect import request_extras
from bench.errors import BenchError, Interrupted, ServerUnreachable
from bench.failures import ErrorKind
from bench.host import telemetry
from bench.live.observer import LiveMetrics, LiveScope
from bench.results import CellResult, PlannedCell, PlannedContext, PrefillSample, Results
from bench.run import card_tables, fingerprint, gpu_validity, outcome, prompts, resume
from bench.run.cell import CellStopped, CellTiming, ServerView, run_cell
from bench.run.launch_paths import LaunchPaths
from bench.run.presize import Presizer
from bench.run.progress import SweepProgress
from bench.run.rundir import RunDir
from bench.run.workload_text import TokenLine
from bench.run_files import METRICS, SAMPLES, TABLES
from bench.stream import tokens
from bench.stream.client import Clock
from bench.stream.records import RequestRecord

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
# Client seconds for counting one cell's streamed text through /tokenize after its window.
TOKENIZE_AFTER_CELL_S = 300.0


@dataclass
class SweepRunner:
    server: ServerView
    rundir: RunDir
    progress: SweepProgress
    anchor_s: float  # clock reading at the run's wall-clock anchor
    anchor_unix_s: float = 0.0  # the anchor as Unix time (time.time())
    # nvidia-smi telemetry over every window (None without a GPU): gpu_telemetry.jsonl.
    gpu_sampler: telemetry.GpuSampler | None = None
    launch: LaunchPaths = field(default_factory=LaunchPaths)  # its paths get a fingerprint prompt
    live: LiveMetrics = field(default_factory=LiveMetrics)  # --otel-url, --metrics-port
    _presize: Presizer = field(init=False)
    _warmed_up: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        server = self.server
        scrape = server.scrape if server.has_metrics else None
        self._presize = Presizer(
            server.clock, server.sleep, scrape,
            client=server.client, single=self._single, note=self.progress.note,
        )  # fmt: skip

    @property
    def clock(self) -> Clock:
        return self.server.clock

    async def run(self, results: Results) -> Results:
        s = results.settings
        try:
            if s.fingerprint and results.fingerprint is None:
                results = await self._fingerprint(results)
            for trial in range(s.trials):
                for ctx in results.plan.contexts:
                    results = await self._row(results, ctx, trial)
        finally:
            await self._presize.aclose()
        return results.model_copy(
            update={"state": "complete", "aggregates": outcome.aggregate(results)}
        )

    async def before_workload(self, results: Results) -> tuple[Results, TokenLine]:
        """A workload run's start (bench.run.workload_run): the warm-up, the answer
        fingerprint (unless turned off) and the line that sizes its prompts, tokens = a + b x
        words (/tokenize where the server has it, else two probes' usage)."""
        try:
            if results.settings.fingerprint and results.fingerprint is None:
                results = await self._fingerprint(results)
            elif not self._warmed_up:
                await self._warm_up(results)
            line = await self._presize.word_line(results)
        finally:
            await self._presize.aclose()
        return results, line

    async def _row(self, results: Results, ctx: PlannedContext, trial: int) -> Results:
        """One context row of one trial: its prompt, its prefill scout, then its cells."""
        cells = [p for p in results.plan.cells if p.context_label == ctx.label]
        todo = [p for p in cells if results.cell(ctx.label, p.concurrency, trial) is None]
        scouted = any(p.context_label == ctx.label and p.trial == trial for p in results.prefill)
        if scouted and not todo:
            return results
        if ctx.scout_reason is not None:
            return self._not_run(results, ctx, trial, todo)
        prompt, tokens = await self._presize.prompt(results, ctx, trial)
        if not self._warmed_up:
            await self._warm_up(results)
        results, record = await self._scout(
            results, ctx, trial, prompt=prompt, tokens=tokens, scouted=scouted
        )
        prompt_tokens = record.prompt_tokens or tokens
        body = _body(results, prompt, ctx.max_tokens)
        for planned in todo:
            if planned.run:
                results = await self._cell(
                    results,
                    ctx,
                    trial,
                    c=planned.concurrency,
                    body=body,
                    prompt_tokens=prompt_tokens,
                )
                continue
            result = CellResult(
                context_label=ctx.label,
                prompt_tokens=prompt_tokens,
                concurrency=planned.concurrency,
                trial=trial,
                status="over_capacity",
                reason=planned.reason,
            )
            results = results.model_copy(update={"cells": (*results.cells, result)})
            save(self.rundir, results)
        return results

    async def _scout(
        self,
        results: Results,
        ctx: PlannedContext,
        trial: int,
        *,
        prompt: str,
        tokens: int,
        scouted: bool,
    ) -> tuple[Results, RequestRecord]:
        """The row's cold max_tokens=1 request: the prefill sample (unless the row has one
        already), and it warms the prefix cache for the row's cells."""
        s, info = results.settings, results.server
        # The scout must be alone on the server: the previous row's cancelled streams may
        # still run for a while (vLLM aborts them a few steps after the disconnect).
        try:
            drain_note = await self.server.drain(
                *self.drain_timing(s.readiness_hold_s, info.speed_factor)
            )
        except CellStopped as exc:  # a /metrics that stopped answering: no number from it
            drain_note = str(exc)
        record = RequestRecord(worker=0, start_s=self.clock())
        scout_body = _body(results, prompt, 1)
        bound_s = 2 * _ready_timeout_s(1, tokens, info.speed_factor)
        async with self._presize.scout(record, tokens, self._presize.ahead(results, ctx, trial)):
            with self.live.phase(LiveScope("scout", trial, cell=ctx.label)):
                await self._bounded(results, scout_body, record, bound_s, "the prefill scout")
        if scouted:
            return results, record
        sample = outcome.scout_sample(record, ctx.label, trial, tokens, drain_note)
        results = results.model_copy(update={"prefill": (*results.prefill, sample)})
        line = self._sample_line("prefill", ctx.label, 1, trial, record, origin_s=self.anchor_s)
        self.rundir.append(SAMPLES, [line])
        save(self.rundir, results)
        self.progress.note(
            "prefill_measured",
            context=ctx.label,
            status=sample.status,
            prefill_tok_s=None  # at server speed, like the tables
            if sample.prefill_tok_s is None
            else round(sample.prefill_tok_s / info.speed_factor),
            reason=sample.reason,
            trial=trial + 1,
        )
        return results, record

    async def _cell(
        self,
        results: Results,
        ctx: PlannedContext,
        trial: int,
        *,
        c: int,
        body: dict[str, Any],
        prompt_tokens: int,
    ) -> Results:
        """One decode cell: measured, its raw lines appended, results saved."""
        s, speed = results.settings, results.server.speed_factor
        name = f"{ctx.label} x {c}" + (f" trial {trial + 1}" if s.trials > 1 else "")
        timing = CellTiming(
            window_s=s.duration_s / speed,
            hold_s=s.readiness_hold_s / speed,
            ready_timeout_s=_ready_timeout_s(c, prompt_tokens, speed),
            drain_timeout_s=_DRAIN_TIMEOUT_S / speed + 5.0,
            sample_every_s=1.0 / speed,
        )
        self.progress.cell_started(name)
        scope = LiveScope("cell", trial, cell=f"{ctx.label}:{c}")
        window_gpu: list[telemetry.GpuSample] = []
        try:
            with self.live.unit(scope):  # the cell's workers carry its scope
                run = await run_cell(
                    self.server, prompts.endpoint(s.api), body, c, timing,
                    progress=self.progress.update, on_window=self._gpu_window(window_gpu),
                )  # fmt: skip
        finally:
            if self.gpu_sampler is not None:
                window_gpu += self.gpu_sampler.stop()  # also when the window was cut short
        # Text kept for the tokenizer is counted now, the window over (bench.stream.tokens).
        counted = None
        try:
            async with asyncio.timeout(TOKENIZE_AFTER_CELL_S):
                counted = await tokens.attribute(run.records, self.server.tokenize)
        except TimeoutError:
            run.stopped = run.stopped or (
                f"counting the cell's tokens through /tokenize did not finish within "
                f"{TOKENIZE_AFTER_CELL_S:g} s"
            )
        result = outcome.cell_result(
            run, ctx.label, prompt_tokens, trial, started_at_s=run.t0_s - self.anchor_s,
            max_tokens=ctx.max_tokens,
        )  # fmt: skip
        result = outcome.with_token_source(
            result, counted or tokens.run_source(self.server.client.counting)
        )
        if self.gpu_sampler is not None:
            window = telemetry.append_window(
                self.rundir.path / telemetry.GPU_TELEMETRY_NAME, context_label=ctx.label,
                concurrency=c, trial=trial, samples=window_gpu,
                output_tokens=result.figures.output_tokens if result.figures else None,
            )  # fmt: skip
            result = result.model_copy(update={"gpu": gpu_validity.cell_gpu(window.telemetry)})
        self.rundir.append(
            SAMPLES,
            [
                self._sample_line("decode", ctx.label, c, trial, r, origin_s=run.t0_s)
                for r in run.records
            ],
        )
        self.rundir.append(METRICS, outcome.metrics_lines(run, ctx.label, trial, self.anchor_s))
        results = results.model_copy(update={"cells": (*results.cells, result)})
        results = gpu_validity.judged(results)  # the run's steady clocks moved: all cells
        results = results.model_copy(update={"aggregates": outcome.aggregate(results)})
        save(self.rundir, results)
        shown = result.figures.at_server_speed(speed) if result.figures else None
        self.progress.cell_finished(name, result, shown.total_tok_s if shown else None)
        self.live.unit_finished(scope, result.status)
        return results

    def _sample_line(
        self, phase: str, label: str, c: int, trial: int, r: RequestRecord, *, origin_s: float
    ) -> dict[str, object]:
        return outcome.sample_line(
            phase, label, c, trial, r,
            origin_s=origin_s, anchor_s=self.anchor_s, anchor_unix_s=self.anchor_unix_s,
        )  # fmt: skip

    async def measure(
        self,
        results: Results,
        how: Callable[[SweepRunner, Results], Awaitable[Results]] | None = None,
    ) -> Results:
        """`run` (or `how`: a workload's points, bench.run.workload_run.measure); when it
        stops early, results.json says how: `failed` (the cells a vanished server cut
        marked `interrupted`, for --resume to measure again) or `interrupted`."""
        rundir = self.rundir
        try:
            results = await (self.run(results) if how is None else how(self, results))
            if resume.cut_at_the_end(results):
                # The last cells failed at the transport level: did the server go away?
                await self.server.client.get("/v1/models")  # ServerUnreachable if so
        except ServerUnreachable:
            # What the crash cut is marked `interrupted`: --resume measures it again.
            save(rundir, resume.mark_cut(rundir.load()).model_copy(update={"state": "failed"}))
            raise
        except BenchError:
            save(rundir, rundir.load().model_copy(update={"state": "failed"}))
            raise
        except asyncio.CancelledError:
            save(rundir, rundir.load().model_copy(update={"state": "interrupted"}))
            raise Interrupted(
                f"interrupted; finished cells are in {rundir.path}",
                hint=f"continue with: bench run --resume {rundir.path}",
            ) from None
        return results

    async def _bounded(
        self, results: Results, body: dict[str, Any], record: RequestRecord, bound_s: float,
        what: str,
    ) -> None:  # fmt: skip
        """One request of the sweep's own (warm-up, probe, scout), failed on its record when
        it has not ended within `bound_s` (a server that streams on and on makes progress,
        so the read time-out alone would never end it), or when its usage.prompt_tokens
        cannot be true (`_served_prompt`)."""
        try:
            async with asyncio.timeout(bound_s):
                await self.server.client.stream(
                    prompts.endpoint(results.settings.api), body, record
                )
        except TimeoutError:
            record.cancelled = False
            record.fail(ErrorKind.TIMEOUT, f"{what} did not end within {bound_s:.0f} s")
        _served_prompt(record, results.server.max_model_len)

    async def _single(
        self, results: Results, text: str, max_tokens: int, what: str
    ) -> RequestRecord:
        """One request of the sweep's own outside a row's scout and cells (the warm-up, a
        sizing probe), within `_single_bound_s`."""
        record = RequestRecord(worker=0, start_s=self.clock())
        body = _body(results, text, max_tokens)
        await self._bounded(results, body, record, self._single_bound_s(results), what)
        return record

    def _single_bound_s(self, results: Results) -> float:
        """The bound of the warm-up request and of a sizing probe, in client seconds."""
        return 2 * _READY_BASE_S / results.server.speed_factor + 30.0

    @staticmethod
    def drain_timing(hold_s: float, speed: float) -> tuple[float, float]:
        """(time-out, poll) of a drain barrier in client seconds, the same as a cell's."""
        hold_s /= speed
        return _DRAIN_TIMEOUT_S / speed + 5.0, max(0.01, min(0.25, hold_s / 6))

    async def _warm_up(self, results: Results) -> None:
        """One short request before the first scout of this sweep (a resumed run's server
        may be freshly started too); whatever it measures is not used."""
        self._warmed_up = True
        s = results.settings
        text = prompts.PromptText(results.run_id, -1, WARMUP_LABEL, s.seed).text(WARMUP_WORDS)
        record = await self._single(results, text, WARMUP_MAX_TOKENS, "the warm-up request")
        self.progress.note(
            "warm_up",
            tokens=record.tokens,
            seconds=round(self.clock() - record.start_s, 6),
            error=record.error,
        )

    async def _fingerprint(self, results: Results) -> Results:
        """What the server answers (bench.run.fingerprint), after the warm-up and before
        the first row; each answer bounded as a scout of its prompt is."""
        if not self._warmed_up:
            await self._warm_up(results)
        speed = results.server.speed_factor
        found = await fingerprint.FingerprintProbe(
            self.server.client, self._presize, self.clock,
            lambda tokens: 2 * _ready_timeout_s(1, tokens, speed), launch=self.launch,
        ).take(results)  # fmt: skip
        results = results.model_copy(update={"fingerprint": found})
        save(self.rundir, results)
        answered = sum(a.status == "answered" for a in found.answers)
        self.progress.note(
            "answers_fingerprinted", answered=answered, prompts=len(found.answers),
            requests=found.requests, seconds=round(found.seconds, 6),
        )  # fmt: skip
        return results

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
        save(self.rundir, results)
        self.progress.note("prefill_not_run", context=ctx.label, reason=ctx.scout_reason)
        return results


def _served_prompt(record: RequestRecord, max_model_len: int) -> None:
    """The server's usage.prompt_tokens for one of our prompts is kept only when it could be
    true: at least 1, and at most max_model_len (a server that accepted the prompt counted no
    more). Otherwise the record fails as implausible and the count is dropped, so that no
    figure, prompt size or time-out is drawn from it: the sweep then uses its own count. A
    count of 11,750,101 for a 256-token prompt stretched a cell's readiness time-out from
    1.2 s to 60 s (the fuzzer's find, issue 29)."""
    n = record.prompt_tokens
    if n is None or 0 < n <= max_model_len:
        return
    record.prompt_tokens = None
    if record.failure is None:
        record.fail(
            ErrorKind.IMPLAUSIBLE_USAGE,
            f"implausible usage: prompt_tokens {n:,} for a server whose max_model_len is "
            f"{max_model_len:,}",
        )


def _ready_timeout_s(c: int, prompt_tokens: int, speed: float) -> float:
    """A cell's readiness time-out in client seconds: it grows with the tokens to prefill."""
    return (_READY_BASE_S + c * prompt_tokens / _READY_PREFILL_TOK_S) / speed


def save(rundir: RunDir, results: Results) -> None:
    """The run's results on disk: results.json and the INCOMPLETE marker (RunDir.save),
    then tables.md rendered from them. Every save of a run goes through here, so the
    tables always show the results.json beside them."""
    rundir.save(results)
    writes.write_atomic(rundir.path / TABLES, card_tables.render(results) + "\n")


def _body(results: Results, text: str, max_tokens: int) -> dict[str, Any]:
    """A request of this run (its API and model, the engine's own fields)."""
    s, info = results.settings, results.server
    return prompts.request_body(s.api, info.model, text, max_tokens, request_extras(info))


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)
