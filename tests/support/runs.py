"""A small run directory with results valid against bench.results."""

from __future__ import annotations

import json
from pathlib import Path

from bench.results import (
    CellFigures,
    CellResult,
    KvCapacity,
    Plan,
    PlannedCell,
    PlannedContext,
    PrefillSample,
    Results,
    RunSettings,
    ServerInfo,
)


def small_results(run_id: str = "run-20261202T1130Z-abc") -> Results:
    figures = CellFigures(
        total_tok_s=73.0,
        per_request_tok_s=73.9,
        ttft_s=0.471,
        tbt_s=0.0135,
        average_active=1.0,
        active_source="server_metrics",
        completed_requests=0,
        output_tokens=2191,
        measured_for_s=30.0,
    )
    return Results(
        bench_version="0.2.0.dev3+g81a476982",
        run_id=run_id,
        created_at="2026-12-02T11:30:00Z",
        state="complete",
        settings=RunSettings(
            url="http://127.0.0.1:8000",
            contexts=(8192,),
            concurrencies=(1, 2),
            duration_s=30.0,
            max_tokens=4096,
        ),
        server=ServerInfo(url="http://127.0.0.1:8000", model="qwen", max_model_len=262144),
        plan=Plan(
            contexts=(
                PlannedContext(
                    label="8K",
                    nominal_tokens=8192,
                    prompt_tokens=8192,
                    trimmed=False,
                    decode=True,
                    max_tokens=4096,
                ),
            ),
            cells=(
                PlannedCell(
                    context_label="8K",
                    prompt_tokens=8192,
                    concurrency=1,
                    kv_needed_tokens=12288,
                    run=True,
                ),
                PlannedCell(
                    context_label="8K",
                    prompt_tokens=8192,
                    concurrency=2,
                    kv_needed_tokens=24576,
                    run=False,
                    reason="needs 24576 KV tokens",
                ),
            ),
            kv=KvCapacity(tokens=20000, source="kv_budget", detail="--kv-budget 20000"),
            estimated_duration_s=40.0,
        ),
        prefill=(
            PrefillSample(
                context_label="8K",
                prompt_tokens=8192,
                status="valid",
                ttft_s=1.592,
                prefill_tok_s=5144.0,
            ),
        ),
        cells=(
            CellResult(
                context_label="8K",
                prompt_tokens=8192,
                concurrency=1,
                status="valid",
                figures=figures,
            ),
            CellResult(
                context_label="8K",
                prompt_tokens=8192,
                concurrency=2,
                status="over_capacity",
                reason="needs 24576 KV tokens",
            ),
        ),
    )


def write_run_dir(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "results.json").write_text(small_results().model_dump_json(indent=2))
    (root / "tables.md").write_text("| Context | 1 |\n|---|---|\n| 8K | 73.0 |\n")
    (root / "samples").mkdir()
    (root / "samples" / "requests.jsonl").write_text('{"cell": "8K x1", "tokens": 2191}\n')
    (root / "environment.json").write_text(json.dumps(SMALL_ENVIRONMENT) + "\n")
    return root


# What the orchestrator records for a GPU run: the image (id, labels, its self-test's package
# freeze) and the weights (revision, sha256 of every file).
SMALL_ENVIRONMENT = {
    "host": {"hostname": "gpu01"},
    "image": {
        "in_container": True,
        "digest": "sha256:" + "1" * 64,
        "labels": {"bench.version": "0.2.0.dev3+g81a476982", "bench.vllm.commit": "73a5831127a9"},
        "selftest": {"packages": {"torch": "2.9.0", "vllm": "0.30.1rc1.dev452+g73a583112"}},
    },
    "weights": {
        "model": "Qwen/Qwen3.5-397B-A17B-GPTQ-Int4",
        "revision": "0123456789abcdef0123456789abcdef01234567",
        "pinned": True,
        "files": {"config.json": "2" * 64, "model-00001-of-00002.safetensors": "3" * 64},
    },
}


