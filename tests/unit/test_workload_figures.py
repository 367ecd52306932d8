"""A point's figures and validity (bench.workload.figures.point_result) from hand-made
requests on a fake clock: every definition of docs/workloads.md's figures table, each
validity rule with its reason, `stopped_early`, the SLO checks and the order-statistic
intervals. No sockets, no sleeps: the clock is the numbers written here (offset by T0, so a
figure that mixes absolute and relative times is caught)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from bench import stats
from bench.failures import ErrorKind
from bench.stream.records import RequestRecord
from bench.workload.figures import point_result
from bench.workload.runner import PointRun
from bench.workload.schedule import Planned
from bench.workload_points import PointResult
from bench.workload_spec import Slo

T0 = 5000.0  # the fake clock's reading at the point's start
NAN = math.nan


def _req(
    start: float,
    chunks: Sequence[tuple[float, int]] = (),
    *,
    sent: float | None = None,
    end: float | None = None,
    prompt: int | None = 100,
    finished: bool = True,
    failure: ErrorKind | None = None,
    cancelled: bool = False,
) -> RequestRecord:
    """A request asked for at `start`, written at `sent`, whose token chunks arrived at the
    given times with the given cumulative counts; it ends at `end` (default: its last
    chunk). Times are seconds from T0."""
    r = RequestRecord(worker=0, start_s=T0 + start, prompt_tokens=prompt)
    r.sent_s = None if sent is None else T0 + sent
    for t, n in chunks:
        if r.first_token_s is None:
            r.first_token_s = T0 + t
        r.add_usage(T0 + t, n)
    last = end if end is not None else (chunks[-1][0] if chunks else None)
    r.end_s = None if last is None else T0 + last
    r.finished = finished and failure is None and not cancelled
    r.cancelled = cancelled
    if failure is not None:
        r.fail(failure, "HTTP 503: overloaded")
    return r


def _quick(
    due: float, *, lat: float = 0.0, dur: float = 0.05, tokens: int = 4, **kw: object
) -> RequestRecord:
    """A healthy request started `lat` after `due`, its first token 10 ms in, its last
    `dur` - 5 ms in, ended at `dur`."""
    s = due + lat
    last = s + dur - 0.005
    chunks = [(s + 0.01, 1)] + ([(last, tokens)] if tokens > 1 else [])
    return _req(s, chunks, sent=s + 0.001, end=s + dur, **kw)  # type: ignore[arg-type]


def _run(
    records: list[RequestRecord],
    due: Sequence[float] | None,
    *,
    dispatched: Sequence[float] | None = None,
    unfinished: int = 0,
) -> PointRun:
    """An open-loop point (due times from T0), or closed-count when `due` is None.
    Dispatched defaults to each request's start."""
    n = len(records)
    due_s = [NAN] * n if due is None else [T0 + d for d in due]
    disp = [r.start_s for r in records] if dispatched is None else [T0 + d for d in dispatched]
    return PointRun(
        due_s=due_s, t0_s=T0, records=records, dispatched_s=disp, held_s=[0.0] * n,
        unfinished=unfinished,
    )  # fmt: skip


def _planned(run: PointRun, output_tokens: int | Sequence[int] = 4) -> list[Planned]:
    n = len(run.records)
    outs = [output_tokens] * n if isinstance(output_tokens, int) else list(output_tokens)
    at = [0.0 if math.isnan(d) else d - T0 for d in run.due_s]
    return [Planned(i, at[i], 100, outs[i], i) for i in range(n)]


def _result(
    run: PointRun,
    *,
    rate: float | None = 10.0,
    slo: Slo | None = None,
    speed: float = 1.0,
    ignore_eos: bool = True,
    output_tokens: int | Sequence[int] = 4,
) -> PointResult:
    return point_result(
        run, _planned(run, output_tokens), index=0, trial=0, offered_rate=rate,
        concurrency=None if rate is not None else 2, slo=slo, speed=speed,
        ignore_eos=ignore_eos, warmups=0, started_at_s=None,
    )  # fmt: skip


def _steady(
    n: int, rate: float, *, lat: Sequence[float] | float = 0.0, dur: float = 0.05
) -> PointRun:
    """n quick requests at a constant `rate`, each started `lat` late."""
    lats = [lat] * n if isinstance(lat, float | int) else list(lat)
    due = [i / rate for i in range(n)]
    recs = [_quick(d, lat=la, dur=dur) for d, la in zip(due, lats, strict=True)]
    return _run(recs, due)


