"""A workload: the traffic `bench run --workload` offers a server, as data.

Shipped presets live in bench/workloads/*.toml (`bench run --workload NAME`); any TOML file
of the same shape works (`--workload FILE`). The definitions of every field, and which
publisher's client each model matches, are in docs/workloads.md. In short:

    name, description        what the workload is called, one line for humans
    seed                     the schedule's and the prompts' seed: the same seed gives the
                             same arrival times, lengths and prompt bytes (A and B of a
                             compare see identical traffic)
    [arrivals]
      kind                   "rate": open loop, one point per offered rate;
                             "closed-count": C streams, a fixed count of prompts (InferenceX)
      rates                  requests/s in server time, per point (inf: all at once)
      process                "constant" | "poisson" | "gamma" (gaps of a rate point)
      burstiness             the gamma gaps' shape (1 = Poisson; < 1 burstier), vLLM's
      requests               prompts per rate point
      max_in_flight          a cap on requests in flight (0: none), vLLM's --max-concurrency
      concurrencies          C per closed-count point
      requests_per_stream    closed-count prompts = this x C (InferenceX: 10)
      warmups_per_stream     closed-count warm-ups = this x C (InferenceX: 2)
      warmups                warm-up requests before a rate point (not measured)
    [lengths]
      input_tokens, output_tokens   the nominal lengths L_in, L_out
      range_ratio            r: how far lengths spread around (vllm: 0 = exactly L) or
                             below (sglang: lengths from rL to L; 0 = from 1 to L) L
      semantics              whose client's rule draws them: "vllm" (uniform on
                             [L(1-r), L(1+r)]) or "sglang" (uniform on [rL, L]: InferenceX's);
                             docs/workloads.md gives each rule and its source
      ignore_eos             the server generates exactly the drawn output length
    [prefix]
      tokens, group_size     P tokens shared by each group of G consecutive requests
    [slo]                    optional: p99 bounds a point is judged against (MLPerf's
                             early-stopping rule), and the goodput's per-request bounds

Every number passes a range here: a rate that is 0, negative or NaN, a count past a
million, a length past the bound: a `UsageError` naming the file and the field (exit 2).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.errors import UsageError, one_line, validation_message

WORKLOAD_DIR = Path(__file__).with_name("workloads")
# A workload file is a few hundred bytes; anything past this is not one (read bounded).
MAX_FILE_BYTES = 64 << 10
MAX_REQUESTS = 1_000_000  # per point
MAX_POINTS = 64
MAX_LENGTH_TOKENS = 1 << 21  # 2 M tokens: past any served context
MAX_RATE = 1e6  # requests/s; `inf` is allowed on its own (all at once)
MAX_CONCURRENCY = 65_536

Process = Literal["constant", "poisson", "gamma"]
LengthRule = Literal["vllm", "sglang"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Arrivals(_Spec):
    kind: Literal["rate", "closed-count"] = "rate"
    rates: tuple[float, ...] = ()
    process: Process = "poisson"
    burstiness: float = Field(1.0, gt=0.0, le=1000.0)
    requests: int = Field(200, ge=1, le=MAX_REQUESTS)
    max_in_flight: int = Field(0, ge=0, le=MAX_CONCURRENCY)
    warmups: int = Field(0, ge=0, le=MAX_REQUESTS)
    concurrencies: tuple[int, ...] = ()
    requests_per_stream: int = Field(10, ge=1, le=MAX_REQUESTS)
    warmups_per_stream: int = Field(2, ge=0, le=MAX_REQUESTS)

    @field_validator("rates", "concurrencies", mode="before")
    @classmethod
    def _no_bools(cls, values: object) -> object:
        # TOML's `true` is not a rate or a concurrency (pydantic would take it as 1).
        if isinstance(values, list | tuple) and any(isinstance(v, bool) for v in values):
            raise ValueError("a rate or concurrency is a number, not true or false")
        return values

    @field_validator("rates")
    @classmethod
    def _rates(cls, rates: tuple[float, ...]) -> tuple[float, ...]:
        for r in rates:
            if math.isnan(r) or r <= 0 or (math.isfinite(r) and r > MAX_RATE):
                raise ValueError(
                    f"rate {r!r} is not a rate: each must be above 0 and at most {MAX_RATE:g} "
                    "requests/s, or inf (every request at once)"
                )
        return rates

    @field_validator("concurrencies")
    @classmethod
    def _concurrencies(cls, cs: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 1 <= c <= MAX_CONCURRENCY for c in cs):
            raise ValueError(f"each concurrency must be between 1 and {MAX_CONCURRENCY:,}")
        return cs

    @model_validator(mode="after")
    def _points(self) -> Arrivals:
        points = self.rates if self.kind == "rate" else self.concurrencies
        field = "rates" if self.kind == "rate" else "concurrencies"
        if not points:
            raise ValueError(f"arrivals of kind {self.kind!r} need {field}")
        if len(points) > MAX_POINTS:
            raise ValueError(f"at most {MAX_POINTS} {field}")
        if self.kind == "rate" and self.concurrencies:
            raise ValueError("concurrencies belong to closed-count arrivals; use max_in_flight")
        if self.kind == "closed-count" and self.rates:
            raise ValueError("rates belong to rate arrivals")
        if self.process != "gamma" and self.burstiness != 1.0:
            raise ValueError("burstiness is the gamma process's shape: set process = 'gamma'")
        return self

    def points(self) -> tuple[float, ...] | tuple[int, ...]:
        return self.rates if self.kind == "rate" else self.concurrencies


class Lengths(_Spec):
    input_tokens: int = Field(1024, ge=1, le=MAX_LENGTH_TOKENS)
    output_tokens: int = Field(128, ge=1, le=MAX_LENGTH_TOKENS)
    range_ratio: float = Field(0.0, ge=0.0, le=1.0)
    semantics: LengthRule = "vllm"
    ignore_eos: bool = True

    @model_validator(mode="after")
    def _ratio(self) -> Lengths:
        if self.semantics == "vllm" and self.range_ratio >= 1.0:
            raise ValueError("with semantics 'vllm' range_ratio must be below 1 (vLLM's rule)")
        return self


class Prefix(_Spec):
    tokens: int = Field(0, ge=0, le=MAX_LENGTH_TOKENS)
    group_size: int = Field(1, ge=1, le=MAX_REQUESTS)


class Slo(_Spec):
    """p99 bounds in server seconds; None: not bounded."""

    ttft_p99_s: float | None = Field(None, gt=0.0, le=86400.0)
    tpot_p99_s: float | None = Field(None, gt=0.0, le=86400.0)
    e2el_p99_s: float | None = Field(None, gt=0.0, le=86400.0)

    def bounds(self) -> dict[str, float]:
        """figure name ('ttft', 'tpot', 'e2el') -> its p99 bound, for those given."""
        named = {"ttft": self.ttft_p99_s, "tpot": self.tpot_p99_s, "e2el": self.e2el_p99_s}
        return {k: v for k, v in named.items() if v is not None}


class Workload(_Spec):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = Field("", max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$")
    seed: int = Field(0, ge=0, le=2**63 - 1)
    arrivals: Arrivals
    lengths: Lengths = Field(default_factory=Lengths)
    prefix: Prefix = Field(default_factory=Prefix)
    slo: Slo | None = None

    @model_validator(mode="after")
    def _prefix_fits(self) -> Workload:
        shortest = _shortest_input(self.lengths)
        if self.prefix.tokens and self.prefix.tokens >= shortest:
            raise ValueError(
                f"the shared prefix ({self.prefix.tokens:,} tokens) must be shorter than the "
                f"shortest prompt the lengths allow ({shortest:,})"
            )
        return self


def _shortest_input(lengths: Lengths) -> int:
    n, r = lengths.input_tokens, lengths.range_ratio
    low = n * (1 - r) if lengths.semantics == "vllm" else n * r
    return max(int(low), 1)


def available() -> list[str]:
    """The shipped presets' names."""
    return sorted(p.stem for p in WORKLOAD_DIR.glob("*.toml"))


