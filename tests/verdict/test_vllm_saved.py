"""`bench compare` on runs saved by `vllm bench serve --save-result` (bench.verdict.vllm_saved).

The records are built key for key as vLLM writes them: vllm-project/vllm,
vllm/benchmarks/serve.py (read at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1):
`main_async` sets date, endpoint_type, backend, label, model_id, tokenizer_id,
num_prompts, request_rate ("inf" for an unbounded rate), burstiness, max_concurrency and
merges `benchmark`'s result: duration, completed, failed, total_input_tokens,
total_output_tokens, request_throughput, request_goodput, output_throughput,
total_token_throughput, latencies, queue_times, max_output_tokens_per_s,
max_concurrent_requests, rtfx, then mean_/median_/std_/p99_ of ttft, tpot and itl in ms
(the default --percentile-metrics ttft,tpot,itl and --metric-percentiles 99); without
--save-detailed it drops input_lens, output_lens, start_times, ttfts, itls,
generated_texts and errors. It is written with `json.dump`, appended after a newline with
--append-result.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from bench.card.model import Card
from bench.cli import main
from bench.errors import UsageError
from bench.verdict import run_source, vllm_saved
from tests.support.synth import make_results


def vllm_record(
    concurrency: int,
    input_len: int,
    output_throughput: float,
    median_tpot_ms: float,
    *,
    completed: int = 200,
    failed: int = 0,
    request_rate: Any = "inf",
    backend: str = "openai-chat",
) -> dict[str, Any]:
    duration = completed * 4096 / output_throughput
    return {
        "date": "20261203-101500",
        "endpoint_type": backend,
        "backend": backend,
        "label": None,
        "model_id": "qwen",
        "tokenizer_id": "Qwen/Qwen3.5-397B-A17B-GPTQ-Int4",
        "num_prompts": completed + failed,
        "request_rate": request_rate,
        "burstiness": 1.0,
        "max_concurrency": concurrency,
        "duration": duration,
        "completed": completed,
        "failed": failed,
        "total_input_tokens": input_len * completed,
        "total_output_tokens": 4096 * completed,
        "request_throughput": completed / duration,
        "request_goodput": None,
        "output_throughput": output_throughput,
        "total_token_throughput": (input_len + 4096) * completed / duration,
        "latencies": [median_tpot_ms * 4.095 + 0.5] * (completed + failed),
        "queue_times": [0.001] * (completed + failed),
        "max_output_tokens_per_s": output_throughput * 1.1,
        "max_concurrent_requests": concurrency,
        "rtfx": 0.0,
        "mean_ttft_ms": 950.0, "median_ttft_ms": 900.0, "std_ttft_ms": 80.0, "p99_ttft_ms": 1300.0,
        "mean_tpot_ms": median_tpot_ms * 1.01, "median_tpot_ms": median_tpot_ms,
        "std_tpot_ms": 1.5, "p99_tpot_ms": median_tpot_ms * 1.2,
        "mean_itl_ms": median_tpot_ms * 2.0, "median_itl_ms": median_tpot_ms * 1.9,
        "std_itl_ms": 9.0, "p99_itl_ms": median_tpot_ms * 6.0,
    }  # fmt: skip


def _save(path: pathlib.Path, records: list[dict[str, Any]]) -> pathlib.Path:
    """As vLLM writes them: json.dump, a newline before each appended record."""
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    return path


def test_a_saved_file_is_one_run_its_records_the_trials(tmp_path: pathlib.Path) -> None:
    path = _save(tmp_path / "openai-chat-infqps-concurrency8-qwen-20261203-101500.json", [
        vllm_record(8, 8192, 600.0, 12.5),
        vllm_record(8, 8192, 620.0, 12.0),  # --append-result: a second trial of the cell
        vllm_record(64, 16384, 1500.0, 40.0),
    ])  # fmt: skip
    assert vllm_saved.recognises(path)
    run = run_source.load_run(path)
    assert run.contexts == ("8K", "16K") and run.concurrencies == (8, 64)
    cell = run.cells[("decode", "8K", 8)]
    assert cell.status == "valid"
    assert cell.trials["total_tok_s"] == (600.0, 620.0)
    assert cell.trials["tbt_s"] == pytest.approx((0.0125, 0.012))
    assert cell.trials["per_request_tok_s"] == pytest.approx((80.0, 1000 / 12.0))
    # TTFT means something else there (prefill included): never taken.
    assert "ttft_s" not in cell.trials
    assert run.settings == {"model": "qwen", "api": "chat"}
    assert run.trust == "unsigned" and "saved by vllm bench serve" in run.provenance


def test_results_json_and_other_json_are_not_taken_for_vllm(tmp_path: pathlib.Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(vllm_record(1, 8192, 70.0, 13.5)))
    assert not vllm_saved.recognises(tmp_path / "results.json")
    assert not vllm_saved.recognises(tmp_path)  # a run directory
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"backend": "openai", "completed": 3}))
    assert not vllm_saved.recognises(other)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"request_rate": 8.0}, "request_rate 8.0: requests arrived at a rate"),
        ({"max_concurrency": None}, "max_concurrency is None: not a closed loop"),
        ({"output_throughput": "fast"}, "output_throughput is 'fast', not a number"),
        ({"completed": -1}, "completed is -1, not a count"),
    ],
)
def test_a_record_that_does_not_line_up_is_refused_in_one_line(
    tmp_path: pathlib.Path, change: dict[str, Any], message: str
) -> None:
    path = _save(tmp_path / "run.json", [{**vllm_record(4, 8192, 300.0, 13.0), **change}])
    with pytest.raises(UsageError, match="record 1: " + message.replace("(", r"\(")):
        vllm_saved.load(path)


def test_failed_requests_make_the_cell_invalid_as_in_a_bench_run(tmp_path: pathlib.Path) -> None:
    path = _save(tmp_path / "run.json", [vllm_record(4, 8192, 300.0, 13.0, failed=3)])
    cell = vllm_saved.load(path).cells[("decode", "8K", 4)]
    assert cell.status == "invalid" and cell.trials == {}


def test_broken_files_are_one_line_of_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps(vllm_record(4, 8192, 300.0, 13.0))
    truncated = _save(tmp_path / "a.json", [])
    truncated.write_text(good[: len(good) // 2 + 400])
    with pytest.raises(UsageError, match="not JSON at character"):
        vllm_saved.load(truncated)
    listed = tmp_path / "b.json"
    listed.write_text(good + "\n[1, 2]")
    with pytest.raises(UsageError, match="record 2 is not a JSON object"):
        vllm_saved.load(listed)
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "results.json").write_text("{}")
    assert main(["compare", str(ours), str(truncated)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_compare_judges_a_bench_run_against_a_folder_of_vllm_runs(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = tmp_path / "ours"
    ours.mkdir()
    results = make_results(card, trials=3, noise=0.01, seed=1, contexts={"8K", "16K"})
    (ours / "results.json").write_text(results.model_dump_json())
    # The same server measured by vllm bench serve: one file per concurrency, three runs each
    # (--append-result), 8 % slower at 64 requests and above.
    theirs = tmp_path / "vllm"
    theirs.mkdir()
    other = make_results(card, trials=3, noise=0.01, seed=2, contexts={"8K", "16K"})
    by_file: dict[int, list[dict[str, Any]]] = {}
    for c in other.cells:
        if c.figures is None:
            continue
        slow = 1 / 1.08 if c.concurrency >= 64 else 1.0
        by_file.setdefault(c.concurrency, []).append(
            vllm_record(
                c.concurrency,
                c.prompt_tokens,
                c.figures.total_tok_s * slow,
                c.figures.tbt_s * 1000 / slow,
            )
        )
    for conc, records in by_file.items():
        _save(theirs / f"openai-chat-infqps-concurrency{conc}-qwen-20261203-101500.json", records)
    html = tmp_path / "c.html"
    code = main(["compare", str(ours), str(theirs), "--html", str(html)])
    out = capsys.readouterr().out
    assert code == 1, out  # a change found
    assert "- input vllm: saved by vllm bench serve (no bundle, no signature)" in out
    # 8K x 64 and 128, 16K x 64: 8 % down in throughput and per-request speed, up in TBT;
    # TTFT is not compared (vLLM's is not ours), the others are unchanged.
    assert "Total tok/s: 0 improved, 3 regressed, 12 equivalent, 0 not resolved of 15" in out
    assert (
        "Time between tokens: 0 improved, 3 regressed, 12 equivalent, 0 not resolved of 15" in out
    )
    assert "\nTTFT: " not in out
    # Every flagged cell is one vLLM measured 8 % slower (64 requests and above).
    flagged = {(k[1], k[2]) for k in _flagged(ours, theirs)}
    assert flagged and all(conc >= 64 for _, conc in flagged)
    page = html.read_text()
    assert 'alt="frontier"' in page
    assert "per server when a run records no GPU count" in page


def _flagged(ours: pathlib.Path, theirs: pathlib.Path) -> list[tuple[str, str, int]]:
    from bench.verdict.compare import Policy, compare

    comparison = compare(run_source.load_run(ours), run_source.load_run(theirs), Policy(0.05))
    return [d.key for d in comparison.flagged]
