"""The traffic a publisher's card describes, as a bench workload (`bench run --workload`).

`workload_of(card)` is the workload that sends the card's traffic for its one point;
`workload_and_notes(card)` gives it with the ways it differs from the publisher's own
traffic said in words (a sample of another dataset, another seed, lengths drawn by a rule
that is or is not the publisher's). What the workload file cannot express is one
`CardError` line naming the part and why. `workload_toml(w)` writes a workload as TOML text
that `bench.workload_spec.load_workload` reads back to an equal workload.

The arrivals map as the card names them:

- closed (InferenceX): closed-count at the card's concurrency, num_prompts / C requests a
  stream and warmups / C warm-ups a stream (10 and 2 when the card gives none);
- poisson, gamma, burst (vLLM's dashboard): one rate point (burst: rate inf) of
  num_prompts requests, the card's concurrency as max_in_flight;
- server (MLPerf): one Poisson rate point at the target QPS of
  ceil(rate x min_duration_s) requests (a workload holds a count, not a duration), with an
  [slo] of the card's constraints.

Lengths: the card's `range_ratio` is uniform on [r x L, L] by the card's definition
(InferenceX's client), which is the spec's "sglang" rule; none is fixed lengths. A vLLM
dashboard card keeps vLLM's own ratio in `extra["note.range_ratio"]`: that one is drawn by
the spec's "vllm" rule. Datasets: random as drawn lengths; sharegpt as the shipped
generated sample; any other (MLPerf's open-orca) is not here offline: drawn at the card's
lengths when it gives them, refused when it does not.
"""

from __future__ import annotations

import hashlib
import math
import re

from bench.errors import CardError, one_line
from bench.publishers.model import PublishedWorkload, PublisherCard
from bench.workload.slo import CONFIDENCE
from bench.workload_spec import (
    MAX_CONCURRENCY,
    MAX_LENGTH_TOKENS,
    MAX_RATE,
    MAX_REQUESTS,
    SLO_PERCENTILES,
    Arrivals,
    LengthRule,
    Lengths,
    Prompts,
    Slo,
    Workload,
)

SHAREGPT_SAMPLE = "sharegpt-sample"
REQUESTS_PER_STREAM = 10  # InferenceX's client: num_prompts = 10 x C
WARMUPS_PER_STREAM = 2  # and num_warmups = 2 x C
MAX_NAME = 64
MAX_DESCRIPTION = 500
_BURSTINESS_MAX = 1000.0  # the spec's bound on gamma's shape
_SLO_BOUND_MAX_S = 86400.0
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_VLLM_RATIO = re.compile(r"random_range_ratio ([0-9.eE+-]+)")
# not_reproducible entries that are about the traffic or the serving shape (InferenceX's
# disaggregated, multi-node or multi-turn rows; vLLM's ramp-up): the workload cannot be one
# host's one point. MLPerf's entries (its accuracy run, compliance tests) are not traffic.
_SHAPE_WORDS = ("disaggregated", "multi-node", "several nodes", "benchmark_type", "ramp-up")


def workload_of(card: PublisherCard, *, seed: int = 0) -> Workload:
    """The workload that sends `card`'s traffic for its one point (CardError: it cannot)."""
    return workload_and_notes(card, seed=seed)[0]


def workload_and_notes(card: PublisherCard, *, seed: int = 0) -> tuple[Workload, tuple[str, ...]]:
    """The workload of `card`, and what in it differs from the publisher's traffic."""
    w = card.workload
    notes: list[str] = []
    _check_shape(card)
    arrivals = _arrivals(card, w, notes)
    lengths, prompts = _lengths_and_prompts(card, w, notes)
    slo = _slo(card, notes)
    notes.append(
        f"seed {seed}: the arrival times, lengths and prompt text are this seed's draws, not "
        f"the {_who(card)} client's"
    )
    try:
        workload = Workload(
            name=workload_name(card),
            description=_description(card),
            seed=seed,
            arrivals=arrivals,
            lengths=lengths,
            prompts=prompts,
            slo=slo,
        )
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        what = " ".join(str(exc).split())
        raise _refuse(card, "the workload", f"not a valid bench workload: {what}") from None
    return workload, tuple(notes)


def workload_name(card: PublisherCard) -> str:
    """publisher-pointid with what the spec does not take as '-'; a long one is cut and
    ends with a hash of the whole, so two points do not share a name."""
    text = _UNSAFE.sub("-", f"{card.publisher}-{card.point_id}").strip("-._")
    if len(text) <= MAX_NAME:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{text[: MAX_NAME - 9].rstrip('-._')}-{digest}"


