"""`bench run --workload`: the workload's points, in order, instead of the card's matrix.

Per trial and point: the warm-ups (their own prompts, not measured), then the point's
schedule sent as planned (bench.workload.runner), its requests' lines appended to
samples.jsonl and its schedule to schedule.jsonl, its figures (bench.workload.figures) in
results.json, saved after every point. Before the first point: the warm-up request, the
answer fingerprint and the line that sizes prompts (SweepRunner.before_workload). Between
points the server is given its drain (bench.run.cell's) so a point's cancelled requests do
not sit beside the next one's.

Refused before anything is sent (exit 2): a workload whose longest drawn prompt plus its
output does not fit the server's max_model_len.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from bench.engines.detect import request_extras
from bench.errors import UsageError, validation_message
from bench.live.observer import LiveScope
from bench.results import Results
from bench.run import prompts, sweep
from bench.run.cell import CellStopped
from bench.run.outcome import sample_line
from bench.run.workload_text import TokenLine, WorkloadTexts
from bench.run_files import SAMPLES, SCHEDULE
from bench.workload import figures, runner
from bench.workload import slo as slo_rules
from bench.workload.schedule import Planned, longest_request, plan_point
from bench.workload_points import PointResult, WorkloadRun
from bench.workload_spec import Workload, load_workload

WARMUP_STREAMS = 8  # a rate point's warm-ups run as a closed loop of at most this many


def load(ref: str, rates: str | None, slo_text: str | None) -> WorkloadRun:
    """The workload `ref` (a preset or a file) with the command line's overrides: --rates
    and --slo. Any problem is one UsageError line."""
    workload = load_workload(ref)
    data = workload.model_dump()
    if rates is not None:
        if workload.arrivals.kind != "rate":
            raise UsageError(
                f"--rates applies to rate arrivals; {workload.name} has "
                f"{workload.arrivals.kind} arrivals"
            )
        data["arrivals"]["rates"] = [_rate(word) for word in rates.split(",") if word.strip()]
    if slo_text is not None:
        data["slo"] = slo_rules.parse(slo_text).model_dump()
    try:
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        raise UsageError(
            f"workload {workload.name} with --rates: {validation_message(exc)}"
        ) from None
    canonical = workload.model_dump_json().encode()
    return WorkloadRun(
        workload=workload, source=str(ref), sha256=hashlib.sha256(canonical).hexdigest()
    )


def _rate(word: str) -> float:
    text = word.strip().lower()
    try:
        value = float(text)
    except ValueError:
        raise UsageError(
            f"--rates {word!r} is not a rate", hint="e.g. --rates 1,4,16,inf"
        ) from None
    if math.isnan(value) or value <= 0:
        raise UsageError(f"--rates {word!r} must be above 0 (inf: every request at once)")
    return value


def check_fits(workload: Workload, max_model_len: int) -> None:
    """The longest request the workload can send (prompt and output) must fit."""
    top_in, top_out = longest_request(workload)
    if top_in + top_out > max_model_len:
        raise UsageError(
            f"workload {workload.name}: a prompt of up to {top_in:,} tokens and an output of "
            f"up to {top_out:,} exceed the server's max_model_len {max_model_len:,}",
            hint="lower the lengths (input_tokens, output_tokens, range_ratio) or use shorter data",
        )


async def measure(runner_: sweep.SweepRunner, results: Results) -> Results:
    """Every point of every trial; results.json saved after each."""
    assert results.workload is not None
    workload = results.workload.workload
    results, line = await runner_.before_workload(results)
    wl = results.workload
    assert wl is not None
    results = results.model_copy(
        update={"workload": wl.model_copy(update={"tokens_per_word": round(line[1], 6)})}
    )
    sweep.save(runner_.rundir, results)
    chosen = chosen_points(workload, results.settings.points)
    for trial in range(results.settings.trials):
        for point in chosen:
            step = PointStep(workload, point=point, trial=trial, index=point)
            got = await measure_point(runner_, results, step, line)
            wl = results.workload
            assert wl is not None
            results = results.model_copy(
                update={"workload": wl.model_copy(update={"points": (*wl.points, got)})}
            )
            sweep.save(runner_.rundir, results)
    return results.model_copy(update={"state": "complete"})


def chosen_points(workload: Workload, labels: tuple[str, ...]) -> tuple[int, ...]:
    """The indices of the workload's points named by LABELS (`Arrivals.labels`), in the
    workload's order; every point when none is named. UsageError for a label the workload
    has no point of."""
    names = workload.arrivals.labels()
    if not labels:
        return tuple(range(len(names)))
    unknown = [w for w in labels if w not in names]
    if unknown:
        raise UsageError(
            f"--points {unknown[0]!r}: workload {workload.name} has no such point",
            hint=f"its points: {' '.join(names)}",
        )
    return tuple(i for i, name in enumerate(names) if name in labels)


def _bodies(
    results: Results, texts: list[str], planned: list[Planned], ignore_eos: bool
) -> list[bytes]:
    s, info = results.settings, results.server
    extras: dict[str, Any] = request_extras(info)
    out = []
    for text, p in zip(texts, planned, strict=True):
        body = prompts.request_body(s.api, info.model, text, p.output_tokens, extras)
        body["ignore_eos"] = ignore_eos
        out.append(json.dumps(body).encode())
    return out


@dataclass(frozen=True)
class PointStep:
    """One point to measure: drawn from `workload`'s point `point` (its rates' or
    concurrencies' index) in trial `trial`, recorded as the run's point `index`."""

    workload: Workload
    point: int
    trial: int
    index: int


async def measure_point(
    runner_: sweep.SweepRunner, results: Results, step: PointStep, line: TokenLine
) -> PointResult:
    """One point: drain, warm-ups, its schedule sent, its lines written, its figures."""
    s, speed = results.settings, results.server.speed_factor
    workload, point, trial = step.workload, step.point, step.trial
    texts = WorkloadTexts(workload, point, trial, line)
    name = f"point {step.index + 1}" + (f" trial {trial + 1}" if s.trials > 1 else "")
    runner_.progress.note("workload_point", point=step.index + 1, trial=trial + 1)
    try:  # alone on the server: the previous point's cancelled requests may linger
        await runner_.server.drain(*runner_.drain_timing(s.readiness_hold_s, speed))
    except CellStopped as exc:
        runner_.progress.note("drain_failed", reason=str(exc))
    scope = LiveScope("point", trial, point=step.index)
    with runner_.live.unit(scope):  # the point's requests carry its scope
        warm = plan_point(workload, point, trial, warmup=True)
        if warm:
            warm_texts = [texts.text(p, "warmup") for p in warm]
            with runner_.live.phase(LiveScope("warmup", trial, point=step.index)):
                await _send(runner_, results, step, warm, warm_texts, warmup=True)
        planned = plan_point(workload, point, trial)
        text = [texts.text(p) for p in planned]
        runner_.rundir.append(SCHEDULE, [
            {"point": step.index, "trial": trial, "index": p.index, "at_s": round(p.at_s, 9),
             "input_tokens": p.input_tokens, "output_tokens": p.output_tokens, "group": p.group,
             "prompt_sha256": hashlib.sha256(t.encode()).hexdigest()}
            for p, t in zip(planned, text, strict=True)
        ])  # fmt: skip
        started = runner_.clock() - runner_.anchor_s
        run = await _send(runner_, results, step, planned, text, warmup=False)
    runner_.rundir.append(SAMPLES, _lines(runner_, run, step.index, trial))
    a = workload.arrivals
    rate = a.rates[point] if a.kind == "rate" else None
    got = figures.point_result(
        run, planned, index=step.index, trial=trial,
        offered_rate=None if rate is None else rate * speed,
        concurrency=a.concurrencies[point] if a.kind == "closed-count" else None,
        slo=workload.slo, speed=speed, ignore_eos=workload.lengths.ignore_eos,
        warmups=len(warm), started_at_s=started,
    )  # fmt: skip
    runner_.progress.note(
        "workload_point_measured", point=name, status=got.status,
        completed=got.completed, requests=got.requests,
        output_tok_s=round(got.output_tok_s / speed, 3),
    )  # fmt: skip
    runner_.live.unit_finished(scope, got.status)
    return got


async def _send(
    runner_: sweep.SweepRunner,
    results: Results,
    step: PointStep,
    planned: list[Planned],
    texts: list[str],
    *,
    warmup: bool,
) -> runner.PointRun:
    """`planned` sent: warm-ups as a closed loop, measured requests by the workload's
    arrivals."""
    s, speed = results.settings, results.server.speed_factor
    a = step.workload.arrivals
    bodies = _bodies(results, texts, planned, step.workload.lengths.ignore_eos)
    client, path = runner_.server.client, prompts.endpoint(s.api)
    clock, bound_s = runner_.clock, s.request_timeout_s
    if a.kind == "closed-count" or warmup:
        streams = a.concurrencies[step.point] if a.kind == "closed-count" else WARMUP_STREAMS
        return await runner.run_closed(client, path, bodies, streams, clock=clock, bound_s=bound_s)
    return await runner.run_open(
        client, path, bodies, [p.at_s for p in planned], speed=speed,
        cap=a.max_in_flight, clock=clock, bound_s=bound_s,
    )  # fmt: skip


def _lines(
    runner_: sweep.SweepRunner, run: runner.PointRun, point: int, trial: int
) -> list[dict[str, object]]:
    """samples.jsonl's lines of a point's sent requests (times from the point's start)."""
    lines = []
    for i, r in enumerate(run.records):
        if math.isnan(r.start_s):
            continue
        due = None if math.isnan(run.due_s[i]) else round(run.due_s[i] - run.t0_s, 6)
        line = sample_line(
            "workload", str(point), r.worker, trial, r,
            origin_s=run.t0_s, anchor_s=runner_.anchor_s, anchor_unix_s=runner_.anchor_unix_s,
        )  # fmt: skip
        lines.append({**line, "index": i, "due_s": due})
    return lines
