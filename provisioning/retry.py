"""Retrying an operation that fails transiently: the one retry loop of provisioning.

    retry_call(op, policy, transient=..., event=...)
        op(0) → fails transiently → log EVENT → sleep backoff → between(exc) → op(1) → ...

What a retry is made of, and who decides it:

- how many calls and for how long: RetryPolicy (attempts, and optionally a deadline);
- how long between them: exponential backoff from first_backoff_s, doubled per attempt,
  capped at max_backoff_s, optionally shortened by a random fraction (jitter) so that
  several callers do not retry in step;
- which failures are worth another call: the caller's `transient` predicate; any other
  exception passes straight through, unchanged and at once;
- what to raise when retrying stops on a failure: the caller's `give_up` (our error for
  the user, e.g. SshUnreachable), or the failure itself;
- what to do before the next call (reopen a connection): the caller's `between`.

Time is injected (sleep, clock, rand), so the tests run without real sleeps.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import structlog

log = structlog.get_logger("provisioning.retry")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """At most ATTEMPTS calls (and, with deadline_s, none that would start after that many
    seconds from the first); between them first_backoff_s, doubled each time up to
    max_backoff_s, each shortened by up to a `jitter` fraction at random."""

    attempts: int = 5
    first_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    deadline_s: float | None = None
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"a retry policy makes at least 1 attempt, not {self.attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter is a fraction from 0 to 1, not {self.jitter}")

    def backoff_s(self, attempt: int) -> float:
        """The wait after failed attempt ATTEMPT (0-based), before any jitter."""
        return float(min(self.max_backoff_s, self.first_backoff_s * (2**attempt)))

    def delay_s(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """backoff_s shortened by up to `jitter` of itself (rand() in [0, 1))."""
        base = self.backoff_s(attempt)
        return base * (1.0 - self.jitter * rand()) if self.jitter else base


def retry_call(
    op: Callable[[int], T],
    policy: RetryPolicy,
    *,
    transient: Callable[[Exception], bool],
    event: str,
    give_up: Callable[[Exception, int], BaseException | None] | None = None,
    between: Callable[[Exception], None] | None = None,
    log_fields: Callable[[], Mapping[str, object]] | None = None,
    level: int = logging.INFO,
    wait_first: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
) -> T:
    """OP(attempt) until it returns, retrying the failures `transient` accepts.

    After a transient failure with a call left (policy.attempts, policy.deadline_s): one
    log line EVENT (attempt, attempts, delay_s, error and log_fields()) at LEVEL, the
    backoff, then BETWEEN(failure). When retrying stops on a failure (not transient, or no
    call left), GIVE_UP(failure, calls made) is raised in its place (from None) unless it
    returns None; then the failure itself is. WAIT_FIRST: back off before the first call
    too (reopening a connection that has just dropped). A delay of 0 sleeps not at all.
    """
    start = clock()
    attempt = 0
    if wait_first:
        _pause(policy.delay_s(0, rand), sleep)
    while True:
        try:
            return op(attempt)
        except Exception as exc:
            retry = transient(exc)
            delay = policy.delay_s(attempt + 1 if wait_first else attempt, rand) if retry else 0.0
            if not retry or not _another(policy, attempt + 1, clock() + delay - start):
                failure = give_up(exc, attempt + 1) if give_up is not None else None
                if failure is None:
                    raise
                raise failure from None
            fields = dict(log_fields()) if log_fields is not None else {}
            log.log(
                level,
                event,
                attempt=attempt + 1,
                attempts=policy.attempts,
                delay_s=round(delay, 3),
                error=str(exc) or type(exc).__name__,
                **fields,
            )
            _pause(delay, sleep)
            if between is not None:
                between(exc)
            attempt += 1


def _another(policy: RetryPolicy, made: int, next_start_s: float) -> bool:
    """Whether a call may follow MADE calls, the next starting NEXT_START_S after the first."""
    if made >= policy.attempts:
        return False
    return policy.deadline_s is None or next_start_s <= policy.deadline_s


def _pause(delay_s: float, sleep: Callable[[float], None]) -> None:
    if delay_s > 0:
        sleep(delay_s)