# ------------------------------------------------------------------------------ the parts


def _who(card: PublisherCard) -> str:
    names = {"inferencex": "InferenceX", "vllm-dashboard": "vLLM dashboard", "mlperf": "LoadGen"}
    return names[card.publisher]


def _refuse(card: PublisherCard, part: str, why: str) -> CardError:
    return CardError(one_line(f"{card.publisher} card {card.point_id!r}: {part}: {why}"))


def _description(card: PublisherCard) -> str:
    text = one_line(
        f"The traffic of {card.publisher}'s point {card.point_id!r} (card from {card.source}"
        f"{', ' + card.date if card.date else ''}): {card.model}, {card.workload.arrivals} "
        f"arrivals, {card.workload.dataset} prompts"
    ).replace("\x7f", "\\x7f")
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 3] + "..."


def _check_shape(card: PublisherCard) -> None:
    for entry in card.not_reproducible:
        if any(word in entry for word in _SHAPE_WORDS):
            raise _refuse(card, "the point", f"{entry}; not reproducible on one host")
    if card.nodes is not None and card.nodes > 1:
        raise _refuse(
            card, "the point", f"a {card.nodes}-node system: not reproducible on one host"
        )


def _rate(card: PublisherCard, w: PublishedWorkload) -> float:
    if w.arrivals == "burst":
        return math.inf
    rate = w.request_rate
    if rate is None:
        raise _refuse(card, f"{w.arrivals} arrivals", "the card gives no request rate")
    if math.isfinite(rate) and rate > MAX_RATE:
        raise _refuse(card, "request_rate", f"{rate:g} req/s is past the spec's {MAX_RATE:g} req/s")
    return rate


def _arrivals(card: PublisherCard, w: PublishedWorkload, notes: list[str]) -> Arrivals:
    if w.arrivals == "closed":
        return _closed(card, w, notes)
    rate = _rate(card, w)
    cap = w.concurrency or 0
    if cap > MAX_CONCURRENCY:
        raise _refuse(card, "concurrency", f"{cap} is past the spec's {MAX_CONCURRENCY:,}")
    process: str = "poisson"
    burstiness = 1.0
    if w.arrivals == "gamma" and not math.isinf(rate):
        burstiness = w.burstiness if w.burstiness is not None else 1.0
        if burstiness > _BURSTINESS_MAX:
            raise _refuse(
                card,
                "gamma arrivals",
                f"burstiness {burstiness:g} is past the spec's {_BURSTINESS_MAX:g}",
            )
        process = "gamma" if burstiness != 1.0 else "poisson"
    if w.arrivals == "server":
        requests = _server_requests(card, w, rate, notes)
    else:
        if w.num_prompts is None:
            raise _refuse(card, f"{w.arrivals} arrivals", "the card gives no num_prompts")
        requests = w.num_prompts
    if requests > MAX_REQUESTS:
        raise _refuse(
            card, "the request count", f"{requests:,} is past the spec's {MAX_REQUESTS:,}"
        )
    warmups = w.warmups or 0
    if warmups:
        notes.append(
            f"{warmups} warm-up requests run as a closed loop of at most 8 streams (bench's "
            "rule for a rate point), not as the publisher's client sent them"
        )
    return Arrivals.model_validate(
        {
            "kind": "rate",
            "rates": (rate,),
            "process": process,
            "burstiness": burstiness,
            "requests": requests,
            "max_in_flight": cap,
            "warmups": warmups,
        }
    )


def _closed(card: PublisherCard, w: PublishedWorkload, notes: list[str]) -> Arrivals:
    c = w.concurrency
    if c is None:
        raise _refuse(card, "closed arrivals", "the card gives no concurrency")
    if c > MAX_CONCURRENCY:
        raise _refuse(card, "concurrency", f"{c} is past the spec's {MAX_CONCURRENCY:,}")
    per_stream = REQUESTS_PER_STREAM if w.num_prompts is None else math.ceil(w.num_prompts / c)
    warm_stream = WARMUPS_PER_STREAM if w.warmups is None else math.ceil(w.warmups / c)
    if w.num_prompts is None or w.warmups is None:
        notes.append(
            f"the card gives no {'num_prompts' if w.num_prompts is None else 'warmups'}: "
            f"{REQUESTS_PER_STREAM} x C prompts after {WARMUPS_PER_STREAM} x C warm-ups "
            "(InferenceX's client rule)"
        )
    for given, each, what in (
        (w.num_prompts, per_stream, "prompts"),
        (w.warmups, warm_stream, "warm-ups"),
    ):
        if given is not None and given != each * c:
            notes.append(
                f"{each * c} {what} ({each} a stream at C = {c}), not the card's {given}: "
                "a closed count sends a whole number a stream"
            )
    if per_stream * c > MAX_REQUESTS or warm_stream * c > MAX_REQUESTS:
        raise _refuse(card, "the request count", f"past the spec's {MAX_REQUESTS:,} a point")
    return Arrivals(
        kind="closed-count",
        concurrencies=(c,),
        requests_per_stream=per_stream,
        warmups_per_stream=warm_stream,
    )


