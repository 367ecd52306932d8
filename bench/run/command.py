"""`bench run`: measure a server the way the published card was measured.

Defaults are the card's parameters: decode contexts 8K..256K (256K is trimmed to fit
and shown as 251K), prefill-only 256K, C = 1..128, 30 s windows, 4,096 output tokens.
The API key comes from the environment only (BENCH_API_KEY or VLLM_API_KEY).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import math
import signal
import time
import uuid
from pathlib import Path

from bench import __version__
from bench.errors import Interrupted, UsageError
from bench.host import environment, telemetry
from bench.results import KvCapacity, Measurement, Plan, Results, RunSettings, ServerInfo
from bench.run import plan, resume, sweep
from bench.run.capacity import kv_capacity
from bench.run.cell import Server
from bench.run.plan import PUBLISHED_CONCURRENCIES, PUBLISHED_CONTEXTS, PUBLISHED_PREFILL_ONLY
from bench.run.progress import SweepProgress
from bench.run.rundir import RunDir
from bench.run.server_info import detect, engine_setup
from bench.settings import Settings
from bench.stream import event_loop, tokens
from bench.stream.client import Client
from bench.stream.urls import check_url


def parse_tokens(text: str) -> int:
    """ "8K" -> 8192 (K = 1024), "1000" -> 1000."""
    t = text.strip().upper()
    try:
        value = int(t[:-1]) * 1024 if t.endswith("K") else int(t)
    except ValueError:
        raise UsageError(f"{text!r} is not a context size", hint="write e.g. 8K or 8192") from None
    if value <= 0:
        raise UsageError(f"context {text!r} must be positive")
    return value


def _split(values: list[str]) -> list[str]:
    return [v for item in values for v in item.split(",") if v.strip()]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run the benchmark sweep against a server",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--url",
        default=None,
        help="server base URL, http(s)://host:port (when not given: http://127.0.0.1:8000); no "
        "user:password@ in it: the API key comes from VLLM_API_KEY or BENCH_API_KEY",
    )
    p.add_argument("--model", default=None, help="served model (when not given: the first listed)")
    p.add_argument("--api", choices=("chat", "completions"), default="chat", help="API to use")
    p.add_argument(
        "--contexts",
        nargs="*",
        default=list(PUBLISHED_CONTEXTS),
        metavar="N",
        help="decode contexts in tokens (8K = 8192)",
    )
    p.add_argument(
        "--prefill-only-contexts",
        nargs="*",
        default=list(PUBLISHED_PREFILL_ONLY),
        metavar="N",
        help="contexts measured by the prefill scout only",
    )
    p.add_argument(
        "--concurrencies",
        nargs="+",
        default=list(PUBLISHED_CONCURRENCIES),
        metavar="C",
        help="requests at once, per decode cell",
    )
    p.add_argument(
        "--cells",
        nargs="*",
        default=[],
        metavar="CTX:C",
        help="measure only these decode cells of the matrix above, e.g. 8K:64 (their rows' "
        "prefill scouts run too); a sequential compare gives them to trials after its first",
    )
    p.add_argument("--duration", type=float, default=30.0, help="window, server seconds")
    p.add_argument("--max-tokens", type=int, default=4096, help="output tokens per request")
    p.add_argument("--trials", type=int, default=1, help="times the whole sweep is measured")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="new or empty output directory (when not given: results/run-UTC)",
    )
    p.add_argument(
        "--kv-budget",
        type=int,
        default=None,
        help="KV capacity in tokens; wins over every capacity the server reports",
    )
    p.add_argument(
        "--server-log",
        type=Path,
        default=None,
        metavar="PATH",
        help='the server\'s log: its "KV cache size: N tokens" line is a capacity source',
    )
    p.add_argument(
        "--tokenizer-url",
        default=None,
        metavar="URL",
        help="a server whose /tokenize counts this model's tokens (llama.cpp's, vLLM's or "
        "SGLang's), for an engine that sends no per-chunk counts (docs/engines.md)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue a run (only --url may be given)",
    )
    p.add_argument(
        "--speed-factor",
        type=float,
        default=None,
        help="the server runs N x real time (when not given: /version 'speed', else 1)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts' filler text")
    p.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        help="seconds a request may go without a byte, or without a token, before it fails",
    )
    p.set_defaults(func=handle, run_parser=p)


def _finite(args: argparse.Namespace) -> None:
    """nan and inf pass every `<= 0` check: refuse them by name."""
    for name in ("duration", "speed_factor", "request_timeout"):
        value = getattr(args, name)
        if value is not None and not math.isfinite(value):
            flag = "--" + name.replace("_", "-")
            raise UsageError(
                f"{flag} {value} is not a finite number",
                hint=f"give {flag} in seconds or as a factor, e.g. 30",
            )


def _settings(args: argparse.Namespace) -> RunSettings:
    _finite(args)
    if args.duration <= 0 or args.max_tokens <= 0 or args.trials <= 0:
        raise UsageError("--duration, --max-tokens and --trials must be positive")
    if args.request_timeout <= 0 or (args.speed_factor is not None and args.speed_factor <= 0):
        raise UsageError("--request-timeout and --speed-factor must be positive")
    concurrencies = []
    for c in _split(args.concurrencies):
        if not c.strip().isdigit() or int(c) <= 0:
            raise UsageError(f"concurrency {c!r} is not a positive integer")
        concurrencies.append(int(c))
    cells = []
    for word in _split(args.cells):
        ctx, sep, conc = word.partition(":")
        if not sep or not ctx.strip() or not conc.strip().isdigit() or int(conc) <= 0:
            raise UsageError(
                f"--cells {word!r} is not CONTEXT:CONCURRENCY", hint="e.g. --cells 8K:64 16K:1"
            )
        cells.append((ctx.strip(), int(conc)))
    contexts = tuple(parse_tokens(c) for c in _split(args.contexts))
    if not contexts and not _split(args.prefill_only_contexts):
        raise UsageError(
            "nothing to measure: no --contexts and no --prefill-only-contexts",
            hint="e.g. --contexts 8K 16K",
        )
    return RunSettings(
        url=check_url(args.url or "http://127.0.0.1:8000"),
        api=args.api,
        model=args.model,
        contexts=contexts,
        prefill_only_contexts=tuple(parse_tokens(c) for c in _split(args.prefill_only_contexts)),
        concurrencies=tuple(concurrencies),
        cells=tuple(sorted(set(cells))),
        duration_s=args.duration,
        max_tokens=args.max_tokens,
        trials=args.trials,
        kv_budget_tokens=args.kv_budget,
        speed_factor=args.speed_factor,
        request_timeout_s=args.request_timeout,
        seed=args.seed,
    )


def _only_url_with_resume(args: argparse.Namespace) -> None:
    """A resumed run keeps its own settings; a flag that would change them is refused."""
    defaults = {
        "model": None,
        "api": "chat",
        "contexts": list(PUBLISHED_CONTEXTS),
        "prefill_only_contexts": list(PUBLISHED_PREFILL_ONLY),
        "concurrencies": list(PUBLISHED_CONCURRENCIES),
        "cells": [],
        "duration": 30.0,
        "max_tokens": 4096,
        "trials": 1,
        "out": None,
        "kv_budget": None,
        "speed_factor": None,
        "seed": 0,
        "request_timeout": 600.0,
    }
    given = [k for k, v in defaults.items() if getattr(args, k) != v]
    typed = getattr(args, "argv", None)
    parser = getattr(args, "run_parser", None)
    if typed is not None and isinstance(parser, argparse.ArgumentParser):
        # A flag typed with its default value changes nothing, but it was asked for.
        for word in typed:
            if word == "--":
                break
            name = word.split("=", 1)[0]
            if not name.startswith("--"):
                continue
            matches = {
                a.dest
                for a in parser._actions
                for opt in a.option_strings
                if opt.startswith("--") and opt.startswith(name)
            }
            dest = matches.pop() if len(matches) == 1 else None
            if dest in defaults and dest not in given:
                given.append(dest)
    given = [k for k in defaults if k in given]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise UsageError(
            f"--resume continues a run with its own settings; {flags} cannot change them",
            hint="drop those flags (--url may point at the server's new address)",
        )


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
    tokenizer_client = (
        Client(
            args.tokenizer_url, settings.api_key, clock=time.perf_counter, ca_file=settings.ca_file
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
    )
    try:
        return await _run(
            args,
            settings,
            client,
            rundir,
            previous=previous,
            run_settings=run_settings,
            tokenizer_client=tokenizer_client,
        )
    finally:
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
        run_settings = _settings(args)
        out = args.out or Path("results") / dt.datetime.now(dt.UTC).strftime("run-%Y%m%d-%H%M%S")
        return RunDir(out), None, run_settings
    _only_url_with_resume(args)
    new_url = check_url(args.url) if args.url else None  # before anything is read
    rundir = RunDir(args.resume)
    if args.resume.is_dir():
        rundir.lock()  # before reading it: a run still writing it is refused
    previous = rundir.load()
    run_settings = previous.settings
    if args.url:
        run_settings = run_settings.model_copy(update={"url": new_url})
    return rundir, previous, run_settings


async def _run(
    args: argparse.Namespace,
    settings: Settings,
    client: Client,
    rundir: RunDir,
    *,
    previous: Results | None,
    run_settings: RunSettings,
    tokenizer_client: Client | None,
) -> int:
    """Detect the server, plan, then measure into `rundir` (new, or the run resumed)."""
    clock = time.perf_counter
    info, snapshot, engine_kv = await detect(
        client, model=run_settings.model, speed_factor=run_settings.speed_factor, now_s=clock()
    )
    if previous is not None:
        resume.check_same_server(previous, info, str(rundir.path))
    kv = kv_capacity(snapshot, run_settings.kv_budget_tokens, args.server_log, engine_kv)
    info, engine_parse, tokenize = await engine_setup(client, info, kv, engine_kv, tokenizer_client)
    sizing = "tokenize" if info.has_tokenize else "usage_calibrated"
    the_plan = plan.make_plan(run_settings, info, kv, prompt_sizing=sizing)
    print(plan.render(the_plan, info, run_settings), flush=True)
    anchor_s, anchor_unix_s = clock(), time.time()
    if previous is None:
        rundir.create()
        results = _new_results(run_settings, info, kv, the_plan, client)
    else:
        # Finished entries are kept as they are; `interrupted` ones are measured again.
        results, finished = resume.carry_on(previous)
        results = results.model_copy(update={"plan": the_plan, "server": info})
        rundir.keep_only(finished)
    rundir.save(results)
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
    runner = sweep.Sweep(
        server=Server(
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
    )
    results = await runner.measure(results)
    rundir.save(results)
    print(f"results: {rundir.path}", flush=True)
    print((rundir.path / "tables.md").read_text(), flush=True)
    return 0


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


def estimate_s(argv: list[str]) -> float:
    """The plan's estimated duration of `bench run ARGV` before any server answers: server
    time at speed factor 1, nothing over capacity (the KV capacity is not known yet), no
    context trimmed. What a scheduler's time limit is sized from (a longer bound than the
    plan the run prints once it has the server)."""
    parser = argparse.ArgumentParser(prog="bench", exit_on_error=False)
    register(parser.add_subparsers())
    try:
        args, unknown = parser.parse_known_args(["run", *argv])
    except argparse.ArgumentError as exc:
        raise UsageError(f"bench run arguments: {exc}") from None
    if unknown:
        raise UsageError(f"bench run arguments not understood: {' '.join(unknown)}")
    settings = _settings(args)
    longest = max((*settings.contexts, *settings.prefill_only_contexts)) + settings.max_tokens
    server = ServerInfo(url=settings.url, model="-", max_model_len=longest)
    kv = KvCapacity(tokens=None, source="unknown", detail="not known before the server starts")
    return plan.make_plan(settings, server, kv, prompt_sizing="tokenize").estimated_duration_s
