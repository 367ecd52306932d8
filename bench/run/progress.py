"""Live progress: one rewritten status line on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
from typing import TextIO

import structlog

from bench.results import CellResult
from bench.run.cell import CellRun
from bench.stream.client import Clock


def _clock_text(seconds: float) -> str:
    m, s = divmod(max(0, round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


class SweepProgress:
    def __init__(
        self,
        clock: Clock,
        *,
        total_cells: int,
        estimated_s: float,
        stream: TextIO | None = None,
        tty: bool | None = None,
        speed_factor: float = 1.0,
    ) -> None:
        self.clock = clock
        # Rates are shown at server speed, like every figure of the run: a twin at speed 5
        # makes 5x the tokens per wall-clock second.
        self.speed = speed_factor
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.total = total_cells
        self.estimated_s = estimated_s
        self.t0 = clock()
        self.done = 0
        self.name = ""
        self.log = structlog.get_logger("bench.run")
        self._last_tokens: tuple[float, int] | None = None

    def cell_started(self, name: str) -> None:
        self.name = name
        self._last_tokens = None
        if not self.tty:
            self.log.info("cell_started", cell=name, index=self.done + 1, of=self.total)

    def update(self, run: CellRun) -> None:
        if not self.tty:
            return
        now = self.clock()
        if run.w0_s is None:
            with_token = sum(r.first_token_s is not None for r in run.records)
            self.stream.write(
                f"\r\x1b[2K[{self.done + 1}/{self.total}] {self.name}  warming up: "
                f"{with_token} requests with a token, {now - run.t0_s:.0f} s"
            )
            self.stream.flush()
            return
        tokens = run.tokens_since(run.w0_s)
        live = ""
        if self._last_tokens is not None and now > self._last_tokens[0]:
            rate = (tokens - self._last_tokens[1]) / (now - self._last_tokens[0]) / self.speed
            live = f"{rate:,.0f} tok/s"
        self._last_tokens = (now, tokens)
        elapsed = now - self.t0
        eta = self.eta_s(now)
        self.stream.write(
            f"\r\x1b[2K[{self.done + 1}/{self.total}] {self.name}  "
            f"elapsed {_clock_text(elapsed)}  ETA {_clock_text(eta)}  {live}"
        )
        self.stream.flush()

    def elapsed_s(self, now: float | None = None) -> float:
        """Seconds since the sweep began."""
        return (self.clock() if now is None else now) - self.t0

    def eta_s(self, now: float | None = None) -> float:
        """The plan's estimate less the time elapsed, never below 0 (what the line shows;
        bench.live.prometheus serves it too)."""
        return max(0.0, self.estimated_s - self.elapsed_s(now))

    def cell_finished(self, name: str, result: CellResult, total_tok_s: float | None) -> None:
        self.done += 1
        if self.tty:
            rate = "" if total_tok_s is None else f" {total_tok_s:,.1f} tok/s"
            self.stream.write(f"\r\x1b[2K{name}: {result.status}{rate}\n")
            self.stream.flush()
        else:
            self.log.info(
                "cell_finished",
                cell=name,
                status=result.status,
                reason=result.reason,
                total_tok_s=None if total_tok_s is None else round(total_tok_s, 1),
            )

    def note(self, event: str, **fields: object) -> None:
        if self.tty:
            details = " ".join(f"{k}={v}" for k, v in fields.items())
            self.stream.write(f"\r\x1b[2K{event} {details}\n")
            self.stream.flush()
        else:
            self.log.info(event, **fields)