def _server_requests(
    card: PublisherCard, w: PublishedWorkload, rate: float, notes: list[str]
) -> int:
    if math.isinf(rate):
        raise _refuse(card, "server arrivals", "a rate of inf is not a target QPS")
    if w.min_duration_s is None:
        if w.num_prompts is None:
            raise _refuse(
                card, "server arrivals", "the card gives neither min_duration_s nor num_prompts"
            )
        return w.num_prompts
    by_time = math.ceil(rate * w.min_duration_s)
    requests = max(by_time, w.num_prompts or 0)
    notes.append(
        f"{requests:,} requests at {rate:g} req/s for MLPerf's minimum {w.min_duration_s:g} s: "
        "a workload holds a count, not a duration, so a Poisson schedule's span varies "
        "around it; LoadGen's minimum query count is not applied"
    )
    return requests


def _ignore_eos(w: PublishedWorkload, notes: list[str]) -> bool:
    if w.ignore_eos is not None:
        return w.ignore_eos
    notes.append(
        "the card does not say whether the client ignored EOS: on here, so every output "
        "runs its full length"
    )
    return True


def _lengths_and_prompts(
    card: PublisherCard, w: PublishedWorkload, notes: list[str]
) -> tuple[Lengths, Prompts]:
    dataset = w.dataset.strip().lower()
    ignore_eos = _ignore_eos(w, notes)
    if dataset == "sharegpt":
        if w.input_tokens is not None or w.output_tokens is not None:
            raise _refuse(
                card,
                "the sharegpt lengths",
                "fixed input or output lengths (sharegpt_output_len) with ShareGPT prompts: "
                "the spec takes each conversation's own lengths",
            )
        notes.append(
            "prompts from the shipped generated sample (sharegpt-sample), not the "
            "publisher's ShareGPT file, drawn with bench's seed, not the publisher's: other "
            "conversations and other lengths"
        )
        prompts = Prompts(source="sharegpt", path=SHAREGPT_SAMPLE)
        return Lengths(ignore_eos=ignore_eos), prompts
    if w.input_tokens is None or w.output_tokens is None:
        if dataset == "random":
            raise _refuse(card, "the lengths", "a random dataset without input and output tokens")
        raise _refuse(
            card,
            f"the dataset {w.dataset!r}",
            "not available offline, and the card gives no lengths to draw in its place",
        )
    for n, what in ((w.input_tokens, "input"), (w.output_tokens, "output")):
        if n > MAX_LENGTH_TOKENS:
            raise _refuse(card, f"{what} tokens", f"{n:,} is past the spec's {MAX_LENGTH_TOKENS:,}")
    if dataset != "random":
        notes.append(
            f"the dataset {w.dataset!r} is not available offline: filler text at the card's "
            f"lengths ({w.input_tokens:,} in, {w.output_tokens:,} out) in its place"
        )
    ratio, semantics = _ratio(card, w, notes)
    lengths = Lengths(
        input_tokens=w.input_tokens,
        output_tokens=w.output_tokens,
        range_ratio=ratio,
        semantics=semantics,
        ignore_eos=ignore_eos,
    )
    return lengths, Prompts()


