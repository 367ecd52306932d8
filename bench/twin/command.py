"""`bench twin serve`: run the simulated vLLM server until interrupted; `bench twin fit
CARD.json`: a profile fitted to a publisher's card (`bench.twin.card_fit`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import pathlib
import sys
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

import structlog

from bench import writes
from bench.errors import DiskError, Exit, ToolMissing, UsageError
from bench.publishers.command import load_card
from bench.settings import Settings
from bench.twin import answers, card_fit, flavors, http, noise, profile
from bench.twin.faults import Faults
from bench.twin.paths import Paths
from bench.twin.server import Twin, TwinConfig

if TYPE_CHECKING:
    from bench.twin.tracing import TwinTracer


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    twin = sub.add_parser("twin", help="the simulated vLLM server")
    twin_sub = twin.add_subparsers(dest="twin_command", metavar="COMMAND", required=True)
    p = twin_sub.add_parser("serve", help="serve a profile over HTTP (prints the bound port)")
    p.add_argument("--profile", default="published", help="profile name or path to a .json file")
    p.add_argument("--speed", type=_positive, default=1.0, help="divide every latency by N")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port and prints it")
    p.add_argument(
        "--api-key",
        default=None,
        help="require this key on /v1/* (prefer VLLM_API_KEY in the environment)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seeds the noise, the faults and the answers"
    )
    p.add_argument(
        "--dtype",
        choices=answers.DTYPES,
        default=answers.DEFAULT_DTYPE,
        help="as if the weights were served in this precision: another than the default "
        "answers differently after a few tokens (an answer fingerprint tells them apart)",
    )
    p.add_argument(
        "--reasoning-parser",
        metavar="NAME",
        default=None,
        help="as vLLM's: a chat answer's first tokens come back in its reasoning field",
    )
    p.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="with --tool-call-parser, as vLLM's: a chat request that offers tools is "
        "answered by a call of the first one (bench/twin/paths.py)",
    )
    p.add_argument("--tool-call-parser", metavar="NAME", default=None, help="as vLLM's")
    p.add_argument(
        "--engine",
        choices=flavors.FLAVORS,
        default="vllm",
        help="which engine the twin speaks as: its detection endpoints, metric names and "
        "usage behaviour (docs/engines.md)",
    )
    p.add_argument(
        "--no-per-chunk-counts",
        action="store_true",
        help="ignore stream_options.continuous_usage_stats and timings_per_token: usage only "
        "at the end (an SGLang older than continuous usage, a plain OpenAI-style server)",
    )
    p.add_argument(
        "--run-noise",
        action="store_true",
        help="apply the profile's run-to-run noise (noise_run, noise_trial), seeded by --seed",
    )
    p.add_argument(
        "--noise-fit",
        metavar="NAME",
        default=None,
        help="with --run-noise: the noise fitted to a corpus of real runs instead of the "
        "profile's (bench/twin/noise_fits/NAME.json: vllm-cpu, fitted to the noise corpus; "
        "quiet-gpu, from published run-to-run figures)",
    )
    p.add_argument(
        "--ground-truth-log",
        metavar="FILE",
        default=None,
        help="append one JSON line per request with the time of every chunk sent",
    )
    p.add_argument(
        "--otlp-traces-endpoint",
        metavar="URL",
        default=None,
        help="export a trace span per completed request over OTLP/HTTP to this URL (e.g. "
        "http://127.0.0.1:4318/v1/traces), with vLLM's span name and attributes, under the "
        "request's traceparent; needs bench[live]",
    )
    f = p.add_argument_group("fault injection")
    f.add_argument(
        "--fault-crash-after",
        type=_positive,
        metavar="S",
        default=None,
        help="exit abruptly S seconds after start",
    )
    f.add_argument(
        "--fault-cut-fraction",
        type=_fraction,
        metavar="F",
        default=0.0,
        help="drop this fraction of streams mid-way",
    )
    f.add_argument(
        "--fault-error-fraction",
        type=_fraction,
        metavar="F",
        default=0.0,
        help="answer this fraction of completions with --fault-error-status",
    )
    f.add_argument("--fault-error-status", type=int, choices=(429, 500, 503), default=500)
    f.add_argument(
        "--fault-stall",
        type=_positive,
        metavar="S",
        default=0.0,
        help="hold a stream's chunks for S seconds after its first token",
    )
    f.add_argument("--fault-stall-fraction", type=_fraction, metavar="F", default=1.0)
    f.add_argument(
        "--fault-malformed-fraction",
        type=_fraction,
        metavar="F",
        default=0.0,
        help="this fraction of streams emit one malformed chunk",
    )
    f.add_argument("--fault-no-metrics", action="store_true", help="/metrics answers 404")
    f.add_argument(
        "--fault-echo-auth",
        action="store_true",
        help="an injected error's body and the log repeat the request's Authorization "
        "header, verbatim, URL-encoded and in base64 (a server that echoes its key)",
    )
    f.add_argument(
        "--fault-unparsed-paths",
        action="store_true",
        help="the reasoning and tool-call parsers are broken: the reasoning and the call "
        "stay in the answer's content (the same tokens)",
    )
    p.set_defaults(func=serve)
    fit = twin_sub.add_parser(
        "fit",
        help="a profile fitted to a publisher's card (bench card import --from): it serves "
        "the card's traffic at the card's figures",
    )
    fit.add_argument("card", type=pathlib.Path, help="a card JSON from `bench card import --from`")
    fit.add_argument(
        "--slower",
        type=float,
        default=0.0,
        metavar="PCT",
        help="every cost of the fitted profile PCT %% longer: a host that much slower",
    )
    fit.add_argument(
        "-o", "--output", type=pathlib.Path, help="write the JSON here (default stdout)"
    )
    fit.set_defaults(func=fit_card)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1]: {text!r}")
    return value


def serve(args: argparse.Namespace, settings: Settings) -> int:
    prof = profile.load(args.profile)
    if args.noise_fit is not None:
        prof = noise.with_fit(prof, args.noise_fit)
    if args.run_noise:
        prof = noise.for_live_run(prof, args.seed)
    key = args.api_key
    if key is None and settings.api_key is not None:
        key = settings.api_key.get_secret_value()
    faults = Faults(
        crash_after_s=args.fault_crash_after,
        cut_fraction=args.fault_cut_fraction,
        error_fraction=args.fault_error_fraction,
        error_status=args.fault_error_status,
        stall_s=args.fault_stall,
        stall_fraction=args.fault_stall_fraction,
        malformed_fraction=args.fault_malformed_fraction,
        no_metrics=args.fault_no_metrics,
        echo_auth=args.fault_echo_auth,
    )
    with contextlib.ExitStack() as stack:
        tracer = _tracer(args.otlp_traces_endpoint)
        if tracer is not None:
            stack.callback(tracer.close)  # what is queued is exported, bounded
        gt: IO[str] | None = None
        if args.ground_truth_log:
            try:
                gt = stack.enter_context(open(args.ground_truth_log, "a", encoding="utf-8"))
            except OSError as exc:
                raise DiskError(
                    f"cannot open --ground-truth-log {args.ground_truth_log}: {exc.strerror}"
                ) from None
        config = TwinConfig(
            prof,
            args.speed,
            args.seed,
            key,
            faults,
            gt,
            engine=args.engine,
            per_chunk_counts=not args.no_per_chunk_counts,
            dtype=args.dtype,
            paths=Paths(
                reasoning=args.reasoning_parser is not None,
                tool_calls=args.enable_auto_tool_choice and args.tool_call_parser is not None,
                unparsed=args.fault_unparsed_paths,
            ),
            tracer=tracer,
        )
        asyncio.run(_main(config, args.host, args.port))
    return 0


def _tracer(endpoint: str | None) -> TwinTracer | None:
    """The span exporter --otlp-traces-endpoint asks for (its library imported only then)."""
    if endpoint is None:
        return None
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--otlp-traces-endpoint {endpoint!r} is not an http(s):// URL",
            hint="e.g. --otlp-traces-endpoint http://127.0.0.1:4318/v1/traces",
        )
    try:
        from bench.twin.tracing import TwinTracer
    except ImportError as exc:
        raise ToolMissing(
            f"--otlp-traces-endpoint needs {exc.name or 'a library'}, which is not installed",
            hint="pip install 'bench[live]'",
        ) from None
    return TwinTracer(endpoint)


async def _main(config: TwinConfig, host: str, port: int) -> None:
    twin = Twin(config)
    try:
        server = await http.serve(twin.handle, host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is already in use",
                hint="choose another --port, or --port 0 for a free one",
            ) from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    twin.start()
    bound = server.sockets[0].getsockname()
    print(
        f"twin: listening on http://{bound[0]}:{bound[1]} "
        f"(profile {config.profile.name}, speed {config.speed:g})",
        flush=True,
    )
    structlog.get_logger("bench.twin").info(
        "twin_started",
        port=bound[1],
        profile=config.profile.name,
        speed=config.speed,
        faults={k: v for k, v in vars(config.faults).items() if v},
    )
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def fit_card(args: argparse.Namespace, settings: Settings) -> int:
    """The fitted profile as JSON (stdout or --output); the fit's figures on stderr."""
    card = load_card(args.card)
    slower = args.slower
    if not (-90.0 < slower < 1000.0):  # also refuses nan
        raise UsageError(f"--slower {slower:g}: a percentage above -90 and below 1000")
    fitted = card_fit.fit(card)
    prof = fitted.profile if slower == 0 else card_fit.slower(fitted.profile, slower)
    for line in fitted.lines():
        sys.stderr.write(f"{line}\n")
    if slower:
        sys.stderr.write(
            f"written {slower:g} % slower than fitted: every cost x{1 + slower / 100:g}\n"
        )
    text = prof.model_dump_json(indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        writes.write_atomic(args.output, text)
    return int(Exit.OK)