CARD_CSV = Path(__file__).parent / "data" / "published_card_measurements.csv"
_CONTEXTS = {
    "8K": (8192, 8192, True),
    "16K": (16384, 16384, True),
    "32K": (32768, 32768, True),
    "64K": (65536, 65536, True),
    "128K": (131072, 131072, True),
    "251K": (262144, 257984, True),
    "256K": (262144, 262079, False),
}


def card_results(speed_factor: float = 1.0) -> Results:
    """The published card's "All measurements" as Results, measured `speed_factor`x fast."""
    import csv

    n = speed_factor
    rows = list(csv.DictReader(CARD_CSV.read_text().splitlines()))
    contexts = tuple(
        PlannedContext(
            label=label, nominal_tokens=nominal, prompt_tokens=prompt, trimmed=nominal != prompt,
            decode=decode, max_tokens=4096 if decode else 1,
        )
        for label, (nominal, prompt, decode) in _CONTEXTS.items()
    )  # fmt: skip
    prompt = {label: p for label, (_, p, _) in _CONTEXTS.items()}
    prefill = tuple(
        PrefillSample(
            context_label=r["context"], prompt_tokens=prompt[r["context"]], status="valid",
            ttft_s=float(r["ttft_ms"]) / 1000 / n, prefill_tok_s=float(r["total_tok_s"]) * n,
        )
        for r in rows
        if r["phase"] == "Prefill"
    )  # fmt: skip
    cells = []
    planned = []
    for r in rows:
        if r["phase"] != "Sustained decode":
            continue
        label, c = r["context"], int(r["concurrency"])
        run = r["status"] == "Valid"
        planned.append(
            PlannedCell(
                context_label=label, prompt_tokens=prompt[label], concurrency=c,
                kv_needed_tokens=c * (prompt[label] + 4096), run=run,
            )
        )  # fmt: skip
        if not run:
            cells.append(
                CellResult(
                    context_label=label, prompt_tokens=prompt[label], concurrency=c,
                    status="over_capacity",
                )
            )  # fmt: skip
            continue
        figures = CellFigures(
            total_tok_s=float(r["total_tok_s"]) * n,
            per_request_tok_s=float(r["per_request_tok_s"]) * n,
            ttft_s=float(r["ttft_ms"]) / 1000 / n,
            tbt_s=float(r["tbt_ms"]) / 1000 / n,
            average_active=float(r["average_active"]),
            active_source="server_metrics",
            completed_requests=int(r["completed"]),
            output_tokens=int(r["output_tokens"]),
            measured_for_s=float(r["measured_for_s"]) / n,
        )
        cells.append(
            CellResult(
                context_label=label, prompt_tokens=prompt[label], concurrency=c,
                status="valid", figures=figures,
            )
        )  # fmt: skip
    return Results(
        bench_version="0.2.0.dev3+g81a476982",
        run_id="card-73a5831127a9",
        created_at="2026-12-02T11:30:00Z",
        state="complete",
        settings=RunSettings(
            url="http://127.0.0.1:8000",
            contexts=(8192, 16384, 32768, 65536, 131072, 262144),
            prefill_only_contexts=(262144,),
            concurrencies=(1, 2, 4, 8, 16, 32, 64, 128),
            duration_s=30.0,
            max_tokens=4096,
        ),
        server=ServerInfo(
            url="http://127.0.0.1:8000",
            model="qwen",
            max_model_len=262144,
            version="0.30.1rc1.dev452+g73a583112",
            speed_factor=n,
        ),
        plan=Plan(
            contexts=contexts,
            cells=tuple(planned),
            kv=KvCapacity(tokens=1_120_000, source="kv_cache_size_tokens", detail="card"),
            estimated_duration_s=3600.0,
        ),
        prefill=prefill,
        cells=tuple(cells),
    )