# --- the figures table --------------------------------------------------------------------


def _three() -> PointRun:
    """Three requests due at 0, 1 and 2 s (rate 1/s), each with its own shape:

    r0: asked at 0, written at 0.01, chunks at 0.11 (1 token), 0.15 (3), 0.21 (4), ends 0.22
    r1: asked at 1, written at 1.02, one chunk of 1 token at 1.12, ends 1.13
    r2: asked at 2, never stamped as written (TTFT from the ask), chunks at 2.3 (2) and
        2.5 (6), ends 2.6
    """
    r0 = _req(0.0, [(0.11, 1), (0.15, 3), (0.21, 4)], sent=0.01, end=0.22, prompt=100)
    r1 = _req(1.0, [(1.12, 1)], sent=1.02, end=1.13, prompt=50)
    r2 = _req(2.0, [(2.3, 2), (2.5, 6)], end=2.6, prompt=80)
    return _run([r0, r1, r2], [0.0, 1.0, 2.0])


def test_ttft_counts_from_the_write_and_e2el_to_the_last_chunk() -> None:
    """TTFT is written-to-first-chunk (from the ask only when no write was stamped), E2EL
    written-to-last-chunk (not to the stream's end). Otherwise TTFT would carry the client's
    connection set-up, or E2EL the [DONE] trailer, unlike vLLM's definitions."""
    p = _result(_three(), rate=1.0)
    assert p.ttft is not None and p.e2el is not None
    assert p.ttft.n == 3
    assert p.ttft.min == pytest.approx(0.10) and p.ttft.max == pytest.approx(0.30)
    assert p.ttft.mean == pytest.approx((0.10 + 0.10 + 0.30) / 3)
    assert p.e2el.n == 3
    assert p.e2el.min == pytest.approx(0.10) and p.e2el.max == pytest.approx(0.50)
    assert p.e2el.mean == pytest.approx((0.20 + 0.10 + 0.50) / 3)


def test_tpot_is_per_request_and_absent_for_one_token() -> None:
    """TPOT = (last - first chunk) / (tokens - 1) per request, and a one-token request has
    none: a TPOT of 0 for it would pull the mean down, a per-chunk TPOT would weigh MTP's
    multi-token chunks wrongly, and (E2EL - TTFT) over tokens (not tokens - 1) is not vLLM's."""
    p = _result(_three(), rate=1.0)
    assert p.tpot is not None
    assert p.tpot.n == 2  # r1's single token has no TPOT
    assert p.tpot.min == pytest.approx(0.10 / 3)  # r0: (0.21 - 0.11) / 3
    assert p.tpot.max == pytest.approx(0.20 / 5)  # r2: (2.5 - 2.3) / 5
    assert p.tpot.mean == pytest.approx((0.10 / 3 + 0.04) / 2)


def test_itl_is_every_gap_between_chunks() -> None:
    """ITL is each gap between consecutive chunks (0.04 and 0.06 in r0, 0.2 in r2), per chunk
    as vLLM's list is: not per token, and the TTFT is not one of them."""
    p = _result(_three(), rate=1.0)
    assert p.itl is not None and p.itl.n == 3
    assert p.itl.mean == pytest.approx((0.04 + 0.06 + 0.2) / 3)
    assert p.itl.min == pytest.approx(0.04) and p.itl.max == pytest.approx(0.2)


def test_duration_throughputs_and_achieved_rate() -> None:
    """duration = first ask (0) to last end (2.6); output tok/s and total tok/s are usage
    counts of completed requests over it, achieved rate completed / duration. A duration to
    the last due time, or throughput from chunk counts, would misstate every rate."""
    p = _result(_three(), rate=1.0)
    assert p.duration_s == pytest.approx(2.6)
    assert (p.requests, p.completed) == (3, 3)
    assert (p.output_tokens, p.input_tokens) == (4 + 1 + 6, 100 + 50 + 80)
    assert p.output_tok_s == pytest.approx(11 / 2.6)
    assert p.total_tok_s == pytest.approx((11 + 230) / 2.6)
    assert p.achieved_rate == pytest.approx(3 / 2.6)
    assert p.arrival_span_s == pytest.approx(2.0)
    assert p.sent_rate == pytest.approx(1.0) and p.scheduled_rate == pytest.approx(1.0)


