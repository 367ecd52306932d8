"""`bench run`'s words: its options, their checks, and the RunSettings they make.

Kept apart from the command so that a scheduler can size a run from its arguments alone
(`estimate_s`, used by the Slurm engine) without a server.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bench import bounds
from bench.errors import UsageError
from bench.live import flags as live_flags
from bench.results import KvCapacity, RunSettings, ServerInfo
from bench.run import plan
from bench.run.plan import PUBLISHED_CONCURRENCIES, PUBLISHED_CONTEXTS, PUBLISHED_PREFILL_ONLY
from bench.stream.urls import check_url
from bench.workload_spec import load_workload


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every option of `bench run`, on its parser."""
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
        "SGLang's), for an engine that sends no per-chunk counts (docs/engines.md); it gets "
        "BENCH_TOKENIZER_API_KEY, never the server's key",
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
        "--no-fingerprint",
        action="store_true",
        help="do not send the answer fingerprint (a fixed prompt set, temperature 0, and the "
        "long-context retrieval check on its context prompts) before the sweep; a compare "
        "then cannot tell whether the runs answered alike",
    )
    p.add_argument(
        "--workload",
        default=None,
        metavar="NAME|FILE",
        help="measure a workload instead of the card's matrix: a shipped preset's name or a "
        "TOML file (docs/workloads.md); --contexts, --concurrencies and --duration then do "
        "not apply",
    )
    p.add_argument(
        "--points",
        nargs="*",
        default=[],
        metavar="LABEL",
        help="measure only these points of the workload: 4/s, inf/s, closed:8, trace (a "
        "sequential compare gives them to trials after its first)",
    )
    p.add_argument(
        "--rates",
        default=None,
        metavar="R,R,...",
        help="the workload's offered rates, requests/s in server time (inf: all at once), "
        "instead of its own",
    )
    p.add_argument(
        "--slo",
        default=None,
        metavar="BOUNDS",
        help="p99 bounds each workload point is judged against, instead of the workload's "
        "own, e.g. 'ttft_p99<=2s,tpot_p99<=80ms' (figures ttft, tpot, e2el)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        help="seconds a request may go without a byte, or without a token, before it fails",
    )
    live_flags.add_arguments(p)


# Each number of the command line and the range it must lie in (bench.bounds): nan, inf and
# 1e308 pass every `<= 0` check and overflow the plan's estimate.
_RANGES = {
    "duration": (1e-3, bounds.SECONDS_MAX),
    "request_timeout": (1e-3, bounds.SECONDS_MAX),
    "speed_factor": (bounds.SPEED_MIN, bounds.SPEED_MAX),
}


def _finite(args: argparse.Namespace) -> None:
    """Every float flag finite and in its range, refused by name."""
    for name, (lo, hi) in _RANGES.items():
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and lo <= value <= hi):
            flag = "--" + name.replace("_", "-")
            raise UsageError(
                f"{flag} {value:g} is not a finite number from {lo:g} to {hi:g}",
                hint=f"give {flag} in seconds or as a factor, e.g. 30",
            )
    if args.kv_budget is not None and not 0 < args.kv_budget <= bounds.TOKENS_MAX:
        raise UsageError(f"--kv-budget {args.kv_budget} is not a positive number of tokens")


def settings_from(args: argparse.Namespace) -> RunSettings:
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
    points = tuple(
        dict.fromkeys(w.strip() for w in _split(getattr(args, "points", [])) if w.strip())
    )
    if points and getattr(args, "workload", None) is None:
        raise UsageError(
            "--points selects a workload's points, and no --workload was given",
            hint="for the card's matrix use --cells CTX:C",
        )
    if getattr(args, "workload", None) is not None:  # the workload's points, no matrix
        contexts, concurrencies, cells = (), [], []
        args.prefill_only_contexts = []
    elif not contexts and not _split(args.prefill_only_contexts):
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
        points=points,
        duration_s=args.duration,
        max_tokens=args.max_tokens,
        trials=args.trials,
        kv_budget_tokens=args.kv_budget,
        speed_factor=args.speed_factor,
        request_timeout_s=args.request_timeout,
        seed=args.seed,
        fingerprint=not args.no_fingerprint,
    )


# The options that make a run's settings (settings_from) or its directory: a resumed run
# keeps its own, so each is refused with --resume. Their defaults are the parser's.
_KEPT_BY_RESUME = (
    "model",
    "api",
    "contexts",
    "prefill_only_contexts",
    "concurrencies",
    "cells",
    "points",
    "duration",
    "max_tokens",
    "trials",
    "out",
    "kv_budget",
    "speed_factor",
    "seed",
    "request_timeout",
    "workload",
    "rates",
    "slo",
)


def only_url_with_resume(args: argparse.Namespace) -> None:
    """A resumed run keeps its own settings; a flag that would change them is refused."""
    parser = getattr(args, "run_parser", None)
    if not isinstance(parser, argparse.ArgumentParser):  # args not parsed by `bench run`
        parser = argparse.ArgumentParser(prog="bench run")
        add_arguments(parser)
    given = [k for k in _KEPT_BY_RESUME if getattr(args, k) != parser.get_default(k)]
    typed = getattr(args, "argv", None)
    if typed is not None:
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
            if dest in _KEPT_BY_RESUME and dest not in given:
                given.append(dest)
    given = [k for k in _KEPT_BY_RESUME if k in given]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise UsageError(
            f"--resume continues a run with its own settings; {flags} cannot change them",
            hint="drop those flags (--url may point at the server's new address)",
        )


def estimate_s(argv: list[str]) -> float:
    """The plan's estimated duration of `bench run ARGV` before any server answers: server
    time at speed factor 1, nothing over capacity (the KV capacity is not known yet), no
    context trimmed. What a scheduler's time limit is sized from (a longer bound than the
    plan the run prints once it has the server)."""
    parser = argparse.ArgumentParser(prog="bench run", exit_on_error=False)
    add_arguments(parser)
    try:
        args, unknown = parser.parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise UsageError(f"bench run arguments: {exc}") from None
    if unknown:
        raise UsageError(f"bench run arguments not understood: {' '.join(unknown)}")
    settings = settings_from(args)
    if args.workload is not None:
        return _workload_estimate_s(args, settings)
    longest = max((*settings.contexts, *settings.prefill_only_contexts)) + settings.max_tokens
    server = ServerInfo(url=settings.url, model="-", max_model_len=longest)
    kv = KvCapacity(tokens=None, source="unknown", detail="not known before the server starts")
    return plan.make_plan(settings, server, kv, prompt_sizing="tokenize").estimated_duration_s


# Server seconds a workload point is allowed beyond its schedule: its warm-ups, the drain
# before it and the tail of its last requests (a bound for a scheduler, not a forecast).
POINT_SLACK_S = 120.0


def _workload_estimate_s(args: argparse.Namespace, settings: RunSettings) -> float:
    """A scheduler's bound for `bench run --workload` (or `bench capacity`): each rate
    point's schedule (requests / rate) plus POINT_SLACK_S; a point with no schedule of its
    own (all at once, closed count, a trace) the request time-out, each request's own bound;
    a capacity search its --max-points points of the slowest kind, --repeats times."""
    workload = load_workload(args.workload)
    a = workload.arrivals
    per_point: list[float] = []
    for x in a.points():
        open_loop = a.kind == "rate" and math.isfinite(x)
        per_point.append(
            (a.requests / x if open_loop else settings.request_timeout_s) + POINT_SLACK_S
        )
    total = math.fsum(per_point)
    if getattr(args, "capacity", False):
        total = max(per_point) * args.max_points * args.repeats
    return total * settings.trials
