"""Each publisher's figures, computed its own way from our per-request records.

A published figure is reproduced only if ours is computed as the publisher computes its own:
the same requests counted, the same start and end of each interval, the same statistic. Each
figure of `bench.publishers.model.ComputedAs` has one function here (`COMPUTED` maps the key
to it), whose docstring states the publisher's definition and the file it was read from.
Pure functions: no I/O, no clock, no numpy (the percentiles are written out here).

Sources read (the publishers' own code, in the 2026 snapshots named by commit):
  vLLM       vllm-project/vllm vllm/benchmarks/serve.py (`calculate_metrics`, commit
             009e6d4a) and vllm/benchmarks/lib/endpoint_request_func.py (what one request
             records, commit 02cfb534). The older benchmarks/benchmark_serving.py computes the
             same figures (the same calculate_metrics, copied into InferenceX's client below).
  InferenceX SemiAnalysisAI/InferenceX utils/process_result.py (tput_per_gpu,
             output_tput_per_gpu, *_intvty; commit 843c6254), its client
             utils/bench_serving/benchmark_serving.py and backend_request_func.py (a copy of
             vLLM's; benchmarks/benchmark_lib.sh runs it with --backend vllm, the completions
             endpoint), and SemiAnalysisAI/InferenceX-app docs/data-transforms (markdown) (the
             dashboard's interactivity axis is `median_intvty`).
  MLPerf     mlcommons/inference loadgen/loadgen.cc (the server scenario's issue and
             completion times, final_query_all_samples_done_time), loadgen/logging.cc
             (`RecordSampleCompletion`: TPOT per sample), loadgen/results.cc
             (`ProcessTokenLatencies`, the percentile rule, "Completed tokens per second"),
             loadgen/test_settings_internal.cc (the percentile read as conf value x 0.01) and
             loadgen/mlperf.conf (commit b66003e1).

Our records versus theirs. A `TimedRequest`'s times are on one run clock. `start_s` stands
for vLLM's `st` (taken just before the HTTP post) and for LoadGen's scheduled time of the
query (our open-loop sender sends each request at its scheduled time; a sender that lags
its schedule makes our MLPerf latencies shorter than LoadGen's, which count from the
schedule; LoadGen's test start is the first query's scheduled time, its delta being 0).
`chunk_s` are the chunks that carried tokens: vLLM's client times every chunk with
`choices`, a token in it or not. On the chat endpoint that includes the first, role-only
chunk, so vLLM's chat TTFT ends there, before any token, where ours ends at the first token;
on the completions endpoint (InferenceX's) the first chunk with choices carries the first
token's text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

from bench.publishers.model import ComputedAs

MS_PER_S = 1000.0
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000.0


@dataclass(frozen=True, slots=True)
class TimedRequest:
    """One request as we measured it; seconds on the run's clock, tokens as counted.

    `first_token_s` is None when no token came; `chunk_s` holds the time of each streamed
    chunk that carried tokens (the first at or after the first token) and `chunk_tokens`
    the tokens in each. `ok`: the request finished successfully. Construction refuses a
    record that no measurement could give (ValueError, one line): a time or count that is
    not finite or is negative, chunks out of order, a first token before the request or a
    last chunk after its end. Every duration the figures use is then >= 0.
    """

    start_s: float
    first_token_s: float | None
    end_s: float
    input_tokens: int
    output_tokens: int
    chunk_s: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    ok: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "chunk_s", tuple(self.chunk_s))
        object.__setattr__(self, "chunk_tokens", tuple(self.chunk_tokens))
        start = _time("start_s", self.start_s)
        end = _time("end_s", self.end_s)
        _count("input_tokens", self.input_tokens)
        _count("output_tokens", self.output_tokens)
        if not isinstance(self.ok, bool):
            raise ValueError(f"request record: ok {self.ok!r} is not a bool")
        if end < start:
            raise ValueError(f"request record: end_s {end!r} is before start_s {start!r}")
        first = None if self.first_token_s is None else _time("first_token_s", self.first_token_s)
        if first is not None and not start <= first <= end:
            raise ValueError(
                f"request record: first_token_s {first!r} is outside [{start!r}, {end!r}]"
            )
        if len(self.chunk_s) != len(self.chunk_tokens):
            raise ValueError(
                f"request record: {len(self.chunk_s)} chunk times but "
                f"{len(self.chunk_tokens)} chunk token counts"
            )
        for n in self.chunk_tokens:
            _count("chunk_tokens", n)
        if not self.chunk_s:
            return
        if first is None:
            raise ValueError("request record: chunks with tokens but no first_token_s")
        previous = first
        for chunk in self.chunk_s:
            t = _time("chunk_s", chunk)
            if t < previous:
                raise ValueError(
                    f"request record: chunk time {t!r} is before {previous!r} "
                    "(the first token or the chunk before it)"
                )
            previous = t
        if previous > end:
            raise ValueError(f"request record: last chunk {previous!r} is after end_s {end!r}")


def _time(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"request record: {what} {value!r} is not a number")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"request record: {what} {value!r} is not finite")
    if v < 0:
        raise ValueError(f"request record: {what} {value!r} is negative")
    return v


def _count(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"request record: {what} {value!r} is not an integer")
    if value < 0:
        raise ValueError(f"request record: {what} {value!r} is negative")
    return value


# --- percentiles and the other statistics -------------------------------------------------


def _sample(values: Sequence[float], what: str) -> list[float]:
    if not values:
        raise ValueError(f"{what} of an empty sample")
    s = sorted(float(v) for v in values)
    if not all(math.isfinite(v) for v in s):
        raise ValueError(f"{what} of a sample with a value that is not finite")
    return s


def percentile_linear(values: Sequence[float], q: float) -> float:
    """numpy.percentile(values, q) with its default method="linear" (numpy 2.x,
    numpy/lib/_function_base_impl.py): what vLLM's and InferenceX's clients report.

    q is in percent (0..100). The virtual index is (n - 1) x (q / 100); at or past the last
    index the largest value is taken; otherwise the two neighbours a <= b of the index are
    interpolated at gamma = index - floor(index), as numpy's `_lerp` does it: a + (b - a) x
    gamma below gamma 0.5, b - (b - a) x (1 - gamma) from 0.5 on (the same real number,
    rounded so that the result does not overshoot b). Bit for bit numpy's value.
    """
    if not (isinstance(q, int | float) and math.isfinite(q) and 0.0 <= q <= 100.0):
        raise ValueError(f"percentile {q!r} is not a number in 0..100")
    s = _sample(values, "percentile")
    index = (len(s) - 1) * (q / 100.0)
    if index >= len(s) - 1:
        return s[-1]
    lo = math.floor(index)
    a, b = s[lo], s[lo + 1]
    gamma = index - lo
    diff = b - a
    if gamma >= 0.5:
        return b - diff * (1.0 - gamma)
    return a + diff * gamma


def percentile_mlperf(values: Sequence[float], q: float) -> float:
    """LoadGen's percentile (mlcommons/inference loadgen/results.cc, `ProcessLatencies`
    and `ProcessTokenLatencies`): sort ascending and take the element at index
    size_t(n x p), no interpolation.

    p is the conf value times 0.01 (loadgen/test_settings_internal.cc reads
    `target_latency_percentile = 99` as 99 x 0.01), so q here is in percent and p = q x 0.01
    in the same double arithmetic; LoadGen asserts p < 1, so q must be below 100. For n =
    100 and q = 99 it is the largest value (index 99), where numpy interpolates to 99.01 %.
    """
    if not (isinstance(q, int | float) and math.isfinite(q) and 0.0 <= q < 100.0):
        raise ValueError(f"percentile {q!r} is not a number in 0..100 (100 excluded)")
    s = _sample(values, "percentile")
    index = int(len(s) * (q * 0.01))
    return s[min(index, len(s) - 1)]


def _mean(values: Sequence[float]) -> float:
    """numpy.mean: the sum over the count. numpy sums pairwise; math.fsum's correctly
    rounded sum can differ from it in the last bits only."""
    return math.fsum(values) / len(values)


def _median(values: Sequence[float]) -> float:
    """numpy.median: the middle value, or the mean of the two middle values, (a + b) / 2."""
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


Stat = Literal["mean", "median", "p99"]


def _vllm_stat_ms(values_s: Sequence[float], stat: Stat) -> float | None:
    """vLLM's mean_/median_/p99_*_ms: the statistic over seconds, times 1000 (serve.py
    computes np.mean(x) * 1000, np.median(x) * 1000, np.percentile(x, 99.0) * 1000; the
    default --metric-percentiles is "99"). vLLM prints 0 for an empty list (`x or 0`); a
    figure of nothing is None here."""
    if not values_s:
        return None
    if stat == "mean":
        v = _mean(values_s)
    elif stat == "median":
        v = _median(values_s)
    else:
        v = percentile_linear(values_s, 99.0)
    return v * MS_PER_S


# --- vLLM's client (and InferenceX's copy of it) -------------------------------------------


def _vllm_completed(records: Sequence[TimedRequest]) -> list[TimedRequest]:
    """The requests vLLM counts as completed: `success`, which its client sets only when the
    response was 200 and at least one chunk with choices came ("Never received a valid
    chunk to calculate TTFT" otherwise)."""
    return [r for r in records if r.ok and r.first_token_s is not None]


def _vllm_last_token_s(r: TimedRequest) -> float:
    """vLLM's end of a request: its client's `most_recent_timestamp`, the last chunk with
    choices (the trailing usage chunk and [DONE] do not move it), not the last byte."""
    if r.chunk_s:
        return r.chunk_s[-1]
    assert r.first_token_s is not None
    return r.first_token_s


def vllm_ttfts_s(records: Sequence[TimedRequest]) -> list[float]:
    """vLLM's TTFT per completed request: first chunk time - st."""
    out: list[float] = []
    for r in _vllm_completed(records):
        assert r.first_token_s is not None
        out.append(r.first_token_s - r.start_s)
    return out


def vllm_e2els_s(records: Sequence[TimedRequest]) -> list[float]:
    """vLLM's E2EL (`latency`) per completed request: last token chunk - st."""
    return [_vllm_last_token_s(r) - r.start_s for r in _vllm_completed(records)]


def vllm_tpots_s(records: Sequence[TimedRequest]) -> list[float]:
    """vLLM's TPOT per completed request with more than one output token:
    (latency - ttft) / (output_tokens - 1), i.e. (last token chunk - first token) over the
    tokens after the first. The first token is excluded; requests of one token are left out
    of the TPOT statistics (serve.py keeps them, as 0, only for goodput)."""
    out: list[float] = []
    for r in _vllm_completed(records):
        if r.output_tokens > 1:
            assert r.first_token_s is not None
            out.append((_vllm_last_token_s(r) - r.first_token_s) / (r.output_tokens - 1))
    return out


def vllm_itls_s(records: Sequence[TimedRequest]) -> list[float]:
    """vLLM's ITLs: every completed request's gaps between successive chunks, one ITL per
    chunk after the first, pooled over requests. A chunk that carries several tokens (MTP,
    speculative decoding, a coalesced read) is one gap, not divided among its tokens
    (endpoint_request_func.py appends `timestamp - most_recent_timestamp` once per chunk)."""
    out: list[float] = []
    for r in _vllm_completed(records):
        c = r.chunk_s
        out.extend(c[i] - c[i - 1] for i in range(1, len(c)))
    return out


def request_rate(
    records: Sequence[TimedRequest], duration_s: float, gpus: int | None
) -> float | None:
    """vLLM's `request_throughput` (req/s): completed requests / benchmark duration.

    serve.py `calculate_metrics`: completed / dur_s, where dur_s is `benchmark_duration`
    (perf_counter from the first request's dispatch, after warm-ups, to the last
    completion): `duration_s` here. None without a completed request."""
    done = _vllm_completed(records)
    return len(done) / duration_s if done else None


def output_tok_s(
    records: Sequence[TimedRequest], duration_s: float, gpus: int | None
) -> float | None:
    """vLLM's `output_throughput` (tok/s): the output tokens of completed requests (the
    server's usage.completion_tokens) / benchmark duration. serve.py `calculate_metrics`:
    sum(actual_output_lens) / dur_s; failed requests count 0."""
    done = _vllm_completed(records)
    return sum(r.output_tokens for r in done) / duration_s if done else None


def total_tok_s(
    records: Sequence[TimedRequest], duration_s: float, gpus: int | None
) -> float | None:
    """vLLM's `total_token_throughput` (tok/s): (input + output tokens of completed
    requests) / benchmark duration. serve.py `calculate_metrics`: (total_input +
    sum(actual_output_lens)) / dur_s. vLLM's input count is the server's
    usage.prompt_tokens when sent (InferenceX's copy: the dataset's prompt length); ours is
    the record's input_tokens."""
    done = _vllm_completed(records)
    if not done:
        return None
    return sum(r.input_tokens + r.output_tokens for r in done) / duration_s


_LATENCIES: dict[str, tuple[Callable[[Sequence[TimedRequest]], list[float]], str]] = {
    "ttft": (vllm_ttfts_s, "TTFT (first chunk with choices - st) over completed requests"),
    "tpot": (
        vllm_tpots_s,
        "TPOT ((latency - ttft) / (output_tokens - 1), first token excluded) over completed "
        "requests of two tokens or more",
    ),
    "itl": (vllm_itls_s, "ITL (one per chunk gap, pooled over completed requests)"),
    "e2el": (vllm_e2els_s, "E2EL (last chunk with choices - st) over completed requests"),
}
_STAT_WORDS: dict[Stat, str] = {
    "mean": "the mean (np.mean)",
    "median": "the median (np.median)",
    "p99": "the 99th percentile (np.percentile, linear)",
}


def _vllm_latency(metric: str, stat: Stat) -> Callable[..., float | None]:
    """vLLM's `{stat}_{metric}_ms` as a figure function (one per metric and statistic)."""
    values, words = _LATENCIES[metric]

    def figure(
        records: Sequence[TimedRequest], duration_s: float, gpus: int | None
    ) -> float | None:
        return _vllm_stat_ms(values(records), stat)

    figure.__name__ = f"{metric}_{stat}_ms"
    figure.__doc__ = (
        f"vLLM's `{stat}_{metric}_ms`: {_STAT_WORDS[stat]} of {words}, in ms. "
        f"vllm/benchmarks/serve.py `calculate_metrics`; the per-request values: "
        f"`{values.__name__}`."
    )
    return figure


# --- InferenceX -----------------------------------------------------------------------------


def input_output_tok_s_per_gpu(
    records: Sequence[TimedRequest], duration_s: float, gpus: int | None
) -> float | None:
    """InferenceX's `tput_per_gpu` (tok/s/gpu): the client's total_token_throughput ((input +
    output tokens of completed requests) / benchmark duration, vLLM's definition above)
    divided by the GPU count.

    SemiAnalysisAI/InferenceX utils/process_result.py. The GPU count: single node, tp x pp
    x pcp_size since July 2026 (tp alone before; tp x pcp from 2026-07-06, pp from
    2026-07-10); EP and DP-attention do not multiply it, nor DCP (it shares the TP GPUs).
    Multinode (disaggregated): prefill GPUs + decode GPUs. `gpus` is that count; None:
    the figure cannot be computed."""
    total = total_tok_s(records, duration_s, gpus)
    return None if total is None or gpus is None else total / gpus


def output_tok_s_per_gpu(
    records: Sequence[TimedRequest], duration_s: float, gpus: int | None
) -> float | None:
    """InferenceX's `output_tput_per_gpu` (tok/s/gpu): the client's output_throughput
    (output tokens of completed requests / benchmark duration) divided by the GPU count.

    SemiAnalysisAI/InferenceX utils/process_result.py: single node, the same tp x pp x
    pcp_size as tput_per_gpu; multinode (disaggregated), the decode GPUs only (all GPUs
    when there are none), so a disaggregated card's `gpus` here is its decode GPUs."""
    out = output_tok_s(records, duration_s, gpus)
    return None if out is None or gpus is None else out / gpus


def interactivity(
    records: Sequence[TimedRequest], duration_s: float, gpus: int | None
) -> float | None:
    """InferenceX's interactivity (tok/s/user) as its dashboard plots it: `median_intvty` =
    1000 / median_tpot_ms, the median of vLLM's per-request TPOT (first token excluded).

    SemiAnalysisAI/InferenceX utils/process_result.py derives one `*_intvty` = 1000 / value
    from each `*_tpot_ms` key of the client's result (mean, median, std, p90, p99 ...), not
    1000 / mean; SemiAnalysisAI/InferenceX-app docs/data-transforms (markdown): the interactivity
    chart's x-axis is `median_intvty`. None when there is no TPOT or it is 0."""
    tpot_ms = _vllm_stat_ms(vllm_tpots_s(records), "median")
    if tpot_ms is None or tpot_ms <= 0.0:
        return None
    return MS_PER_S / tpot_ms


# --- MLPerf LoadGen, server scenario --------------------------------------------------------


def _mlperf_ns(seconds: float) -> int:
    """A duration as LoadGen keeps it: whole nanoseconds (QuerySampleLatency, int64 ns)."""
    return round(seconds * NS_PER_S)


def mlperf_ttfts_ms(records: Sequence[TimedRequest]) -> list[float] | None:
    """LoadGen's first-token latency per completed query, in ms: FirstTokenComplete's time
    - the query's scheduled time (loadgen.cc `TokenComplete`: sched.delta(...)), whole ns.
    None when a completed query had no first token: LoadGen logs an error_runtime for it
    (logging.cc, "record a sample latency before it's first token latency") and the run is
    invalid."""
    done = [r for r in records if r.ok]
    out: list[float] = []
    for r in done:
        if r.first_token_s is None:
            return None
        out.append(_mlperf_ns(r.first_token_s - r.start_s) / NS_PER_MS)
    return out


def mlperf_tpots_ms(records: Sequence[TimedRequest]) -> list[float] | None:
    """LoadGen's time per output token per completed query, in ms:
    (latency - first-token latency) / (n_tokens - 1) in int64 ns, the quotient truncated
    (logging.cc `RecordSampleCompletion`). latency runs from the scheduled time to
    QuerySamplesComplete, after the whole response: end_s here, not the last chunk. n_tokens
    is every output token, the first included (the reference SUTs report
    len(output tokens)), so the first token is excluded by the - 1.

    None when a completed query had no first token or fewer than two tokens: LoadGen logs an
    error_runtime ("Number of tokens need to be greater than 1") and the run is invalid."""
    done = [r for r in records if r.ok]
    out: list[float] = []
    for r in done:
        if r.first_token_s is None or r.output_tokens < 2:
            return None
        latency_ns = _mlperf_ns(r.end_s - r.start_s)
        ttft_ns = _mlperf_ns(r.first_token_s - r.start_s)
        out.append(((latency_ns - ttft_ns) // (r.output_tokens - 1)) / NS_PER_MS)
    return out


def mlperf_percentile_ms(
    figure: Literal["ttft", "tpot"], records: Sequence[TimedRequest], percentile: float
) -> float | None:
    """The LoadGen percentile (percentile_mlperf) of TTFT or TPOT over completed queries, in
    ms: what results.cc compares with the server's ttft_latency / tpot_latency limits
    (`PublishedConstraint`). None when there is none, or LoadGen would have refused a query
    (see mlperf_ttfts_ms, mlperf_tpots_ms). The early-stopping estimate is not this."""
    values = mlperf_ttfts_ms(records) if figure == "ttft" else mlperf_tpots_ms(records)
    if not values:
        return None
    return percentile_mlperf(values, percentile)


def mlperf_tokens_per_s(
    records: Sequence[TimedRequest], duration_s: float, gpus: int | None
) -> float | None:
    """LoadGen's server-scenario "Completed tokens per second": token_count /
    final_query_all_samples_done_time (mlcommons/inference loadgen/results.cc, the Server
    case of the token summary; loadgen/loadgen.cc for the time).

    token_count: the n_tokens of every completed query, the first token included; a query
    of one token is recorded as 0 (logging.cc sets n_tokens = 0 with an error). The time:
    from the test start (the first query's scheduled time; LoadGen schedules it at 0) to
    the moment the last-issued query completed, not the last completion of all (a query
    issued earlier may finish later) and not our `duration_s`, which is not used. None when
    no completed query had a token, or with no positive time."""
    if not any(r.ok and r.first_token_s is not None for r in records):
        return None
    origin = min(r.start_s for r in records)
    final = max(records, key=lambda r: (r.start_s, r.end_s))
    elapsed = final.end_s - origin
    if elapsed <= 0.0:
        return None
    tokens = sum(r.output_tokens for r in records if r.ok and r.output_tokens > 1)
    return tokens / elapsed


def _mlperf_p99_ns(figure: Literal["ttft", "tpot"]) -> Callable[..., float | None]:
    def p99_ns(
        records: Sequence[TimedRequest], duration_s: float, gpus: int | None
    ) -> float | None:
        ms = mlperf_percentile_ms(figure, records, 99.0)
        return None if ms is None else ms * NS_PER_MS

    what = "first token latency" if figure == "ttft" else "time to output token"
    p99_ns.__doc__ = (
        f"LoadGen's summary line '99.00 percentile {what} (ns)': mlperf_percentile_ms at 99 "
        "in ns (results.cc prints the percentile of the whole-ns values)."
    )
    return p99_ns


# --- dispatch -------------------------------------------------------------------------------

Figure = Callable[[Sequence[TimedRequest], float, int | None], float | None]

COMPUTED: Mapping[ComputedAs, Figure] = {
    "input_output_tok_s_per_gpu": input_output_tok_s_per_gpu,
    "output_tok_s": output_tok_s,
    "output_tok_s_per_gpu": output_tok_s_per_gpu,
    "total_tok_s": total_tok_s,
    "request_rate": request_rate,
    "interactivity": interactivity,
    "ttft_mean_ms": _vllm_latency("ttft", "mean"),
    "ttft_median_ms": _vllm_latency("ttft", "median"),
    "ttft_p99_ms": _vllm_latency("ttft", "p99"),
    "tpot_mean_ms": _vllm_latency("tpot", "mean"),
    "tpot_median_ms": _vllm_latency("tpot", "median"),
    "tpot_p99_ms": _vllm_latency("tpot", "p99"),
    "itl_mean_ms": _vllm_latency("itl", "mean"),
    "itl_median_ms": _vllm_latency("itl", "median"),
    "itl_p99_ms": _vllm_latency("itl", "p99"),
    "e2el_mean_ms": _vllm_latency("e2el", "mean"),
    "e2el_median_ms": _vllm_latency("e2el", "median"),
    "e2el_p99_ms": _vllm_latency("e2el", "p99"),
    "mlperf_tokens_per_s": mlperf_tokens_per_s,
    "mlperf_ttft_p99_ns": _mlperf_p99_ns("ttft"),
    "mlperf_tpot_p99_ns": _mlperf_p99_ns("tpot"),
}


def _in_seconds(ms: Figure) -> Figure:
    def figure(
        records: Sequence[TimedRequest], duration_s: float, gpus: int | None
    ) -> float | None:
        value = ms(records, duration_s, gpus)
        return None if value is None else value / 1000.0

    figure.__doc__ = f"{ms.__doc__ or ''}\nIn seconds: the figure in ms / 1000 (process_result.py)."
    return figure


# Each latency statistic in seconds: its ms figure / 1000 (InferenceX's `process_result.py`
# writes the client's *_ms values divided by 1000).
COMPUTED = {
    **COMPUTED,
    **{
        cast(ComputedAs, key.removesuffix("_ms") + "_s"): _in_seconds(fn)
        for key, fn in COMPUTED.items()
        if key.endswith("_ms")
    },
}
assert set(COMPUTED) == set(get_args(ComputedAs)), "every ComputedAs key has its function"


def compute(
    key: ComputedAs, records: Sequence[TimedRequest], *, duration_s: float, gpus: int | None
) -> float | None:
    """The figure `key` computed from our records as its publisher computes it.

    None when it cannot be computed: no records, no successful request, no GPU count for a
    per-GPU figure, no request with two tokens for TPOT, or a result that overflows a float.
    ValueError (one line) for an unknown key, a duration that is not a finite number > 0,
    a GPU count below 1 or a record that is not a TimedRequest."""
    fn = COMPUTED.get(key)
    if fn is None:
        raise ValueError(f"unknown figure definition {key!r}")
    if isinstance(duration_s, bool) or not isinstance(duration_s, int | float):
        raise ValueError(f"duration {duration_s!r} is not a number")
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration {duration_s!r} s is not a finite number > 0")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise ValueError(f"GPU count {gpus!r} is not an integer >= 1")
    for r in records:
        if not isinstance(r, TimedRequest):
            raise ValueError(f"{type(r).__name__} is not a TimedRequest")
    if not records:
        return None
    value = fn(records, float(duration_s), gpus)
    return value if value is None or math.isfinite(value) else None
