"""`bench run`: measure a server the way the published card was measured.

Defaults are the card's parameters: decode contexts 8K..256K (256K is trimmed to fit
and shown as 251K), prefill-only 256K, C = 1..128, 30 s windows, 4,096 output tokens.
The API key comes from the environment only (BENCH_API_KEY or VLLM_API_KEY).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import signal
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from bench import __version__, escape, run_files
from bench.errors import Interrupted, UsageError
from bench.host import environment, telemetry
from bench.live import span_join
from bench.live.flags import open_live, open_receiver
from bench.live.observer import LiveMetrics, LiveRun
from bench.results import KvCapacity, Measurement, Plan, Results, RunSettings, ServerInfo
from bench.run import launch_paths, options, plan, resume, slo_capacity, sweep, workload_run
from bench.run.capacity import kv_capacity
from bench.run.cell import ServerView
from bench.run.progress import SweepProgress
from bench.run.rundir import RunDir
from bench.run.server_info import detect, engine_setup
from bench.settings import Settings
from bench.stream import event_loop, tokens
from bench.stream.client import Client
from bench.stream.traceparent import SentTraces
from bench.stream.urls import check_url
from bench.workload_points import WorkloadRun

if TYPE_CHECKING:
    from bench.live.span_receiver import SpanReceiver


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run the benchmark sweep against a server",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    options.add_arguments(p)
    p.set_defaults(func=handle, run_parser=p)
    c = sub.add_parser(
        "capacity",
        help="find the highest rate (or concurrency) a server serves within an SLO",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    options.add_arguments(c)
    slo_capacity.add_arguments(c)
    c.set_defaults(func=handle, run_parser=c, capacity=True)


def handle(args: argparse.Namespace, settings: Settings) -> int:
    try:
        with asyncio.Runner(loop_factory=event_loop.factory()) as runner:
            return runner.run(_main(args, settings))
    except asyncio.CancelledError:
        raise Interrupted("interrupted before the sweep started") from None


async def _main(args: argparse.Namespace, settings: Settings) -> int:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    rundir, previous, run_settings = _open_rundir(args)
    sent = SentTraces()
    live = LiveMetrics()
    try:
        # --otel-url, --metrics-port, --otlp-traces-port: their libraries and ports, before
        # anything is measured.
        live = open_live(args)
        receiver = open_receiver(args, sent)
    except BaseException:
        live.close()
        rundir.unlock()
        raise
    # Every secret the run knows, masked in all that either server answers (issue 48).
    masks = settings.known_secrets(os.environ)
    tokenizer_client = (
        Client(  # the server's key goes to the server only (issue 29, S2)
            args.tokenizer_url,
            settings.tokenizer_api_key,
            clock=time.perf_counter,
            ca_file=settings.ca_file,
            secrets=masks,
        )
        if args.tokenizer_url
        else None
    )
    client = Client(
        run_settings.url,
        settings.api_key,
        clock=time.perf_counter,
        read_timeout_s=run_settings.request_timeout_s,
        ca_file=settings.ca_file,
        secrets=masks,
    )
    client.traces = sent  # remembered when the receiver listens
    if live:
        client.on_finished = live.request_finished
    try:
        return await _run(
            args,
            settings,
            client,
            rundir,
            previous=previous,
            run_settings=run_settings,
            tokenizer_client=tokenizer_client,
            live=live,
            receiver=receiver,
        )
    finally:
        live.close()  # the last export, bounded (bench.live.otel)
        if receiver is not None:
            receiver.close()
        await client.aclose()
        if tokenizer_client is not None:
            await tokenizer_client.aclose()
        rundir.unlock()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _open_rundir(args: argparse.Namespace) -> tuple[RunDir, Results | None, RunSettings]:
    """The run's directory, the run it continues (--resume: locked, then read) and the
    settings it runs with."""
    if args.resume is None:
        run_settings = options.settings_from(args)
        out = args.out or Path("results") / dt.datetime.now(dt.UTC).strftime("run-%Y%m%d-%H%M%S")
        return RunDir(out), None, run_settings
    options.only_url_with_resume(args)
    new_url = check_url(args.url) if args.url else None  # before anything is read
    rundir = RunDir(args.resume)
    if args.resume.is_dir():
        rundir.lock()  # before reading it: a run still writing it is refused
    previous = rundir.load()
    run_settings = previous.settings
    if args.url:
        run_settings = run_settings.model_copy(update={"url": new_url})
    return rundir, previous, run_settings


def _check_points(
    workload: WorkloadRun | None,
    searching: slo_capacity.SearchOptions | None,
    run_settings: RunSettings,
) -> None:
    """--points names points the workload has, and only for a sweep (UsageError)."""
    if workload is not None:
        workload_run.chosen_points(workload.workload, run_settings.points)
    if searching is not None and run_settings.points:
        raise UsageError("--points selects a sweep's points; a capacity search picks its own")


async def _run(
    args: argparse.Namespace,
    settings: Settings,
    client: Client,
    rundir: RunDir,
    *,
    previous: Results | None,
    run_settings: RunSettings,
    tokenizer_client: Client | None,
    live: LiveMetrics,
    receiver: SpanReceiver | None = None,
) -> int:
    """Detect the server, plan, then measure into `rundir` (new, or the run resumed)."""
    clock = time.perf_counter
    # A workload's problems are said before the server is asked anything.
    workload, searching = slo_capacity.prepared(args)
    _check_points(workload, searching, run_settings)  # said before the server is asked
    if previous is not None and previous.workload is not None:
        raise UsageError(
            f"{rundir.path} is a workload run, and a workload run cannot be resumed",
            hint="run the workload again into a new --out",
        )
    info, snapshot, engine_kv = await detect(
        client, model=run_settings.model, speed_factor=run_settings.speed_factor, now_s=clock()
    )
    if previous is not None:
        resume.check_same_server(previous, info, str(rundir.path))
    kv = kv_capacity(snapshot, run_settings.kv_budget_tokens, args.server_log, engine_kv)
    if previous is not None:
        resume.check_same_capacity(previous, kv, info.url, str(rundir.path))
    info, engine_parse, tokenize = await engine_setup(client, info, kv, engine_kv, tokenizer_client)
    sizing = "tokenize" if info.has_tokenize else "usage_calibrated"
    if workload is not None:
        workload_run.check_fits(workload.workload, info.max_model_len)
        workload = workload.model_copy(update={"prompt_sizing": sizing})
    the_plan = plan.make_plan(run_settings, info, kv, prompt_sizing=sizing)
    # The model id and version are the server's words: no control character reaches the
    # terminal raw (issue 29, M3).
    shown = plan.render(the_plan, info, run_settings, workload).splitlines()
    print("\n".join(escape.terminal(line) for line in shown), flush=True)
    anchor_s, anchor_unix_s = clock(), time.time()
    if previous is None:
        rundir.create()
        results = _new_results(run_settings, info, kv, the_plan, client)
        results = results.model_copy(update={"workload": workload})
    else:
        # Finished entries are kept as they are; `interrupted` ones are measured again.
        results, finished = resume.carry_on(previous)
        results = results.model_copy(update={"plan": the_plan, "server": info})
        rundir.keep_only(finished)
    sweep.save(rundir, results)
    if receiver is not None:
        receiver.write_to(rundir.path)  # server_spans.jsonl, from now on
    if not (rundir.path / environment.ENVIRONMENT_NAME).exists():
        # Where this ran: the server's launch from /proc when it is local, GPUs, host.
        found = environment.capture(
            settings,
            now=dt.datetime.now(dt.UTC),
            server_port=environment.local_port(run_settings.url),
            vllm_version=info.version,
            twin="twin" in info.version_payload,
        )
        environment.write(rundir.path, found)
    # The paths the launch promises (a reasoning parser, tool calls) get a fingerprint prompt.
    launch = launch_paths.from_argv(environment.launch_argv_of(rundir.path))
    todo = sum(
        p.run and results.cell(p.context_label, p.concurrency, t) is None
        for p in the_plan.cells
        for t in range(run_settings.trials)
    )
    progress = SweepProgress(
        clock,
        total_cells=todo,
        estimated_s=the_plan.estimated_duration_s,
        speed_factor=info.speed_factor,
    )
    runner = sweep.SweepRunner(
        server=ServerView(
            client,
            clock,
            sweep.sleep,
            has_metrics=info.has_metrics,
            parse=engine_parse,
            tokenize=tokenize,
        ),
        rundir=rundir,
        progress=progress,
        anchor_s=anchor_s,
        anchor_unix_s=anchor_unix_s,
        gpu_sampler=sampler if (sampler := telemetry.GpuSampler()).available else None,
        launch=launch,
        live=live,
    )
    if live:
        live.run_started(_live_run(results, todo, progress, capacity=searching is not None))
    results = await _measure(runner, results, searching)
    if receiver is not None:
        results = await _join_spans(receiver, rundir, results, args.otlp_traces_wait)
    sweep.save(rundir, results)
    print(f"results: {rundir.path}", flush=True)
    tables = (rundir.path / "tables.md").read_text().splitlines()
    print("\n".join(escape.terminal(line) for line in tables), flush=True)
    return 0


async def _measure(
    runner: sweep.SweepRunner, results: Results, searching: slo_capacity.SearchOptions | None
) -> Results:
    """The sweep: a capacity search, a workload's points, or the card's cells."""
    if searching is not None:
        opts = searching

        async def search(r: sweep.SweepRunner, res: Results) -> Results:
            return await slo_capacity.measure(r, res, opts)

        return await runner.measure(results, search)
    if results.workload is not None:
        return await runner.measure(results, workload_run.measure)
    return await runner.measure(results)


async def _join_spans(
    receiver: SpanReceiver, rundir: RunDir, results: Results, wait_s: float
) -> Results:
    """The server's spans joined to the run's requests (bench.live.span_join), after
    waiting at most `wait_s` for those of completed requests still to come; said once."""
    samples = rundir.path / run_files.SAMPLES
    requests = await asyncio.to_thread(span_join.read_requests, samples)
    wanted = {r.trace_id for r in requests if r.completed}
    if wait_s > 0 and wanted:
        await asyncio.to_thread(receiver.wait_for, wanted, wait_s)
    counts = await asyncio.to_thread(receiver.close)
    spans = await asyncio.to_thread(span_join.read_spans, rundir.path / run_files.SERVER_SPANS)
    joined = span_join.join(
        requests, spans, endpoint=receiver.endpoint, kept=counts.kept, dropped=counts.dropped
    )
    note = joined.note or ""
    if receiver.write_error is not None:
        note = f"{note}; {receiver.write_error}"
        joined = joined.model_copy(update={"note": note})
    print(escape.terminal(note), flush=True)
    return results.model_copy(update={"server_spans": joined})


def _live_run(results: Results, cells: int, progress: SweepProgress, *, capacity: bool) -> LiveRun:
    """What the live metrics say the run is (bench.live.observer.LiveRun): its cells, or a
    workload's points (a capacity search's are not known ahead)."""
    s, info = results.settings, results.server
    units: int | None = cells
    if results.workload is not None:
        points = len(results.workload.workload.arrivals.points())
        units = None if capacity else s.trials * points
    url = urlsplit(s.url)
    return LiveRun(
        run_id=results.run_id,
        model=info.model,
        provider=info.engine or "unknown",
        api=s.api,
        server_address=url.hostname or "",
        server_port=url.port or (443 if url.scheme == "https" else 80),
        units_total=units,
        eta_s=progress.eta_s if progress.estimated_s > 0 else None,
        elapsed_s=progress.elapsed_s,
    )


def _new_results(
    run_settings: RunSettings, info: ServerInfo, kv: KvCapacity, the_plan: Plan, client: Client
) -> Results:
    """A new run's results.json before its first measurement."""
    return Results(
        bench_version=__version__,
        run_id=uuid.uuid4().hex[:12],
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        settings=run_settings,
        server=info,
        plan=the_plan,
        measurement=Measurement(
            active_source="server_metrics" if info.has_metrics else "client_in_flight",
            prompt_sizing=the_plan.prompt_sizing,
            kv_source=kv.source,
            metrics_available=info.has_metrics,
            read_times=client.read_times,
            ttft_from="request_written",
            output_tokens_from=tokens.run_source(client.counting),
        ),
    )
