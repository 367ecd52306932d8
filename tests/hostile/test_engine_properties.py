"""Property-based tests (Hypothesis, fixed budget) of the engine parsers and the token
counter that take outside bytes: whatever a server sends as /metrics, /props,
/get_server_info, a /tokenize answer or a streamed chunk, the result is bounded and
well-formed, never an exception."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench.engines import llamacpp, sglang, trtllm
from bench.engines.base import EngineKind
from bench.engines.detect import family
from bench.stream import tokens
from tests.support.budget import fixed_budget

BUDGET = fixed_budget(200)
NAMES = [
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:max_total_num_tokens",
    "sglang:spec_accept_length",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:spec_decode_num_accepted_tokens_total",
    "vllm:num_requests_running",
]
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["nan", "+Inf", "-Inf", "1e999", "0x10", "", "1_0"]),
    st.text(max_size=12),
)
LINE = st.tuples(
    st.sampled_from(NAMES),
    st.one_of(st.just(""), st.text(max_size=40).map(lambda t: "{" + t + "}")),
    VALUES,
).map(lambda t: f"{t[0]}{t[1]} {t[2]}")
METRICS = st.lists(st.one_of(LINE, st.text(max_size=80)), max_size=40).map("\n".join)
JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=False),
        st.text(max_size=20),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.sampled_from(
                [
                    "default_generation_settings",
                    "n_ctx",
                    "total_slots",
                    "max_total_num_tokens",
                    "internal_states",
                    "context_length",
                    "kvCacheStats",
                    "maxNumBlocks",
                    "tokensPerBlock",
                    "numActiveRequests",
                    "tokens",
                    "piece",
                    "count",
                    "token_strs",
                ]
            ),
            inner,
            max_size=6,
        ),
    ),
    max_leaves=30,
)


def _sane(engine: EngineKind, text: str, probes: dict[str, Any]) -> None:
    snap = engine.parse(text, 0.0)
    assert all(math.isfinite(v) for v in snap.values.values())
    cap = engine.capacity(snap, probes)
    assert cap is None or (0 < cap.tokens < 1 << 60 and cap.source)
    got = engine.max_model_len(probes)
    assert got is None or 0 < got[0] < 1 << 40


@BUDGET
@given(text=METRICS, probe=JSON)
def test_prometheus_engines_never_raise(text: str, probe: Any) -> None:
    _sane(sglang.ENGINE, text, {"/get_server_info": probe, "/server_info": probe})
    _sane(llamacpp.ENGINE, text, {"/props": probe})
    assert family(text) in (None, "vllm", "sglang", "llamacpp", "trtllm")
    assert isinstance(sglang.looks_like({"/get_model_info": probe}), bool)
    assert isinstance(llamacpp.looks_like({"/props": probe}), bool)


@BUDGET
@given(doc=JSON)
def test_trtllm_iteration_stats_never_raise(doc: Any) -> None:
    text = json.dumps(doc)
    _sane(trtllm.ENGINE, text, {})
    assert isinstance(trtllm.looks_like(text), bool)
    _sane(trtllm.ENGINE, text[: len(text) // 2], {})  # cut short


@BUDGET
@given(answer=JSON, payload=st.binary(max_size=200))
def test_tokenize_answers_and_chunks_never_raise(answer: Any, payload: bytes) -> None:
    got = tokens.read_tokenize(answer)
    assert got is None or (
        got[0] >= 0 and (got[1] is None or all(isinstance(p, bytes) for p in got[1]))
    )
    assert isinstance(tokens.chunk_text(payload), str)


@BUDGET
@given(
    texts=st.lists(st.text(max_size=8), max_size=20),
    total=st.integers(0, 10_000),
    pieces=st.one_of(st.none(), st.lists(st.binary(max_size=4), max_size=30)),
)
def test_boundaries_never_decrease_and_end_at_the_total(
    texts: list[str], total: int, pieces: list[bytes] | None
) -> None:
    counts, exact = tokens.boundaries(texts, total, pieces)
    assert len(counts) == len(texts)
    assert all(a <= b for a, b in itertools.pairwise(counts))
    assert all(0 <= c <= max(total, len(pieces or [])) for c in counts)
    if texts and "".join(texts) and not exact:
        assert counts[-1] == total
    if exact and pieces and "".join(texts):
        assert counts[-1] == total
