"""`--slo` parsing and MLPerf's early-stopping judgement of a p99 bound (bench.workload.slo),
held to the numbers MLPerf's loadgen prints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.errors import UsageError
from bench.workload import slo
from bench.workload_spec import Slo
from tests.support.budget import fixed_budget


def test_no_overs_needs_459_queries_as_loadgen_says() -> None:
    """Loadgen: with 0 overs, 21 processed 'would need at least 438 more' and 300 processed
    159 more: 459 in all. Another number means bench's verdicts are not MLPerf's."""
    assert slo.more_needed(21, 0) == 438
    assert slo.more_needed(300, 0) == 159
    assert slo.more_needed(459, 0) == 0
    assert slo.verdict(459, 0) == "met"
    assert slo.verdict(458, 0) == "undecided"


@pytest.mark.parametrize(("over", "total"), [(1, 662), (10, 2010), (100, 12571)])
def test_the_queries_needed_with_overs_match_loadgens_formula(over: int, total: int) -> None:
    """Loadgen's h + t (smallest h with I_0.99(h, t + 1) < 0.01), computed with scipy: the
    fewest requests of which `over` are over the bound that meet it."""
    assert slo.more_needed(over, over) == total - over
    assert slo.verdict(total, over) == "met"
    assert slo.verdict(total - 1, over) == "undecided"


@pytest.mark.parametrize(
    ("n", "p", "passing_overs"),
    [
        # Published LoadGen summaries (mlcommons/inference_results_v4.1, open/Krai/results/
        # .../mlperf_log_summary.txt): "Processed at least 662 queries (14660). Would discard
        # 117 highest latency queries" (7920t-kilt-onnxruntime_cpu/resnet50/multistream):
        # loadgen discards t - 1, so 118 overs pass and 119 do not.
        (14660, 0.99, 118),
        (81152, 0.99, 745),  # 7920t-kilt-onnxruntime_gpu/resnet50/multistream: discard 744
        (57903, 0.90, 5622),  # 7920t-kilt-onnxruntime_cpu/resnet50/singlestream, p90
        # An INVALID server run's "would need at least 104136 more" at 270000 with 3600 over.
        (374136, 0.99, 3600),
    ],
)
def test_published_loadgen_counts_are_met_at_their_edge(
    n: int, p: float, passing_overs: int
) -> None:
    assert slo.verdict(n, passing_overs, p) == "met"
    assert slo.verdict(n, passing_overs + 1, p) != "met"


def test_a_billion_requests_are_judged_quickly_and_at_the_one_percent_line() -> None:
    # n = 1e9 at 1 %: sd = sqrt(1e9 x 0.01 x 0.99) = 3146; the line lies ~2.33 sd under 1e7.
    assert slo.verdict(10**9, 10**7 - 20_000) == "met"
    assert slo.verdict(10**9, 10**7) != "met"
    assert slo.more_needed(270_000, 3600) == 104_136


@pytest.mark.parametrize(
    ("n", "over", "expected"),
    [
        (1000, 0, "met"),  # P(no over | p99 on the bound) = 0.99^1000 ~ 4e-5
        (1000, 100, "missed"),  # 100 overs where 10 are expected
        (20, 20, "missed"),  # P(all 20 over) = 1e-40
        (100, 1, "undecided"),  # 1 over in 100 is what a p99 on the bound gives
        (100, 0, "undecided"),  # too few requests to tell
        (0, 0, "undecided"),
    ],
)
def test_verdict_on_clear_cases(n: int, over: int, expected: str) -> None:
    assert slo.verdict(n, over) == expected


def test_more_needed_is_zero_exactly_when_met() -> None:
    """`more_needed` and `verdict` state one rule: k more under the bound make it met, k - 1
    do not, and it is 0 exactly when the verdict is met."""
    for n in (0, 50, 458, 459, 700, 3000):
        for over in (0, 1, 3, 10, 40):
            if over > n:
                continue
            k = slo.more_needed(n, over)
            assert k is not None
            assert (k == 0) == (slo.verdict(n, over) == "met")
            assert slo.verdict(n + k, over) == "met"
            if k:
                assert slo.verdict(n + k - 1, over) != "met"


def test_judge_counts_strictly_over_the_bound() -> None:
    """The SLO reads `<=`: a value on the bound is within it."""
    check = slo.judge("ttft", [0.5] * 400 + [2.0] * 100, 2.0)
    assert (check.figure, check.n, check.over, check.verdict) == ("ttft", 500, 0, "met")
    assert check.more_needed == 0 and check.bound_s == 2.0
    missed = slo.judge("tpot", [0.01] * 900 + [0.5] * 100, 0.08)
    assert (missed.over, missed.verdict) == (100, "missed")
    assert missed.more_needed is not None and missed.more_needed > 0


def test_parse_reads_seconds_milliseconds_and_spaces() -> None:
    assert slo.parse("ttft_p99<=2s,tpot_p99<=80ms") == Slo(ttft_p99_s=2.0, tpot_p99_s=0.08)
    assert slo.parse("  ttft_p99 <= 1.5 s ,  e2el_p99<=2500ms ") == Slo(
        ttft_p99_s=1.5, e2el_p99_s=2.5
    )
    assert slo.parse("tpot_p99<=1e-3s").bounds() == {"tpot": 0.001}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", "does not parse"),
        ("ttft_p97<=2s", "does not parse"),  # percentiles 50, 90, 95 and 99 only
        ("foo_p99<=2s", "does not parse"),
        ("ttft_p99<2s", "does not parse"),
        ("ttft_p99<=2", "does not parse"),  # no unit
        ("ttft_p99<=0s", "above 0"),
        ("tpot_p99<=0ms", "above 0"),
        ("ttft_p99<=-1s", "does not parse"),
        ("ttft_p99<=nans", "does not parse"),
        ("ttft_p99<=nan", "does not parse"),
        ("ttft_p99<=infs", "does not parse"),
        ("ttft_p99<=1e400s", "at most a day"),
        ("ttft_p99<=2s,", "does not parse"),
        ("ttft_p99<=2s,ttft_p99<=3s", "twice"),
        ("ttft_p99<=2s\ntpot_p99<=80ms", "does not parse"),
    ],
)
def test_parse_rejects_bad_text_with_one_line(text: str, named: str) -> None:
    """Each a UsageError (exit 2) of one line saying what is wrong, never a traceback or a
    silently ignored bound."""
    with pytest.raises(UsageError) as caught:
        slo.parse(text)
    assert named in str(caught.value)
    assert "\n" not in str(caught.value) and "\n" not in caught.value.one_line()


_TERMS = st.builds(
    "{}{}{}{}{}".format,
    st.sampled_from(["ttft_p99", "tpot_p99", "e2el_p99", "ttft_p95", "x", ""]),
    st.sampled_from(["<=", "<", " <= ", "="]),
    st.sampled_from(["0", "1", "2.5", "1e-3", "1e400", "-1", "nan", "inf", "80", ""]),
    st.sampled_from(["s", "ms", " s", "", "m"]),
    st.sampled_from(["", " ", "\n"]),
)


@fixed_budget(400)
@given(st.one_of(st.text(max_size=80), st.lists(_TERMS, max_size=4).map(",".join)))
def test_parse_returns_an_slo_or_a_usage_error(text: str) -> None:
    """Whatever the text: an Slo with bounds in (0 s, a day], or one UsageError line."""
    parsed = _parse_or_line(text)
    if isinstance(parsed, str):
        assert "\n" not in parsed
    else:
        assert parsed.bounds() and all(0.0 < b <= 86400.0 for b in parsed.bounds().values())


def _parse_or_line(text: str) -> Slo | str:
    """The Slo, or the UsageError's line; any other exception propagates (and fails)."""
    try:
        return slo.parse(text)
    except UsageError as exc:
        return exc.one_line()


def test_other_percentiles_parse_and_are_judged_by_their_own_share() -> None:
    """A p90 bound allows a tenth of the requests over it: 44 requests with none over
    already show it met (0.9^44 < 0.01), where a p99 needs 459; MLPerf's rule with its
    percentile in place of 0.99."""
    got = slo.parse("ttft_p90<=1s, tpot_p95<=50ms, ttft_p99<=3s")
    assert got.terms() == [("ttft", 90, 1.0), ("ttft", 99, 3.0), ("tpot", 95, 0.05)]
    assert got.bounds() == {"ttft": 1.0, "tpot": 0.05}  # a request's tightest
    assert slo.more_needed(0, 0, 0.9) == 44 and slo.more_needed(0, 0, 0.95) == 90
    assert slo.verdict(44, 0, 0.9) == "met" and slo.verdict(43, 0, 0.9) == "undecided"
    assert slo.verdict(100, 25, 0.9) == "missed"
    check = slo.judge("ttft", [0.5] * 40 + [2.0] * 4, 1.0, 90)
    assert (check.percentile, check.n, check.over, check.verdict) == (90, 44, 4, "undecided")
