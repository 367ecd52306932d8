"""A serving test's traffic as the card's workload: the rate and arrivals, concurrency, the
dataset and its lengths.

What maps to what:
- request_rate -> workload.request_rate; "inf" -> None with arrivals "burst": every request
  queued at once (with max_concurrency C, C in flight: the traffic of C closed-loop
  streams); otherwise burstiness 1 -> "poisson", else "gamma" with that shape
  (serve.py `get_request`: gamma intervals, shape burstiness, scale 1/(rate x burstiness));
- max_concurrency -> concurrency (a cap); num_prompts; num_warmups -> warmups; ignore_eos;
- dataset_name, else the test's name -> dataset ("sharegpt", "random", ...);
  random_input_len / random_output_len, else the name (`random_in1k_out2k`: 1024 / 2048,
  `random_128_128`) -> input_tokens / output_tokens;
- random_range_ratio -> extra only. Current vLLM (vllm/benchmarks/datasets/random.py,
  `get_sampling_params`) draws integer lengths uniform on [floor(L(1-r)), ceil(L(1+r))]
  (input L less the special tokens the tokenizer adds; r in [0, 1), default 0);
  benchmark_serving.py drew from [int(r L), L] (default r = 1). The file does not say which
  vLLM ran, and the current rule is not the card's [r L, L], so range_ratio stays None and
  length_rule says the rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.errors import CardError, validation_message
from bench.publishers.model import PublishedWorkload
from bench.publishers.vllm_dashboard.facts import _Point
from bench.publishers.vllm_dashboard.values import DO, WHAT, _integer, _number, _short, _text

_NAME_LENGTHS = (
    re.compile(r"random_in(\d{1,6})(k?)_out(\d{1,6})(k?)(?:_|$)"),
    re.compile(r"random_(\d{1,6})_(\d{1,6})(?:_|$)"),
)

_INF = frozenset({"inf", "+inf", "infinity", "+infinity"})


def _workload(path: Path, p: _Point) -> PublishedWorkload:
    cfg = p.cfg
    rate = _rate(path, cfg.get("request_rate"))
    burstiness = _positive(path, cfg, "burstiness")
    dataset = _dataset(cfg, p)
    lengths = _lengths(path, cfg, p, dataset)
    if rate is None:
        arrivals = "burst"
        p.extra["note.arrivals"] = (
            "request_rate inf: every request sent at once (request_rate None, arrivals burst)"
        )
    else:
        arrivals = "poisson" if burstiness in (None, 1.0) else "gamma"
    if "ramp_up_strategy" in cfg and cfg["ramp_up_strategy"] is not None:
        p.not_reproducible.append(
            f"the ramp-up ({_short(_text(cfg['ramp_up_strategy']))} from "
            f"{_short(_text(cfg.get('ramp_up_start_rps')))} to "
            f"{_short(_text(cfg.get('ramp_up_end_rps')))} req/s): a card has one rate"
        )
    try:
        return PublishedWorkload(
            arrivals=arrivals,
            dataset=dataset,
            concurrency=_count(path, cfg, "max_concurrency", 1),
            request_rate=rate,
            burstiness=burstiness if arrivals != "burst" else None,
            input_tokens=lengths[0],
            output_tokens=lengths[1],
            range_ratio=None,
            length_rule=lengths[2],
            num_prompts=_count(path, cfg, "num_prompts", 1),
            warmups=_count(path, cfg, "num_warmups", 0),
            ignore_eos=cfg["ignore_eos"] if isinstance(cfg.get("ignore_eos"), bool) else None,
        )
    except ValidationError as exc:
        raise CardError(f"{path}: {validation_message(exc)}: not {WHAT}; {DO}") from None


def _rate(path: Path, value: Any) -> float | None:
    """The request rate in req/s; None for inf (all at once)."""
    if isinstance(value, str) and value.strip().lower() in _INF:
        return None
    number = _number(value)
    if number is not None and number == math.inf:
        return None
    if number is None and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number <= 0:
        raise CardError(
            f"{path}: request_rate is {_short(_text(value))}, not a rate in req/s or inf; {DO}"
        )
    return number


def _positive(path: Path, cfg: Mapping[str, Any], name: str) -> float | None:
    value = cfg.get(name)
    if value is None:
        return None
    number = _number(value)
    if number is None or not math.isfinite(number) or number <= 0:
        raise CardError(f"{path}: {name} is {_short(_text(value))}, not a positive number; {DO}")
    return number


def _count(path: Path, cfg: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = cfg.get(name)
    if value is None:
        return None
    number = _integer(value)
    if number is None or not minimum <= number <= 10**9:
        raise CardError(f"{path}: {name} is {_short(_text(value))}, not a count; {DO}")
    return number


def _dataset(cfg: Mapping[str, Any], p: _Point) -> str:
    name = cfg.get("dataset_name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    for known in ("sharegpt", "random", "sonnet", "burstgpt"):
        if known in p.id.lower():
            p.extra["note.dataset"] = "from the test's name; the file does not record it"
            return known
    p.missing.append("dataset (the file does not name it)")
    return "unknown"


def _lengths(
    path: Path, cfg: Mapping[str, Any], p: _Point, dataset: str
) -> tuple[int | None, int | None, str | None]:
    """(input tokens, output tokens, the rule in words) for the test's dataset."""
    if dataset == "sharegpt":
        out = _count(path, cfg, "sharegpt_output_len", 1)
        fixed = f"; every reply cut to {out} tokens (sharegpt_output_len)" if out else ""
        if cfg.get("dataset_path") is None or cfg.get("seed") is None:
            p.missing.append("the ShareGPT sample (dataset file and seed)")
        return (
            None,
            out,
            (
                "ShareGPT conversations: each request's prompt and its reference reply's length "
                "as max_tokens, sampled by vLLM's ShareGPT loader with the seed" + fixed
            ),
        )
    if dataset != "random":
        return None, None, None
    names = (("random_input_len", "input_len"), ("random_output_len", "output_len"))
    given = [next((cfg[n] for n in pair if cfg.get(n) is not None), None) for pair in names]
    if given[0] is None and given[1] is None:
        given = list(_name_lengths(p))
    size_in = None if given[0] is None else _count(path, {"input_len": given[0]}, "input_len", 1)
    size_out = None if given[1] is None else _count(path, {"output_len": given[1]}, "output_len", 1)
    if size_in is None or size_out is None:
        p.missing.append("the random dataset's input and output lengths")
    return size_in, size_out, _length_rule(path, cfg, p)


