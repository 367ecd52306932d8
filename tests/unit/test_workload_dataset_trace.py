"""Trace replay (bench.workload.trace, `[arrivals] kind = "trace"`): a mooncake JSONL
trace's timestamps, lengths and shared blocks become one point's plan and its prompts
(requests whose leading hash_ids are equal share that text), the same seed giving the same
bytes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.run.workload_text import WorkloadTexts
from bench.workload import trace
from bench.workload.schedule import longest_request, plan_point, trace_of
from bench.workload_spec import Workload, load_workload

LINE = (12.0, 1.25)  # tokens = 12 + 1.25 x words
BLOCK_WORDS = round(trace.BLOCK_TOKENS / LINE[1])  # 410 words a block


def _workload(tmp_path: Path, rows: list[dict[str, Any]], **arrivals: Any) -> Workload:
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in arrivals.items())
    (tmp_path / "w.toml").write_text(
        f'name = "tr"\nseed = 3\n[arrivals]\nkind = "trace"\npath = "t.jsonl"\n{extra}'
    )
    return load_workload(tmp_path / "w.toml")


def _row(ts: float, inp: int, out: int = 8, ids: list[int] | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"timestamp": ts, "input_length": inp, "output_length": out}
    if ids is not None:
        row["hash_ids"] = ids
    return row


def _words(text: str) -> list[str]:
    return text.split(" ")


def test_timestamps_lengths_and_groups_become_the_plan(tmp_path: Path) -> None:
    """at_s = (timestamp - the first's) / 1000 / speedup; equal timestamps allowed."""
    rows = [_row(5000, 600, 20, [7, 8]), _row(5000, 1100, 30, [7, 9, 10]),
            _row(7500, 40, 1), _row(9000, 513, 2, [11, 12])]  # fmt: skip
    w = _workload(tmp_path, rows, speedup=2.0)
    assert w.arrivals.points() == (2.0,)  # one point
    plan = plan_point(w, 0)
    assert [p.at_s for p in plan] == [0.0, 0.0, 1.25, 2.0]
    assert [(p.input_tokens, p.output_tokens, p.group) for p in plan] == [
        (600, 20, 7), (1100, 30, 7), (40, 1, -1), (513, 2, 11),
    ]  # fmt: skip
    assert [p.index for p in plan] == [0, 1, 2, 3]
    assert longest_request(w) == (1100, 30)


def test_max_requests_takes_the_first_ones_and_reads_no_further(tmp_path: Path) -> None:
    lines = [json.dumps(_row(i * 10, 100)) for i in range(5)] + ["not json", ""]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "w.toml").write_text(
        'name = "tr"\n[arrivals]\nkind = "trace"\npath = "t.jsonl"\nmax_requests = 3\n'
    )
    w = load_workload(tmp_path / "w.toml")
    assert [p.at_s for p in plan_point(w, 0)] == [0.0, 0.01, 0.02]
    assert len(trace_of(w)) == 3


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text(f"\n{json.dumps(_row(0, 9))}\n  \n{json.dumps(_row(1, 9))}")
    assert len(trace.read_trace(tmp_path / "t.jsonl", "trace t")) == 2


def test_leading_equal_blocks_are_the_same_text_and_the_rest_differs(tmp_path: Path) -> None:
    """Block k of a prompt is hash_ids[k]'s words (BLOCK_TOKENS tokens by the run's line):
    two requests share exactly their equal leading blocks; a last partial block is cut."""
    rows = [
        _row(0, 1500, ids=[0, 1, 2]),
        _row(1, 1400, ids=[0, 1, 3]),
        _row(2, 1100, ids=[0, 4, 5]),
    ]
    w = _workload(tmp_path, rows)
    texts = WorkloadTexts(w, 0, 0, LINE)
    a, b, c = (_words(texts.text(p)) for p in plan_point(w, 0))
    assert [len(x) for x in (a, b, c)] == [round((n - 12) / 1.25) for n in (1500, 1400, 1100)]
    assert a[: 2 * BLOCK_WORDS] == b[: 2 * BLOCK_WORDS]
    assert a[2 * BLOCK_WORDS :][:20] != b[2 * BLOCK_WORDS :][:20]
    assert a[:BLOCK_WORDS] == c[:BLOCK_WORDS] and a[BLOCK_WORDS:][:20] != c[BLOCK_WORDS:][:20]