def test_a_failed_request_is_out_of_the_figures_but_ends_the_duration() -> None:
    """A failed request has no TTFT or tokens in the figures and is not completed, but the
    point lasts until it ended: its figures would otherwise claim a shorter point and a
    higher rate than the server gave."""
    run = _three()
    late_fail = _req(2.5, [(2.6, 1)], sent=2.51, end=4.0, failure=ErrorKind.HTTP_STATUS)
    run.records.append(late_fail)
    run.due_s.append(T0 + 2.5)
    run.dispatched_s.append(T0 + 2.5)
    run.held_s.append(0.0)
    p = _result(run, rate=1.0)
    assert (p.requests, p.completed) == (4, 3)
    assert p.failures_by_kind == {ErrorKind.HTTP_STATUS: 1}
    assert p.ttft is not None and p.ttft.n == 3
    assert p.output_tokens == 11
    assert p.duration_s == pytest.approx(4.0)
    assert p.achieved_rate == pytest.approx(3 / 4.0)


def test_goodput_counts_a_one_token_requests_tpot_as_zero() -> None:
    """Goodput = completed requests within every bound / duration, a one-token request's
    TPOT taken as 0 (vLLM's --goodput). Were its missing TPOT counted as over, r1 would
    drop out of goodput under any TPOT bound."""
    bounds = Slo(ttft_p99_s=0.2, tpot_p99_s=0.035)
    p = _result(_three(), rate=1.0, slo=bounds)
    assert p.goodput_rate == pytest.approx(2 / 2.6)  # r0 and r1; r2's TTFT is 0.3
    tight = _result(_three(), rate=1.0, slo=Slo(tpot_p99_s=0.001))
    assert tight.goodput_rate == pytest.approx(1 / 2.6)  # r1 alone: TPOT 0
    assert _result(_three(), rate=1.0).goodput_rate is None  # no SLO, no goodput


def test_lateness_is_dispatch_minus_due() -> None:
    """Lateness = dispatched - due on the client's clock: a lateness that took the start
    (after a cap's hold) or the write would blame the client for the server's queue."""
    due = [0.0, 1.0, 2.0]
    recs = [_quick(d) for d in due]
    p = _result(_run(recs, due, dispatched=[0.001, 1.002, 2.003]), rate=1.0)
    assert p.lateness is not None and p.lateness.n == 3
    assert p.lateness.min == pytest.approx(0.001) and p.lateness.max == pytest.approx(0.003)


def test_a_closed_count_point_has_no_lateness_nor_rates_of_a_schedule() -> None:
    """Closed count has no due times: no lateness, no scheduled or sent rate, and no
    late_client judgement (it would be judged against a schedule it never had)."""
    recs = [_quick(0.1 * i, dur=0.3) for i in range(30)]
    p = _result(_run(recs, None), rate=None)
    assert p.status == "valid", p.reasons
    assert p.lateness is None and p.sent_rate is None and p.scheduled_rate is None
    assert p.backlog_mid is None and p.backlog_end is None


# --- validity --------------------------------------------------------------------------


def test_a_clean_point_is_valid_with_no_reason() -> None:
    """100 quick requests on time: valid, no reason, backlog 0 or 1. Anything else means a
    rule fires on a healthy point."""
    p = _result(_steady(100, 10.0))
    assert p.status == "valid" and p.reasons == ()
    assert p.backlog_mid is not None and p.backlog_mid <= 1
    assert p.backlog_end is not None and p.backlog_end <= 1


@pytest.mark.parametrize(("failures", "status"), [(1, "valid"), (2, "failed")])
def test_failed_is_over_one_percent(failures: int, status: str) -> None:
    """1 failure of 100 is exactly 1 %, not over it: valid; 2 are over: failed, with the count
    in the reason and by kind. A rule at >= 1 %, or one that forgot the kinds, is wrong."""
    run = _steady(100, 10.0)
    for i in range(failures):
        r = run.records[10 * i + 5]
        r.fail(ErrorKind.TIMEOUT if i else ErrorKind.HTTP_STATUS, "x")
        r.finished = False
    p = _result(run)
    assert p.status == status
    assert p.completed == 100 - failures
    expected = {ErrorKind.HTTP_STATUS: 1} | ({ErrorKind.TIMEOUT: 1} if failures > 1 else {})
    assert p.failures_by_kind == expected
    if status == "failed":
        assert p.reasons == ("2 of 100 requests failed (bound 1%)",)
    else:
        assert p.reasons == ()


