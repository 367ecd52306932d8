"""A workload: the traffic `bench run --workload` offers a server, as data.

Shipped presets live in bench/workloads/*.toml (`bench run --workload NAME`); any TOML file
of the same shape works (`--workload FILE`). docs/workloads.md defines every field and names
the client each rule matches: [arrivals] (open-loop rates, InferenceX's closed count, or a
mooncake trace replayed: bench.workload.trace), [lengths] and [prefix] (drawn lengths, a
shared prefix), [prompts] (filler text, or a ShareGPT file's conversations:
bench.workload.datasets) and [slo] (p99 bounds, MLPerf's early stopping). The same seed
gives the same arrival times, lengths and prompt bytes.

A data file's `sha256` is filled in when the workload is loaded (given, another file is
refused): results.json's workload names the bytes it ran. Every number passes a range
here: a rate that is 0, negative or NaN, a count past a million, a length past the bound: a
`UsageError` naming the file and the field (exit 2).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from bench.errors import UsageError, one_line, validation_message

WORKLOAD_DIR = Path(__file__).with_name("workloads")
# A workload file is a few hundred bytes; anything past this is not one (read bounded).
MAX_FILE_BYTES = 64 << 10
MAX_REQUESTS = 1_000_000  # per point
MAX_POINTS = 64
MAX_LENGTH_TOKENS = 1 << 21  # 2 M tokens: past any served context
MAX_RATE = 1e6  # requests/s; `inf` is allowed on its own (all at once)
MAX_CONCURRENCY = 65_536


def _rate_in(value: object) -> object:
    """JSON has no infinity: results.json writes an all-at-once rate as "inf"."""
    return math.inf if value == "inf" else value


def _rate_out(value: float) -> float | str:
    return "inf" if math.isinf(value) else value


# A rate in requests/s, or inf (every request at once): "inf" in JSON, read back as inf.
Rate = Annotated[
    float,
    BeforeValidator(_rate_in),
    PlainSerializer(_rate_out, when_used="json"),
    WithJsonSchema({"anyOf": [{"type": "number"}, {"const": "inf"}]}),
]
Process = Literal["constant", "poisson", "gamma"]
LengthRule = Literal["vllm", "sglang"]
_PATH = r"^[^\x00-\x1f\x7f]*$"  # a data file's path or shipped name: one line
_SHA256 = r"^[0-9a-f]{64}$"
_REQUESTS = 200


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Arrivals(_Spec):
    kind: Literal["rate", "closed-count", "trace"] = "rate"
    rates: tuple[Rate, ...] = ()  # inf (all at once) is "inf" in JSON (`Rate`)
    process: Process = "poisson"
    burstiness: float = Field(1.0, gt=0.0, le=1000.0)
    requests: int = Field(_REQUESTS, ge=1, le=MAX_REQUESTS)
    max_in_flight: int = Field(0, ge=0, le=MAX_CONCURRENCY)
    warmups: int = Field(0, ge=0, le=MAX_REQUESTS)
    concurrencies: tuple[int, ...] = ()
    requests_per_stream: int = Field(10, ge=1, le=MAX_REQUESTS)
    warmups_per_stream: int = Field(2, ge=0, le=MAX_REQUESTS)
    path: str = Field("", max_length=4096, pattern=_PATH)  # trace: the file
    speedup: float = Field(1.0, gt=0.0, le=MAX_RATE)  # trace: timestamps / speedup
    max_requests: int = Field(0, ge=0, le=MAX_REQUESTS)  # trace: its first requests (0: all)
    sha256: str | None = Field(None, pattern=_SHA256)  # trace: the file's (filled when loaded)

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
        if self.process != "gamma" and self.burstiness != 1.0:
            raise ValueError("burstiness is the gamma process's shape: set process = 'gamma'")
        if self.kind == "trace":
            if not self.path:
                raise ValueError("trace arrivals need path: a mooncake JSONL file")
            drawn = self.process != "poisson" or self.requests != _REQUESTS
            if self.rates or self.concurrencies or drawn:
                raise ValueError(
                    "a trace's arrivals are its timestamps: rates, concurrencies, process and "
                    "requests do not apply (max_requests takes its first ones)"
                )
            return self
        if self.path or self.sha256 or self.max_requests or self.speedup != 1.0:
            raise ValueError("path, speedup, max_requests and sha256 belong to trace arrivals")
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
        return self

    def points(self) -> tuple[float, ...] | tuple[int, ...]:
        """One value a point: its rate, its concurrency, or (a trace: one point) speedup."""
        if self.kind == "trace":
            return (self.speedup,)
        return self.rates if self.kind == "rate" else self.concurrencies

    def labels(self) -> tuple[str, ...]:
        """Each point's name, as a verdict keys it and `bench run --points` takes it: its
        rate in server requests/s ("4/s", "inf/s"), "closed:C", or "trace"."""
        if self.kind == "trace":
            return ("trace",)
        if self.kind == "closed-count":
            return tuple(f"closed:{c}" for c in self.concurrencies)
        return tuple("inf/s" if math.isinf(r) else f"{r:g}/s" for r in self.rates)


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


class Prompts(_Spec):
    """Where prompts come from: drawn lengths of filler text, or a dataset's conversations."""

    source: Literal["random", "sharegpt"] = "random"
    path: str = Field("", max_length=4096, pattern=_PATH)  # a file, or a shipped name
    sha256: str | None = Field(None, pattern=_SHA256)  # the file's (filled when loaded)

    @model_validator(mode="after")
    def _path(self) -> Prompts:
        if self.source == "random" and (self.path or self.sha256):
            raise ValueError("path and sha256 belong to a dataset source ('sharegpt')")
        if self.source != "random" and not self.path:
            raise ValueError(f"source {self.source!r} needs path (a file or 'sharegpt-sample')")
        return self


