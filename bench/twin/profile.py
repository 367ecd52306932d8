"""Performance profiles of the twin: data files, validated, with the engine's cost functions.

A profile describes one simulated server: its limits (max_model_len, KV capacity, token
budget), its speculative-decoding acceptance, and its step costs. Step costs are tables at
anchor contexts (tokens per request) and anchor batch sizes, interpolated linearly in batch
and in log(context) between anchors, so the engine can price any step.
"""

from __future__ import annotations

import bisect
import json
import math
import pathlib
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bench.errors import ProfileError, validation_message

PROFILE_DIR = pathlib.Path(__file__).with_name("profiles")


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    model: str = "qwen"
    vllm_version: str = "0.30.1rc1.dev452+g73a583112"
    max_model_len: int = Field(gt=0)
    block_size: int = Field(gt=0)
    kv_capacity_tokens: int = Field(gt=0)
    # What /metrics reports as num_gpu_blocks; for hybrid models blocks x size overstates
    # the real capacity, which is why kv_cache_size_tokens is the label to trust.
    reported_num_gpu_blocks: int = Field(gt=0)
    max_num_batched_tokens: int = Field(gt=0)
    max_num_seqs: int = Field(gt=0)
    # Seconds (server time) from a client's disconnect until the engine is told to abort its
    # request, which it then does at the next step boundary: until then the request keeps
    # running and holding KV blocks, as in vLLM (the API server notices the disconnect and
    # the engine core reads the abort between steps). 0.1 s is a burst of ~100 cancelled
    # streams' aborts going through vLLM's single API-server process.
    abort_delay_s: float = Field(default=0.1, ge=0.0)
    num_speculative_tokens: int = Field(ge=0, le=4)
    # P(k drafts accepted), k = 0..num_speculative_tokens: a step yields 1 + k tokens.
    accept_probs: list[float] = [1.0]
    contexts: list[int] = Field(min_length=1)
    batches: list[int] = Field(min_length=1)
    decode_step_s: list[list[float]]
    prefill_s_per_token: list[float]
    # Hybrid (Mamba + attention) models: a prefix-cache hit still recomputes this many
    # trailing prompt tokens (the state is only cached at coarse boundaries).
    warm_recompute_tokens: list[float]
    # API-server work before a request reaches the scheduler (rendering, tokenizing: it
    # grows with the prompt), parallel across requests; per context anchor.
    request_overhead_s: list[float]
    # ... and the part of that work done by a single FIFO worker (serialized across requests),
    # per context anchor and per batch anchor: the worker's time per prompt when the server
    # holds that many requests as it starts on it (it streams them from the same process).
    frontend_s: list[list[float]]
    # MTP acceptance differs between requests (their texts differ): this share of requests
    # (every 1/fraction-th, deterministically) loses `slow_request_drop` accepted drafts
    # per step on average, per context anchor.
    slow_request_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    slow_request_drop: list[float] | None = None
    # Run-to-run noise (issue 14), as the relative sd of a log-normal factor on every step
    # cost of a cell: one part drawn per run (server start) and cell, shared by that run's
    # trials, and one part drawn per trial and cell; seeded by the run's seed. Together
    # sqrt(0.007² + 0.007²) ≈ 1 % of each cell's figures; 0 turns either off.
    noise_run: float = Field(default=0.007, ge=0.0, le=0.5)
    noise_trial: float = Field(default=0.007, ge=0.0, le=0.5)
    # A factor drawn once per run and shared by every cell of it (a whole server start fast
    # or slow, as tests/data/noise_corpus shows on real engines): its log is noise_shared x
    # a Student t with noise_shared_df degrees of freedom (heavy tails; 0 = normal).
    noise_shared: float = Field(default=0.0, ge=0.0, le=1.0)
    noise_shared_df: float = Field(default=0.0, ge=0.0, le=1000.0)

    @model_validator(mode="after")
    def _shapes(self) -> Profile:
        n_ctx, n_b = len(self.contexts), len(self.batches)
        if self.contexts != sorted(self.contexts) or self.batches != sorted(self.batches):
            raise ValueError("contexts and batches must be ascending")
        if len(self.decode_step_s) != n_ctx or any(len(r) != n_b for r in self.decode_step_s):
            raise ValueError(f"decode_step_s must be {n_ctx} rows of {n_b} step times")
        for name in (
            "prefill_s_per_token",
            "warm_recompute_tokens",
            "request_overhead_s",
        ):
            if len(getattr(self, name)) != n_ctx:
                raise ValueError(f"{name} needs one value per context ({n_ctx})")
        if len(self.frontend_s) != n_ctx or any(len(r) != n_b for r in self.frontend_s):
            raise ValueError(f"frontend_s must be {n_ctx} rows of {n_b} times")
        if self.slow_request_drop is not None and len(self.slow_request_drop) != n_ctx:
            raise ValueError(f"slow_request_drop needs one value per context ({n_ctx})")
        if len(self.accept_probs) != self.num_speculative_tokens + 1:
            raise ValueError("accept_probs needs num_speculative_tokens + 1 entries")
        if abs(sum(self.accept_probs) - 1.0) > 1e-6 or min(self.accept_probs) < 0:
            raise ValueError("accept_probs must be probabilities summing to 1")
        return self

    @cached_property
    def _log_ctx(self) -> list[float]:
        return [math.log(c) for c in self.contexts]

    @cached_property
    def num_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    @cached_property
    def mean_tokens_per_step(self) -> float:
        return sum((k + 1) * p for k, p in enumerate(self.accept_probs))

    def _ctx_weights(self, ctx: float) -> tuple[int, int, float]:
        """Anchor rows (i, j) and the weight of j, in log(context), clamped at the ends."""
        logs = self._log_ctx
        x = math.log(max(ctx, 1.0))
        if x <= logs[0] or len(logs) == 1:
            return 0, 0, 0.0
        if x >= logs[-1]:
            return len(logs) - 1, len(logs) - 1, 0.0
        j = bisect.bisect_right(logs, x)
        i = j - 1
        return i, j, (x - logs[i]) / (logs[j] - logs[i])

    def _in_ctx(self, values: list[float], ctx: float) -> float:
        i, j, w = self._ctx_weights(ctx)
        return values[i] * (1.0 - w) + values[j] * w

    def _in_batch(self, row: list[float], n: float) -> float:
        b = self.batches
        if len(b) == 1:
            return row[0] * n / b[0]
        if n <= b[0]:
            return row[0] * n / b[0]
        k = min(max(bisect.bisect_right(b, n), 1), len(b) - 1)
        lo, hi = b[k - 1], b[k]
        return row[k - 1] + (row[k] - row[k - 1]) * (n - lo) / (hi - lo)

    def decode_step_seconds(self, batch: int, mean_context: float) -> float:
        """Cost of the decode part of a step: `batch` requests at `mean_context` tokens each."""
        if batch <= 0:
            return 0.0
        i, j, w = self._ctx_weights(mean_context)
        lo = self._in_batch(self.decode_step_s[i], batch)
        if w == 0.0:
            return lo
        return lo * (1.0 - w) + self._in_batch(self.decode_step_s[j], batch) * w

    def prefill_seconds_per_token(self, prompt_tokens: int) -> float:
        return self._in_ctx(self.prefill_s_per_token, prompt_tokens)

    def request_overhead_seconds(self, prompt_tokens: int) -> float:
        return self._in_ctx(self.request_overhead_s, prompt_tokens)

    def frontend_seconds(self, prompt_tokens: int, held: int = 1) -> float:
        """The FIFO worker's time for one prompt while the server holds `held` requests
        (linear between batch anchors, flat beyond the last)."""
        i, j, w = self._ctx_weights(prompt_tokens)
        n = min(max(held, self.batches[0]), self.batches[-1])
        lo = self._in_batch(self.frontend_s[i], n)
        return lo if w == 0.0 else lo * (1.0 - w) + self._in_batch(self.frontend_s[j], n) * w

    def slow_drop(self, prompt_tokens: int) -> float:
        if self.slow_request_drop is None:
            return 0.0
        return self._in_ctx(self.slow_request_drop, prompt_tokens)

    def warm_recompute(self, prompt_tokens: int) -> int:
        return round(self._in_ctx(self.warm_recompute_tokens, prompt_tokens))


def available() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load(name_or_path: str) -> Profile:
    """A profile by name (bench/twin/profiles/NAME.json) or by path to a .json file."""
    path = pathlib.Path(name_or_path)
    if not (name_or_path.endswith(".json") or "/" in name_or_path):
        path = PROFILE_DIR / f"{name_or_path}.json"
        if not path.is_file():
            raise ProfileError(
                f"unknown twin profile '{name_or_path}'",
                hint=f"use one of {', '.join(available())} or a path to a .json file",
            )
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProfileError(f"twin profile file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise ProfileError(f"twin profile {path} is not valid JSON: {exc}") from None
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(
            f"twin profile {path} is malformed: {validation_message(exc, 'profile')}",
            hint="fix the file or pick a built-in profile",
        ) from None