@pytest.mark.parametrize(("lat", "status"), [(0.009, "valid"), (0.011, "late_client")])
def test_late_client_when_lateness_p99_is_over_10_ms(lat: float, status: str) -> None:
    """At 10 requests/s (5 % of the gap is 5 ms) the bound is 10 ms: 9 ms late is valid,
    11 ms late is late_client with the p99 in the reason."""
    p = _result(_steady(100, 10.0, lat=lat))
    assert p.status == status
    if status == "valid":
        assert p.reasons == ()
    else:
        assert p.reasons == ("the client sent late: lateness p99 11.0 ms > 10 ms",)


@pytest.mark.parametrize(("lat", "status"), [(0.09, "valid"), (0.11, "late_client")])
def test_at_low_rates_lateness_may_be_five_percent_of_the_gap(lat: float, status: str) -> None:
    """At 0.5 requests/s the mean gap is 2 s and the bound 5 % of it, 100 ms: 90 ms late
    is valid (it would be late_client under the flat 10 ms), 110 ms is not."""
    p = _result(_steady(30, 0.5, lat=lat), rate=0.5)
    assert p.status == status, p.reasons
    if status == "late_client":
        assert p.reasons == ("the client sent late: lateness p99 110.0 ms > 100 ms",)


@pytest.mark.parametrize(("drift_s", "status"), [(0.0015, "valid"), (0.004, "late_client")])
def test_late_client_when_the_sent_rate_is_two_percent_off(drift_s: float, status: str) -> None:
    """100 requests at 1,000/s (a 99 ms schedule) sent ever later, up to `drift_s` at the
    last: lateness p99 stays under 10 ms, but 4 ms over 99 ms is a sent rate 3.9 % under
    the schedule's (late_client, the rates in the reason), 1.5 ms only 1.5 % (valid)."""
    lats = [drift_s * i / 99 for i in range(100)]
    p = _result(_steady(100, 1000.0, lat=lats, dur=0.002), rate=1000.0)
    assert p.lateness is not None and p.lateness.p99 < 0.010
    assert p.status == status, p.reasons
    if status == "late_client":
        assert p.reasons == ("the client sent at 961/s against a schedule of 1e+03/s",)
        assert p.sent_rate == pytest.approx(99 / (0.099 + drift_s))
        assert p.scheduled_rate == pytest.approx(1000.0)


def test_failed_comes_before_late_client() -> None:
    """A point both failing and late is `failed` (the first rule that applies), and says
    both reasons: a status chosen by the last rule would hide the failures."""
    run = _steady(100, 10.0, lat=0.02)
    for i in (3, 4):
        run.records[i].fail(ErrorKind.HTTP_STATUS, "HTTP 503")
        run.records[i].finished = False
    p = _result(run)
    assert p.status == "failed"
    assert len(p.reasons) == 2 and "lateness p99 20.0 ms" in p.reasons[1]


def _backlog_run(long_first_half: int, long_second_half: int) -> PointRun:
    """200 requests due every 0.1 s (middle send at 10.0, last at 19.9), each 50 ms long but
    for `long_first_half` of the first half (due 8.0 on, still running at 100 s) and
    `long_second_half` of the second (due 10.1 on, the same)."""
    due = [0.1 * i for i in range(200)]
    recs = []
    for i, d in enumerate(due):
        longer = (80 <= i < 80 + long_first_half) or (101 <= i < 101 + long_second_half)
        recs.append(_quick(d, dur=100.0 - d if longer else 0.05))
    return _run(recs, due)