def _name_lengths(p: _Point) -> tuple[int | None, int | None]:
    for pattern in _NAME_LENGTHS:
        m = pattern.search(p.id[:300])
        if m is None:
            continue
        groups = m.groups()
        if len(groups) == 4:
            size_in = int(groups[0]) * (1024 if groups[1] else 1)
            size_out = int(groups[2]) * (1024 if groups[3] else 1)
        else:
            size_in, size_out = int(groups[0]), int(groups[1])
        p.extra["note.lengths"] = (
            "from the test's name (k = 1024); the file does not record them, and vLLM's own "
            "configs have misnamed one (an in10k test of 1024 input tokens): check the suite's "
            "serving-tests.json"
        )
        return size_in, size_out
    return None, None


def _length_rule(path: Path, cfg: Mapping[str, Any], p: _Point) -> str:
    value = cfg.get("random_range_ratio")
    if value is None:
        return (
            "vLLM's random dataset; the file does not record the range ratio: at its default "
            "(0 in current vLLM, 1 in benchmark_serving.py) every request asks for exactly "
            "the input and output lengths"
        )
    ratio = _number(value)
    if ratio is None or not 0.0 <= ratio <= 1.0:
        raise CardError(f"{path}: random_range_ratio is {_short(_text(value))}, not in 0..1; {DO}")
    p.extra["note.range_ratio"] = (
        f"random_range_ratio {ratio!r} kept here, not as the card's range_ratio: vLLM's rule "
        "is not [r x L, L] (see length_rule)"
    )
    if ratio == 0.0:
        return (
            "fixed: every request asks for exactly the input and output lengths (vLLM's random "
            "dataset, range ratio 0; the input count includes the tokenizer's special tokens)"
        )
    if ratio == 1.0:
        return (
            "fixed: range ratio 1 under benchmark_serving.py's rule, lengths uniform on "
            "[int(r x L), L] = [L, L] (current vLLM takes ratios below 1 only)"
        )
    return (
        f"integers uniform on [floor(L x (1 - {ratio})), ceil(L x (1 + {ratio}))] in current "
        "vLLM (vllm/benchmarks/datasets, input L less the tokenizer's special tokens); "
        f"benchmark_serving.py drew from [int({ratio} x L), L]; the file does not say which "
        "vLLM ran"
    )


def _rate_is_inf(value: Any) -> bool:
    return (isinstance(value, str) and value.strip().lower() in _INF) or value == math.inf