SLO_FIGURES = ("ttft", "tpot", "e2el")
SLO_PERCENTILES = (50, 90, 95, 99)
_BOUND = Field(None, gt=0.0, le=86400.0)


class Slo(_Spec):
    """Percentile bounds in server seconds, `{figure}_p{q}_s` (figure ttft, tpot or e2el;
    q 50, 90, 95 or 99); None: not bounded. MLPerf's own are p99 bounds."""

    ttft_p50_s: float | None = _BOUND
    ttft_p90_s: float | None = _BOUND
    ttft_p95_s: float | None = _BOUND
    ttft_p99_s: float | None = _BOUND
    tpot_p50_s: float | None = _BOUND
    tpot_p90_s: float | None = _BOUND
    tpot_p95_s: float | None = _BOUND
    tpot_p99_s: float | None = _BOUND
    e2el_p50_s: float | None = _BOUND
    e2el_p90_s: float | None = _BOUND
    e2el_p95_s: float | None = _BOUND
    e2el_p99_s: float | None = _BOUND

    def terms(self) -> list[tuple[str, int, float]]:
        """(figure, percentile, bound) of every bound given."""
        out = []
        for figure in SLO_FIGURES:
            for q in SLO_PERCENTILES:
                bound = getattr(self, f"{figure}_p{q}_s")
                if bound is not None:
                    out.append((figure, q, float(bound)))
        return out

    def bounds(self) -> dict[str, float]:
        """figure name ('ttft', 'tpot', 'e2el') -> its tightest bound, for those bounded:
        what one request must stay within (goodput's rule)."""
        out: dict[str, float] = {}
        for figure, _, bound in self.terms():
            out[figure] = min(bound, out.get(figure, bound))
        return out


class Workload(_Spec):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = Field("", max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$")
    seed: int = Field(0, ge=0, le=2**63 - 1)
    arrivals: Arrivals
    lengths: Lengths = Field(default_factory=Lengths)
    prefix: Prefix = Field(default_factory=Prefix)
    prompts: Prompts = Field(default_factory=Prompts)
    slo: Slo | None = None

    def data_driven(self) -> bool:
        """Lengths (and prompts) from a file: a dataset, or a trace."""
        return self.prompts.source != "random" or self.arrivals.kind == "trace"

    @model_validator(mode="after")
    def _prefix_fits(self) -> Workload:
        if self.data_driven():
            what = "the trace" if self.arrivals.kind == "trace" else "the dataset"
            if self.arrivals.kind == "trace" and self.prompts.source != "random":
                raise ValueError("a trace builds its own prompts: no [prompts] source with it")
            if self.prefix != Prefix():
                raise ValueError(f"shared prefixes come from {what}: no [prefix] with it")
            if self.lengths.model_copy(update={"ignore_eos": True}) != Lengths():
                raise ValueError(f"lengths come from {what}: [lengths] takes only ignore_eos")
            return self
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
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        raise UsageError(
            f"workload {shown} is invalid: {validation_message(exc)}",
            hint="docs/workloads.md lists every field",
        ) from None
    if not workload.data_driven():
        return workload
    # Deferred: the data files' readers (bench.workload) build on this module.
    from bench.workload.schedule import with_data

    return with_data(workload, path.parent)


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