def test_what_the_blocks_do_not_cover_is_the_requests_own(tmp_path: Path) -> None:
    """No hash_ids (or fewer than blocks): a tag and filler of its own after the blocks, so
    two requests of equal lengths and no ids are different texts."""
    rows = [_row(0, 1200, ids=[0]), _row(1, 1200, ids=[0]), _row(2, 300), _row(3, 300)]
    w = _workload(tmp_path, rows)
    texts = WorkloadTexts(w, 0, 0, LINE)
    a, b, c, d = (_words(texts.text(p)) for p in plan_point(w, 0))
    assert a[:BLOCK_WORDS] == b[:BLOCK_WORDS]
    assert a[BLOCK_WORDS] == "[" + a[BLOCK_WORDS][1:] and a[BLOCK_WORDS + 1] == "request"
    assert a[BLOCK_WORDS:] != b[BLOCK_WORDS:]
    assert c != d and c[1] == "request" and len(c) == round((300 - 12) / 1.25)


def test_identical_ids_and_lengths_are_the_identical_prompt(tmp_path: Path) -> None:
    """What the trace says: the same blocks, the same prompt (a full prefix-cache hit)."""
    w = _workload(tmp_path, [_row(0, 1024, ids=[4, 5]), _row(9, 1024, ids=[4, 5])])
    texts = WorkloadTexts(w, 0, 0, LINE)
    first, second = (texts.text(p) for p in plan_point(w, 0))
    assert first == second


def test_the_same_seed_gives_the_same_bytes_and_a_trial_its_own(tmp_path: Path) -> None:
    w = _workload(tmp_path, [_row(0, 1200, ids=[0, 1, 2]), _row(5, 700)])

    def texts(workload: Workload, trial: int = 0) -> list[str]:
        t = WorkloadTexts(workload, 0, trial, LINE)
        return [t.text(p) for p in plan_point(workload, 0, trial)]

    assert texts(w) == texts(load_workload(tmp_path / "w.toml"))
    assert texts(w.model_copy(update={"seed": 4})) != texts(w)
    assert texts(w, trial=1) != texts(w)  # a trial's blocks are its own: no cache across


def test_warm_ups_are_the_first_lengths_with_texts_of_their_own(tmp_path: Path) -> None:
    w = _workload(tmp_path, [_row(i * 100, 600 + i, ids=[0, 1]) for i in range(4)], warmups=2)
    warm, plan = plan_point(w, 0, warmup=True), plan_point(w, 0)
    assert [(p.at_s, p.input_tokens) for p in warm] == [(0.0, 600), (0.0, 601)]
    texts = WorkloadTexts(w, 0, 0, LINE)
    assert texts.text(warm[0], "warmup") != texts.text(plan[0])
    assert _words(texts.text(warm[0], "warmup"))[1] == "request"  # no shared block


def test_a_trace_takes_no_rates_prefix_prompts_or_lengths() -> None:
    trace_arrivals = {"kind": "trace", "path": "t.jsonl"}
    bad: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        ({"kind": "trace"}, {}, "need path"),
        ({**trace_arrivals, "rates": [1.0]}, {}, "arrivals are its timestamps"),
        ({**trace_arrivals, "requests": 5}, {}, "arrivals are its timestamps"),
        ({**trace_arrivals, "process": "constant"}, {}, "arrivals are its timestamps"),
        ({**trace_arrivals, "speedup": 0.0}, {}, "speedup"),
        ({**trace_arrivals, "speedup": math.nan}, {}, "speedup"),
        ({"rates": [1.0], "path": "t.jsonl"}, {}, "belong to trace arrivals"),
        ({"rates": [1.0], "max_requests": 3}, {}, "belong to trace arrivals"),
        (trace_arrivals, {"prefix": {"tokens": 4}}, "no \\[prefix\\]"),
        (trace_arrivals, {"lengths": {"output_tokens": 4}}, "takes only ignore_eos"),
        (trace_arrivals, {"prompts": {"source": "sharegpt", "path": "x"}}, "builds its own"),
    ]
    for arrivals, extra, named in bad:
        with pytest.raises(ValueError, match=named):
            Workload.model_validate({"name": "t", "arrivals": arrivals, **extra})


def test_the_shipped_trace_is_mooncakes_shape() -> None:
    """Timestamps from 0 in order, one id a 512-token block, id 0 first on every row."""
    w = load_workload("mooncake-sample")
    t = trace_of(w)
    assert w.arrivals.sha256 == t.sha256 and len(t) == 200
    assert t.at_ms[0] == 0 and list(t.at_ms) == sorted(t.at_ms)
    for i in range(len(t)):
        assert len(t.blocks(i)) == math.ceil(t.inputs[i] / trace.BLOCK_TOKENS)
        assert t.group(i) == 0 and t.inputs[i] + t.outputs[i] <= 4096
    shared = sum(len(t.blocks(i)) > 1 and t.blocks(i)[1] in {
        b for j in range(i) for b in t.blocks(j)} for i in range(len(t)))  # fmt: skip
    assert shared > 20  # later turns reuse earlier turns' blocks
