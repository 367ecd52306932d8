"""InferenceX's figures: a published figure's unit, definition and computed_as from its name,
and the order a card lists them in.

Where the figures come from (read to learn, nothing copied):

- `packages/db/src/etl/benchmark-mapper.ts`, `packages/constants/src/metric-keys.ts`: `metrics`
  holds the numeric fields of the runner's per-result JSON unchanged, under its names.
- SemiAnalysisAI/InferenceX `utils/process_result.py` writes that per-result JSON
  (`agg_<result>.json`, gathered into the `results_bmk` artifact): `hw`, `conc`, `image`,
  `model`, `framework`, `precision`, `spec_decoding`, `disagg`, `is_multinode`,
  `recipe_fingerprint`, `isl`, `osl`, `tp`, `ep`, `dp_attention` (multi-node: `prefill_*`,
  `decode_*`, `num_prefill_gpu`, `num_decode_gpu`), and the figures:
  `tput_per_gpu` = the client's total_token_throughput (input + output tokens a second) / GPUs,
  `output_tput_per_gpu`, `input_tput_per_gpu`; every `<stat>_<m>_ms` of the client becomes
  `<stat>_<m>` in SECONDS (value / 1000), and every TPOT statistic gives
  `<stat>_intvty` = 1000 / `<stat>_tpot_ms` (tokens a second a user sees). The GPUs are
  tp x pp x pcp_size on one node; prefill + decode GPUs when disaggregated (output per GPU
  then over the decode GPUs, input per GPU over the prefill GPUs). Rows in that flat shape
  (figures at the top level, `hw`) read here too.
"""

from __future__ import annotations

import re
from typing import cast, get_args

from bench.errors import CardError, one_line
from bench.publishers.inferencex.values import _clip
from bench.publishers.model import ComputedAs, PublishedFigure

_TPUT = re.compile(r"(?P<kind>input_|output_)?tput_per_gpu(?:_(?P<unit>[a-z]+))?")
_LATENCY = re.compile(
    r"(?P<stat>mean|median|std|p\d{1,2}(?:\.\d{1,3})?)_(?P<metric>ttft|tpot|itl|e2el|intvty)"
    r"(?:_(?P<unit>[a-z]+))?"
)
_METRIC_WORDS = {
    "ttft": "time to first token of a request",
    "tpot": (
        "time per output token of a request after its first, (latency - TTFT) / (output tokens - 1)"
    ),
    "itl": "inter-token latency, the gap between successive streamed chunks of all requests",
    "e2el": "end-to-end latency of a request, from sending it to its last token",
}
_TPUT_WORDS = {
    "": (
        "input + output tokens a second per GPU: the client's total_token_throughput (all "
        "input and output tokens of the completed requests / the run's duration) / the GPUs "
        "(one node: tp x pp x pcp_size; disaggregated: prefill + decode GPUs)"
    ),
    "output_": (
        "output tokens a second per GPU: the client's output_throughput / the GPUs "
        "(disaggregated: / the decode GPUs)"
    ),
    "input_": (
        "input tokens a second per GPU: (total_token_throughput - output_throughput) / the "
        "GPUs (disaggregated: / the prefill GPUs)"
    ),
}
_LATENCY_UNITS = {None: "s", "ms": "ms"}
_AS_MS: frozenset[str] = frozenset({"mean", "median", "p99"})


def _figure(name: str, where: str) -> tuple[str, str, ComputedAs | None] | None:
    """(unit, definition, computed_as) of a published figure's name; None: not a figure."""
    m = _TPUT.fullmatch(name)
    if m:
        if m["unit"] is not None:
            raise _unknown_unit(name, where)
        kind = m["kind"] or ""
        computed: dict[str, ComputedAs | None] = {
            "": "input_output_tok_s_per_gpu",
            "output_": "output_tok_s_per_gpu",
            "input_": None,
        }
        return "tok/s/gpu", _TPUT_WORDS[kind], computed[kind]
    m = _LATENCY.fullmatch(name)
    if not m:
        return None
    stat, metric, unit = m["stat"], m["metric"], m["unit"]
    stat_words = {"mean": "mean", "median": "median", "std": "standard deviation"}.get(
        stat, f"{stat[1:]}th percentile"
    )
    if metric == "intvty":
        if unit is not None:
            raise _unknown_unit(name, where)
        return (
            "tok/s/user",
            f"interactivity, tokens a second one user sees: 1000 / the {stat_words} of TPOT "
            "in ms (process_result.py)",
            "interactivity" if stat == "median" else None,
        )
    if unit not in _LATENCY_UNITS:
        raise _unknown_unit(name, where)
    shown = _LATENCY_UNITS[unit]
    definition = f"{stat_words} over the run's completed requests of the {_METRIC_WORDS[metric]}"
    if unit is None:
        literal = f"{metric}_{stat}_s" if stat in _AS_MS else None
        return (
            shown,
            f"{definition}, in seconds (the client's {stat}_{metric}_ms / 1000)",
            _computed(literal),
        )
    literal = f"{metric}_{stat}_ms" if stat in _AS_MS else None
    return shown, f"{definition}, in ms", _computed(literal)


_FAMILIES = ("tput", "ttft", "tpot", "itl", "e2el", "intvty")


def _figure_order(f: PublishedFigure) -> tuple[int, int, float, str]:
    """Throughput first, then TTFT, TPOT, ITL, E2EL, interactivity; median, mean, the
    percentiles in order, std."""
    m = _LATENCY.fullmatch(f.name)
    if m is None:
        kinds = ("tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu")
        return (0, kinds.index(f.name) if f.name in kinds else 3, 0.0, f.name)
    stat = m["stat"]
    rank = {"median": (0, 0.0), "mean": (1, 0.0), "std": (3, 0.0)}.get(stat)
    if rank is None:
        rank = (2, float(stat[1:]))
    return (_FAMILIES.index(m["metric"]), rank[0], rank[1], f.name)


def _computed(literal: str | None) -> ComputedAs | None:
    known = get_args(ComputedAs)
    return cast(ComputedAs, literal) if literal in known else None


def _unknown_unit(name: str, where: str) -> CardError:
    return CardError(
        f"{where}: {one_line(_clip(name, 80))}: unknown unit (InferenceX's figures are "
        "tok/s/gpu, seconds, ms or tok/s/user); give the dump as released"
    )