def _ratio(card: PublisherCard, w: PublishedWorkload, notes: list[str]) -> tuple[float, LengthRule]:
    """(range ratio, semantics): the card's ratio is [r x L, L] by its definition (the
    spec's sglang rule); a vLLM card's own ratio is vLLM's rule."""
    if w.range_ratio is not None:
        matches = "InferenceX's client" if card.publisher == "inferencex" else "the card's"
        notes.append(
            f"lengths uniform on [int({w.range_ratio:g} x L), L] (semantics sglang): "
            f"{matches} rule, drawn from bench's seed"
        )
        return w.range_ratio, "sglang"
    said = card.extra.get("note.range_ratio") if card.publisher == "vllm-dashboard" else None
    m = _VLLM_RATIO.search(said or "")
    if m is None:
        notes.append(
            "the card gives no range ratio: fixed lengths (vLLM's default ratio 0 and "
            "benchmark_serving.py's 1 both ask for exactly L)"
            if card.publisher == "vllm-dashboard"
            else "the card gives no range ratio: fixed lengths, every request asks for "
            "exactly the card's input and output tokens"
        )
        return 0.0, "vllm"
    try:
        r = float(m.group(1))
    except ValueError:
        raise _refuse(card, "random_range_ratio", f"{m.group(1)!r} is not a number") from None
    if not 0.0 <= r <= 1.0:
        raise _refuse(card, "random_range_ratio", f"{r!r} is not in 0..1")
    if r == 1.0:
        notes.append(
            "random_range_ratio 1: fixed lengths (benchmark_serving.py's [int(r x L), L]; "
            "current vLLM takes ratios below 1 only)"
        )
        return 0.0, "vllm"
    if r > 0.0:
        notes.append(
            f"lengths on [floor(L x (1 - {r:g})), ceil(L x (1 + {r:g}))] (current vLLM's "
            f"rule); an older benchmark_serving.py drew from [int({r:g} x L), L] and the "
            "card does not say which ran"
        )
    return r, "vllm"


def _slo(card: PublisherCard, notes: list[str]) -> Slo | None:
    if not card.constraints:
        return None
    bounds: dict[str, float] = {}
    for c in card.constraints:
        q = round(c.percentile)
        if c.percentile != q or q not in SLO_PERCENTILES:
            raise _refuse(
                card,
                f"the {c.figure} constraint",
                f"p{c.percentile:g}: the spec bounds only p"
                + ", p".join(str(p) for p in SLO_PERCENTILES),
            )
        bound = c.limit_ms / 1000
        if bound > _SLO_BOUND_MAX_S:
            raise _refuse(card, f"the {c.figure} constraint", f"{c.limit_ms:g} ms is past a day")
        key = f"{c.figure}_p{q}_s"
        bounds[key] = min(bound, bounds.get(key, bound))
        if c.confidence is not None and c.confidence != CONFIDENCE:
            notes.append(
                f"the {c.figure} p{q} bound is judged by early stopping at {CONFIDENCE:g} "
                f"confidence, not the card's {c.confidence:g}"
            )
    return Slo.model_validate(bounds)


# ------------------------------------------------------------------------------ TOML text


_ARRIVALS_SHOWN = {
    "rate": {"kind", "rates", "process", "requests"},
    "closed-count": {"kind", "concurrencies", "requests_per_stream", "warmups_per_stream"},
    "trace": {"kind", "path"},
}


def workload_toml(w: Workload) -> str:
    """`w` as TOML text: name, description and seed, then a table a part. A field at its
    default is left out (the reader fills it in) but for [arrivals]' kind and point fields,
    [prompts]' source and every [lengths] field a drawn workload uses; a part all at its
    defaults (no [prefix], random prompts) and an [slo] of None are left out whole."""
    lines = [f"{key} = {_value(getattr(w, key))}" for key in ("name", "description", "seed")]
    always = {
        "arrivals": _ARRIVALS_SHOWN[w.arrivals.kind],
        "lengths": {"ignore_eos"} if w.data_driven() else set(Lengths.model_fields),
        "prompts": {"source"},
    }
    for key in ("arrivals", "lengths", "prefix", "prompts", "slo"):
        part = getattr(w, key)
        if part is None:
            continue
        fields = type(part).model_fields
        rows = [
            f"{k} = {_value(getattr(part, k))}"
            for k, field in fields.items()
            if getattr(part, k) is not None
            and (k in always.get(key, set()) or getattr(part, k) != field.get_default())
        ]
        if key in ("prefix", "prompts") and part == type(part)():
            continue
        lines += ["", f"[{key}]", *rows]
    return "\n".join(lines) + "\n"


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError("NaN has no place in a workload")
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {type(value).__name__}")


_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _string(text: str) -> str:
    """A TOML basic string: quote and backslash escaped, control characters and DEL as
    \\uXXXX; a lone surrogate is no Unicode scalar value TOML can hold."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"a lone surrogate (U+{code:04X}) cannot be written as TOML")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
