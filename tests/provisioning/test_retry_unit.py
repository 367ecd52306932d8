"""provisioning.retry: attempts, deadline, backoff, what passes through, what is logged.

Time is a fake clock that the injected sleep advances: nothing here really sleeps.
"""

from __future__ import annotations

import logging

import pytest
from structlog.testing import capture_logs

from provisioning.retry import RetryPolicy, retry_call


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Flaky:
    """Fails with FAILURES in turn, then returns "done"; records the attempts it was given."""

    def __init__(self, *failures: Exception, cost_s: float = 0.0, time: FakeTime) -> None:
        self.failures = list(failures)
        self.seen: list[int] = []
        self.cost_s = cost_s
        self.time = time

    def __call__(self, attempt: int) -> str:
        self.seen.append(attempt)
        self.time.now += self.cost_s
        if self.failures:
            raise self.failures.pop(0)
        return "done"


def _oserror(e: Exception) -> bool:
    return isinstance(e, OSError)


def test_transient_failures_are_retried_with_doubling_capped_backoff() -> None:
    t = FakeTime()
    op = Flaky(*[OSError("reset")] * 5, time=t)
    policy = RetryPolicy(attempts=6, first_backoff_s=0.5, max_backoff_s=4.0)
    got = retry_call(op, policy, transient=_oserror, event="x_retry", sleep=t.sleep, clock=t.clock)
    assert got == "done"
    assert op.seen == [0, 1, 2, 3, 4, 5]
    assert t.slept == [0.5, 1.0, 2.0, 4.0, 4.0]  # doubled, then capped at max_backoff_s


def test_out_of_attempts_the_last_failure_is_raised_with_no_sleep_after_it() -> None:
    t = FakeTime()
    op = Flaky(*[OSError(f"reset {i}") for i in range(5)], time=t)
    with pytest.raises(OSError, match="reset 2"):
        retry_call(
            op, RetryPolicy(attempts=3), transient=_oserror, event="e", sleep=t.sleep, clock=t.clock
        )
    assert op.seen == [0, 1, 2]
    assert t.slept == [0.5, 1.0]


def test_give_up_replaces_the_last_failure_and_is_told_how_many_calls_were_made() -> None:
    t = FakeTime()
    op = Flaky(*[EOFError("gone")] * 4, time=t)
    calls: list[int] = []

    def give_up(exc: Exception, made: int) -> BaseException:
        calls.append(made)
        return RuntimeError(f"failed after {made} attempts: {exc}")

    with pytest.raises(RuntimeError, match="failed after 4 attempts: gone") as err:
        retry_call(
            op,
            RetryPolicy(attempts=4),
            transient=lambda e: True,
            event="e",
            give_up=give_up,
            sleep=t.sleep,
            clock=t.clock,
        )
    assert calls == [4]
    assert err.value.__suppress_context__ and err.value.__cause__ is None  # `from None`


def test_a_failure_that_is_not_transient_passes_straight_through() -> None:
    t = FakeTime()
    boom = ValueError("refused key")
    op = Flaky(boom, time=t)
    with pytest.raises(ValueError, match="refused key") as err:
        retry_call(
            op, RetryPolicy(attempts=5), transient=_oserror, event="e", sleep=t.sleep, clock=t.clock
        )
    assert err.value is boom  # the same object, not wrapped
    assert op.seen == [0] and t.slept == []


def test_give_up_none_lets_the_failure_itself_through() -> None:
    t = FakeTime()
    op = Flaky(KeyError("k"), time=t)
    with pytest.raises(KeyError):
        retry_call(
            op,
            RetryPolicy(),
            transient=_oserror,
            event="e",
            give_up=lambda exc, made: None,
            sleep=t.sleep,
            clock=t.clock,
        )


def test_keyboard_interrupt_is_never_caught() -> None:
    t = FakeTime()

    def op(attempt: int) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        retry_call(
            op, RetryPolicy(), transient=lambda e: True, event="e", sleep=t.sleep, clock=t.clock
        )
    assert t.slept == []


