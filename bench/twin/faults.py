"""Fault injection for reliability tests: which faults are on, and the seeded dice for them."""

from __future__ import annotations

import base64
import random
import urllib.parse
from dataclasses import dataclass


@dataclass(frozen=True)
class Faults:
    crash_after_s: float | None = None  # the process exits abruptly after this (wall) time
    cut_fraction: float = 0.0  # streams dropped mid-way, without the terminating chunk
    error_fraction: float = 0.0  # completion requests answered with `error_status`
    error_status: int = 500
    stall_s: float = 0.0  # a stream holds its chunks this long after its first token
    stall_fraction: float = 1.0
    malformed_fraction: float = 0.0  # streams that emit one invalid JSON chunk
    no_metrics: bool = False  # /metrics answers 404
    # An injected error's message and the log repeat the request's Authorization header, in
    # the forms a server or a library re-encodes it (bench.secrets must mask every one).
    echo_auth: bool = False


def echoed(authorization: str) -> str:
    """What an echoing server says of the Authorization header it was sent."""
    url = urllib.parse.quote(authorization, safe="")
    b64 = base64.b64encode(authorization.encode()).decode()
    return f"{authorization} (url {url}; basic {b64})"


@dataclass(frozen=True)
class StreamFaults:
    """What happens to one request, decided when it arrives."""

    error: bool = False
    cut_at_tokens: int | None = None
    stall: bool = False
    malformed: bool = False


class FaultDice:
    def __init__(self, faults: Faults, seed: int) -> None:
        self.faults = faults
        self._rng = random.Random(seed ^ 0x5EED)

    def roll(self, max_tokens: int) -> StreamFaults:
        f, rnd = self.faults, self._rng.random
        if f.error_fraction and rnd() < f.error_fraction:
            return StreamFaults(error=True)
        cut = None
        if f.cut_fraction and rnd() < f.cut_fraction:
            cut = self._rng.randint(1, max(1, max_tokens // 2))
        return StreamFaults(
            cut_at_tokens=cut,
            stall=bool(f.stall_s) and rnd() < f.stall_fraction,
            malformed=bool(f.malformed_fraction) and rnd() < f.malformed_fraction,
        )
