"""The card of the one serving test a file holds (`read`), and its figures back (`export`).

What maps to what:
- model_id / model.name -> model; head_sha (or metadata commit / vllm_commit) ->
  engine.commit; metadata version / vllm_version -> engine.version; engine.name "vllm";
- tensor_parallel_size (tp_size, tp) -> engine.parallelism["tp"] and gpu_count (times
  pipeline / data parallel sizes when given); runners[0].type (gpu_type) -> gpu_model;
  dtype -> precision; server_command -> engine.launch_flags;
- the workload: `traffic`; the figures: `figures`.

Weights: the suite's serving-tests*.json launch most servers with `--load-format dummy`
(random weights); neither file records it. Random weights do the same matrix work per token
as real ones, so for a dense model a reproduction with real weights measures the same server
work when every request makes as many tokens: random weights almost never emit EOS, so their
outputs run to max_tokens; send ignore_eos and compare total_output_tokens. What random
weights change is not reproducible with real ones: MoE expert routing (balanced by chance)
and speculative decoding acceptance.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.errors import CardError, validation_message
from bench.publishers.model import PublishedEngine, PublisherCard
from bench.publishers.vllm_dashboard.choose import _chosen, _Found, _take
from bench.publishers.vllm_dashboard.facts import _Point
from bench.publishers.vllm_dashboard.figures import _figure
from bench.publishers.vllm_dashboard.file import _first_char, _items
from bench.publishers.vllm_dashboard.records import _from_records
from bench.publishers.vllm_dashboard.result import _from_result
from bench.publishers.vllm_dashboard.traffic import _rate_is_inf, _workload
from bench.publishers.vllm_dashboard.values import (
    DO,
    MAX_FLAGS,
    MAX_TEXT,
    WHAT,
    _first_text,
    _integer,
    _opt_text,
    _short,
    _text,
)

_NAME_TP = re.compile(r"_tp(\d{1,3})(?:_|$)")

_VERSION_KEYS = ("vllm_version", "version")


def read(path: Path, select: Mapping[str, str]) -> PublisherCard:
    """The card of the one serving test in PATH that SELECT picks (id, commit, any field)."""
    wanted = {str(k).strip(): str(v).strip() for k, v in select.items()}
    first = _first_char(path)
    found = _Found()
    for index, item in enumerate(_items(path, first), 1):
        _take(path, index, item, wanted, found)
    test = _chosen(path, wanted, found)
    if test.kind == "result":
        return _card(path, _from_result(path, test))
    return _card(path, _from_records(path, test))


def export(card: PublisherCard) -> dict[str, Any]:
    """The card's figures under vLLM's own field names and units, as a result file has them."""
    if card.publisher != "vllm-dashboard":
        raise CardError(f"{card.source}: a {card.publisher} card is not {WHAT}; export it as one")
    return {f.name: f.value for f in card.figures}


def _card(path: Path, p: _Point) -> PublisherCard:
    if not p.figures:
        raise CardError(f"{path}: test {_short(p.id)} has no figures: not {WHAT}; {DO}")
    workload = _workload(path, p)
    engine = _engine(path, p)
    gpus = math.prod(engine.parallelism.values()) if "tp" in engine.parallelism else None
    _notes(p, engine, gpus)
    try:
        return PublisherCard(
            publisher="vllm-dashboard",
            source=path.name,
            point_id=p.id,
            date=p.date,
            model=p.model,
            precision=_opt_text(p.cfg.get("dtype")),
            gpu_model=p.gpu_model,
            gpu_count=gpus,
            engine=engine,
            workload=workload,
            figures=tuple(_figure(name, value) for name, value in p.figures.items()),
            missing=tuple(dict.fromkeys(p.missing)),
            not_reproducible=tuple(dict.fromkeys(p.not_reproducible)),
            extra=p.extra,
        )
    except ValidationError as exc:
        raise CardError(f"{path}: {validation_message(exc)}: not {WHAT}; {DO}") from None


def _engine(path: Path, p: _Point) -> PublishedEngine:
    parallelism: dict[str, int] = {}
    for short, names in (
        ("tp", ("tensor_parallel_size", "tp_size", "tp")),
        ("pp", ("pipeline_parallel_size", "pp_size", "pp")),
        ("dp", ("data_parallel_size", "dp_size", "dp")),
    ):
        size = _size(path, p.cfg, names)
        if size is not None:
            parallelism[short] = size
    try:
        return PublishedEngine(
            name=p.engine,
            version=_first_text(p.cfg, _VERSION_KEYS),
            commit=p.commit,
            launch_flags=_flags(p.cfg.get("server_command")),
            parallelism=parallelism,
        )
    except ValidationError as exc:
        raise CardError(f"{path}: {validation_message(exc)}: not {WHAT}; {DO}") from None


def _size(path: Path, cfg: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = cfg.get(name)
        if value is None or value == "":
            continue
        size = _integer(value)
        if size is None or not 1 <= size <= 100_000:
            raise CardError(f"{path}: {name} is {_short(_text(value))}, not a parallel size; {DO}")
        return size
    return None


def _flags(command: Any) -> tuple[str, ...]:
    if not isinstance(command, str) or not command.strip():
        return ()
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: split on white space
        words = command.split()
    return tuple(w[:MAX_TEXT] for w in words[:MAX_FLAGS])


def _notes(p: _Point, engine: PublishedEngine, gpus: int | None) -> None:
    """What a reproduction needs that the file does not give, and what it cannot redo."""
    if not engine.launch_flags:
        p.missing.append(
            "launch flags (the server command is not in the result; vLLM's suite keeps it in "
            "<test>.commands and serving-tests*.json)"
        )
    p.missing.append("image (the dashboard runs vllm-ci-postmerge-repo:<commit>, not recorded)")
    if p.commit is None:
        p.missing.append("the vLLM commit")
    if p.gpu_model is None:
        p.missing.append("GPU model")
    if p.cfg.get("dtype") is None:
        p.missing.append("precision (dtype)")
    if gpus is None:
        m = _NAME_TP.search(p.id[:300])
        said = f"; the test's name says tp{m.group(1)}" if m else ""
        p.missing.append(f"GPU count (no tensor parallel size published{said})")
    if p.cfg.get("load_format") == "dummy":
        p.not_reproducible.append(
            "what random (--load-format dummy) weights decide: MoE expert routing and "
            "speculative decoding acceptance differ with real weights"
        )
    if p.cfg.get("load_format") == "dummy" or p.id.startswith("serving_"):
        p.extra["note.weights"] = (
            "vLLM's serving tests run most servers with --load-format dummy (random weights; "
            "the file does not say). Per token the work is the same as with real weights for a "
            "dense model, so a reproduction with real weights measures the same server work "
            "when outputs run as long: send ignore_eos and compare total_output_tokens"
        )
    if p.cfg.get("max_concurrency") is not None and _rate_is_inf(p.cfg.get("request_rate")):
        p.extra["note.concurrency"] = (
            "inf with max_concurrency: every request queued at once, max_concurrency in "
            "flight: the traffic of that many closed-loop streams"
        )