def test_the_deadline_stops_retrying_before_a_call_that_would_start_after_it() -> None:
    t = FakeTime()
    # each call takes 1 s; backoff 1, 2, 4 ...: calls start at 0, 2, 5, 10 s
    op = Flaky(*[OSError("slow")] * 10, cost_s=1.0, time=t)
    policy = RetryPolicy(attempts=100, first_backoff_s=1.0, max_backoff_s=60.0, deadline_s=6.0)
    with pytest.raises(OSError, match="slow"):
        retry_call(op, policy, transient=_oserror, event="e", sleep=t.sleep, clock=t.clock)
    assert op.seen == [0, 1, 2]  # the 4th would start at 10 s > 6 s
    assert t.slept == [1.0, 2.0]


def test_between_runs_after_the_backoff_and_before_the_next_call() -> None:
    t = FakeTime()
    order: list[str] = []
    op = Flaky(OSError("dropped"), time=t)

    def reconnect(exc: Exception) -> None:
        order.append(f"reconnect after {exc} at {t.now - 100.0}")

    def call(attempt: int) -> str:
        order.append(f"call {attempt}")
        return op(attempt)

    retry_call(
        call,
        RetryPolicy(),
        transient=_oserror,
        event="e",
        between=reconnect,
        sleep=t.sleep,
        clock=t.clock,
    )
    assert order == ["call 0", "reconnect after dropped at 0.5", "call 1"]


def test_wait_first_backs_off_before_the_first_call_too() -> None:
    t = FakeTime()
    op = Flaky(OSError("down"), OSError("down"), time=t)
    retry_call(
        op,
        RetryPolicy(attempts=3),
        transient=_oserror,
        event="e",
        wait_first=True,
        sleep=t.sleep,
        clock=t.clock,
    )
    assert t.slept == [0.5, 1.0, 2.0]
    assert op.seen == [0, 1, 2]


def test_a_zero_backoff_never_sleeps() -> None:
    t = FakeTime()
    op = Flaky(OSError("a"), OSError("b"), time=t)
    policy = RetryPolicy(attempts=3, first_backoff_s=0.0)
    assert retry_call(op, policy, transient=_oserror, event="e", sleep=t.sleep) == "done"
    assert t.slept == []


def test_jitter_shortens_each_wait_by_up_to_its_fraction() -> None:
    t = FakeTime()
    op = Flaky(OSError("a"), OSError("b"), time=t)
    draws = iter([0.5, 1.0])
    policy = RetryPolicy(attempts=3, first_backoff_s=2.0, jitter=0.5)
    retry_call(
        op,
        policy,
        transient=_oserror,
        event="e",
        sleep=t.sleep,
        clock=t.clock,
        rand=lambda: next(draws),
    )
    assert t.slept == [2.0 * 0.75, 4.0 * 0.5]


def test_a_policy_rejects_what_cannot_be_meant() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="fraction"):
        RetryPolicy(jitter=1.5)


def test_one_log_line_per_retry_with_the_callers_fields() -> None:
    t = FakeTime()
    op = Flaky(OSError("reset by peer"), EOFError(), time=t)
    done = iter([10, 20])
    with capture_logs() as logs:
        retry_call(
            op,
            RetryPolicy(attempts=3),
            transient=lambda e: True,
            event="copy_resumed",
            log_fields=lambda: {"host": "gpu01", "bytes_done": next(done)},
            level=logging.WARNING,
            sleep=t.sleep,
            clock=t.clock,
        )
    assert logs == [
        {
            "event": "copy_resumed",
            "log_level": "warning",
            "attempt": 1,
            "attempts": 3,
            "delay_s": 0.5,
            "error": "reset by peer",
            "host": "gpu01",
            "bytes_done": 10,
        },
        {
            "event": "copy_resumed",
            "log_level": "warning",
            "attempt": 2,
            "attempts": 3,
            "delay_s": 1.0,
            "error": "EOFError",
            "host": "gpu01",
            "bytes_done": 20,
        },
    ]


def test_no_log_line_when_nothing_is_retried() -> None:
    t = FakeTime()
    with capture_logs() as logs, pytest.raises(OSError, match="x"):
        retry_call(
            Flaky(OSError("x"), time=t),
            RetryPolicy(attempts=1),
            transient=_oserror,
            event="e",
            sleep=t.sleep,
            clock=t.clock,
        )
    assert logs == []