@pytest.mark.parametrize(
    ("first", "second", "mid", "end", "status"),
    [
        # 20 running through, and the middle request itself at its own send: 21, so the
        # bound is 1.5 x 21 + 4 = 35.5. 14 stuck in the second half (+ the last request,
        # in flight at its own send) is 35: not grown past the bound, valid
        (20, 14, 21, 35, "valid"),
        # one more: 36 > 35.5 and 84 of 100 completed: overloaded
        (20, 15, 21, 36, "overloaded"),
        # nothing running through (1 at the middle: that request itself): bound 5.5.
        # 9 of the second half stuck: 10 in flight, but 90 of 100 arrivals completed
        (0, 9, 1, 10, "valid"),
        # 10 stuck: 89 completed, < 90 %: overloaded
        (0, 10, 1, 11, "overloaded"),
    ],
)
def test_overloaded_needs_both_a_grown_backlog_and_few_completions(
    first: int, second: int, mid: int, end: int, status: str
) -> None:
    """The backlog rule: in flight at the last due send > 1.5 x at the middle + 4, AND
    fewer than 90 % of the second half's arrivals completed in it. Either half alone must
    not fire (a busy but keeping-up server is not overloaded), both together must."""
    p = _result(_backlog_run(first, second))
    assert (p.backlog_mid, p.backlog_end) == (mid, end)
    assert p.status == status, p.reasons
    if status == "overloaded":
        completed = 100 - 1 - second  # the last request ends after its own send
        assert p.reasons == (
            f"overloaded: requests in flight grew from {mid} to {end} over the second half "
            f"of the arrivals, and {completed} of its 100 arrivals' worth completed in it",
        )


def test_unfinished_requests_make_a_point_overloaded_whatever_its_arrivals() -> None:
    """Requests still running at the point's bound: overloaded with their count in the
    reason, for a closed-count point too (no rate to judge a backlog by). A point that
    kept cancelled requests out of its status would look valid."""
    recs = [_quick(0.1 * i) for i in range(20)]
    for r in recs[-3:]:
        r.end_s, r.cancelled, r.finished = T0 + 30.0, True, False
    p = _result(_run(recs, None, unfinished=3), rate=None)
    assert p.status == "overloaded" and p.unfinished == 3
    assert p.reasons == ("3 request(s) still running at the point's bound",)
    assert p.completed == 17


# --- stopped early -----------------------------------------------------------------------


@pytest.mark.parametrize("ignore_eos", [True, False])
def test_stopped_early_is_counted_and_said_under_ignore_eos_only(ignore_eos: bool) -> None:
    """Two requests drawn for 10 tokens ended at 4: under ignore_eos that is the server not
    honouring it, counted and said; without ignore_eos a model may stop where it likes, so
    neither. A server cutting outputs short must never be hidden."""
    p = _result(_steady(10, 10.0), ignore_eos=ignore_eos, output_tokens=[4] * 8 + [10, 10])
    notes = [n for n in p.notes if "before their drawn output length" in n]
    if ignore_eos:
        assert p.stopped_early == 2
        assert notes == [
            "2 request(s) ended before their drawn output length under ignore_eos: the "
            "server stopped them early (its max_model_len, or ignore_eos not honoured)"
        ]
    else:
        assert p.stopped_early == 0 and notes == []
    assert p.status == "valid"


# --- SLO checks ----------------------------------------------------------------------------


def _many(n: int, ttft: float = 0.05) -> PointRun:
    due = [0.01 * i for i in range(n)]
    recs = [_req(d, [(d + ttft, 1), (d + ttft + 0.02, 3)], sent=d, end=d + ttft + 0.03)
            for d in due]  # fmt: skip
    return _run(recs, due)


def test_a_failed_request_counts_as_over_every_bound() -> None:
    """500 requests under the bound meet a p99 (459 needed); one more that failed is one
    over (n 501, over 1: undecided, 662 needed). Were it left out, a server could meet an
    SLO by failing its slow requests."""
    slo = Slo(ttft_p99_s=0.1, tpot_p99_s=0.1)
    clean = _result(_many(500), rate=100.0, slo=slo)
    assert [(c.figure, c.n, c.over, c.verdict) for c in clean.slo] == [
        ("ttft", 500, 0, "met"),
        ("tpot", 500, 0, "met"),
    ]
    run = _many(500)
    run.records[7].fail(ErrorKind.HTTP_STATUS, "HTTP 503")
    run.records[7].finished = False
    failing = _result(run, rate=100.0, slo=slo)
    assert [(c.figure, c.n, c.over, c.verdict) for c in failing.slo] == [
        ("ttft", 500, 1, "undecided"),  # 499 measured + 1 failed
        ("tpot", 500, 1, "undecided"),
    ]
    assert failing.status == "valid"  # 1 of 500 is under the failure bound