def load_workload(ref: str | Path) -> Workload:
    """A preset by name, or a TOML file by path; a bad one is one UsageError line."""
    path = Path(ref)
    shown = one_line(str(path))
    if path.suffix != ".toml" and "/" not in str(ref):
        if str(ref) not in available():
            raise UsageError(
                f"unknown workload {one_line(str(ref))!r}",
                hint=f"give a .toml file, or one of: {', '.join(available())}",
            )
        path = WORKLOAD_DIR / f"{ref}.toml"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"workload {shown} does not exist", hint="check the path") from None
    except IsADirectoryError:
        raise UsageError(f"workload {shown} is a directory, not a file") from None
    except OSError as exc:
        raise UsageError(f"workload {shown} cannot be read: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UsageError(
            f"workload {shown} is larger than {MAX_FILE_BYTES:,} bytes: not a workload"
        )
    data = _toml(raw, shown)
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        raise UsageError(
            f"workload {shown} is invalid: {validation_message(exc)}",
            hint="docs/workloads.md lists every field",
        ) from None


def _toml(raw: bytes, shown: str) -> dict[str, object]:
    """The TOML document in `raw`, or one UsageError line saying why it is none."""
    problem = None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except tomllib.TOMLDecodeError as exc:
        problem = f"is not valid TOML: {one_line(str(exc))}"
    except RecursionError:  # tomllib recurses per nesting level
        problem = "is not valid TOML: nested too deeply"
    raise UsageError(f"workload {shown} {problem}")