def test_a_cancelled_request_is_not_over() -> None:
    """A request the client cancelled (failure recorded or not) is not a server failure: it
    does not count over a bound (the point's `unfinished` rule judges those)."""
    slo = Slo(ttft_p99_s=0.1)
    run = _many(501)
    run.records[3].cancelled, run.records[3].finished = True, False
    run.records[4].cancelled, run.records[4].finished = True, False
    run.records[4].fail(ErrorKind.TRANSPORT, "transport error: cancelled")
    p = _result(run, rate=100.0, slo=slo)
    assert [(c.n, c.over, c.verdict) for c in p.slo] == [(499, 0, "met")]


def test_slo_bounds_are_server_seconds_divided_by_the_speed() -> None:
    """A 0.5 s server-time bound at speed 10 is 0.05 s of client time: TTFTs of 0.06 s are
    over it. A bound not divided by the speed would pass a twin 10x too slow."""
    p = _result(_many(100, ttft=0.06), rate=100.0, slo=Slo(ttft_p99_s=0.5), speed=10.0)
    (check,) = p.slo
    assert check.bound_s == pytest.approx(0.05)
    assert (check.n, check.over, check.verdict) == (100, 100, "missed")
    assert p.goodput_rate == 0.0


# --- order-statistic intervals ---------------------------------------------------------


@pytest.mark.parametrize("n", [5, 6, 35, 36, 367, 368])
def test_intervals_only_with_enough_requests(n: int) -> None:
    """p50 needs 6 requests for a 95 % interval, p90 36 and p99 368 (docs/workloads.md):
    with fewer the figure stands alone (None), with enough it has one containing it. An
    interval on too few values would claim a precision the order statistics cannot give."""
    run = _many(n)
    for i, r in enumerate(run.records):  # distinct TTFTs: 10 ms + i us
        r.first_token_s = r.ttft_from_s + 0.01 + i * 1e-6
    p = _result(run, rate=100.0)
    q = p.ttft
    assert q is not None and q.n == n
    for name, need in (("p50", 6), ("p90", 36), ("p99", 368)):
        ci = getattr(q, f"{name}_ci")
        if n < need:
            assert ci is None, (name, n)
        else:
            assert ci is not None, (name, n)
            assert ci[0] <= getattr(q, name) <= ci[1]
            ttfts = [v for r in run.records if (v := r.ttft_s) is not None]
            assert ci == stats.quantile_interval(ttfts, int(name[1:]) / 100)


# --- the cap and the dispatcher ------------------------------------------------------


def test_a_capped_point_dispatched_on_time_is_not_late_client() -> None:
    """max_in_flight = 2 at a rate two streams cannot serve: every request dispatched on
    its due time (lateness 0), then held by the cap until a stream frees. The client kept
    its schedule; the hold is recorded apart (`held`, docs/workloads.md). Calling the point
    late_client (a sent rate taken after the hold) blames the client for the cap, and a
    capacity search reads it as undecided instead of missed."""
    due = [0.005 * i for i in range(40)]  # 200/s
    recs = []
    free = [0.0, 0.0]  # when each of the two streams is next free
    for d in due:
        k = 0 if free[0] <= free[1] else 1
        start = max(d, free[k])
        recs.append(_quick(start, dur=0.05))  # 2 streams serve 40/s
        free[k] = start + 0.05
    run = _run(recs, due, dispatched=due)
    run.held_s = [r.start_s - (T0 + d) for r, d in zip(recs, due, strict=True)]
    p = _result(run, rate=200.0)
    assert p.lateness is not None and p.lateness.max == 0.0
    assert p.held is not None and p.held.max > 0.5
    assert p.status != "late_client", p.reasons


def test_the_dispatcher_never_sends_before_the_due_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_until` must not return before the due time: lateness is `dispatched - due`, the
    client's own delay, and a request sent early is a schedule not kept (before the spin,
    23 of 60 requests against the twin went out up to 0.37 ms early: a wait under 0.5 ms is
    a 0 ms uvloop timer, and every wake returned at once). A uvloop-like timer is played
    here: each sleep lasts its delay rounded to whole milliseconds, plus 2 us a turn."""
    from bench.workload import runner

    now = [0.0]

    async def ms_timer(delay: float) -> None:
        now[0] += round(delay * 1000) / 1000 + 2e-6

    monkeypatch.setattr(runner, "asyncio", type("Loop", (), {"sleep": staticmethod(ms_timer)}))
    due = 0.0004
    coro = runner._until(due, lambda: now[0])
    with pytest.raises(StopIteration):
        coro.send(None)
    assert now[0] >= due, f"returned {(due - now[0]) * 1e3:.3f} ms before its due time"
